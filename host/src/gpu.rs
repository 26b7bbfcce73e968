//! The [`Gpu`] handle: a CUDA device with the embedded kernels loaded, or the emulator.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Arc, Mutex, Once};
use std::time::Instant;

use cudarc::driver::result as cu;
use cudarc::driver::result::DriverError;
use cudarc::driver::sys;
use gpu_select_kernels::device::emulator;
use gpu_select_kernels::entry::KernelId;

use crate::buffer::HostStaging;
use crate::error::{Error, Result, check_driver};
use crate::kernels::KernelImage;
pub use crate::limits::DeviceLimits;
use crate::tuning::Tuning;

/// Environment variable that picks the backend of [`Gpu::from_env`]: `cuda`, `emulator` or
/// `auto` (the default: CUDA when a device opens, else the emulator).
pub const BACKEND_ENV: &str = "GPU_SELECT_BACKEND";

/// What executes the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// A CUDA device, through the driver.
    Cuda,
    /// The host emulator: the same kernel code on CPU threads (slow; for tests).
    Emulator,
}

/// A handle on where kernels run: one CUDA device (its primary context; one non-blocking
/// stream on which every copy, allocation and kernel of the handle is queued; a memory pool
/// that keeps freed buffers for reuse; the kernels, loaded at the first launch) or the
/// emulator. Cheap to clone, `Send + Sync`; buffers keep it alive.
///
/// ```
/// use gpu_select::{BackendKind, Gpu};
///
/// let gpu = Gpu::emulator();
/// assert_eq!(gpu.backend(), BackendKind::Emulator);
/// println!("running on {}", gpu.describe());
/// ```
///
/// # Which calls wait
///
/// Everything is queued on the handle's stream ([`Gpu::fork_stream`](crate::Gpu::fork_stream),
/// [`Gpu::with_raw_stream`](crate::Gpu::with_raw_stream)). A call waits for the GPU only
/// where a result must reach the host:
/// - selections (`select`, `select_into`, `select_host`) return their key, so they wait;
/// - top-k by SampleSelect or bucket select (chosen, or by `Auto` for large `k`) reads back,
///   once for most inputs, whether its levels have found the rank;
/// - planning ragged rows reads their offsets; a ragged top-k with a row shorter than a
///   `k` beyond 2048 waits for its padding's copies;
/// - `upload`, `download`, `copy_to_*` and the host-slice conveniences wait for their copies.
///
/// Everything else (top-k of arrays and rows, sorts, allocation, freeing) only queues.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) inner: Arc<Backend>,
    /// The stream this handle queues its work on.
    queue: Arc<Queue>,
    /// Tuning values of the kernels' launch shapes ([`Tuning`]).
    tuning: Tuning,
}

/// The stream of a [`Gpu`] handle: the device's own, one the handle made
/// ([`Gpu::fork_stream`]), or one the caller made ([`Gpu::with_raw_stream`]).
struct Queue {
    stream: sys::CUstream,
    /// Whether the library created the stream (and so synchronizes and destroys it at the end).
    owned: bool,
    /// Keeps the device, and so its context, alive while the stream lives.
    backend: Arc<Backend>,
    /// The cudarc stream this is (kept alive), for views of cudarc slices.
    #[cfg(feature = "cudarc")]
    cudarc: Option<Arc<cudarc::driver::CudaStream>>,
    /// Blocks freed on this stream and kept for its next allocations ([`BlockCache`]).
    cache: Mutex<BlockCache>,
}

/// Device memory freed on one stream, kept for that stream's next allocations: a
/// convenient call allocates its workspace and outputs and frees them on return, and a
/// driver call per allocation and per free (`cuMemAllocFromPoolAsync`, `cuMemFreeAsync`)
/// cost about a microsecond each. A kept block is reused in the stream's order, as the pool
/// would reuse it, so the next owner's work runs after the last owner's. Only small blocks
/// are kept, and few: large ones return to the pool, which serves every stream.
#[derive(Default)]
struct BlockCache {
    /// (capacity in bytes, address), most recently freed last.
    blocks: Vec<(usize, u64)>,
}

/// The most blocks a stream keeps.
const CACHED_BLOCKS: usize = 8;
/// The largest block a stream keeps: workspaces and outputs of calls whose time the
/// allocation would show in (larger ones take long enough that a driver call is noise).
const MAX_CACHED_BYTES: usize = 16 << 20;

impl BlockCache {
    /// The smallest kept block of at least `bytes` and at most twice that (so that a small
    /// request does not hold a large block), removed from the cache. Smallest first: a call
    /// that allocates blocks of several sizes (a workspace, values, indices) finds each its
    /// own again, instead of a smaller request taking a larger block and the larger one
    /// missing.
    fn take(&mut self, bytes: usize) -> Option<(usize, u64)> {
        let fits = |capacity: usize| capacity >= bytes && capacity <= 2 * bytes.max(256);
        let at = (0..self.blocks.len())
            .rev()
            .filter(|&at| fits(self.blocks[at].0))
            .min_by_key(|&at| self.blocks[at].0)?;
        // `remove`, not `swap_remove`: the blocks stay in the order they were freed.
        Some(self.blocks.remove(at))
    }

