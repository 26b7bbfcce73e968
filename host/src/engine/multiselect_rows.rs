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
//! - **NaN.** NaN sorts last, so a row holds NaN when its last key is NaN: one gather of
//!   every row's last key. When the count is asked for, it is found by bisection, a gather
//!   of every such row's middle key a round.
//! - **Pick.** The ranks a row asks for depend on its NaN count alone (`ranks_of`); rows of
//!   one count share a table of distinct ranks, read in every row by one gather.
//!
//! A batch holds at most [`Tuning::multiselect_rows_batch_keys`](crate::Tuning) padded keys
//! (the sort keeps three buffers of keys and indices of that size); more rows go batch
//! after batch through the same buffers.

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

/// The longest row `Auto` sorts among others (2^18 keys). A bucket multiselect of a row
/// costs about 0.2 ms whatever its length up to 2^20 (its launches and round trips), a row's
/// share of the sort grows with it: on an H200 (run 243, 5 and 101 quantiles of f32 rows),
/// sorting together took 2.4 ms for 100 rows of 100 000 keys (a multiselect each: 20.2 ms),
/// 3.5 ms for 64 rows of 2^18 (14.0 ms), and 4.2 ms for 16 rows of 2^20 (3.4 ms: slower).
const AUTO_SORTED_ROW_MAX_KEYS: usize = 1 << 18;

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

/// The keys of every row's ranks: for each row the `ranks_of` call that named its ranks
/// (one call per NaN count: `ranks_of(nan_count)`, the count as [`RowNans`] says), and the keys
/// of its distinct ranks, row after row in one array (no vector a row: a call may have
/// 10^5 rows and more).
#[derive(Debug)]
pub(crate) struct RowsKeys<K> {
    /// Each row's `ranks_of` call (0 for the first).
    call_of: Vec<u32>,
    /// The ranks of each call.
    calls: Vec<DistinctRanks>,
    /// The keys of each row's distinct ranks, row `r`'s from `starts[r]`.
    keys: Vec<K>,
    starts: Vec<usize>,
}

impl<K: Copy> RowsKeys<K> {
    /// Which `ranks_of` call (0 for the first) named row `row`'s ranks.
    pub(crate) fn call_of(&self, row: usize) -> usize {
        self.call_of[row] as usize
    }

    /// The keys of row `row`'s ranks, in the order `ranks_of` named them.
    pub(crate) fn row(&self, row: usize) -> impl ExactSizeIterator<Item = K> + '_ {
        let keys = &self.keys[self.starts[row]..];
        self.calls[self.call_of(row)].slot_of.iter().map(move |&slot| keys[slot])
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

/// Device memory of one batch's sort: the output, and for rows beyond the block sort the
/// padded copy (whose indices the merges also write) and, for an odd number of merge
/// passes, scratch.
struct RowSortBuffers<K> {
    out: (DeviceBuffer<K>, DeviceBuffer<u64>),
    padded: Option<(DeviceBuffer<K>, DeviceBuffer<u64>)>,
    scratch: Option<(DeviceBuffer<K>, DeviceBuffer<u64>)>,
}

fn pairs<K: SelectKey>(buffers: &(DeviceBuffer<K>, DeviceBuffer<u64>)) -> Pairs<K> {
    Pairs { keys: buffers.0.global_ptr(), indices: buffers.1.global_ptr() }
}

impl Gpu {
    /// The keys of the ranks `ranks_of(nan_count)` names (from 0, smallest first, in the
    /// total order: NaN above +inf) in each of the `rows` rows of the row-major `keys`, by
    /// sorting the rows together (module docs). `rows > 0` divides `keys.len() > 0`; `nans`
    /// says what `nan_count` is. Waits for the result.
    pub(crate) fn multiselect_rows_by_sort<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        rows: usize,
        nans: RowNans,
        mut ranks_of: impl FnMut(u64) -> Result<Vec<u64>>,
    ) -> Result<RowsKeys<K>> {
        let cols = keys.len() / rows;
        let padded = padded_len(cols);
        let batch_rows = (self.tuning().multiselect_rows_batch_keys / padded).clamp(1, rows);
        let buffers = self.row_sort_buffers::<K>(batch_rows, cols)?;
        let mut found = RowsKeys {
            call_of: Vec::with_capacity(rows),
            calls: Vec::new(),
            keys: Vec::new(),
            starts: Vec::with_capacity(rows),
        };
        let mut call_of_count: HashMap<u64, u32> = HashMap::new();
        for first in (0..rows).step_by(batch_rows) {
            let count = batch_rows.min(rows - first);
            let batch = keys.view(first * cols, count * cols);
            let sorted = self.sort_rows(&batch, count, cols, &buffers)?;
            let nan_counts = self.row_nan_counts(sorted, count, cols, padded, nans)?;
            let mut previous = None;
            for &nans in &nan_counts {
                // Most rows share their count with the row before: no lookup for them.
                let call = match previous {
                    Some((count, call)) if count == nans => call,
                    _ => match call_of_count.entry(nans) {
                        Entry::Occupied(entry) => *entry.get(),
                        Entry::Vacant(entry) => {
                            found
                                .calls
                                .push(DistinctRanks::new(&checked_ranks(ranks_of(nans)?, cols as u64)?));
                            *entry.insert(found.calls.len() as u32 - 1)
                        }
                    },
                };
                previous = Some((nans, call));
                found.call_of.push(call);
            }
            let batch_calls = &found.call_of[first..];
            self.pick_rows(sorted, padded, batch_calls, &found.calls, &mut found.keys, &mut found.starts)?;
        }
        Ok(found)
    }

