//! Views: device memory the library reads or writes without owning it, for the length of a
//! borrow. A part of a [`DeviceBuffer`], memory from a raw pointer (PyTorch's
//! `tensor.data_ptr()`, cust's `DeviceBuffer::as_device_ptr()`, any `CUdeviceptr`), or with
//! the `cudarc` feature a cudarc `CudaSlice`. Every operation takes its inputs as
//! [`DeviceSlice`]s and writes its outputs through [`DeviceSliceMut`]s, so all of these
//! work wherever a buffer does.

use std::marker::PhantomData;
use std::ops::{Bound, Deref, RangeBounds};

use crate::buffer::{DeviceBuffer, DeviceValue};
use crate::error::{Error, Result};
use crate::gpu::Gpu;

/// A read-only view of `len` values in device memory (on the emulator, host memory) for the
/// lifetime `'a`. Derefs to a [`DeviceBuffer`] that frees nothing, so its length and a
/// [`Gpu::download`] work as on a buffer.
///
/// ```
/// use gpu_select::{DeviceSlice, Gpu, Order, TopKOptions};
///
/// let gpu = Gpu::emulator();
/// let data = gpu.upload(&[4.0f32, 9.5, -1.0, 8.0, 7.0])?;
/// let tail: DeviceSlice<f32> = data.slice(2..);
/// let top = gpu.top_k(tail, 2, &TopKOptions::new(Order::Largest))?;
/// assert_eq!(gpu.download(&top.values)?, [8.0, 7.0]);
/// assert_eq!(gpu.download(&top.indices)?, [1, 2]); // positions in the view
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub struct DeviceSlice<'a, T> {
    buffer: DeviceBuffer<T>,
    borrow: PhantomData<&'a [T]>,
    /// A cudarc slice's event bookkeeping, done when the view drops (held for its drop).
    #[cfg(feature = "cudarc")]
    #[allow(dead_code)]
    sync: Option<cudarc::driver::SyncOnDrop<'a>>,
}

/// A writable view of `len` values in device memory for the lifetime `'a`: where an
/// operation's `_into` form writes its outputs. Derefs (read-only) to a [`DeviceBuffer`]
/// that frees nothing.
pub struct DeviceSliceMut<'a, T> {
    buffer: DeviceBuffer<T>,
    borrow: PhantomData<&'a mut [T]>,
    /// A cudarc slice's event bookkeeping, done when the view drops (held for its drop).
    #[cfg(feature = "cudarc")]
    #[allow(dead_code)]
    sync: Option<cudarc::driver::SyncOnDrop<'a>>,
}

impl<T> Deref for DeviceSlice<'_, T> {
    type Target = DeviceBuffer<T>;
    fn deref(&self) -> &DeviceBuffer<T> {
        &self.buffer
    }
}

impl<T> Deref for DeviceSliceMut<'_, T> {
    type Target = DeviceBuffer<T>;
    fn deref(&self) -> &DeviceBuffer<T> {
        &self.buffer
    }
}

impl<T: DeviceValue> std::fmt::Debug for DeviceSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceSlice<{}>[{}]", std::any::type_name::<T>(), self.buffer.len())
    }
}

impl<T: DeviceValue> std::fmt::Debug for DeviceSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceSliceMut<{}>[{}]", std::any::type_name::<T>(), self.buffer.len())
    }
}

impl<T> DeviceSlice<'_, T> {
    fn wrap(buffer: DeviceBuffer<T>) -> Self {
        #[cfg(feature = "cudarc")]
        return Self { buffer, borrow: PhantomData, sync: None };
        #[cfg(not(feature = "cudarc"))]
        Self { buffer, borrow: PhantomData }
    }
}

impl<T> DeviceSliceMut<'_, T> {
    fn wrap(buffer: DeviceBuffer<T>) -> Self {
        #[cfg(feature = "cudarc")]
        return Self { buffer, borrow: PhantomData, sync: None };
        #[cfg(not(feature = "cudarc"))]
        Self { buffer, borrow: PhantomData }
    }
}

/// Checks a raw view's address and length: aligned for `T`, not null unless empty, a byte
/// length that fits `usize`, and on a GPU memory the driver knows as `gpu`'s device's.
fn check_raw_on<T>(gpu: &Gpu, address: u64, len: usize) -> Result<()> {
    check_raw::<T>(address, len)?;
    if len > 0 { gpu.check_device_address(address) } else { Ok(()) }
}

/// Checks a raw view's address and length: aligned for `T`, not null unless empty, and a
/// byte length that fits `usize`.
fn check_raw<T>(address: u64, len: usize) -> Result<()> {
    if len.checked_mul(size_of::<T>()).is_none() {
        return Err(Error::invalid(format!("a view of {len} values overflows usize")));
    }
    if len > 0 && address == 0 {
        return Err(Error::invalid("a view of a null address"));
    }
    if !address.is_multiple_of(align_of::<T>() as u64) {
        return Err(Error::invalid(format!(
            "address {address:#x} is not aligned for {} ({} bytes)",
            std::any::type_name::<T>(),
            align_of::<T>()
        )));
    }
    Ok(())
}

