//! The device layer: everything a kernel asks of the hardware.
//!
//! This module is the only place in the crate that looks at `target_arch`. On `nvptx64` each
//! function compiles to one PTX instruction or LLVM NVVM intrinsic; on the host the same
//! functions are served by the [`emulator`], which runs every GPU thread of a block as a host
//! thread. Code above this layer is written once and runs on both.
//!
//! # Who must call together
//!
//! GPU collectives are undefined behaviour when not every required thread takes part. Each
//! function says which threads must call it *together* (converged, with the same arguments
//! where noted):
//!
//! * **block-wide**: every thread of the block ([`sync_threads`]);
//! * **mask-wide**: every lane named in `mask`, and each of them must pass the same `mask`
//!   (the warp shuffles, votes and [`sync_warp`]);
//! * **any thread**: no cooperation needed (indices, atomics, fences, shared loads/stores).
//!
//! The emulator checks these rules and fails the launch with a message instead of hanging:
//! a lane missing from a collective, a thread that exits while others wait at a barrier,
//! reads of shared memory nothing wrote, and conflicting shared-memory accesses between two
//! barriers.

mod shared;

pub use shared::{SharedLayout, SharedRegion, SharedSlice};

#[cfg(target_arch = "nvptx64")]
mod nvptx;
#[cfg(target_arch = "nvptx64")]
use nvptx as backend;

#[cfg(not(target_arch = "nvptx64"))]
pub mod emulator;
#[cfg(not(target_arch = "nvptx64"))]
use emulator::backend;

/// Threads in a warp on every NVIDIA GPU this crate targets.
pub const WARP_SIZE: u32 = 32;

/// A mask naming all 32 lanes of a warp.
pub const FULL_WARP: u32 = u32::MAX;

