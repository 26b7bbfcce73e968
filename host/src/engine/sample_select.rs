//! The SampleSelect runner: selection by rank (exact, QuickSelect, and the one-level
//! approximation with its exact rank), and top-k's `Algorithm::SampleSelect` and
//! `Algorithm::BucketSelect`, which run the same levels with their outputs emitted.
//!
//! Kernel docs: `gpu_select_kernels::select::sample`.

use gpu_select_kernels::block::tiles::TILE;
use gpu_select_kernels::block::tiles::TILE_WARPS;
use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::select::sample::{
    BRACKET_BUCKET_BITS, BRACKET_SAMPLE, BracketLayout, BracketTopKLayout, KeptRun, LEVEL_SLOTS,
    MAX_BUCKET_BITS, MAX_BUCKETS, MAX_EXACT_BUCKET_BITS, MAX_SAMPLE, MAX_SAMPLE_BLOCKS, NearestLayout,
    RangeLayout, SAMPLE_DRAW_BLOCKS, SAMPLE_SORT_THREADS, SAMPLE_THREADS, SPLITTER_SLOTS, SampleChooseLayout,
    SampleLevel, SampleOutcome, SampleParams, SamplePassLayout, SampleSortLayout, WARP_TILE, WINDOW_BITS,
    WindowLayout, bracket_places, flags,
};

use crate::buffer::{DeviceBuffer, DeviceValue};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::options::{MultiselectAlgorithm, SampleSelectPolicy, SelectAlgorithm, SelectOptions};
use crate::results::Selection;
use crate::workspace::WorkspaceCarver;
use crate::{Key, Order, SelectKey};

// Safety: both are `#[repr(C)]` structs of integers without padding; every bit pattern is
// a valid value.
unsafe impl DeviceValue for SampleOutcome {}
unsafe impl DeviceValue for SampleLevel {}

/// The fixed seed of the sample positions: results (and top-k's output order) are the same
/// every run. An input built against it can make every sample miss; [`FALLBACK_AFTER`]
/// bounds what that costs.
const SAMPLE_SEED: u64 = 0x5a3c_71e9_0b2d_4f86;

/// Levels past the expected ones before a run gives up on its samples and its caller
/// finishes with an algorithm that needs none (radix select for top-k, bucket multiselect
/// for a selection). A run on ordinary data takes its expected levels, or one or two more
/// when a sample is unlucky.
pub(crate) const FALLBACK_AFTER: u32 = 8;

/// The shape of one SampleSelect run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SamplePlan {
    policy: SampleSelectPolicy,
    /// Blocks of the count and filter launches.
    blocks: u32,
    /// Candidates each buffer holds.
    capacity: u64,
    /// Top-k's bracket: the runs of kept keys its table holds (else 0).
    run_capacity: u64,
    /// Blocks of the first level's sample launch: [`SAMPLE_DRAW_BLOCKS`] from the policy's
    /// `spread_sample_from` keys on, else 1 (the later levels' launches: 1).
    sample_blocks: u32,
    /// [`flags`] of the run.
    flags: u32,
}

/// Each candidate buffer holds `n / CAPACITY_DIVISOR` candidates (at least [`MAX_SAMPLE`]):
/// 8× the expected target bucket of the first level with 256 buckets; a larger one makes
/// the next level sample again.
/// Runs with fewer buckets hold `n / 2^(bucket_bits − 3)`: 8× the expected target bucket
/// too, except for QuickSelect and other runs of fewer than 16 buckets, whose buffers hold
/// 3/4 of the input (a median pivot keeps about half).
const CAPACITY_DIVISOR: u64 = 32;
/// With [`flags::BRACKET`], each buffer holds `n / BRACKET_DIVISOR` candidates: the two are
/// the `n / 4` keys of extra memory the workspace allows.
const BRACKET_DIVISOR: u64 = 8;
/// The fewest keys a bracket is tried on: 16 samples' worth of candidates, so that what it
/// keeps (about 9 %) still takes a level of its own. Speed is measured at 2^28 only.
const BRACKET_MIN_KEYS: u64 = 16 * MAX_SAMPLE as u64;
/// Top-k brackets `k ≤ n / TOP_K_BRACKET_DIVISOR`: what its pass keeps (the keys below the
/// upper bound, about `k` plus four standard deviations of a sample quantile, 2.6 % of `n`
/// at this `k`) then fits the candidate buffer of `n / 32` without making it larger.
pub(crate) const TOP_K_BRACKET_DIVISOR: u64 = 64;

