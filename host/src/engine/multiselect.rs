//! Bucket multiselect's host side (kernel docs: `gpu_select_kernels::select::multi`): the
//! sample and the first pass's table, the passes, and after each pass the choice of the
//! labels that go on; and sort & choose, the baseline that sorts every key.
//!
//! A run, for `m` wanted ranks of `n` keys:
//! 1. a sample of one key for every 2^14 ([`sample_size`]: 1024 to 16 384; over shards
//!    [`SAMPLE_SIZE`] in all, as it crosses the network), summed up on the GPU (over
//!    shards, the joined sample on each shard's host): its extremes `[lo, hi]` are cut into
//!    [`FIRST_SLOTS`] slots of equal width in ordered bits, and the [`MAX_LABELS`] labels
//!    shared out among the slots in proportion to their sample keys (a power of two each:
//!    the paper's kernel density estimate as a table). Keys below `lo` join the first
//!    label; keys past the last slot (which reaches past `hi` to its whole width) have a
//!    label, and NaN another;
//! 2. the count pass over the data (the first read);
//! 3. the labels holding a wanted rank are *active*. Every label's range of bits is known
//!    exactly here, so a label of one bit pattern answers its ranks at once (all keys
//!    equal, a heavily repeated value). Each other active label is split into a power of two
//!    of children, in proportion to its count; the filter pass keeps the active keys (the
//!    second read of the data, the last one), but not those whose child is one bit pattern:
//!    those are counted only;
//! 4. more filters over the kept keys, until every active label holds at most
//!    [`Tuning::multiselect_pick_max`](crate::Tuning) keys (2^18; most of the count's
//!    labels of spread data hold a few times `n / 8192` keys, so the data's second read is
//!    often the last pass, and the first and last labels hold the keys below and above
//!    the sample, about `n / (sample + 1)` more): the last pass places the active labels' keys
//!    together by label, with no split and no counts, and one block per rank picks its key
//!    among its label's (a radix select). After [`MAX_FILTERS`] filters, or when more than
//!    half the labels would be active, the last filter's keys are sorted instead and each
//!    rank read at its place. Each split at least halves a label's range of bits, so a run
//!    ends.
//!
//! Each step is exact: labels are counted, not estimated, and every answer is read from the
//! keys that can hold it or from a label of one value. The sample only decides how fast it
//! goes.

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::select::multi::{
    BasesLayout, BlockCountsLayout, FIRST_SLOTS, FirstPass, GatherKeysParams, MAX_LABELS, MAX_MULTI_BLOCKS,
    MULTI_THREADS, MultiParams, PLACE_SLOTS, PassLayout, Pick, PickLayout, PickParams, PlaceLayout,
    SMALL_THREADS, SampleLayout, SampleSummaryParams, Split, SummaryWords, TOTALS_ROWS,
};
use gpu_select_kernels::{Key, OrderedBits};

use super::sort_choose::SortChoosePlan;
use crate::buffer::{DeviceBuffer, DeviceValue};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::options::MultiselectAlgorithm;
use crate::results::TopK;
use crate::{Order, SelectKey};

// Safety: `#[repr(C)]` of a u64 and two u32 (Split, Pick): no padding; every bit pattern
// is a value.
unsafe impl DeviceValue for Split {}
unsafe impl DeviceValue for Pick {}

/// Keys in the sample over shards, and the least on one GPU.
pub(crate) const SAMPLE_SIZE: usize = 1024;
/// On one GPU the sample grows with the keys, one for every this many, so that the labels
/// below and above it hold about this many keys each (a quick pick, whatever a quantile
/// near 0 or 1 asks of them).
const KEYS_PER_SAMPLE_KEY: u64 = 1 << 14;

/// Keys in the sample of `n` keys on one GPU: one for every [`KEYS_PER_SAMPLE_KEY`], at
/// least [`SAMPLE_SIZE`] and at most `most` ([`Tuning::multiselect_sample`](crate::Tuning)).
fn sample_size(n: u64, most: u32) -> u64 {
    (n / KEYS_PER_SAMPLE_KEY).clamp(SAMPLE_SIZE as u64, (most as u64).max(SAMPLE_SIZE as u64))
}
/// Inputs of at most this many keys are sorted whole (with `Auto`).
pub(crate) const SORT_WHOLE_MAX: usize = 1 << 16;
/// Blocks per multiprocessor of the count and filter passes: one wave (the filter takes up
/// to 80 registers per thread on sm_90, so three blocks of 256 threads fit; each pass takes
/// 53 KiB of shared memory).
const BLOCKS_PER_SM: u32 = 3;
/// Filters at most before the kept keys are sorted: each split at least halves a label's
/// range of bits, so a run needs about 64 / 13 of them; more means labels that split
/// poorly (keys in a few bit patterns of a wide range).
const MAX_FILTERS: u32 = 8;
/// Filters at most in a run over shards: filters there read only the kept keys, and each
/// split at least halves a label's range of bits, so 64 always end it.
const MAX_SHARED_FILTERS: u32 = 64;
/// The fixed seed of the sample positions: the same passes every run.
const SAMPLE_SEED: u64 = 0x2c1b_3c6d_7a4e_95f1;

/// Keys of the wanted ranks, in the order asked, and what the run took.
#[derive(Debug)]
pub(crate) struct MultiOutcome<K> {
    /// The ranks asked for (from `ranks_of`).
    pub(crate) ranks: Vec<u64>,
    /// The key of each rank.
    pub(crate) values: Vec<K>,
    /// Reads of the whole input (bucket multiselect: 2 at most, 1 when the count pass
    /// answered every rank).
    pub(crate) data_passes: u32,
}

/// The key whose ordered bits are `bits`.
fn key_of<K: Key>(bits: u64) -> K {
    K::from_ordered(K::Bits::from_u64(bits))
}

/// The ordered bits of NaN for float keys (every NaN has them; every key at or above them
/// is NaN); `None` for integers.
pub(crate) fn nan_bits<K: Key>() -> Option<u64> {
    let nan = K::from_f64(f64::NAN);
    nan.to_f64().is_nan().then(|| nan.to_ordered().to_u64())
}

/// Bit length of `x` (0 for 0).
fn bit_length(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// A run of one pass's labels: `count` labels from `first`, label `first + i` holding the
/// ordered bits from `start + (i << shift)` to `span` more, but none past `end` (a slot's
/// children in the first pass, an active label's in a filter); a label of any range is a
/// run of one ([`LabelRun::single`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LabelRun {
    first: u32,
    count: u32,
    start: u64,
    shift: u32,
    span: u64,
    end: u64,
}

impl LabelRun {
    /// Labels `first..first + count`, each `2^shift` bit patterns from `start`, the last cut
    /// at `end` (`shift` below 64).
    fn children(first: u32, count: u32, start: u64, shift: u32, end: u64) -> Self {
        Self { first, count, start, shift, span: (1u64 << shift) - 1, end }
    }

    /// Label `first` alone, holding `[low, high]` (empty when `low > high`).
    fn single(first: u32, low: u64, high: u64) -> Self {
        Self { first, count: 1, start: low, shift: 0, span: u64::MAX, end: high }
    }

    /// The range of the run's `i`-th label (`i < count`).
    fn range(&self, i: u32) -> (u64, u64) {
        let low = self.start + ((i as u64) << self.shift);
        (low, low.saturating_add(self.span).min(self.end))
    }
}

/// One pass's labels: the exact range of ordered bits each label holds (empty when
/// `low > high`), in label (and key) order, as runs of labels of equal width (at most one
/// per first-pass slot or active label, so a pass of 8192 labels costs the host a few
/// hundred runs, not 8192 ranges).
#[derive(Clone, Debug, Default)]
struct LabelSpace {
    runs: Vec<LabelRun>,
    /// The run of the last label looked up: labels are mostly looked up in ascending order
    /// (the ranks', the active labels'), so the next one is in it or a few runs on.
    last_run: std::cell::Cell<usize>,
}

impl LabelSpace {
    fn labels(&self) -> usize {
        self.runs.last().map_or(0, |run| (run.first + run.count) as usize)
    }

    /// Appends a run, whose first label must be the next one.
    fn push(&mut self, run: LabelRun) {
        debug_assert_eq!(run.first as usize, self.labels());
        self.runs.push(run);
    }

