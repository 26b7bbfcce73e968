//! The [`Gpu`] handle: a CUDA device with the embedded kernels loaded, or the emulator.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cust::context::{Context, CurrentContext};
use cust::device::{Device, DeviceAttribute};
use cust::error::CudaError;
use cust::event::{Event, EventFlags};
use cust::module::Module;
use cust::stream::{Stream, StreamFlags};
use gpu_select_kernels::device::emulator;
use gpu_select_kernels::entry::KernelId;

use crate::error::{Error, Result, check_driver};
use crate::ptx;

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

/// What the library needs to know about the device it runs on.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceLimits {
    /// Device name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability, e.g. `(9, 0)`.
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Most threads in one block.
    pub max_threads_per_block: u32,
    /// Most dynamic shared memory one block may opt in to.
    pub max_shared_bytes_per_block: usize,
    /// L2 cache size.
    pub l2_bytes: usize,
    /// Device memory.
    pub total_memory_bytes: usize,
    /// Peak memory bandwidth from the memory clock and bus width (the datasheet figure;
    /// benchmarks measure the real one).
    pub peak_bandwidth_bytes_per_s: f64,
}

/// A handle on where kernels run: one CUDA device (its primary context, the embedded PTX
/// module and one stream) or the emulator. Cheap to clone; buffers keep it alive.
///
/// ```
/// use gpu_select::{BackendKind, Gpu};
///
/// let gpu = Gpu::emulator();
/// assert_eq!(gpu.backend(), BackendKind::Emulator);
/// println!("running on {}", gpu.describe());
/// ```
#[derive(Clone)]
pub struct Gpu {
    pub(crate) inner: Arc<Backend>,
}

pub(crate) enum Backend {
    Cuda(CudaDevice),
    Emulator(DeviceLimits),
}

/// Fields drop in declaration order: the module and stream before the context.
pub(crate) struct CudaDevice {
    module: Module,
    /// Kernel handles looked up so far, by PTX name (a launch would otherwise pay a
    /// `cuModuleGetFunction` each time; radix select makes 13–25 launches per call).
    functions: Mutex<HashMap<&'static str, KernelHandle>>,
    stream: Stream,
    context: Context,
    limits: DeviceLimits,
    arch: &'static str,
}

/// A `CUfunction` of the module: valid while the module lives, which the `CudaDevice` that
/// holds both guarantees.
#[derive(Clone, Copy)]
struct KernelHandle(cust::sys::CUfunction);

// The handle is an opaque driver pointer; the driver's functions take it from any thread.
unsafe impl Send for KernelHandle {}

/// The shape of one launch, as the kernels' own `const fn`s compute it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaunchShape {
    pub grid: (u32, u32),
    pub block_threads: u32,
    pub shared_bytes: usize,
}

/// Shared memory a block may use without opting in.
const DEFAULT_SHARED_LIMIT: usize = 48 * 1024;

impl Gpu {
    /// Opens CUDA device 0, loads the embedded PTX and creates a stream.
    ///
    /// Errors: [`Error::NoDevice`] when there is no driver or no device,
    /// [`Error::UnsupportedDevice`] before compute capability 8.0, [`Error::PtxLoad`].
    pub fn new() -> Result<Self> {
        Self::cuda(0)
    }

    /// Opens CUDA device `ordinal`.
    pub fn cuda(ordinal: u32) -> Result<Self> {
        let no_device = |e: CudaError| Error::NoDevice { reason: e.to_string() };
        cust::init(cust::CudaFlags::empty()).map_err(no_device)?;
        let device = Device::get_device(ordinal).map_err(no_device)?;
        let limits = read_limits(device).map_err(no_device)?;
        let arch = ptx::arch_for(limits.compute_capability).ok_or_else(|| Error::UnsupportedDevice {
            name: limits.name.clone(),
            compute_capability: limits.compute_capability,
        })?;
        let context = Context::new(device).map_err(no_device)?;
        let module = Module::from_ptx(ptx::source(arch), &[])
            .map_err(|e| Error::PtxLoad { arch, reason: e.to_string() })?;
        // A blocking stream: the synchronous copies and memsets (legacy default stream) are
        // ordered with its kernels, so a kernel never reads memory still being written.
        let stream =
            Stream::new(StreamFlags::DEFAULT, None).map_err(|e| Error::driver("creating a stream", e, 0))?;
        Ok(Self {
            inner: Arc::new(Backend::Cuda(CudaDevice {
                module,
                functions: Mutex::default(),
                stream,
                context,
                limits,
                arch,
            })),
        })
    }

    /// The host emulator: runs the kernels on CPU threads. Always available; slow.
    pub fn emulator() -> Self {
        let limits = DeviceLimits {
            name: "gpu-select emulator".to_string(),
            compute_capability: (9, 0),
            multiprocessors: 1,
            max_threads_per_block: emulator::MAX_BLOCK_THREADS,
            max_shared_bytes_per_block: emulator::MAX_SHARED_BYTES,
            l2_bytes: 0,
            total_memory_bytes: 0,
            peak_bandwidth_bytes_per_s: 0.0,
        };
        Self { inner: Arc::new(Backend::Emulator(limits)) }
    }