impl SamplePlan {
    /// The plan for `n` keys; `flags`: [`flags::EMIT`] for top-k, [`flags::APPROXIMATE`],
    /// [`flags::BRACKET`].
    pub(crate) fn new(n: u64, multiprocessors: u32, policy: SampleSelectPolicy, mut flags: u32) -> Self {
        let blocks = n
            .div_ceil(TILE)
            // In 64 bits: the policy's blocks per multiprocessor is the caller's to choose.
            .min(multiprocessors as u64 * policy.blocks_per_sm as u64)
            .clamp(1, MAX_SAMPLE_BLOCKS as u64);
        if policy.warp_aggregated {
            flags |= flags::WARP_AGGREGATED;
        }
        let buffered = n > MAX_SAMPLE as u64 && flags & flags::APPROXIMATE == 0;
        let kept = if policy.bucket_bits >= 8 {
            n / CAPACITY_DIVISOR
        } else if policy.bucket_bits >= 4 && flags & flags::SINGLE_PIVOT == 0 {
            n >> (policy.bucket_bits - 3)
        } else {
            n - n / 4
        };
        // Bucket select's target bucket may hold any share of the candidates (equal widths
        // know nothing of the data's shape), so its buffers hold all of them.
        let kept = if flags & flags::EQUAL_WIDTH != 0 { n } else { kept };
        // A bracket keeps up to `n / BRACKET_DIVISOR`: 1.4 times a median's expected 9 %
        // share, which its spread (about 0.7 % of n for a sample of 2048) stays far below.
        // Top-k's brackets only a small `k` (TOP_K_BRACKET_DIVISOR), whose kept keys fit
        // the usual buffers.
        let top_k_bracket = flags & flags::BRACKET != 0 && flags & flags::EMIT != 0;
        let kept =
            if flags & flags::BRACKET != 0 && !top_k_bracket { kept.max(n / BRACKET_DIVISOR) } else { kept };
        let capacity = if buffered { kept.max(MAX_SAMPLE as u64) } else { 0 };
        // Each run but a warp's last holds more than half a stage (more than 256 keys).
        let run_capacity =
            if top_k_bracket { capacity / (WARP_TILE + 1) + blocks * TILE_WARPS as u64 + 1 } else { 0 };
        let spread = n > MAX_SAMPLE as u64 && n >= policy.spread_sample_from;
        let sample_blocks = if spread { SAMPLE_DRAW_BLOCKS } else { 1 };
        Self { policy, blocks: blocks as u32, capacity, run_capacity, sample_blocks, flags }
    }

    /// The sample of a bracket's level for rank `k` (from 1) of `n` keys: the policy's
    /// `large_bracket_sample` keys (8192 by default) from its
    /// `large_bracket_sample_from` keys on, for top-k always and for a selection of a rank
    /// with `q(1 − q) ≥ 1/16` (`q = k/n`); else the policy's `sample_size`. Near the ends a
    /// bracket keeps few keys whatever its sample (rank n/100 of 2^28: 1.7 % with 2048,
    /// 0.9 % with 8192), and when the sample kernel sorted the sample the larger sort cost
    /// more than the count it saved (H100 run 275: 0.527 → 0.554 ms); at the median it saved
    /// more than the sort cost (run 277: 0.643 → 0.605 ms).
    fn bracket_sample(&self, n: u64, k: u64) -> u32 {
        let middle = || {
            let (k, n) = (k as u128, n as u128);
            16 * k * (n - k.min(n)) >= n * n
        };
        let large = n >= self.policy.large_bracket_sample_from && (self.flags & flags::EMIT != 0 || middle());
        if large { self.policy.large_bracket_sample } else { self.policy.sample_size }
    }

    /// Whether the first level's sample is drawn by [`SAMPLE_DRAW_BLOCKS`] blocks (its
    /// workspace then holds the draws and their counter).
    fn spreads_sample(&self) -> bool {
        self.sample_blocks > 1
    }

    /// The policy it runs with.
    pub(crate) fn policy(&self) -> SampleSelectPolicy {
        self.policy
    }