    /// The range of bits `label` holds (`label < labels()`). In ascending order of labels,
    /// all the lookups of a pass walk its runs once (a binary search per lookup took about
    /// 0.1 ms of 1001 quantiles' host work on an H200 machine's CPU).
    fn range(&self, label: u32) -> (u64, u64) {
        let mut at = self.last_run.get();
        if at >= self.runs.len() || self.runs[at].first > label {
            at = 0;
        }
        while at + 1 < self.runs.len() && self.runs[at + 1].first <= label {
            at += 1;
        }
        self.last_run.set(at);
        let run = &self.runs[at];
        run.range(label - run.first)
    }

    /// The range of bits `label` can hold within the data's extremes (`smallest`,
    /// `largest`: ordered bits).
    fn range_within(&self, label: u32, (smallest, largest): (u64, u64)) -> (u64, u64) {
        let (low, high) = self.range(label);
        (low.max(smallest), high.min(largest))
    }
}

/// The sample as the first pass needs it: the extremes of its keys that are not NaN
/// (ordered bits; 0 when there are none), how many those are, and how many fall in each
/// slot of the table over the extremes (`((hi − lo) >> slot_shift) + 1` slots).
#[derive(Clone, Debug, PartialEq, Eq)]
struct SampleSummary {
    lo: u64,
    hi: u64,
    finite: u64,
    per_slot: Vec<u64>,
}

impl SampleSummary {
    /// The summary of sample keys' ordered bits, in any order (over shards: their samples
    /// joined).
    fn of<K: Key>(sample: &[u64]) -> Self {
        // NaN's bits are above every other key's: one comparison leaves NaN out.
        let nan = nan_bits::<K>();
        let is_finite = |bits: u64| nan.is_none_or(|nan| bits < nan);
        let (mut lo, mut hi, mut finite) = (u64::MAX, 0u64, 0u64);
        for &bits in sample.iter().filter(|&&bits| is_finite(bits)) {
            (lo, hi, finite) = (lo.min(bits), hi.max(bits), finite + 1);
        }
        if finite == 0 {
            (lo, hi) = (0, 0);
        }
        let slot_shift = FirstPass::slot_shift_of(lo, hi);
        let mut per_slot = vec![0u64; ((hi - lo) >> slot_shift) as usize + 1];
        for &bits in sample.iter().filter(|&&bits| is_finite(bits)) {
            per_slot[((bits - lo) >> slot_shift) as usize] += 1;
        }
        Self { lo, hi, finite, per_slot }
    }

    /// The summary the `multiselect_sample` kernel wrote ([`SummaryWords`]).
    fn from_words(words: &[u64]) -> Self {
        let (lo, hi) = (words[SummaryWords::SMALLEST], words[SummaryWords::LARGEST]);
        let slots = ((hi - lo) >> FirstPass::slot_shift_of(lo, hi)) as usize + 1;
        let per_slot = words[SummaryWords::SLOTS..SummaryWords::SLOTS + slots].to_vec();
        Self { lo, hi, finite: words[SummaryWords::FINITE], per_slot }
    }
}

/// The first pass from the sample's summary: [`FirstPass`], its slot table, and its labels.
///
/// `nearest`: each slot's share of labels rounded to the nearest power of two within the
/// budget (one GPU: smaller labels); else rounded down (over shards, where every label's
/// count crosses the network: rounding to the nearest made DIBMS send about 22 % more
/// bytes, emulator, `dibms_bytes_do_not_grow_with_the_keys`).
fn first_pass<K: Key>(sample: &SampleSummary, nearest: bool) -> (FirstPass, Vec<u32>, LabelSpace) {
    let nan = nan_bits::<K>();
    let key_max = K::Bits::MAX.to_u64();
    let SampleSummary { lo, hi, finite, ref per_slot } = *sample;
    let slot_shift = FirstPass::slot_shift_of(lo, hi);
    let slots = per_slot.len();
    // Keys' bits end at NaN's (every NaN key has them); the last slot reaches as far as the
    // label above the slots, or to the last key.
    let above_high = nan.map_or(key_max, |nan| nan - 1);
    let slot_end = lo as u128 + ((slots as u128) << slot_shift);
    let limit = if slot_end <= key_max as u128 { (slots as u64) << slot_shift } else { key_max - lo };
    // Labels in proportion to the sample (a quarter key's weight for an empty slot), a power
    // of two per slot, no finer than single bit patterns: the power nearest to the slot's
    // share (in log2), then, while over the budget, the one below it for the slots most
    // above their share. (Rounding every share down used about 72 % of the labels, so a
    // label held 1.4 times the keys it needed to.)
    let budget = MAX_LABELS - 3;
    let weight = finite as f64 + 0.25 * slots as f64;
    let slot_range = |slot: usize| {
        let slot_low = lo + ((slot as u64) << slot_shift);
        (slot_low, slot_low.saturating_add((1u64 << slot_shift) - 1).min(above_high))
    };
    let labels_of = |slot: usize, exponent: u32| {
        let (slot_low, slot_high) = slot_range(slot);
        (((slot_high - slot_low) >> (slot_shift - exponent)) + 1) as usize
    };
    let share: Vec<f64> =
        per_slot.iter().map(|&count| budget as f64 * (count as f64 + 0.25) / weight).collect();
    // The power of two nearest a share (at least 1) in log2, or the one below it, from the
    // share's bits rather than `log2` (a libm call a slot): its binary exponent, one more
    // when the share is at least √2 times that power.
    let exponent_of = |wanted: f64| {
        let wanted = wanted.max(1.0);
        let below = ((wanted.to_bits() >> 52) - 1023) as u32;
        let up = nearest && wanted >= std::f64::consts::SQRT_2 * (1u64 << below) as f64;
        (below + up as u32).min(slot_shift)
    };
    let mut exponents: Vec<u32> = share.iter().map(|&wanted| exponent_of(wanted)).collect();
    let mut total: usize = (0..slots).map(|slot| labels_of(slot, exponents[slot])).sum();
    if total > budget {
        // Each slot's ratio computed once, not at every comparison (the sort's divisions took
        // most of this function's 40–80 µs).
        let mut above: Vec<(f64, usize)> = (0..slots)
            .filter(|&slot| exponents[slot] > 0)
            .map(|slot| ((1u64 << exponents[slot]) as f64 / share[slot], slot))
            .collect();
        above.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, slot) in above {
            if total <= budget {
                break;
            }
            total -= labels_of(slot, exponents[slot]) - labels_of(slot, exponents[slot] - 1);
            exponents[slot] -= 1;
        }
    }
    let mut space = LabelSpace::default();
    let mut table = vec![0u32; FIRST_SLOTS];
    for (slot, &exponent) in exponents.iter().enumerate() {
        let (slot_low, slot_high) = slot_range(slot);
        let shift = slot_shift - exponent;
        let base = space.labels() as u32;
        table[slot] = FirstPass::entry(slot as u32, slot_shift, base, shift);
        let children = ((slot_high - slot_low) >> shift) + 1;
        let run = LabelRun::children(base, children as u32, slot_low, shift, slot_high);
        if slot == 0 {
            // The keys below `lo` count as `lo`: the first label holds them.
            space.push(LabelRun::single(0, 0, run.range(0).1));
            if children > 1 {
                space.push(LabelRun { first: 1, count: run.count - 1, start: run.range(1).0, ..run });
            }
        } else {
            space.push(run);
        }
    }
    // The label above the slots: every `d` clamped to `limit` reaches its entry.
    let above = space.labels() as u32;
    table[slots] = FirstPass::entry(slots as u32, slot_shift, above, slot_shift);
    space.push(if slot_end <= above_high as u128 {
        LabelRun::single(above, slot_end as u64, above_high)
    } else {
        LabelRun::single(above, 1, 0)
    });
    let mut first = FirstPass { lo, limit, nan: nan.unwrap_or(u64::MAX), slot_shift, nan_label: 0 };
    first.nan_label = match nan {
        Some(nan) => {
            // Every NaN key has these bits (the patterns above them are no key's).
            space.push(LabelRun::single(above + 1, nan, nan));
            above + 1
        }
        // All ones are a key like the others: the table's label.
        None => first.table_label(K::Bits::MAX, |slot| table[slot]),
    };
    (first, table, space)
}

/// The split of an active label's range `[low, high]` into at most `2^exponent` children
/// from label `base`, and the children's run of labels.
fn split<K: Key>(low: u64, high: u64, exponent: u32, base: u32, finish: bool) -> (Split, LabelRun) {
    let width = K::Bits::BITS;
    // One child to finish (two for a range of the keys' whole width); else as many as asked.
    let wanted = if finish { 0 } else { exponent };
    let shift = bit_length(high - low).saturating_sub(wanted).min(width - 1);
    let children = ((high - low) >> shift) + 1;
    (Split { start: low, shift, base }, LabelRun::children(base, children as u32, low, shift, high))
}

