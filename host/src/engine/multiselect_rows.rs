//! Multiselect of every row of a matrix at once (sort & choose over rows): the rows sorted
//! side by side, then the wanted ranks read at their places in every row by one gather.
//!
//! One multiselect per row pays its launches and the host's round trips once a row (about
//! 0.2 ms even for a short row on an H200, run 243); here a batch of rows pays them once.
//!
//! - **Sort.** Rows of up to 2048 keys are sorted where they lie by the block sort, a
//!   segment a row (one launch). Longer rows are first copied into rows padded to
//!   2048 · 2^j keys (the gather kernel's row mode), the padding the key of the highest
//!   rank, so that the stable sort of each padded row (block sorts of 2048, then merge
//!   passes that never cross a row) leaves the row's own keys first and in order, its NaNs
//!   included (NaN has the highest rank; the padding ties with it and comes after).
//! - **Pick.** The ranks a row asks for depend on its NaN count alone (`ranks_of`); rows of
//!   one count share a table of distinct ranks. Every row is read at the table of a row
//!   without NaN and, where NaN matters, at its last key (NaN sorts last, so the row holds
//!   NaN when that is NaN): one gather for all rows, read by the host in groups through the
//!   device's page-locked staging area ([`Gpu::read_on_host`]), each row handed on from there.
//! - **NaN.** Rows that hold NaN get their counts, when asked for, by bisection (a gather of
//!   every such row's middle key a round), then one gather of their own ranks.
//!
//! A batch holds at most [`Tuning::multiselect_rows_batch_keys`](crate::Tuning) padded keys
//! (the sort keeps at most three buffers of that many keys, and no indices); more rows go
//! batch after batch through the same buffers.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use gpu_select_kernels::OrderedBits;
use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::select::multi::GatherKeysParams;

use super::multiselect::{checked_ranks, nan_bits};
use super::sort::Pairs;
use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::gpu::Gpu;
use crate::options::{MAX_SMALL_SORT_LEN, MultiselectAlgorithm};
use crate::{Order, SelectKey};

/// The longest row `SortAndChoose` sorts among others (2^24 keys, padded); a longer one is
/// sorted alone by the one-array sort & choose.
const SORTED_ROW_MAX_KEYS: usize = 1 << 24;

/// The longest row `Auto` sorts among others (2^20 keys). A bucket multiselect of a row
/// costs about 0.2 ms whatever its length up to 2^20 (its launches and round trips), a row's
/// share of the sort grows with it: on an H200 (run 251, 5 and 101 quantiles of f32 rows,
/// the sort carrying keys only), sorting together took 1.3 ms for 100 rows of 100 000 keys
/// (a multiselect each: 22 ms), 1.9 ms for 64 rows of 2^18 (12.7–13.8 ms), and 2.2 ms for
/// 16 rows of 2^20 (2.9–3.3 ms); but 2.55 ms for 4 rows of 2^22 (0.83 ms, run 252). (With
/// indices carried, run 243, 16 rows of 2^20 sorted took 4.2 ms, and the bound was 2^18.)
const AUTO_SORTED_ROW_MAX_KEYS: usize = 1 << 20;

/// Whether `algorithm` finds the ranks of rows of `cols` keys by sorting the rows together
/// (else by a multiselect of each row): `Auto` does up to [`AUTO_SORTED_ROW_MAX_KEYS`] keys a
/// row; `SortAndChoose` does whenever a row fits a batch (a longer row is sorted alone by
/// the one-array sort & choose).
pub(crate) fn sorts_rows_together(algorithm: MultiselectAlgorithm, cols: usize) -> bool {
    match algorithm {
        MultiselectAlgorithm::Auto => cols <= AUTO_SORTED_ROW_MAX_KEYS,
        MultiselectAlgorithm::SortAndChoose => padded_len(cols) <= SORTED_ROW_MAX_KEYS,
        MultiselectAlgorithm::BucketMultiselect => false,
    }
}

/// What a multiselect of rows hands its caller for a row: the payload of the `ranks_of`
/// call that named the row's ranks, and the keys of those ranks.
pub(crate) struct RowKeys<'a, K, P> {
    /// What `ranks_of` returned beside the ranks.
    pub payload: &'a P,
    /// The keys of the call's distinct ranks, ascending (the first call's followed by the
    /// row's last key where NaN matters).
    distinct_keys: &'a [K],
    /// Where each asked rank's key is among them.
    slot_of: &'a [usize],
}

impl<K: Copy, P> RowKeys<'_, K, P> {
    /// The keys of the row's ranks, in the order `ranks_of` named them.
    pub(crate) fn keys(&self) -> impl ExactSizeIterator<Item = K> + '_ {
        self.slot_of.iter().map(|&slot| self.distinct_keys[slot])
    }
}

