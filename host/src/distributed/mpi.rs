//! MPI as a [`Communicator`], through the `mpi` crate (feature `mpi`): processes started by
//! `mpirun`, one shard each.
//!
//! Every operation is MPI's non-blocking collective, waited on until a deadline: MPI has no
//! timeout of its own, and a peer that stops answering would otherwise hold the others
//! forever. After a timeout the communicator refuses further calls; MPI cannot cancel a
//! collective, so its buffers are left to MPI (leaked) and the process should end (
//! [`MpiCommunicator::abort`] ends every process of the job).
//!
//! MPI counts a message in 32-bit integers: an exchange larger than that is split into as
//! many calls as it takes ([`MpiCommunicator::with_message_limit`]).

use std::cell::Cell;
use std::ops::Range;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::request::{Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, CommunicatorCollectives as _, Root as _};

use super::Communicator;
use crate::error::{Error, Result};

/// An MPI communicator (usually `mpi::initialize()`'s world) as a [`Communicator`].
///
/// ```no_run
/// use gpu_select::distributed::{Distributed, DistributedOptions, MpiCommunicator};
/// use gpu_select::{Gpu, QuantileOptions};
///
/// let universe = mpi::initialize().expect("MPI starts once");
/// let comm = MpiCommunicator::new(universe.world(), gpu_select::distributed::DEFAULT_TIMEOUT);
/// let gpu = Gpu::from_env()?;
/// let shard = gpu.upload(&vec![comm.rank() as f32; 1000])?; // this process's keys
/// let group = Distributed::new(&gpu, &comm, DistributedOptions::default());
/// let median = group.quantiles(&shard, &[0.5], &QuantileOptions::default())?;
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub struct MpiCommunicator {
    world: SimpleCommunicator,
    timeout: Duration,
    broken: Cell<bool>,
    message_limit: usize,
}

/// The most bytes one MPI call carries by default: what MPI's 32-bit counts (and the
/// receiving side's 32-bit displacements) allow.
pub const MPI_MESSAGE_LIMIT: usize = i32::MAX as usize;

impl MpiCommunicator {
    /// `world` with a timeout for each collective operation.
    pub fn new(world: SimpleCommunicator, timeout: Duration) -> Self {
        Self { world, timeout, broken: Cell::new(false), message_limit: MPI_MESSAGE_LIMIT }
    }

    /// The same communicator with each exchange split into MPI calls that carry at most
    /// `bytes` bytes, all processes' pieces of a call together (at most
    /// [`MPI_MESSAGE_LIMIT`], the default, whatever `bytes` says). Larger exchanges take
    /// more calls, each waited on within the timeout; nothing else changes. Smaller limits
    /// are for tests: `examples/dibms.rs check` runs every algorithm again with 4 KiB calls.
    ///
    /// ```no_run
    /// use gpu_select::distributed::{DEFAULT_TIMEOUT, MpiCommunicator};
    ///
    /// let universe = mpi::initialize().expect("MPI starts once");
    /// let comm = MpiCommunicator::new(universe.world(), DEFAULT_TIMEOUT).with_message_limit(1 << 20);
    /// ```
    pub fn with_message_limit(mut self, bytes: usize) -> Self {
        self.message_limit = bytes.clamp(1, MPI_MESSAGE_LIMIT);
        self
    }

    /// Bytes one process sends in one call of a gather: the processes' pieces of a call
    /// together stay within the limit.
    fn piece_bytes(&self) -> usize {
        (self.message_limit / self.size()).max(1)
    }

    /// This process's rank among the processes of its machine (those that share memory
    /// with it), from 0: which of the machine's GPUs it should take
    /// (`Gpu::from_env_device(local_rank % Gpu::device_count())`). A collective operation:
    /// every process calls it.
    pub fn local_rank(&self) -> usize {
        self.world.split_shared(self.world.rank()).rank() as usize
    }

    /// The MPI communicator.
    pub fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// Ends every process of the job (`MPI_Abort`) with `code`: what a process should do
    /// after a timeout, when a peer may still be waiting in a collective operation.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    /// Waits for `request` until the timeout. On a timeout the request is given up (its
    /// buffers must then never be freed: the caller leaks them).
    fn wait<'a, D: ?Sized, S: Scope<'a>>(&self, request: Request<'a, D, S>, what: &str) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        let mut request = request;
        loop {
            match request.test() {
                Ok(_) => return Ok(()),
                Err(pending) if Instant::now() >= deadline => {
                    // Safety: the request is forgotten, not freed; its buffers are leaked
                    // by the caller, so MPI may still write them.
                    let _ = unsafe { pending.into_raw() };
                    self.broken.set(true);
                    return Err(Error::Distributed {
                        failed_rank: None,
                        message: format!(
                            "rank {} heard nothing from the other ranks within {:?} during {what} (a lost peer)",
                            self.world.rank(),
                            self.timeout
                        ),
                    });
                }
                Err(pending) => {
                    request = pending;
                    std::thread::yield_now();
                }
            }
        }
    }

