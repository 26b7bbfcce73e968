//! WarpSelect (Johnson, Douze & Jégou, "Billion-scale similarity search with GPUs"): a warp
//! keeps the `k` smallest of a stream of (ordered bits, position) pairs in registers.
//!
//! State, all in registers, in the lane-stride layout of [`crate::warp::bitonic`]:
//!
//! * the **warp queue**: `32·Q` pairs sorted ascending, the best seen so far (`k ≤ 32·Q`);
//! * the **thread queues**: `T` registers per lane, `32·T` pairs in all, holding candidates
//!   not yet merged;
//! * the **threshold**: the warp queue's `k`-th pair, which every lane holds. A new pair is a
//!   candidate only when it sorts before the threshold; on most streams almost nothing is,
//!   so the common path is one comparison per pair.
//!
//! When the thread queues are full, the warp sorts them as one run of `32·T` (bitonic
//! network, [`sort_runs`]) and merges that run into the warp queue: compare the queue's
//! tail with the run reversed, keep the smaller of each pair (the result is bitonic), and
//! rebuild with a bitonic merge — the top-k merge of the bitonic top-k paper, in
//! registers and shuffles. The threshold then tightens to the new `k`-th pair.
//!
//! **One change from the paper.** Faiss appends a candidate to *its own lane's* thread
//! queue and merges when *any* lane's queue is full (a warp vote), so on a sparse stream a
//! merge runs when one lucky lane has `T` candidates while the other 31 hold almost none.
//! Here a step's candidates are *dealt* across the lanes (a ballot gives each its rank; lane
//! `j` pulls the candidate of rank `j − fill` by a shuffle), so the thread queues fill
//! evenly and a merge runs only when all `32·T` slots hold candidates: up to 32× fewer
//! merges on sparse streams, the same registers. The merge itself is the paper's.
//!
//! Equal keys are ordered by position (lower first), so the result is deterministic. The
//! caller encodes keys (complemented ordered bits for "largest") and positions; position
//! `u32::MAX` is reserved for padding.
//!
//! A producer kernel feeds values it computes straight into the queue, without writing them
//! to memory first: every lane calls [`WarpSelect::add`] once per step with its pair (or
//! `valid = false`), then [`WarpSelect::finish`].

use crate::device::{self, FULL_WARP};
use crate::key::OrderedBits;
use crate::thread::pair_after;
use crate::warp::bitonic::{
    WarpPairs, fold_sorted_runs, merge_stages, reduce_runs, shfl_idx_bits, shfl_xor_bits, sort_runs,
};

/// The largest `k` a warp queue takes: `32·Q` with `Q = 64`.
pub const MAX_QUEUE_K: u32 = 2048;

/// Registers per lane of the warp queue for `k`: `k` rounded up to a power of two ≥ 32,
/// over 32 (1 to 64).
pub const fn queue_registers(k: u32) -> u32 {
    let padded = k.next_power_of_two();
    if padded < 32 { 1 } else { padded / 32 }
}

/// Thread-queue registers per lane for a warp queue of `32·q`. The paper's table is
/// k ≤ 32 → 2, ≤ 128 → 3, ≤ 256 → 4, ≤ 1024 → 8; here sizes are powers of two (the
/// networks are power-of-two bitonic ones) and at least 4, so that a step of four loads per
/// lane ([`WarpSelect::add_batch`]) always fits after one merge. Candidates are dealt evenly
/// (module docs), so larger thread queues mean fewer merges, not later ones — but 16
/// beside queues of 16 and 32 registers measured 10–13 % slower than 8 on the H100 (run 30:
/// each merge sorts twice the run, and each deal selects among twice the registers). 64-bit
/// keys keep 4 beside a queue of 32 registers, which would not fit in 255 registers
/// otherwise.
pub const fn thread_registers(q: usize, key_bits: u32) -> usize {
    if q <= 8 || (q >= 32 && key_bits == 64) { 4 } else { 8 }
}

