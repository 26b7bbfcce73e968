//! The options of each operation: which algorithm, in which order, with which tuning, and
//! the filters and key transforms a top-k can fuse. Plain values, shared by the public calls
//! and the engine under them.

use gpu_select_kernels::block::bitonic_sort::MAX_BLOCK_SORT_LEN;
use gpu_select_kernels::select::sample::{BRACKET_SAMPLE, MAX_SAMPLE};
use gpu_select_kernels::topk::bitonic::{MAX_BITONIC_K, NO_INDEX};
use gpu_select_kernels::topk::heap::MAX_HEAP_K;
use gpu_select_kernels::topk::sbp::MAX_SBP_K;

use crate::Order;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::limits::DeviceLimits;

/// The index of a padding slot in a top-k of ragged rows ([`Keys::ragged`](crate::Keys::ragged)): a row shorter
/// than `k` fills its slots past its length with this index and the worst non-NaN key of
/// the order (`+inf` / `MAX` for the smallest keys, `-inf` / `MIN` for the largest).
pub const PADDING_INDEX: u64 = NO_INDEX;

/// The longest segment the block sort takes.
pub const MAX_SMALL_SORT_LEN: usize = MAX_BLOCK_SORT_LEN as usize;

/// Which top-k algorithm runs. Each variant says where it wins; [`Algorithm::Auto`] picks.
///
/// One array ([`Keys::new`](crate::Keys::new)) takes every variant but
/// [`Algorithm::WarpSelect`]; rows ([`Keys::rows`](crate::Keys::rows),
/// [`Keys::ragged`](crate::Keys::ragged)) take `Auto`, `WarpSelect` and `RadixSelect` (for
/// `k` up to 2048; a larger `k` runs one top-k per row, by `Auto`'s choice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// The library chooses: the algorithm with the smallest time predicted by a cost model
    /// (fixed costs, compute per input scaled by the device's multiprocessors, and the
    /// bandwidth bound; fitted to measurements, see
    /// [`TopKPlan::predicted_ms`](crate::TopKPlan::predicted_ms)). For rows, the model of
    /// the two row kernels (docs/rows.md): within 3 % of the faster one on average, on 187
    /// shapes on an H100. One array of 2^14 to 2^17 keys (to 2^19 for `128 ≤ k ≤ 1024`) is
    /// taken as one row of the rows' radix kernel: a block per part and a merge, faster
    /// there than any array algorithm's passes (1.4–3.5× on an H200, docs/top-k.md).
    #[default]
    Auto,
    /// Bitonic top-k (Shanbhag, Pirk & Madden): tiles of 2048 keys reduced to their `k`
    /// best by sorting networks (in registers up to k = 256, the block's best in shared
    /// memory above), then the blocks' results reduced again; a bound taken from a sample
    /// skips the tiles that cannot hold a result, so on large inputs it runs near the speed
    /// of one read. Wins for small `k` and large `n`; `k ≤ 1024`, `n < 2^32`.
    Bitonic,
    /// The block bitonic sort of the whole input, then the first `k`: inputs of at most
    /// 2048 keys, any `k`.
    BlockSort,
    /// Radix select: 8-bit digits, most significant first; each level counts its digit,
    /// picks the bucket of the `k`-th best, sends the better buckets straight to the output
    /// and keeps only the target bucket. Any `k` and `n`; its time depends little on `k`
    /// (about three reads of the data for uniform floats), so it wins for large `k`.
    ///
    /// For rows: radix selection a block per row: histogram passes over the row until at
    /// most 2048 keys can be among its `k` best (usually one pass), a read that gathers
    /// them, and a block sort. About two reads of each row whatever `k` is: wins for large
    /// `k`. Rows of at most 1024 keys with `k ≤ 256` take a warp each instead.
    RadixSelect,
    /// SampleSelect with the fused filter (Ribizel & Anzt): each level samples 2048 keys,
    /// splits the candidates into 256 buckets by the sorted sample, sends the buckets
    /// better than the target straight to the output and keeps the target bucket. About two
    /// reads of the data (a count and an oracle-driven filter); repeated keys end it early
    /// (equality buckets). For `k ≤ n/64` (from 32 768 keys) one read instead: a bracket
    /// from the sample keeps the keys below a bound, in input order, and the levels go on
    /// on those. Any `k` and `n`.
    SampleSelect,
    /// Per-thread top-k, the bitonic top-k paper's first baseline: every thread keeps the
    /// best `k` of the inputs it reads in a heap in shared memory, then the bitonic top-k's
    /// reduction passes reduce the heaps' contents. The heaps take `k · (key bytes + 4)`
    /// bytes per thread, so only small `k` keep enough threads busy; it is here to be
    /// measured against, and `Auto` does not pick it. `k ≤ 512` (with 64-bit keys, where a
    /// warp's heaps fit the device's shared memory), `n < 2^32`.
    PerThreadHeap,
    /// Bucket select (Alabi et al.), a baseline of the bitonic top-k paper: the data's
    /// minimum and maximum (one pass), then SampleSelect's levels with 256 buckets of equal
    /// width in key value instead of sampled splitters, each level on the target bucket's
    /// range. Fast on uniform data; skewed data (an outlier far from the rest) leaves most
    /// inputs in one bucket level after level. After 16 levels the buckets split the keys'
    /// ordered bits evenly, so it always ends. Its buffers hold every input: extra memory
    /// `2n` keys and indices. Any `k` and `n`; `Auto` does not pick it.
    BucketSelect,
    /// Sort & choose, the bitonic top-k paper's simplest baseline: a radix sort of every
    /// key with its position (8-bit digits, least significant first, each pass stable),
    /// whose last pass writes only the first `k`. About three reads and two writes of keys
    /// and positions per digit, whatever `k` is: it is here to be measured against, and
    /// `Auto` does not pick it. Any `k`, `n < 2^32`; extra memory `n · (2 · key + 8)` bytes.
    SortAndChoose,
    /// Rows only: WarpSelect queues in registers (Faiss): one read of each row, but every
    /// key that enters a queue costs merges that grow with `k`. Wins for small `k` (tens to
    /// a few hundred) and many short rows; few long rows are split over several blocks and
    /// merged. `k ≤ 2048`.
    WarpSelect,
    /// Split-bucket partition with radix buckets (SBP's `TK_RdSP`): one kernel per pass;
    /// each block reads a tile of 8192 keys into shared memory once, narrows it by 11-bit
    /// digits (no further read of the data) until the buckets that hold its `k` best are few
    /// enough, and writes them to a place fixed in advance (the block's cutoff-sized
    /// segment), so no pass needs a global prefix sum. Passes repeat on the kept keys until
    /// one tile remains; the last keeps exactly `k`, which are sorted. One read of the data
    /// plus the candidates', but bound by its work per key: the fastest top-k for
    /// `n ≤ 2^22` (`Auto` takes it there for `k ≤ 128`), about 3× the read floor at 2^28
    /// (docs/sbp.md). `k ≤ 2048`, any `n`.
    SbpRadix,
    /// Split-bucket partition with a sampled search tree (SBP's `TK_StSPTC`): as
    /// [`Algorithm::SbpRadix`], but a tiny kernel first sorts a sample of the data and keeps
    /// 255 splitters around the rank of a tile's `k`-th best, and the first pass buckets
    /// each key by a binary search of them (one compare for the keys above the top
    /// splitter); blocks whose target bucket is still too large narrow inside it by radix
    /// digits. Slower than the radix form at small `n`, faster at large `n` on spread keys,
    /// never the fastest of the library's algorithms: `Auto` does not pick it. `k ≤ 2048`,
    /// any `n`.
    SbpTree,
}