/// Each active label's split exponent (at most `2^exponent` children), the `label_budget`
/// labels of the next pass shared out: two each, and the rest in proportion to the labels'
/// `counts` — except that a label whose range (`ranges`, exact within the data's extremes)
/// has no more bit patterns than its share gets a child per pattern (its keys are then
/// counted, never copied, and its ranks answered) and leaves the rest of its share to the
/// others. (In proportion alone, the labels of a few heavy values, such as Zipf-like keys'
/// small integers, were split by 2^6–2^8 over ranges of 2^9–2^12 patterns, and took three
/// more filters to reach single values: emulator, 2^20 keys.)
fn split_exponents(ranges: &[(u64, u64)], counts: &[u64], label_budget: usize) -> Vec<u32> {
    let mut spare = (label_budget - 2 * ranges.len().min(label_budget / 2)) as u128;
    let mut kept: u128 = counts.iter().map(|&c| c as u128).sum();
    let share = |spare: u128, kept: u128, count: u64| 2 + spare * count as u128 / kept.max(1);
    let patterns = |(low, high): (u64, u64)| (high - low) as u128 + 1;
    let mut whole = vec![false; ranges.len()];
    // Taking a label whole frees part of its share, so the others' shares only grow: repeat
    // until no more labels fit.
    loop {
        let mut took = false;
        for (i, &range) in ranges.iter().enumerate() {
            if !whole[i] && patterns(range) <= share(spare, kept, counts[i]) {
                whole[i] = true;
                took = true;
                spare -= patterns(range) - 2;
                kept -= counts[i] as u128;
            }
        }
        if !took {
            break;
        }
    }
    ranges
        .iter()
        .enumerate()
        .map(
            |(i, &(low, high))| {
                if whole[i] { bit_length(high - low) } else { share(spare, kept, counts[i]).ilog2() }
            },
        )
        .collect()
}

/// A wanted rank on its way: its label in the last pass and its place among that label's
/// keys, or its key.
#[derive(Clone, Copy, Debug)]
enum Progress {
    Pending { label: u32, offset: u64 },
    Found(u64),
}

/// The labels of the pending ranks, ascending (as the ranks are), each once.
fn active_labels(progress: &[Progress]) -> Vec<u32> {
    let mut active: Vec<u32> = progress
        .iter()
        .filter_map(|p| match p {
            Progress::Pending { label, .. } => Some(*label),
            Progress::Found(_) => None,
        })
        .collect();
    active.dedup();
    active
}

/// Each unique wanted rank's label and offset from one pass's totals (`ranks` ascending).
fn place_ranks(totals: &[u64], ranks: &[u64]) -> Vec<Progress> {
    let mut out = Vec::with_capacity(ranks.len());
    let (mut label, mut before) = (0usize, 0u64);
    for &rank in ranks {
        while before + totals[label] <= rank {
            before += totals[label];
            label += 1;
        }
        out.push(Progress::Pending { label: label as u32, offset: rank - before });
    }
    out
}

impl Gpu {
    /// The keys of ranks `ranks_of(n, nan_count)` (from 0, smallest first, in the total order
    /// of [`Key`]) of `keys`; `ranks_of` sees how many keys are NaN before it names ranks
    /// (quantiles that leave NaN out count without them). Waits for the result.
    pub(crate) fn run_multiselect<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        algorithm: MultiselectAlgorithm,
        ranks_of: impl FnOnce(u64, u64) -> Result<Vec<u64>>,
    ) -> Result<MultiOutcome<K>> {
        let n = keys.len();
        if n == 0 {
            return Err(Error::EmptyInput);
        }
        let sort_whole = match algorithm {
            MultiselectAlgorithm::SortAndChoose => true,
            MultiselectAlgorithm::Auto => n <= SORT_WHOLE_MAX,
            MultiselectAlgorithm::BucketMultiselect => false,
        };
        if sort_whole {
            return self.multiselect_by_sort(keys, ranks_of);
        }
        BucketRun::new(self, keys)?.run(&Alone, ranks_of)
    }

    /// Bucket multiselect over this GPU's shard of keys spread over several shards, each
    /// with its own run that shares what `exchange` carries (DIBMS): the same ranks of all
    /// the shards' keys on every shard. Waits for the result.
    pub(crate) fn run_shared_multiselect<K: SelectKey>(
        &self,
        shard: &DeviceBuffer<K>,
        exchange: &dyn Exchange,
        ranks_of: impl FnOnce(u64, u64) -> Result<Vec<u64>>,
    ) -> Result<MultiOutcome<K>> {
        let run = BucketRun::new(self, shard);
        // A shard that cannot start its run says so in the run's first exchange.
        let failed = match run {
            Ok(run) => return run.run(exchange, ranks_of),
            Err(error) => error,
        };
        exchange.sum(1, Err(failed))?;
        unreachable!("an exchange of an error returns it")
    }

    /// Sort & choose over shards: every shard's keys gathered at one shard, which sorts
    /// them (on its GPU) and answers the ranks (the distributed baseline). Waits for the
    /// result.
    pub(crate) fn run_shared_sort_and_choose<K: SelectKey>(
        &self,
        shard: &DeviceBuffer<K>,
        exchange: &dyn Exchange,
        ranks_of: impl FnOnce(u64, u64) -> Result<Vec<u64>>,
    ) -> Result<MultiOutcome<K>> {
        let local = self.download(shard).map(|keys| keys.iter().map(|k| k.to_ordered().to_u64()).collect());
        let n = exchange.sum(1, Ok(vec![shard.len() as u64]))?[0];
        if n == 0 {
            return Err(Error::EmptyInput);
        }
        let mut ranks_of = Some(ranks_of);
        let mut answered_ranks = None;
        let answer = exchange.answer(local, size_of::<K>(), &mut |all: Vec<u64>| {
            let keys: Vec<K> = all.into_iter().map(key_of::<K>).collect();
            let ranks_of = ranks_of.take().expect("answered once");
            let mut nan_count = 0;
            let outcome = self.multiselect_by_sort(&self.upload(&keys)?, |n, nans| {
                nan_count = nans;
                ranks_of(n, nans)
            })?;
            answered_ranks = Some(outcome.ranks);
            // The NaN count travels with the keys: every shard names its ranks from it.
            Ok([nan_count]
                .into_iter()
                .chain(outcome.values.iter().map(|k| k.to_ordered().to_u64()))
                .collect())
        })?;
        let ranks = match (answered_ranks, ranks_of.take()) {
            (Some(ranks), _) => ranks,
            (None, Some(ranks_of)) => checked_ranks(ranks_of(n, answer[0])?, n)?,
            (None, None) => unreachable!("ranks are named by the shard that answered or here"),
        };
        let values = answer[1..].iter().map(|&bits| key_of::<K>(bits)).collect();
        Ok(MultiOutcome { ranks, values, data_passes: 0 })
    }

    /// Sort & choose: every key sorted, each rank read at its place.
    fn multiselect_by_sort<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        ranks_of: impl FnOnce(u64, u64) -> Result<Vec<u64>>,
    ) -> Result<MultiOutcome<K>> {
        let sorted = self.sorted_keys(keys)?;
        let n = keys.len() as u64;
        // NaN sorts last: none when the last key is not NaN (one read), else the first NaN
        // by bisection over single reads.
        let nan_count = match nan_bits::<K>() {
            None => 0,
            Some(nan) => {
                let is_nan = |at: u64| -> Result<bool> {
                    let mut value = [K::default()];
                    self.copy_from_address(sorted.global_ptr().offset(at).address(), &mut value)?;
                    Ok(value[0].to_ordered().to_u64() >= nan)
                };
                let (mut low, mut high) = (0u64, n);
                if !is_nan(n - 1)? {
                    low = n;
                }
                while low < high {
                    let middle = low + (high - low) / 2;
                    if is_nan(middle)? {
                        high = middle;
                    } else {
                        low = middle + 1;
                    }
                }
                n - low
            }
        };
        let ranks = checked_ranks(ranks_of(n, nan_count)?, n)?;
        let values = self.gather_keys(&sorted, Some(&ranks), ranks.len())?;
        Ok(MultiOutcome { ranks, values, data_passes: 0 })
    }

    /// `keys` sorted ascending (sort & choose of all of them).
    fn sorted_keys<K: SelectKey>(&self, keys: &DeviceBuffer<K>) -> Result<DeviceBuffer<K>> {
        let n = keys.len();
        let plan = SortChoosePlan::new(n as u64, self.limits().multiprocessors)?;
        let bytes = super::sort_choose::SortChooseWorkspace::new(&plan, n, size_of::<K>()).bytes;
        // Buffers are freed in their stream's order: dropping the workspace after the
        // launches is safe.
        let workspace = self.alloc_uninit::<u8>(bytes)?;
        let mut out = TopK { values: self.alloc_uninit::<K>(n)?, indices: self.alloc_uninit::<u64>(n)? };
        let base = workspace.global_ptr().address();
        self.run_sort_choose(keys, n, Order::Smallest, &plan, base, &mut out)?;
        Ok(out.values)
    }

    /// The summary of `count` keys of `keys` (more than 0) at the sample's pseudo-random
    /// positions, from the GPU: the keys gathered there, then summed up by one block.
    fn sample_summary<K: SelectKey>(&self, keys: &DeviceBuffer<K>, count: u64) -> Result<SampleSummary> {
        let sample = self.alloc_uninit::<K>(count as usize)?;
        self.queue_gather(keys, None, &sample)?;
        let summary = self.alloc_uninit::<u64>(SummaryWords::WORDS)?;
        let nan = nan_bits::<K>();
        let params = SampleSummaryParams {
            keys: sample.global_ptr(),
            count,
            nan: nan.unwrap_or(0),
            has_nan: nan.is_some() as u32,
            reserved: 0,
            summary: summary.global_ptr(),
        };
        let shape = LaunchShape {
            grid: (1, 1),
            block_threads: SMALL_THREADS,
            shared_bytes: SampleLayout::new().bytes,
        };
        self.launch(K::MULTISELECT_SAMPLE, shape, params)?;
        self.read_on_host(&summary, SampleSummary::from_words)
    }

    /// The keys at `positions` of `keys` (the sample's pseudo-random positions when
    /// `None`, `count` of them), read back.
    fn gather_keys<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        positions: Option<&[u64]>,
        count: usize,
    ) -> Result<Vec<K>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let out = self.alloc_uninit::<K>(count)?;
        self.queue_gather(keys, positions, &out)?;
        self.download(&out)
    }

    /// Queues the gather of `out.len()` keys of `keys` (more than 0) at `positions`, or at
    /// the sample's pseudo-random positions when `None`, into `out`.
    fn queue_gather<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        positions: Option<&[u64]>,
        out: &DeviceBuffer<K>,
    ) -> Result<()> {
        let positions_on_device = positions.map(|p| self.upload(p)).transpose()?;
        let params = GatherKeysParams {
            keys: keys.global_ptr(),
            positions: positions_on_device.as_ref().map_or(GlobalPtr::null(), |p| p.global_ptr()),
            out: out.global_ptr(),
            len: out.len() as u64,
            keys_len: keys.len() as u64,
            seed: SAMPLE_SEED,
            period: 0,
            row_stride: 0,
        };
        // The positions' buffer is freed in the stream's order, after the launch.
        self.launch_gather(params)
    }

    /// Queues the gather kernel on `params` (`params.len` outputs, more than 0).
    pub(crate) fn launch_gather<K: SelectKey>(&self, params: GatherKeysParams<K>) -> Result<()> {
        let blocks = params.len.div_ceil(SMALL_THREADS as u64).min(1024) as u32;
        let shape = LaunchShape { grid: (blocks, 1), block_threads: SMALL_THREADS, shared_bytes: 0 };
        self.launch(K::MULTISELECT_GATHER, shape, params)
    }
}

