//! Typed device buffers: device memory on a GPU, host memory on the emulator.

use std::marker::PhantomData;

use cudarc::driver::sys;
use gpu_select_kernels::params::GlobalPtr;

use crate::error::{Error, Result, check_driver};
use crate::gpu::{Backend, Gpu};

/// Plain values that may live in device memory and be copied bit for bit.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes is a valid `Self`, and `Self` has no
/// padding and no pointers.
pub unsafe trait DeviceValue: Copy + Send + Sync + Default + std::fmt::Debug + 'static {}

macro_rules! device_values {
    ($($t:ty),*) => { $(unsafe impl DeviceValue for $t {})* };
}
device_values!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64, half::f16, half::bf16);

/// `len` values of `T` on the device of a [`Gpu`]. Keeps its `Gpu` alive; freed on drop.
///
/// ```
/// use gpu_select::Gpu;
///
/// let gpu = Gpu::emulator();
/// let buffer = gpu.upload(&[3.0f32, 1.0, 2.0])?;
/// assert_eq!(buffer.len(), 3);
/// assert_eq!(gpu.download(&buffer)?, vec![3.0, 1.0, 2.0]);
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub struct DeviceBuffer<T> {
    gpu: Gpu,
    storage: Storage,
    len: usize,
    element: PhantomData<T>,
}

enum Storage {
    /// A device address (0 for an empty buffer) and the bytes of its block.
    Device { address: u64, capacity: usize },
    /// 16-byte aligned host memory standing in for device memory.
    Host(Vec<u128>),
    /// Memory the buffer does not own (part of another buffer, or the caller's memory: see
    /// [`DeviceSlice`](crate::DeviceSlice)), not freed on drop. `stream_bound`: the memory
    /// belongs to another library's stream (a cudarc slice), so only handles on the same
    /// stream may use it.
    Borrowed { address: u64, stream_bound: bool },
}

impl<T: DeviceValue> DeviceBuffer<T> {
    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The [`Gpu`] the buffer lives on.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The address kernels see (device address, or host address on the emulator).
    pub(crate) fn global_ptr(&self) -> GlobalPtr<T> {
        GlobalPtr::from_address(match &self.storage {
            Storage::Device { address, .. } => *address,
            Storage::Host(words) => words.as_ptr() as u64,
            Storage::Borrowed { address, .. } => *address,
        })
    }

    /// The address of the first value: a device address on a GPU (a `CUdeviceptr`, for
    /// handing the buffer to another library), a host address on the emulator.
    pub fn device_address(&self) -> u64 {
        self.global_ptr().address()
    }

    /// Values `start .. start + len` of this buffer as a buffer of their own, which frees
    /// nothing on drop. Crate-internal: the caller drops the view before the buffer.
    pub(crate) fn view(&self, start: usize, len: usize) -> DeviceBuffer<T> {
        assert!(start + len <= self.len, "view {start}..{} of a buffer of {}", start + len, self.len);
        let address = self.global_ptr().offset(start as u64).address();
        let stream_bound = matches!(self.storage, Storage::Borrowed { stream_bound: true, .. });
        Self::borrowed(self.gpu.clone(), address, len, stream_bound)
    }

    /// A buffer over memory it does not own (freed by its owner, not on drop).
    pub(crate) fn borrowed(gpu: Gpu, address: u64, len: usize, stream_bound: bool) -> Self {
        DeviceBuffer { gpu, storage: Storage::Borrowed { address, stream_bound }, len, element: PhantomData }
    }

    /// Checks that the buffer belongs to `gpu`'s device (and, for memory of another
    /// library's stream, that `gpu` queues on that stream).
    pub(crate) fn check_gpu(&self, gpu: &Gpu, what: &str) -> Result<()> {
        if !std::sync::Arc::ptr_eq(&self.gpu.inner, &gpu.inner) {
            return Err(Error::invalid(format!("{what} lives on another device than the handle called")));
        }
        if matches!(self.storage, Storage::Borrowed { stream_bound: true, .. }) && !self.gpu.same_stream(gpu)
        {
            return Err(Error::invalid(format!(
                "{what} belongs to another library's stream: call through a handle on that stream \
                 (the one its view was made with)"
            )));
        }
        Ok(())
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if let (Storage::Device { address, capacity }, Backend::Cuda(device)) =
            (&self.storage, &*self.gpu.inner)
            && *address != 0
        {
            // Stream-ordered: kernels queued on its stream before the drop still read and
            // write it, and its next owner's work runs after theirs.
            self.gpu.free_on_stream(device, *address, *capacity);
        }
    }
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer<{}>[{}]", std::any::type_name::<T>(), self.len)
    }
}

