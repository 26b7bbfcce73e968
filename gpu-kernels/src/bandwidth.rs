//! The read floor: a read-only pass over a buffer, the yardstick every benchmark divides by.
//!
//! Each thread folds 16-byte loads into a running maximum, four loads in flight per loop
//! trip (grid-stride), then a warp reduction and one global atomic per warp. On an H200 this
//! shape reads at 4.4–4.5 TB/s, like CUB's `DeviceReduce::Max` (design.md §6).

use crate::device;
use crate::params::GlobalPtr;
use crate::warp;

/// Loads in flight per thread and loop trip.
pub const READ_UNROLL: u64 = 4;
/// Threads per block of the read pass.
pub const READ_THREADS: u32 = 256;

/// Parameters of `read_floor_u32`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ReadFloorParams {
    /// Words to read, 16-byte aligned.
    pub input: GlobalPtr<u32>,
    /// Number of words.
    pub len: u64,
    /// One word: receives the maximum (start it at 0).
    pub out: GlobalPtr<u32>,
}

#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Words4([u32; 4]);

#[inline(always)]
fn fold(acc: u32, words: Words4) -> u32 {
    acc.max(words.0[0]).max(words.0[1]).max(words.0[2]).max(words.0[3])
}

/// The `read_floor_u32` kernel: `out[0] = max(out[0], input[..])`.
///
/// # Safety
/// Blocks of a multiple of 32 threads; `input` 16-byte aligned with `len` words.
pub unsafe fn read_floor(params: ReadFloorParams) {
    let vectors = params.len / 4;
    let base = params.input.as_ptr() as *const Words4;
    let stride = device::grid_dim_x() as u64 * device::block_dim_x() as u64;
    let first = device::global_thread_idx();
    let mut acc = [0u32; READ_UNROLL as usize];
    let mut i = first;
    unsafe {
        while i + (READ_UNROLL - 1) * stride < vectors {
            // Independent loads first, folds after: several requests in flight.
            let mut loaded = [Words4([0; 4]); READ_UNROLL as usize];
            for (j, slot) in loaded.iter_mut().enumerate() {
                *slot = base.add((i + j as u64 * stride) as usize).read();
            }
            for j in 0..READ_UNROLL as usize {
                acc[j] = fold(acc[j], loaded[j]);
            }
            i += READ_UNROLL * stride;
        }
        while i < vectors {
            acc[0] = fold(acc[0], base.add(i as usize).read());
            i += stride;
        }
        if first == 0 {
            for tail in vectors * 4..params.len {
                acc[0] = acc[0].max(params.input.read(tail));
            }
        }
        let mut max = acc.iter().fold(0, |a, &b| a.max(b));
        max = warp::reduce_max_u32(max);
        if device::lane_id() == 0 {
            device::global_atomic_max_u32(params.out.as_ptr(), max);
        }
    }
}
