//! The real thing: NVVM intrinsics and PTX for `nvptx64-nvidia-cuda`.
//!
//! Warp-synchronous operations use LLVM intrinsics rather than inline assembly because
//! intrinsics are marked `convergent`, so LLVM never moves them across divergent control
//! flow; inline assembly carries no such marking (design.md §2). Only the `.sync` forms are
//! used: ptxas rejects the old ones for sm_70+.

use core::arch::asm;
use core::arch::nvptx;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

#[allow(improper_ctypes)]
unsafe extern "C" {
    #[link_name = "llvm.nvvm.read.ptx.sreg.laneid"]
    fn sreg_laneid() -> i32;
    #[link_name = "llvm.nvvm.read.ptx.sreg.lanemask.lt"]
    fn sreg_lanemask_lt() -> i32;
    #[link_name = "llvm.nvvm.bar.warp.sync"]
    fn bar_warp_sync(mask: i32);
    #[link_name = "llvm.nvvm.activemask"]
    fn activemask() -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn shfl_sync_idx_i32(mask: i32, value: i32, lane: i32, clamp: i32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.up.i32"]
    fn shfl_sync_up_i32(mask: i32, value: i32, delta: i32, clamp: i32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.down.i32"]
    fn shfl_sync_down_i32(mask: i32, value: i32, delta: i32, clamp: i32) -> i32;
    #[link_name = "llvm.nvvm.shfl.sync.bfly.i32"]
    fn shfl_sync_bfly_i32(mask: i32, value: i32, lane_mask: i32, clamp: i32) -> i32;
    #[link_name = "llvm.nvvm.vote.ballot.sync"]
    fn vote_ballot_sync(mask: i32, predicate: bool) -> i32;
    #[link_name = "llvm.nvvm.match.any.sync.i32"]
    fn match_any_sync_i32(mask: i32, value: i32) -> i32;
    #[link_name = "llvm.nvvm.barrier0.or"]
    fn barrier0_or(predicate: i32) -> i32;
    #[link_name = "llvm.fma.f32"]
    fn llvm_fma_f32(a: f32, b: f32, c: f32) -> f32;
    #[link_name = "llvm.sqrt.f32"]
    fn llvm_sqrt_f32(value: f32) -> f32;
}

/// The `c` operand of `shfl.sync` for idx, down and bfly: clamp at lane 31, whole warp.
const CLAMP_WHOLE_WARP: i32 = 0x1f;
/// The `c` operand for up: clamp at lane 0 (0x1f here would stop `up` from shifting).
const CLAMP_UP: i32 = 0;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // No formatting machinery on the device: stop the kernel; the host sees a launch error.
    unsafe { nvptx::trap() }
}

#[inline(always)]
pub fn thread_idx_x() -> u32 {
    unsafe { nvptx::_thread_idx_x() as u32 }
}
#[inline(always)]
pub fn block_dim_x() -> u32 {
    unsafe { nvptx::_block_dim_x() as u32 }
}
#[inline(always)]
pub fn block_idx_x() -> u32 {
    unsafe { nvptx::_block_idx_x() as u32 }
}
#[inline(always)]
pub fn block_idx_y() -> u32 {
    unsafe { nvptx::_block_idx_y() as u32 }
}
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    unsafe { nvptx::_grid_dim_x() as u32 }
}
#[inline(always)]
pub fn grid_dim_y() -> u32 {
    unsafe { nvptx::_grid_dim_y() as u32 }
}
#[inline(always)]
pub fn lane_id() -> u32 {
    unsafe { sreg_laneid() as u32 }
}
#[inline(always)]
pub fn lanemask_lt() -> u32 {
    unsafe { sreg_lanemask_lt() as u32 }
}
#[inline(always)]
pub unsafe fn sync_threads() {
    unsafe { nvptx::_syncthreads() }
}
#[inline(always)]
pub unsafe fn sync_threads_or(predicate: bool) -> bool {
    unsafe { barrier0_or(predicate as i32) != 0 }
}
#[inline(always)]
pub unsafe fn sync_warp(mask: u32) {
    unsafe { bar_warp_sync(mask as i32) }
}
#[inline(always)]
pub fn active_mask() -> u32 {
    unsafe { activemask() as u32 }
}
#[inline(always)]
pub unsafe fn shfl_idx_u32(mask: u32, value: u32, src_lane: u32) -> u32 {
    unsafe { shfl_sync_idx_i32(mask as i32, value as i32, src_lane as i32, CLAMP_WHOLE_WARP) as u32 }
}
#[inline(always)]
pub unsafe fn shfl_up_u32(mask: u32, value: u32, delta: u32) -> u32 {
    unsafe { shfl_sync_up_i32(mask as i32, value as i32, delta as i32, CLAMP_UP) as u32 }
}
#[inline(always)]
pub unsafe fn shfl_down_u32(mask: u32, value: u32, delta: u32) -> u32 {
    unsafe { shfl_sync_down_i32(mask as i32, value as i32, delta as i32, CLAMP_WHOLE_WARP) as u32 }
}
#[inline(always)]
pub unsafe fn shfl_xor_u32(mask: u32, value: u32, lane_mask: u32) -> u32 {
    unsafe { shfl_sync_bfly_i32(mask as i32, value as i32, lane_mask as i32, CLAMP_WHOLE_WARP) as u32 }
}
#[inline(always)]
pub unsafe fn ballot(mask: u32, predicate: bool) -> u32 {
    unsafe { vote_ballot_sync(mask as i32, predicate) as u32 }
}
#[inline(always)]
pub unsafe fn match_any_u32(mask: u32, value: u32) -> u32 {
    unsafe { match_any_sync_i32(mask as i32, value as i32) as u32 }
}