impl Algorithm {
    /// Whether the algorithm takes `n` keys and this `k` (1 ≤ k ≤ n): the one place that
    /// knows each algorithm's limits, for the plan and for the cost model.
    pub(crate) fn takes(self, n: u64, k: u64) -> bool {
        match self {
            Algorithm::Bitonic => k <= MAX_BITONIC_K as u64 && n < 1 << 32,
            Algorithm::PerThreadHeap => k <= MAX_HEAP_K as u64 && n < 1 << 32,
            Algorithm::SbpRadix | Algorithm::SbpTree => k <= MAX_SBP_K as u64,
            Algorithm::SortAndChoose => n < 1 << 32,
            Algorithm::BlockSort => n <= crate::MAX_SMALL_SORT_LEN as u64,
            Algorithm::Auto | Algorithm::RadixSelect | Algorithm::SampleSelect | Algorithm::BucketSelect => {
                true
            }
            Algorithm::WarpSelect => false,
        }
    }
}

/// Options of a top-k ([`Gpu::top_k`](crate::Gpu::top_k), [`Gpu::plan_top_k`](crate::Gpu::plan_top_k)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopKOptions {
    /// The largest or the smallest keys.
    pub order: Order,
    /// Which algorithm.
    pub algorithm: Algorithm,
    /// Whether the result is sorted, best first (the default). Unsorted results skip a
    /// final sort where the algorithm does not sort anyway; their order is still the same
    /// every run, and equal keys still come lowest index first.
    pub sorted: bool,
    /// Tuning of [`Algorithm::SampleSelect`] and [`Algorithm::BucketSelect`] (its sample
    /// size, blocks and bracket); `None`: the measured default for the keys,
    /// [`SampleSelectPolicy::for_keys`](crate::SampleSelectPolicy::for_keys).
    pub policy: Option<crate::SampleSelectPolicy>,
}