    /// Keeps a freed block (small enough), handing back what goes to the pool: the block
    /// itself when it is too large, else the least recently freed one when the cache is full
    /// (so that blocks of sizes no longer asked for do not hold the places of the ones in
    /// use).
    fn keep(&mut self, capacity: usize, address: u64) -> Option<(usize, u64)> {
        if capacity > MAX_CACHED_BYTES {
            return Some((capacity, address));
        }
        let evicted = (self.blocks.len() >= CACHED_BLOCKS).then(|| self.blocks.remove(0));
        self.blocks.push((capacity, address));
        evicted
    }
}

impl Queue {
    fn new(stream: sys::CUstream, owned: bool, backend: Arc<Backend>) -> Arc<Self> {
        Arc::new(Queue {
            stream,
            owned,
            backend,
            #[cfg(feature = "cudarc")]
            cudarc: None,
            cache: Mutex::default(),
        })
    }
}

// A stream handle may be used from any thread (see `CudaDevice`).
unsafe impl Send for Queue {}
unsafe impl Sync for Queue {}

impl Drop for Queue {
    fn drop(&mut self) {
        if let Backend::Cuda(device) = &*self.backend {
            // The kept blocks go back to the pool, in this stream's order.
            let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
            for (_, address) in cache.blocks.drain(..) {
                device.free(address, self.stream);
            }
        }
        if let (true, Backend::Cuda(device)) = (self.owned, &*self.backend)
            && device.make_current().is_ok()
        {
            // The last handle and buffer of this stream are gone; their frees complete first.
            unsafe {
                let _ = cu::stream::synchronize(self.stream);
                let _ = cu::stream::destroy(self.stream);
            }
        }
    }
}

pub(crate) enum Backend {
    Cuda(CudaDevice),
    Emulator(DeviceLimits),
}

/// One CUDA device: its primary context, one stream, a memory pool, and the kernels, loaded
/// at the first launch. The driver's handles are raw pointers; [`Drop`] releases them in order.
pub(crate) struct CudaDevice {
    device: sys::CUdevice,
    /// The device's primary context (retained; shared with every other user of the device in
    /// this process, as the CUDA runtime shares it).
    context: sys::CUcontext,
    stream: sys::CUstream,
    /// The library's own stream-ordered memory pool, which keeps what is freed for the next
    /// allocation (`None` where the driver has no memory pools: plain `cuMemAlloc` then).
    pool: Option<sys::CUmemoryPool>,
    /// The module and the kernel handles looked up so far.
    kernels: Mutex<LoadedKernels>,
    /// Page-locked host memory for values the host reads once ([`Gpu::read_on_host`]).
    pub(crate) staging: Mutex<HostStaging>,
    limits: DeviceLimits,
    /// The image this device loads first ([`KernelImage::for_device`]).
    image: KernelImage,
}

/// What the first launch loads: the module of every kernel (from [`KernelImage`]) and each
/// kernel's handle, looked up once by name (a launch would otherwise pay a
/// `cuModuleGetFunction` each time; radix select makes 13–25 launches per call).
#[derive(Default)]
struct LoadedKernels {
    module: Option<(sys::CUmodule, KernelImage)>,
    /// Each kernel's handle and the dynamic shared memory it is allowed so far.
    functions: HashMap<&'static str, (sys::CUfunction, usize)>,
}

// The driver API is thread-safe and its handles may be used from any thread once the context
// is current there (every entry point makes it so); the mutable state is behind the mutex.
unsafe impl Send for CudaDevice {}
unsafe impl Sync for CudaDevice {}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Failures cannot be reported from drop; the process goes on either way.
        unsafe {
            if cu::ctx::set_current(self.context).is_ok() {
                if !self.stream.is_null() {
                    // Every buffer is gone (each holds the `Gpu`); let their frees complete.
                    let _ = cu::stream::synchronize(self.stream);
                }
                if let Some(pool) = self.pool {
                    let _ = cu::mem_pool::destroy(pool);
                }
                self.staging.get_mut().unwrap_or_else(|e| e.into_inner()).release();
                let kernels = self.kernels.get_mut().unwrap_or_else(|e| e.into_inner());
                if let Some((module, _)) = kernels.module.take() {
                    let _ = cu::module::unload(module);
                }
                if !self.stream.is_null() {
                    let _ = cu::stream::destroy(self.stream);
                }
            }
            let _ = cu::primary_ctx::release(self.device);
        }
    }
}

/// The shape of one launch, as the kernels' own `const fn`s compute it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchShape {
    pub grid: (u32, u32),
    pub block_threads: u32,
    pub shared_bytes: usize,
}

