//! Per-thread top-k: the first baseline of the bitonic top-k paper.
//!
//! Every thread keeps the best `k` of the inputs it reads in a binary heap of its own in
//! shared memory, its worst at the root. It reads the inputs `g, g + G, g + 2G, …` (`g`: its
//! index in the grid, `G`: the grid's threads, so a warp's loads are coalesced), eight at a
//! time so that eight loads are in flight; an input better than the root replaces it and
//! sinks to its place (at most `log2 k` levels). At the end each thread writes its heap,
//! padding ([`NO_INDEX`]) where it saw fewer than `k` inputs, and the bitonic top-k's
//! reduction passes reduce the `G·k` candidates to the result (the host's side).
//!
//! **Shared memory.** Heap slot `i` of thread `t` is at `i·T + t` (`T`: the block's
//! threads, a multiple of 32): threads of a warp that touch different slots still hit 32
//! different banks, so the heaps never conflict however the warp's paths diverge. A slot
//! holds the key's rank bits and its *step*, the number of inputs the thread read before it
//! (its index is `g + step·G`), 4 bytes where an index would take 8. Each thread needs
//! `k · (key bytes + 4)`, so big `k` leave few threads per multiprocessor and few loads in
//! flight: that is the algorithm's weakness, which the paper measured, and why it stays a
//! baseline.
//!
//! **Ties.** A heap compares (rank bits, step); steps grow with the index, so among equal
//! keys a thread keeps the lowest indices, and the reduction passes break ties by index
//! too: the result is the same every run.

use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::{Key, OrderedBits};
use crate::params::{GlobalPtr, Order};
use crate::thread::pair_after;
pub use crate::topk::bitonic::NO_INDEX;

/// Most threads per block.
pub const MAX_HEAP_THREADS: u32 = 256;
/// The largest `k` it takes: one warp's heaps of 64-bit keys fill 192 KB.
pub const MAX_HEAP_K: u32 = 512;
/// Inputs each thread loads before it looks at any of them.
const LOADS_IN_FLIGHT: u64 = 8;
/// The step of an empty heap slot: after every real one.
const NO_STEP: u32 = u32::MAX;

/// Parameters of `topk_heap_<key>`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HeapParams<K> {
    /// The data.
    pub data: GlobalPtr<K>,
    /// Number of keys.
    pub len: u64,
    /// `G·k` keys: slot `i` of grid thread `g` at `i·G + g` (padding: the worst key that is
    /// not NaN).
    pub keys_out: GlobalPtr<K>,
    /// Their indices in the data ([`NO_INDEX`] for padding).
    pub indices_out: GlobalPtr<u64>,
    /// How many each thread keeps, 1 to [`MAX_HEAP_K`].
    pub k: u32,
    /// [`Order::to_raw`].
    pub order: u32,
}

/// The shared memory of a block: every thread's heap, slot-major.
#[derive(Clone, Copy, Debug)]
pub struct HeapLayout<B> {
    /// Rank bits of each slot.
    pub bits: SharedRegion<B>,
    /// Step of each slot (`u32::MAX` when empty).
    pub steps: SharedRegion<u32>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl<B> HeapLayout<B> {
    /// The layout for heaps of `k` in blocks of `threads`.
    pub const fn new(k: usize, threads: usize) -> Self {
        let (layout, bits) = SharedLayout::new().push::<B>(k * threads);
        let (layout, steps) = layout.push::<u32>(k * threads);
        Self { bits, steps, bytes: layout.bytes() }
    }
}

/// Shared bytes one thread's heap of `k` takes with keys of `key_bytes`.
pub const fn heap_bytes_per_thread(k: usize, key_bytes: usize) -> usize {
    k * (key_bytes + 4)
}

/// One thread's heap: `k` slots `slot·threads + thread` of the block's layout.
struct Heap<B> {
    bits: SharedSlice<B>,
    steps: SharedSlice<u32>,
    k: usize,
    threads: usize,
    thread: usize,
}

impl<B: OrderedBits> Heap<B> {
    #[inline(always)]
    fn at(&self, slot: usize) -> usize {
        slot * self.threads + self.thread
    }