impl TopKOptions {
    /// `order`, with [`Algorithm::Auto`] and a sorted result.
    pub fn new(order: Order) -> Self {
        Self { order, algorithm: Algorithm::Auto, sorted: true, policy: None }
    }

    /// The largest keys, [`Algorithm::Auto`], sorted.
    pub fn largest() -> Self {
        Self::new(Order::Largest)
    }

    /// The smallest keys, [`Algorithm::Auto`], sorted.
    pub fn smallest() -> Self {
        Self::new(Order::Smallest)
    }

    /// The same options with another algorithm.
    pub fn with_algorithm(self, algorithm: Algorithm) -> Self {
        Self { algorithm, ..self }
    }

    /// The same options, asking for a sorted (`true`) or unsorted (`false`) result.
    pub fn with_sorted(self, sorted: bool) -> Self {
        Self { sorted, ..self }
    }

    /// The same options with a SampleSelect policy (for [`Algorithm::SampleSelect`] and
    /// [`Algorithm::BucketSelect`]; the others ignore it).
    pub fn with_policy(self, policy: crate::SampleSelectPolicy) -> Self {
        Self { policy: Some(policy), ..self }
    }
}

/// Which selection algorithm runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SelectAlgorithm {
    /// The library chooses (SampleSelect today: it wins on every input measured).
    #[default]
    Auto,
    /// SampleSelect (Ribizel & Anzt): up to 256 buckets per level from a sorted sample,
    /// one-byte oracles, equality buckets for repeated values. About `log_256(n / 2048)`
    /// passes over shrinking candidates.
    SampleSelect,
    /// QuickSelect with a three-way branchless partition around the median of a sample:
    /// the reference algorithm (about `log_2(n / 2048)` passes).
    QuickSelect,
    /// Approximate: an input key whose exact rank is as near to the one asked for as one
    /// level of SampleSelect with `buckets` buckets (a power of two, 2 to 1024) can make it:
    /// one sample, one counting pass, then the sampled splitter whose counted rank is
    /// nearest. The [`Selection`](crate::Selection) carries that rank, so the error is
    /// known. About one read of the data.
    Approximate {
        /// Buckets of the one level: a power of two, 2 to 1024.
        buckets: usize,
    },
    /// Split-bucket partition, radix form (SBP's `S_RdSP`): the key of rank `k` as the last
    /// of the top-`k + 1` from the nearer end ([`Algorithm::SbpRadix`](crate::Algorithm::SbpRadix)),
    /// for ranks below 128 from either end (the paper's small-`K` selection); other ranks are
    /// an error. 1.3–2.2× faster than SampleSelect for such ranks at `n ≤ 2^22` on spread
    /// keys, slower beyond and on heavily repeated keys (docs/sbp.md).
    SbpRadix,
    /// Split-bucket partition, search-tree form (SBP's `S_StSPT`): as
    /// [`SelectAlgorithm::SbpRadix`] with the sampled search tree.
    SbpTree,
}