/// Shared memory a block may use without opting in.
const DEFAULT_SHARED_LIMIT: usize = 48 * 1024;

/// Multiprocessors the emulator reports ([`Gpu::emulator`]).
const EMULATED_MULTIPROCESSORS: u32 = 4;

impl Gpu {
    /// Opens CUDA device 0 and creates a stream. The kernels load at the first launch (machine
    /// code for sm_80 and sm_90 GPUs: no compilation; see [`KernelImage`]).
    ///
    /// Errors: [`Error::NoDevice`] when there is no driver or no device,
    /// [`Error::UnsupportedDevice`] before compute capability 8.0.
    pub fn new() -> Result<Self> {
        Self::cuda(0)
    }

    /// The number of CUDA devices the driver sees: 0 without a driver or a device.
    ///
    /// ```
    /// let gpus = gpu_select::Gpu::device_count();
    /// println!("{gpus} CUDA devices");
    /// ```
    pub fn device_count() -> usize {
        if !unsafe { sys::is_culib_present() } || cu::init().is_err() {
            return 0;
        }
        cu::device::get_count().map_or(0, |count| count.max(0) as usize)
    }

    /// Opens CUDA device `ordinal`.
    pub fn cuda(ordinal: u32) -> Result<Self> {
        // The driver library is loaded at run time: a machine without one builds and runs the
        // library (on the emulator) all the same.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoDevice {
                reason: "the CUDA driver library (libcuda.so) is not installed".to_string(),
            });
        }
        // Only the driver's "there is no such device" is `NoDevice`; anything else is a failure
        // to report.
        let no_device = |during: &'static str| {
            move |e: DriverError| match e.0 {
                sys::CUresult::CUDA_ERROR_NO_DEVICE | sys::CUresult::CUDA_ERROR_INVALID_DEVICE => {
                    Error::NoDevice { reason: crate::error::describe_driver_error(e) }
                }
                _ => Error::driver(during, e, 0),
            }
        };
        cu::init().map_err(no_device("initialising the CUDA driver"))?;
        let device = cu::device::get(ordinal as i32).map_err(no_device("opening the device"))?;
        let limits = read_limits(device).map_err(no_device("reading the device's attributes"))?;
        let image =
            KernelImage::for_device(limits.compute_capability).ok_or_else(|| Error::UnsupportedDevice {
                name: limits.name.clone(),
                compute_capability: limits.compute_capability,
            })?;
        let context =
            unsafe { cu::primary_ctx::retain(device) }.map_err(no_device("creating the device's context"))?;
        // From here on, `CudaDevice`'s drop releases what was made.
        let mut cuda = CudaDevice {
            device,
            context,
            stream: std::ptr::null_mut(),
            pool: None,
            kernels: Mutex::default(),
            staging: Mutex::default(),
            limits,
            image,
        };
        cuda.make_current()?;
        // Non-blocking: every copy, memset, allocation and kernel of the handle is queued on
        // this one stream (ordered among themselves), and none waits for work other libraries
        // queue on the legacy default stream.
        cuda.stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| Error::driver("creating a stream", e, 0))?;
        cuda.pool = create_pool(device, ordinal)?;
        Ok(Self::on_device_stream(Arc::new(Backend::Cuda(cuda))))
    }

    /// A handle on `backend`'s own stream, with the default tuning.
    fn on_device_stream(backend: Arc<Backend>) -> Self {
        let stream = match &*backend {
            Backend::Cuda(device) => device.stream,
            Backend::Emulator(_) => std::ptr::null_mut(),
        };
        let queue = Queue::new(stream, false, backend.clone());
        let tuning = Tuning::for_device(match &*backend {
            Backend::Cuda(device) => &device.limits,
            Backend::Emulator(limits) => limits,
        });
        Self { inner: backend, queue, tuning }
    }

    /// The host emulator: runs the kernels on CPU threads. Always available; slow.
    pub fn emulator() -> Self {
        let limits = DeviceLimits {
            name: "gpu-select emulator".to_string(),
            compute_capability: (9, 0),
            // Several, so that grids sized by the multiprocessors have several blocks and the
            // protocols between blocks (last-block tickets, per-block offsets, merges of the
            // blocks' results) run in the tests too; the blocks run one at a time, each
            // launch in an order of its own.
            multiprocessors: EMULATED_MULTIPROCESSORS,
            max_threads_per_block: emulator::MAX_BLOCK_THREADS,
            max_shared_bytes_per_block: emulator::MAX_SHARED_BYTES,
            l2_bytes: 0,
            total_memory_bytes: 0,
            peak_bandwidth_bytes_per_s: 0.0,
        };
        Self::on_device_stream(Arc::new(Backend::Emulator(limits)))
    }

    /// The backend [`BACKEND_ENV`] asks for: `cuda` (an error when none opens), `emulator`,
    /// or `auto`/unset: CUDA device 0, or the emulator where there is no CUDA device (no
    /// driver, or a driver that sees no GPU), which it says once on stderr. Any other failure
    /// to open a device (an unsupported GPU, a driver error) is returned, not hidden behind
    /// the emulator.
    pub fn from_env() -> Result<Self> {
        Self::from_env_device(0)
    }

    /// [`Gpu::from_env`] with CUDA device `ordinal` in place of device 0: the form for one of
    /// several processes or threads of a machine, each taking its own GPU (DIBMS with a
    /// process per GPU: `ordinal` from the process's rank on its machine, modulo
    /// [`Gpu::device_count`]).
    pub fn from_env_device(ordinal: u32) -> Result<Self> {
        match std::env::var(BACKEND_ENV).unwrap_or_default().to_ascii_lowercase().as_str() {
            "cuda" | "gpu" => Self::cuda(ordinal),
            "emulator" | "emu" => Ok(Self::emulator()),
            "" | "auto" => match Self::cuda(ordinal) {
                Err(Error::NoDevice { reason }) => {
                    static SAID: Once = Once::new();
                    SAID.call_once(|| {
                        eprintln!("gpu-select: no CUDA device ({reason}); running on the emulator");
                    });
                    Ok(Self::emulator())
                }
                opened => opened,
            },
            other => {
                Err(Error::invalid(format!("{BACKEND_ENV}={other}: expected `cuda`, `emulator` or `auto`")))
            }
        }
    }

    /// Which backend runs the kernels.
    pub fn backend(&self) -> BackendKind {
        match &*self.inner {
            Backend::Cuda(_) => BackendKind::Cuda,
            Backend::Emulator(_) => BackendKind::Emulator,
        }
    }

    /// What the device offers.
    pub fn limits(&self) -> &DeviceLimits {
        match &*self.inner {
            Backend::Cuda(device) => &device.limits,
            Backend::Emulator(limits) => limits,
        }
    }

    /// One line naming the backend, e.g. "CUDA: NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB,
    /// kernels: sm_90 machine code)".
    pub fn describe(&self) -> String {
        match &*self.inner {
            Backend::Cuda(device) => {
                let limits = &device.limits;
                let (major, minor) = limits.compute_capability;
                format!(
                    "CUDA: {} (sm_{major}{minor}, {} SMs, {:.1} GiB, kernels: {})",
                    limits.name,
                    limits.multiprocessors,
                    limits.total_memory_bytes as f64 / (1u64 << 30) as f64,
                    device.image.describe()
                )
            }
            Backend::Emulator(_) => {
                "emulator (kernels run on CPU threads; no CUDA device in use)".to_string()
            }
        }
    }

    /// A handle on the same device whose work queues on a new non-blocking stream of its own
    /// (destroyed with the last handle and buffer that use it). Work on two such handles may
    /// run at the same time on the GPU; [`Gpu::wait_for`] orders them where needed. Buffers
    /// and kernels are shared: a buffer from one handle may be passed to the other.
    ///
    /// On the emulator, which runs every call to its end before it returns, this is a clone.
    ///
    /// ```
    /// use gpu_select::{Gpu, TopKOptions};
    ///
    /// let gpu = Gpu::emulator();
    /// let side = gpu.fork_stream()?;
    /// let keys = side.upload(&[4u32, 8, 1, 9])?;
    /// let top = side.top_k(&keys, 1, &TopKOptions::largest())?; // queued on `side`'s stream
    /// assert_eq!(side.download(&top.values)?, [9]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn fork_stream(&self) -> Result<Gpu> {
        let stream = match &*self.inner {
            Backend::Cuda(device) => {
                device.make_current()?;
                cu::stream::create(cu::stream::StreamKind::NonBlocking)
                    .map_err(|e| Error::driver("creating a stream", e, 0))?
            }
            Backend::Emulator(_) => return Ok(self.clone()),
        };
        let queue = Queue::new(stream, true, self.inner.clone());
        Ok(Gpu { inner: self.inner.clone(), queue, tuning: self.tuning })
    }

    /// A handle on the same device whose work queues on `stream`, a `CUstream` that the caller
    /// (or another library: PyTorch's `torch.cuda.current_stream().cuda_stream`, cudarc's
    /// `CudaStream::cu_stream()`) created. The library never destroys it. A null `stream` is
    /// the legacy default stream, which then orders the library's work after, and before,
    /// every other blocking stream's.
    ///
    /// Errors: [`Error::InvalidArgument`] on the emulator, which has no streams.
    ///
    /// # Safety
    /// `stream` is a valid stream of this device's primary context (the one the CUDA runtime
    /// uses, and so PyTorch and cudarc), and it outlives the returned handle, its clones and
    /// every buffer allocated through them (a buffer is freed in its stream's order).
    pub unsafe fn with_raw_stream(&self, stream: *mut c_void) -> Result<Gpu> {
        match &*self.inner {
            Backend::Cuda(_) => {
                let queue = Queue::new(stream.cast(), false, self.inner.clone());
                Ok(Gpu { inner: self.inner.clone(), queue, tuning: self.tuning })
            }
            Backend::Emulator(_) => Err(Error::invalid("the emulator has no CUDA streams to queue on")),
        }
    }

    /// A handle on the same device whose work queues on a cudarc stream (kept alive by the
    /// handle): for views of cudarc slices ([`Gpu::view_cudarc`]), and to order the
    /// library's work with cudarc's.
    ///
    /// Errors: [`Error::InvalidArgument`] on the emulator, or when the stream is of another
    /// device or context (cudarc's `CudaContext::new` uses the device's primary context, as
    /// this library does).
    #[cfg(feature = "cudarc")]
    pub fn with_cudarc_stream(&self, stream: &Arc<cudarc::driver::CudaStream>) -> Result<Gpu> {
        match &*self.inner {
            Backend::Cuda(device) if stream.context().cu_ctx() == device.context => {
                let queue = Arc::new(Queue {
                    stream: stream.cu_stream(),
                    owned: false,
                    backend: self.inner.clone(),
                    cudarc: Some(stream.clone()),
                    cache: Mutex::default(),
                });
                Ok(Gpu { inner: self.inner.clone(), queue, tuning: self.tuning })
            }
            Backend::Cuda(_) => {
                Err(Error::invalid("the cudarc stream is of another device or context than this handle's"))
            }
            Backend::Emulator(_) => Err(Error::invalid("the emulator has no CUDA streams to queue on")),
        }
    }

    /// This handle's cudarc stream, checked against the context of a slice to view.
    #[cfg(feature = "cudarc")]
    pub(crate) fn cudarc_stream_for(
        &self,
        context: &Arc<cudarc::driver::CudaContext>,
    ) -> Result<&cudarc::driver::CudaStream> {
        let stream = self.queue.cudarc.as_deref().ok_or_else(|| {
            Error::invalid(
                "views of cudarc slices need a handle on a cudarc stream: gpu.with_cudarc_stream(..)",
            )
        })?;
        if context.cu_ctx() != stream.context().cu_ctx() {
            return Err(Error::invalid(
                "the cudarc slice is of another device or context than this handle's",
            ));
        }
        Ok(stream)
    }

    /// The `CUstream` this handle queues on, for passing to other libraries (null on the
    /// emulator).
    pub fn raw_stream(&self) -> *mut c_void {
        self.queue.stream.cast()
    }

    /// Makes the work queued on this handle from now on start after the work queued on
    /// `other` so far (an event, recorded on `other`'s stream and waited for on this one;
    /// the host does not wait). Both handles must be on the same device.
    ///
    /// Errors: [`Error::InvalidArgument`] when `other` is on another device.
    pub fn wait_for(&self, other: &Gpu) -> Result<()> {
        if !Arc::ptr_eq(&self.inner, &other.inner) {
            return Err(Error::invalid("wait_for: the other handle is on another device"));
        }
        match &*self.inner {
            Backend::Cuda(device) => {
                device.make_current()?;
                if self.queue.stream == other.queue.stream {
                    return Ok(());
                }
                let done = Event::new()?;
                done.record(other.queue.stream)?;
                // The wait holds on to what it needs; the event may be destroyed at once.
                unsafe {
                    cu::stream::wait_event(
                        self.queue.stream,
                        done.0,
                        sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )
                }
                .map_err(|e| Error::driver("ordering one stream after another", e, 0))
            }
            Backend::Emulator(_) => Ok(()),
        }
    }

    /// Whether two handles are on the same device (clones, forks and wrapped streams of one
    /// handle are).
    pub fn same_device(&self, other: &Gpu) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether two handles queue on the same stream (clones do; [`Gpu::fork_stream`] does not).
    pub fn same_stream(&self, other: &Gpu) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) && self.queue.stream == other.queue.stream
    }

    /// The tuning values this handle launches with.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// This handle (same device and stream) with other tuning values: for tuning sweeps,
    /// which measure a value before it becomes a default.
    ///
    /// ```
    /// use gpu_select::{Gpu, Tuning};
    ///
    /// let gpu = Gpu::emulator().with_tuning(Tuning { top_k_blocks_per_sm: 2, ..Tuning::default() });
    /// assert_eq!(gpu.tuning().top_k_blocks_per_sm, 2);
    /// ```
    pub fn with_tuning(&self, tuning: Tuning) -> Gpu {
        Gpu { tuning, ..self.clone() }
    }

    /// The stream every operation of this handle is queued on.
    pub(crate) fn stream(&self) -> sys::CUstream {
        self.queue.stream
    }

    /// Checks that the driver knows `address` as memory of this handle's device (nothing to
    /// check on the emulator, whose device memory is host memory).
    pub(crate) fn check_device_address(&self, address: u64) -> Result<()> {
        let Backend::Cuda(device) = &*self.inner else { return Ok(()) };
        device.make_current()?;
        let mut ordinal: i32 = -1;
        let result = unsafe {
            sys::cuPointerGetAttribute(
                (&mut ordinal as *mut i32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                address,
            )
        };
        if result != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::invalid(format!(
                "address {address:#x} is not device memory the CUDA driver knows ({})",
                crate::error::describe_driver_error(cudarc::driver::result::DriverError(result))
            )));
        }
        if ordinal != device.device {
            return Err(Error::invalid(format!(
                "address {address:#x} is memory of device {ordinal}, not of this handle's device {}",
                device.device
            )));
        }
        Ok(())
    }

    /// `bytes` (not 0) of device memory in this stream's order: a block this stream freed
    /// before, else one from the device's pool. Returns the address and the block's capacity.
    pub(crate) fn allocate_on_stream(&self, device: &CudaDevice, bytes: usize) -> Result<(u64, usize)> {
        let kept = self.queue.cache.lock().unwrap_or_else(|e| e.into_inner()).take(bytes);
        match kept {
            Some((capacity, address)) => Ok((address, capacity)),
            None => Ok((device.allocate(bytes, self.stream())?, bytes)),
        }
    }

    /// Frees a block of [`Gpu::allocate_on_stream`] in this stream's order: kept for the
    /// stream's next allocations when small, else back to the pool.
    pub(crate) fn free_on_stream(&self, device: &CudaDevice, address: u64, capacity: usize) {
        let returned = self.queue.cache.lock().unwrap_or_else(|e| e.into_inner()).keep(capacity, address);
        if let Some((_, address)) = returned {
            device.free(address, self.stream());
        }
    }

    /// Waits until all work queued on this handle's stream has finished, and reports any
    /// error a kernel raised.
    pub fn synchronize(&self) -> Result<()> {
        match &*self.inner {
            Backend::Cuda(device) => {
                device.make_current()?;
                unsafe { cu::stream::synchronize(self.stream()) }
                    .map_err(|e| Error::driver("waiting for the GPU", e, 0))
            }
            Backend::Emulator(_) => Ok(()),
        }
    }

    /// Runs `work` (which queues kernels) and measures it with CUDA events on this handle's
    /// stream, in milliseconds (waits for the second event); on the emulator, with the host
    /// clock.
    pub fn time_ms<R>(&self, work: impl FnOnce() -> Result<R>) -> Result<(R, f64)> {
        match &*self.inner {
            Backend::Cuda(device) => {
                device.make_current()?;
                let (start, stop) = (Event::new()?, Event::new()?);
                start.record(self.stream())?;
                let result = work()?;
                stop.record(self.stream())?;
                let ms = stop.elapsed_since(&start)?;
                Ok((result, ms as f64))
            }
            Backend::Emulator(_) => {
                let started = Instant::now();
                let result = work()?;
                Ok((result, started.elapsed().as_secs_f64() * 1e3))
            }
        }
    }

    /// Launches `kernel` with `params` (asynchronously on a GPU; at once on the emulator).
    pub(crate) fn launch<P: Copy + Send + Sync>(
        &self,
        kernel: KernelId<P>,
        shape: LaunchShape,
        params: P,
    ) -> Result<()> {
        let limits = self.limits();
        if shape.block_threads == 0 || shape.block_threads > limits.max_threads_per_block {
            return Err(Error::invalid(format!(
                "{}: {} threads per block (the device allows 1 to {})",
                kernel.name, shape.block_threads, limits.max_threads_per_block
            )));
        }
        if shape.shared_bytes > limits.max_shared_bytes_per_block {
            return Err(Error::invalid(format!(
                "{}: {} bytes of shared memory per block (the device allows {})",
                kernel.name, shape.shared_bytes, limits.max_shared_bytes_per_block
            )));
        }
        match &*self.inner {
            Backend::Cuda(device) => device.launch(kernel, shape, params, self.stream()),
            Backend::Emulator(_) => {
                let config = emulator::LaunchConfig {
                    grid: shape.grid,
                    block_threads: shape.block_threads,
                    shared_bytes: shape.shared_bytes,
                };
                let body = kernel.body;
                emulator::launch(&config, &|| unsafe { body(params) })
                    .map_err(|e| Error::Emulator { message: format!("{}: {}", kernel.name, e.message) })
            }
        }
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Gpu").field(&self.describe()).finish()
    }
}