/// Checks that every rank is below `n`.
pub(crate) fn checked_ranks(ranks: Vec<u64>, n: u64) -> Result<Vec<u64>> {
    if let Some(&bad) = ranks.iter().find(|&&r| r >= n) {
        return Err(Error::k_out_of_range(
            bad as usize,
            0,
            n as usize - 1,
            format!("ranks are below the key count, {n}"),
        ));
    }
    Ok(ranks)
}

/// How a filter pass ends the run, or not (the pass that places and picks, with no filter,
/// is chosen before one is built).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Finish {
    /// Subdivide the active labels again.
    No,
    /// Keep the active labels' keys and sort them ([`MAX_FILTERS`] filters done, or too
    /// many active labels to subdivide).
    Sort,
    /// A run over shards: every active label holds at most [`Exchange::gather_max`] keys
    /// (or the run cannot go on, as for `Sort`): every shard's kept keys are gathered at
    /// one shard, which sorts them and answers the ranks.
    Gather,
}

/// What a bucket multiselect run shares with the runs over the other shards of the same
/// keys (DIBMS, [`crate::distributed`]); a run over one GPU's keys shares nothing
/// ([`Alone`]). Each call takes this shard's part or its error, so that a shard that fails
/// makes every shard's run fail alike instead of leaving the others waiting.
pub(crate) trait Exchange {
    /// `None` for a run alone; for shards, when their kept keys are gathered to answer.
    fn gathering(&self) -> Option<Gathering>;
    /// Element-wise sums over the shards of `local` (`len` words on every shard).
    fn sum(&self, len: usize, local: Result<Vec<u64>>) -> Result<Vec<u64>>;
    /// Element-wise maxima over the shards of `local` (`len` words).
    fn max(&self, len: usize, local: Result<Vec<u64>>) -> Result<Vec<u64>>;
    /// Every shard's `local`, in shard order (keys: sent at `width` bytes each).
    fn concat(&self, local: Result<Vec<u64>>, width: usize) -> Result<Vec<u64>>;
    /// Every shard's keys (ordered bits, sent at `width` bytes each) gathered at one shard,
    /// which computes `answer` from all of them; every shard gets that answer.
    fn answer(
        &self,
        local: Result<Vec<u64>>,
        width: usize,
        answer: &mut dyn FnMut(Vec<u64>) -> Result<Vec<u64>>,
    ) -> Result<Vec<u64>>;
}

/// When a run over shards gathers the kept keys at one shard to answer: once every active
/// label holds at most `label_max` keys, or once the kept keys take fewer bytes than the
/// label totals of one more filter (each shard's words).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gathering {
    pub(crate) label_max: u64,
    pub(crate) shards: u64,
}

/// A run over all the keys, on one GPU: nothing to share.
pub(crate) struct Alone;

impl Exchange for Alone {
    fn gathering(&self) -> Option<Gathering> {
        None
    }
    fn sum(&self, _len: usize, local: Result<Vec<u64>>) -> Result<Vec<u64>> {
        local
    }
    fn max(&self, _len: usize, local: Result<Vec<u64>>) -> Result<Vec<u64>> {
        local
    }
    fn concat(&self, local: Result<Vec<u64>>, _width: usize) -> Result<Vec<u64>> {
        local
    }
    fn answer(
        &self,
        local: Result<Vec<u64>>,
        _width: usize,
        answer: &mut dyn FnMut(Vec<u64>) -> Result<Vec<u64>>,
    ) -> Result<Vec<u64>> {
        answer(local?)
    }
}

/// Host tables bound for the device together, each at a 16-byte boundary of one byte
/// buffer: a round's tables go in one upload, not four (each copy is a call to the driver,
/// and a filter's upload waits for the stream).
#[derive(Default)]
struct Tables {
    bytes: Vec<u8>,
}

impl Tables {
    /// Appends `values`; returns their byte offset.
    fn push<T: DeviceValue>(&mut self, values: &[T]) -> u64 {
        let at = self.bytes.len().next_multiple_of(16);
        self.bytes.resize(at, 0);
        // Safety: a `DeviceValue` has no padding (every byte is initialised) and no pointers.
        let raw = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)) };
        self.bytes.extend_from_slice(raw);
        at as u64
    }
}

/// What the last pass reads: the first pass's labels (over the data) or the last filter's
/// candidates and their labels.
struct LastPass<'a, K> {
    first: FirstPass,
    table: &'a DeviceBuffer<u32>,
    candidates: Option<&'a (DeviceBuffer<K>, DeviceBuffer<u32>)>,
}

/// One bucket multiselect run: its buffers and launch parameters.
struct BucketRun<'a, K: SelectKey> {
    gpu: &'a Gpu,
    keys: &'a DeviceBuffer<K>,
    blocks: u32,
    rows: DeviceBuffer<u32>,
    /// The totals per label, then the count pass's extremes.
    totals: DeviceBuffer<u64>,
    /// Keys each block kept in the last filter (the next filter's input regions), and
    /// keeps in the next.
    counts: [DeviceBuffer<u64>; 2],
}

