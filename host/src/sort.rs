//! Small-array sort: the block bitonic sort of `gpu-select-kernels`, on segments of up to
//! 2048 keys.

use gpu_select_kernels::block::bitonic_sort::{
    BlockSortLayout, MAX_BLOCK_SORT_LEN, SORT_THREADS, segments_per_block,
};
use gpu_select_kernels::entry::KernelKey;
use gpu_select_kernels::merge::{MERGE_THREADS, MergeParams, merge_threads_for};
use gpu_select_kernels::params::{BlockSortParams, GlobalPtr};

use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::{Order, SelectKey};

/// Sorted keys with the index each came from.
#[derive(Debug)]
pub struct SortedSegments<K> {
    /// Keys, each segment in the requested order.
    pub keys: DeviceBuffer<K>,
    /// For each key, its position within its segment in the input.
    pub indices: DeviceBuffer<u64>,
}

impl Gpu {
    /// Sorts each of the `keys.len() / segment_len` consecutive segments of `keys` with the
    /// block bitonic sort (one block per segment, or several short segments per block).
    ///
    /// * Order: `Order::Smallest` ascending, `Order::Largest` descending, in the total order
    ///   of [`Key`](crate::Key) (NaN above +inf, -0.0 below +0.0).
    /// * Ties: stable, in both orders (equal keys keep their input order), so results are
    ///   the same run to run.
    /// * Keys come back bit for bit (NaN payloads too); indices are positions within the
    ///   segment.
    ///
    /// Errors: [`Error::EmptyInput`]; [`Error::InvalidArgument`] when `segment_len` is 0, over
    /// [`MAX_SMALL_SORT_LEN`], or does not divide `keys.len()`.
    ///
    /// ```
    /// use gpu_select::{Gpu, Order};
    ///
    /// let gpu = Gpu::emulator();
    /// let keys = gpu.upload(&[5i32, -1, 3, 3, 8, 0])?;
    /// let sorted = gpu.sort_segments(&keys, 3, Order::Largest)?;
    /// assert_eq!(gpu.download(&sorted.keys)?, [5, 3, -1, 8, 3, 0]);
    /// assert_eq!(gpu.download(&sorted.indices)?, [0, 2, 1, 1, 0, 2]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn sort_segments<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        segment_len: usize,
        order: Order,
    ) -> Result<SortedSegments<K>> {
        let mut sorted = SortedSegments {
            keys: self.alloc_uninit::<K>(keys.len())?,
            indices: self.alloc_uninit::<u64>(keys.len())?,
        };
        self.sort_segments_into(keys, segment_len, order, &mut sorted)?;
        Ok(sorted)
    }

    /// [`Gpu::sort_segments`] into caller-provided outputs of `keys.len()` each (no
    /// allocation; the launch is queued, and a later download waits for it).
    pub fn sort_segments_into<K: SelectKey>(
        &self,
        keys: &DeviceBuffer<K>,
        segment_len: usize,
        order: Order,
        sorted: &mut SortedSegments<K>,
    ) -> Result<()> {
        keys.check_gpu(self, "keys")?;
        sorted.keys.check_gpu(self, "the output keys")?;
        sorted.indices.check_gpu(self, "the output indices")?;
        if keys.is_empty() {
            return Err(Error::EmptyInput);
        }
        for (what, len) in [("output keys", sorted.keys.len()), ("output indices", sorted.indices.len())] {
            if len != keys.len() {
                return Err(Error::LengthMismatch { what, expected: keys.len(), actual: len });
            }
        }
        if segment_len == 0 || segment_len > MAX_SMALL_SORT_LEN {
            return Err(Error::invalid(format!(
                "segment length {segment_len}: the block sort takes 1 to {MAX_SMALL_SORT_LEN} keys per segment"
            )));
        }
        if !keys.len().is_multiple_of(segment_len) {
            return Err(Error::invalid(format!(
                "{} keys do not split into segments of {segment_len}",
                keys.len()
            )));
        }
        let segments = keys.len() / segment_len;
        let segments = u32::try_from(segments)
            .ok()
            .filter(|&segments| segments < (1 << 31))
            .ok_or_else(|| Error::invalid(format!("{segments} segments: at most 2^31 - 1 per call")))?;
        self.launch_block_sort(
            Pairs { keys: keys.global_ptr(), indices: GlobalPtr::null() },
            segment_len as u32,
            segments,
            order,
            Pairs { keys: sorted.keys.global_ptr(), indices: sorted.indices.global_ptr() },
        )
    }

    /// Queues the block sort of `segments` segments of `segment_len` keys at `input` into
    /// `output` (validated by the caller). Each key reports its index from `input.indices`,
    /// or its position in the segment when that is null.
    pub(crate) fn launch_block_sort<K: SelectKey>(
        &self,
        input: Pairs<K>,
        segment_len: u32,
        segments: u32,
        order: Order,
        output: Pairs<K>,
    ) -> Result<()> {
        let params = BlockSortParams {
            keys_in: input.keys,
            indices_in: input.indices,
            keys_out: output.keys,
            indices_out: output.indices,
            segment_len,
            order: order.to_raw(),
            segments,
            reserved: 0,
        };
        let shape = LaunchShape {
            grid: (segments.div_ceil(segments_per_block(segment_len)), 1),
            block_threads: SORT_THREADS,
            shared_bytes: BlockSortLayout::<K::Bits>::new(segment_len).bytes,
        };
        self.launch(K::BLOCK_SORT, shape, params)
    }

    /// Queues a stable sort of `len` key + index pairs of any length: the block sort makes
    /// runs of 2048, then merge passes double them. Reads `input` (which it may overwrite),
    /// uses `scratch` and writes `out`; the three hold `len` pairs each and are disjoint
    /// (`scratch` is only touched when the number of merge passes is odd).
    pub(crate) fn launch_sort_pairs<K: SelectKey>(
        &self,
        input: Pairs<K>,
        scratch: Pairs<K>,
        out: Pairs<K>,
        len: u64,
        order: Order,
    ) -> Result<()> {
        let run = MAX_SMALL_SORT_LEN as u64;
        let merge_passes = len.div_ceil(run).next_power_of_two().trailing_zeros();
        // The last merge must write `out`: with an even number of merges the runs start
        // there (out → input → out …), with an odd one in `scratch` (scratch → out → …).
        let (mut from, mut to) = if merge_passes.is_multiple_of(2) { (out, input) } else { (scratch, out) };
        let full = (len / run) as u32;
        if full > 0 {
            self.launch_block_sort(input, run as u32, full, order, from)?;
        }
        let tail = len % run;
        if tail > 0 {
            let at = full as u64 * run;
            self.launch_block_sort(input.offset(at), tail as u32, 1, order, from.offset(at))?;
        }
        let mut run_len = run;
        for _ in 0..merge_passes {
            let params = MergeParams {
                keys_in: from.keys,
                indices_in: from.indices,
                keys_out: to.keys,
                indices_out: to.indices,
                len,
                run_len,
                order: order.to_raw(),
                reserved: 0,
            };
            let blocks = merge_threads_for(len).div_ceil(MERGE_THREADS as u64);
            let blocks = u32::try_from(blocks)
                .map_err(|_| Error::invalid(format!("{len} pairs: too many to merge in one launch")))?;
            let shape = LaunchShape { grid: (blocks, 1), block_threads: MERGE_THREADS, shared_bytes: 0 };
            self.launch(K::MERGE_RUNS, shape, params)?;
            std::mem::swap(&mut from, &mut to);
            run_len *= 2;
        }
        Ok(())
    }

    /// Sorts a host slice of up to [`MAX_SMALL_SORT_LEN`] keys on the device; returns the
    /// keys in `order` and the input position of each. Same order, tie and NaN rules as
    /// [`Gpu::sort_segments`].
    ///
    /// ```
    /// use gpu_select::{Gpu, Order};
    ///
    /// let gpu = Gpu::emulator();
    /// let (keys, indices) = gpu.sort_small(&[2.5f32, f32::NAN, -0.0, 0.0], Order::Smallest)?;
    /// assert_eq!(indices, [2, 3, 0, 1]); // -0.0 before 0.0, NaN last
    /// assert!(keys[3].is_nan());
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn sort_small<K: SelectKey>(&self, keys: &[K], order: Order) -> Result<(Vec<K>, Vec<u64>)> {
        if keys.len() > MAX_SMALL_SORT_LEN {
            return Err(Error::invalid(format!(
                "{} keys: sort_small takes at most {MAX_SMALL_SORT_LEN}",
                keys.len()
            )));
        }
        let device_keys = self.upload(keys)?;
        let sorted = self.sort_segments(&device_keys, keys.len().max(1), order)?;
        Ok((self.download(&sorted.keys)?, self.download(&sorted.indices)?))
    }
}

/// Key + index arrays in device memory, as sorts pass them around.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pairs<K> {
    pub(crate) keys: GlobalPtr<K>,
    pub(crate) indices: GlobalPtr<u64>,
}

impl<K> Pairs<K> {
    /// The pairs `count` further on.
    pub(crate) fn offset(self, count: u64) -> Self {
        Self { keys: self.keys.offset(count), indices: self.indices.offset(count) }
    }

    /// The pairs at two device addresses.
    pub(crate) fn at(keys: u64, indices: u64) -> Self {
        Self { keys: GlobalPtr::from_address(keys), indices: GlobalPtr::from_address(indices) }
    }
}

/// The longest segment the block sort takes.
pub const MAX_SMALL_SORT_LEN: usize = MAX_BLOCK_SORT_LEN as usize;

// Every key type of the library has a block-sort kernel (a compile-time check of the table).
const _: () = {
    const fn has_sort<K: KernelKey>() {}
    has_sort::<f32>();
    has_sort::<f64>();
    has_sort::<i32>();
    has_sort::<u32>();
    has_sort::<i64>();
    has_sort::<u64>();
};
