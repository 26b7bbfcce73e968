//! The host emulator: runs the crate's kernel functions on the CPU.
//!
//! Each GPU thread of a block is a coroutine (its own stack, switched in user space); a
//! block's threads take turns on one host thread, and blocks run one after another, in an
//! order of their own for each launch (a GPU keeps no order among them). A
//! thread runs until it waits at a barrier or warp collective, then the next one runs.
//! Barriers, warp collectives, dynamic shared memory and atomics are emulated, and so the
//! test suite runs *the same kernel code* that the PTX is built from, on machines without a
//! GPU (CI). It is a correctness tool, not a fast path.
//!
//! Beyond running the code, the emulator reports what would be undefined behaviour or a
//! hang on a GPU, and fails the launch with a message naming the thread:
//!
//! * a thread that returns while others wait at [`sync_threads`](super::sync_threads), or
//!   reaches a barrier after another thread returned;
//! * a warp collective whose mask omits the caller, names lanes that do not exist or have
//!   returned, or that some lane of its mask never joins;
//! * a deadlock: a round in which every live thread waits and none can move (found at once,
//!   with what each waits for);
//! * a read of dynamic shared memory that nothing wrote, or an access past the bytes the
//!   launch asked for or past a region;
//! * two threads of different warps touching the same 2 bytes of shared memory between two
//!   barriers when one of them writes it (and the same inside a warp with no warp collective
//!   between);
//! * a panic in kernel code (integer overflow in index arithmetic, for instance).
//!
//! ```
//! use gpu_select_kernels::device::{self, emulator};
//!
//! let mut out = vec![0u32; 64];
//! let out_address = out.as_mut_ptr() as usize;
//! let config = emulator::LaunchConfig { grid: (2, 1), block_threads: 32, shared_bytes: 0 };
//! emulator::launch(&config, &|| {
//!     let i = device::global_thread_idx() as usize;
//!     // Each lane adds the value of its xor-1 neighbour.
//!     let neighbour = unsafe { device::shfl_xor_u32(device::FULL_WARP, i as u32, 1) };
//!     unsafe { (out_address as *mut u32).add(i).write(i as u32 + neighbour) };
//! })
//! .unwrap();
//! assert_eq!(out[0], 1);
//! assert_eq!(out[33], 65);
//! ```

extern crate std;

pub(crate) mod backend;
mod block;
#[cfg(test)]
mod tests;

use std::cell::{Cell, RefCell};
use std::format;
use std::string::{String, ToString};
use std::sync::Arc;
use std::vec::Vec;

use block::{Abort, BlockState};
use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

/// The most threads a block may have (as on every CUDA GPU).
pub const MAX_BLOCK_THREADS: u32 = 1024;

/// The most dynamic shared memory a block may ask for: 227 KiB, the sm_90 opt-in limit.
pub const MAX_SHARED_BYTES: usize = 227 * 1024;

/// Stack of each emulated thread. Kernel code keeps small register arrays on the stack.
const THREAD_STACK_BYTES: usize = 256 * 1024;

std::thread_local! {
    /// The running emulated thread's way back to the scheduler.
    static YIELDER: Cell<*const Yielder<(), ()>> = const { Cell::new(core::ptr::null()) };
    /// Stacks of finished emulated threads, reused by the next block.
    static STACKS: RefCell<Vec<DefaultStack>> = const { RefCell::new(Vec::new()) };
    /// Launches made on this host thread (each takes its blocks in its own order).
    static LAUNCHES: Cell<u64> = const { Cell::new(0) };
}

/// Gives the host thread to the block's next emulated thread; returns when the scheduler
/// comes back to this one. Called by threads that wait (barriers, warp collectives).
fn wait_turn() {
    let yielder = YIELDER.with(Cell::get);
    assert!(!yielder.is_null(), "an emulated thread waited outside a launch");
    let context = backend::save();
    // The yielder belongs to this thread's coroutine, which is suspended (not dropped)
    // until the scheduler resumes it here.
    unsafe { (*yielder).suspend(()) };
    YIELDER.with(|cell| cell.set(yielder));
    backend::restore(context);
}

/// The shape of an emulated launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x and y.
    pub grid: (u32, u32),
    /// Threads per block (one-dimensional blocks).
    pub block_threads: u32,
    /// Bytes of dynamic shared memory per block.
    pub shared_bytes: usize,
}

/// Why an emulated launch failed: what a GPU would have done wrong, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmulatorError {
    /// The first failure seen, naming the block and thread.
    pub message: String,
}

impl core::fmt::Display for EmulatorError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EmulatorError {}