    #[inline(always)]
    unsafe fn load(&self, slot: usize) -> (B, u32) {
        let at = self.at(slot);
        unsafe { (self.bits.load(at), self.steps.load(at)) }
    }

    #[inline(always)]
    unsafe fn store(&self, slot: usize, (bits, step): (B, u32)) {
        let at = self.at(slot);
        unsafe {
            self.bits.store(at, bits);
            self.steps.store(at, step);
        }
    }

    /// Replaces the root (the worst) with `entry`, which must be better than it, and sinks
    /// it below every worse child; returns the new root.
    #[inline(always)]
    unsafe fn replace_root(&self, entry: (B, u32)) -> (B, u32) {
        let mut hole = 0;
        loop {
            let left = 2 * hole + 1;
            if left >= self.k {
                break;
            }
            let mut child = (left, unsafe { self.load(left) });
            if left + 1 < self.k {
                let right = unsafe { self.load(left + 1) };
                if pair_after(right.0, right.1, child.1.0, child.1.1) {
                    child = (left + 1, right);
                }
            }
            if !pair_after(child.1.0, child.1.1, entry.0, entry.1) {
                break;
            }
            unsafe { self.store(hole, child.1) };
            hole = child.0;
        }
        unsafe { self.store(hole, entry) };
        if hole == 0 { entry } else { unsafe { self.load(0) } }
    }
}

/// The `topk_heap_<key>` kernel body (see the module docs).
///
/// # Safety
/// A block of a multiple of 32 threads, at most [`MAX_HEAP_THREADS`], with
/// [`HeapLayout::new`]`(k, threads).bytes` of shared memory; outputs of `G·k` elements;
/// fewer than `2^32 · G` inputs (steps are 32-bit).
pub unsafe fn select_per_thread<K: Key>(params: HeapParams<K>) {
    let largest = Order::from_raw(params.order) == Order::Largest;
    let k = params.k as usize;
    let threads = device::block_dim_x() as usize;
    let layout = HeapLayout::<K::Bits>::new(k, threads);
    let heap = unsafe {
        Heap {
            bits: layout.bits.bind(),
            steps: layout.steps.bind(),
            k,
            threads,
            thread: device::thread_idx_x() as usize,
        }
    };
    let empty = (K::Bits::MAX, NO_STEP);
    for slot in 0..k {
        unsafe { heap.store(slot, empty) };
    }
    let first = device::global_thread_idx();
    let stride = device::grid_dim_x() as u64 * threads as u64;
    let mut root = empty;
    let mut step = 0u32;
    let mut position = first;
    while position < params.len {
        let last = params.len - 1;
        let mut keys = [K::default(); LOADS_IN_FLIGHT as usize];
        for (r, key) in keys.iter_mut().enumerate() {
            *key = unsafe { params.data.read((position + r as u64 * stride).min(last)) };
        }
        for (r, &key) in keys.iter().enumerate() {
            if position + r as u64 * stride < params.len {
                let ordered = key.to_ordered();
                let entry = (if largest { ordered.complement() } else { ordered }, step + r as u32);
                if pair_after(root.0, root.1, entry.0, entry.1) {
                    root = unsafe { heap.replace_root(entry) };
                }
            }
        }
        position += LOADS_IN_FLIGHT * stride;
        step += LOADS_IN_FLIGHT as u32;
    }
    for slot in 0..k {
        let (_, step) = unsafe { heap.load(slot) };
        let out = slot as u64 * stride + first;
        let index = if step == NO_STEP { NO_INDEX } else { first + step as u64 * stride };
        // Padding gets the worst key that is not NaN, as the bitonic passes write it: the
        // next pass skips it by its index, but reads every slot (compute-sanitizer's
        // initcheck counted the unwritten padding keys, runs 152 and 155).
        let key = if index != NO_INDEX {
            unsafe { params.data.read(index) }
        } else if largest {
            K::LOWEST
        } else {
            K::HIGHEST
        };
        unsafe {
            params.keys_out.write(out, key);
            params.indices_out.write(out, index);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;
    use crate::device::emulator::{LaunchConfig, launch};

    /// Runs the kernel over `keys` (largest first) with heaps of `k` on `grid` blocks of
    /// `threads`: the (key, index) pairs each grid thread kept, sorted.
    fn heaps(keys: &[u32], k: u32, grid: u32, threads: u32) -> Vec<Vec<(u32, u64)>> {
        let slots = (grid * threads * k) as usize;
        // Filled with a key no slot should keep: padding must be overwritten too.
        let mut keys_out = std::vec![0xdead_beef_u32; slots];
        let mut indices_out = std::vec![7u64; slots];
        let params = HeapParams {
            data: GlobalPtr::from_address(keys.as_ptr() as u64),
            len: keys.len() as u64,
            keys_out: GlobalPtr::from_address(keys_out.as_mut_ptr() as u64),
            indices_out: GlobalPtr::from_address(indices_out.as_mut_ptr() as u64),
            k,
            order: Order::Largest.to_raw(),
        };
        let shared_bytes = HeapLayout::<u32>::new(k as usize, threads as usize).bytes;
        let config = LaunchConfig { grid: (grid, 1), block_threads: threads, shared_bytes };
        launch(&config, &|| unsafe { select_per_thread::<u32>(params) }).unwrap();
        let threads_in_grid = (grid * threads) as usize;
        for (at, &index) in indices_out.iter().enumerate() {
            if index == NO_INDEX {
                // The worst key for "largest" that is not NaN: u32's lowest.
                assert_eq!(keys_out[at], u32::LOWEST, "padding slot {at}");
            }
        }
        (0..threads_in_grid)
            .map(|g| {
                let mut kept: Vec<(u32, u64)> = (0..k as usize)
                    .map(|slot| slot * threads_in_grid + g)
                    .filter(|&at| indices_out[at] != NO_INDEX)
                    .map(|at| (keys_out[at], indices_out[at]))
                    .collect();
                kept.sort_unstable();
                kept
            })
            .collect()
    }

    #[test]
    fn each_thread_keeps_the_best_k_of_its_inputs_lowest_index_first_among_ties() {
        // Keys repeat (ties broken by index), and the ragged end leaves some threads with
        // fewer inputs than others; 2 blocks of 64 threads, heaps of 5.
        let keys: Vec<u32> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 22) % 300).collect();
        let (k, grid, threads) = (5usize, 2u32, 64u32);
        let stride = (grid * threads) as usize;
        let kept = heaps(&keys, k as u32, grid, threads);
        for (g, kept) in kept.iter().enumerate() {
            let mut seen: Vec<(u32, u64)> =
                (g..keys.len()).step_by(stride).map(|i| (keys[i], i as u64)).collect();
            // Largest first; among equal keys the lower index.
            seen.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            seen.truncate(k);
            seen.sort_unstable();
            assert_eq!(kept, &seen, "grid thread {g}");
        }
    }

    #[test]
    fn threads_with_fewer_than_k_inputs_pad_their_heap() {
        // 100 inputs over 128 threads: each thread reads at most one; k = 3.
        let keys: Vec<u32> = (0..100).collect();
        let kept = heaps(&keys, 3, 2, 64);
        for (g, kept) in kept.iter().enumerate() {
            let expected: Vec<(u32, u64)> =
                if g < 100 { std::vec![(g as u32, g as u64)] } else { Vec::new() };
            assert_eq!(kept, &expected, "grid thread {g}");
        }
    }
}