/// The tuning parameters of SampleSelect (the paper's §5), as one value.
///
/// [`SampleSelectPolicy::for_keys`] is the measured choice (what a call that names no policy
/// takes); the fields are public so that benchmarks (and users with other GPUs) can try
/// others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SampleSelectPolicy {
    /// Buckets per level are `2^bucket_bits`, 1 to 8 (one-byte oracles).
    pub bucket_bits: u32,
    /// Sampled keys per level, 2 to 2048 (one block sort).
    pub sample_size: u32,
    /// From this many keys on, a bracket's level (see [`SampleSelectPolicy::bracket`])
    /// samples `large_bracket_sample` keys instead of `sample_size`: for top-k always, for a
    /// selection only of a rank `k` with `q(1 − q) ≥ 1/16` (`q = k/n`), where a bracket keeps
    /// the most keys. A bracket holds about `8σ/√sample` of the keys, so a sample of 8192
    /// keeps half what 2048 keep (a median: 4.4 % instead of 8.8 %); the bracket's two keys
    /// are selected from the sample, not sorted out of it, and the larger sample pays from
    /// 2^27 keys (the default; H100 run 288: the f32 median of 2^27 −4 %, top-k of 262 144
    /// −3 %; at 2^24 up to 5 % slower; docs/select.md has the runs). `u64::MAX`: never.
    pub large_bracket_sample_from: u64,
    /// The bracket's sample from `large_bracket_sample_from` keys on: 2 to 8192 (the
    /// sample kernel's eight keys a thread, the default).
    pub large_bracket_sample: u32,
    /// Blocks per multiprocessor of the count and filter passes.
    pub blocks_per_sm: u32,
    /// Count with warp-aggregated atomics (`match.any.sync`) instead of per-thread runs of
    /// one bucket.
    pub warp_aggregated: bool,
    /// Approximate selection with more than 64 buckets counts first against only the 63
    /// splitters around the wanted rank's estimate: two compares for a key outside them,
    /// a tree of 6 levels (instead of up to 10) only for the few inside. It counts against
    /// all splitters only when that cannot prove the answer. The answer is the same either
    /// way.
    pub window_count: bool,
    /// Exact selection starts with a bracket (Floyd–Rivest): two sample keys a few standard
    /// deviations either side of the wanted rank's estimate, one pass that counts the keys
    /// below, at and above them and copies those strictly between (about 9 % for a median)
    /// to a buffer of `n / 8`, where the usual levels go on. No oracles or filter pass on the
    /// data; a bracket that misses (rarely) costs one more level over the data. Top-k and
    /// QuickSelect do not use it.
    pub bracket: bool,
    /// A selection's level after the first whose candidates number at most this finishes
    /// in one block: the rank's key selected by radix digits over the candidates where they
    /// lie (one read of them per byte in which the level's bucket bounds differ, from L2),
    /// instead of a level's sample, count, choose and gather and the level after it, or the
    /// sort of the base case (2048 candidates or fewer, also at the first level). 0: never.
    /// Top-k, approximate selection, QuickSelect and bucket select do not use it.
    pub radix_finish: u32,
    /// From this many keys on, the first level's sample (the bracket's, or the plain first
    /// level's) is drawn by
    /// [`SAMPLE_DRAW_BLOCKS`](gpu_select_kernels::select::sample::SAMPLE_DRAW_BLOCKS) blocks
    /// (their random reads from device memory spread over as many multiprocessors), and the
    /// last of them to finish selects or sorts it. The sample is the same either way. From
    /// 2^27 by default, where the bracket samples 8192 keys (H200 run 329, f32: medians, n/10
    /// and top-k of 1024 and 262 144 at 2^27 and 2^28 −0.6 … −2.9 %, the bracket's sample 28
    /// → 23 µs); samples of 2048 measured within the noise either way (−1.8 … +3.3 % at 2^24
    /// and 2^26). `u64::MAX`: one block always.
    pub spread_sample_from: u64,
}

impl SampleSelectPolicy {
    /// The policy for a device: the one measured best on an H100 (docs/select.md has the
    /// sweep). Only sm_90 GPUs have been measured, so every device gets it today; its grid
    /// sizes scale with the device's multiprocessors at launch.
    pub fn for_device(_limits: &DeviceLimits) -> Self {
        Self {
            bucket_bits: 8,
            sample_size: 2048,
            large_bracket_sample_from: 1 << 27,
            large_bracket_sample: BRACKET_SAMPLE,
            blocks_per_sm: 8,
            warp_aggregated: false,
            window_count: true,
            bracket: true,
            radix_finish: 1 << 15,
            spread_sample_from: 1 << 27,
        }
    }

