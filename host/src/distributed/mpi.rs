//! MPI as a [`Communicator`], through the `mpi` crate (feature `mpi`): processes started by
//! `mpirun`, one shard each.
//!
//! Every operation is MPI's non-blocking collective, waited on until a deadline: MPI has no
//! timeout of its own, and a peer that stops answering would otherwise hold the others
//! forever. After a timeout the communicator refuses further calls; MPI cannot cancel a
//! collective, so its buffers are left to MPI (leaked) and the process should end (
//! [`MpiCommunicator::abort`] ends every process of the job).

use std::cell::Cell;
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
}

impl MpiCommunicator {
    /// `world` with a timeout for each collective operation.
    pub fn new(world: SimpleCommunicator, timeout: Duration) -> Self {
        Self { world, timeout, broken: Cell::new(false) }
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
    fn counts(&self, len: usize) -> Result<Vec<i32>> {
        let len = i32::try_from(len)
            .map_err(|_| Error::invalid(format!("{len} bytes are too many for one MPI message")))?;
        let send = vec![len];
        let mut counts = vec![0i32; self.size()];
        let done = mpi::request::scope(|scope| {
            self.wait(
                self.world.immediate_all_gather_into(scope, &send[..], &mut counts[..]),
                "a count exchange",
            )
        });
        leak_on_error(done, (send, counts))
    }
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
        self.check_usable()?;
        let counts = self.counts(bytes.len())?;
        let displs = displacements(&counts)?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let send = bytes.to_vec();
        let mut all = vec![0u8; total];
        // The partition (MPI reads its counts until the end) outlives the request.
        let mut partition = PartitionMut::new(&mut all[..], counts.clone(), displs);
        let done = mpi::request::scope(|scope| {
            self.wait(
                self.world.immediate_all_gather_varcount_into(scope, &send[..], &mut partition),
                "an all-gather",
            )
        });
        if done.is_err() {
            std::mem::forget(partition);
        }
        let all = leak_on_error(done, (send, all))?;
        Ok(split(&all, &counts))
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
        self.check_usable()?;
        let counts = self.counts(bytes.len())?;
        let root_process = self.world.process_at_rank(root as i32);
        let send = bytes.to_vec();
        if self.rank() != root {
            let done = mpi::request::scope(|scope| {
                self.wait(root_process.immediate_gather_varcount_into(scope, &send[..]), "a gather")
            });
            leak_on_error(done, (send, Vec::new()))?;
            return Ok(None);
        }
        let displs = displacements(&counts)?;
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        let mut all = vec![0u8; total];
        let mut partition = PartitionMut::new(&mut all[..], counts.clone(), displs);
        let done = mpi::request::scope(|scope| {
            self.wait(
                root_process.immediate_gather_varcount_into_root(scope, &send[..], &mut partition),
                "a gather",
            )
        });
        if done.is_err() {
            std::mem::forget(partition);
        }
        let all = leak_on_error(done, (send, all))?;
        Ok(Some(split(&all, &counts)))
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
        let done = mpi::request::scope(|scope| {
            self.wait(root_process.immediate_broadcast_into(scope, &mut data[..]), "a broadcast")
        });
        leak_on_error(done, (Vec::new(), data))
    }
}