/// Alignment the kernel promises for dynamic shared memory (what `SharedLayout` assumes).
#[repr(C, align(16))]
struct SharedAlign([u8; 16]);

#[inline(always)]
pub fn shared_base() -> *mut u8 {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<SharedAlign>().cast::<u8>()
}

/// No bounds checks on the device: the emulator runs the same indices with checks.
#[inline(always)]
pub fn check_shared_index(_index: usize, _len: usize) {}

#[inline(always)]
pub unsafe fn shared_load<T: Copy>(address: *const T) -> T {
    unsafe { address.read() }
}
#[inline(always)]
pub unsafe fn shared_store<T: Copy>(address: *mut T, value: T) {
    unsafe { address.write(value) }
}
#[inline(always)]
pub unsafe fn shared_atomic_add_u32(address: *mut u32, value: u32) -> u32 {
    unsafe { AtomicU32::from_ptr(address) }.fetch_add(value, Relaxed)
}
#[inline(always)]
pub unsafe fn shared_atomic_min_u32(address: *mut u32, value: u32) -> u32 {
    unsafe { AtomicU32::from_ptr(address) }.fetch_min(value, Relaxed)
}
#[inline(always)]
pub unsafe fn shared_atomic_max_u32(address: *mut u32, value: u32) -> u32 {
    unsafe { AtomicU32::from_ptr(address) }.fetch_max(value, Relaxed)
}
#[inline(always)]
pub unsafe fn shared_atomic_cas_u32(address: *mut u32, expected: u32, new: u32) -> u32 {
    match unsafe { AtomicU32::from_ptr(address) }.compare_exchange(expected, new, Relaxed, Relaxed) {
        Ok(old) | Err(old) => old,
    }
}

