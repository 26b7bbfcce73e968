//! Multiselect and quantiles of keys spread over several processes (or threads), each with
//! its own GPU or the emulator: DIBMS, the distributed iterative bucket multiselect of the
//! DIBMS paper, and its two baselines.
//!
//! Each process holds a shard of the keys and a [`Communicator`] to the others: the
//! `mpi` feature's `MpiCommunicator` (processes started by `mpirun`), or a
//! [`ThreadGroup`] of threads in one process (several handles on one machine, and the
//! tests). Every process calls the same operation of a [`Distributed`] with its own shard
//! and the same ranks or quantiles, and every process gets the whole answer.
//!
//! What crosses the network ([`DistributedAlgorithm`]):
//! - **DIBMS**: the sample (1024 keys in all), the label totals of each pass (at most
//!   8192 words) and, at the end, the keys of the labels that hold a wanted rank once each
//!   holds at most [`DistributedOptions::gather_max`] keys. The bytes grow with the
//!   number of ranks wanted, not with the number of keys.
//! - **DistributedBMS**: the same first pass, then every active label's keys go to rank 0.
//! - **Sort & choose**: every key goes to rank 0, which sorts them all.
//!
//! [`Traffic`] counts what each process sends. A process that fails (out of memory, a bad
//! argument) makes every process return the same [`Error::Distributed`]; a process that
//! stops answering makes the others return one after the communicator's timeout.
//!
//! ```
//! use gpu_select::distributed::{Communicator, Distributed, DistributedOptions, ThreadGroup};
//! use gpu_select::{Gpu, QuantileOptions};
//! use std::time::Duration;
//!
//! // Three "processes" as threads, each with its own emulator and a third of the keys.
//! let group = ThreadGroup::new(3, Duration::from_secs(60));
//! let medians = std::thread::scope(|scope| {
//!     let runs: Vec<_> = group
//!         .into_iter()
//!         .map(|comm| {
//!             scope.spawn(move || {
//!                 let gpu = Gpu::emulator();
//!                 let shard: Vec<u32> = (0..999u32).filter(|k| k % 3 == comm.rank() as u32).collect();
//!                 let shard = gpu.upload(&shard)?;
//!                 let group = Distributed::new(&gpu, &comm, DistributedOptions::default());
//!                 group.quantiles(&shard, &[0.5], &QuantileOptions::default())
//!             })
//!         })
//!         .collect();
//!     runs.into_iter().map(|run| run.join().unwrap()).collect::<Vec<_>>()
//! });
//! for answer in medians {
//!     let answer = answer?;
//!     assert_eq!(answer.values, [499.0]); // the median of 0..999, on every process
//!     assert!(answer.traffic.bytes_sent < 100_000);
//! }
//! # Ok::<(), gpu_select::Error>(())
//! ```

#[cfg(feature = "mpi")]
mod mpi;
mod shared;
mod threads;

use std::time::Duration;

#[cfg(feature = "mpi")]
pub use self::mpi::{MPI_MESSAGE_LIMIT, MpiCommunicator};
pub use threads::{ThreadCommunicator, ThreadGroup};

use crate::SelectKey;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::options::QuantileOptions;
use crate::quantile::{quantile_ranks, quantile_values};
use crate::results::Selection;
use crate::view::DeviceSlice;
use shared::Shared;