/// A CUDA event, destroyed on drop.
struct Event(sys::CUevent);

impl Event {
    fn new() -> Result<Self> {
        cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map(Event)
            .map_err(|e| Error::driver("creating an event", e, 0))
    }

    fn record(&self, stream: sys::CUstream) -> Result<()> {
        unsafe { cu::event::record(self.0, stream) }.map_err(|e| Error::driver("recording an event", e, 0))
    }

    /// Milliseconds from `start` to this event, once this event has happened.
    fn elapsed_since(&self, start: &Event) -> Result<f32> {
        unsafe { cu::event::synchronize(self.0) }.map_err(|e| Error::driver("waiting for the GPU", e, 0))?;
        unsafe { cu::event::elapsed(start.0, self.0) }.map_err(|e| Error::driver("reading an event", e, 0))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = unsafe { cu::event::destroy(self.0) };
    }
}

impl CudaDevice {
    /// `bytes` of device memory (not 0), queued on `stream`: from the pool, where freed
    /// memory is reused at once, else from `cuMemAlloc`. Not cleared (`Gpu::alloc_zeroed`
    /// clears).
    pub(crate) fn allocate(&self, bytes: usize, stream: sys::CUstream) -> Result<u64> {
        self.make_current()?;
        let mut address = 0u64;
        let result = unsafe {
            match self.pool {
                Some(pool) => sys::cuMemAllocFromPoolAsync(&mut address, bytes, pool, stream),
                None => sys::cuMemAlloc_v2(&mut address, bytes),
            }
        };
        check_driver(result, "allocating device memory", bytes)?;
        Ok(address)
    }