    /// The policy for keys of `key_bytes` on a device, which [`SelectOptions`] and
    /// [`TopKOptions`](crate::TopKOptions) take when they name none: [`Self::for_device`],
    /// with half its blocks per multiprocessor (4) for 32-bit keys. Their count and bracket
    /// passes then run in one wave of blocks (H100 run 282, f32: top-k of 1024 by SampleSelect
    /// −13 % at 2^24, −6 % at 2^28; medians −7 % at 2^24, −1 % at 2^27 and 2^28); 64-bit
    /// keys were 15 % slower so (their passes want more loads in flight), 16-bit ones 1–3 %.
    /// The radix finish scales with the bytes it reads, `candidates × key bytes × key
    /// bytes` (one read per byte of rank bits, 16-bit keys' bits being 32-bit): 2^15
    /// candidates for 32-bit keys, 2^16 for 16-bit, 2^13 for 64-bit. One block reads about
    /// 25 GB/s that way (H100 run 292: 285 000 f32 candidates took 180 µs more than the
    /// levels; 46 000, a median of 2^28, broke even; f64 at 46 000 was 2.4 % slower).
    ///
    /// ```
    /// use gpu_select::{Gpu, SampleSelectPolicy};
    ///
    /// let gpu = Gpu::emulator();
    /// assert_eq!(SampleSelectPolicy::for_keys(gpu.limits(), 4).blocks_per_sm, 4);
    /// assert_eq!(SampleSelectPolicy::for_keys(gpu.limits(), 8).radix_finish, 1 << 13);
    /// assert_eq!(SampleSelectPolicy::for_keys(gpu.limits(), 2).radix_finish, 1 << 16);
    /// ```
    pub fn for_keys(limits: &DeviceLimits, key_bytes: usize) -> Self {
        let policy = Self::for_device(limits);
        let blocks_per_sm = if key_bytes == 4 { policy.blocks_per_sm / 2 } else { policy.blocks_per_sm };
        let radix_finish = match key_bytes {
            8 => policy.radix_finish >> 2,
            2 => policy.radix_finish << 1,
            _ => policy.radix_finish,
        };
        Self { blocks_per_sm, radix_finish, ..policy }
    }

    /// QuickSelect's: four buckets (a three-way partition), the median of 128 samples.
    pub fn quick_select() -> Self {
        Self {
            bucket_bits: 2,
            sample_size: 128,
            large_bracket_sample_from: u64::MAX,
            large_bracket_sample: BRACKET_SAMPLE,
            blocks_per_sm: 2,
            warp_aggregated: false,
            window_count: true,
            bracket: false,
            radix_finish: 0,
            spread_sample_from: u64::MAX,
        }
    }

    pub(crate) fn check(&self, max_bits: u32) -> Result<()> {
        if self.bucket_bits == 0 || self.bucket_bits > max_bits {
            return Err(Error::invalid(format!(
                "bucket_bits = {}: SampleSelect takes 1 to {max_bits}",
                self.bucket_bits
            )));
        }
        if self.sample_size < 2 || self.sample_size > MAX_SAMPLE {
            return Err(Error::invalid(format!(
                "sample_size = {}: SampleSelect samples 2 to {MAX_SAMPLE} keys",
                self.sample_size
            )));
        }
        if self.large_bracket_sample < 2 || self.large_bracket_sample > BRACKET_SAMPLE {
            return Err(Error::invalid(format!(
                "large_bracket_sample = {}: a bracket samples 2 to {BRACKET_SAMPLE} keys",
                self.large_bracket_sample
            )));
        }
        if self.blocks_per_sm == 0 {
            return Err(Error::invalid("blocks_per_sm = 0"));
        }
        Ok(())
    }
}

/// Options of a selection ([`Gpu::select`](crate::Gpu::select), [`Gpu::plan_select`](crate::Gpu::plan_select)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectOptions {
    /// Ranks count from the smallest ([`Order::Smallest`], the default) or the largest key.
    pub order: Order,
    /// Which algorithm.
    pub algorithm: SelectAlgorithm,
    /// Tuning parameters; `None`: the algorithm's measured default.
    pub policy: Option<SampleSelectPolicy>,
}

impl Default for SelectOptions {
    fn default() -> Self {
        Self::new(Order::Smallest)
    }
}

impl SelectOptions {
    /// Ranks in `order`, [`SelectAlgorithm::Auto`], the default policy.
    pub fn new(order: Order) -> Self {
        Self { order, algorithm: SelectAlgorithm::Auto, policy: None }
    }

    /// The same options with another algorithm.
    pub fn with_algorithm(self, algorithm: SelectAlgorithm) -> Self {
        Self { algorithm, ..self }
    }