    /// The buffers that sort a batch of `batch_rows` rows of `cols` keys.
    fn row_sort_buffers<K: SelectKey>(&self, batch_rows: usize, cols: usize) -> Result<RowSortBuffers<K>> {
        let padded = padded_len(cols);
        let len = batch_rows * padded;
        let pair = || -> Result<_> { Ok((self.alloc_uninit::<K>(len)?, self.alloc_uninit::<u64>(len)?)) };
        if cols <= MAX_SMALL_SORT_LEN {
            return Ok(RowSortBuffers { out: pair()?, padded: None, scratch: None });
        }
        let merge_passes = (padded / MAX_SMALL_SORT_LEN).trailing_zeros();
        Ok(RowSortBuffers {
            out: pair()?,
            // Rows beyond the block sort's are copied (padded, and the merges write over
            // their input) even when no padding is needed.
            padded: Some(pair()?),
            scratch: if merge_passes % 2 == 1 { Some(pair()?) } else { None },
        })
    }

    /// Queues the ascending sort of the `count` rows of `cols` keys at `batch`, each into a
    /// row of [`padded_len`] in `buffers.out` (its keys first); returns where they start.
    fn sort_rows<K: SelectKey>(
        &self,
        batch: &DeviceBuffer<K>,
        count: usize,
        cols: usize,
        buffers: &RowSortBuffers<K>,
    ) -> Result<GlobalPtr<K>> {
        let out = pairs(&buffers.out);
        let Some(padded_copy) = &buffers.padded else {
            let input = Pairs { keys: batch.global_ptr(), indices: GlobalPtr::null() };
            // `count` ≤ 2^24 rows (a batch): a u32, under the block sort's 2^31 segments.
            self.launch_block_sort(input, cols as u32, count as u32, Order::Smallest, out)?;
            return Ok(out.keys);
        };
        let padded = padded_len(cols) as u64;
        let len = count as u64 * padded;
        self.launch_gather(GatherKeysParams {
            keys: batch.global_ptr(),
            positions: GlobalPtr::null(),
            out: padded_copy.0.global_ptr(),
            len,
            keys_len: cols as u64,
            seed: 0,
            period: padded,
            row_stride: cols as u64,
        })?;
        let input = pairs(padded_copy);
        // Scratch is only touched with an odd number of merge passes, when it was made.
        let scratch = buffers.scratch.as_ref().map_or(input, pairs);
        self.launch_sort_pairs_in_segments(input, false, scratch, out, len, padded, Order::Smallest)?;
        Ok(out.keys)
    }