impl<'a, K: SelectKey> BucketRun<'a, K> {
    fn new(gpu: &'a Gpu, keys: &'a DeviceBuffer<K>) -> Result<Self> {
        let n = keys.len() as u64;
        let blocks = n
            .div_ceil(gpu_select_kernels::block::tiles::TILE)
            .min((gpu.limits().multiprocessors * BLOCKS_PER_SM) as u64)
            .clamp(1, MAX_MULTI_BLOCKS as u64) as u32;
        let counts = [gpu.alloc_uninit::<u64>(blocks as usize)?, gpu.alloc_uninit::<u64>(blocks as usize)?];
        Ok(Self {
            gpu,
            keys,
            blocks,
            rows: gpu.alloc_uninit::<u32>(blocks as usize * MAX_LABELS)?,
            totals: gpu.alloc_uninit::<u64>(MAX_LABELS + 2)?,
            counts,
        })
    }

    fn params(&self) -> MultiParams<K> {
        MultiParams {
            keys: self.keys.global_ptr(),
            len: self.keys.len() as u64,
            labels_in: GlobalPtr::null(),
            counts_in: GlobalPtr::null(),
            table: GlobalPtr::null(),
            active: GlobalPtr::null(),
            slot_of: GlobalPtr::null(),
            slots: GlobalPtr::null(),
            counts_out: GlobalPtr::null(),
            starts: GlobalPtr::null(),
            slot_labels: GlobalPtr::null(),
            bases: GlobalPtr::null(),
            keys_out: GlobalPtr::null(),
            labels_out: GlobalPtr::null(),
            rows: self.rows.global_ptr(),
            totals: self.totals.global_ptr(),
            extremes: self.totals.global_ptr().offset(MAX_LABELS as u64),
            first: FirstPass::default(),
            labels: 0,
            parent_labels: 0,
            blocks: self.blocks,
        }
    }

    fn pass_shape(&self) -> LaunchShape {
        LaunchShape {
            grid: (self.blocks, 1),
            block_threads: MULTI_THREADS,
            shared_bytes: PassLayout::new().bytes,
        }
    }

    /// Sums the rows of the pass just queued into the totals (cleared first).
    fn queue_totals(&self, labels: u32) -> Result<()> {
        self.gpu.clear_on_device(self.totals.global_ptr().address(), labels as usize * 8)?;
        self.queue_cleared_totals(labels)
    }

    /// Sums the rows of the pass just queued into the totals, cleared before that pass.
    fn queue_cleared_totals(&self, labels: u32) -> Result<()> {
        let params = MultiParams { labels, ..self.params() };
        let grid = (labels.div_ceil(SMALL_THREADS).max(1), self.blocks.div_ceil(TOTALS_ROWS));
        let shape = LaunchShape { grid, block_threads: SMALL_THREADS, shared_bytes: 0 };
        self.gpu.launch(K::MULTISELECT_TOTALS, shape, params)
    }

    /// Reads the first `labels` totals back.
    fn read_totals(&self, labels: u32) -> Result<Vec<u64>> {
        self.gpu.read_on_host(&self.totals, |totals| totals[..labels as usize].to_vec())
    }

    /// The count pass with the first pass's table: its device copy, and the totals of its
    /// `labels` labels followed by the extremes (`!smallest`, `largest` ordered bits).
    fn count_pass(
        &self,
        first: FirstPass,
        table: &[u32],
        labels: u32,
    ) -> Result<(DeviceBuffer<u32>, Vec<u64>)> {
        let gpu = self.gpu;
        gpu.waiting_on_error(|| {
            // SAFETY: `table` outlives this closure, which ends in a read-back that waits
            // for the stream (or, failing, in a wait).
            let table_on_device = unsafe { gpu.upload_queued(table)? };
            // Every total and the extremes cleared at once: the totals kernel adds to the
            // first `labels`, the count keeps the extremes by atomics, and the one copy below
            // reads the totals past `labels` too, which no kernel writes (compute-sanitizer's
            // initcheck, run 155).
            gpu.clear_on_device(self.totals.global_ptr().address(), (MAX_LABELS + 2) * 8)?;
            let count = MultiParams { table: table_on_device.global_ptr(), first, labels, ..self.params() };
            gpu.launch(K::MULTISELECT_COUNT, self.pass_shape(), count)?;
            self.queue_cleared_totals(labels)?;
            // The totals and the extremes come back in one copy.
            let totals_and_extremes = gpu.read_on_host(&self.totals, |all| {
                let mut kept = all[..labels as usize].to_vec();
                kept.extend_from_slice(&all[MAX_LABELS..MAX_LABELS + 2]);
                kept
            })?;
            Ok((table_on_device, totals_and_extremes))
        })
    }

    /// The last pass over the data or the last filter's candidates: each active label's
    /// keys placed together (`bases`, then `place`), then each pending rank picked among
    /// its label's keys. One shard only: the totals are this run's own.
    fn place_and_pick(
        &self,
        last: &LastPass<'_, K>,
        space: &LabelSpace,
        totals: &[u64],
        progress: &[Progress],
        extremes: (u64, u64),
    ) -> Result<Vec<K>> {
        let gpu = self.gpu;
        let active = active_labels(progress);
        let mut slot_of = vec![u32::MAX; space.labels()];
        let mut starts = Vec::with_capacity(active.len());
        let mut kept = 0u64;
        for (slot, &label) in active.iter().enumerate() {
            slot_of[label as usize] = slot as u32;
            starts.push(kept);
            kept += totals[label as usize];
        }
        let mut picks = Vec::new();
        for p in progress {
            if let Progress::Pending { label, offset } = *p {
                let (low, high) = space.range_within(label, extremes);
                picks.push(Pick {
                    start: starts[slot_of[label as usize] as usize],
                    low,
                    len: totals[label as usize] as u32,
                    offset: offset as u32,
                    width: bit_length(high - low),
                    reserved: 0,
                });
            }
        }
        // The tables in one upload.
        let mut tables = Tables::default();
        let slot_of_at = tables.push(&slot_of);
        let slot_labels_at = tables.push(&active);
        let starts_at = tables.push(&starts);
        let picks_at = tables.push(&picks);
        gpu.waiting_on_error(|| {
            // SAFETY: `tables` outlives this closure, which ends in the picks' read-back
            // (which waits for the stream) or, failing, in a wait.
            let tables_on_device = unsafe { gpu.upload_queued(&tables.bytes)? };
            let at = |offset: u64| tables_on_device.global_ptr().address() + offset;
            let bases = gpu.alloc_uninit::<u64>(active.len() * self.blocks as usize)?;
            let keys_out = gpu.alloc_uninit::<K>(kept as usize)?;
            let (keys, labels_in, len) = match last.candidates {
                Some((keys, labels)) => (keys.global_ptr(), labels.global_ptr(), keys.len() as u64),
                None => (self.keys.global_ptr(), GlobalPtr::null(), self.keys.len() as u64),
            };
            let params = MultiParams {
                keys,
                len,
                labels_in,
                counts_in: self.counts[0].global_ptr(),
                table: last.table.global_ptr(),
                first: last.first,
                slot_of: GlobalPtr::from_address(at(slot_of_at)),
                slot_labels: GlobalPtr::from_address(at(slot_labels_at)),
                starts: GlobalPtr::from_address(at(starts_at)),
                bases: bases.global_ptr(),
                keys_out: keys_out.global_ptr(),
                labels: active.len() as u32,
                parent_labels: space.labels() as u32,
                ..self.params()
            };
            let shape = LaunchShape {
                grid: (active.len() as u32, 1),
                block_threads: MULTI_THREADS,
                shared_bytes: BasesLayout::new().bytes,
            };
            gpu.launch(K::MULTISELECT_BASES, shape, params)?;
            let shape = LaunchShape { shared_bytes: PlaceLayout::new().bytes, ..self.pass_shape() };
            gpu.launch(K::MULTISELECT_PLACE, shape, params)?;
            gpu.pick_keys(&keys_out, GlobalPtr::from_address(at(picks_at)), picks.len())
        })
    }