    /// The same options with a policy.
    pub fn with_policy(self, policy: SampleSelectPolicy) -> Self {
        Self { policy: Some(policy), ..self }
    }
}

/// What a top-k ranks the keys by ([`Keys::with_transform`](crate::Keys::with_transform)). The results are the keys as
/// stored, whatever they were ranked by (the transformed key is a function of them).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum KeyTransform<K> {
    /// The keys themselves.
    #[default]
    Identity,
    /// Their absolute value ([`Key::magnitude`](crate::Key::magnitude)): floats drop the sign (NaN stays NaN and
    /// still orders above +inf), signed integers wrap (`MIN` stays `MIN`).
    Magnitude,
    /// `scale · key + offset` ([`Key::affine`](crate::Key::affine)): for floats a multiply, then an add, each
    /// rounded; for integers wrapping arithmetic. A negative scale reverses the order.
    Affine {
        /// The factor.
        scale: K,
        /// The addend.
        offset: K,
    },
}

/// Which inputs take part in a top-k ([`Keys::with_filter`](crate::Keys::with_filter)).
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub enum InputFilter<'a, K> {
    /// Every input.
    #[default]
    All,
    /// The inputs whose key (as stored, before any transform) lies from `low` to `high`,
    /// both included, in the total order of [`Key`](crate::Key) (NaN above +inf, -0.0 below +0.0).
    Range {
        /// The lowest key admitted.
        low: K,
        /// The highest key admitted.
        high: K,
    },
    /// The inputs whose byte in the mask (one per input, on the same GPU) is not zero.
    Mask(&'a DeviceBuffer<u8>),
}

/// A filter and a key transform of a top-k; the default admits every input
/// and ranks the keys themselves.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TopKFusion<'a, K> {
    /// Which inputs take part.
    pub(crate) filter: InputFilter<'a, K>,
    /// What they are ranked by.
    pub(crate) transform: KeyTransform<K>,
}

/// Which multiselect algorithm answers [`Gpu::multiselect`](crate::Gpu::multiselect) and
/// [`Gpu::quantiles`](crate::Gpu::quantiles).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MultiselectAlgorithm {
    /// Bucket multiselect above 65 536 keys, sort & choose up to them (where a sort costs
    /// less than the sample and the passes' round trips).
    #[default]
    Auto,
    /// Bucket multiselect (the DIBMS paper's algorithm on one GPU): a sample's intervals,
    /// a count pass and a filter pass over the data, then passes over the kept keys until
    /// few remain to sort. About two reads of the data for up to a few thousand ranks.
    BucketMultiselect,
    /// The baseline: a radix sort of every key (sort & choose), then each rank read at its
    /// place. Fewer than 2^32 keys.
    SortAndChoose,
}

/// How quantiles treat NaN keys (floats only; integers have none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum NanPolicy {
    /// As `numpy.quantile`: any NaN in the input makes every quantile NaN.
    #[default]
    Propagate,
    /// As `numpy.nanquantile`: NaN keys are left out (the quantiles of the other keys; NaN
    /// when every key is NaN).
    Omit,
}

/// Options of [`Gpu::quantiles`](crate::Gpu::quantiles).
///
/// ```
/// use gpu_select::{MultiselectAlgorithm, NanPolicy, QuantileMethod, QuantileOptions};
///
/// let options = QuantileOptions::new(QuantileMethod::MedianUnbiased).with_nan(NanPolicy::Omit);
/// assert_eq!(options.algorithm, MultiselectAlgorithm::Auto);
/// assert_eq!(QuantileOptions::default().method, QuantileMethod::Linear); // numpy's default
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QuantileOptions {
    /// numpy's `method`.
    pub method: crate::QuantileMethod,
    /// NaN keys: numpy's `quantile` or `nanquantile`.
    pub nan: NanPolicy,
    /// The algorithm that finds the keys.
    pub algorithm: MultiselectAlgorithm,
}

impl QuantileOptions {
    /// `method`, NaN propagating, [`MultiselectAlgorithm::Auto`].
    pub fn new(method: crate::QuantileMethod) -> Self {
        Self { method, ..Self::default() }
    }

    /// The same options with another NaN policy.
    pub fn with_nan(self, nan: NanPolicy) -> Self {
        Self { nan, ..self }
    }

    /// The same options with another algorithm.
    pub fn with_algorithm(self, algorithm: MultiselectAlgorithm) -> Self {
        Self { algorithm, ..self }
    }
}
