//! The per-thread top-k's host side (kernel docs: `gpu_select_kernels::topk::heap`): one
//! launch of per-thread heaps, then the bitonic top-k's reduction passes over their
//! contents.

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::heap::{
    HeapLayout, HeapParams, MAX_HEAP_K, MAX_HEAP_THREADS, heap_bytes_per_thread,
};

use super::bitonic::{Chain, ChainBuffers, ChainInput, LastPass, Pass, PassBudget, candidate_passes};
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::results::TopK;
use crate::workspace::WorkspaceCarver;
use crate::{Order, SelectKey};

/// Most threads a multiprocessor runs at once (every GPU since Volta).
const THREADS_PER_MULTIPROCESSOR: u64 = 2048;
/// A thread should read at least this many times `k` inputs: with fewer its heap keeps
/// most of what it reads and the reduction passes do the work.
const INPUTS_PER_HEAP_SLOT: u64 = 4;

/// The shape of a per-thread top-k.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeapPlan {
    threads: u32,
    blocks: u32,
    /// The reduction of the `blocks · threads · k` heap slots.
    passes: Vec<Pass>,
}

impl HeapPlan {
    /// The plan for `n` keys ranked in `rank_bytes`: as many threads as the heaps let fit in a
    /// multiprocessor's shared memory (`shared_bytes`: what one block may have, about a
    /// multiprocessor's on Hopper), at most enough that each reads
    /// [`INPUTS_PER_HEAP_SLOT`]` · k` inputs. Errors when `k` is over [`MAX_HEAP_K`], when
    /// a warp's heaps do not fit, or for 2^32 keys or more (the reduction's limit).
    pub(crate) fn new(
        n: u64,
        k: u64,
        rank_bytes: usize,
        budget: PassBudget,
        shared_bytes: usize,
    ) -> Result<Self> {
        if k > MAX_HEAP_K as u64 {
            return Err(Error::k_out_of_range(
                k as usize,
                1,
                MAX_HEAP_K as usize,
                format!("the per-thread top-k takes k ≤ {MAX_HEAP_K}"),
            ));
        }
        if n >= 1 << 32 {
            return Err(Error::invalid(format!("{n} keys: the per-thread top-k takes fewer than 2^32 keys")));
        }
        let fitting = (shared_bytes / heap_bytes_per_thread(k as usize, rank_bytes)) as u64 / 32 * 32;
        if fitting == 0 {
            return Err(Error::invalid(format!(
                "k = {k}: a warp's heaps of {rank_bytes}-byte ranks need more than the {shared_bytes} bytes of shared \
                 memory a block may have"
            )));
        }
        let per_multiprocessor = fitting.min(THREADS_PER_MULTIPROCESSOR);
        let threads = per_multiprocessor.min(MAX_HEAP_THREADS as u64);
        let blocks = (per_multiprocessor / threads * budget.multiprocessors as u64)
            .min(n.div_ceil(threads * INPUTS_PER_HEAP_SLOT * k))
            .max(1);
        let slots = blocks * threads * k;
        // The heaps are full (each thread reads at least 4k inputs).
        let passes = candidate_passes(slots, k as u32, budget, LastPass::Split);
        Ok(Self { threads: threads as u32, blocks: blocks as u32, passes })
    }

    fn slots(&self, k: u32) -> usize {
        self.blocks as usize * self.threads as usize * k as usize
    }
}

/// Where the per-thread top-k keeps its state: the heaps' contents (keys and indices) and
/// the reduction's two ping-pong buffers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeapWorkspace {
    slot_keys: usize,
    slot_indices: usize,
    between: ChainBuffers,
    pub(crate) bytes: usize,
}

impl HeapWorkspace {
    pub(crate) fn new(plan: &HeapPlan, k: u32, key_bytes: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        let slots = plan.slots(k);
        let slot_keys = carver.region(slots * key_bytes);
        let slot_indices = carver.region(slots * 8);
        let between = ChainBuffers::carve(&mut carver, &plan.passes, k, key_bytes);
        Self { slot_keys, slot_indices, between, bytes: carver.bytes() }
    }
}

impl Gpu {
    /// Queues the per-thread top-k: the heaps, then their reduction into `out` (sorted).
    pub(crate) fn run_heap<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: u32,
        order: Order,
        plan: &HeapPlan,
        workspace_base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let layout = HeapWorkspace::new(plan, k, size_of::<K>());
        let at = |offset: usize| workspace_base + offset as u64;
        let params = HeapParams {
            data: data.global_ptr(),
            len: data.len() as u64,
            keys_out: GlobalPtr::from_address(at(layout.slot_keys)),
            indices_out: GlobalPtr::from_address(at(layout.slot_indices)),
            k,
            order: order.to_raw(),
        };
        let shape = LaunchShape {
            grid: (plan.blocks, 1),
            block_threads: plan.threads,
            shared_bytes: HeapLayout::<K::Bits>::new(k as usize, plan.threads as usize).bytes,
        };
        self.launch(K::TOPK_HEAP, shape, params)?;
        let slots =
            ChainInput { keys: params.keys_out, indices: params.indices_out, count: GlobalPtr::null() };
        let between = layout.between.at(workspace_base);
        let output = (out.values.global_ptr().address(), out.indices.global_ptr().address());
        self.run_chain(data, order, between, Chain::over(&plan.passes, k, slots), output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100_SHARED: usize = 227 * 1024;

    #[test]
    fn plans_fill_shared_memory_and_give_each_thread_enough_inputs() {
        // k = 32, f32: 256 bytes a thread, 887 fit, so 3 blocks of 256 per multiprocessor.
        let plan = HeapPlan::new(1 << 28, 32, 4, PassBudget::h100(), H100_SHARED).unwrap();
        assert_eq!((plan.threads, plan.blocks), (256, 3 * 132));
        // k = 512, f64: 6 KB a thread, one warp per multiprocessor.
        let plan = HeapPlan::new(1 << 28, 512, 8, PassBudget::h100(), H100_SHARED).unwrap();
        assert_eq!((plan.threads, plan.blocks), (32, 132));
        // Small inputs: fewer blocks, so that each thread reads 4k inputs.
        let plan = HeapPlan::new(10_000, 8, 4, PassBudget::h100(), H100_SHARED).unwrap();
        assert_eq!((plan.threads, plan.blocks), (256, 2));
        // The reduction ends in one block.
        assert_eq!(plan.passes.last().unwrap().blocks, 1);
    }

    #[test]
    fn shapes_it_does_not_take_are_errors() {
        assert!(HeapPlan::new(1 << 20, MAX_HEAP_K as u64 + 1, 4, PassBudget::h100(), H100_SHARED).is_err());
        assert!(HeapPlan::new(1 << 32, 8, 4, PassBudget::h100(), H100_SHARED).is_err());
        // An A100-sized block: a warp's heaps of 512 f64 keys (192 KB) do not fit.
        assert!(
            HeapPlan::new(1 << 20, 512, 8, PassBudget::new(&crate::Tuning::default(), 108), 163 * 1024)
                .is_err()
        );
    }
}