    /// The run over this shard's keys, sharing what `exchange` shares with the other
    /// shards' runs (nothing when alone): every shard takes the same decisions from the
    /// same shared totals.
    fn run(
        mut self,
        exchange: &dyn Exchange,
        ranks_of: impl FnOnce(u64, u64) -> Result<Vec<u64>>,
    ) -> Result<MultiOutcome<K>> {
        let gpu = self.gpu;
        let local_n = self.keys.len() as u64;
        let gathering = exchange.gathering();
        let n = exchange.sum(1, Ok(vec![local_n]))?[0];
        if n == 0 {
            return Err(Error::EmptyInput);
        }
        // 1. The sample (shards sample in proportion to their keys) and the first intervals.
        // Over shards the sample's keys are joined and summed up on each; alone the GPU sums
        // them up and only the summary comes back.
        let sample = match gathering {
            Some(_) => {
                let count = (SAMPLE_SIZE as u64 * local_n).div_ceil(n) as usize;
                let local_sample = gpu
                    .gather_keys(self.keys, None, count)
                    .map(|keys| keys.iter().map(|k| k.to_ordered().to_u64()).collect());
                SampleSummary::of::<K>(&exchange.concat(local_sample, size_of::<K>())?)
            }
            None => gpu.sample_summary(self.keys, sample_size(n, gpu.tuning().multiselect_sample))?,
        };
        let (first_pass, table, first) = first_pass::<K>(&sample, gathering.is_none());
        // 2. The count pass.
        let labels = first.labels() as u32;
        let (table_on_device, counted) = match self.count_pass(first_pass, &table, labels) {
            Ok((table, counted)) => (Some(table), Ok(counted)),
            Err(error) => (None, Err(error)),
        };
        let extremes =
            exchange.max(2, counted.as_ref().map(|c| c[labels as usize..].to_vec()).map_err(Clone::clone))?;
        let (smallest, largest) = (!extremes[0], extremes[1]);
        let mut local_totals = counted?;
        local_totals.truncate(labels as usize);
        let table_on_device = table_on_device.expect("the count pass ran");
        let mut totals = exchange.sum(labels as usize, Ok(local_totals.clone()))?;
        let nan_count = if nan_bits::<K>().is_some() { totals[first_pass.nan_label as usize] } else { 0 };
        let ranks = checked_ranks(ranks_of(n, nan_count)?, n)?;
        let mut unique = ranks.clone();
        unique.sort_unstable();
        unique.dedup();

        let mut progress = place_ranks(&totals, &unique);
        // The smallest and largest keys are the count's extremes: ranks 0 and n − 1 (the
        // quantiles at 0 and 1) are answered here, not read from the first and last labels,
        // which hold the keys below and above the sample (about n / (sample + 1) each).
        for (p, &rank) in progress.iter_mut().zip(&unique) {
            if rank == 0 {
                *p = Progress::Found(smallest);
            } else if rank == n - 1 {
                *p = Progress::Found(largest);
            }
        }
        let mut space = first;
        let mut data_passes = 1;
        // The last filter's output (None: the data).
        let mut candidates: Option<(DeviceBuffer<K>, DeviceBuffer<u32>)> = None;
        let mut filters = 0u32;
        let pick_max = gpu.tuning().multiselect_pick_max.max(1) as u64;
        let place_from_data = gpu.tuning().multiselect_place_keys;
        let label_budget = (gpu.tuning().multiselect_labels as usize).clamp(2, MAX_LABELS);
        loop {
            // A label holds one value when its range is one bit pattern, or when its range
            // within the data's extremes is: its ranks are answered.
            for p in progress.iter_mut() {
                if let Progress::Pending { label, .. } = *p {
                    let (low, high) = space.range_within(label, (smallest, largest));
                    if low == high {
                        *p = Progress::Found(low);
                    }
                }
            }
            let active = active_labels(&progress);
            if active.is_empty() {
                break;
            }
            let kept: u64 = active.iter().map(|&l| totals[l as usize]).sum();
            let largest_label = active.iter().map(|&l| totals[l as usize]).max().unwrap_or(0);
            // Placing straight from the data scatters its writes over every active label's
            // part of the output: past some millions of keys kept, a filter first, then a
            // place over its candidates, is faster.
            let placeable = candidates.is_some() || kept <= place_from_data;
            if gathering.is_none() && largest_label <= pick_max && active.len() <= PLACE_SLOTS && placeable {
                // The last pass: every active label holds at most
                // [`Tuning::multiselect_pick_max`](crate::Tuning) keys. They are placed
                // together by label, and each rank picked among its label's keys (no split,
                // no counts).
                if candidates.is_none() {
                    data_passes += 1;
                }
                let last =
                    LastPass { first: first_pass, table: &table_on_device, candidates: candidates.as_ref() };
                let found = self.place_and_pick(&last, &space, &totals, &progress, (smallest, largest))?;
                fill_pending(&mut progress, found.iter().map(|k| k.to_ordered().to_u64()));
                break;
            }
            let too_many = 2 * active.len() > label_budget;
            let finish = match gathering {
                None if too_many || filters + 1 >= MAX_FILTERS => Finish::Sort,
                Some(Gathering { label_max, shards })
                    if largest_label <= label_max
                        || kept * size_of::<K>() as u64 <= shards * label_budget as u64 * 8
                        || too_many
                        || filters + 1 >= MAX_SHARED_FILTERS =>
                {
                    Finish::Gather
                }
                _ => Finish::No,
            };
            // Each active label's split (one child each to finish), over its exact range
            // within the data's extremes.
            let ranges: Vec<(u64, u64)> =
                active.iter().map(|&label| space.range_within(label, (smallest, largest))).collect();
            let counts: Vec<u64> = active.iter().map(|&label| totals[label as usize]).collect();
            let exponents = split_exponents(&ranges, &counts, label_budget);
            let mut slots = Vec::with_capacity(active.len());
            let mut next_space = LabelSpace::default();
            for (&(low, high), &exponent) in ranges.iter().zip(&exponents) {
                let base = next_space.labels() as u32;
                let (split, children) = split::<K>(low, high, exponent, base, finish != Finish::No);
                slots.push(split);
                next_space.push(children);
            }
            let next_labels = next_space.labels() as u32;
            let parent_labels = space.labels() as u32;
            // The parents whose keys are written (children of one bit pattern are only
            // counted; none to finish, as such labels are answered above): the blocks' counts
            // of them place each block's output. The filter keeps a key when its parent has a
            // slot.
            let mut written = vec![0u32; (parent_labels as usize).div_ceil(32)];
            let mut slot_of = vec![u32::MAX; parent_labels as usize];
            for (slot, &label) in active.iter().enumerate() {
                if slots[slot].shift > 0 {
                    written[label as usize / 32] |= 1 << (label % 32);
                }
                slot_of[label as usize] = slot as u32;
            }
            // Where each active label's keys start among all shards' kept keys, in label
            // order; and how many this shard keeps.
            let mut label_starts = Vec::with_capacity(active.len());
            let (mut kept, mut local_kept) = (0u64, 0u64);
            for (slot, &label) in active.iter().enumerate() {
                label_starts.push(kept);
                if slots[slot].shift > 0 {
                    kept += totals[label as usize];
                    local_kept += local_totals[label as usize];
                }
            }
            if candidates.is_none() {
                data_passes += 1;
            }
            let filtered = (|| -> Result<(DeviceBuffer<K>, DeviceBuffer<u32>)> {
                // The round's tables in one upload: each upload waits for the stream.
                let mut tables = Tables::default();
                let written_at = tables.push(&written);
                let slot_of_at = tables.push(&slot_of);
                let slots_at = tables.push(&slots);
                let tables_on_device = gpu.upload(&tables.bytes)?;
                let tables_address = tables_on_device.global_ptr().address();
                let keys_out = gpu.alloc_uninit::<K>(local_kept as usize)?;
                let labels_out = gpu.alloc_uninit::<u32>(local_kept as usize)?;
                let (keys_in, labels_in, len) = match &candidates {
                    Some((keys, labels)) => (keys.global_ptr(), labels.global_ptr(), keys.len() as u64),
                    None => (self.keys.global_ptr(), GlobalPtr::null(), local_n),
                };
                let filter = MultiParams {
                    keys: keys_in,
                    len,
                    labels_in,
                    counts_in: self.counts[0].global_ptr(),
                    table: table_on_device.global_ptr(),
                    first: first_pass,
                    active: GlobalPtr::from_address(tables_address + written_at),
                    slot_of: GlobalPtr::from_address(tables_address + slot_of_at),
                    slots: GlobalPtr::from_address(tables_address + slots_at),
                    counts_out: self.counts[1].global_ptr(),
                    keys_out: keys_out.global_ptr(),
                    labels_out: labels_out.global_ptr(),
                    labels: next_labels,
                    parent_labels,
                    ..self.params()
                };
                // Each block's share of the kept keys, from the last pass's rows.
                let shape = LaunchShape {
                    grid: (self.blocks, 1),
                    block_threads: MULTI_THREADS,
                    shared_bytes: BlockCountsLayout::new().bytes,
                };
                gpu.launch(K::MULTISELECT_BLOCK_COUNTS, shape, filter)?;
                gpu.launch(K::MULTISELECT_FILTER, self.pass_shape(), filter)?;
                Ok((keys_out, labels_out))
            })();
            self.counts.swap(0, 1);
            // The place among all kept keys of each pending rank, when they are sorted.
            let sorted_places = || -> Vec<u64> {
                progress
                    .iter()
                    .filter_map(|p| match *p {
                        Progress::Pending { label, offset } => {
                            Some(label_starts[slot_of[label as usize] as usize] + offset)
                        }
                        Progress::Found(_) => None,
                    })
                    .collect()
            };
            match finish {
                Finish::Sort => {
                    // The kept keys sorted: active label `a`'s keys start after the earlier
                    // active labels' keys.
                    let (keys_out, _) = filtered?;
                    let sorted = gpu.sorted_keys(&keys_out)?;
                    let wanted = sorted_places();
                    let found = gpu.gather_keys(&sorted, Some(&wanted), wanted.len())?;
                    fill_pending(&mut progress, found.iter().map(|k| k.to_ordered().to_u64()));
                    break;
                }
                Finish::Gather => {
                    // Every shard's kept keys at one shard, sorted there, each rank read at
                    // its place.
                    let local = filtered
                        .and_then(|(keys_out, _)| gpu.download(&keys_out))
                        .map(|keys| keys.iter().map(|k| k.to_ordered().to_u64()).collect::<Vec<u64>>());
                    let wanted = sorted_places();
                    let found = exchange.answer(local, size_of::<K>(), &mut |mut all: Vec<u64>| {
                        if all.len() as u64 != kept {
                            return Err(Error::Internal {
                                message: format!(
                                    "the shards kept {} keys; their counts say {kept}",
                                    all.len()
                                ),
                            });
                        }
                        all.sort_unstable();
                        Ok(wanted.iter().map(|&at| all[at as usize]).collect())
                    })?;
                    fill_pending(&mut progress, found.into_iter());
                    break;
                }
                Finish::No => {}
            }
            // Each pending rank's place among its label's subdivision.
            let local_next = filtered.and_then(|kept| {
                self.queue_totals(next_labels)?;
                Ok((kept, self.read_totals(next_labels)?))
            });
            let (kept_keys, next_local_totals) = match local_next {
                Ok((kept, next)) => (Some(kept), Ok(next)),
                Err(error) => (None, Err(error)),
            };
            local_totals = next_local_totals.clone().unwrap_or_default();
            let next_totals = exchange.sum(next_labels as usize, next_local_totals)?;
            for p in progress.iter_mut() {
                if let Progress::Pending { label, offset } = *p {
                    let slot = slot_of[label as usize] as usize;
                    let first_child = slots[slot].base;
                    let children_end = slots.get(slot + 1).map_or(next_labels, |next| next.base);
                    let mut offset = offset;
                    let mut child = first_child;
                    while child + 1 < children_end && offset >= next_totals[child as usize] {
                        offset -= next_totals[child as usize];
                        child += 1;
                    }
                    *p = Progress::Pending { label: child, offset };
                }
            }
            filters += 1;
            space = next_space;
            totals = next_totals;
            candidates = kept_keys;
        }
        let found: Vec<u64> = progress
            .iter()
            .map(|p| match p {
                Progress::Found(bits) => *bits,
                Progress::Pending { .. } => unreachable!("every rank is found when the loop ends"),
            })
            .collect();
        let values = ranks
            .iter()
            .map(|r| key_of::<K>(found[unique.binary_search(r).expect("a wanted rank")]))
            .collect();
        Ok(MultiOutcome { ranks, values, data_passes })
    }
}

