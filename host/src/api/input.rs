//! The input of a top-k: where the keys are, how they are laid out, and what goes with
//! them.

use crate::SelectKey;
use crate::buffer::DeviceBuffer;
use crate::options::{InputFilter, KeyTransform};
use crate::view::DeviceSlice;

/// The keys of a top-k: one array, dense rows (row-major, with a row stride: RAFT's and
/// BLAS's leading dimension), or ragged rows given by offsets (CSR); each optionally with
/// the caller's own index for every key (RAFT's `in_idx`: the results report those instead
/// of positions), and for one array a filter and a key transform fused into the bitonic
/// top-k.
///
/// A buffer or a view converts to one array, so `gpu.top_k(&buffer, k, &options)` works.
///
/// ```
/// use gpu_select::{Gpu, Keys, TopKOptions};
///
/// let gpu = Gpu::emulator();
/// // Two rows of three keys, stored with a stride of four (the fourth column is not a key).
/// let matrix = gpu.upload(&[3.0f32, 9.0, 1.0, 0.0, /* row 1: */ 5.0, -5.0, 8.0, 0.0])?;
/// let ids = gpu.upload(&[10u64, 11, 12, 0, 20, 21, 22, 0])?;
/// let keys = Keys::rows_strided(&matrix, 2, 3, 4).with_indices(&ids);
/// let top = gpu.top_k(keys, 2, &TopKOptions::largest())?;
/// assert_eq!(gpu.download(&top.values)?, [9.0, 3.0, 8.0, 5.0]);
/// assert_eq!(gpu.download(&top.indices)?, [11, 10, 22, 20]);
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub struct Keys<'a, K> {
    pub(crate) data: DeviceSlice<'a, K>,
    pub(crate) layout: Layout<'a>,
    pub(crate) indices: Option<DeviceSlice<'a, u64>>,
    pub(crate) filter: InputFilter<'a, K>,
    pub(crate) transform: KeyTransform<K>,
}

/// How the keys are laid out.
pub(crate) enum Layout<'a> {
    /// One array.
    Flat,
    /// `rows` rows of `cols` keys, row `r` at `r · stride`; `exact`: the data holds those
    /// keys and no more ([`Keys::rows`]), else at least them ([`Keys::rows_strided`]).
    Dense { rows: usize, cols: usize, stride: usize, exact: bool },
    /// Row `r` is keys `offsets[r] .. offsets[r + 1]`.
    Ragged(DeviceSlice<'a, u64>),
}

impl<'a, K: SelectKey> Keys<'a, K> {
    fn with_layout(data: DeviceSlice<'a, K>, layout: Layout<'a>) -> Self {
        Keys { data, layout, indices: None, filter: InputFilter::All, transform: KeyTransform::Identity }
    }

    /// One array: the top-k of all of it; indices are positions in it.
    pub fn new(data: impl Into<DeviceSlice<'a, K>>) -> Self {
        Self::with_layout(data.into(), Layout::Flat)
    }

    /// A row-major matrix of `rows × cols` keys (`data` holds exactly that many): the top-k
    /// of every row, `rows · k` results row after row; indices are columns.
    pub fn rows(data: impl Into<DeviceSlice<'a, K>>, rows: usize, cols: usize) -> Self {
        Self::with_layout(data.into(), Layout::Dense { rows, cols, stride: cols, exact: true })
    }

    /// Rows of `cols` keys, row `r` starting at key `r · row_stride` (`row_stride ≥ cols`;
    /// `data` holds at least `(rows − 1) · row_stride + cols` keys).
    pub fn rows_strided(
        data: impl Into<DeviceSlice<'a, K>>,
        rows: usize,
        cols: usize,
        row_stride: usize,
    ) -> Self {
        Self::with_layout(data.into(), Layout::Dense { rows, cols, stride: row_stride, exact: false })
    }

    /// Rows of varying length, as in CSR: row `r` is `data[offsets[r] .. offsets[r + 1]]`,
    /// so `offsets` has `rows + 1` entries (on the device). Rows shorter than `k` (empty
    /// ones too) return what they have, then padding: [`PADDING_INDEX`](crate::PADDING_INDEX)
    /// and the worst non-NaN key of the order (`+inf` / `MAX` for the smallest keys, `-inf`
    /// / `MIN` for the largest). Planning reads the offsets back (a wait).
    pub fn ragged(data: impl Into<DeviceSlice<'a, K>>, offsets: impl Into<DeviceSlice<'a, u64>>) -> Self {
        Self::with_layout(data.into(), Layout::Ragged(offsets.into()))
    }

    /// The caller's index of every key (as many as the keys, laid out alike): the results
    /// report these instead of positions. For rows with `k ≤ 2048` taken by the queues
    /// ([`Algorithm::WarpSelect`](crate::Algorithm::WarpSelect)) or by radix selection with
    /// a warp per row (rows of at most 1024 keys, `k ≤ 256`), an index equal to
    /// [`PADDING_INDEX`](crate::PADDING_INDEX) marks a key that takes no part. Radix
    /// selection with a block per row (longer rows, or `k > 256`) and `k` beyond 2048 let
    /// every key take part and report its index: there, force `Algorithm::WarpSelect` to
    /// leave keys out.
    pub fn with_indices(self, indices: impl Into<DeviceSlice<'a, u64>>) -> Self {
        Keys { indices: Some(indices.into()), ..self }
    }

    /// Only the keys `filter` admits take part (one array; fused into the bitonic top-k, so
    /// `k ≤ 1024`). Fewer than `k` admitted: the result ends in padding, as ragged rows
    /// pad.
    ///
    /// ```
    /// use gpu_select::{Gpu, InputFilter, KeyTransform, Keys, TopKOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[4.0f32, -9.5, 2.0, 30.0, -7.0])?;
    /// // The two largest magnitudes among the keys below 10.
    /// let keys = Keys::new(&data)
    ///     .with_filter(InputFilter::Range { low: f32::NEG_INFINITY, high: 10.0 })
    ///     .with_transform(KeyTransform::Magnitude);
    /// let top = gpu.top_k(keys, 2, &TopKOptions::largest())?;
    /// assert_eq!(gpu.download(&top.values)?, [-9.5, -7.0]); // the keys as stored
    /// assert_eq!(gpu.download(&top.indices)?, [1, 4]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn with_filter(self, filter: InputFilter<'a, K>) -> Self {
        Keys { filter, ..self }
    }

    /// The keys are ranked by `transform` of each (one array; fused into the bitonic top-k,
    /// so `k ≤ 1024`); the results are the keys as stored.
    pub fn with_transform(self, transform: KeyTransform<K>) -> Self {
        Keys { transform, ..self }
    }

    /// Whether a filter or a transform is fused in.
    pub(crate) fn is_fused(&self) -> bool {
        !matches!(self.filter, InputFilter::All) || !matches!(self.transform, KeyTransform::Identity)
    }
}

impl<'a, K: SelectKey> From<&'a DeviceBuffer<K>> for Keys<'a, K> {
    fn from(data: &'a DeviceBuffer<K>) -> Self {
        Keys::new(data)
    }
}

impl<'a, K: SelectKey> From<DeviceSlice<'a, K>> for Keys<'a, K> {
    fn from(data: DeviceSlice<'a, K>) -> Self {
        Keys::new(data)
    }
}

impl<'a, K: SelectKey> From<&'a DeviceSlice<'_, K>> for Keys<'a, K> {
    fn from(data: &'a DeviceSlice<'_, K>) -> Self {
        Keys::new(data)
    }
}