    /// Whether the run has `flag` ([`flags`]).
    pub(crate) fn has_flag(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// The levels a run of `n` keys is expected to take: each level keeps about one bucket,
    /// until the base case (one sort of at most 2048 keys) or, for a plain selection past
    /// its first level, the radix finish.
    fn expected_levels(&self, n: u64) -> u32 {
        self.levels_after(n, 0)
    }

    /// The levels launched before the host first reads the outcome for rank `k` of `n`:
    /// [`Self::expected_levels`], except that top-k's bracket is expected to keep the keys
    /// better than its upper bound (about `(place + 1) · n / sample` of them,
    /// [`bracket_places`]), not its buffer's capacity of `n / 32`: at 2^26 and 2^28 with a
    /// small `k`, one level fewer, whose four kernels found the run done and returned (about
    /// 13 µs of a 0.45 ms top-k of 2^28, H200 run 317). A bracket that keeps more than
    /// expected costs a read of the outcome and a batch of two more levels, as any run that
    /// outlasts its batch; the levels a run may take in all ([`Self::expected_levels`] and
    /// the fallback's) are unchanged.
    fn first_batch(&self, n: u64, k: u64) -> u32 {
        if self.flags & flags::BRACKET == 0 || self.flags & flags::EMIT == 0 {
            return self.expected_levels(n);
        }
        let sample = self.bracket_sample(n, k) as u64;
        let Some(high) = bracket_places(sample, k.max(1), n).1 else { return self.expected_levels(n) };
        let kept = ((high + 1) as u128 * n as u128 / sample as u128) as u64;
        self.levels_from_bracket(kept.min(self.capacity), 0)
    }

    /// The bracket's level at `first`, then the usual levels over the `kept` keys it keeps.
    fn levels_from_bracket(&self, kept: u64, first: u32) -> u32 {
        let plain = Self { flags: self.flags & !flags::BRACKET, ..*self };
        1 + plain.levels_after(kept, first + 1)
    }

    /// The levels [`Self::expected_levels`] expects from level `first` on over `n`
    /// candidates: a level ends the run when its candidates fit one sort, or, for a plain
    /// selection past the first level, the policy's `radix_finish`.
    fn levels_after(&self, n: u64, first: u32) -> u32 {
        if self.flags & flags::BRACKET != 0 {
            let kept = if self.flags & flags::EMIT != 0 { self.capacity } else { n / BRACKET_DIVISOR };
            return self.levels_from_bracket(kept, first);
        }
        let finishes = |level: u32, len: u64| {
            len <= MAX_SAMPLE as u64
                || flags::radix_finishes(self.flags, level, len, self.policy.radix_finish)
        };
        let shrink = if self.flags & flags::SINGLE_PIVOT != 0 { 2 } else { 1u64 << self.policy.bucket_bits };
        let mut levels = 1;
        let mut len = n;
        while !finishes(first + levels - 1, len) {
            len /= shrink;
            levels += 1;
        }
        levels
    }
}

/// Where a SampleSelect run keeps its state in a workspace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SampleWorkspace {
    levels: usize,
    outcome: usize,
    totals: usize,
    /// Bucket select's range (two words).
    range: usize,
    /// Top-k's bracket: its kept keys and runs; approximate selection: the window pass's
    /// finished blocks (two words).
    kept: usize,
    /// The sample launches' count of blocks done drawing.
    draws_done: usize,
    /// Bytes from the start cleared before the first launch.
    cleared: usize,
    splitters: usize,
    cumulative: usize,
    better_offsets: usize,
    tie_offsets: usize,
    oracles: usize,
    buffer_keys: [usize; 2],
    buffer_indices: [usize; 2],
    runs: usize,
    /// A sample drawn by several blocks: its keys.
    draws: usize,
    pub(crate) bytes: usize,
}

impl SampleWorkspace {
    pub(crate) fn new(plan: &SamplePlan, n: usize, key_bytes: usize) -> Self {
        Self::carve(plan, n, key_bytes, &mut WorkspaceCarver::default())
    }

    /// The regions, carved after what `carver` holds already.
    pub(crate) fn carve(plan: &SamplePlan, n: usize, key_bytes: usize, carver: &mut WorkspaceCarver) -> Self {
        let start = carver.bytes();
        let levels = carver.region(LEVEL_SLOTS * size_of::<SampleLevel>());
        let outcome = carver.region(size_of::<SampleOutcome>());
        let totals = carver.region(2 * MAX_BUCKETS * 8);
        let range = carver.region(if plan.flags & flags::EQUAL_WIDTH != 0 { 16 } else { 0 });
        // Top-k's bracket's counters, or the window pass's finished blocks.
        let counters = plan.run_capacity != 0 || plan.flags & flags::APPROXIMATE != 0;
        let kept = carver.region(if counters { 16 } else { 0 });
        let spread = plan.spreads_sample();
        let draws_done = carver.region(if spread { 8 } else { 0 });
        let cleared = carver.bytes() - start;
        let splitters = carver.region(SPLITTER_SLOTS * 8);
        let blocks = plan.blocks as usize;
        let exact = plan.flags & flags::APPROXIMATE == 0;
        let cumulative = carver.region(if exact { blocks * 256 * 4 } else { 0 });
        // Per block, or with top-k's bracket per warp.
        let offsets = if plan.run_capacity != 0 { blocks * TILE_WARPS } else { blocks };
        let better_offsets = carver.region(offsets * 8);
        let tie_offsets = carver.region(offsets * 8);
        let oracles = carver.region(if exact { n } else { 0 });
        let capacity = plan.capacity as usize;
        let buffer_keys = [carver.region(capacity * key_bytes), carver.region(capacity * key_bytes)];
        let index_bytes = if plan.flags & flags::EMIT != 0 { capacity * 8 } else { 0 };
        let buffer_indices = [carver.region(index_bytes), carver.region(index_bytes)];
        let runs = carver.region(plan.run_capacity as usize * size_of::<KeptRun>());
        let draws = carver.region(if spread { BRACKET_SAMPLE as usize * key_bytes } else { 0 });
        Self {
            levels,
            outcome,
            totals,
            range,
            kept,
            draws_done,
            cleared,
            splitters,
            cumulative,
            better_offsets,
            tie_offsets,
            oracles,
            buffer_keys,
            buffer_indices,
            runs,
            draws,
            bytes: carver.bytes() - start,
        }
    }
}

