//! Probe kernels: each exercises a group of device-layer primitives and writes what every
//! thread saw, so the test suite can compare a GPU and the emulator against one CPU model
//! (`gpu-select`'s `tests/device_primitives.rs`).
//!
//! Every probe writes [`PROBE_SLOTS`] `u64`s per thread at
//! `out[(linear block index · block_dim + thread) · PROBE_SLOTS + slot]`.

use crate::device::{self, FULL_WARP, SharedLayout, SharedRegion};
use crate::params::GlobalPtr;
use crate::warp;

/// `u64` outputs per thread of every probe.
pub const PROBE_SLOTS: usize = 18;

/// `u32` words of the scratch buffer of [`global_atomics`]: 16 counters, min, max, CAS
/// slot, a pad word, and a 64-bit counter at word 20.
pub const GLOBAL_SCRATCH_WORDS: usize = 22;

/// Parameters of every probe kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProbeParams {
    /// One input value per thread of the grid.
    pub input: GlobalPtr<u64>,
    /// [`PROBE_SLOTS`] outputs per thread.
    pub out: GlobalPtr<u64>,
    /// Scratch words for the global-atomics probe (initialised by the host).
    pub scratch: GlobalPtr<u32>,
}

fn linear_thread() -> u64 {
    let block = device::block_idx_y() as u64 * device::grid_dim_x() as u64 + device::block_idx_x() as u64;
    block * device::block_dim_x() as u64 + device::thread_idx_x() as u64
}

unsafe fn write_slots(params: &ProbeParams, slots: &[u64; PROBE_SLOTS]) {
    let base = linear_thread() * PROBE_SLOTS as u64;
    for (slot, &value) in slots.iter().enumerate() {
        unsafe { params.out.write(base + slot as u64, value) };
    }
}

/// Indices: thread, block and grid shape, lane, warp, lane mask. Any launch shape.
///
/// # Safety
/// Buffers sized for the grid.
pub unsafe fn indices(params: ProbeParams) {
    let mut slots = [0u64; PROBE_SLOTS];
    slots[0] = device::thread_idx_x() as u64;
    slots[1] = device::block_dim_x() as u64;
    slots[2] = device::block_idx_x() as u64;
    slots[3] = device::block_idx_y() as u64;
    slots[4] = device::grid_dim_x() as u64;
    slots[5] = device::grid_dim_y() as u64;
    slots[6] = device::lane_id() as u64;
    slots[7] = device::warp_id() as u64;
    slots[8] = device::lanemask_lt() as u64;
    slots[9] = device::global_thread_idx();
    unsafe { write_slots(&params, &slots) };
}

/// Warp collectives: shuffles (32- and 64-bit, all four kinds), votes, match, warp
/// reductions and scan, and half-warp ballots under divergent masks.
///
/// # Safety
/// Block size a multiple of 32; buffers sized for the grid.
pub unsafe fn warp_collectives(params: ProbeParams) {
    let value = unsafe { params.input.read(linear_thread()) };
    let small = value as u32;
    let lane = device::lane_id();
    let mut slots = [0u64; PROBE_SLOTS];
    unsafe {
        slots[0] = device::shfl_idx_u32(FULL_WARP, small, (lane * 7 + 3) % 32) as u64;
        slots[1] = device::shfl_up_u32(FULL_WARP, small, 3) as u64;
        slots[2] = device::shfl_down_u32(FULL_WARP, small, 5) as u64;
        slots[3] = device::shfl_xor_u32(FULL_WARP, small, 9) as u64;
        slots[4] = device::shfl_idx_u64(FULL_WARP, value, 31 - lane);
        slots[5] = device::shfl_up_u64(FULL_WARP, value, 1);
        slots[6] = device::shfl_down_u64(FULL_WARP, value, 1);
        slots[7] = device::shfl_xor_u64(FULL_WARP, value, 16);
        slots[8] = device::ballot(FULL_WARP, value & 1 == 1) as u64;
        slots[9] = device::all(FULL_WARP, value % 1000 < 900) as u64;
        slots[10] = device::any(FULL_WARP, value % 97 == 0) as u64;
        slots[11] = device::match_any_u32(FULL_WARP, small % 4) as u64;
        slots[12] = device::active_mask() as u64;
        slots[13] = warp::reduce_add_u32(small & 0xffff) as u64;
        slots[14] = warp::reduce_max_u32(small) as u64;
        slots[15] = warp::inclusive_scan_add_u32(small & 0xff) as u64;
        // Two halves of the warp vote separately: masks that name only some lanes.
        let half = if lane < 16 { 0x0000_ffff } else { 0xffff_0000 };
        slots[16] = device::ballot(half, value & 2 != 0) as u64;
        device::sync_warp(half);
        slots[17] = device::shfl_xor_u32(half, small, 1) as u64;
        write_slots(&params, &slots);
    }
}

