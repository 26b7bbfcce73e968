//! The device layer's functions as the emulator serves them: each reads the running emulated
//! thread's identity (block, thread, barrier count) from thread-local storage, which the
//! scheduler swaps whenever it switches threads.

extern crate std;

use std::cell::RefCell;
use std::format;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::block::{Access, BlockState};

struct ThreadContext {
    block: Arc<BlockState>,
    thread: u32,
    /// Block barriers this thread has passed: two accesses with the same count are not
    /// ordered by a barrier.
    barriers_passed: u32,
}

std::thread_local! {
    static CONTEXT: RefCell<Option<ThreadContext>> = const { RefCell::new(None) };
}

pub(super) fn enter(block: Arc<BlockState>, thread: u32) {
    CONTEXT.with(|context| {
        *context.borrow_mut() = Some(ThreadContext { block, thread, barriers_passed: 0 });
    });
}

pub(super) fn leave() {
    CONTEXT.with(|context| *context.borrow_mut() = None);
}

/// The calling emulated thread's identity, taken out of the host thread while it is
/// switched out (the block's other threads run on the same host thread).
pub(super) struct SavedContext(Option<ThreadContext>);

pub(super) fn save() -> SavedContext {
    SavedContext(CONTEXT.with(|context| context.borrow_mut().take()))
}

pub(super) fn restore(saved: SavedContext) {
    CONTEXT.with(|context| *context.borrow_mut() = saved.0);
}

/// Runs `f` with the calling thread's context; outside an emulated launch there is none.
fn with<R>(f: impl FnOnce(&ThreadContext) -> R) -> R {
    CONTEXT.with(|context| {
        let context = context.borrow();
        let context = context.as_ref().expect(
            "a device-layer function was called outside a kernel launch (use the emulator's `launch`)",
        );
        f(context)
    })
}

fn block_and_thread() -> (Arc<BlockState>, u32) {
    with(|context| (Arc::clone(&context.block), context.thread))
}

pub fn thread_idx_x() -> u32 {
    with(|context| context.thread)
}
pub fn block_dim_x() -> u32 {
    with(|context| context.block.threads)
}
pub fn block_idx_x() -> u32 {
    with(|context| context.block.block_idx.0)
}
pub fn block_idx_y() -> u32 {
    with(|context| context.block.block_idx.1)
}
pub fn grid_dim_x() -> u32 {
    with(|context| context.block.grid.0)
}
pub fn grid_dim_y() -> u32 {
    with(|context| context.block.grid.1)
}
pub fn lane_id() -> u32 {
    thread_idx_x() % 32
}
pub fn lanemask_lt() -> u32 {
    (1u32 << lane_id()) - 1
}

pub unsafe fn sync_threads() {
    unsafe { sync_threads_or(false) };
}

pub unsafe fn sync_threads_or(predicate: bool) -> bool {
    // The context is not borrowed while waiting: the other threads of the block run on
    // this host thread meanwhile and swap it.
    let (block, thread) = block_and_thread();
    let any = block.sync_threads(thread, predicate);
    CONTEXT.with(|context| {
        if let Some(context) = context.borrow_mut().as_mut() {
            context.barriers_passed = context.barriers_passed.wrapping_add(1);
        }
    });
    any
}

fn exchange(mask: u32, value: u64) -> [u64; 32] {
    let (block, thread) = block_and_thread();
    block.exchange(thread, mask, value)
}

pub unsafe fn sync_warp(mask: u32) {
    exchange(mask, 0);
}

pub fn active_mask() -> u32 {
    let (block, thread) = block_and_thread();
    block.warp(thread).live_lanes()
}

/// Fails the launch when a shuffle reads a lane outside `mask` (undefined on a GPU).
fn source_lane(mask: u32, source: u32) -> usize {
    if mask & (1 << source) == 0 {
        let (block, thread) = block_and_thread();
        block
            .fail(format!("thread {thread}: shuffle reads lane {source}, which is not in mask {mask:#010x}"));
    }
    source as usize
}

pub unsafe fn shfl_idx_u32(mask: u32, value: u32, src_lane: u32) -> u32 {
    let values = exchange(mask, value as u64);
    values[source_lane(mask, src_lane % 32)] as u32
}

pub unsafe fn shfl_up_u32(mask: u32, value: u32, delta: u32) -> u32 {
    let values = exchange(mask, value as u64);
    let lane = lane_id();
    if lane < delta { value } else { values[source_lane(mask, lane - delta)] as u32 }
}