/// What one SampleSelect run found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SampleRun {
    /// The outcome the kernels wrote.
    pub(crate) outcome: SampleOutcome,
}

impl Gpu {
    /// The plan of a selection of `n` keys of `key_bytes` with `options` (exact, or one
    /// level for [`SelectAlgorithm::Approximate`]).
    pub(crate) fn plan_selection(
        &self,
        n: usize,
        key_bytes: usize,
        options: &SelectOptions,
    ) -> Result<SamplePlan> {
        crate::workspace::check_key_count(n)?;
        match options.algorithm {
            SelectAlgorithm::Approximate { buckets } => self.plan_approx(n, key_bytes, buckets, options),
            _ => self.plan_exact_select(n, key_bytes, options, 0),
        }
    }

    /// Runs the selection `plan` describes on `data` (checked by the caller) for rank `k`
    /// (from 0) in `order`, with the workspace at `base`; reads the outcome back (waits).
    pub(crate) fn run_selection<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        order: Order,
        plan: &SamplePlan,
        base: u64,
    ) -> Result<Selection<K>> {
        check_rank(data.len(), k)?;
        let Some(run) = self.run_sample_select(data, k as u64 + 1, order, plan, base, None)? else {
            // The samples kept missing: bucket multiselect finishes whatever the keys (each
            // of its passes at least halves a label's range of bits). It allocates its own
            // memory: this path is rare.
            let rank = match order {
                Order::Smallest => k as u64,
                Order::Largest => data.len() as u64 - 1 - k as u64,
            };
            let outcome =
                self.run_multiselect(data, MultiselectAlgorithm::BucketMultiselect, |_, _| Ok(vec![rank]))?;
            let passes = LEVEL_SLOTS.min((plan.expected_levels(data.len() as u64) + FALLBACK_AFTER) as usize)
                as u32
                + outcome.data_passes;
            return Ok(Selection { value: outcome.values[0], rank: k as u64, passes });
        };
        let value = decode(run.outcome.value, order);
        let rank = if plan.has_flag(flags::APPROXIMATE) { run.outcome.rank } else { k as u64 };
        Ok(Selection { value, rank, passes: run.outcome.levels })
    }

    /// The plan of an approximate selection with `buckets` buckets.
    fn plan_approx(
        &self,
        n: usize,
        key_bytes: usize,
        buckets: usize,
        options: &SelectOptions,
    ) -> Result<SamplePlan> {
        if n == 0 {
            return Err(Error::EmptyInput);
        }
        if !buckets.is_power_of_two() || !(2..=MAX_BUCKETS).contains(&buckets) {
            return Err(Error::invalid(format!(
                "buckets = {buckets}: approximate selection takes a power of two from 2 to {MAX_BUCKETS}"
            )));
        }
        let policy = SampleSelectPolicy {
            bucket_bits: buckets.trailing_zeros(),
            ..options.policy.unwrap_or_else(|| SampleSelectPolicy::for_keys(self.limits(), key_bytes))
        };
        policy.check(MAX_BUCKET_BITS)?;
        Ok(SamplePlan::new(n as u64, self.limits().multiprocessors, policy, flags::APPROXIMATE))
    }

    /// The plan of an exact selection of `n` keys of `key_bytes` (`extra_flags`:
    /// [`flags::EMIT`] for top-k, with [`flags::BRACKET`] for top-k of a small `k` when the
    /// policy brackets).
    pub(crate) fn plan_exact_select(
        &self,
        n: usize,
        key_bytes: usize,
        options: &SelectOptions,
        extra_flags: u32,
    ) -> Result<SamplePlan> {
        if n == 0 {
            return Err(Error::EmptyInput);
        }
        let (policy, flags) = match options.algorithm {
            SelectAlgorithm::QuickSelect => {
                (options.policy.unwrap_or_else(SampleSelectPolicy::quick_select), flags::SINGLE_PIVOT)
            }
            SelectAlgorithm::Auto
            | SelectAlgorithm::SampleSelect
            | SelectAlgorithm::Approximate { .. }
            | SelectAlgorithm::SbpRadix
            | SelectAlgorithm::SbpTree => {
                let policy =
                    options.policy.unwrap_or_else(|| SampleSelectPolicy::for_keys(self.limits(), key_bytes));
                // Plain selection's bracket, or top-k's when it asks (a small `k`); not bucket
                // select's, whose splitters are widths, not samples.
                let wanted = extra_flags == 0 || extra_flags == flags::EMIT | flags::BRACKET;
                let bracket = policy.bracket && wanted && n as u64 >= BRACKET_MIN_KEYS;
                (policy, if bracket { flags::BRACKET } else { 0 })
            }
        };
        policy.check(MAX_EXACT_BUCKET_BITS)?;
        if flags & flags::SINGLE_PIVOT != 0 && policy.bucket_bits < 2 {
            return Err(Error::invalid("QuickSelect's three-way partition needs bucket_bits ≥ 2"));
        }
        let flags = flags | (extra_flags & !flags::BRACKET);
        Ok(SamplePlan::new(n as u64, self.limits().multiprocessors, policy, flags))
    }

    /// Runs SampleSelect on `data` for the `k`-th smallest rank (from 1) in `order`, with the
    /// workspace at `workspace_base`. `outputs`: with [`flags::EMIT`], the `k` keys and
    /// indices' addresses. Queues the levels the plan expects, then reads the outcome; if
    /// not done, a few more levels at a time, up to [`FALLBACK_AFTER`] more than expected:
    /// `None` then (samples that keep missing, as an input built against the fixed seed
    /// makes them, or a policy too thin to split): the caller finishes with an algorithm
    /// that needs no sample.
    pub(crate) fn run_sample_select<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: u64,
        order: Order,
        plan: &SamplePlan,
        workspace_base: u64,
        outputs: Option<(u64, u64)>,
    ) -> Result<Option<SampleRun>> {
        let n = data.len() as u64;
        let layout = SampleWorkspace::new(plan, n as usize, size_of::<K>());
        fn at<T>(base: u64, offset: usize) -> GlobalPtr<T> {
            GlobalPtr::from_address(base + offset as u64)
        }
        self.clear_on_device(workspace_base, layout.cleared)?;
        let (keys_out, indices_out) = outputs.unwrap_or_default();
        let mut params = SampleParams::<K> {
            data: data.global_ptr(),
            len: n,
            k,
            keys_out: GlobalPtr::from_address(keys_out),
            indices_out: GlobalPtr::from_address(indices_out),
            levels: at(workspace_base, layout.levels),
            outcome: at(workspace_base, layout.outcome),
            splitters: at(workspace_base, layout.splitters),
            totals: at(workspace_base, layout.totals),
            cumulative: at(workspace_base, layout.cumulative),
            better_offsets: at(workspace_base, layout.better_offsets),
            tie_offsets: at(workspace_base, layout.tie_offsets),
            oracles: at(workspace_base, layout.oracles),
            buffer_keys: layout.buffer_keys.map(|offset| at(workspace_base, offset)),
            buffer_indices: layout.buffer_indices.map(|offset| at(workspace_base, offset)),
            capacity: plan.capacity,
            seed: SAMPLE_SEED,
            range: at(workspace_base, layout.range),
            kept: at(workspace_base, layout.kept),
            runs: at(workspace_base, layout.runs),
            run_capacity: plan.run_capacity,
            draws: if plan.spreads_sample() { at(workspace_base, layout.draws) } else { GlobalPtr::null() },
            draws_done: at(workspace_base, layout.draws_done),
            blocks: plan.blocks,
            level: 0,
            order: order.to_raw(),
            bucket_bits: plan.policy.bucket_bits,
            sample_size: plan.policy.sample_size,
            radix_finish: plan.policy.radix_finish,
            flags: plan.flags,
        };
        if plan.flags & flags::EMIT == 0 {
            params.buffer_indices = [GlobalPtr::null(); 2];
        }
        let one_block =
            |shared_bytes| LaunchShape { grid: (1, 1), block_threads: SAMPLE_THREADS, shared_bytes };
        let sample = LaunchShape {
            grid: (1, 1),
            block_threads: SAMPLE_SORT_THREADS,
            shared_bytes: SampleSortLayout::<K::Bits>::new().bytes,
        };
        // The first level's sample comes from the data (in device memory, not L2): its
        // random reads are what many blocks draw sooner than one. The later levels' come
        // from a candidate buffer, most of it in L2, where one block's reads measured as
        // fast (H200 run 328: 14.1 → 14.5 µs and 9.0 → 9.4 µs when spread).
        let first_sample = LaunchShape { grid: (plan.sample_blocks, 1), ..sample };
        let choose = one_block(SampleChooseLayout::new().bytes);
        let pass = LaunchShape {
            grid: (plan.blocks, 1),
            block_threads: SAMPLE_THREADS,
            shared_bytes: SamplePassLayout::<K::Bits>::new().bytes,
        };

        if plan.flags & flags::APPROXIMATE != 0 {
            let nearest = one_block(NearestLayout::new().bytes);
            self.launch(K::SAMPLE_SELECT_SAMPLE, first_sample, params)?;
            if plan.policy.window_count && plan.policy.bucket_bits > WINDOW_BITS && n > MAX_SAMPLE as u64 {
                // The full count is launched only when the window did not answer (rarely):
                // the read-back here is the one a selection waits for anyway.
                let window_pass = LaunchShape { shared_bytes: WindowLayout::<K::Bits>::new().bytes, ..pass };
                let window = SampleParams { flags: params.flags | flags::WINDOW, ..params };
                // Its last block to finish weighs the window, as the nearest kernel would.
                self.launch(K::SAMPLE_SELECT_WINDOW, window_pass, window)?;
                let run = self.read_outcome(workspace_base + layout.outcome as u64)?;
                if run.outcome.done != 0 {
                    return Ok(Some(run));
                }
            }
            self.launch(K::SAMPLE_SELECT_COUNT, pass, params)?;
            self.launch(K::SAMPLE_SELECT_NEAREST, nearest, params)?;
            return self.read_outcome(workspace_base + layout.outcome as u64).map(Some);
        }
        // Selection keeps no order among a level's candidates: the cheaper gather serves.
        let filter =
            if plan.flags & flags::EMIT != 0 { K::SAMPLE_SELECT_FILTER } else { K::SAMPLE_SELECT_GATHER };
        if plan.flags & flags::EQUAL_WIDTH != 0 {
            let range = LaunchShape { shared_bytes: RangeLayout::new().bytes, ..pass };
            self.launch(K::SAMPLE_SELECT_RANGE, range, params)?;
        }
        let mut level = 0;
        let mut batch = plan.first_batch(n, k);
        if plan.flags & flags::BRACKET != 0 {
            // Level 0 brackets the rank: its own splitters and pass, and no filter (the pass
            // copied what it kept); the levels after it are the usual ones.
            let bracket = SampleParams {
                bucket_bits: BRACKET_BUCKET_BITS,
                sample_size: plan.bracket_sample(n, k),
                ..params
            };
            self.launch(K::SAMPLE_SELECT_SAMPLE, first_sample, bracket)?;
            if plan.flags & flags::EMIT != 0 {
                // Top-k's: the pass copies runs of kept keys, the choose kernel turns the
                // warps' counts into offsets, and the place kernel puts the runs in order.
                let bracket_pass = LaunchShape { shared_bytes: BracketTopKLayout::<K>::new().bytes, ..pass };
                self.launch(K::SAMPLE_SELECT_BRACKET_TOP_K, bracket_pass, bracket)?;
                self.launch(K::SAMPLE_SELECT_CHOOSE, choose, bracket)?;
                let place = LaunchShape { shared_bytes: 0, ..pass };
                self.launch(K::SAMPLE_SELECT_BRACKET_PLACE, place, bracket)?;
            } else {
                let bracket_pass = LaunchShape { shared_bytes: BracketLayout::<K>::new().bytes, ..pass };
                self.launch(K::SAMPLE_SELECT_BRACKET, bracket_pass, bracket)?;
                self.launch(K::SAMPLE_SELECT_CHOOSE, choose, bracket)?;
            }
            params.flags &= !flags::BRACKET;
            level = 1;
            batch -= 1;
        }
        let last_level = (plan.expected_levels(n) + FALLBACK_AFTER).min(LEVEL_SLOTS as u32);
        // A level whose sample kernel ran but not its count, choose and filter.
        let mut rest_of = None;
        while level < last_level || rest_of.is_some() {
            if let Some(pending) = rest_of.take() {
                let params = SampleParams { level: pending, ..params };
                self.launch(K::SAMPLE_SELECT_COUNT, pass, params)?;
                self.launch(K::SAMPLE_SELECT_CHOOSE, choose, params)?;
                self.launch(filter, pass, params)?;
            }
            let levels = batch.min(last_level - level);
            for i in 0..levels {
                params.level = level;
                let sample = if level == 0 { first_sample } else { sample };
                self.launch(K::SAMPLE_SELECT_SAMPLE, sample, params)?;
                level += 1;
                if i + 1 == levels {
                    // The batch's last level is the one the plan expects to end the run in
                    // its sample kernel (the base case, or a selection's radix finish): its
                    // other kernels, which would find the run done and return (about 8 µs
                    // of launches on an H200, run 295), go out only if it did not.
                    rest_of = Some(level - 1);
                    break;
                }
                self.launch(K::SAMPLE_SELECT_COUNT, pass, params)?;
                self.launch(K::SAMPLE_SELECT_CHOOSE, choose, params)?;
                self.launch(filter, pass, params)?;
            }
            let run = self.read_outcome(workspace_base + layout.outcome as u64)?;
            if run.outcome.done != 0 {
                return Ok(Some(run));
            }
            batch = 2;
        }
        Ok(None)
    }

    fn read_outcome(&self, address: u64) -> Result<SampleRun> {
        let mut outcome = [SampleOutcome::default()];
        self.copy_from_address(address, &mut outcome)?;
        Ok(SampleRun { outcome: outcome[0] })
    }
}