    /// Each sorted row's NaNs as `nans` asks (module docs): 0 for integer keys.
    fn row_nan_counts<K: SelectKey>(
        &self,
        sorted: GlobalPtr<K>,
        count: usize,
        cols: usize,
        padded: usize,
        nans: RowNans,
    ) -> Result<Vec<u64>> {
        let Some(nan) = nan_bits::<K>().filter(|_| nans != RowNans::Ignored) else {
            return Ok(vec![0; count]);
        };
        let is_nan = |key: &K| key.to_ordered().to_u64() >= nan;
        let sorted_len = (count * padded) as u64;
        let mut last = Vec::with_capacity(count);
        self.gather_keys_at(sorted, sorted_len, &[cols as u64 - 1], Some((padded, count)), &mut last)?;
        let mut counts: Vec<u64> = last.iter().map(|key| is_nan(key) as u64).collect();
        if nans == RowNans::Found {
            return Ok(counts);
        }
        // Rows with NaN: their first NaN lies in `low ..= high` (the last key is one).
        let mut open: Vec<(usize, u64, u64)> =
            (0..count).filter(|&row| counts[row] > 0).map(|row| (row, 0, cols as u64 - 1)).collect();
        loop {
            open.retain(|&(row, low, high)| {
                if low == high {
                    counts[row] = cols as u64 - low;
                }
                low < high
            });
            if open.is_empty() {
                return Ok(counts);
            }
            let positions: Vec<u64> =
                open.iter().map(|&(row, low, high)| (row * padded) as u64 + (low + high) / 2).collect();
            let mut middles = Vec::with_capacity(positions.len());
            self.gather_keys_at(sorted, sorted_len, &positions, None, &mut middles)?;
            for ((_, low, high), key) in open.iter_mut().zip(&middles) {
                let middle = (*low + *high) / 2;
                if is_nan(key) {
                    *high = middle;
                } else {
                    *low = middle + 1;
                }
            }
        }
    }

    /// Appends the keys of each sorted row's distinct ranks (those of its `ranks_of` call,
    /// `calls_of_rows`) to `keys`, row after row, each row's start pushed to `starts`: one
    /// gather of a shared table when every row has the same ranks, else of every row's
    /// positions.
    fn pick_rows<K: SelectKey>(
        &self,
        sorted: GlobalPtr<K>,
        padded: usize,
        calls_of_rows: &[u32],
        calls: &[DistinctRanks],
        keys: &mut Vec<K>,
        starts: &mut Vec<usize>,
    ) -> Result<()> {
        let count = calls_of_rows.len();
        let sorted_len = (count * padded) as u64;
        let table = |row: usize| &calls[calls_of_rows[row] as usize].distinct;
        let mut start = keys.len();
        for row in 0..count {
            starts.push(start);
            start += table(row).len();
        }
        if calls_of_rows.iter().all(|&call| call == calls_of_rows[0]) {
            return self.gather_keys_at(sorted, sorted_len, table(0), Some((padded, count)), keys);
        }
        let positions: Vec<u64> = (0..count)
            .flat_map(|row| table(row).iter().map(move |&rank| (row * padded) as u64 + rank))
            .collect();
        self.gather_keys_at(sorted, sorted_len, &positions, None, keys)
    }

    /// Appends the keys at `positions` of the `len` keys at `keys` to `out`: flat, or by rows
    /// (`Some((stride, rows))`: the same positions in each of `rows` rows `stride` keys
    /// apart, row by row).
    fn gather_keys_at<K: SelectKey>(
        &self,
        keys: GlobalPtr<K>,
        len: u64,
        positions: &[u64],
        by_rows: Option<(usize, usize)>,
        out: &mut Vec<K>,
    ) -> Result<()> {
        let (period, row_stride, rows) = match by_rows {
            Some((stride, rows)) => (positions.len() as u64, stride as u64, rows),
            None => (0, 0, 1),
        };
        let outputs = positions.len() * rows;
        if outputs == 0 {
            return Ok(());
        }
        let positions_on_device = self.upload(positions)?;
        let gathered = self.alloc_uninit::<K>(outputs)?;
        self.launch_gather(GatherKeysParams {
            keys,
            positions: positions_on_device.global_ptr(),
            out: gathered.global_ptr(),
            len: outputs as u64,
            keys_len: len,
            seed: 0,
            period,
            row_stride,
        })?;
        let start = out.len();
        out.resize(start + outputs, K::default());
        self.copy_to_host(&gathered, &mut out[start..])
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