    /// Frees what [`CudaDevice::allocate`] returned, after the work queued on `stream` so
    /// far: a buffer may be dropped while kernels that use it are still queued there.
    pub(crate) fn free(&self, address: u64, stream: sys::CUstream) {
        if self.make_current().is_err() {
            return;
        }
        // A failure to free cannot be reported (this runs in drop); the context goes on.
        unsafe {
            let _ = match self.pool {
                Some(_) => sys::cuMemFreeAsync(address, stream),
                None => sys::cuMemFree_v2(address),
            };
        }
    }

    /// CUDA contexts are current per host thread; every entry point makes ours current.
    pub(crate) fn make_current(&self) -> Result<()> {
        unsafe { cu::ctx::set_current(self.context) }
            .map_err(|e| Error::driver("making the context current", e, 0))
    }

    fn launch<P>(
        &self,
        kernel: KernelId<P>,
        shape: LaunchShape,
        mut params: P,
        stream: sys::CUstream,
    ) -> Result<()> {
        self.make_current()?;
        let function = self.function(kernel.name, shape.shared_bytes)?;
        // The kernel takes its `#[repr(C)]` parameter struct by value: one argument.
        let mut arguments = [&mut params as *mut P as *mut c_void];
        let result = unsafe {
            sys::cuLaunchKernel(
                function,
                shape.grid.0,
                shape.grid.1,
                1,
                shape.block_threads,
                1,
                1,
                shape.shared_bytes as u32,
                stream,
                arguments.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check_driver(result, &format!("launching {}", kernel.name), 0)
    }

    /// The kernel's handle, allowed at least `shared_bytes` of dynamic shared memory: the
    /// module is loaded by the first call, each name looked up once, and the limit only ever
    /// raised. (Set per launch, one thread could lower it under another's larger launch of
    /// the same kernel; it is a bound, not an allocation, so a high one costs nothing.)
    fn function(&self, name: &'static str, shared_bytes: usize) -> Result<sys::CUfunction> {
        let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
        let (function, allowed) = match kernels.functions.get(name) {
            Some(&known) => known,
            None => {
                let module = match kernels.module {
                    Some((module, _)) => module,
                    None => {
                        let loaded = self.load_kernels()?;
                        kernels.module = Some(loaded);
                        loaded.0
                    }
                };
                let symbol = CString::new(name).expect("kernel names hold no NUL");
                let function = unsafe { cu::module::get_function(module, symbol) }
                    .map_err(|e| Error::driver(format!("looking up kernel {name}"), e, 0))?;
                (function, DEFAULT_SHARED_LIMIT)
            }
        };
        let allowed = if shared_bytes > allowed {
            let result = unsafe {
                sys::cuFuncSetAttribute(
                    function,
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared_bytes as i32,
                )
            };
            check_driver(result, &format!("raising the shared-memory limit of {name}"), 0)?;
            shared_bytes
        } else {
            allowed
        };
        kernels.functions.insert(name, (function, allowed));
        Ok(function)
    }

    /// Loads the device's kernel image; where machine code fails to load (a driver older
    /// than the `ptxas` that made it), the PTX instead.
    fn load_kernels(&self) -> Result<(sys::CUmodule, KernelImage)> {
        let load = |image: KernelImage| -> Result<sys::CUmodule> {
            let bytes = image.bytes()?;
            if image == KernelImage::Ptx {
                announce_compilation(&self.limits);
            }
            unsafe { cu::module::load_data(bytes.as_ptr().cast()) }.map_err(|e| Error::KernelLoad {
                image: image.describe(),
                reason: crate::error::describe_driver_error(e),
            })
        };
        match load(self.image) {
            Ok(module) => Ok((module, self.image)),
            Err(error) if self.image == KernelImage::Ptx => Err(error),
            Err(error) => {
                eprintln!("gpu-select: {error}; falling back to the PTX");
                Ok((load(KernelImage::Ptx)?, KernelImage::Ptx))
            }
        }
    }
}

/// The library's memory pool on `device`, which keeps freed memory for reuse (release
/// threshold: all of it), so that allocating a workspace per call costs microseconds; `None`
/// where the device has no memory pools.
fn create_pool(device: sys::CUdevice, ordinal: u32) -> Result<Option<sys::CUmemoryPool>> {
    let supported = unsafe {
        cu::device::get_attribute(device, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
    };
    if supported.unwrap_or(0) == 0 {
        return Ok(None);
    }
    let properties = sys::CUmemPoolProps {
        allocType: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        handleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: ordinal as i32,
        },
        win32SecurityAttributes: std::ptr::null_mut(),
        reserved: [0; 64],
    };
    let mut pool = std::ptr::null_mut();
    unsafe {
        check_driver(sys::cuMemPoolCreate(&mut pool, &properties), "creating a memory pool", 0)?;
        let mut keep_everything = u64::MAX;
        let kept = check_driver(
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut keep_everything as *mut u64).cast(),
            ),
            "setting the memory pool's release threshold",
            0,
        );
        if let Err(error) = kept {
            let _ = cu::mem_pool::destroy(pool);
            return Err(error);
        }
    }
    Ok(Some(pool))
}