/// Position of the `n`-th set bit of `mask` (from 0, lowest first); 32 when `mask` has at
/// most `n` set bits. Five popcount steps (what `fns.b32` does).
#[inline(always)]
pub fn nth_set_bit(mask: u32, n: u32) -> u32 {
    if mask.count_ones() <= n {
        return 32;
    }
    let (mut rest, mut remaining, mut position) = (mask, n, 0);
    let mut width = 16;
    while width > 0 {
        let low = (rest & ((1u32 << width) - 1)).count_ones();
        if remaining >= low {
            remaining -= low;
            rest >>= width;
            position += width;
        }
        width /= 2;
    }
    position
}

/// A warp's queue of its `k` smallest pairs (module docs). All 32 lanes call every method
/// together.
///
/// # Example: the producer form
///
/// A kernel that computes its values feeds them straight into the queue, never writing
/// them to memory. Here one warp keeps the 4 points of the grid `0.0, 0.5, 1.0, …` nearest
/// to 10.3 (squared distances as ordered bits), run on the CPU emulator:
///
/// ```
/// use std::sync::Mutex;
/// use gpu_select_kernels::device::{self, emulator::{launch, LaunchConfig}};
/// use gpu_select_kernels::key::Key;
/// use gpu_select_kernels::warp::select::WarpSelect;
///
/// let nearest = Mutex::new([0u32; 4]);
/// let config = LaunchConfig { grid: (1, 1), block_threads: 32, shared_bytes: 0 };
/// launch(&config, &|| unsafe {
///     let lane = device::lane_id();
///     // A queue of 32 pairs (Q = 1) keeping the 4 best, 4 thread-queue registers.
///     let mut queue = WarpSelect::<u32, 1, 4>::new(4);
///     for step in 0..8 {
///         let point = step * 32 + lane;
///         let distance = (point as f32 * 0.5 - 10.3).powi(2);
///         queue.add(distance.to_ordered(), point, true);
///     }
///     let best = queue.finish(); // sorted; element j sits in lane j % 32, register j / 32
///     if lane < 4 {
///         nearest.lock().unwrap()[lane as usize] = best.positions[0];
///     }
/// })
/// .unwrap();
/// // Points 10.5, 10.0, 11.0 and 9.5.
/// assert_eq!(nearest.into_inner().unwrap(), [21, 20, 22, 19]);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct WarpSelect<B, const Q: usize, const T: usize> {
    /// The best `32·Q` pairs so far, sorted ascending (padding `(MAX, u32::MAX)` at the end).
    queue: WarpPairs<B, Q>,
    /// Candidates not yet merged: slots `0 .. fill` in lane-stride order, padding after.
    pending: WarpPairs<B, T>,
    /// Slots of `pending` in use (the same on every lane).
    fill: u32,
    /// The `k`-th pair of the queue: a pair is a candidate only when it sorts before it.
    threshold: (B, u32),
    k: u32,
}

impl<B: OrderedBits, const Q: usize, const T: usize> WarpSelect<B, Q, T> {
    /// Pairs the thread queues hold.
    const PENDING: u32 = 32 * T as u32;

    /// An empty queue keeping the `k` smallest pairs, `1 ≤ k ≤ 32·Q`.
    #[inline(always)]
    pub fn new(k: u32) -> Self {
        Self {
            queue: WarpPairs::padding(),
            pending: WarpPairs::padding(),
            fill: 0,
            threshold: (B::MAX, u32::MAX),
            k,
        }
    }

    /// Offers this lane's pair (ignored when `valid` is false); one pair per lane per call.
    ///
    /// # Safety
    /// All 32 lanes call it together; `position < u32::MAX`.
    #[inline(always)]
    pub unsafe fn add(&mut self, bits: B, position: u32, valid: bool) {
        unsafe { self.add_batch::<1>([bits], [position], [valid]) }
    }

