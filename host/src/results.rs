//! What the operations return: top-k results, selections, sorted segments, and the output
//! views the `_into` forms write through.

use crate::buffer::{DeviceBuffer, DeviceValue};
use crate::view::DeviceSliceMut;

/// The result of a top-k: `k` keys per row (one row for one array), best first, and the
/// index of each in the input (its position, its column for rows, or the caller's index
/// given with [`Keys::with_indices`](crate::Keys::with_indices)).
#[derive(Debug)]
pub struct TopK<K> {
    /// The keys, row after row. Sorted (unless
    /// [`TopKOptions::sorted`](crate::TopKOptions::sorted) is off): largest first for
    /// [`Order::Largest`](crate::Order::Largest), smallest first otherwise.
    pub values: DeviceBuffer<K>,
    /// Index of each key (64-bit).
    pub indices: DeviceBuffer<u64>,
}

/// The result of a k-NN search ([`FlatIndex::search`](crate::FlatIndex::search)): `k`
/// neighbours per query, query after query, nearest first.
#[derive(Debug)]
pub struct Neighbours {
    /// Distances (squared L2), or similarities (inner product, cosine: largest first).
    pub distances: DeviceBuffer<f32>,
    /// The base index of each neighbour.
    pub indices: DeviceBuffer<u64>,
}

/// Where [`Gpu::top_k_into`](crate::Gpu::top_k_into) writes: `rows · k` values and indices
/// in memory the caller owns (a [`TopK`]'s buffers, parts of buffers, or views of another
/// library's memory).
///
/// ```
/// use gpu_select::{Gpu, TopKOut};
///
/// let gpu = Gpu::emulator();
/// let mut values = gpu.alloc_zeroed::<f32>(8)?;
/// let mut indices = gpu.alloc_zeroed::<u64>(8)?;
/// let out = TopKOut::new(&mut values, &mut indices);
/// assert_eq!(out.len(), 8);
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub struct TopKOut<'a, K> {
    /// The keys.
    pub values: DeviceSliceMut<'a, K>,
    /// Their indices.
    pub indices: DeviceSliceMut<'a, u64>,
}

impl<'a, K: DeviceValue> TopKOut<'a, K> {
    /// Outputs in two views (or buffers: `&mut DeviceBuffer` converts).
    pub fn new(
        values: impl Into<DeviceSliceMut<'a, K>>,
        indices: impl Into<DeviceSliceMut<'a, u64>>,
    ) -> Self {
        Self { values: values.into(), indices: indices.into() }
    }

    /// The number of values (`rows · k` for the call to accept it).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the outputs hold nothing.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl<K: DeviceValue> std::fmt::Debug for TopKOut<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopKOut").field("values", &self.values).field("indices", &self.indices).finish()
    }
}

impl<'a, K: DeviceValue> From<&'a mut TopK<K>> for TopKOut<'a, K> {
    fn from(top: &'a mut TopK<K>) -> Self {
        TopKOut::new(&mut top.values, &mut top.indices)
    }
}

/// A selection: a key of the input and its exact rank. An exact selection's rank is the one
/// asked for; an approximate one's
/// ([`SelectAlgorithm::Approximate`](crate::SelectAlgorithm::Approximate)) is the nearest
/// to it among the keys one level of SampleSelect can rank.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Selection<K> {
    /// A key of the input.
    pub value: K,
    /// Its rank (from 0, in the order asked for): `value` is the exact answer for this rank.
    pub rank: u64,
    /// Exact selection: the levels it took. Approximate selection: passes over the whole
    /// input, 1 when the first pass answered (the window pass, or the full count without a
    /// window), 2 when the window missed and the full count ran after it.
    pub passes: u32,
}

impl<K> Selection<K> {
    /// How far [`Selection::rank`] is from the rank asked for (0 for exact selection).
    pub fn error(&self, wanted: u64) -> u64 {
        self.rank.abs_diff(wanted)
    }
}

/// Sorted keys with the index each came from ([`Gpu::sort_segments`](crate::Gpu::sort_segments)).
#[derive(Debug)]
pub struct SortedSegments<K> {
    /// Keys, each segment in the requested order.
    pub keys: DeviceBuffer<K>,
    /// For each key, its position within its segment in the input.
    pub indices: DeviceBuffer<u64>,
}