/// Says, once per process, that the driver is compiling the kernels: on a fresh machine that
/// takes minutes, and a silent wait looks like a hang.
fn announce_compilation(limits: &DeviceLimits) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let (major, minor) = limits.compute_capability;
        eprintln!(
            "gpu-select: no prebuilt machine code for {} (sm_{major}{minor}); the driver compiles the \
             kernels from PTX, which takes minutes the first time on a machine (its cache keeps them)",
            limits.name
        );
    });
}

fn read_limits(device: sys::CUdevice) -> std::result::Result<DeviceLimits, DriverError> {
    use sys::CUdevice_attribute as Attribute;
    let attribute = |attribute| unsafe { cu::device::get_attribute(device, attribute) };
    // Older drivers lack the opt-in attribute: the default limit then applies.
    let optin_shared = attribute(Attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        .unwrap_or(DEFAULT_SHARED_LIMIT as i32);
    let memory_clock_khz = attribute(Attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)? as f64;
    let bus_width_bits = attribute(Attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)? as f64;
    Ok(DeviceLimits {
        name: cu::device::get_name(device)?,
        compute_capability: (
            attribute(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        multiprocessors: attribute(Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        max_threads_per_block: attribute(Attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32,
        max_shared_bytes_per_block: optin_shared as usize,
        l2_bytes: attribute(Attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
        total_memory_bytes: unsafe { cu::device::total_mem(device) }?,
        // Double data rate: two transfers per clock.
        peak_bandwidth_bytes_per_s: 2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_cache_keeps_few_small_blocks_and_reuses_close_fits() {
        let mut cache = BlockCache::default();
        assert_eq!(cache.keep(4096, 0x1000), None);
        assert_eq!(
            cache.keep(MAX_CACHED_BYTES + 1, 0x2000),
            Some((MAX_CACHED_BYTES + 1, 0x2000)),
            "too large"
        );
        // A request takes a block of its size up to twice it, never a much larger one.
        assert_eq!(cache.take(1000), None, "4096 is more than twice 1000");
        assert_eq!(cache.take(3000), Some((4096, 0x1000)));
        assert_eq!(cache.take(3000), None, "taken once");
        for i in 0..CACHED_BLOCKS as u64 {
            assert_eq!(cache.keep(512, 0x10_000 + i), None);
        }
        // Full: the least recently freed block goes back to the pool, the new one stays.
        assert_eq!(cache.keep(512, 0x20_000), Some((512, 0x10_000)));
        // Among equal fits, the most recently freed first.
        assert_eq!(cache.take(512), Some((512, 0x20_000)));
        // Blocks of sizes no longer asked for leave the cache as new sizes come.
        let mut cache = BlockCache::default();
        for i in 0..CACHED_BLOCKS as u64 {
            assert_eq!(cache.keep(4, 0x30_000 + i), None);
        }
        for (i, capacity) in [3_000_000, 128, 256].into_iter().enumerate() {
            assert_eq!(cache.keep(capacity, 0x40_000 + i as u64), Some((4, 0x30_000 + i as u64)));
        }
        assert_eq!(cache.take(3_000_000), Some((3_000_000, 0x40_000)));
        assert_eq!(cache.take(128), Some((128, 0x40_001)));
        assert_eq!(cache.take(256), Some((256, 0x40_002)));
        // A smaller request takes the smallest block that fits, leaving the larger one for
        // its own size: values of 128 bytes and indices of 256, freed in either order.
        let mut cache = BlockCache::default();
        for (capacity, address) in [(128, 0xa), (256, 0xb)] {
            assert_eq!(cache.keep(capacity, address), None);
        }
        assert_eq!(cache.take(128), Some((128, 0xa)));
        assert_eq!(cache.take(256), Some((256, 0xb)));
    }
}