    fn check_usable(&self) -> Result<()> {
        if self.broken.get() {
            return Err(Error::Distributed {
                failed_rank: None,
                message: "an earlier collective operation timed out: the communicator cannot be used".into(),
            });
        }
        Ok(())
    }

    /// Every rank's byte count.
    fn lengths(&self, len: usize) -> Result<Vec<u64>> {
        let send = vec![len as u64];
        let mut lengths = vec![0u64; self.size()];
        let done = mpi::request::scope(|scope| {
            self.wait(
                self.world.immediate_all_gather_into(scope, &send[..], &mut lengths[..]),
                "a count exchange",
            )
        });
        leak_on_error(done, (send, lengths))
    }

    /// One call of a gather (to every process when `root` is `None`): this process's
    /// `piece`, every process's count of this call in `counts`; what the receiver got, in
    /// process order (empty where this process receives nothing).
    fn gather_piece(&self, piece: &[u8], counts: &[i32], root: Option<usize>) -> Result<Vec<u8>> {
        let send = mpi_buffer(piece);
        if root.is_some_and(|root| root != self.rank()) {
            let root_process = self.world.process_at_rank(root.unwrap_or_default() as i32);
            let done = mpi::request::scope(|scope| {
                self.wait(root_process.immediate_gather_varcount_into(scope, &send[..]), "a gather")
            });
            return leak_on_error(done, (send, Vec::new()));
        }
        let displs = displacements(counts)?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut all = mpi_buffer(&vec![0u8; total]);
        // The partition (MPI reads its counts until the end) outlives the request.
        let mut partition = PartitionMut::new(&mut all[..], counts.to_vec(), displs);
        let done = mpi::request::scope(|scope| match root {
            Some(root) => self.wait(
                self.world.process_at_rank(root as i32).immediate_gather_varcount_into_root(
                    scope,
                    &send[..],
                    &mut partition,
                ),
                "a gather",
            ),
            None => self.wait(
                self.world.immediate_all_gather_varcount_into(scope, &send[..], &mut partition),
                "an all-gather",
            ),
        });
        if done.is_err() {
            std::mem::forget(partition);
        }
        leak_on_error(done, (send, all))
    }

    /// A gather in as many calls as the limit takes: every process's bytes, in process
    /// order, at `root` (at every process when `root` is `None`).
    fn gather_in_pieces(&self, bytes: &[u8], root: Option<usize>) -> Result<Vec<Vec<u8>>> {
        self.check_usable()?;
        let lengths = self.lengths(bytes.len())?;
        let piece = self.piece_bytes();
        let mut parts: Vec<Vec<u8>> = Vec::with_capacity(lengths.len());
        if root.is_none_or(|root| root == self.rank()) {
            parts.extend(lengths.iter().map(|&len| Vec::with_capacity(len as usize)));
        }
        for round in 0..rounds(&lengths, piece) {
            // Below the limit, so the counts and their sum fit MPI's 32-bit integers.
            let counts: Vec<i32> =
                lengths.iter().map(|&len| piece_range(len as usize, piece, round).len() as i32).collect();
            let received =
                self.gather_piece(&bytes[piece_range(bytes.len(), piece, round)], &counts, root)?;
            if !parts.is_empty() {
                for (part, piece) in parts.iter_mut().zip(split(&received, &counts)) {
                    part.extend_from_slice(&piece);
                }
            }
        }
        Ok(parts)
    }
}

/// `bytes` in a buffer MPI may be given even when empty: an empty `Vec`'s address is 1,
/// which is Open MPI's `MPI_IN_PLACE`, and a process that sent nothing in a gather was taken
/// for one that asked for "in place" (`MPI_ERR_ARG`); a buffer with room has a real address.
fn mpi_buffer(bytes: &[u8]) -> Vec<u8> {
    let mut buffer = Vec::with_capacity(bytes.len().max(1));
    buffer.extend_from_slice(bytes);
    buffer
}

/// Bytes `round · piece …` of a payload of `len` (empty once the payload is through).
fn piece_range(len: usize, piece: usize, round: usize) -> Range<usize> {
    let start = round.saturating_mul(piece).min(len);
    start..start.saturating_add(piece).min(len)
}