    /// Offers `N` pairs per lane at once (`32·N ≤ 32·T`): one vote on whether the thread
    /// queues can take every candidate, so a step of loads has one merge site, however many
    /// pairs it offers.
    ///
    /// # Safety
    /// All 32 lanes call it together; positions `< u32::MAX`; `N ≤ T`.
    #[inline(always)]
    pub unsafe fn add_batch<const N: usize>(&mut self, bits: [B; N], positions: [u32; N], valid: [bool; N]) {
        let mut is_candidate = [false; N];
        for u in 0..N {
            is_candidate[u] =
                valid[u] && pair_after(self.threshold.0, self.threshold.1, bits[u], positions[u]);
        }
        // The common case on most streams, settled by one vote instead of N ballots.
        if !unsafe { device::any(FULL_WARP, is_candidate.contains(&true)) } {
            return;
        }
        let mut ballots = [0u32; N];
        let mut candidates = 0;
        for u in 0..N {
            ballots[u] = unsafe { device::ballot(FULL_WARP, is_candidate[u]) };
            candidates += ballots[u].count_ones();
        }
        if self.fill + candidates > Self::PENDING {
            unsafe { self.merge() };
            // The threshold tightened: some candidates may have dropped out.
            for u in 0..N {
                let lane_bit = ballots[u] >> device::lane_id() & 1 == 1;
                let still = lane_bit && pair_after(self.threshold.0, self.threshold.1, bits[u], positions[u]);
                ballots[u] = unsafe { device::ballot(FULL_WARP, still) };
            }
        }
        for u in 0..N {
            if ballots[u] != 0 {
                unsafe { self.deal(bits[u], positions[u], ballots[u]) };
            }
        }
    }

    /// Deals the candidates of `ballot` into the next free slots: lane `j` takes the
    /// candidate of rank `(j − fill) mod 32`, into register `(fill + rank) / 32`.
    #[inline(always)]
    unsafe fn deal(&mut self, bits: B, position: u32, ballot: u32) {
        let count = ballot.count_ones();
        let lane = device::lane_id();
        let rank = lane.wrapping_sub(self.fill) % 32;
        let source = nth_set_bit(ballot, rank) & 31;
        let dealt_bits = unsafe { shfl_idx_bits(bits, source) };
        let dealt_position = unsafe { device::shfl_idx_u32(FULL_WARP, position, source) };
        if rank < count {
            let slot = self.fill + rank;
            for r in 0..T {
                if slot / 32 == r as u32 {
                    self.pending.bits[r] = dealt_bits;
                    self.pending.positions[r] = dealt_position;
                }
            }
        }
        self.fill += count;
    }

    /// Sorts the thread queues and merges them into the warp queue; empties them.
    ///
    /// # Safety
    /// All 32 lanes call it together.
    #[inline(always)]
    unsafe fn merge(&mut self) {
        if self.fill == 0 {
            return;
        }
        unsafe {
            if T <= Q {
                sort_runs(&mut self.pending, 0, 32 * T);
                merge_shorter_run(&mut self.queue, &self.pending);
            } else {
                // More candidates than the queue holds: keep their best 32·Q first.
                sort_runs(&mut self.pending, 0, 32 * Q);
                let best = reduce_runs::<B, T, Q>(&self.pending);
                fold_sorted_runs(&mut self.queue, &best);
            }
        }
        self.pending = WarpPairs::padding();
        self.fill = 0;
        // The queue's k-th pair, unless a bound from [`Self::tighten`] is tighter still.
        let kth = unsafe { self.pair_of_rank(self.k - 1) };
        if pair_after(self.threshold.0, self.threshold.1, kth.0, kth.1) {
            self.threshold = kth;
        }
    }

