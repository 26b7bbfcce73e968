//! Keys that live in memory another library owns, on a stream another library made: the
//! top 8 of 1 M floats read through a view, written through views, queued on the caller's
//! stream.
//!
//! `cargo run --release --example caller_memory` (add `--features cudarc` or
//! `--features cust` for the cudarc or cust part). On a GPU the memory and the stream come from the CUDA driver directly, as from any
//! library (PyTorch's `tensor.data_ptr()` and `torch.cuda.current_stream().cuda_stream`,
//! …); with the `cudarc` feature also from cudarc's `CudaSlice` on its `CudaStream` (what
//! candle and burn use), and with the `cust` feature from cust's `DeviceBuffer`. On the emulator,
//! whose "device memory" is host memory, a host vector stands for it.

use gpu_select::{
    BackendKind, DeviceSlice, DeviceSliceMut, Gpu, Keys, Order, TopKOptions, TopKOut, reference,
};

const N: usize = 1 << 20;
const K: usize = 8;

fn main() -> gpu_select::Result<()> {
    let gpu = Gpu::from_env()?;
    println!("backend: {}", gpu.describe());
    let keys: Vec<f32> = (0..N as u64).map(|i| ((i * 2_654_435_761) % 1_000_003) as f32).collect();
    let want: Vec<u64> = reference::sort_pairs(&keys, Order::Largest).iter().take(K).map(|p| p.1).collect();

    let indices = match gpu.backend() {
        BackendKind::Cuda => on_raw_cuda_memory(&gpu, &keys)?,
        BackendKind::Emulator => on_host_memory(&gpu, &keys)?,
    };
    assert_eq!(indices, want, "the top {K} differ from the CPU's");
    println!("raw memory and stream: top {K} at {indices:?}, as the CPU's sort says");

    #[cfg(feature = "cudarc")]
    if gpu.backend() == BackendKind::Cuda {
        let indices = on_cudarc_slices(&gpu, &keys)?;
        assert_eq!(indices, want, "the top {K} differ from the CPU's");
        println!("cudarc slices on a cudarc stream: the same top {K}");
    }
    #[cfg(feature = "cust")]
    if gpu.backend() == BackendKind::Cuda {
        let indices = on_cust_buffers(&gpu, &keys)?;
        assert_eq!(indices, want, "the top {K} differ from the CPU's");
        println!("cust buffers: the same top {K}");
    }
    Ok(())
}

/// Memory from `cuMemAlloc` and a stream from `cuStreamCreate`, made outside the library.
fn on_raw_cuda_memory(gpu: &Gpu, keys: &[f32]) -> gpu_select::Result<Vec<u64>> {
    use cudarc::driver::result::{free_sync, malloc_sync, memcpy_dtoh_sync, memcpy_htod_sync, stream};
    gpu.synchronize()?; // makes the device's context current on this thread
    unsafe {
        let (keys_ptr, values_ptr, indices_ptr) = (
            malloc_sync(N * 4).expect("a driver call of another library"),
            malloc_sync(K * 4).expect("a driver call of another library"),
            malloc_sync(K * 8).expect("a driver call of another library"),
        );
        memcpy_htod_sync(keys_ptr, keys).expect("a driver call of another library");
        let their_stream =
            stream::create(stream::StreamKind::NonBlocking).expect("a driver call of another library");

        // Safety: the three allocations and the stream outlive every use below.
        let on_their_stream = gpu.with_raw_stream(their_stream.cast())?;
        let input = DeviceSlice::<f32>::from_raw_parts(&on_their_stream, keys_ptr, N)?;
        let out = TopKOut::new(
            DeviceSliceMut::<f32>::from_raw_parts(&on_their_stream, values_ptr, K)?,
            DeviceSliceMut::<u64>::from_raw_parts(&on_their_stream, indices_ptr, K)?,
        );
        let plan = on_their_stream.plan_top_k(&Keys::new(&input), K, &TopKOptions::largest())?;
        let mut workspace = on_their_stream.alloc_zeroed::<u8>(plan.workspace_bytes())?;
        on_their_stream.top_k_into(&plan, &input, out, &mut workspace)?; // queued on their stream
        on_their_stream.synchronize()?;

        let mut indices = vec![0u64; K];
        memcpy_dtoh_sync(&mut indices, indices_ptr).expect("a driver call of another library");
        drop(workspace);
        on_their_stream.synchronize()?;
        for ptr in [keys_ptr, values_ptr, indices_ptr] {
            free_sync(ptr).expect("a driver call of another library");
        }
        Ok(indices)
    }
}

