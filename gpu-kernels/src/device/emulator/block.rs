//! One emulated block: its barrier, its warps' collectives, its shared memory and the
//! shadow state that checks how the shared memory is used.

extern crate std;

use std::format;
use std::string::String;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::vec::Vec;

use super::{LaunchConfig, wait_turn};

/// Unwinding payload of a thread that stops because another one failed (no panic message).
pub struct Abort;

pub struct BlockState {
    pub threads: u32,
    pub block_idx: (u32, u32),
    pub grid: (u32, u32),
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
    barrier: Mutex<BarrierState>,
    warps: Vec<Warp>,
    pub shared: SharedMemory,
    /// Counts every change of the block's waiting state (arrivals, departures, returns):
    /// a scheduler round that leaves it unchanged is a deadlock.
    progress: AtomicU64,
}

struct BarrierState {
    waiting: u32,
    generation: u64,
    returned: u32,
    /// OR of the predicates of the threads waiting at the current barrier.
    any: bool,
    /// The OR of each finished barrier, by generation parity: a thread reads its barrier's
    /// after the next one may already have started filling the other slot.
    results: [bool; 2],
}

impl BlockState {
    pub fn new(config: &LaunchConfig, block_idx: (u32, u32)) -> Self {
        let warp_count = config.block_threads.div_ceil(32);
        let warps = (0..warp_count)
            .map(|warp| {
                let lanes = (config.block_threads - warp * 32).min(32);
                Warp::new(if lanes == 32 { u32::MAX } else { (1 << lanes) - 1 })
            })
            .collect();
        Self {
            threads: config.block_threads,
            block_idx,
            grid: config.grid,
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            barrier: Mutex::new(BarrierState {
                waiting: 0,
                generation: 0,
                returned: 0,
                any: false,
                results: [false; 2],
            }),
            warps,
            shared: SharedMemory::new(config.shared_bytes),
            progress: AtomicU64::new(0),
        }
    }

    /// Records the first failure of the block; waiting threads stop when next resumed.
    pub fn record_failure(&self, message: String) {
        let mut failure = lock(&self.failure);
        if failure.is_none() {
            *failure = Some(message);
        }
        self.failed.store(true, Ordering::SeqCst);
    }

    pub fn progress(&self) -> u64 {
        self.progress.load(Ordering::SeqCst)
    }

    fn note_progress(&self) {
        self.progress.fetch_add(1, Ordering::SeqCst);
    }

    /// What every live thread waits for, when none can move.
    pub fn deadlock_report(&self) -> String {
        let barrier = lock(&self.barrier);
        let mut report = format!(
            "deadlock: no thread can move; {} of {} threads wait at a block barrier",
            barrier.waiting, self.threads
        );
        drop(barrier);
        for (index, warp) in self.warps.iter().enumerate() {
            let state = lock(&warp.state);
            for group in state.groups.iter().filter(|group| !group.complete) {
                report += &format!(
                    "; warp {index}: a collective with mask {:#010x} waits for lanes {:#010x} that never join",
                    group.mask,
                    group.mask & !group.arrived
                );
            }
        }
        report
    }

    /// Records a failure seen by the calling thread and stops it.
    pub fn fail(&self, message: String) -> ! {
        self.record_failure(message);
        abort()
    }

    pub fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    fn stop_if_failed(&self) {
        if self.failed.load(Ordering::SeqCst) {
            abort();
        }
    }

    /// `bar.sync` (`bar.red.or`): returns once every thread of the block has arrived, with
    /// whether any of them brought a true `predicate`.
    pub fn sync_threads(&self, thread: u32, predicate: bool) -> bool {
        self.stop_if_failed();
        let mut state = lock(&self.barrier);
        if state.returned > 0 {
            let returned = state.returned;
            drop(state);
            self.fail(format!(
                "thread {thread} waits at a block barrier after {returned} thread(s) of the block \
                 returned: every thread must reach every barrier (undefined on a GPU, often a hang)"
            ));
        }
        state.waiting += 1;
        state.any |= predicate;
        self.note_progress();
        let generation = state.generation;
        let slot = (generation % 2) as usize;
        if state.waiting == self.threads {
            state.results[slot] = state.any;
            state.any = false;
            state.waiting = 0;
            state.generation += 1;
            return state.results[slot];
        }
        drop(state);
        loop {
            // Never hold a lock across a switch: the other threads run on this host thread.
            wait_turn();
            self.stop_if_failed();
            let state = lock(&self.barrier);
            if state.generation != generation {
                self.note_progress();
                return state.results[slot];
            }
        }
    }

