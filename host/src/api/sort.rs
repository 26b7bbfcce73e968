//! Sorting small segments: the block bitonic sort of up to 2048 keys per segment.

use gpu_select_kernels::params::GlobalPtr;

use crate::engine::sort::Pairs;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::options::MAX_SMALL_SORT_LEN;
use crate::results::SortedSegments;
use crate::view::{DeviceSlice, DeviceSliceMut};
use crate::{Order, SelectKey};

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
    pub fn sort_segments<'a, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        segment_len: usize,
        order: Order,
    ) -> Result<SortedSegments<K>> {
        let keys = keys.into();
        let mut sorted = SortedSegments {
            keys: self.alloc_uninit::<K>(keys.len())?,
            indices: self.alloc_uninit::<u64>(keys.len())?,
        };
        self.sort_segments_into(keys, segment_len, order, (&mut sorted.keys, &mut sorted.indices))?;
        Ok(sorted)
    }

    /// [`Gpu::sort_segments`] into caller-provided outputs (sorted keys and indices) of
    /// `keys.len()` each: no allocation; the launch is queued, and a later download waits
    /// for it.
    pub fn sort_segments_into<'a, 'o, K: SelectKey>(
        &self,
        keys: impl Into<DeviceSlice<'a, K>>,
        segment_len: usize,
        order: Order,
        (sorted_keys, sorted_indices): (impl Into<DeviceSliceMut<'o, K>>, impl Into<DeviceSliceMut<'o, u64>>),
    ) -> Result<()> {
        let keys = keys.into();
        let (mut sorted_keys, mut sorted_indices) = (sorted_keys.into(), sorted_indices.into());
        let sorted = SortedSegments { keys: sorted_keys.buffer_mut(), indices: sorted_indices.buffer_mut() };
        keys.buffer().check_gpu(self, "keys")?;
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
