//! A group of threads in one process as a [`Communicator`]: for several handles on one
//! machine (several GPUs, or several shards on one), and for tests without MPI.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::Communicator;
use crate::error::{Error, Result};

/// Makes the communicators of a group of threads (one per thread, each moved to its thread).
///
/// ```
/// use gpu_select::distributed::{Communicator, ThreadGroup};
/// use std::time::Duration;
///
/// let sums: Vec<u64> = std::thread::scope(|scope| {
///     let runs: Vec<_> = ThreadGroup::new(4, Duration::from_secs(10))
///         .into_iter()
///         .map(|comm| scope.spawn(move || {
///             let mut words = [comm.rank() as u64];
///             comm.all_reduce_sum(&mut words).map(|()| words[0])
///         }))
///         .collect();
///     runs.into_iter().map(|run| run.join().unwrap().unwrap()).collect()
/// });
/// assert_eq!(sums, [6, 6, 6, 6]);
/// ```
pub struct ThreadGroup;

impl ThreadGroup {
    /// `size` communicators of one group (rank `i` at index `i`); a thread that waits more
    /// than `timeout` for the others gives up with [`Error::Distributed`].
    #[allow(clippy::new_ret_no_self)]
    pub fn new(size: usize, timeout: Duration) -> Vec<ThreadCommunicator> {
        let hub = Arc::new(Hub {
            size,
            timeout,
            state: Mutex::new(State {
                round: 0,
                parts: vec![None; size],
                arrived: 0,
                results: Arc::new(Vec::new()),
                broken: None,
            }),
            changed: Condvar::new(),
        });
        (0..size).map(|rank| ThreadCommunicator { rank, hub: hub.clone() }).collect()
    }
}

/// One thread's place in a [`ThreadGroup`]. Dropping it before the others finish their
/// collective operations makes theirs fail at once (a lost peer).
pub struct ThreadCommunicator {
    rank: usize,
    hub: Arc<Hub>,
}

struct Hub {
    size: usize,
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    /// Completed all-gathers.
    round: u64,
    /// This round's parts so far.
    parts: Vec<Option<Vec<u8>>>,
    arrived: usize,
    /// The last completed round's parts.
    results: Arc<Vec<Vec<u8>>>,
    /// Why the group cannot go on (a member left or timed out).
    broken: Option<String>,
}

impl Communicator for ThreadCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.hub.size
    }

    fn all_gather(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(self.exchange(bytes.to_vec())?.to_vec())
    }

    /// Only the root copies the parts out.
    fn gather(&self, bytes: &[u8], root: usize) -> Result<Option<Vec<Vec<u8>>>> {
        let all = self.exchange(bytes.to_vec())?;
        Ok((self.rank == root).then(|| all.to_vec()))
    }

    fn broadcast(&self, bytes: Vec<u8>, root: usize) -> Result<Vec<u8>> {
        let all = self.exchange(if self.rank == root { bytes } else { Vec::new() })?;
        Ok(all[root].clone())
    }
}

impl ThreadCommunicator {
    /// Every rank's part, once all have given theirs.
    fn exchange(&self, bytes: Vec<u8>) -> Result<Arc<Vec<Vec<u8>>>> {
        let hub = &*self.hub;
        let broken = |why: &str| Error::Distributed { failed_rank: None, message: why.to_string() };
        let mut state = hub.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(why) = &state.broken {
            return Err(broken(why));
        }
        let round = state.round;
        state.parts[self.rank] = Some(bytes);
        state.arrived += 1;
        if state.arrived == hub.size {
            let parts = state.parts.iter_mut().map(|part| part.take().expect("every part")).collect();
            state.results = Arc::new(parts);
            state.arrived = 0;
            state.round += 1;
            hub.changed.notify_all();
            return Ok(state.results.clone());
        }
        let deadline = Instant::now() + hub.timeout;
        while state.round == round {
            if let Some(why) = &state.broken {
                return Err(broken(why));
            }
            let now = Instant::now();
            if now >= deadline {
                let missing: Vec<usize> = (0..hub.size).filter(|&r| state.parts[r].is_none()).collect();
                let why = format!(
                    "rank {} heard nothing from ranks {missing:?} within {:?} (a lost peer)",
                    self.rank, hub.timeout
                );
                state.broken = Some(why.clone());
                hub.changed.notify_all();
                return Err(broken(&why));
            }
            state = hub.changed.wait_timeout(state, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        Ok(state.results.clone())
    }
}

impl Drop for ThreadCommunicator {
    /// The others' later collective operations cannot complete without this rank: they
    /// fail at once instead of waiting out the timeout.
    fn drop(&mut self) {
        let mut state = self.hub.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.broken.is_none() {
            state.broken = Some(format!("rank {} left the group", self.rank));
            self.hub.changed.notify_all();
        }
    }
}