/// `range` of `0..len`, as start and length; panics out of bounds, as slicing does.
fn bounds(range: impl RangeBounds<usize>, len: usize) -> (usize, usize) {
    let start = match range.start_bound() {
        Bound::Included(&start) => start,
        Bound::Excluded(&start) => start + 1,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&end) => end + 1,
        Bound::Excluded(&end) => end,
        Bound::Unbounded => len,
    };
    assert!(start <= end && end <= len, "range {start}..{end} out of a view of {len} values");
    (start, end - start)
}

impl<'a, T: DeviceValue> DeviceSlice<'a, T> {
    /// A view of `len` values of `T` at `address` on `gpu`'s device (a `CUdeviceptr`; on the
    /// emulator, a host address).
    ///
    /// Errors: [`Error::InvalidArgument`] for an address not aligned for `T`, a null address
    /// with `len > 0`, a length whose bytes overflow, or (on a GPU) an address the driver
    /// does not know as memory of this handle's device.
    ///
    /// # Safety
    /// The `len · size_of::<T>()` bytes at `address` are memory of `gpu`'s device, in its
    /// primary context (the CUDA runtime's, and so PyTorch's and cudarc's), hold valid `T`s,
    /// and stay allocated and unwritten by others for `'a` and until the work queued on
    /// them has finished (queue that work on the owner's stream, [`Gpu::with_raw_stream`],
    /// or order the streams).
    ///
    /// ```
    /// use gpu_select::{DeviceSlice, Gpu};
    ///
    /// let gpu = Gpu::emulator();
    /// let owner = gpu.upload(&[3u32, 1, 2])?; // stands for another library's memory
    /// let view = unsafe { DeviceSlice::<u32>::from_raw_parts(&gpu, owner.device_address(), 3)? };
    /// assert_eq!(gpu.download(&view)?, [3, 1, 2]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub unsafe fn from_raw_parts(gpu: &Gpu, address: u64, len: usize) -> Result<Self> {
        check_raw_on::<T>(gpu, address, len)?;
        Ok(Self::wrap(DeviceBuffer::borrowed(gpu.clone(), address, len, false)))
    }

    /// Values `range` of this view, as a view borrowing this one (panics out of bounds, as
    /// slicing does). Borrowing, not outliving it: a view of a cudarc slice records its use
    /// when it drops, so a part must not be used after it.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> DeviceSlice<'_, T> {
        let (start, len) = bounds(range, self.buffer.len());
        DeviceSlice::wrap(self.buffer.view(start, len))
    }

    /// The view as a buffer that frees nothing (crate-internal: dropped before `'a` ends).
    pub(crate) fn buffer(&self) -> &DeviceBuffer<T> {
        &self.buffer
    }
}

impl<'a, T: DeviceValue> DeviceSliceMut<'a, T> {
    /// A writable view of `len` values of `T` at `address` on `gpu`'s device: as
    /// [`DeviceSlice::from_raw_parts`].
    ///
    /// # Safety
    /// As [`DeviceSlice::from_raw_parts`], and nothing else reads or writes the memory while
    /// the work queued on the view runs.
    pub unsafe fn from_raw_parts(gpu: &Gpu, address: u64, len: usize) -> Result<Self> {
        check_raw_on::<T>(gpu, address, len)?;
        Ok(Self::wrap(DeviceBuffer::borrowed(gpu.clone(), address, len, false)))
    }

    /// Values `range` of this view, as a writable view borrowing this one (panics out of
    /// bounds).
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> DeviceSliceMut<'_, T> {
        let (start, len) = bounds(range, self.buffer.len());
        DeviceSliceMut::wrap(self.buffer.view(start, len))
    }

    /// This view again, for a call that takes it by value, while keeping it.
    pub fn reborrow(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut::wrap(self.buffer.view(0, self.buffer.len()))
    }

    /// The view as a buffer that frees nothing (crate-internal: dropped before `'a` ends).
    pub(crate) fn buffer(&self) -> &DeviceBuffer<T> {
        &self.buffer
    }

    /// The view as a buffer that frees nothing, to write through (crate-internal: dropped
    /// before `'a` ends).
    pub(crate) fn buffer_mut(&mut self) -> DeviceBuffer<T> {
        self.buffer.view(0, self.buffer.len())
    }
}

impl<T: DeviceValue> DeviceBuffer<T> {
    /// Values `range` as a read-only view (panics out of bounds, as slicing does).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> DeviceSlice<'_, T> {
        let (start, len) = bounds(range, self.len());
        DeviceSlice::wrap(self.view(start, len))
    }

    /// Values `range` as a writable view (panics out of bounds).
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> DeviceSliceMut<'_, T> {
        let (start, len) = bounds(range, self.len());
        DeviceSliceMut::wrap(self.view(start, len))
    }
}

impl<'a, T: DeviceValue> From<&'a DeviceBuffer<T>> for DeviceSlice<'a, T> {
    fn from(buffer: &'a DeviceBuffer<T>) -> Self {
        buffer.slice(..)
    }
}