impl Gpu {
    /// Allocates `len` values, set to zero.
    ///
    /// Allocations come from the handle's memory pool, in stream order: after work queued
    /// before, and a dropped buffer's memory serves the next allocation at once.
    ///
    /// Errors: [`Error::OutOfMemory`] when the device has too little free memory.
    pub fn alloc_zeroed<T: DeviceValue>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.alloc(len, true)
    }

    /// Allocates `len` values that the caller overwrites before reading: workspaces and
    /// outputs, whose kernels clear what must start at zero. On the emulator the bytes are
    /// poisoned (0xA5), so that a test that reads what nothing wrote fails there too.
    pub(crate) fn alloc_uninit<T: DeviceValue>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.alloc(len, false)
    }

    fn alloc<T: DeviceValue>(&self, len: usize, zeroed: bool) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::invalid(format!("a buffer of {len} values overflows usize")))?;
        let storage = match &*self.inner {
            Backend::Cuda(_) if bytes == 0 => Storage::Device { address: 0, capacity: 0 },
            Backend::Cuda(device) => {
                let (address, capacity) = self.allocate_on_stream(device, bytes)?;
                if zeroed && let Err(error) = self.clear_on_device(address, bytes) {
                    // Not yet owned by a buffer: free it here, or it leaks.
                    self.free_on_stream(device, address, capacity);
                    return Err(error);
                }
                Storage::Device { address, capacity }
            }
            Backend::Emulator(_) => {
                let mut words = Vec::new();
                words
                    .try_reserve_exact(bytes.div_ceil(16))
                    .map_err(|_| Error::OutOfMemory { requested_bytes: bytes })?;
                words.resize(bytes.div_ceil(16), if zeroed { 0 } else { u128::from_ne_bytes([0xA5; 16]) });
                Storage::Host(words)
            }
        };
        Ok(DeviceBuffer { gpu: self.clone(), storage, len, element: PhantomData })
    }

    /// Copies `values` to a new device buffer.
    pub fn upload<T: DeviceValue>(&self, values: &[T]) -> Result<DeviceBuffer<T>> {
        let mut buffer = self.alloc_uninit::<T>(values.len())?;
        self.copy_to_device(values, &mut buffer)?;
        Ok(buffer)
    }

    /// Copies `values` to a new device buffer, queued after the work before it and not
    /// waited for (an upload that waits costs a round trip to the GPU each time).
    ///
    /// # Safety
    /// `values` stays alive and unchanged until the stream has passed the copy (a later
    /// read-back or [`Gpu::synchronize`] waits for it).
    pub(crate) unsafe fn upload_queued<T: DeviceValue>(&self, values: &[T]) -> Result<DeviceBuffer<T>> {
        let buffer = self.alloc_uninit::<T>(values.len())?;
        // SAFETY: the caller keeps `values` until the stream has passed the copy; the buffer
        // holds its bytes.
        unsafe { self.copy_to_address_async(values, buffer.global_ptr().address())? };
        Ok(buffer)
    }

    /// Runs `work`, which queues copies from host memory that outlives it (with
    /// [`Gpu::upload_queued`]) and waits for the stream before it returns `Ok`; when it
    /// fails part way, waits for the stream here, so that no queued copy outlives the
    /// memory it reads.
    pub(crate) fn waiting_on_error<R>(&self, work: impl FnOnce() -> Result<R>) -> Result<R> {
        let result = work();
        if result.is_err() {
            // The error is `work`'s; a failure to wait would only repeat it.
            let _ = self.synchronize();
        }
        result
    }

    /// Overwrites `buffer` with `values` (same length).
    pub fn copy_to_device<T: DeviceValue>(&self, values: &[T], buffer: &mut DeviceBuffer<T>) -> Result<()> {
        buffer.check_gpu(self, "the destination buffer")?;
        if values.len() != buffer.len {
            return Err(Error::LengthMismatch {
                what: "copy to device",
                expected: buffer.len,
                actual: values.len(),
            });
        }
        // On the handle's stream, after the work queued before (which may still read the
        // buffer); waited for, so that the caller may reuse `values` at once.
        // SAFETY: `values` outlives the copy (waited for below); the buffer holds its bytes.
        unsafe { self.copy_to_address_async(values, buffer.global_ptr().address())? };
        self.synchronize()
    }

    /// Queues a copy of `values` to a device address of this `Gpu`, after the work queued
    /// before on its stream, and does not wait for it: from page-locked memory
    /// ([`Gpu::pin_host`]) the copy engine reads `values` while the host and other streams
    /// go on; from pageable memory the driver stages it first.
    ///
    /// # Safety
    /// `values` stays alive and unchanged until the stream has passed the copy, and the
    /// `size_of_val(values)` bytes at `address` lie inside a live buffer.
    pub(crate) unsafe fn copy_to_address_async<T: DeviceValue>(
        &self,
        values: &[T],
        address: u64,
    ) -> Result<()> {
        let (source, bytes) = (values.as_ptr().cast::<u8>(), std::mem::size_of_val(values));
        self.raw_memory_op(
            bytes,
            "copying to the device",
            |stream| unsafe { sys::cuMemcpyHtoDAsync_v2(address, source.cast(), bytes, stream) },
            || unsafe { std::ptr::copy_nonoverlapping(source, address as usize as *mut u8, bytes) },
        )
    }

    /// Page-locks `values` for this device's copies (`cuMemHostRegister`, portable) until
    /// the returned guard is dropped, so that copies from it run at the bus's speed without
    /// the driver's staging. `None` where it cannot be done (the emulator; the driver
    /// refusing, as when the process may not lock that much memory): copies from `values`
    /// still work, staged. Memory some other party has already registered counts as pinned
    /// (and stays registered when the guard goes).
    pub(crate) fn pin_host<T: DeviceValue>(&self, values: &[T]) -> Option<PinnedHost> {
        let Backend::Cuda(device) = &*self.inner else { return None };
        let (address, bytes) = (values.as_ptr() as *mut std::ffi::c_void, std::mem::size_of_val(values));
        if bytes == 0 || device.make_current().is_err() {
            return None;
        }
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE;
        match unsafe { sys::cuMemHostRegister_v2(address, bytes, flags) } {
            sys::CUresult::CUDA_SUCCESS => {
                Some(PinnedHost { gpu: self.clone(), address: Some(address as usize) })
            }
            sys::CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED => {
                Some(PinnedHost { gpu: self.clone(), address: None })
            }
            _ => None,
        }
    }

    /// Copies `bytes` bytes between two device addresses of this `Gpu` (queued after earlier
    /// work, not waited for). The caller guarantees both ranges lie inside live buffers.
    pub(crate) fn copy_on_device(&self, from: u64, to: u64, bytes: usize) -> Result<()> {
        self.raw_memory_op(
            bytes,
            "copying on the device",
            |stream| unsafe { sys::cuMemcpyDtoDAsync_v2(to, from, bytes, stream) },
            || unsafe { std::ptr::copy(from as usize as *const u8, to as usize as *mut u8, bytes) },
        )
    }

    /// Copies `rows` rows of `width` bytes between device addresses of this `Gpu`, from rows
    /// `from_pitch` bytes apart to rows `to_pitch` bytes apart (queued after earlier work,
    /// not waited for). The caller guarantees both ranges lie inside live buffers.
    pub(crate) fn copy_rows_on_device(
        &self,
        from: u64,
        from_pitch: usize,
        to: u64,
        to_pitch: usize,
        width: usize,
        rows: usize,
    ) -> Result<()> {
        // The driver's pitched copy takes pitches below 2^31 bytes: wider rows go one by one.
        if from_pitch.max(to_pitch) > i32::MAX as usize {
            for row in 0..rows as u64 {
                self.copy_on_device(from + row * from_pitch as u64, to + row * to_pitch as u64, width)?;
            }
            return Ok(());
        }
        self.raw_memory_op(
            width * rows,
            "copying rows on the device",
            |stream| {
                // Every field written: the memory types are enums without a zero value.
                let copy = sys::CUDA_MEMCPY2D {
                    srcXInBytes: 0,
                    srcY: 0,
                    srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                    srcHost: std::ptr::null(),
                    srcDevice: from,
                    srcArray: std::ptr::null_mut(),
                    srcPitch: from_pitch,
                    dstXInBytes: 0,
                    dstY: 0,
                    dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                    dstHost: std::ptr::null_mut(),
                    dstDevice: to,
                    dstArray: std::ptr::null_mut(),
                    dstPitch: to_pitch,
                    WidthInBytes: width,
                    Height: rows,
                };
                unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream) }
            },
            || {
                for row in 0..rows {
                    let (source, target) = (from as usize + row * from_pitch, to as usize + row * to_pitch);
                    unsafe { std::ptr::copy(source as *const u8, target as *mut u8, width) };
                }
            },
        )
    }

    /// Sets `bytes` bytes at a device address of this `Gpu` to zero (queued after earlier
    /// work). The caller guarantees the range lies inside a live buffer.
    pub(crate) fn clear_on_device(&self, address: u64, bytes: usize) -> Result<()> {
        self.fill_on_device(address, bytes, 0)
    }

    /// Sets `bytes` bytes at a device address of this `Gpu` to `byte` (queued after earlier
    /// work). The caller guarantees the range lies inside a live buffer.
    pub(crate) fn fill_on_device(&self, address: u64, bytes: usize, byte: u8) -> Result<()> {
        self.raw_memory_op(
            bytes,
            "setting device memory",
            |stream| unsafe { sys::cuMemsetD8Async(address, byte, bytes, stream) },
            || unsafe { std::ptr::write_bytes(address as usize as *mut u8, byte, bytes) },
        )
    }

    /// Copies `values.len()` values from a device address of this `Gpu` (a workspace
    /// region), after all queued work has finished. The caller guarantees the range lies
    /// inside a live buffer.
    pub(crate) fn copy_from_address<T: DeviceValue>(&self, address: u64, values: &mut [T]) -> Result<()> {
        let bytes = std::mem::size_of_val(values);
        let destination = values.as_mut_ptr().cast::<u8>();
        self.raw_memory_op(
            bytes,
            "copying from the device",
            |stream| unsafe { sys::cuMemcpyDtoHAsync_v2(destination.cast(), address, bytes, stream) },
            || unsafe { std::ptr::copy_nonoverlapping(address as usize as *const u8, destination, bytes) },
        )?;
        self.synchronize()
    }

    /// One memory operation on raw addresses of `bytes` bytes (nothing when 0): the driver
    /// call, queued on the handle's stream, on a GPU; its CPU equivalent on the emulator.
    /// Nothing goes through the legacy default stream, so the library's work never waits for
    /// another library's, nor theirs for it.
    fn raw_memory_op(
        &self,
        bytes: usize,
        what: &'static str,
        cuda: impl FnOnce(sys::CUstream) -> sys::CUresult,
        emulate: impl FnOnce(),
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        match &*self.inner {
            Backend::Cuda(device) => {
                device.make_current()?;
                check_driver(cuda(self.stream()), what, bytes)
            }
            Backend::Emulator(_) => {
                emulate();
                Ok(())
            }
        }
    }

    /// Copies `buffer` to the host after all queued work has finished and hands its values
    /// to `read`, for values the host reads once (the keys of many rows' ranks): on a GPU
    /// through the device's page-locked staging area, which the copy engine fills at the
    /// bus's speed and which is reused, so no new host pages are touched (H200 run 248, 8 MB:
    /// 0.16 ms, against 0.75 into reused pageable memory and 1.7 into a new vector); a
    /// vector where that memory cannot be had, and on the emulator. The area grows to the
    /// largest read and is kept for the device's life, so callers read in parts of at most
    /// [`Tuning::host_staging_bytes`](crate::Tuning::host_staging_bytes) where they can.
    /// `read` runs with the area locked: it must not read through this device again.
    pub(crate) fn read_on_host<T: DeviceValue, R>(
        &self,
        buffer: &DeviceBuffer<T>,
        read: impl FnOnce(&[T]) -> R,
    ) -> Result<R> {
        buffer.check_gpu(self, "the source buffer")?;
        let bytes = buffer.bytes();
        if let Backend::Cuda(device) = &*self.inner
            && bytes > 0
        {
            device.make_current()?;
            let mut staging = device.staging.lock().unwrap_or_else(|e| e.into_inner());
            if staging.reserve(bytes) {
                let destination = staging.address as *mut std::ffi::c_void;
                let source = buffer.global_ptr().address();
                self.raw_memory_op(
                    bytes,
                    "copying from the device",
                    |stream| unsafe { sys::cuMemcpyDtoHAsync_v2(destination, source, bytes, stream) },
                    || unreachable!("a GPU's copy"),
                )?;
                self.synchronize()?;
                // SAFETY: the area holds `bytes` bytes, page-aligned, that the copy wrote;
                // every bit pattern is a `T` (`DeviceValue`); the lock keeps it ours.
                let values = unsafe { std::slice::from_raw_parts(staging.address as *const T, buffer.len()) };
                return Ok(read(values));
            }
        }
        let values = self.download(buffer)?;
        Ok(read(&values))
    }

    /// Copies `buffer` back to a new vector, after all queued work has finished.
    pub fn download<T: DeviceValue>(&self, buffer: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let mut values = vec![T::default(); buffer.len];
        self.copy_to_host(buffer, &mut values)?;
        Ok(values)
    }

    /// Copies `buffer` into `values` (same length), after all queued work has finished.
    pub fn copy_to_host<T: DeviceValue>(&self, buffer: &DeviceBuffer<T>, values: &mut [T]) -> Result<()> {
        buffer.check_gpu(self, "the source buffer")?;
        if values.len() != buffer.len {
            return Err(Error::LengthMismatch {
                what: "copy to host",
                expected: buffer.len,
                actual: values.len(),
            });
        }
        // A buffer's address is a device address on a GPU and a host one on the emulator.
        self.copy_from_address(buffer.global_ptr().address(), values)
    }
}

