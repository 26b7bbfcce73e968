//! The read floor: how fast the device reads a buffer once, measured in the same run as
//! the algorithm it is compared with.

use gpu_select_kernels::bandwidth::{READ_THREADS, ReadFloorParams};
use gpu_select_kernels::entry::READ_FLOOR;
use gpu_select_kernels::params::GlobalPtr;

use crate::buffer::{DeviceBuffer, DeviceValue};
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};

/// Blocks per multiprocessor of the read pass: enough loads in flight to saturate HBM.
const READ_BLOCKS_PER_SM: u32 = 4;

/// Reads every byte of `buffer` once (a maximum over its 32-bit words) and returns that
/// maximum. Timed with [`Gpu::time_ms`], it is the *read floor*: no selection over the same
/// bytes can be faster than one read of them.
///
/// `scratch` is a one-word buffer the result goes through (reused across timed runs).
/// Errors: [`Error::InvalidArgument`] for a buffer not of whole 32-bit words or not 16-byte
/// aligned (the pass loads 16-byte vectors).
///
/// ```
/// use gpu_select::Gpu;
/// use gpu_select::diagnostics::read_pass;
///
/// let gpu = Gpu::emulator();
/// let data = gpu.upload(&[4u32, 9, 1, 7, 3])?;
/// let mut scratch = gpu.alloc_zeroed::<u32>(1)?;
/// assert_eq!(read_pass(&gpu, &data, &mut scratch)?, 9);
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub fn read_pass<T: DeviceValue>(
    gpu: &Gpu,
    buffer: &DeviceBuffer<T>,
    scratch: &mut DeviceBuffer<u32>,
) -> Result<u32> {
    if scratch.len() != 1 {
        return Err(Error::LengthMismatch { what: "read-pass scratch", expected: 1, actual: scratch.len() });
    }
    gpu.copy_to_device(&[0], scratch)?;
    queue_read_pass(gpu, buffer, scratch)?;
    Ok(gpu.download(scratch)?[0])
}

/// Queues the read pass of [`read_pass`] without waiting for it (for timing loops).
pub fn queue_read_pass<T: DeviceValue>(
    gpu: &Gpu,
    buffer: &DeviceBuffer<T>,
    scratch: &DeviceBuffer<u32>,
) -> Result<()> {
    buffer.check_gpu(gpu, "the buffer")?;
    scratch.check_gpu(gpu, "the scratch word")?;
    if scratch.len() != 1 {
        // The kernel writes one word there: an empty scratch would be a write to address 0.
        return Err(Error::LengthMismatch { what: "read-pass scratch", expected: 1, actual: scratch.len() });
    }
    if !buffer.bytes().is_multiple_of(4) {
        return Err(Error::invalid("the read pass reads whole 32-bit words"));
    }
    if !buffer.device_address().is_multiple_of(16) {
        return Err(Error::invalid(
            "the read pass loads 16-byte vectors: the buffer must be 16-byte aligned",
        ));
    }
    {
        let words = (buffer.bytes() / 4) as u64;
        let blocks_needed = words.div_ceil(4 * READ_THREADS as u64).max(1);
        let blocks = (gpu.limits().multiprocessors * READ_BLOCKS_PER_SM).min(blocks_needed as u32).max(1);
        let params = ReadFloorParams {
            input: GlobalPtr::from_address(buffer.global_ptr().address()),
            len: words,
            out: scratch.global_ptr(),
        };
        gpu.launch(
            READ_FLOOR,
            LaunchShape { grid: (blocks, 1), block_threads: READ_THREADS, shared_bytes: 0 },
            params,
        )
    }
}