/// The collective operations a distributed multiselect needs among a fixed group of
/// processes, ranked `0..size()`. Every process of the group must call the same operations
/// in the same order.
///
/// Only [`all_gather`](Communicator::all_gather) must be written; the others have
/// correct defaults built on it (which send more than needed: a transport with its own
/// reductions, gathers and broadcasts, as MPI has, should use them). A transport that can
/// wait forever should give up after a timeout with [`Error::Distributed`] (`failed_rank:
/// None`).
pub trait Communicator {
    /// This process's rank, in `0..size()`.
    fn rank(&self) -> usize;
    /// Processes in the group.
    fn size(&self) -> usize;
    /// Every process's `bytes`, indexed by rank, on every process.
    fn all_gather(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Element-wise wrapping sums of every process's `words` (of one length), on every
    /// process.
    fn all_reduce_sum(&self, words: &mut [u64]) -> Result<()> {
        reduce_by_gathering(self, words, u64::wrapping_add)
    }

    /// Element-wise maxima of every process's `words` (of one length), on every process.
    fn all_reduce_max(&self, words: &mut [u64]) -> Result<()> {
        reduce_by_gathering(self, words, u64::max)
    }

    /// Every process's `bytes`, indexed by rank, at process `root`; `None` elsewhere.
    fn gather(&self, bytes: &[u8], root: usize) -> Result<Option<Vec<Vec<u8>>>> {
        let all = self.all_gather(bytes)?;
        Ok((self.rank() == root).then_some(all))
    }

    /// Process `root`'s `bytes` on every process (the others' `bytes` are ignored).
    fn broadcast(&self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        let mut all = self.all_gather(if self.rank() == root { &bytes } else { &[] })?;
        Ok(std::mem::take(&mut all[root]))
    }
}

/// A reduction built on [`Communicator::all_gather`].
fn reduce_by_gathering<C: Communicator + ?Sized>(
    comm: &C,
    words: &mut [u64],
    op: fn(u64, u64) -> u64,
) -> Result<()> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let all = comm.all_gather(&bytes)?;
    words.fill(0);
    for (rank, part) in all.iter().enumerate() {
        if part.len() != bytes.len() {
            return Err(Error::Distributed {
                failed_rank: Some(rank),
                message: format!("sent {} bytes to a reduction of {} words", part.len(), words.len()),
            });
        }
        for (word, chunk) in words.iter_mut().zip(part.chunks_exact(8)) {
            let value = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            *word = if rank == 0 { value } else { op(*word, value) };
        }
    }
    Ok(())
}

/// Which algorithm a [`Distributed`] multiselect runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DistributedAlgorithm {
    /// DIBMS: bucket multiselect on every shard, sharing only the sample, the label totals
    /// of each pass and, last, the few keys of the labels that hold a wanted rank.
    #[default]
    Dibms,
    /// The paper's DistributedBMS baseline: the first pass shared as in DIBMS, then the
    /// keys of every label that holds a wanted rank sent to rank 0, which answers.
    DistributedBms,
    /// The sort & choose baseline: every key sent to rank 0, which sorts them (on its GPU)
    /// and answers.
    SortAndChoose,
}

/// Options of a [`Distributed`] group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DistributedOptions {
    /// The algorithm.
    pub algorithm: DistributedAlgorithm,
    /// DIBMS gathers the keys of the labels that hold a wanted rank at rank 0 once each
    /// label holds at most this many keys (in all shards); until then it splits them again,
    /// which costs one exchange of label totals. Default 64.
    pub gather_max: u64,
}

impl Default for DistributedOptions {
    fn default() -> Self {
        Self { algorithm: DistributedAlgorithm::Dibms, gather_max: 64 }
    }
}

impl DistributedOptions {
    /// The default options with another algorithm.
    pub fn with_algorithm(algorithm: DistributedAlgorithm) -> Self {
        Self { algorithm, ..Self::default() }
    }
}

/// What one process sent in one distributed call: its own part of each collective
/// operation (the words of a reduction, its part of a gather, and as the root of a
/// broadcast the payload once), not what the transport adds to route them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Traffic {
    /// Payload bytes.
    pub bytes_sent: u64,
    /// Collective operations taken part in.
    pub collectives: u32,
}

/// The answer of a distributed multiselect, the same on every process.
#[derive(Clone, Debug)]
pub struct DistributedSelection<K> {
    /// The key of each rank asked for, in the order asked, with its rank;
    /// [`Selection::passes`] counts this process's reads of its shard.
    pub selections: Vec<Selection<K>>,
    /// What this process sent.
    pub traffic: Traffic,
}