/// The emulator's device memory is host memory: a vector's address stands for a device
/// pointer there.
fn on_host_memory(gpu: &Gpu, keys: &[f32]) -> gpu_select::Result<Vec<u64>> {
    let (mut values, mut indices) = (vec![0f32; K], vec![0u64; K]);
    // Safety: the vectors outlive the call, which the emulator runs to its end.
    unsafe {
        let input = DeviceSlice::<f32>::from_raw_parts(gpu, keys.as_ptr() as u64, keys.len())?;
        let out = TopKOut::new(
            DeviceSliceMut::<f32>::from_raw_parts(gpu, values.as_mut_ptr() as u64, K)?,
            DeviceSliceMut::<u64>::from_raw_parts(gpu, indices.as_mut_ptr() as u64, K)?,
        );
        let plan = gpu.plan_top_k(&Keys::new(&input), K, &TopKOptions::largest())?;
        let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes())?;
        gpu.top_k_into(&plan, &input, out, &mut workspace)?;
    }
    Ok(indices)
}

/// cudarc's slices, viewed on a handle that queues on cudarc's stream.
#[cfg(feature = "cudarc")]
fn on_cudarc_slices(gpu: &Gpu, keys: &[f32]) -> gpu_select::Result<Vec<u64>> {
    let context = cudarc::driver::CudaContext::new(0).expect("a driver call of another library");
    let stream = context.new_stream().expect("a driver call of another library");
    let device_keys = stream.clone_htod(keys).expect("a driver call of another library");
    let mut values = stream.alloc_zeros::<f32>(K).expect("a driver call of another library");
    let mut indices = stream.alloc_zeros::<u64>(K).expect("a driver call of another library");
    let on_cudarc = gpu.with_cudarc_stream(&stream)?;
    {
        let input = on_cudarc.view_cudarc(&device_keys)?;
        let out =
            TopKOut::new(on_cudarc.view_cudarc_mut(&mut values)?, on_cudarc.view_cudarc_mut(&mut indices)?);
        let top = on_cudarc.plan_top_k(&Keys::new(&input), K, &TopKOptions::largest())?;
        let mut workspace = on_cudarc.alloc_zeroed::<u8>(top.workspace_bytes())?;
        on_cudarc.top_k_into(&top, &input, out, &mut workspace)?;
    } // the views record their events here, after the work they were used for
    Ok(stream.clone_dtoh(&indices).expect("a driver call of another library"))
}

/// cust's buffers (cust 0.3 uses the device's primary context, as the library does). cust
/// copies on the legacy default stream and waits for them; the library's stream is
/// non-blocking, so the handle is synchronized before cust reads the outputs.
#[cfg(feature = "cust")]
fn on_cust_buffers(gpu: &Gpu, keys: &[f32]) -> gpu_select::Result<Vec<u64>> {
    use cust::memory::{CopyDestination, DeviceBuffer};
    let _context = cust::quick_init().expect("cust's context");
    let device_keys = DeviceBuffer::from_slice(keys).expect("a cust allocation");
    let mut values = DeviceBuffer::from_slice(&[0f32; K]).expect("a cust allocation");
    let mut indices = DeviceBuffer::from_slice(&[0u64; K]).expect("a cust allocation");
    let input = gpu.view_cust(&device_keys)?;
    let plan = gpu.plan_top_k(&Keys::new(&input), K, &TopKOptions::largest())?;
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes())?;
    let out = TopKOut::new(gpu.view_cust_mut(&mut values)?, gpu.view_cust_mut(&mut indices)?);
    gpu.top_k_into(&plan, &input, out, &mut workspace)?;
    gpu.synchronize()?;
    let mut got = vec![0u64; K];
    indices.copy_to(&mut got[..]).expect("a cust copy");
    Ok(got)
}