/// Expands the kernel table of [`crate::entry`]: for every row, an `extern "gpu-kernel"`
/// entry point on `nvptx64` (named `<name>_<key>` for keyed rows) and, on every target, a
/// [`crate::entry::KernelId`] that names the PTX symbol and holds the body for the emulator.
///
/// This is the one item whose *expansion* depends on `target_arch`; it lives here so that
/// the rest of the crate never needs to.
#[macro_export]
#[doc(hidden)]
macro_rules! __kernel_table {
    (
        keyed for [$($key:ident),* $(,)?] $keyed:tt
        plain { $( $(#[$plain_doc:meta])* $PLAIN:ident = $plain_name:ident($plain_params:ty) => $plain_body:ident; )* }
    ) => {
        $( $crate::__kernel_table!(@key $key $keyed); )*
        $(
            #[cfg(target_arch = "nvptx64")]
            #[unsafe(no_mangle)]
            #[allow(improper_gpu_kernel_arg)]
            pub unsafe extern "gpu-kernel" fn $plain_name(params: $plain_params) {
                unsafe { $plain_body(params) }
            }
            $(#[$plain_doc])*
            pub const $PLAIN: KernelId<$plain_params> =
                KernelId { name: stringify!($plain_name), body: $plain_body };
        )*
        /// Names of the kernels without a key type parameter.
        pub const PLAIN_KERNEL_NAMES: &[&str] = &[$(stringify!($plain_name)),*];
    };
    (@key $key:ident { $( $(#[$doc:meta])* $CONST:ident = $name:ident($params:ident) => $body:ident; )* }) => {
        $( $crate::__keyed_entry!($name, $key, $params, $body); )*
        impl KernelKey for $key {
            $(
                $(#[$doc])*
                const $CONST: KernelId<$params<$key>> = KernelId {
                    name: concat!(stringify!($name), "_", stringify!($key)),
                    body: $body::<$key>,
                };
            )*
            const KERNEL_NAMES: &'static [&'static str] =
                &[$(concat!(stringify!($name), "_", stringify!($key))),*];
        }
    };
}

/// One keyed entry point of [`__kernel_table`], `<name>_<key>`, on `nvptx64`.
///
/// Making the name takes `${concat}` (the nightly feature `macro_metavar_expr_concat`),
/// which only the kernel build may use; the host build (stable Rust) needs no entry points,
/// so there this macro expands to nothing and its nightly syntax is never parsed.
#[cfg(target_arch = "nvptx64")]
#[macro_export]
#[doc(hidden)]
macro_rules! __keyed_entry {
    ($name:ident, $key:ident, $params:ident, $body:ident) => {
        #[unsafe(no_mangle)]
        // The parameter struct is `#[repr(C)]`; tests/ptx_checks.rs checks that each
        // entry's `.param` is exactly `size_of` the struct, so host and device agree.
        #[allow(improper_gpu_kernel_arg)]
        pub unsafe extern "gpu-kernel" fn ${concat($name, _, $key)}(params: $params<$key>) {
            unsafe { $body::<$key>(params) }
        }
    };
}

/// On the host, keyed rows have no entry point (see the `nvptx64` form).
#[cfg(not(target_arch = "nvptx64"))]
#[macro_export]
#[doc(hidden)]
macro_rules! __keyed_entry {
    ($name:ident, $key:ident, $params:ident, $body:ident) => {};
}

/// Index of this thread within its block, x dimension. *Any thread.*
#[inline(always)]
pub fn thread_idx_x() -> u32 {
    backend::thread_idx_x()
}

/// Threads per block, x dimension. *Any thread.*
#[inline(always)]
pub fn block_dim_x() -> u32 {
    backend::block_dim_x()
}

/// Index of this block within the grid, x dimension. *Any thread.*
#[inline(always)]
pub fn block_idx_x() -> u32 {
    backend::block_idx_x()
}

/// Index of this block within the grid, y dimension. *Any thread.*
#[inline(always)]
pub fn block_idx_y() -> u32 {
    backend::block_idx_y()
}

/// Blocks in the grid, x dimension. *Any thread.*
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    backend::grid_dim_x()
}

/// Blocks in the grid, y dimension. *Any thread.*
#[inline(always)]
pub fn grid_dim_y() -> u32 {
    backend::grid_dim_y()
}

/// This thread's lane within its warp, `0..32`. *Any thread.*
///
/// Blocks here are one-dimensional, so lane = `thread_idx_x() % 32`.
#[inline(always)]
pub fn lane_id() -> u32 {
    backend::lane_id()
}

/// This thread's warp within its block. *Any thread.*
#[inline(always)]
pub fn warp_id() -> u32 {
    thread_idx_x() / WARP_SIZE
}

/// Mask of the lanes below this one (`(1 << lane) - 1`). *Any thread.*
#[inline(always)]
pub fn lanemask_lt() -> u32 {
    backend::lanemask_lt()
}

/// Global thread index in a one-dimensional grid, as `u64` so that grids over 2^32
/// elements index correctly. *Any thread.*
#[inline(always)]
pub fn global_thread_idx() -> u64 {
    block_idx_x() as u64 * block_dim_x() as u64 + thread_idx_x() as u64
}

/// Block barrier (`bar.sync 0`): waits until every thread of the block arrives, and makes
/// shared- and global-memory writes before it visible to the block after it.
///
/// # Safety
/// *Block-wide*: every thread of the block must reach the same barrier; a thread that has
/// returned from the kernel does not count (the emulator reports it as an error).
#[inline(always)]
pub unsafe fn sync_threads() {
    unsafe { backend::sync_threads() }
}

/// Block barrier that also reduces (`bar.red.or.pred`): as [`sync_threads`], and returns
/// whether `predicate` was true in any thread of the block.
///
/// # Safety
/// *Block-wide*, as [`sync_threads`].
#[inline(always)]
pub unsafe fn sync_threads_or(predicate: bool) -> bool {
    unsafe { backend::sync_threads_or(predicate) }
}

/// Warp barrier (`bar.warp.sync mask`), also a memory fence among the lanes of `mask`.
///
/// # Safety
/// *Mask-wide*: every lane in `mask` must call it with the same `mask`.
#[inline(always)]
pub unsafe fn sync_warp(mask: u32) {
    unsafe { backend::sync_warp(mask) }
}

/// Mask of the lanes executing this call together (`activemask`). *Any thread.*
///
/// The emulator answers with every lane of the warp that has not exited, since its lanes
/// are not scheduled in lock step; use it only where that over-approximation is right.
#[inline(always)]
pub fn active_mask() -> u32 {
    backend::active_mask()
}

/// `value` from lane `src_lane` (`shfl.sync.idx.b32`).
///
/// # Safety
/// *Mask-wide* (`mask`), and `src_lane` must be in `mask`.
#[inline(always)]
pub unsafe fn shfl_idx_u32(mask: u32, value: u32, src_lane: u32) -> u32 {
    unsafe { backend::shfl_idx_u32(mask, value, src_lane) }
}

/// `value` from lane `lane - delta`, or this lane's own value when that is below 0
/// (`shfl.sync.up.b32`).
///
/// # Safety
/// *Mask-wide* (`mask`).
#[inline(always)]
pub unsafe fn shfl_up_u32(mask: u32, value: u32, delta: u32) -> u32 {
    unsafe { backend::shfl_up_u32(mask, value, delta) }
}

/// `value` from lane `lane + delta`, or this lane's own value when that is above 31
/// (`shfl.sync.down.b32`).
///
/// # Safety
/// *Mask-wide* (`mask`).
#[inline(always)]
pub unsafe fn shfl_down_u32(mask: u32, value: u32, delta: u32) -> u32 {
    unsafe { backend::shfl_down_u32(mask, value, delta) }
}

/// `value` from lane `lane ^ lane_mask` (`shfl.sync.bfly.b32`).
///
/// # Safety
/// *Mask-wide* (`mask`), and every partner lane must be in `mask`.
#[inline(always)]
pub unsafe fn shfl_xor_u32(mask: u32, value: u32, lane_mask: u32) -> u32 {
    unsafe { backend::shfl_xor_u32(mask, value, lane_mask) }
}

/// Splits a 64-bit value for two 32-bit shuffles and joins the halves again.
#[inline(always)]
fn shfl_u64(value: u64, shuffle: impl Fn(u32) -> u32) -> u64 {
    let low = shuffle(value as u32);
    let high = shuffle((value >> 32) as u32);
    ((high as u64) << 32) | low as u64
}

/// 64-bit [`shfl_idx_u32`] (two shuffles).
///
/// # Safety
/// As [`shfl_idx_u32`].
#[inline(always)]
pub unsafe fn shfl_idx_u64(mask: u32, value: u64, src_lane: u32) -> u64 {
    shfl_u64(value, |half| unsafe { shfl_idx_u32(mask, half, src_lane) })
}

/// 64-bit [`shfl_up_u32`] (two shuffles).
///
/// # Safety
/// As [`shfl_up_u32`].
#[inline(always)]
pub unsafe fn shfl_up_u64(mask: u32, value: u64, delta: u32) -> u64 {
    shfl_u64(value, |half| unsafe { shfl_up_u32(mask, half, delta) })
}

/// 64-bit [`shfl_down_u32`] (two shuffles).
///
/// # Safety
/// As [`shfl_down_u32`].
#[inline(always)]
pub unsafe fn shfl_down_u64(mask: u32, value: u64, delta: u32) -> u64 {
    shfl_u64(value, |half| unsafe { shfl_down_u32(mask, half, delta) })
}

/// 64-bit [`shfl_xor_u32`] (two shuffles).
///
/// # Safety
/// As [`shfl_xor_u32`].
#[inline(always)]
pub unsafe fn shfl_xor_u64(mask: u32, value: u64, lane_mask: u32) -> u64 {
    shfl_u64(value, |half| unsafe { shfl_xor_u32(mask, half, lane_mask) })
}

/// Mask of the lanes in `mask` whose `predicate` is true (`vote.sync.ballot.b32`).
///
/// # Safety
/// *Mask-wide* (`mask`).
#[inline(always)]
pub unsafe fn ballot(mask: u32, predicate: bool) -> u32 {
    unsafe { backend::ballot(mask, predicate) }
}

/// Whether `predicate` holds on every lane of `mask` (`vote.sync.all.pred`).
///
/// # Safety
/// *Mask-wide* (`mask`).
#[inline(always)]
pub unsafe fn all(mask: u32, predicate: bool) -> bool {
    unsafe { ballot(mask, predicate) == mask }
}

/// Whether `predicate` holds on some lane of `mask` (`vote.sync.any.pred`).
///
/// # Safety
/// *Mask-wide* (`mask`).
#[inline(always)]
pub unsafe fn any(mask: u32, predicate: bool) -> bool {
    unsafe { ballot(mask, predicate) != 0 }
}

/// Mask of the lanes in `mask` that hold the same `value` as this lane
/// (`match.any.sync.b32`, sm_70+).
///
/// # Safety
/// *Mask-wide* (`mask`).
#[inline(always)]
pub unsafe fn match_any_u32(mask: u32, value: u32) -> u32 {
    unsafe { backend::match_any_u32(mask, value) }
}

/// Dynamic shared memory of this block: its first byte, aligned to 16.
///
/// Use it through a [`SharedLayout`]: `region.bind()` gives a typed [`SharedSlice`].
#[inline(always)]
pub(crate) fn shared_base() -> *mut u8 {
    backend::shared_base()
}

/// Atomic add on a global-memory word; returns the old value. *Any thread.*
///
/// # Safety
/// `address` must be valid, aligned device memory for the whole launch.
#[inline(always)]
pub unsafe fn global_atomic_add_u32(address: *mut u32, value: u32) -> u32 {
    // Relaxed: LLVM drops stronger orderings of RMW atomics on NVPTX (design.md §2); callers
    // that need ordering add a fence.
    unsafe { core::sync::atomic::AtomicU32::from_ptr(address) }
        .fetch_add(value, core::sync::atomic::Ordering::Relaxed)
}

/// Atomic add on a global 64-bit word; returns the old value. *Any thread.*
///
/// # Safety
/// As [`global_atomic_add_u32`], 8-byte aligned.
#[inline(always)]
pub unsafe fn global_atomic_add_u64(address: *mut u64, value: u64) -> u64 {
    unsafe { core::sync::atomic::AtomicU64::from_ptr(address) }
        .fetch_add(value, core::sync::atomic::Ordering::Relaxed)
}

/// Atomic maximum on a global 64-bit word; returns the old value. *Any thread.*
///
/// # Safety
/// As [`global_atomic_add_u32`], 8-byte aligned.
#[inline(always)]
pub unsafe fn global_atomic_max_u64(address: *mut u64, value: u64) -> u64 {
    unsafe { core::sync::atomic::AtomicU64::from_ptr(address) }
        .fetch_max(value, core::sync::atomic::Ordering::Relaxed)
}

/// Atomic minimum on a global word; returns the old value. *Any thread.*
///
/// # Safety
/// As [`global_atomic_add_u32`].
#[inline(always)]
pub unsafe fn global_atomic_min_u32(address: *mut u32, value: u32) -> u32 {
    unsafe { core::sync::atomic::AtomicU32::from_ptr(address) }
        .fetch_min(value, core::sync::atomic::Ordering::Relaxed)
}

/// Atomic maximum on a global word; returns the old value. *Any thread.*
///
/// # Safety
/// As [`global_atomic_add_u32`].
#[inline(always)]
pub unsafe fn global_atomic_max_u32(address: *mut u32, value: u32) -> u32 {
    unsafe { core::sync::atomic::AtomicU32::from_ptr(address) }
        .fetch_max(value, core::sync::atomic::Ordering::Relaxed)
}

/// Atomic compare-and-swap on a global word; returns the old value (the swap happened when
/// it equals `expected`). *Any thread.*
///
/// # Safety
/// As [`global_atomic_add_u32`].
#[inline(always)]
pub unsafe fn global_atomic_cas_u32(address: *mut u32, expected: u32, new: u32) -> u32 {
    use core::sync::atomic::Ordering::Relaxed;
    match unsafe { core::sync::atomic::AtomicU32::from_ptr(address) }
        .compare_exchange(expected, new, Relaxed, Relaxed)
    {
        Ok(old) | Err(old) => old,
    }
}

/// Keeps the compiler from moving memory accesses across this point; emits nothing. Used
/// to keep a batch of loads together ahead of the code that looks at them (so they are in
/// flight at once), where the compiler would otherwise sink some below a branch.
/// *Any thread.*
#[inline(always)]
pub fn compiler_barrier() {
    backend::compiler_barrier()
}

/// `value`, through an instruction the compiler must keep where it is written and cannot
/// see through: work that depends on it stays after it (a loop's body keeps its own address
/// arithmetic, where hoisting the loop-invariant part would hold it in registers across the
/// whole loop). One `mov` on the GPU. *Any thread.*
#[inline(always)]
pub fn opaque_u64(value: u64) -> u64 {
    backend::opaque_u64(value)
}

/// Orders this thread's memory accesses as seen by its block (`fence.acq_rel.cta`).
/// *Any thread.*
#[inline(always)]
pub fn fence_block() {
    backend::fence_block()
}

/// Orders this thread's memory accesses as seen by the whole GPU (`fence.acq_rel.gpu`), e.g.
/// before an atomic that tells other blocks the data is ready. *Any thread.*
#[inline(always)]
pub fn fence_device() {
    backend::fence_device()
}

/// Orders this thread's memory accesses as seen by the host and other devices
/// (`fence.sc.sys`). *Any thread.*
#[inline(always)]
pub fn fence_system() {
    backend::fence_system()
}

/// The square root of `value`, correctly rounded (`sqrt.rn.f32`; the host's `f32::sqrt` in
/// the emulator, also correctly rounded, so both give the same bits). *Any thread.*
#[inline(always)]
pub fn sqrt_f32(value: f32) -> f32 {
    backend::sqrt_f32(value)
}

/// `a · b + c` rounded once (`fma.rn.f32`; the host's `f32::mul_add` in the emulator, also
/// rounded once, so both give the same bits). Rust never fuses a multiply and an add by
/// itself: where a kernel wants the GPU's fused multiply-add, it says so here. *Any thread.*
#[inline(always)]
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    backend::fma_f32(a, b, c)
}

/// `a · b + c` rounded once, upwards (`fma.rp.f32`): never less than the exact value, so
/// that a bound built from non-negative terms stays a bound. The emulator computes it in
/// `f64` and rounds up, one `f32` step further where the `f64` result lands on an `f32`
/// (never less than the GPU's, possibly one step more). *Any thread.*
#[inline(always)]
pub fn fma_up_f32(a: f32, b: f32, c: f32) -> f32 {
    backend::fma_up_f32(a, b, c)
}

/// `√value` rounded upwards (`sqrt.rp.f32`; the emulator as [`fma_up_f32`]). *Any thread.*
#[inline(always)]
pub fn sqrt_up_f32(value: f32) -> f32 {
    backend::sqrt_up_f32(value)
}

/// `count + 1` where `value ≥ bound`, else `count`, for `bound ≥ 1` (a `bound` of 0 adds
/// nothing): the carry of `value + (2^32 − bound)` added to the count (`add.cc.u32`,
/// `addc.u32`; two instructions where `count += (value >= bound) as u32` compiles to a
/// compare, an add and a predicated move). For counters a pass keeps per key. *Any thread.*
///
/// ```
/// use gpu_select_kernels::device::add_if_at_least_u32;
///
/// assert_eq!(add_if_at_least_u32(7, 4, 4), 8);
/// assert_eq!(add_if_at_least_u32(7, 3, 4), 7);
/// assert_eq!(add_if_at_least_u32(7, u32::MAX, 1), 8);
/// assert_eq!(add_if_at_least_u32(7, 5, 0), 7); // no carry: the caller counts these apart
/// ```
#[inline(always)]
pub fn add_if_at_least_u32(count: u32, value: u32, bound: u32) -> u32 {
    backend::add_if_at_least_u32(count, value, bound)
}

/// [`add_if_at_least_u32`] for 64-bit values (`add.cc.u64`, `addc.u32`). *Any thread.*
///
/// ```
/// use gpu_select_kernels::device::add_if_at_least_u64;
///
/// assert_eq!(add_if_at_least_u64(0, (1 << 40) + 1, 1 << 40), 1);
/// assert_eq!(add_if_at_least_u64(0, 1 << 40, (1 << 40) + 1), 0);
/// assert_eq!(add_if_at_least_u64(0, u64::MAX, 0), 0);
/// ```
#[inline(always)]
pub fn add_if_at_least_u64(count: u32, value: u64, bound: u64) -> u32 {
    backend::add_if_at_least_u64(count, value, bound)
}

/// `count + 1` where `value` is `u32::MAX`, else `count`: the carry of `value + 1` added to
/// the count (`add.cc.u32`, `addc.u32`). *Any thread.*
///
/// ```
/// use gpu_select_kernels::device::add_if_max_u32;
///
/// assert_eq!(add_if_max_u32(2, u32::MAX), 3);
/// assert_eq!(add_if_max_u32(2, u32::MAX - 1), 2);
/// ```
#[inline(always)]
pub fn add_if_max_u32(count: u32, value: u32) -> u32 {
    backend::add_if_max_u32(count, value)
}

/// [`add_if_max_u32`] for 64-bit values (`add.cc.u64`, `addc.u32`). *Any thread.*
///
/// ```
/// use gpu_select_kernels::device::add_if_max_u64;
///
/// assert_eq!(add_if_max_u64(0, u64::MAX), 1);
/// assert_eq!(add_if_max_u64(0, u32::MAX as u64), 0);
/// ```
#[inline(always)]
pub fn add_if_max_u64(count: u32, value: u64) -> u32 {
    backend::add_if_max_u64(count, value)
}

/// The binary16 value of `bits` as an `f32`, exactly (`cvt.f32.f16`; the `half` crate's
/// conversion in the emulator). *Any thread.*
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    backend::f16_to_f32(bits)
}

/// `value` rounded to the nearest binary16, ties to even, as its bits (`cvt.rn.f16.f32`;
/// the `half` crate's conversion in the emulator: the same bits for every number, a NaN for
/// a NaN). One instruction where the `half` crate's portable code takes dozens, which
/// spilled registers in a kernel that converts. *Any thread.*
#[inline(always)]
pub fn f32_to_f16(value: f32) -> u16 {
    backend::f32_to_f16(value)
}

/// `value` rounded to the nearest bfloat16, ties to even, as its bits (`cvt.rn.bf16.f32`;
/// the `half` crate's conversion in the emulator, as [`f32_to_f16`]). *Any thread.*
#[inline(always)]
pub fn f32_to_bf16(value: f32) -> u16 {
    backend::f32_to_bf16(value)
}

/// Sixteen bytes of global memory at `address` in one load (`ld.global.v4.u32`). *Any
/// thread.*
///
/// Inline assembly, not a plain vector read, so that LLVM keeps it one instruction: where a
/// kernel chose between a tile's vector loads and its scalar ones at run time, LLVM merged
/// the two branches into one set of scalar loads from selected addresses, which read a
/// warp's 512 bytes in four 4-byte passes at a 16-byte stride (H200, run 186: 74 % of
/// `multiselect_count_f32`'s sectors excessive, no vector load in its machine code). The
/// read-only path (`ld.global.nc`) measured 0.8 % slower on SampleSelect's median (run 187).
///
/// # Safety
/// `address` is 16-byte aligned and points into global memory that no thread writes while
/// the kernel runs.
#[inline(always)]
pub unsafe fn load_global_v4(address: *const u32) -> [u32; 4] {
    unsafe { backend::load_global_v4(address) }
}

/// [`load_global_v4`] as streamed data (`ld.global.cs.v4.u32`: "likely to be accessed
/// once", allocated evict-first in L1 and L2), so that a pass streaming its input through
/// L2 does not push out what it writes. *Any thread.*
///
/// # Safety
/// As [`load_global_v4`].
#[inline(always)]
pub unsafe fn load_global_v4_evict_first(address: *const u32) -> [u32; 4] {
    unsafe { backend::load_global_v4_evict_first(address) }
}

/// Starts a copy of 16 bytes from global memory at `source` to shared memory at
/// `destination` that passes through no register (`cp.async.cg.shared.global`, cached in L2
/// only), the bytes past `source_bytes` (0, 4, …, 16) written as zeros and not read: the
/// loads of a stage in flight while earlier stages are worked on, at no cost in registers.
/// The copy belongs to the thread's next group ([`copy_async_commit`]) and is complete after
/// a [`copy_async_wait`] that leaves fewer groups pending than were committed after it: then
/// for this thread, and for the others after a barrier that follows the wait. *Any thread.*
///
/// # Safety
/// Both addresses 16-byte aligned; `source`'s first `source_bytes` in global memory that no
/// thread writes while the kernel runs; `destination` in the block's shared memory, which no
/// thread reads or writes until the copy is complete.
#[inline(always)]
pub unsafe fn copy_async_16(destination: *mut u32, source: *const u32, source_bytes: u32) {
    unsafe { backend::copy_async_16(destination, source, source_bytes) }
}

/// [`copy_async_16`] of one word (`cp.async.ca.shared.global`, 4 bytes; `source_bytes` 0 or
/// 4), for data not laid out on 16 bytes. *Any thread.*
///
/// # Safety
/// As [`copy_async_16`], both addresses 4-byte aligned.
#[inline(always)]
pub unsafe fn copy_async_4(destination: *mut u32, source: *const u32, source_bytes: u32) {
    unsafe { backend::copy_async_4(destination, source, source_bytes) }
}

/// Closes the thread's group of asynchronous copies started since the last commit
/// (`cp.async.commit_group`; a group may be empty). *Any thread.*
///
/// # Safety
/// None beyond the copies' own.
#[inline(always)]
pub unsafe fn copy_async_commit() {
    unsafe { backend::copy_async_commit() }
}

/// Waits until at most `PENDING` of the thread's committed groups of asynchronous copies are
/// still in flight (`cp.async.wait_group`): every older group is complete. *Any thread.*
///
/// # Safety
/// None beyond the copies' own.
#[inline(always)]
pub unsafe fn copy_async_wait<const PENDING: u32>() {
    unsafe { backend::copy_async_wait::<PENDING>() }
}

/// `value` rounded to TF32 (10 mantissa bits, `f32`'s exponent), to nearest with ties away
/// from zero, as the bits of an `f32` whose low 13 bits are zero (`cvt.rna.tf32.f32`; the
/// same integer rounding in the emulator). Infinities and NaN stay. *Any thread.*
#[inline(always)]
pub fn f32_to_tf32(value: f32) -> u32 {
    backend::f32_to_tf32(value)
}

/// `D = A · B + C` of one warp on the tensor cores (`mma.sync.aligned.m16n8k8.row.col`,
/// TF32 inputs, `f32` accumulation): A is 16 × 8, B 8 × 8, C and D 16 × 8, each spread over
/// the warp's registers in PTX ISA's fragment layouts — lane `4g + t` holds `a = [A(g, t),
/// A(g + 8, t), A(g, t + 4), A(g + 8, t + 4)]`, `b = [B(t, g), B(t + 4, g)]` and `c = [C(g,
/// 2t), C(g, 2t + 1), C(g + 8, 2t), C(g + 8, 2t + 1)]`, and gets D's entries in C's places.
/// The inputs are TF32 bits ([`f32_to_tf32`]). The order and precision of the sum's additions
/// are the hardware's (NVIDIA documents `f32` accumulation, not its order); the emulator
/// sums in `f64` and rounds once.
///
/// # Safety
/// *Warp-wide*: all 32 lanes call it together, from uniform control flow.
#[inline(always)]
pub unsafe fn mma_tf32_m16n8k8(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    unsafe { backend::mma_tf32_m16n8k8(a, b, c) }
}