/// The answer of distributed quantiles, the same on every process.
#[derive(Clone, Debug)]
pub struct DistributedQuantiles {
    /// The quantiles, in the order asked.
    pub values: Vec<f64>,
    /// What this process sent.
    pub traffic: Traffic,
}

/// One process's handle on a distributed multiselect: its GPU, its communicator and the
/// options. Every process of the communicator's group calls the same operations with its
/// own shard.
pub struct Distributed<'a> {
    gpu: &'a Gpu,
    comm: &'a dyn Communicator,
    options: DistributedOptions,
}

impl<'a> Distributed<'a> {
    /// A handle over `gpu` (this process's device, or the emulator) and `comm`.
    pub fn new(gpu: &'a Gpu, comm: &'a dyn Communicator, options: DistributedOptions) -> Self {
        Self { gpu, comm, options }
    }

    /// The keys of `ranks` (from 0, smallest first, in the total order of
    /// [`Key`](crate::Key)) of all the shards' keys together, on every process; ranks may
    /// repeat. Every process passes its own shard (any length, empty too) and the same
    /// ranks.
    ///
    /// Errors, on every process alike: [`Error::EmptyInput`] when every shard is empty;
    /// [`Error::KOutOfRange`] for a rank ≥ the number of keys; [`Error::Distributed`]
    /// naming the process that failed and its error in words (a shard of another handle,
    /// out of memory), or with `failed_rank: None` when the processes asked for different
    /// ranks, or when one did not answer within the communicator's timeout.
    pub fn multiselect<'k, K: SelectKey>(
        &self,
        shard: impl Into<DeviceSlice<'k, K>>,
        ranks: &[usize],
    ) -> Result<DistributedSelection<K>> {
        let shard = shard.into();
        let wanted: Vec<u64> = ranks.iter().map(|&r| r as u64).collect();
        let request = Ok(fingerprint(wanted.iter().copied()));
        self.run(shard, request, |_, _| Ok(wanted)).map(|(outcome, traffic)| DistributedSelection {
            selections: outcome
                .ranks
                .iter()
                .zip(outcome.values)
                .map(|(&rank, value)| Selection { value, rank, passes: outcome.data_passes })
                .collect(),
            traffic,
        })
    }

    /// Quantiles `qs` of all the shards' keys together, as
    /// [`Gpu::quantiles`](crate::Gpu::quantiles) gives them of one array (numpy's
    /// methods and NaN policies; `options.algorithm` is not used: the
    /// [`DistributedOptions`] say which algorithm runs), on every process.
    ///
    /// Errors: as [`Distributed::multiselect`] (a `q` outside `[0, 1]` or NaN on one process
    /// fails them all).
    pub fn quantiles<'k, K: SelectKey>(
        &self,
        shard: impl Into<DeviceSlice<'k, K>>,
        qs: &[f64],
        options: &QuantileOptions,
    ) -> Result<DistributedQuantiles> {
        let request = qs.iter().map(|q| q.to_bits()).chain([options.method as u64, options.nan as u64]);
        let request = crate::quantile::check_quantiles(qs).map(|()| fingerprint(request));
        let mut points = None;
        let (outcome, traffic) = self.run(shard.into(), request, |n, nan_count| {
            let (found, ranks) = quantile_ranks(n, nan_count, qs, options);
            points = found;
            Ok(ranks)
        })?;
        Ok(DistributedQuantiles {
            values: quantile_values(points.as_deref(), &outcome.values, qs.len()),
            traffic,
        })
    }

    /// Runs the algorithm over `shard`, after checking that every process asks the same
    /// (`request`: a fingerprint of what it asks, or why it cannot).
    fn run<K: SelectKey>(
        &self,
        shard: DeviceSlice<'_, K>,
        request: Result<u64>,
        ranks_of: impl FnOnce(u64, u64) -> Result<Vec<u64>>,
    ) -> Result<(crate::engine::multiselect::MultiOutcome<K>, Traffic)> {
        let gather_max = match self.options.algorithm {
            DistributedAlgorithm::DistributedBms => u64::MAX,
            _ => self.options.gather_max.max(1),
        };
        let shared = Shared::new(self.comm, gather_max);
        let checked = shard.buffer().check_gpu(self.gpu, "the shard");
        shared.check_same_request(checked.and(request))?;
        let keys = shard.buffer();
        let outcome = match self.options.algorithm {
            DistributedAlgorithm::SortAndChoose => {
                self.gpu.run_shared_sort_and_choose(keys, &shared, ranks_of)
            }
            _ => self.gpu.run_shared_multiselect(keys, &shared, ranks_of),
        }?;
        Ok((outcome, shared.traffic()))
    }
}