/// Checks a rank against the input length.
pub(crate) fn check_rank(n: usize, k: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::EmptyInput);
    }
    if k >= n {
        return Err(Error::k_out_of_range(
            k,
            0,
            n - 1,
            format!("the input has {n} keys (ranks 0 to {})", n - 1),
        ));
    }
    Ok(())
}

/// The key of rank bits `value` in `order`.
fn decode<K: Key>(value: u64, order: Order) -> K {
    let bits = <K::Bits as gpu_select_kernels::OrderedBits>::from_u64(value);
    let ordered = match order {
        Order::Largest => gpu_select_kernels::OrderedBits::complement(bits),
        Order::Smallest => bits,
    };
    K::from_ordered(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_blocks_per_multiprocessor_gives_a_plan() {
        let policy = SampleSelectPolicy { blocks_per_sm: u32::MAX, ..SampleSelectPolicy::quick_select() };
        let plan = SamplePlan::new(1 << 28, 132, policy, 0);
        assert_eq!(plan.blocks, MAX_SAMPLE_BLOCKS);
    }

    #[test]
    fn a_bracket_samples_more_keys_at_scale_and_away_from_the_ends() {
        let default = SampleSelectPolicy::for_device(crate::Gpu::emulator().limits());
        let sample =
            |n: u64, k: u64, policy, flags| SamplePlan::new(n, 132, policy, flags).bracket_sample(n, k);
        let (select, top_k) = (flags::BRACKET, flags::BRACKET | flags::EMIT);
        let n = 1u64 << 27;
        // Selection: the middle ranks only, q(1 − q) ≥ 1/16 (q from about 0.067 to 0.933;
        // 1/15 falls just outside).
        for (k, expected) in
            [(n / 2, BRACKET_SAMPLE), (n / 14, BRACKET_SAMPLE), (n / 15, 2048), (n / 100, 2048)]
        {
            assert_eq!(sample(n, k, default, select), expected, "k = {k}");
            assert_eq!(sample(n, n + 1 - k, default, select), expected, "k = n + 1 − {k}");
        }
        // Top-k: every k the bracket takes.
        for k in [1, 1024, n / 64] {
            assert_eq!(sample(n, k, default, top_k), BRACKET_SAMPLE, "top-k {k}");
        }
        // Below the policy's size, and with policies that move it.
        assert_eq!(sample(n - 1, n / 2, default, select), 2048);
        assert_eq!(sample(n - 1, 1024, default, top_k), 2048);
        let always = SampleSelectPolicy { large_bracket_sample_from: 0, ..default };
        assert_eq!(sample(40_000, 20_000, always, select), BRACKET_SAMPLE);
        let never = SampleSelectPolicy { large_bracket_sample_from: u64::MAX, ..default };
        assert_eq!(sample(1 << 33, 1 << 32, never, select), 2048);
        let small = SampleSelectPolicy { sample_size: 64, ..never };
        assert_eq!(sample(1 << 33, 1 << 32, small, select), 64);
        let fewer = SampleSelectPolicy { large_bracket_sample: 4096, ..default };
        assert_eq!(sample(n, n / 2, fewer, select), 4096);
    }

    #[test]
    fn a_radix_finish_ends_plain_selections_a_level_sooner() {
        let default = SampleSelectPolicy {
            radix_finish: 1 << 17,
            ..SampleSelectPolicy::for_device(crate::Gpu::emulator().limits())
        };
        let levels = |n: u64, policy, flags| SamplePlan::new(n, 132, policy, flags).expected_levels(n);
        let never = SampleSelectPolicy { radix_finish: 0, ..default };
        // The median of 2^28: the bracket keeps at most n/8 = 2^25, one level leaves 2^17,
        // which the radix finish takes where a level and the base case's sort would.
        assert_eq!(levels(1 << 28, default, flags::BRACKET), 3);
        assert_eq!(levels(1 << 28, never, flags::BRACKET), 4);
        // Never at the first level, whatever its size (2^17 keys: a level, then the sort).
        assert_eq!(levels(1 << 17, default, 0), 2);
        assert_eq!(levels(1 << 25, default, 0), 2);
        assert_eq!(levels(1 << 25, never, 0), 3);
        // Not for top-k, approximate selection or QuickSelect.
        for flag in [flags::EMIT, flags::APPROXIMATE] {
            assert_eq!(levels(1 << 25, default, flag), levels(1 << 25, never, flag), "flags {flag}");
        }
        let quick = SampleSelectPolicy { radix_finish: 1 << 17, ..SampleSelectPolicy::quick_select() };
        let quick_never = SampleSelectPolicy { radix_finish: 0, ..quick };
        assert_eq!(
            levels(1 << 20, quick, flags::SINGLE_PIVOT),
            levels(1 << 20, quick_never, flags::SINGLE_PIVOT)
        );
    }

    #[test]
    fn plans_fit_the_kernels_limits() {
        let policy = SampleSelectPolicy {
            bucket_bits: 8,
            sample_size: 2048,
            large_bracket_sample_from: 1 << 28,
            large_bracket_sample: BRACKET_SAMPLE,
            blocks_per_sm: 2,
            warp_aggregated: false,
            window_count: true,
            bracket: true,
            radix_finish: 1 << 17,
            spread_sample_from: 1 << 20,
        };
        for n in [1u64, 2048, 2049, 1 << 20, 1 << 28, 1 << 33] {
            let plan = SamplePlan::new(n, 132, policy, 0);
            assert!(plan.blocks >= 1 && plan.blocks <= MAX_SAMPLE_BLOCKS, "{n}: {plan:?}");
            if n > MAX_SAMPLE as u64 {
                assert!(plan.capacity >= MAX_SAMPLE as u64 && plan.capacity <= n / 32 + MAX_SAMPLE as u64);
            }
            // Per-block counts are 32-bit.
            let per_block = n.div_ceil(TILE).div_ceil(plan.blocks as u64) * TILE;
            assert!(per_block < 1 << 32, "{n}: {plan:?}");
        }
        // 2^28 → 2^20 → 2^12 candidates, which the radix finish takes (no level 3).
        assert_eq!(SamplePlan::new(1 << 28, 132, policy, 0).expected_levels(1 << 28), 3);
        assert_eq!(SamplePlan::new(2048, 132, policy, 0).expected_levels(2048), 1);
        // A bracket's buffers hold n/8 each (the n/4 keys of extra memory), and its level
        // comes first.
        let bracket = SamplePlan::new(1 << 28, 132, policy, flags::BRACKET);
        assert_eq!(bracket.capacity, 1 << 25);
        assert_eq!(bracket.expected_levels(1 << 28), 3);
        // Top-k's bracket keeps about six sample places' worth of keys for a small k (8192
        // samples from 2^27 keys): its first batch stops a level earlier at 2^26 and 2^28,
        // not at 2^30 (786 432 kept, 3072 after a level); at k = n/64, as many as before.
        let top_k = |n: u64| SamplePlan::new(n, 132, policy, flags::BRACKET | flags::EMIT);
        assert_eq!((top_k(1 << 28).first_batch(1 << 28, 1), top_k(1 << 28).expected_levels(1 << 28)), (3, 4));
        assert_eq!(
            (top_k(1 << 28).first_batch(1 << 28, 1024), top_k(1 << 26).first_batch(1 << 26, 32)),
            (3, 3)
        );
        assert_eq!(top_k(1 << 30).first_batch(1 << 30, 1024), top_k(1 << 30).expected_levels(1 << 30));
        assert_eq!(top_k(1 << 28).first_batch(1 << 28, 1 << 22), top_k(1 << 28).expected_levels(1 << 28));
        for n in [1u64 << 20, 1 << 24, 1 << 26, 1 << 28, 1 << 30] {
            for k in [1, 64, 1024, n / 64] {
                assert!(top_k(n).first_batch(n, k) <= top_k(n).expected_levels(n), "n={n} k={k}");
            }
        }
    }
}