    /// Called when a thread's kernel function returns normally.
    pub fn thread_returned(&self, thread: u32) {
        let mut state = lock(&self.barrier);
        state.returned += 1;
        let waiting = state.waiting;
        drop(state);
        self.note_progress();
        if waiting > 0 {
            self.record_failure(format!(
                "thread {thread} returned while {waiting} thread(s) wait at a block barrier: every \
                 thread must reach every barrier (undefined on a GPU, often a hang)"
            ));
        }
        let warp = &self.warps[(thread / 32) as usize];
        if let Some(message) = warp.lane_returned(thread % 32) {
            self.record_failure(format!("thread {thread}: {message}"));
        }
    }

    pub fn warp(&self, thread: u32) -> &Warp {
        &self.warps[(thread / 32) as usize]
    }

    /// A warp collective: every lane of `mask` deposits `value`; each gets all of them.
    pub fn exchange(&self, thread: u32, mask: u32, value: u64) -> [u64; 32] {
        self.stop_if_failed();
        let warp = self.warp(thread);
        match warp.exchange(self, thread % 32, mask, value) {
            Ok(values) => values,
            Err(message) => self.fail(format!("thread {thread}: {message}")),
        }
    }
}

/// The lanes of one warp and the collectives in flight among them.
pub struct Warp {
    state: Mutex<WarpState>,
    /// Completed collectives so far: two shared accesses of one warp with no collective
    /// between them are unordered.
    pub epoch: AtomicU32,
}

struct WarpState {
    existing: u32,
    returned: u32,
    next_id: u64,
    groups: Vec<Group>,
}

struct Group {
    id: u64,
    mask: u32,
    arrived: u32,
    departed: u32,
    complete: bool,
    values: [u64; 32],
}

impl Warp {
    fn new(existing: u32) -> Self {
        Self {
            state: Mutex::new(WarpState { existing, returned: 0, next_id: 0, groups: Vec::new() }),
            epoch: AtomicU32::new(0),
        }
    }

    pub fn live_lanes(&self) -> u32 {
        let state = lock(&self.state);
        state.existing & !state.returned
    }

    fn exchange(&self, block: &BlockState, lane: u32, mask: u32, value: u64) -> Result<[u64; 32], String> {
        let bit = 1u32 << lane;
        let mut state = lock(&self.state);
        if mask & bit == 0 {
            return Err(format!(
                "lane {lane} calls a warp collective with mask {mask:#010x}, which omits it"
            ));
        }
        if mask & !state.existing != 0 {
            return Err(format!(
                "warp collective with mask {mask:#010x} names lanes that do not exist (this warp has lanes {:#010x})",
                state.existing
            ));
        }
        if mask & state.returned != 0 {
            return Err(format!(
                "warp collective with mask {mask:#010x} names lanes that already returned ({:#010x})",
                mask & state.returned
            ));
        }
        let position = state
            .groups
            .iter()
            .position(|group| group.mask == mask && !group.complete && group.arrived & bit == 0);
        let position = match position {
            Some(position) => position,
            None => {
                let id = state.next_id;
                state.next_id += 1;
                state.groups.push(Group {
                    id,
                    mask,
                    arrived: 0,
                    departed: 0,
                    complete: false,
                    values: [0; 32],
                });
                state.groups.len() - 1
            }
        };
        let group = &mut state.groups[position];
        let id = group.id;
        group.values[lane as usize] = value;
        group.arrived |= bit;
        if group.arrived == mask {
            group.complete = true;
            self.epoch.fetch_add(1, Ordering::SeqCst);
        }
        block.note_progress();
        loop {
            let position = state.groups.iter().position(|group| group.id == id).expect("group vanished");
            if state.groups[position].complete {
                let group = &mut state.groups[position];
                let values = group.values;
                group.departed |= bit;
                if group.departed == mask {
                    state.groups.remove(position);
                }
                return Ok(values);
            }
            // Never hold a lock across a switch: the other lanes run on this host thread.
            drop(state);
            wait_turn();
            block.stop_if_failed();
            state = lock(&self.state);
        }
    }

    /// Marks `lane` as returned; an error when a collective in flight still waits for it.
    fn lane_returned(&self, lane: u32) -> Option<String> {
        let bit = 1u32 << lane;
        let mut state = lock(&self.state);
        state.returned |= bit;
        let stuck = state
            .groups
            .iter()
            .find(|group| !group.complete && group.mask & bit != 0)
            .map(|group| group.mask);
        drop(state);
        stuck.map(|mask| {
            format!("lane {lane} returned while a warp collective with mask {mask:#010x} waits for it")
        })
    }
}

