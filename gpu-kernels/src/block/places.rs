//! Block-wide selection of two places of the rank bits a block's threads hold in registers,
//! without sorting them: most significant digit first, eight bits a round, one shared
//! histogram per place (one for both while their digits agree so far), a two-warp scan
//! that finds each place's digit. SampleSelect's bracket wants two keys of a sample of
//! 8192: the block bitonic sort of all of them was 44 µs in one block (H200 run 280,
//! 91 dependent compare-exchange stages); this is four rounds of one count and one scan for
//! 32-bit rank bits (eight for 64-bit).

use crate::device::{self, SharedLayout, SharedRegion, SharedSlice};
use crate::key::OrderedBits;
use crate::warp;

/// Bits of the digit each round settles.
const DIGIT_BITS: u32 = 8;
/// Bins of one round's histogram.
const BINS: usize = 1 << DIGIT_BITS;
/// Bins each lane of a scanning warp sums.
const BINS_PER_LANE: usize = BINS / device::WARP_SIZE as usize;

/// Shared memory of [`select_two_places`].
#[derive(Clone, Copy, Debug)]
pub struct TwoPlacesLayout {
    /// Place 0's histogram (both places' while their settled bits agree).
    pub histogram_0: SharedRegion<u32>,
    /// Place 1's histogram.
    pub histogram_1: SharedRegion<u32>,
    /// Per place: the bits settled so far, then the place among the keys that share them.
    pub found: SharedRegion<u64>,
}

impl TwoPlacesLayout {
    /// The regions, appended to `layout`.
    pub const fn after(layout: SharedLayout) -> (SharedLayout, Self) {
        let (layout, histogram_0) = layout.push::<u32>(BINS);
        let (layout, histogram_1) = layout.push::<u32>(BINS);
        let (layout, found) = layout.push::<u64>(4);
        (layout, Self { histogram_0, histogram_1, found })
    }
}