/// How a multiselect of rows treats the rows' NaN keys, on which the ranks it asks for may
/// depend (`ranks_of(nan_count)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowNans {
    /// The ranks do not depend on them (multiselect: NaN is a key like any): every count 0,
    /// no pass to find them.
    Ignored,
    /// Only whether a row holds any: its count 1 when it does (numpy's `quantile`).
    Found,
    /// Their number in each row (numpy's `nanquantile`).
    Counted,
}

/// Keys a sorted row takes: the row's `cols`, padded beyond 2048 to a power of two times
/// 2048 (the merge passes' runs).
fn padded_len(cols: usize) -> usize {
    if cols <= MAX_SMALL_SORT_LEN {
        cols
    } else {
        cols.div_ceil(MAX_SMALL_SORT_LEN).next_power_of_two() * MAX_SMALL_SORT_LEN
    }
}

/// The distinct ranks of a list (sorted), and where each asked rank's key is among them.
#[derive(Debug)]
struct DistinctRanks {
    distinct: Vec<u64>,
    slot_of: Vec<usize>,
}

impl DistinctRanks {
    fn new(ranks: &[u64]) -> Self {
        let mut distinct = ranks.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let slot_of =
            ranks.iter().map(|rank| distinct.binary_search(rank).expect("a rank of the list")).collect();
        Self { distinct, slot_of }
    }
}

/// Device memory of one batch's sort, keys only (no index is carried: the ranks' keys are
/// all a pick reads): the output, and for rows beyond the block sort the padded copy
/// (which the merges also write) and, for an odd number of merge passes, scratch.
struct RowSortBuffers<K> {
    out: DeviceBuffer<K>,
    padded: Option<DeviceBuffer<K>>,
    scratch: Option<DeviceBuffer<K>>,
}

/// Keys without indices, as the sorts take them.
fn keys_only<K: SelectKey>(keys: &DeviceBuffer<K>) -> Pairs<K> {
    Pairs { keys: keys.global_ptr(), indices: GlobalPtr::null() }
}

/// The `ranks_of` calls of one multiselect of rows: one per NaN count met (a payload and
/// the distinct ranks each), most rows sharing the first.
struct RankCalls<P> {
    calls: Vec<(P, DistinctRanks)>,
    of_count: HashMap<u64, usize>,
}

impl<P> RankCalls<P> {
    /// The call for rows of `nan_count` NaNs among `cols` keys, made on first need.
    fn of(
        &mut self,
        nan_count: u64,
        cols: usize,
        ranks_of: &mut impl FnMut(u64) -> Result<(P, Vec<u64>)>,
    ) -> Result<usize> {
        match self.of_count.entry(nan_count) {
            Entry::Occupied(entry) => Ok(*entry.get()),
            Entry::Vacant(entry) => {
                let (payload, ranks) = ranks_of(nan_count)?;
                self.calls.push((payload, DistinctRanks::new(&checked_ranks(ranks, cols as u64)?)));
                Ok(*entry.insert(self.calls.len() - 1))
            }
        }
    }

    /// What `emit` gets for a row of call `call` whose distinct keys are `distinct_keys`.
    fn row_keys<'a, K>(&'a self, call: usize, distinct_keys: &'a [K]) -> RowKeys<'a, K, P> {
        let (payload, ranks) = &self.calls[call];
        RowKeys { payload, distinct_keys, slot_of: &ranks.slot_of }
    }
}