pub unsafe fn shfl_down_u32(mask: u32, value: u32, delta: u32) -> u32 {
    let values = exchange(mask, value as u64);
    let source = lane_id() + delta;
    if source > 31 { value } else { values[source_lane(mask, source)] as u32 }
}

pub unsafe fn shfl_xor_u32(mask: u32, value: u32, lane_mask: u32) -> u32 {
    let values = exchange(mask, value as u64);
    values[source_lane(mask, (lane_id() ^ lane_mask) % 32)] as u32
}

pub unsafe fn ballot(mask: u32, predicate: bool) -> u32 {
    let values = exchange(mask, predicate as u64);
    (0..32)
        .filter(|&lane| mask & (1 << lane) != 0 && values[lane] != 0)
        .fold(0, |bits, lane| bits | 1 << lane)
}

pub unsafe fn match_any_u32(mask: u32, value: u32) -> u32 {
    let values = exchange(mask, value as u64);
    (0..32)
        .filter(|&lane| mask & (1 << lane) != 0 && values[lane] as u32 == value)
        .fold(0, |bits, lane| bits | 1 << lane)
}

pub fn shared_base() -> *mut u8 {
    with(|context| context.block.shared.base())
}

pub fn check_shared_index(index: usize, len: usize) {
    if index >= len {
        let (block, thread) = block_and_thread();
        block.fail(format!(
            "thread {thread}: shared-memory index {index} is out of bounds of a region of {len}"
        ));
    }
}

/// Checks an access of `T` at `address` against the shadow; stops the thread on failure.
fn check_shared<T>(address: *const T, access: Access) {
    let (block, thread, barriers_passed) =
        with(|context| (Arc::clone(&context.block), context.thread, context.barriers_passed));
    if let Err(message) =
        block.shared.check(&block, address as usize, size_of::<T>(), access, thread, barriers_passed)
    {
        block.fail(format!("thread {thread}: {message}"));
    }
}

pub unsafe fn shared_load<T: Copy>(address: *const T) -> T {
    check_shared(address, Access::Read);
    unsafe { address.read_volatile() }
}

pub unsafe fn shared_store<T: Copy>(address: *mut T, value: T) {
    check_shared(address, Access::Write);
    unsafe { address.write_volatile(value) }
}

fn shared_atomic(address: *mut u32) -> &'static AtomicU32 {
    check_shared(address, Access::Atomic);
    // The block's shared memory outlives every thread of the block.
    unsafe { AtomicU32::from_ptr(address) }
}

pub unsafe fn shared_atomic_add_u32(address: *mut u32, value: u32) -> u32 {
    shared_atomic(address).fetch_add(value, Ordering::SeqCst)
}

pub unsafe fn shared_atomic_min_u32(address: *mut u32, value: u32) -> u32 {
    shared_atomic(address).fetch_min(value, Ordering::SeqCst)
}

pub unsafe fn shared_atomic_max_u32(address: *mut u32, value: u32) -> u32 {
    shared_atomic(address).fetch_max(value, Ordering::SeqCst)
}

pub unsafe fn shared_atomic_cas_u32(address: *mut u32, expected: u32, new: u32) -> u32 {
    match shared_atomic(address).compare_exchange(expected, new, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(old) | Err(old) => old,
    }
}