/// The rank bits at `places[0]` and `places[1]` (from 0, in ascending order of bits) of the
/// `count` keys `read(0)`, …, `read(count − 1)`, returned to every thread: the values a sort of
/// them would store at those places. The keys stay where they are, in shared or global memory,
/// and are read once a round (`count / threads` a thread, eight in flight, four of 64-bit ones).
///
/// Every key lies in `within[0] ..= within[1]` (`[B::MIN, B::MAX]` when nothing is known):
/// the bits above the highest one where the two bounds differ are then every key's, and the
/// rounds start at the digit holding that bit. A SampleSelect level's candidates lie in one
/// bucket, a narrow range: the 46 000 candidates of a median of 2^28 uniform floats share
/// about their top 20 bits, so two rounds read them, not four. Bounds that are one value answer
/// without reading a key.
///
/// # Safety
/// *Block-wide*, at least two warps, every thread with the same `count`, `places` and
/// `within`, each place below `count`; every key within the bounds (a key outside them is
/// counted as if it shared their top bits); `read(i)` for `i < count` reads keys that no
/// thread writes during the call (shared ones written before a barrier); `layout` within
/// the launch's shared memory.
#[inline(always)]
pub unsafe fn select_two_places<B: OrderedBits>(
    read: impl Fn(usize) -> B,
    count: usize,
    places: [u64; 2],
    within: [B; 2],
    layout: &TwoPlacesLayout,
) -> [B; 2] {
    let (histogram_0, histogram_1, found) =
        unsafe { (layout.histogram_0.bind(), layout.histogram_1.bind(), layout.found.bind()) };
    let thread = device::thread_idx_x() as usize;
    let threads = device::block_dim_x() as usize;
    let warp = thread / device::WARP_SIZE as usize;
    let differ = within[0].to_u64() ^ within[1].to_u64();
    if differ == 0 {
        return within;
    }
    // The rounds start at the digit holding the highest bit where the bounds differ; every
    // key has the bounds' bits above it.
    let start = ((u64::BITS - 1 - differ.leading_zeros()) / DIGIT_BITS + 1) * DIGIT_BITS;
    let shared_bits = if start < u64::BITS { within[0].to_u64() >> start << start } else { 0 };
    // Registers only: every index below is a constant or a select on `warp` (an array
    // indexed by a thread's own value would go to local memory).
    let (mut prefix_0, mut prefix_1) = (shared_bits, shared_bits);
    let (mut place_0, mut place_1) = (places[0], places[1]);
    let mut shift = start;
    // The first round's keys all have the prefix: no test (and no shift by the width).
    let mut first = true;
    while shift > 0 {
        shift -= DIGIT_BITS;
        let one_histogram = prefix_0 == prefix_1;
        let mut bin = thread;
        while bin < BINS {
            unsafe {
                histogram_0.store(bin, 0);
                histogram_1.store(bin, 0);
            }
            bin += threads;
        }
        unsafe { device::sync_threads() };
        unsafe { count_digits(&read, count, prefix_0, shift, first, &histogram_0) };
        if !one_histogram {
            unsafe { count_digits(&read, count, prefix_1, shift, first, &histogram_1) };
        }
        unsafe { device::sync_threads() };
        if warp < 2 {
            // Warp `j` finds place `j`'s digit: the bin where the running count passes it.
            let (prefix, wanted) = if warp == 0 { (prefix_0, place_0) } else { (prefix_1, place_1) };
            let histogram = if one_histogram || warp == 0 { histogram_0 } else { histogram_1 };
            let lane_bins = device::lane_id() as usize * BINS_PER_LANE;
            let mut counts = [0u32; BINS_PER_LANE];
            for (i, count) in counts.iter_mut().enumerate() {
                *count = unsafe { histogram.load(lane_bins + i) };
            }
            let sum: u32 = counts.iter().sum();
            let inclusive = unsafe { warp::inclusive_scan_add_u32(sum) } as u64;
            let start = inclusive - sum as u64;
            if start <= wanted && wanted < inclusive {
                // The lane's bin where the count passes `wanted`, without a branch out of
                // the unrolled loop.
                let (mut before, mut digit, mut below) = (start, BINS_PER_LANE, start);
                for (i, &count) in counts.iter().enumerate() {
                    let passes = digit == BINS_PER_LANE && wanted < before + count as u64;
                    if passes {
                        digit = i;
                        below = before;
                    }
                    before += count as u64;
                }
                let settled = prefix | ((lane_bins + digit) as u64) << shift;
                unsafe {
                    found.store(2 * warp, settled);
                    found.store(2 * warp + 1, wanted - below);
                }
            }
        }
        unsafe { device::sync_threads() };
        unsafe {
            (prefix_0, place_0) = (found.load(0), found.load(1));
            (prefix_1, place_1) = (found.load(2), found.load(3));
        }
        first = false;
    }
    [B::from_u64(prefix_0), B::from_u64(prefix_1)]
}

/// Keys a thread loads before it counts any of them: 32 bytes of 32-bit keys, as many of
/// 64-bit ones (eight of those took 64-bit integer keys' sample kernel past its 64
/// registers), eight of 16-bit ones (each in a register of its own).
const fn loads_in_flight<B: OrderedBits>() -> usize {
    if B::BITS > 32 { MOST_LOADS_IN_FLIGHT / 2 } else { MOST_LOADS_IN_FLIGHT }
}

/// The most of [`loads_in_flight`] for any key.
const MOST_LOADS_IN_FLIGHT: usize = 8;