    /// The pair a new pair must sort before to be a candidate (the queue's `k`-th pair, or
    /// a tighter bound given to [`Self::tighten`]); `(MAX, u32::MAX)` until `k` pairs came.
    /// The same on every lane.
    #[inline(always)]
    pub fn threshold(&self) -> (B, u32) {
        self.threshold
    }

    /// Lowers the threshold to `(bits, position)` when that sorts before it. For warps that
    /// share a stream (BlockSelect): when another queue's `k`-th pair is `p`, at least `k`
    /// pairs of the stream sort at or before `p`, so no pair after `p` can be among its
    /// `k` smallest. The pairs this queue then returns beyond the bound may be fewer than
    /// `k`; the merge of the warps' queues restores them.
    ///
    /// # Safety
    /// The same bound on all 32 lanes.
    #[inline(always)]
    pub unsafe fn tighten(&mut self, bits: B, position: u32) {
        if pair_after(self.threshold.0, self.threshold.1, bits, position) {
            self.threshold = (bits, position);
        }
    }

    /// The queue's pair of rank `rank` (< 32·Q), on every lane.
    #[inline(always)]
    unsafe fn pair_of_rank(&self, rank: u32) -> (B, u32) {
        let (mut bits, mut position) = (B::MAX, u32::MAX);
        for q in 0..Q {
            if rank / 32 == q as u32 {
                (bits, position) = (self.queue.bits[q], self.queue.positions[q]);
            }
        }
        let lane = rank % 32;
        unsafe { (shfl_idx_bits(bits, lane), device::shfl_idx_u32(FULL_WARP, position, lane)) }
    }

    /// Merges what the thread queues still hold and returns the warp queue: its first `k`
    /// pairs are the `k` smallest offered, ascending; the slots of a stream shorter than
    /// `k` hold padding `(MAX, u32::MAX)`.
    ///
    /// # Safety
    /// All 32 lanes call it together.
    #[inline(always)]
    pub unsafe fn finish(&mut self) -> WarpPairs<B, Q> {
        unsafe { self.merge() };
        self.queue
    }
}

/// Merges a sorted run of `32·T` pairs into a sorted run of `32·Q` (`T ≤ Q`), keeping the
/// `32·Q` smallest, sorted: the fold of [`fold_sorted_runs`] with the shorter run padded —
/// only the queue's last `T` registers can change, then one bitonic merge.
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
unsafe fn merge_shorter_run<B: OrderedBits, const Q: usize, const T: usize>(
    queue: &mut WarpPairs<B, Q>,
    run: &WarpPairs<B, T>,
) {
    // Element 32q + lane of the queue meets element 32Q − 1 − (32q + lane) of the run:
    // register Q − 1 − q of lane 31 − lane, which exists for q ≥ Q − T.
    for q in Q - T..Q {
        let partner_bits = unsafe { shfl_xor_bits(run.bits[Q - 1 - q], 31) };
        let partner_position = unsafe { device::shfl_xor_u32(FULL_WARP, run.positions[Q - 1 - q], 31) };
        if pair_after(queue.bits[q], queue.positions[q], partner_bits, partner_position) {
            queue.bits[q] = partner_bits;
            queue.positions[q] = partner_position;
        }
    }
    unsafe { merge_stages(queue, 0, 32 * Q, 16 * Q, 32 * Q) };
}