pub fn opaque_u64(value: u64) -> u64 {
    std::hint::black_box(value)
}
pub fn compiler_barrier() {
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}
pub fn fence_block() {
    std::sync::atomic::fence(Ordering::SeqCst);
}
pub fn fence_device() {
    std::sync::atomic::fence(Ordering::SeqCst);
}
pub fn fence_system() {
    std::sync::atomic::fence(Ordering::SeqCst);
}
pub fn sqrt_f32(value: f32) -> f32 {
    value.sqrt()
}
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}
/// `value` (exact or within an `f64` rounding of the exact result) as an `f32` at least
/// the exact result: rounded up, and one step further where it lands on an `f32`.
fn round_up_to_f32(value: f64) -> f32 {
    let nearest = value as f32;
    if value.is_nan() || nearest == f32::INFINITY || (nearest as f64) > value {
        nearest
    } else {
        nearest.next_up()
    }
}
pub fn fma_up_f32(a: f32, b: f32, c: f32) -> f32 {
    round_up_to_f32((a as f64).mul_add(b as f64, c as f64))
}
pub fn sqrt_up_f32(value: f32) -> f32 {
    round_up_to_f32((value as f64).sqrt())
}
// As the carry on the GPU: a bound of 0 adds nothing.
pub fn add_if_at_least_u32(count: u32, value: u32, bound: u32) -> u32 {
    count + (bound != 0 && value >= bound) as u32
}
pub fn add_if_at_least_u64(count: u32, value: u64, bound: u64) -> u32 {
    count + (bound != 0 && value >= bound) as u32
}
pub fn add_if_max_u32(count: u32, value: u32) -> u32 {
    count + (value == u32::MAX) as u32
}
pub fn add_if_max_u64(count: u32, value: u64) -> u32 {
    count + (value == u64::MAX) as u32
}
pub fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}
pub fn f32_to_f16(value: f32) -> u16 {
    half::f16::from_f32(value).to_bits()
}
pub fn f32_to_bf16(value: f32) -> u16 {
    half::bf16::from_f32(value).to_bits()
}
pub unsafe fn load_global_v4(address: *const u32) -> [u32; 4] {
    debug_assert!(address.addr().is_multiple_of(16), "a 16-byte load from an unaligned address");
    unsafe { (address as *const [u32; 4]).read() }
}
pub unsafe fn load_global_v4_evict_first(address: *const u32) -> [u32; 4] {
    unsafe { load_global_v4(address) }
}
/// The copy done at once (a copy in flight may complete at any time before its wait), each
/// word a checked shared write; the words past `source_bytes` zeros, as the GPU fills them.
unsafe fn copy_async(destination: *mut u32, source: *const u32, words: usize, source_bytes: u32) {
    for i in 0..words {
        let value = if (i as u32) * 4 < source_bytes { unsafe { source.add(i).read() } } else { 0 };
        unsafe { shared_store(destination.add(i), value) };
    }
}
pub unsafe fn copy_async_16(destination: *mut u32, source: *const u32, source_bytes: u32) {
    debug_assert!(
        destination.addr().is_multiple_of(16) && source.addr().is_multiple_of(16),
        "a 16-byte asynchronous copy between unaligned addresses"
    );
    debug_assert!(source_bytes <= 16 && source_bytes.is_multiple_of(4));
    unsafe { copy_async(destination, source, 4, source_bytes) }
}
pub unsafe fn copy_async_4(destination: *mut u32, source: *const u32, source_bytes: u32) {
    debug_assert!(source_bytes == 0 || source_bytes == 4);
    unsafe { copy_async(destination, source, 1, source_bytes) }
}
pub unsafe fn copy_async_commit() {}
pub unsafe fn copy_async_wait<const PENDING: u32>() {}
pub fn f32_to_tf32(value: f32) -> u32 {
    let bits = value.to_bits();
    if !value.is_finite() {
        return bits;
    }
    // Round to nearest, ties away from zero (`.rna`), at the 13th bit: a carry into the
    // exponent is the right rounding (up to infinity past the largest finite value).
    (bits + 0x1000) & !0x1fff
}
/// The warp's `mma.sync.m16n8k8` on TF32: every lane hands in its fragments (PTX ISA's
/// layouts: lane `4g + t` holds A's rows `g` and `g + 8` at columns `t` and `t + 4`, B's
/// column `g` at rows `t` and `t + 4`, and C's rows `g`, `g + 8` at columns `2t`, `2t + 1`),
/// and gets its four results: each sum in `f64` from the inputs' TF32 bits (the low 13 bits
/// ignored, as the hardware does), rounded once to `f32`.
pub unsafe fn mma_tf32_m16n8k8(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    let pair = |low: u32, high: u32| low as u64 | (high as u64) << 32;
    let (a01, a23, b01) = (
        exchange(u32::MAX, pair(a[0], a[1])),
        exchange(u32::MAX, pair(a[2], a[3])),
        exchange(u32::MAX, pair(b[0], b[1])),
    );
    let tf32 = |bits: u64| f32::from_bits(bits as u32 & !0x1fff) as f64;
    // A's (row, k) and B's (k, column) from the lanes that hold them.
    let a_at = |row: usize, k: usize| {
        let lane = (row % 8) * 4 + k % 4;
        let word = if k < 4 { a01[lane] } else { a23[lane] };
        tf32(if row < 8 { word } else { word >> 32 })
    };
    let b_at = |k: usize, column: usize| {
        let word = b01[column * 4 + k % 4];
        tf32(if k < 4 { word } else { word >> 32 })
    };
    let lane = lane_id() as usize;
    let (g, t) = (lane / 4, lane % 4);
    let mut d = [0.0f32; 4];
    for (i, out) in d.iter_mut().enumerate() {
        let (row, column) = (g + 8 * (i / 2), 2 * t + i % 2);
        let sum: f64 = (0..8).map(|k| a_at(row, k) * b_at(k, column)).sum();
        *out = (sum + c[i] as f64) as f32;
    }
    d
}
