//! Many ranks of every row of a matrix at once (sort & choose over rows): the rows sorted
//! side by side, then the wanted ranks read at their places in every row by one gather
//! (multiselect), or each row's quantiles interpolated where the rows lie (quantiles).
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
//! - **Pick** (multiselect). Every row is read at the same ranks: one gather for all rows,
//!   read by the host in groups through the device's page-locked staging area
//!   ([`Gpu::read_on_host`]), each row handed on from there.
//! - **Quantiles.** One kernel (`quantiles_rows_<key>`) gives each (row, quantile) its value
//!   from the sorted row: the row's keys that count (a NaN at its end is found by one read,
//!   the first NaN by bisection), the method's point, the interpolation in `f64`, the
//!   host's formulas ([`gpu_select_kernels::quantile`]). The values stay on the device or
//!   are copied to the host's slice; no key crosses to the host. (Before, the keys of the
//!   points' ranks were gathered, downloaded and interpolated on the host: 10 000 rows ×
//!   101 quantiles took 3.1–5.8 ms on an H200, most of it the host writing 8 MB, run 250.)
//!
//! A batch holds at most [`Tuning::multiselect_rows_batch_keys`](crate::Tuning) padded keys
//! (the sort keeps at most three buffers of that many keys, and no indices) and as many
//! quantile values; more rows go batch after batch through the same buffers.

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::select::multi::{GatherKeysParams, SMALL_THREADS};
use gpu_select_kernels::select::quantiles::QuantilesRowsParams;

use super::multiselect::checked_ranks;
use super::sort::Pairs;
use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::gpu::{Gpu, LaunchShape};
use crate::options::{MAX_SMALL_SORT_LEN, MultiselectAlgorithm, NanPolicy, QuantileOptions};
use crate::view::DeviceSliceMut;
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

/// Where quantiles of rows go: the host's memory, or the device's.
pub(crate) enum RowsOut<'a> {
    /// A host slice of `rows · m` values.
    Host(&'a mut [f64]),
    /// A device view of `rows · m` values (of the keys' device).
    Device(DeviceSliceMut<'a, f64>),
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

impl Gpu {
    /// The keys of `ranks` (from 0, smallest first, in the total order: NaN above +inf) in
    /// each of the `rows` rows of the row-major `keys`, by sorting the rows together (module
    /// docs), handed to `emit(row, keys)` once for every row (the keys in the order of
    /// `ranks`), in no set order. `rows > 0` divides `keys.len() > 0`. Waits for the result.
    pub(crate) fn multiselect_rows_by_sort<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        rows: usize,
        ranks: Vec<u64>,
        mut emit: impl FnMut(usize, &[K]),
    ) -> Result<()> {
        let cols = keys.len() / rows;
        let padded = padded_len(cols);
        let ranks = self.upload(&checked_ranks(ranks, cols as u64)?)?;
        let batch_rows = (self.tuning().multiselect_rows_batch_keys / padded).clamp(1, rows);
        let buffers = self.row_sort_buffers::<K>(batch_rows, cols)?;
        for first in (0..rows).step_by(batch_rows) {
            let count = batch_rows.min(rows - first);
            self.sort_rows(&keys.view(first * cols, count * cols), count, cols, &buffers)?;
            self.read_rows_at(&buffers.out, padded, count, &ranks, |row, keys| emit(first + row, keys))?;
        }
        Ok(())
    }

    /// numpy's quantiles `qs` (checked, more than none) of each of the `rows` rows of the
    /// row-major `keys` by `options`' method and NaN policy, written to `out` row after row,
    /// by sorting the rows together and interpolating on the device (module docs). `rows > 0`
    /// divides `keys.len() > 0`; `out` holds `rows · qs.len()` values. Waits for the result.
    pub(crate) fn quantiles_rows_by_sort<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        rows: usize,
        qs: &[f64],
        options: &QuantileOptions,
        mut out: RowsOut<'_>,
    ) -> Result<()> {
        let cols = keys.len() / rows;
        let m = qs.len();
        let batch_keys = self.tuning().multiselect_rows_batch_keys;
        // A batch's values are held as its keys are: at most a batch's worth.
        let batch_rows = (batch_keys / padded_len(cols)).min(batch_keys / m).clamp(1, rows);
        let buffers = self.row_sort_buffers::<K>(batch_rows, cols)?;
        let qs_on_device = self.upload(qs)?;
        let staged = match out {
            RowsOut::Host(_) => Some(self.alloc_uninit::<f64>(batch_rows * m)?),
            RowsOut::Device(_) => None,
        };
        for first in (0..rows).step_by(batch_rows) {
            let count = batch_rows.min(rows - first);
            self.sort_rows(&keys.view(first * cols, count * cols), count, cols, &buffers)?;
            let values = match (&staged, &out) {
                (Some(staged), _) => staged.global_ptr(),
                (None, RowsOut::Device(out)) => out.global_ptr().offset((first * m) as u64),
                (None, RowsOut::Host(_)) => unreachable!("host output is staged"),
            };
            self.launch_quantiles_of_sorted_rows(QuantilesRowsParams {
                sorted: buffers.out.global_ptr(),
                row_stride: padded_len(cols) as u64,
                cols: cols as u64,
                rows: count as u64,
                qs: qs_on_device.global_ptr(),
                m: m as u64,
                out: values,
                method: options.method.to_raw(),
                omit_nan: u32::from(options.nan == NanPolicy::Omit),
            })?;
            if let (Some(staged), RowsOut::Host(out)) = (&staged, &mut out) {
                self.copy_to_host(&staged.view(0, count * m), &mut out[first * m..(first + count) * m])?;
            }
        }
        if let RowsOut::Device(_) = out {
            self.synchronize()?;
        }
        Ok(())
    }

    /// Queues the quantiles kernel on `params` (`rows · m` values, more than 0).
    fn launch_quantiles_of_sorted_rows<K: SelectKey>(&self, params: QuantilesRowsParams<K>) -> Result<()> {
        let blocks = (params.rows * params.m).div_ceil(SMALL_THREADS as u64).min(1024) as u32;
        let shape = LaunchShape { grid: (blocks, 1), block_threads: SMALL_THREADS, shared_bytes: 0 };
        self.launch(K::QUANTILES_ROWS, shape, params)
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
    fn which_rows_are_sorted_together() {
        assert!(sorts_rows_together(MultiselectAlgorithm::Auto, AUTO_SORTED_ROW_MAX_KEYS));
        assert!(!sorts_rows_together(MultiselectAlgorithm::Auto, AUTO_SORTED_ROW_MAX_KEYS + 1));
        assert!(sorts_rows_together(MultiselectAlgorithm::SortAndChoose, SORTED_ROW_MAX_KEYS));
        assert!(!sorts_rows_together(MultiselectAlgorithm::SortAndChoose, SORTED_ROW_MAX_KEYS + 1));
        assert!(!sorts_rows_together(MultiselectAlgorithm::BucketMultiselect, 10));
    }
}