impl<'a, T: DeviceValue> From<&'a mut DeviceBuffer<T>> for DeviceSliceMut<'a, T> {
    fn from(buffer: &'a mut DeviceBuffer<T>) -> Self {
        buffer.slice_mut(..)
    }
}

impl<'a, T: DeviceValue> From<&'a DeviceSlice<'_, T>> for DeviceSlice<'a, T> {
    fn from(view: &'a DeviceSlice<'_, T>) -> Self {
        DeviceSlice::wrap(view.buffer.view(0, view.buffer.len()))
    }
}

impl<'a, T: DeviceValue> From<&'a DeviceSliceMut<'_, T>> for DeviceSlice<'a, T> {
    fn from(view: &'a DeviceSliceMut<'_, T>) -> Self {
        DeviceSlice::wrap(view.buffer.view(0, view.buffer.len()))
    }
}

impl<'a, T: DeviceValue> From<&'a mut DeviceSliceMut<'_, T>> for DeviceSliceMut<'a, T> {
    fn from(view: &'a mut DeviceSliceMut<'_, T>) -> Self {
        view.reborrow()
    }
}

#[cfg(feature = "cust")]
mod cust_views {
    use cust::memory::{DeviceCopy, DeviceSlice as CustSlice};

    use super::*;

    impl Gpu {
        /// A read-only view of a cust buffer or slice (cust 0.3: its `DeviceBuffer` derefs to
        /// its `DeviceSlice`). cust works in the device's primary context, as this library
        /// does. cust copies on the legacy default stream and waits for them, so its writes
        /// into the keys are done when its calls return; the library's work is on its own
        /// non-blocking stream, which the legacy stream does not wait for: synchronize the
        /// handle ([`Gpu::synchronize`]) before reading results with cust.
        ///
        /// Errors: [`Error::InvalidArgument`] for memory of another device than the handle's.
        ///
        /// ```ignore
        /// let keys = cust::memory::DeviceBuffer::from_slice(&[3.0f32, 1.0, 2.0])?;
        /// let top = gpu.top_k(gpu.view_cust(&keys)?, 1, &TopKOptions::largest())?;
        /// ```
        pub fn view_cust<'a, T: DeviceValue + DeviceCopy>(
            &self,
            slice: &'a CustSlice<T>,
        ) -> Result<DeviceSlice<'a, T>> {
            let address = slice.as_device_ptr().as_raw();
            check_raw_on::<T>(self, address, slice.len())?;
            Ok(DeviceSlice::wrap(DeviceBuffer::borrowed(self.clone(), address, slice.len(), false)))
        }

        /// A writable view of a cust buffer or slice: as [`Gpu::view_cust`].
        pub fn view_cust_mut<'a, T: DeviceValue + DeviceCopy>(
            &self,
            slice: &'a mut CustSlice<T>,
        ) -> Result<DeviceSliceMut<'a, T>> {
            let address = slice.as_device_ptr().as_raw();
            check_raw_on::<T>(self, address, slice.len())?;
            Ok(DeviceSliceMut::wrap(DeviceBuffer::borrowed(self.clone(), address, slice.len(), false)))
        }
    }
}

#[cfg(feature = "cudarc")]
mod cudarc_views {
    use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr};

    use super::*;

    impl Gpu {
        /// A read-only view of a cudarc slice for calls through this handle, which must be
        /// on a cudarc stream ([`Gpu::with_cudarc_stream`]). As cudarc's own calls do, the
        /// view makes that stream wait for the slice's last write, and records the read when
        /// it drops (drop it after the calls that use it). Only handles on that stream may
        /// use the view.
        ///
        /// Errors: [`Error::InvalidArgument`] when this handle is not on a cudarc stream, or
        /// the slice is of another device.
        pub fn view_cudarc<'a, T: DeviceValue + DeviceRepr>(
            &'a self,
            slice: &'a CudaSlice<T>,
        ) -> Result<DeviceSlice<'a, T>> {
            let stream = self.cudarc_stream_for(slice.context())?;
            let (address, sync) = slice.device_ptr(stream);
            check_raw::<T>(address, slice.len())?;
            Ok(DeviceSlice {
                buffer: DeviceBuffer::borrowed(self.clone(), address, slice.len(), true),
                borrow: PhantomData,
                sync: Some(sync),
            })
        }

        /// A writable view of a cudarc slice: as [`Gpu::view_cudarc`], the stream waiting
        /// for the slice's last read and write, and recording the write when the view drops.
        pub fn view_cudarc_mut<'a, T: DeviceValue + DeviceRepr>(
            &'a self,
            slice: &'a mut CudaSlice<T>,
        ) -> Result<DeviceSliceMut<'a, T>> {
            let stream = self.cudarc_stream_for(slice.context())?;
            let len = slice.len();
            let (address, sync) = slice.device_ptr_mut(stream);
            check_raw::<T>(address, len)?;
            Ok(DeviceSliceMut {
                buffer: DeviceBuffer::borrowed(self.clone(), address, len, true),
                borrow: PhantomData,
                sync: Some(sync),
            })
        }
    }
}