/// Calls a gather of payloads of `lengths` takes in pieces of `piece`: at least one, so
/// that every process makes the same calls whatever the lengths.
fn rounds(lengths: &[u64], piece: usize) -> usize {
    lengths.iter().map(|&len| (len as usize).div_ceil(piece)).max().unwrap_or(0).max(1)
}

/// Leaks `buffers` when `done` failed (a request MPI may still write), else returns them.
fn leak_on_error<T>(done: Result<()>, buffers: (Vec<T>, Vec<T>)) -> Result<Vec<T>> {
    match done {
        Ok(()) => Ok(buffers.1),
        Err(error) => {
            std::mem::forget(buffers);
            Err(error)
        }
    }
}

/// Displacements of consecutive parts of `counts` bytes.
fn displacements(counts: &[i32]) -> Result<Vec<i32>> {
    let mut at = 0i64;
    let mut displs = Vec::with_capacity(counts.len());
    for &count in counts {
        displs
            .push(i32::try_from(at).map_err(|_| Error::invalid("more than 2 GiB gathered in one MPI call"))?);
        at += count as i64;
    }
    Ok(displs)
}

/// `all` split into parts of `counts` bytes.
fn split(all: &[u8], counts: &[i32]) -> Vec<Vec<u8>> {
    let mut at = 0usize;
    counts
        .iter()
        .map(|&count| {
            let part = all[at..at + count as usize].to_vec();
            at += count as usize;
            part
        })
        .collect()
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn all_gather(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.gather_in_pieces(bytes, None)
    }

    fn all_reduce_sum(&self, words: &mut [u64]) -> Result<()> {
        self.check_usable()?;
        let send = words.to_vec();
        let mut out = vec![0u64; words.len()];
        let done = mpi::request::scope(|scope| {
            let request =
                self.world.immediate_all_reduce_into(scope, &send[..], &mut out[..], SystemOperation::sum());
            self.wait(request, "a sum")
        });
        words.copy_from_slice(&leak_on_error(done, (send, out))?);
        Ok(())
    }

    fn all_reduce_max(&self, words: &mut [u64]) -> Result<()> {
        self.check_usable()?;
        let send = words.to_vec();
        let mut out = vec![0u64; words.len()];
        let done = mpi::request::scope(|scope| {
            let request =
                self.world.immediate_all_reduce_into(scope, &send[..], &mut out[..], SystemOperation::max());
            self.wait(request, "a maximum")
        });
        words.copy_from_slice(&leak_on_error(done, (send, out))?);
        Ok(())
    }

    fn gather(&self, bytes: &[u8], root: usize) -> Result<Option<Vec<Vec<u8>>>> {
        let parts = self.gather_in_pieces(bytes, Some(root))?;
        Ok((self.rank() == root).then_some(parts))
    }

    fn broadcast(&self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        self.check_usable()?;
        let root_process = self.world.process_at_rank(root as i32);
        let mut len = vec![bytes.len() as u64];
        let done = mpi::request::scope(|scope| {
            self.wait(root_process.immediate_broadcast_into(scope, &mut len[..]), "a broadcast")
        });
        let len = leak_on_error(done, (Vec::new(), len))?[0] as usize;
        let mut data = if self.rank() == root { bytes } else { vec![0u8; len] };
        // In calls of at most the limit (one sender: the whole limit is its), each into its
        // place in `data`.
        for round in 0..len.div_ceil(self.message_limit) {
            let range = piece_range(len, self.message_limit, round);
            let done = mpi::request::scope(|scope| {
                self.wait(root_process.immediate_broadcast_into(scope, &mut data[range]), "a broadcast")
            });
            if let Err(error) = done {
                // MPI may still write the piece: the buffer is left to it.
                std::mem::forget(data);
                return Err(error);
            }
        }
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_each_payload_once_in_the_same_number_of_calls() {
        let lengths = [0u64, 1, 4095, 4096, 4097, 10_000];
        let piece = 4096;
        let calls = rounds(&lengths, piece);
        assert_eq!(calls, 3); // 10 000 bytes in pieces of 4096
        for &len in &lengths {
            let len = len as usize;
            let ranges: Vec<Range<usize>> = (0..calls).map(|round| piece_range(len, piece, round)).collect();
            // Consecutive, from 0 to len, none longer than a piece.
            let mut at = 0;
            for range in &ranges {
                assert_eq!(range.start, at, "len {len}: {ranges:?}");
                assert!(range.len() <= piece);
                at = range.end;
            }
            assert_eq!(at, len, "len {len}: {ranges:?}");
        }
        // Nothing to send still makes one call, so that every process makes it.
        assert_eq!(rounds(&[0, 0], piece), 1);
        assert_eq!(piece_range(5, usize::MAX, 3), 5..5);
    }
}