/// Shared memory of [`shared_memory`]: 32 counters, min, max and a CAS word, then one
/// `u64` per thread.
#[derive(Clone, Copy, Debug)]
pub struct SharedProbeLayout {
    /// Histogram counters, then min, max, CAS word.
    pub words: SharedRegion<u32>,
    /// One value per thread.
    pub values: SharedRegion<u64>,
    /// Bytes to ask for at launch.
    pub bytes: usize,
}

impl SharedProbeLayout {
    /// The layout for blocks of `threads` threads.
    pub const fn new(threads: u32) -> Self {
        let (layout, words) = SharedLayout::new().push::<u32>(35);
        let (layout, values) = layout.push::<u64>(threads as usize);
        Self { words, values, bytes: layout.bytes() }
    }
}

/// Shared memory: typed stores and loads across a barrier, and the four shared atomics.
///
/// # Safety
/// At least 35 threads per block; [`SharedProbeLayout::bytes`] of shared memory; buffers
/// sized for the grid.
pub unsafe fn shared_memory(params: ProbeParams) {
    const MIN: usize = 32;
    const MAX: usize = 33;
    const CAS: usize = 34;
    let thread = device::thread_idx_x() as usize;
    let threads = device::block_dim_x() as usize;
    let layout = SharedProbeLayout::new(threads as u32);
    let value = unsafe { params.input.read(linear_thread()) };
    let mut slots = [0u64; PROBE_SLOTS];
    unsafe {
        let words = layout.words.bind();
        let values = layout.values.bind();
        if thread < 32 {
            words.store(thread, 0);
        }
        match thread {
            MIN => words.store(MIN, u32::MAX),
            MAX => words.store(MAX, 0),
            CAS => words.store(CAS, 0),
            _ => {}
        }
        values.store(thread, value);
        device::sync_threads();
        words.atomic_add((value % 32) as usize, 1);
        words.atomic_min(MIN, value as u32);
        words.atomic_max(MAX, value as u32);
        let won = words.atomic_cas(CAS, 0, thread as u32 + 1) == 0;
        device::sync_threads();
        slots[0] = values.load((thread + 1) % threads);
        slots[1] = words.load(thread % 32) as u64;
        slots[2] = words.load(MIN) as u64;
        slots[3] = words.load(MAX) as u64;
        slots[4] = words.load(CAS) as u64;
        slots[5] = won as u64;
        write_slots(&params, &slots);
    }
}

/// Global atomics and fences: every thread counts its value into one of 16 counters, folds
/// it into a min and a max, races for one CAS word and adds to a 64-bit counter.
///
/// # Safety
/// `scratch` holds [`GLOBAL_SCRATCH_WORDS`] words, 8-byte aligned: zeros, except word 16
/// (the min), which starts at `u32::MAX`.
pub unsafe fn global_atomics(params: ProbeParams) {
    let thread = linear_thread();
    let value = unsafe { params.input.read(thread) };
    let scratch = params.scratch.as_ptr();
    let mut slots = [0u64; PROBE_SLOTS];
    unsafe {
        slots[0] = device::global_atomic_add_u32(scratch.add((value % 16) as usize), 1) as u64;
        device::global_atomic_min_u32(scratch.add(16), value as u32);
        device::global_atomic_max_u32(scratch.add(17), value as u32);
        device::fence_block();
        slots[1] = (device::global_atomic_cas_u32(scratch.add(18), 0, thread as u32 + 1) == 0) as u64;
        device::fence_device();
        device::global_atomic_add_u64(scratch.add(20).cast::<u64>(), value);
        device::fence_system();
        write_slots(&params, &slots);
    }
}