impl Gpu {
    /// The keys of the ranks `ranks_of(nan_count)` names (from 0, smallest first, in the
    /// total order: NaN above +inf; beside them a payload of the caller's) in each of the
    /// `rows` rows of the row-major `keys`, by sorting the rows together (module docs),
    /// handed to `emit(row, keys)` once for every row, in no set order. `rows > 0` divides
    /// `keys.len() > 0`; `nans` says what `nan_count` is. Waits for the result.
    pub(crate) fn multiselect_rows_by_sort<K: SelectKey, P>(
        &self,
        keys: &DeviceBuffer<K>,
        rows: usize,
        nans: RowNans,
        mut ranks_of: impl FnMut(u64) -> Result<(P, Vec<u64>)>,
        mut emit: impl FnMut(usize, RowKeys<'_, K, P>),
    ) -> Result<()> {
        let cols = keys.len() / rows;
        let padded = padded_len(cols);
        let batch_rows = (self.tuning().multiselect_rows_batch_keys / padded).clamp(1, rows);
        let buffers = self.row_sort_buffers::<K>(batch_rows, cols)?;
        let mut calls = RankCalls { calls: Vec::new(), of_count: HashMap::new() };
        let first_call = calls.of(0, cols, &mut ranks_of)?;
        // Every row is read at the ranks of a row without NaN and, where NaN matters, at its
        // last key, NaN when the row holds any (NaN sorts last): one gather for all rows.
        let nan = nan_bits::<K>().filter(|_| nans != RowNans::Ignored);
        let is_nan = |key: &K| nan.is_some_and(|nan| key.to_ordered().to_u64() >= nan);
        let mut first_positions = calls.calls[first_call].1.distinct.clone();
        let last = cols as u64 - 1;
        let last_slot = nan.map(|_| {
            first_positions.binary_search(&last).unwrap_or_else(|_| {
                first_positions.push(last);
                first_positions.len() - 1
            })
        });
        let first_positions = self.upload(&first_positions)?;
        for first in (0..rows).step_by(batch_rows) {
            let count = batch_rows.min(rows - first);
            let batch = keys.view(first * cols, count * cols);
            self.sort_rows(&batch, count, cols, &buffers)?;
            let sorted = &buffers.out;
            let mut nan_rows = Vec::new();
            self.read_rows_at(
                sorted,
                padded,
                count,
                &first_positions,
                |row, distinct_keys| match last_slot {
                    Some(slot) if is_nan(&distinct_keys[slot]) => nan_rows.push(row),
                    _ => emit(first + row, calls.row_keys(first_call, distinct_keys)),
                },
            )?;
            if nan_rows.is_empty() {
                continue;
            }
            let nan_counts = match nans {
                RowNans::Counted => self.nan_counts_of_rows(sorted, padded, cols, &nan_rows)?,
                _ => vec![1; nan_rows.len()],
            };
            let row_calls: Vec<usize> = nan_counts
                .iter()
                .map(|&count| calls.of(count, cols, &mut ranks_of))
                .collect::<Result<_>>()?;
            let positions: Vec<u64> = nan_rows
                .iter()
                .zip(&row_calls)
                .flat_map(|(&row, &call)| {
                    calls.calls[call].1.distinct.iter().map(move |&rank| (row * padded) as u64 + rank)
                })
                .collect();
            let gathered = self.gather_flat(sorted, &positions)?;
            self.read_on_host(&gathered, |gathered| {
                let mut start = 0;
                for (&row, &call) in nan_rows.iter().zip(&row_calls) {
                    let end = start + calls.calls[call].1.distinct.len();
                    emit(first + row, calls.row_keys(call, &gathered[start..end]));
                    start = end;
                }
            })?;
        }
        Ok(())
    }

    /// The buffers that sort a batch of `batch_rows` rows of `cols` keys.
    fn row_sort_buffers<K: SelectKey>(&self, batch_rows: usize, cols: usize) -> Result<RowSortBuffers<K>> {
        let padded = padded_len(cols);
        let len = batch_rows * padded;
        let keys = || self.alloc_uninit::<K>(len);
        if cols <= MAX_SMALL_SORT_LEN {
            return Ok(RowSortBuffers { out: keys()?, padded: None, scratch: None });
        }
        let merge_passes = (padded / MAX_SMALL_SORT_LEN).trailing_zeros();
        Ok(RowSortBuffers {
            out: keys()?,
            // Rows beyond the block sort's are copied (padded, and the merges write over
            // their input) even when no padding is needed.
            padded: Some(keys()?),
            scratch: if merge_passes % 2 == 1 { Some(keys()?) } else { None },
        })
    }

    /// Queues the ascending sort of the `count` rows of `cols` keys at `batch`, each into a
    /// row of [`padded_len`] in `buffers.out` (its keys first).
    fn sort_rows<K: SelectKey>(
        &self,
        batch: &DeviceBuffer<K>,
        count: usize,
        cols: usize,
        buffers: &RowSortBuffers<K>,
    ) -> Result<()> {
        let out = keys_only(&buffers.out);
        let Some(padded_copy) = &buffers.padded else {
            // `count` ≤ 2^24 rows (a batch): a u32, under the block sort's 2^31 segments.
            self.launch_block_sort(keys_only(batch), cols as u32, count as u32, Order::Smallest, out)?;
            return Ok(());
        };
        let padded = padded_len(cols) as u64;
        let len = count as u64 * padded;
        self.launch_gather(GatherKeysParams {
            keys: batch.global_ptr(),
            positions: GlobalPtr::null(),
            out: padded_copy.global_ptr(),
            len,
            keys_len: cols as u64,
            seed: 0,
            period: padded,
            row_stride: cols as u64,
        })?;
        let input = keys_only(padded_copy);
        // Scratch is only touched with an odd number of merge passes, when it was made.
        let scratch = buffers.scratch.as_ref().map_or(input, keys_only);
        self.launch_sort_pairs_in_segments(input, false, scratch, out, len, padded, Order::Smallest)
    }

    /// The NaN count of each of the sorted `rows` (whose last key is NaN), by bisection: a
    /// gather of every such row's middle key a round.
    fn nan_counts_of_rows<K: SelectKey>(
        &self,
        sorted: &DeviceBuffer<K>,
        padded: usize,
        cols: usize,
        rows: &[usize],
    ) -> Result<Vec<u64>> {
        let nan = nan_bits::<K>().expect("rows with NaN hold float keys");
        let mut counts = vec![0; rows.len()];
        // Each row's first NaN lies in `low ..= high` (the last key is one).
        let mut open: Vec<(usize, u64, u64)> = (0..rows.len()).map(|i| (i, 0, cols as u64 - 1)).collect();
        loop {
            open.retain(|&(i, low, high)| {
                if low == high {
                    counts[i] = cols as u64 - low;
                }
                low < high
            });
            if open.is_empty() {
                return Ok(counts);
            }
            let positions: Vec<u64> =
                open.iter().map(|&(i, low, high)| (rows[i] * padded) as u64 + (low + high) / 2).collect();
            let middles = self.gather_flat(sorted, &positions)?;
            self.read_on_host(&middles, |middles| {
                for ((_, low, high), key) in open.iter_mut().zip(middles) {
                    let middle = (*low + *high) / 2;
                    if key.to_ordered().to_u64() >= nan {
                        *high = middle;
                    } else {
                        *low = middle + 1;
                    }
                }
            })?;
        }
    }

    /// Reads the keys at `positions` (a device array) in each of the `count` sorted rows
    /// `padded` keys apart, handing each row's to `read(row, keys)` in order: gathered in
    /// groups of rows whose keys fit [`Tuning::host_staging_bytes`](crate::Tuning), each
    /// read through the page-locked staging area.
    fn read_rows_at<K: SelectKey>(
        &self,
        sorted: &DeviceBuffer<K>,
        padded: usize,
        count: usize,
        positions: &DeviceBuffer<u64>,
        mut read: impl FnMut(usize, &[K]),
    ) -> Result<()> {
        let per_row = positions.len();
        if per_row == 0 {
            (0..count).for_each(|row| read(row, &[]));
            return Ok(());
        }
        let group = (self.tuning().host_staging_bytes / (per_row * size_of::<K>())).clamp(1, count);
        let gathered = self.alloc_uninit::<K>(group * per_row)?;
        for first in (0..count).step_by(group) {
            let rows = group.min(count - first);
            self.launch_gather(GatherKeysParams {
                keys: sorted.global_ptr().offset((first * padded) as u64),
                positions: positions.global_ptr(),
                out: gathered.global_ptr(),
                len: (rows * per_row) as u64,
                keys_len: (rows * padded) as u64,
                seed: 0,
                period: per_row as u64,
                row_stride: padded as u64,
            })?;
            self.read_on_host(&gathered.view(0, rows * per_row), |keys| {
                for (row, keys) in keys.chunks_exact(per_row).enumerate() {
                    read(first + row, keys);
                }
            })?;
        }
        Ok(())
    }

    /// The keys of `keys` at `positions`, gathered on the device.
    fn gather_flat<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        positions: &[u64],
    ) -> Result<DeviceBuffer<K>> {
        let gathered = self.alloc_uninit::<K>(positions.len())?;
        if !positions.is_empty() {
            self.queue_gather(keys, Some(positions), &gathered)?;
        }
        Ok(gathered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_rows_hold_the_row_in_runs_the_merges_double() {
        for (cols, padded) in
            [(1, 1), (2048, 2048), (2049, 4096), (4096, 4096), (10_000, 16_384), (65_536, 65_536)]
        {
            assert_eq!(padded_len(cols), padded, "cols = {cols}");
        }
    }

    #[test]
    fn distinct_ranks_answer_in_the_asked_order() {
        let ranks = DistinctRanks::new(&[7, 3, 7, 0, 3]);
        assert_eq!(ranks.distinct, [0, 3, 7]);
        assert_eq!(ranks.slot_of, [2, 1, 2, 0, 1]);
    }

    #[test]
    fn which_rows_are_sorted_together() {
        assert!(sorts_rows_together(MultiselectAlgorithm::Auto, AUTO_SORTED_ROW_MAX_KEYS));
        assert!(!sorts_rows_together(MultiselectAlgorithm::Auto, AUTO_SORTED_ROW_MAX_KEYS + 1));
        assert!(sorts_rows_together(MultiselectAlgorithm::SortAndChoose, SORTED_ROW_MAX_KEYS));
        assert!(!sorts_rows_together(MultiselectAlgorithm::SortAndChoose, SORTED_ROW_MAX_KEYS + 1));
        assert!(!sorts_rows_together(MultiselectAlgorithm::BucketMultiselect, 10));
    }
}