/// Host memory page-locked by [`Gpu::pin_host`]; unlocked when dropped (unless it was locked
/// before), once the device's queued work is done.
pub(crate) struct PinnedHost {
    gpu: Gpu,
    /// The registered address, `None` for memory that was page-locked already.
    address: Option<usize>,
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        if let (Some(address), Backend::Cuda(device)) = (self.address, &*self.gpu.inner)
            && device.make_current().is_ok()
        {
            // Copies queued from this memory on any stream (another index over the same
            // memory counts it as locked already) finish first: the context's work is done.
            // A failure cannot be reported from drop; the memory then stays locked until exit.
            unsafe {
                let _ = sys::cuCtxSynchronize();
                let _ = sys::cuMemHostUnregister(address as *mut std::ffi::c_void);
            }
        }
    }
}

impl std::fmt::Debug for PinnedHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedHost").field("registered_here", &self.address.is_some()).finish()
    }
}

/// Page-locked host memory of a device (`cuMemAllocHost`), for [`Gpu::read_on_host`]: none
/// until the first read, then as large as the largest read; freed with the device.
#[derive(Debug, Default)]
pub(crate) struct HostStaging {
    address: usize,
    bytes: usize,
}

/// The least page-locked staging a device allocates.
const MIN_STAGING_BYTES: usize = 1 << 20;

impl HostStaging {
    /// Makes the area hold at least `bytes` (the device's context current); false where
    /// the driver refuses page-locked memory (none is kept then).
    fn reserve(&mut self, bytes: usize) -> bool {
        if self.bytes >= bytes {
            return true;
        }
        // Every copy into the area was waited for before its lock was let go.
        self.release();
        let want = bytes.max(MIN_STAGING_BYTES);
        let mut address = std::ptr::null_mut();
        if unsafe { sys::cuMemAllocHost_v2(&mut address, want) } != sys::CUresult::CUDA_SUCCESS {
            return false;
        }
        *self = Self { address: address as usize, bytes: want };
        true
    }

    /// Frees the area (the device's context current).
    pub(crate) fn release(&mut self) {
        if self.address != 0 {
            // A failure cannot be reported (drop); the memory stays locked until exit.
            let _ = unsafe { sys::cuMemFreeHost(self.address as *mut std::ffi::c_void) };
        }
        *self = Self::default();
    }
}