/// Adds to `histogram` the digit at `shift` of each of the thread's keys (`thread`,
/// `thread + threads`, … below `count`) whose bits above the digit are `prefix`'s (all of
/// them in the `first` round: no shift by the full width). A thread's run of one digit adds
/// with one atomic: the first rounds of float keys put most keys in a few bins.
///
/// # Safety
/// As [`select_two_places`]; `histogram` holds [`BINS`] counters, cleared.
#[inline(always)]
unsafe fn count_digits<B: OrderedBits>(
    read: &impl Fn(usize) -> B,
    count: usize,
    prefix: u64,
    shift: u32,
    first: bool,
    histogram: &SharedSlice<u32>,
) {
    let prefix = B::from_u64(prefix);
    let threads = device::block_dim_x() as usize;
    let (mut run_digit, mut run) = (0usize, 0u32);
    let mut start = device::thread_idx_x() as usize;
    while start < count {
        // All loads of the chunk issued before any is counted (keys in global memory); the
        // array's entries past `loads_in_flight` are never used, so never kept.
        let mut values = [B::MAX; MOST_LOADS_IN_FLIGHT];
        for (i, value) in values.iter_mut().enumerate() {
            let at = start + i * threads;
            if i < loads_in_flight::<B>() && at < count {
                *value = read(at);
            }
        }
        for (i, &value) in values.iter().enumerate() {
            let counted = i < loads_in_flight::<B>()
                && start + i * threads < count
                && (first || value.shr(shift + DIGIT_BITS) == prefix.shr(shift + DIGIT_BITS));
            if counted {
                let digit = (value.shr(shift).low_u32() as usize) & (BINS - 1);
                if digit != run_digit && run != 0 {
                    unsafe { histogram.atomic_add(run_digit, run) };
                    run = 0;
                }
                run_digit = digit;
                run += 1;
            }
        }
        start += loads_in_flight::<B>() * threads;
    }
    if run != 0 {
        unsafe { histogram.atomic_add(run_digit, run) };
    }
}

#[cfg(all(test, not(target_arch = "nvptx64")))]
mod tests {
    extern crate std;

    use std::sync::Mutex;
    use std::vec::Vec;

    use super::*;
    use crate::device::emulator;

    /// Runs the selection on a block of 64 threads over `values` in shared memory and checks
    /// both places against a sort, for every thread; no bounds known, then the values' own
    /// least and greatest as the bounds.
    fn check<B: OrderedBits + Ord + Send + Sync + core::fmt::Debug>(values: &[B], places: [u64; 2]) {
        let tight = [*values.iter().min().unwrap(), *values.iter().max().unwrap()];
        for within in [[B::MIN, B::MAX], tight] {
            check_from(values, places, within, false);
            check_from(values, places, within, true);
        }
    }

    /// As [`check`], the keys read from shared memory or straight from `values` (global
    /// memory, as the emulator has it).
    fn check_from<B: OrderedBits + Ord + Send + Sync + core::fmt::Debug>(
        values: &[B],
        places: [u64; 2],
        within: [B; 2],
        from_global: bool,
    ) {
        let mut sorted = values.to_vec();
        sorted.sort();
        let want = [sorted[places[0] as usize], sorted[places[1] as usize]];
        let got = run(values, places, within, from_global);
        assert_eq!(got, want, "places {places:?} within {within:?}");
    }

    /// The places the selection finds, the same in every thread of a block of 64.
    fn run<B: OrderedBits + Ord + Send + Sync + core::fmt::Debug>(
        values: &[B],
        places: [u64; 2],
        within: [B; 2],
        from_global: bool,
    ) -> [B; 2] {
        const THREADS: usize = 64;
        let (layout, keys) = SharedLayout::new().push::<B>(values.len());
        let (layout, regions) = TwoPlacesLayout::after(layout);
        let got = Mutex::new(Vec::new());
        let config = emulator::LaunchConfig {
            grid: (1, 1),
            block_threads: THREADS as u32,
            shared_bytes: layout.bytes(),
        };
        emulator::launch(&config, &|| {
            let keys = unsafe { keys.bind() };
            let mut at = device::thread_idx_x() as usize;
            while at < values.len() {
                unsafe { keys.store(at, values[at]) };
                at += THREADS;
            }
            unsafe { device::sync_threads() };
            let found = if from_global {
                unsafe { select_two_places(|i| values[i], values.len(), places, within, &regions) }
            } else {
                unsafe { select_two_places(|i| keys.load(i), values.len(), places, within, &regions) }
            };
            got.lock().unwrap().push(found);
        })
        .unwrap();
        let got = got.into_inner().unwrap();
        assert_eq!(got.len(), THREADS);
        assert!(got.iter().all(|found| *found == got[0]), "threads disagree: {got:?}");
        got[0]
    }