    /// The backend [`BACKEND_ENV`] asks for: `cuda` (an error when none opens), `emulator`,
    /// or `auto`/unset (CUDA when a device opens, else the emulator).
    pub fn from_env() -> Result<Self> {
        match std::env::var(BACKEND_ENV).unwrap_or_default().to_ascii_lowercase().as_str() {
            "cuda" | "gpu" => Self::new(),
            "emulator" | "emu" => Ok(Self::emulator()),
            "" | "auto" => Ok(Self::new().unwrap_or_else(|_| Self::emulator())),
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

    /// One line naming the backend, e.g. "CUDA: NVIDIA H200 (sm_90, 132 SMs, PTX sm_90)".
    pub fn describe(&self) -> String {
        match &*self.inner {
            Backend::Cuda(device) => {
                let limits = &device.limits;
                let (major, minor) = limits.compute_capability;
                format!(
                    "CUDA: {} (sm_{major}{minor}, {} SMs, {:.1} GiB, PTX {})",
                    limits.name,
                    limits.multiprocessors,
                    limits.total_memory_bytes as f64 / (1u64 << 30) as f64,
                    device.arch
                )
            }
            Backend::Emulator(_) => {
                "emulator (kernels run on CPU threads; no CUDA device in use)".to_string()
            }
        }
    }

    /// Waits until all work queued on the stream has finished, and reports any error a
    /// kernel raised.
    pub fn synchronize(&self) -> Result<()> {
        match &*self.inner {
            Backend::Cuda(device) => {
                device.make_current()?;
                device.stream.synchronize().map_err(|e| Error::driver("waiting for the GPU", e, 0))
            }
            Backend::Emulator(_) => Ok(()),
        }
    }

    /// Runs `work` (which queues kernels) and measures it with CUDA events on the stream, in
    /// milliseconds; on the emulator, with the host clock.
    pub fn time_ms<R>(&self, work: impl FnOnce() -> Result<R>) -> Result<(R, f64)> {
        match &*self.inner {
            Backend::Cuda(device) => {
                device.make_current()?;
                let event =
                    || Event::new(EventFlags::DEFAULT).map_err(|e| Error::driver("creating an event", e, 0));
                let (start, stop) = (event()?, event()?);
                start.record(&device.stream).map_err(|e| Error::driver("recording an event", e, 0))?;
                let result = work()?;
                stop.record(&device.stream).map_err(|e| Error::driver("recording an event", e, 0))?;
                stop.synchronize().map_err(|e| Error::driver("waiting for the GPU", e, 0))?;
                let ms =
                    stop.elapsed_time_f32(&start).map_err(|e| Error::driver("reading an event", e, 0))?;
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
            Backend::Cuda(device) => device.launch(kernel, shape, params),
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

impl CudaDevice {
    /// CUDA contexts are current per host thread; every entry point makes ours current.
    pub(crate) fn make_current(&self) -> Result<()> {
        CurrentContext::set_current(&self.context)
            .map_err(|e| Error::driver("making the context current", e, 0))
    }

    fn launch<P>(&self, kernel: KernelId<P>, shape: LaunchShape, mut params: P) -> Result<()> {
        self.make_current()?;
        let function = self.function(kernel.name)?;
        if shape.shared_bytes > DEFAULT_SHARED_LIMIT {
            let result = unsafe {
                cust::sys::cuFuncSetAttribute(
                    function,
                    cust::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shape.shared_bytes as i32,
                )
            };
            check_driver(result, &format!("raising the shared-memory limit of {}", kernel.name), 0)?;
        }
        // The kernel takes its `#[repr(C)]` parameter struct by value: one argument.
        let mut arguments = [&mut params as *mut P as *mut c_void];
        let result = unsafe {
            cust::sys::cuLaunchKernel(
                function,
                shape.grid.0,
                shape.grid.1,
                1,
                shape.block_threads,
                1,
                1,
                shape.shared_bytes as u32,
                self.stream.as_inner(),
                arguments.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check_driver(result, &format!("launching {}", kernel.name), 0)
    }

    /// The kernel's handle, looked up in the module the first time only.
    fn function(&self, name: &'static str) -> Result<cust::sys::CUfunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(handle) = functions.get(name) {
            return Ok(handle.0);
        }
        let function = self
            .module
            .get_function(name)
            .map_err(|e| Error::driver(format!("looking up kernel {name}"), e, 0))?
            .to_raw();
        functions.insert(name, KernelHandle(function));
        Ok(function)
    }
}

fn read_limits(device: Device) -> std::result::Result<DeviceLimits, CudaError> {
    let attribute = |attribute| device.get_attribute(attribute);
    let mut optin_shared = 0i32;
    let result = unsafe {
        cust::sys::cuDeviceGetAttribute(
            &mut optin_shared,
            cust::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            device.as_raw(),
        )
    };
    if result != cust::sys::cudaError_enum::CUDA_SUCCESS {
        // Older drivers lack the opt-in attribute: the default limit then applies.
        optin_shared = DEFAULT_SHARED_LIMIT as i32;
    }
    let memory_clock_khz = attribute(DeviceAttribute::MemoryClockRate)? as f64;
    let bus_width_bits = attribute(DeviceAttribute::GlobalMemoryBusWidth)? as f64;
    Ok(DeviceLimits {
        name: device.name()?,
        compute_capability: (
            attribute(DeviceAttribute::ComputeCapabilityMajor)?,
            attribute(DeviceAttribute::ComputeCapabilityMinor)?,
        ),
        multiprocessors: attribute(DeviceAttribute::MultiprocessorCount)? as u32,
        max_threads_per_block: attribute(DeviceAttribute::MaxThreadsPerBlock)? as u32,
        max_shared_bytes_per_block: optin_shared as usize,
        l2_bytes: attribute(DeviceAttribute::L2CacheSize)? as usize,
        total_memory_bytes: device.total_memory()?,
        // Double data rate: two transfers per clock.
        peak_bandwidth_bytes_per_s: 2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8.0,
    })
}