/// Runs `kernel` once per thread of the grid described by `config`, with the device layer
/// answering from the emulated block. Blocks run one at a time, each launch in its own
/// order (an affine permutation of the blocks, drawn per launch).
pub fn launch(config: &LaunchConfig, kernel: &(dyn Fn() + Sync)) -> Result<(), EmulatorError> {
    let error = |message: String| Err(EmulatorError { message });
    if config.block_threads == 0 || config.block_threads > MAX_BLOCK_THREADS {
        return error(format!(
            "block of {} threads: a block has 1 to {MAX_BLOCK_THREADS} threads",
            config.block_threads
        ));
    }
    if config.grid.0 == 0 || config.grid.1 == 0 {
        return error(format!("empty grid {:?}", config.grid));
    }
    if config.shared_bytes > MAX_SHARED_BYTES {
        return error(format!(
            "{} bytes of dynamic shared memory asked for; a block may have at most {MAX_SHARED_BYTES}",
            config.shared_bytes
        ));
    }
    // A GPU runs blocks in no set order, and kernels that lean on one (reading what an
    // earlier block wrote in the same launch) should fail here too: each launch takes its
    // blocks in another order, the same from run to run.
    let order = BlockOrder::new(config, LAUNCHES.with(|count| count.replace(count.get() + 1)));
    for i in 0..order.blocks {
        let block = order.block(i);
        run_block(
            config,
            ((block % config.grid.0 as u64) as u32, (block / config.grid.0 as u64) as u32),
            kernel,
        )?;
    }
    Ok(())
}

/// The order of a launch's blocks: `i ↦ (a·i + c) mod blocks`, a permutation for `a`
/// coprime with the block count, with `a` and `c` drawn from the launch's shape and the
/// host thread's launch count (so each test, on its own thread, sees the same orders on
/// every run). `a = blocks − 1, c = blocks − 1` is the last block first; `a = 1, c = 0`
/// the grid's order.
struct BlockOrder {
    blocks: u64,
    multiplier: u64,
    offset: u64,
}

impl BlockOrder {
    fn new(config: &LaunchConfig, launch: u64) -> Self {
        let blocks = config.grid.0 as u64 * config.grid.1 as u64;
        let mut state = BLOCK_ORDER_SEED
            ^ launch.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (blocks << 20)
            ^ config.block_threads as u64;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        // Every few launches the plain reverse order, the order most likely to break a
        // kernel that assumes the grid's.
        if launch.is_multiple_of(4) || blocks < 3 {
            return Self { blocks, multiplier: blocks.saturating_sub(1).max(1), offset: blocks - 1 };
        }
        let mut multiplier = next() % blocks;
        while gcd(multiplier, blocks) != 1 {
            multiplier = next() % blocks;
        }
        Self { blocks, multiplier, offset: next() % blocks }
    }

    /// The `i`-th block to run, as a linear index (x first).
    fn block(&self, i: u64) -> u64 {
        ((self.multiplier as u128 * i as u128 + self.offset as u128) % self.blocks as u128) as u64
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The seed of [`BlockOrder`].
const BLOCK_ORDER_SEED: u64 = 0x0b10_c0de_5eed_1234;

type Thread = Coroutine<(), (), (), DefaultStack>;

/// Runs one block: its threads in turns (round robin) until all have returned. A round in
/// which no thread changes the block's waiting state is a deadlock: the block fails, and
/// the waiting threads stop at their next turn.
fn run_block(
    config: &LaunchConfig,
    block_idx: (u32, u32),
    kernel: &(dyn Fn() + Sync),
) -> Result<(), EmulatorError> {
    let block = Arc::new(BlockState::new(config, block_idx));
    // The coroutines borrow `kernel` for no longer than this function: they all finish
    // (or are dropped, unwinding their stacks) before it returns.
    let kernel: &'static (dyn Fn() + Sync) = unsafe { core::mem::transmute(kernel) };
    let mut threads: Vec<Option<Thread>> = (0..config.block_threads)
        .map(|thread_idx| {
            let block = Arc::clone(&block);
            let stack = STACKS.with(|stacks| stacks.borrow_mut().pop()).unwrap_or_else(|| {
                DefaultStack::new(THREAD_STACK_BYTES).expect("the emulator could not map a thread stack")
            });
            Some(Coroutine::with_stack(stack, move |yielder: &Yielder<(), ()>, ()| {
                YIELDER.with(|cell| cell.set(yielder));
                backend::enter(Arc::clone(&block), thread_idx);
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(kernel));
                match outcome {
                    Ok(()) => block.thread_returned(thread_idx),
                    Err(payload) if payload.is::<Abort>() => {}
                    Err(payload) => {
                        let reason = panic_message(payload.as_ref());
                        block.record_failure(format!("thread {thread_idx} panicked: {reason}"));
                    }
                }
                backend::leave();
            }))
        })
        .collect();
    loop {
        let progress = block.progress();
        let mut waiting = 0;
        for slot in threads.iter_mut() {
            let Some(thread) = slot else { continue };
            match thread.resume(()) {
                CoroutineResult::Yield(()) => waiting += 1,
                CoroutineResult::Return(()) => {
                    let thread = slot.take().expect("a thread that just ran");
                    STACKS.with(|stacks| stacks.borrow_mut().push(thread.into_stack()));
                }
            }
        }
        if waiting == 0 {
            break;
        }
        if block.progress() == progress && block.failure().is_none() {
            block.record_failure(block.deadlock_report());
        }
    }
    YIELDER.with(|cell| cell.set(core::ptr::null()));
    match block.failure() {
        None => Ok(()),
        Some(message) => {
            Err(EmulatorError { message: format!("block ({}, {}): {message}", block_idx.0, block_idx.1) })
        }
    }
}

fn panic_message(payload: &(dyn core::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text.to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}