/// Gives the pending ranks, in order, the keys found for them (ordered bits).
fn fill_pending(progress: &mut [Progress], found: impl Iterator<Item = u64>) {
    let mut found = found;
    for p in progress.iter_mut() {
        if let Progress::Pending { .. } = *p {
            *p = Progress::Found(found.next().expect("one key per pending rank"));
        }
    }
}

impl Gpu {
    /// For each of the `count` picks at `picks`, its key among the last pass's keys
    /// (placed by label), read back.
    fn pick_keys<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        picks: GlobalPtr<Pick>,
        count: usize,
    ) -> Result<Vec<K>> {
        let out = self.alloc_uninit::<K>(count)?;
        let shape = LaunchShape {
            grid: (count as u32, 1),
            block_threads: SMALL_THREADS,
            shared_bytes: PickLayout::new().bytes,
        };
        let params = PickParams { keys: keys.global_ptr(), picks, out: out.global_ptr() };
        self.launch(K::MULTISELECT_PICK, shape, params)?;
        self.read_on_host(&out, <[K]>::to_vec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test's pseudo-random 53-bit numbers from `seed` (a linear congruential generator).
    fn random_bits(seed: u64) -> impl FnMut() -> u64 {
        let mut random = seed;
        move || {
            random = random.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            random >> 11
        }
    }

    /// The first pass's label of `bits` (as the kernels compute it).
    fn first_label<K: Key>(first: &FirstPass, table: &[u32], bits: u64) -> u32 {
        first.label_of(K::Bits::from_u64(bits), |slot| table[slot])
    }

    /// Every bit pattern (near the ends exhaustively, a sweep between) gets a label that
    /// rises with it and whose range holds it: the host's ranges are the kernels' labels.
    fn check_first_pass<K: Key>(sample: &mut [u64]) {
        for nearest in [true, false] {
            check_first_pass_rounded::<K>(sample, nearest);
        }
    }

    fn check_first_pass_rounded<K: Key>(sample: &[u64], nearest: bool) {
        let (first, table, space) = first_pass::<K>(&SampleSummary::of::<K>(sample), nearest);
        assert!(space.labels() <= MAX_LABELS);
        // Keys' bits end at NaN's (every NaN key has them).
        let max = nan_bits::<K>().unwrap_or(K::Bits::MAX.to_u64());
        let (mut previous, mut bits) = (0, 0u64);
        loop {
            let label = first_label::<K>(&first, &table, bits);
            assert!(label >= previous, "{}: bits {bits:#x}", K::NAME);
            let (low, high) = space.range(label);
            assert!(
                low <= bits && bits <= high,
                "{}: bits {bits:#x} not in label {label}'s {low:#x}..={high:#x}",
                K::NAME
            );
            previous = label;
            if bits == max {
                break;
            }
            let step = if bits < 1 << 16 || max - bits < 1 << 16 { 1 } else { max / 300_000 + 1 };
            bits = bits.saturating_add(step).min(max);
        }
        // The labels' ranges tile the bits in order.
        let mut next = 0u64;
        let ranges = (0..space.labels() as u32).map(|label| space.range(label));
        for (low, high) in ranges.filter(|(low, high)| low <= high) {
            assert_eq!(low, next, "{}", K::NAME);
            next = high.wrapping_add(1);
        }
    }

    #[test]
    fn first_pass_labels_cover_every_bit_pattern_in_order() {
        let mut next = random_bits(17);
        let mut floats: Vec<u64> = (0..1024).map(|_| (next() as f32 / 1e9).to_ordered() as u64).collect();
        check_first_pass::<f32>(&mut floats);
        let mut with_nan = floats.clone();
        with_nan.extend([f32::NAN.to_ordered() as u64; 30]);
        check_first_pass::<f32>(&mut with_nan);
        let mut integers: Vec<u64> = (0..1024).map(|_| (next() % 1000) as u32 as u64).collect();
        check_first_pass::<u32>(&mut integers);
        let mut largest: Vec<u64> = vec![u32::MAX as u64; 1024];
        check_first_pass::<u32>(&mut largest);
        let mut wide: Vec<u64> = (0..1024).map(|_| next() << 11).collect();
        check_first_pass::<u64>(&mut wide);
        let mut doubles: Vec<u64> = (0..1024).map(|_| ((next() as f64) - 4e15).to_ordered()).collect();
        check_first_pass::<f64>(&mut doubles);
        // 16-bit floats: ordered bits in the high half of a u32, the low half zero.
        let mut halves: Vec<u64> =
            (0..1024).map(|_| half::f16::from_f64(next() as f64 / 1e12 - 4e3).to_ordered() as u64).collect();
        halves.extend([half::f16::NAN.to_ordered() as u64; 30]);
        check_first_pass::<half::f16>(&mut halves);
        let mut brains: Vec<u64> =
            (0..1024).map(|_| half::bf16::from_f64(next() as f64 / 1e9).to_ordered() as u64).collect();
        check_first_pass::<half::bf16>(&mut brains);
        // The last slot against the keys' end: up to infinity (the label above the slots
        // empty or not), and integers whose slots reach all ones.
        let mut to_infinity: Vec<u64> =
            [1e38f32, 3e38, f32::INFINITY, -2.5].iter().map(|&x| x.to_ordered() as u64).collect();
        check_first_pass::<f32>(&mut to_infinity);
        let mut near_infinity: Vec<u64> =
            (0..1024).map(|i| (3e38f32 + i as f32 * 1e31).to_ordered() as u64).collect();
        check_first_pass::<f32>(&mut near_infinity);
        let mut every: Vec<u64> = vec![0, u64::MAX, 1 << 40, u64::MAX - 5];
        check_first_pass::<u64>(&mut every);
        let mut top: Vec<u64> = (0..1024).map(|i| u32::MAX as u64 - 3 * i).collect();
        check_first_pass::<u32>(&mut top);
    }

    /// A label's range is the same whatever order labels are looked up in (the lookups
    /// walk the runs on from the last one found, and start over when a label lies before
    /// it), and equals the range written out label by label.
    #[test]
    fn label_lookups_in_any_order() {
        let mut next = random_bits(29);
        let sample: Vec<u64> = (0..1024).map(|_| (next() as f32 / 1e9).to_ordered() as u64).collect();
        let (_, _, space) = first_pass::<f32>(&SampleSummary::of::<f32>(&sample), true);
        // Label by label, from the runs themselves.
        let mut written = Vec::new();
        for run in &space.runs {
            assert_eq!(run.first as usize, written.len());
            written.extend((0..run.count).map(|i| run.range(i)));
        }
        assert_eq!(written.len(), space.labels());
        let labels = space.labels() as u32;
        let ascending: Vec<u32> = (0..labels).collect();
        let descending: Vec<u32> = (0..labels).rev().collect();
        let shuffled: Vec<u32> = (0..4 * labels).map(|_| (next() % labels as u64) as u32).collect();
        for order in [&ascending, &descending, &shuffled] {
            for &label in order.iter() {
                assert_eq!(space.range(label), written[label as usize], "label {label}");
            }
        }
    }

    #[test]
    fn floats_get_a_nan_label() {
        let sample: Vec<u64> = (0..1024).map(|i| (i as f32 * 0.5).to_ordered() as u64).collect();
        let (first, table, space) = first_pass::<f32>(&SampleSummary::of::<f32>(&sample), true);
        let nan = nan_bits::<f32>().unwrap();
        assert_eq!(first_label::<f32>(&first, &table, nan), first.nan_label);
        assert_eq!(space.range(first.nan_label), (nan, nan));
        assert_eq!(first.nan_label as usize, space.labels() - 1);
    }

    /// The GPU's summary of the sample (the `multiselect_sample` kernel) is the host's of
    /// the same keys, for every key type, with NaN, with NaN only, and with samples larger
    /// and smaller than the data.
    #[test]
    fn the_sample_kernel_sums_up_as_the_host_does() {
        fn check<K: SelectKey>(gpu: &Gpu, keys: &[K]) {
            let data = gpu.upload(keys).unwrap();
            for count in [1u64, 37, 1024, 5000] {
                let on_gpu = gpu.sample_summary(&data, count).unwrap();
                let sample = gpu.gather_keys(&data, None, count as usize).unwrap();
                let bits: Vec<u64> = sample.iter().map(|k| k.to_ordered().to_u64()).collect();
                assert_eq!(on_gpu, SampleSummary::of::<K>(&bits), "{} {count} of {}", K::NAME, keys.len());
            }
        }
        let gpu = Gpu::emulator();
        let mut next = random_bits(5);
        let floats: Vec<f32> =
            (0..3000).map(|i| if i % 7 == 0 { f32::NAN } else { next() as f32 / 1e12 - 2e3 }).collect();
        check(&gpu, &floats);
        check(&gpu, &[f32::NAN; 5]);
        check(&gpu, &[-0.0f32]);
        let doubles: Vec<f64> = (0..2000).map(|_| next() as f64 * 1e280 - 1e295).collect();
        check(&gpu, &doubles);
        check(&gpu, &(0..999).map(|_| next()).collect::<Vec<_>>());
        check(&gpu, &(0..999).map(|_| next() as i64 - (1 << 52)).collect::<Vec<_>>());
        check(&gpu, &[u64::MAX, 0, u64::MAX]);
        check(&gpu, &(0..999).map(|_| next() as u32).collect::<Vec<_>>());
        check(&gpu, &(0..999).map(|_| next() as i32).collect::<Vec<_>>());
        let halves: Vec<half::f16> = (0..999)
            .map(|i| if i == 3 { half::f16::NAN } else { half::f16::from_f64(next() as f64 / 1e12 - 4e3) })
            .collect();
        check(&gpu, &halves);
        check(&gpu, &(0..999).map(|_| half::bf16::from_f64(next() as f64 / 1e9)).collect::<Vec<_>>());
    }

    /// The split exponents keep within the label budget, give a label whose patterns fit
    /// its share a child per pattern, and otherwise share in proportion to the counts.
    #[test]
    fn split_exponents_take_narrow_labels_whole() {
        let children = |ranges: &[(u64, u64)], exponents: &[u32]| -> u64 {
            ranges
                .iter()
                .zip(exponents)
                .map(|(&(low, high), &e)| split::<u64>(low, high, e, 0, false).1.count as u64)
                .sum()
        };
        // A heavy narrow label, a light narrow one, two wide ones.
        let ranges = [(100, 131), (1 << 20, (1 << 20) + 511), (0, u32::MAX as u64), (1 << 40, (1 << 41) - 1)];
        let counts = [5_000_000, 50_000, 1_000_000, 2_000_000];
        let exponents = split_exponents(&ranges, &counts, 8192);
        assert_eq!(exponents[0], bit_length(31), "the heavy narrow label is taken whole");
        assert!(children(&ranges, &exponents) <= 8192, "{exponents:?}");
        // The light narrow label's share (2 + 8184 · 50 000 / 8 050 000 ≈ 52) grows once
        // the heavy one has left most of its share, but not to 512 patterns.
        assert!(exponents[1] < bit_length(511));
        // The wide ones share the rest in proportion: the larger count, the more children.
        assert!(exponents[3] >= exponents[2]);
        // Nothing fits: exactly the proportional shares.
        let wide = [(0, u64::MAX / 2), (1 << 62, u64::MAX)];
        assert_eq!(
            split_exponents(&wide, &[3, 1], 64),
            [(2 + 60 * 3 / 4u64).ilog2(), (2 + 60 / 4u64).ilog2()]
        );
        // Many narrow labels that all fit: every one whole, within the budget.
        let narrow: Vec<(u64, u64)> = (0..100u64).map(|i| (i * 1000, i * 1000 + 15)).collect();
        let exponents = split_exponents(&narrow, &[7; 100], 8192);
        assert!(exponents.iter().all(|&e| e == 4));
        assert!(children(&narrow, &exponents) <= 8192);
    }

    #[test]
    fn splits_tile_their_range() {
        for (low, high, exponent) in
            [(10u64, 10_000u64, 5u32), (0, u32::MAX as u64, 13), (7, 8, 4), (100, 163, 6)]
        {
            for finish in [false, true] {
                let (split, run) = split::<u32>(low, high, exponent, 40, finish);
                let children: Vec<(u64, u64)> = (0..run.count).map(|i| run.range(i)).collect();
                assert_eq!(run.first, 40);
                assert!(children.len() <= (1 << exponent).max(2));
                assert_eq!(children.first().unwrap().0, low);
                assert_eq!(children.last().unwrap().1, high);
                for pair in children.windows(2) {
                    assert_eq!(pair[0].1 + 1, pair[1].0);
                }
                for bits in [low, low + 1, (low + high) / 2, high - 1, high] {
                    let child = split.label_of(bits as u32) - 40;
                    let (a, b) = children[child as usize];
                    assert!(a <= bits && bits <= b, "{low}..{high} e={exponent}: {bits} in child {child}");
                }
                if finish {
                    assert!(children.len() <= 2 && split.shift > 0);
                }
            }
        }
        // A range of single patterns: every child is one value.
        let (split, run) = split::<u64>(50, 57, 3, 0, false);
        assert_eq!(split.shift, 0);
        assert!((0..run.count).map(|i| run.range(i)).all(|(a, b)| a == b));
    }
}