    fn pseudo_random(i: u64) -> u64 {
        let z = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (z ^ (z >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (z >> 32)
    }

    #[test]
    fn two_places_match_a_sort() {
        // Spread 32-bit values, every pair of a few places, a partial last row.
        let spread: Vec<u32> = (0..500).map(|i| pseudo_random(i) as u32).collect();
        for places in [[0, 499], [0, 0], [250, 251], [17, 480], [499, 499], [300, 12]] {
            check::<u32>(&spread, places);
        }
        // Floats' rank bits of one exponent (the first rounds share one bin), and duplicates.
        let near: Vec<u32> = (0..512).map(|i| 0x3f80_0000 | (pseudo_random(i) as u32 & 0x7ff)).collect();
        check::<u32>(&near, [100, 400]);
        let repeated: Vec<u32> = (0..300).map(|i| [5, 9, 9, 9, 1 << 31][i % 5]).collect();
        for places in [[0, 299], [59, 60], [119, 120], [239, 240], [130, 131]] {
            check::<u32>(&repeated, places);
        }
        // More keys than one round of loads in flight (eight a thread): several chunks, the
        // last partial.
        let many: Vec<u32> = (0..1500).map(|i| pseudo_random(i + 7) as u32 >> (i % 3)).collect();
        for places in [[0, 1499], [700, 700], [3, 1200]] {
            check::<u32>(&many, places);
        }
        // 64-bit keys (eight rounds), and 16-bit keys' bits (the first rounds all zeros).
        let wide: Vec<u64> = (0..128).map(pseudo_random).collect();
        check::<u64>(&wide, [3, 120]);
        let wide_close: Vec<u64> = (0..128).map(|i| (7 << 40) | (pseudo_random(i) & 0xff)).collect();
        check::<u64>(&wide_close, [0, 64]);
        let narrow: Vec<u32> = (0..100).map(|i| pseudo_random(i) as u32 % 50).collect();
        check::<u32>(&narrow, [10, 90]);
    }

    #[test]
    fn bounds_skip_the_rounds_they_settle() {
        // Bounds wider than the keys, differing from the top bit of a digit to the bottom
        // of one, and one digit from the top: the same places as a sort.
        let near: Vec<u32> = (0..700).map(|i| 0x3f80_0000 | (pseudo_random(i) as u32 & 0x7ff)).collect();
        for within in [[0x3f80_0000, 0x3f80_ffff], [0x3f80_0000, 0x3f80_07ff], [0x3f00_0000, 0x3fff_ffff]] {
            for places in [[0, 699], [350, 350], [5, 600]] {
                check_from::<u32>(&near, places, within, true);
            }
        }
        // Keys differing in the lowest digit only: one round.
        let last_digit: Vec<u32> = (0..300).map(|i| 0x1234_5600 | (pseudo_random(i) as u32 & 0xff)).collect();
        check_from::<u32>(&last_digit, [0, 299], [0x1234_5600, 0x1234_56ff], false);
        check_from::<u32>(&last_digit, [150, 151], [0x1234_5600, 0x1234_56ff], true);
        // 64-bit keys sharing their top 40 bits, more than one chunk of loads (four a thread).
        let wide_close: Vec<u64> = (0..600).map(|i| (7 << 40) | (pseudo_random(i) & 0xff_ffff)).collect();
        check_from::<u64>(&wide_close, [17, 590], [7 << 40, (7 << 40) | 0xff_ffff], true);
        check::<u64>(&wide_close, [0, 599]);
        // Bounds of one value answer without reading a key (these keys are not that value,
        // so an answer read from them would differ).
        let other: Vec<u32> = (0..64).collect();
        assert_eq!(run::<u32>(&other, [3, 9], [1000, 1000], true), [1000, 1000]);
    }
}