/// Dynamic shared memory and its shadow: one 64-bit word of bookkeeping per
/// [`SHADOW_GRAIN`] bytes.
pub struct SharedMemory {
    words: Vec<u128>,
    pub len: usize,
    shadow: Vec<AtomicU64>,
}

/// Bytes one shadow word watches: 2, the narrowest shared-memory store of any kernel (16-bit
/// keys), so that two threads storing the two halves of one 4-byte word, which a GPU keeps
/// apart, are not taken for a race.
const SHADOW_GRAIN: usize = 2;

/// Shadow word layout: who wrote the [`SHADOW_GRAIN`] bytes last, and when.
const SHADOW_WRITTEN: u64 = 1 << 63;
const SHADOW_ATOMIC: u64 = 1 << 62;
const SHADOW_THREAD_SHIFT: u32 = 48;
const SHADOW_BLOCK_EPOCH_SHIFT: u32 = 24;
const EPOCH_MASK: u64 = (1 << 24) - 1;

/// How the calling thread touches shared memory.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Atomic,
}

impl SharedMemory {
    fn new(len: usize) -> Self {
        let words = std::vec![0u128; len.div_ceil(16)];
        let shadow = (0..len.div_ceil(SHADOW_GRAIN)).map(|_| AtomicU64::new(0)).collect();
        Self { words, len, shadow }
    }

    pub fn base(&self) -> *mut u8 {
        self.words.as_ptr() as *mut u8
    }

    /// Checks one access of `bytes` bytes at `address` and records it in the shadow.
    /// `Err` says what a GPU would have done wrong.
    pub fn check(
        &self,
        block: &BlockState,
        address: usize,
        bytes: usize,
        access: Access,
        thread: u32,
        block_epoch: u32,
    ) -> Result<(), String> {
        let base = self.base() as usize;
        if address < base || address + bytes > base + self.len {
            return Err(format!(
                "shared-memory access of {bytes} bytes at offset {} is outside the {} bytes the launch asked for",
                address as isize - base as isize,
                self.len
            ));
        }
        let warp = block.warp(thread);
        let warp_epoch = warp.epoch.load(Ordering::SeqCst) as u64 & EPOCH_MASK;
        let block_epoch = block_epoch as u64 & EPOCH_MASK;
        let offset = address - base;
        for word in offset / SHADOW_GRAIN..(offset + bytes).div_ceil(SHADOW_GRAIN) {
            let shadow = self.shadow[word].load(Ordering::SeqCst);
            let written = shadow & SHADOW_WRITTEN != 0;
            if !written && access != Access::Write {
                return Err(format!(
                    "{} shared memory at byte {} that nothing wrote",
                    if access == Access::Read { "reads" } else { "updates atomically" },
                    word * SHADOW_GRAIN
                ));
            }
            if written {
                let writer = ((shadow >> SHADOW_THREAD_SHIFT) & 0x7ff) as u32;
                let writer_atomic = shadow & SHADOW_ATOMIC != 0;
                let same_interval = (shadow >> SHADOW_BLOCK_EPOCH_SHIFT) & EPOCH_MASK == block_epoch;
                let unordered =
                    same_interval && (writer / 32 != thread / 32 || shadow & EPOCH_MASK == warp_epoch);
                let conflict = match access {
                    Access::Atomic => unordered && writer != thread && !writer_atomic,
                    Access::Read | Access::Write => unordered && (writer != thread || writer_atomic),
                };
                if conflict && !(writer_atomic && access == Access::Write && writer == thread) {
                    let what = match access {
                        Access::Read => "reads",
                        Access::Write => "writes",
                        Access::Atomic => "updates atomically",
                    };
                    let how = if writer_atomic { "updated atomically" } else { "wrote" };
                    return Err(format!(
                        "race: {what} shared memory at byte {} that thread {writer} {how} since the \
                         last barrier (add a sync_threads or sync_warp between them)",
                        word * SHADOW_GRAIN
                    ));
                }
            }
            if access != Access::Read {
                let mut record = SHADOW_WRITTEN
                    | ((thread as u64) << SHADOW_THREAD_SHIFT)
                    | (block_epoch << SHADOW_BLOCK_EPOCH_SHIFT)
                    | warp_epoch;
                if access == Access::Atomic {
                    record |= SHADOW_ATOMIC;
                }
                self.shadow[word].store(record, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

/// Stops the calling emulated thread without a panic message (another thread failed).
fn abort() -> ! {
    std::panic::resume_unwind(std::boxed::Box::new(Abort))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