#[inline(always)]
pub fn opaque_u64(value: u64) -> u64 {
    let out: u64;
    // Not `pure`: LLVM may then neither move it out of a loop nor merge two of them.
    unsafe {
        asm!("mov.b64 {out}, {value};", out = out(reg64) out, value = in(reg64) value, options(nomem, nostack))
    };
    out
}
#[inline(always)]
pub fn compiler_barrier() {
    // An empty asm that may touch memory: nothing is emitted, nothing moves across it.
    unsafe { asm!("", options(nostack, preserves_flags)) }
}
#[inline(always)]
pub fn fence_block() {
    unsafe { asm!("fence.acq_rel.cta;") }
}
#[inline(always)]
pub fn fence_device() {
    unsafe { asm!("fence.acq_rel.gpu;") }
}
#[inline(always)]
pub fn fence_system() {
    unsafe { asm!("fence.sc.sys;") }
}
#[inline(always)]
pub fn sqrt_f32(value: f32) -> f32 {
    // `llvm.sqrt.f32` is `sqrt.rn.f32` unless approximate square roots are asked for.
    unsafe { llvm_sqrt_f32(value) }
}
#[inline(always)]
pub fn fma_f32(a: f32, b: f32, c: f32) -> f32 {
    unsafe { llvm_fma_f32(a, b, c) }
}
#[inline(always)]
pub fn fma_up_f32(a: f32, b: f32, c: f32) -> f32 {
    let d: f32;
    unsafe {
        asm!(
            "fma.rp.f32 {d}, {a}, {b}, {c};",
            d = out(reg32) d,
            a = in(reg32) a,
            b = in(reg32) b,
            c = in(reg32) c,
            options(pure, nomem, nostack)
        )
    };
    d
}
#[inline(always)]
pub fn sqrt_up_f32(value: f32) -> f32 {
    let root: f32;
    unsafe {
        asm!("sqrt.rp.f32 {root}, {value};", root = out(reg32) root, value = in(reg32) value, options(pure, nomem, nostack))
    };
    root
}
// Each pair in one `asm!`, so that nothing comes between the instruction that writes the
// carry flag and the one that reads it.
#[inline(always)]
pub fn add_if_at_least_u32(count: u32, value: u32, bound: u32) -> u32 {
    let sum: u32;
    unsafe {
        asm!(
            "add.cc.u32 {total}, {value}, {negated};",
            "addc.u32 {sum}, {count}, 0;",
            total = out(reg32) _,
            sum = out(reg32) sum,
            value = in(reg32) value,
            negated = in(reg32) bound.wrapping_neg(),
            count = in(reg32) count,
            options(pure, nomem, nostack)
        )
    };
    sum
}
#[inline(always)]
pub fn add_if_at_least_u64(count: u32, value: u64, bound: u64) -> u32 {
    let sum: u32;
    unsafe {
        asm!(
            "add.cc.u64 {total}, {value}, {negated};",
            "addc.u32 {sum}, {count}, 0;",
            total = out(reg64) _,
            sum = out(reg32) sum,
            value = in(reg64) value,
            negated = in(reg64) bound.wrapping_neg(),
            count = in(reg32) count,
            options(pure, nomem, nostack)
        )
    };
    sum
}
#[inline(always)]
pub fn add_if_max_u32(count: u32, value: u32) -> u32 {
    let sum: u32;
    unsafe {
        asm!(
            "add.cc.u32 {next}, {value}, 1;",
            "addc.u32 {sum}, {count}, 0;",
            next = out(reg32) _,
            sum = out(reg32) sum,
            value = in(reg32) value,
            count = in(reg32) count,
            options(pure, nomem, nostack)
        )
    };
    sum
}
#[inline(always)]
pub fn add_if_max_u64(count: u32, value: u64) -> u32 {
    let sum: u32;
    unsafe {
        asm!(
            "add.cc.u64 {next}, {value}, 1;",
            "addc.u32 {sum}, {count}, 0;",
            next = out(reg64) _,
            sum = out(reg32) sum,
            value = in(reg64) value,
            count = in(reg32) count,
            options(pure, nomem, nostack)
        )
    };
    sum
}
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    let value: f32;
    unsafe {
        asm!("cvt.f32.f16 {value}, {bits};", value = out(reg32) value, bits = in(reg16) bits, options(pure, nomem, nostack))
    };
    value
}
#[inline(always)]
pub fn f32_to_f16(value: f32) -> u16 {
    let bits: u16;
    unsafe {
        asm!("cvt.rn.f16.f32 {bits}, {value};", bits = out(reg16) bits, value = in(reg32) value, options(pure, nomem, nostack))
    };
    bits
}
#[inline(always)]
pub fn f32_to_bf16(value: f32) -> u16 {
    let bits: u16;
    unsafe {
        asm!("cvt.rn.bf16.f32 {bits}, {value};", bits = out(reg16) bits, value = in(reg32) value, options(pure, nomem, nostack))
    };
    bits
}
// Inline assembly so that LLVM neither splits it nor merges it with other loads (see the
// device layer's docs). `pure, readonly`: it reads memory no kernel thread writes. One
// macro for both cache operators (the template must be a literal).
macro_rules! load_global_v4_with {
    ($name:ident, $load:literal) => {
        #[inline(always)]
        pub unsafe fn $name(address: *const u32) -> [u32; 4] {
            let (a, b, c, d): (u32, u32, u32, u32);
            unsafe {
                asm!(
                    concat!("{{ .reg .u64 %gaddr; cvta.to.global.u64 %gaddr, {address}; ", $load, " {{{a}, {b}, {c}, {d}}}, [%gaddr]; }}"),
                    address = in(reg64) address,
                    a = out(reg32) a,
                    b = out(reg32) b,
                    c = out(reg32) c,
                    d = out(reg32) d,
                    options(pure, readonly, nostack)
                )
            };
            [a, b, c, d]
        }
    };
}
load_global_v4_with!(load_global_v4, "ld.global.v4.u32");
// The streaming cache operator: evict-first in L1 and L2.
load_global_v4_with!(load_global_v4_evict_first, "ld.global.cs.v4.u32");
// Asynchronous copies into shared memory (`cp.async`): inline assembly with a memory
// clobber (no `nomem`), so that LLVM keeps every shared access of the thread on its side of
// the copy, the commit and the wait. Shared addresses as 32-bit offsets of the shared
// window, as NVIDIA's own headers pass them.
macro_rules! copy_async_with {
    ($name:ident, $copy:literal, $bytes:literal) => {
        #[inline(always)]
        pub unsafe fn $name(destination: *mut u32, source: *const u32, source_bytes: u32) {
            unsafe {
                asm!(
                    concat!(
                        "{{ .reg .u64 %sa; .reg .u32 %s; .reg .u64 %ga; ",
                        "cvta.to.shared.u64 %sa, {destination}; cvt.u32.u64 %s, %sa; ",
                        "cvta.to.global.u64 %ga, {source}; ",
                        $copy,
                        " [%s], [%ga], ",
                        $bytes,
                        ", {source_bytes}; }}"
                    ),
                    destination = in(reg64) destination,
                    source = in(reg64) source,
                    source_bytes = in(reg32) source_bytes,
                    options(nostack)
                )
            }
        }
    };
}
// 16 bytes through L2 only (`.cg`, the one cache operator for 16); 4 bytes through L1 too
// (`.ca`, the only one for 4).
copy_async_with!(copy_async_16, "cp.async.cg.shared.global", 16);
copy_async_with!(copy_async_4, "cp.async.ca.shared.global", 4);
#[inline(always)]
pub unsafe fn copy_async_commit() {
    unsafe { asm!("cp.async.commit_group;", options(nostack)) }
}
#[inline(always)]
pub unsafe fn copy_async_wait<const PENDING: u32>() {
    unsafe { asm!("cp.async.wait_group {pending};", pending = const PENDING, options(nostack)) }
}
#[inline(always)]
pub fn f32_to_tf32(value: f32) -> u32 {
    let bits: u32;
    unsafe {
        asm!("cvt.rna.tf32.f32 {bits}, {value};", bits = out(reg32) bits, value = in(reg32) value, options(pure, nomem, nostack))
    };
    bits
}
// Inline assembly, not an intrinsic: LLVM's `llvm.nvvm.mma.*` return a struct, which Rust's
// `extern "C"` cannot declare. Not `pure`: LLVM must not move it across the caller's
// control flow (design.md §2), and every lane of the warp must reach it together.
#[inline(always)]
pub unsafe fn mma_tf32_m16n8k8(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    let d: [f32; 4];
    let (mut d0, mut d1, mut d2, mut d3) = (c[0], c[1], c[2], c[3]);
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};",
            d0 = inout(reg32) d0,
            d1 = inout(reg32) d1,
            d2 = inout(reg32) d2,
            d3 = inout(reg32) d3,
            a0 = in(reg32) a[0],
            a1 = in(reg32) a[1],
            a2 = in(reg32) a[2],
            a3 = in(reg32) a[3],
            b0 = in(reg32) b[0],
            b1 = in(reg32) b[1],
            options(nostack)
        );
    }
    d = [d0, d1, d2, d3];
    d
}