/// The smallest pair over the warp, on every lane (a butterfly reduction): `k = 1` needs
/// no queue.
///
/// # Safety
/// All 32 lanes call it together.
#[inline(always)]
pub unsafe fn reduce_min_pair<B: OrderedBits>(bits: B, position: u32) -> (B, u32) {
    let (mut best_bits, mut best_position) = (bits, position);
    let mut lane_mask = 16;
    while lane_mask > 0 {
        let other_bits = unsafe { shfl_xor_bits(best_bits, lane_mask) };
        let other_position = unsafe { device::shfl_xor_u32(FULL_WARP, best_position, lane_mask) };
        if pair_after(best_bits, best_position, other_bits, other_position) {
            (best_bits, best_position) = (other_bits, other_position);
        }
        lane_mask /= 2;
    }
    (best_bits, best_position)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::sync::Mutex;
    use std::vec::Vec;

    use super::*;
    use crate::device::emulator::{LaunchConfig, launch};

    #[test]
    fn nth_set_bit_finds_each_set_bit() {
        for mask in [0u32, 1, 0x8000_0000, 0xffff_ffff, 0b1011_0100, 0x1234_5678, 0xf0f0_0f0f] {
            let set: Vec<u32> = (0..32).filter(|bit| mask >> bit & 1 == 1).collect();
            for n in 0..33 {
                assert_eq!(nth_set_bit(mask, n), set.get(n as usize).copied().unwrap_or(32), "{mask:#x} {n}");
            }
        }
    }

    /// Streams `values` through one warp's queue (lane `l` offers element `32·step + l`)
    /// and returns the queue's first `k` positions.
    fn warp_select<const Q: usize, const T: usize>(values: &[u32], k: u32) -> Vec<u32> {
        let result = Mutex::new(std::vec![0u32; 32 * Q]);
        let config = LaunchConfig { grid: (1, 1), block_threads: 32, shared_bytes: 0 };
        launch(&config, &|| unsafe {
            let lane = device::lane_id() as usize;
            let mut queue = WarpSelect::<u32, Q, T>::new(k);
            for step in 0..values.len().div_ceil(32) {
                let index = step * 32 + lane;
                let valid = index < values.len();
                queue.add(if valid { values[index] } else { 0 }, index as u32, valid);
            }
            let best = queue.finish();
            let mut result = result.lock().unwrap();
            for q in 0..Q {
                result[q * 32 + lane] = best.positions[q];
            }
        })
        .unwrap();
        result.into_inner().unwrap()[..k as usize].to_vec()
    }

    fn expected(values: &[u32], k: u32) -> Vec<u32> {
        let mut order: Vec<u32> = (0..values.len() as u32).collect();
        order.sort_by_key(|&i| (values[i as usize], i));
        order.resize(k as usize, u32::MAX);
        order
    }

    #[test]
    fn keeps_the_k_smallest_in_order_for_every_queue_shape() {
        let mut state = 0x9e37_79b9u32;
        let mut random = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let shuffled: Vec<u32> = (0..3000).map(|_| random() % 500).collect();
        let descending: Vec<u32> = (0..2000).rev().collect();
        let equal = std::vec![7u32; 700];
        for values in [&shuffled, &descending, &equal] {
            for k in [1, 5, 32] {
                assert_eq!(warp_select::<1, 2>(values, k), expected(values, k), "Q=1 k={k}");
            }
            for k in [33, 100, 128] {
                assert_eq!(warp_select::<4, 4>(values, k), expected(values, k), "Q=4 k={k}");
            }
            assert_eq!(warp_select::<2, 4>(values, 64), expected(values, 64), "T > Q");
            assert_eq!(warp_select::<16, 8>(values, 500), expected(values, 500), "Q=16");
        }
        // Fewer pairs than k: padding after the real ones.
        assert_eq!(warp_select::<4, 4>(&[5, 3, 9], 100), expected(&[5, 3, 9], 100));
    }

    #[test]
    fn min_pair_reduction_breaks_ties_by_position() {
        let result = Mutex::new((0u32, 0u32));
        let config = LaunchConfig { grid: (1, 1), block_threads: 32, shared_bytes: 0 };
        launch(&config, &|| unsafe {
            let lane = device::lane_id();
            let bits = if lane % 3 == 1 { 4 } else { 10 + lane };
            let best = reduce_min_pair(bits, 100 - lane);
            if lane == 0 {
                *result.lock().unwrap() = best;
            }
        })
        .unwrap();
        assert_eq!(result.into_inner().unwrap(), (4, 100 - 31));
    }
}
