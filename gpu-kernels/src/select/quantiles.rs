//! numpy's quantiles of rows already sorted, on the device: one thread a (row, quantile)
//! finds the row's keys that count (NaN sorts last), the quantile's point
//! ([`QuantileMethod::point`], the host's own formula) and interpolates its two keys in
//! `f64`. What the host did after downloading the keys of the points' ranks: here the
//! values never leave the device unless asked for, and no key crosses to the host.

use crate::device;
use crate::key::Key;
use crate::params::GlobalPtr;
use crate::quantile::QuantileMethod;

/// Launch parameters of [`of_sorted_rows`].
#[repr(C)]
pub struct QuantilesRowsParams<K> {
    /// The rows, each sorted ascending in the keys' total order (NaN last), its keys first.
    pub sorted: GlobalPtr<K>,
    /// Keys from one row's start to the next's.
    pub row_stride: u64,
    /// Keys a row holds (more than 0).
    pub cols: u64,
    /// Rows.
    pub rows: u64,
    /// The quantiles, each in `[0, 1]`.
    pub qs: GlobalPtr<f64>,
    /// How many.
    pub m: u64,
    /// `rows · m` values, row after row.
    pub out: GlobalPtr<f64>,
    /// [`QuantileMethod::to_raw`].
    pub method: u32,
    /// 1: NaN keys are left out (numpy's `nanquantile`); 0: a row holding one gets NaN
    /// quantiles (`quantile`).
    pub omit_nan: u32,
}

impl<K> Clone for QuantilesRowsParams<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for QuantilesRowsParams<K> {}

/// The `quantiles_rows_<key>` kernel: `out[row · m + j]` = quantile `qs[j]` of row `row`, a
/// grid-stride loop over them.
///
/// # Safety
/// Every pointer valid for what [`QuantilesRowsParams`] says it holds.
pub unsafe fn of_sorted_rows<K: Key>(params: QuantilesRowsParams<K>) {
    let method = QuantileMethod::from_raw(params.method);
    let total = params.rows * params.m;
    let stride = device::grid_dim_x() as u64 * device::block_dim_x() as u64;
    let mut i = device::global_thread_idx();
    while i < total {
        let row = i / params.m;
        let keys = params.sorted.offset(row * params.row_stride);
        let counted = unsafe { keys_counted(keys, params.cols, params.omit_nan != 0) };
        let value = if counted == 0 {
            f64::NAN
        } else {
            let q = unsafe { params.qs.read(i - row * params.m) };
            let point = method.point(counted, q);
            let below = unsafe { keys.read(point.below) }.to_f64();
            let above =
                if point.above == point.below { below } else { unsafe { keys.read(point.above) }.to_f64() };
            point.value(below, above)
        };
        unsafe { params.out.write(i, value) };
        i += stride;
    }
}

/// How many of a sorted row's `cols` keys a quantile counts: all when its last key is not
/// NaN; else none (NaN propagates) or those before its first NaN, found by bisection.
///
/// # Safety
/// `cols > 0` keys at `keys`.
#[inline(always)]
unsafe fn keys_counted<K: Key>(keys: GlobalPtr<K>, cols: u64, omit_nan: bool) -> u64 {
    let is_nan = |position: u64| unsafe { keys.read(position) }.to_f64().is_nan();
    if !is_nan(cols - 1) {
        return cols;
    }
    if !omit_nan {
        return 0;
    }
    // The first NaN lies in `low ..= high`.
    let (mut low, mut high) = (0, cols - 1);
    while low < high {
        let middle = low + (high - low) / 2;
        if is_nan(middle) {
            high = middle;
        } else {
            low = middle + 1;
        }
    }
    low
}
