//! Many ranks at once: the keys of given ranks (multiselect) and numpy's quantiles, of an
//! array or of each row of a matrix.

use crate::SelectKey;
use crate::buffer::DeviceBuffer;
use crate::engine::multiselect_rows::{RowsOut, sorts_rows_together};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::options::{MultiselectAlgorithm, QuantileOptions};
use crate::quantile::{check_quantiles, quantile_ranks, quantile_values};
use crate::results::Selection;
use crate::view::DeviceSlice;

impl Gpu {
    /// The keys of many ranks at once (from 0, smallest first, in the total order of
    /// [`Key`](crate::Key): NaN above +inf), each with its exact rank, in the order asked;
    /// ranks may repeat. [`Selection::passes`] says how many times the whole input was read
    /// (bucket multiselect: 2 at most; 0 for sort & choose, which sorts it).
    ///
    /// Errors: [`Error::EmptyInput`]; [`Error::KOutOfRange`] for a rank `≥ n`. Waits for
    /// the result.
    ///
    /// ```
    /// use gpu_select::{Gpu, MultiselectAlgorithm};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&(0..100_000u32).rev().collect::<Vec<_>>())?;
    /// let found = gpu.multiselect(&data, &[0, 50_000, 99_999, 7], MultiselectAlgorithm::BucketMultiselect)?;
    /// let values: Vec<u32> = found.iter().map(|s| s.value).collect();
    /// assert_eq!(values, [0, 50_000, 99_999, 7]); // the key of rank r is r here
    /// assert!(found[0].passes <= 2);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn multiselect<'a, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        ranks: &[usize],
        algorithm: MultiselectAlgorithm,
    ) -> Result<Vec<Selection<K>>> {
        let keys = keys.into();
        keys.buffer().check_gpu(self, "the keys")?;
        let wanted: Vec<u64> = ranks.iter().map(|&r| r as u64).collect();
        let outcome = self.run_multiselect(keys.buffer(), algorithm, |_, _| Ok(wanted))?;
        Ok(outcome
            .ranks
            .iter()
            .zip(outcome.values)
            .map(|(&rank, value)| Selection { value, rank, passes: outcome.data_passes })
            .collect())
    }

    /// [`Gpu::multiselect`] of a host slice: uploads it first.
    pub fn multiselect_host<K: SelectKey>(
        &self,
        keys: &[K],
        ranks: &[usize],
        algorithm: MultiselectAlgorithm,
    ) -> Result<Vec<Selection<K>>> {
        self.multiselect(&self.upload(keys)?, ranks, algorithm)
    }

    /// Quantiles `qs` (each in `[0, 1]`) of `keys` by one of numpy's thirteen methods, as
    /// `numpy.quantile(keys, qs, method=…)` gives them (or `numpy.nanquantile` with
    /// [`NanPolicy::Omit`](crate::NanPolicy::Omit)), in `f64`: the keys are found by multiselect and
    /// interpolated in `f64` (numpy interpolates `f32` input in `f32`, so its result may
    /// differ there by an `f32` rounding; integer keys above 2^53 round to `f64`). The
    /// formulas: [`QuantileMethod`](crate::QuantileMethod).
    ///
    /// NaN: with [`NanPolicy::Propagate`](crate::NanPolicy::Propagate) any NaN key makes every quantile NaN; with
    /// [`NanPolicy::Omit`](crate::NanPolicy::Omit) they are left out, and every quantile is NaN when all keys are.
    ///
    /// Errors: [`Error::EmptyInput`]; [`Error::InvalidArgument`] for a `q` outside `[0, 1]`
    /// or NaN. Waits for the result.
    ///
    /// ```
    /// use gpu_select::{Gpu, QuantileMethod, QuantileOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[3.0f64, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0])?;
    /// let linear = gpu.quantiles(&data, &[0.0, 0.5, 0.9, 1.0], &QuantileOptions::default())?;
    /// assert_eq!(linear, [1.0, 3.5, 6.8999999999999995, 9.0]); // numpy.quantile's values
    /// let lower = QuantileOptions::new(QuantileMethod::Lower);
    /// assert_eq!(gpu.quantiles(&data, &[0.5], &lower)?, [3.0]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn quantiles<'a, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        qs: &[f64],
        options: &QuantileOptions,
    ) -> Result<Vec<f64>> {
        let keys = keys.into();
        keys.buffer().check_gpu(self, "the keys")?;
        check_quantiles(qs)?;
        let mut points = None;
        let outcome = self.run_multiselect(keys.buffer(), options.algorithm, |n, nan_count| {
            let (found, ranks) = quantile_ranks(n, nan_count, qs, options);
            points = found;
            Ok(ranks)
        })?;
        Ok(quantile_values(points.as_deref(), &outcome.values, qs.len()))
    }

    /// [`Gpu::quantiles`] of a host slice: uploads it first.
    pub fn quantiles_host<K: SelectKey>(
        &self,
        keys: &[K],
        qs: &[f64],
        options: &QuantileOptions,
    ) -> Result<Vec<f64>> {
        self.quantiles(&self.upload(keys)?, qs, options)
    }

    /// [`Gpu::multiselect`] of each row of a row-major matrix of `rows` rows: the keys of
    /// the same `ranks` in every row, `rows · ranks.len()` of them, row after row (ranks
    /// count within a row). [`MultiselectAlgorithm::Auto`] sorts the rows together (a batch
    /// of many rows at once) when they hold at most 2^20 keys each, and runs a bucket
    /// multiselect per row beyond; [`MultiselectAlgorithm::SortAndChoose`] sorts them
    /// together up to 2^24 keys a row. Rows sorted together report 0 passes (and a NaN key
    /// as the canonical NaN).
    ///
    /// Errors: as [`Gpu::multiselect`] (a rank is checked against the row's length);
    /// [`Error::InvalidArgument`] when `rows` is 0 or does not divide the keys. Waits for
    /// the result.
    ///
    /// ```
    /// use gpu_select::{Gpu, MultiselectAlgorithm};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[4u32, 1, 3, 2, 40, 10, 30, 20])?;
    /// let found = gpu.multiselect_rows(&data, 2, &[0, 3], MultiselectAlgorithm::Auto)?;
    /// let values: Vec<u32> = found.iter().map(|s| s.value).collect();
    /// assert_eq!(values, [1, 4, 10, 40]); // each row's smallest and largest
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn multiselect_rows<'a, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        rows: usize,
        ranks: &[usize],
        algorithm: MultiselectAlgorithm,
    ) -> Result<Vec<Selection<K>>> {
        let keys = keys.into();
        keys.buffer().check_gpu(self, "the keys")?;
        let columns = row_length(keys.len(), rows)?;
        if !sorts_rows_together(algorithm, columns) {
            return each_row(&keys, rows, ranks.len(), |row| self.multiselect(row, ranks, algorithm));
        }
        let m = ranks.len();
        let mut out = vec![Selection { value: K::default(), rank: 0, passes: 0 }; rows * m];
        self.multiselect_rows_by_sort(
            keys.buffer(),
            rows,
            ranks.iter().map(|&r| r as u64).collect(),
            |row, found| {
                for ((slot, &value), &rank) in out[row * m..(row + 1) * m].iter_mut().zip(found).zip(ranks) {
                    *slot = Selection { value, rank: rank as u64, passes: 0 };
                }
            },
        )?;
        Ok(out)
    }

    /// [`Gpu::quantiles`] of each row of a row-major matrix of `rows` rows (torch's
    /// `quantile(…, dim=-1)`): `rows · qs.len()` values, row after row. The rows' keys are
    /// found as [`Gpu::multiselect_rows`] finds them (`options.algorithm`): many short rows
    /// sorted together, long rows a bucket multiselect each.
    ///
    /// Errors: as [`Gpu::quantiles`]; [`Error::InvalidArgument`] when `rows` is 0 or does not
    /// divide the keys.
    ///
    /// ```
    /// use gpu_select::{Gpu, QuantileOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[1u32, 2, 3, 4, 10, 20, 30, 40])?;
    /// let medians = gpu.quantiles_rows(&data, 2, &[0.5], &QuantileOptions::default())?;
    /// assert_eq!(medians, [2.5, 25.0]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn quantiles_rows<'a, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        rows: usize,
        qs: &[f64],
        options: &QuantileOptions,
    ) -> Result<Vec<f64>> {
        let keys = keys.into();
        // The shape is checked before the result is allocated (a bad `rows` is an error,
        // not an allocation of its size).
        row_length(keys.len(), rows)?;
        let mut out = vec![0.0; rows * qs.len()];
        self.quantiles_rows_into(keys, rows, qs, options, &mut out)?;
        Ok(out)
    }

    /// [`Gpu::quantiles_rows`] written to `out` (`rows · qs.len()` values, row after row), for
    /// a caller that keeps its result's memory from call to call: the copy then lands in
    /// pages the host already has (H200, run 259: 10 000 rows × 101 quantiles 1.08–1.24 ms
    /// into a kept slice against 2.17–2.31 into a new vector; 0.25 left on the device, with
    /// [`Gpu::quantiles_rows_on_device`]).
    ///
    /// Errors: as [`Gpu::quantiles_rows`]; [`Error::LengthMismatch`] when `out` is not
    /// `rows · qs.len()` long.
    ///
    /// ```
    /// use gpu_select::{Gpu, QuantileOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[1.0f32, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0])?;
    /// let mut quartiles = vec![0.0; 2 * 3];
    /// gpu.quantiles_rows_into(&data, 2, &[0.25, 0.5, 0.75], &QuantileOptions::default(), &mut quartiles)?;
    /// assert_eq!(quartiles, [1.75, 2.5, 3.25, 17.5, 25.0, 32.5]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn quantiles_rows_into<'a, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        rows: usize,
        qs: &[f64],
        options: &QuantileOptions,
        out: &mut [f64],
    ) -> Result<()> {
        let keys = keys.into();
        keys.buffer().check_gpu(self, "the keys")?;
        check_quantiles(qs)?;
        let columns = row_length(keys.len(), rows)?;
        let m = qs.len();
        if out.len() != rows * m {
            return Err(Error::LengthMismatch {
                what: "quantiles of rows",
                expected: rows * m,
                actual: out.len(),
            });
        }
        if !sorts_rows_together(options.algorithm, columns) {
            let values = each_row(&keys, rows, m, |row| self.quantiles(row, qs, options))?;
            out.copy_from_slice(&values);
            return Ok(());
        }
        if m == 0 {
            return Ok(());
        }
        self.quantiles_rows_by_sort(keys.buffer(), rows, qs, options, RowsOut::Host(out))
    }

    /// [`Gpu::quantiles_rows`] left on the device: `rows · qs.len()` values, row after row, in
    /// a new buffer of this GPU's, for a caller whose next step runs there too. Rows sorted
    /// together ([`MultiselectAlgorithm::Auto`] up to 2^20 keys a row) are interpolated on
    /// the device and never cross to the host; rows a bucket multiselect each are computed as
    /// [`Gpu::quantiles_rows`] computes them and uploaded.
    ///
    /// Errors: as [`Gpu::quantiles_rows`]. Waits for the result.
    ///
    /// ```
    /// use gpu_select::{Gpu, QuantileOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[1.0f32, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0])?;
    /// let medians = gpu.quantiles_rows_on_device(&data, 2, &[0.5], &QuantileOptions::default())?;
    /// assert_eq!(gpu.download(&medians)?, [2.5, 25.0]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn quantiles_rows_on_device<'a, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        rows: usize,
        qs: &[f64],
        options: &QuantileOptions,
    ) -> Result<DeviceBuffer<f64>> {
        let keys = keys.into();
        keys.buffer().check_gpu(self, "the keys")?;
        check_quantiles(qs)?;
        let columns = row_length(keys.len(), rows)?;
        if !sorts_rows_together(options.algorithm, columns) {
            return self.upload(&each_row(&keys, rows, qs.len(), |row| self.quantiles(row, qs, options))?);
        }
        let mut out = self.alloc_zeroed::<f64>(rows.saturating_mul(qs.len()))?;
        if !qs.is_empty() {
            self.quantiles_rows_by_sort(
                keys.buffer(),
                rows,
                qs,
                options,
                RowsOut::Device((&mut out).into()),
            )?;
        }
        Ok(out)
    }
}

/// `per_row` of each of the `rows` rows of `keys` (one call a row), `per_row_len` results
/// each, row after row.
fn each_row<'a, K: SelectKey, T>(
    keys: &DeviceSlice<'a, K>,
    rows: usize,
    per_row_len: usize,
    mut per_row: impl FnMut(DeviceSlice<'_, K>) -> Result<Vec<T>>,
) -> Result<Vec<T>> {
    let columns = keys.len() / rows;
    let mut out = Vec::with_capacity(rows * per_row_len);
    for row in 0..rows {
        out.extend(per_row(keys.slice(row * columns..(row + 1) * columns))?);
    }
    Ok(out)
}

/// The length of each of `rows` rows of `len` keys: errors when `rows` is 0 or does not
/// divide them, and for rows of no keys.
fn row_length(len: usize, rows: usize) -> Result<usize> {
    if rows == 0 || !len.is_multiple_of(rows) {
        return Err(Error::invalid(format!("{len} keys do not make {rows} rows of equal length")));
    }
    if len == 0 {
        return Err(Error::EmptyInput);
    }
    Ok(len / rows)
}