/// Multiselect of keys spread over several handles of this process — several GPUs of one
/// machine, each holding a shard (or several streams of one GPU, or emulator instances) —
/// without MPI: one thread per shard, a [`ThreadGroup`] between them, and
/// [`Distributed::multiselect`] on each. Every shard's thread gets the same answer; each
/// is returned, with the traffic its thread sent.
///
/// Errors: as [`Distributed::multiselect`] (every thread fails alike; the first shard's
/// error is returned).
///
/// ```
/// use gpu_select::distributed::{DistributedOptions, multiselect_across};
/// use gpu_select::Gpu;
///
/// // Two handles (on a machine with two GPUs: Gpu::cuda(0)?, Gpu::cuda(1)?), a shard each.
/// let (a, b) = (Gpu::emulator(), Gpu::emulator());
/// let (left, right) = (a.upload(&[5u32, 1, 9])?, b.upload(&[7u32, 3])?);
/// let answers = multiselect_across(&[&left, &right], &[0, 2, 4], DistributedOptions::default())?;
/// let keys: Vec<u32> = answers[0].selections.iter().map(|s| s.value).collect();
/// assert_eq!(keys, [1, 5, 9]);
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub fn multiselect_across<K: SelectKey>(
    shards: &[&DeviceBuffer<K>],
    ranks: &[usize],
    options: DistributedOptions,
) -> Result<Vec<DistributedSelection<K>>> {
    across_with(shards, options, |group, shard| group.multiselect(shard, ranks))
}

/// Quantiles of keys spread over several handles of this process, as
/// [`multiselect_across`] (one thread per shard, no MPI) with [`Distributed::quantiles`].
pub fn quantiles_across<K: SelectKey>(
    shards: &[&DeviceBuffer<K>],
    qs: &[f64],
    quantile_options: &QuantileOptions,
    options: DistributedOptions,
) -> Result<Vec<DistributedQuantiles>> {
    across_with(shards, options, |group, shard| group.quantiles(shard, qs, quantile_options))
}

/// Runs `call` on one thread per shard, each with the shard's own handle and its place in
/// one [`ThreadGroup`].
fn across_with<K: SelectKey, R: Send>(
    shards: &[&DeviceBuffer<K>],
    options: DistributedOptions,
    call: impl Fn(&Distributed<'_>, &DeviceBuffer<K>) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    if shards.is_empty() {
        return Err(Error::invalid("no shards: at least one handle's keys"));
    }
    let group = ThreadGroup::new(shards.len(), DEFAULT_TIMEOUT);
    let call = &call;
    let answers: Vec<Result<R>> = std::thread::scope(|scope| {
        let runs: Vec<_> = group
            .into_iter()
            .zip(shards)
            .map(|(comm, &shard)| {
                scope.spawn(move || {
                    let gpu = shard.gpu().clone();
                    call(&Distributed::new(&gpu, &comm, options), shard)
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().expect("a shard's thread panicked")).collect()
    });
    answers.into_iter().collect()
}

/// A 64-bit FNV-1a hash of a request's words: processes that ask different things differ.
fn fingerprint(words: impl Iterator<Item = u64>) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for word in words {
        for byte in word.to_le_bytes() {
            hash = (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// The default timeout of the communicators here: a process that has not answered a
/// collective operation in this time is taken as lost.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
