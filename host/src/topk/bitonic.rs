//! The bitonic top-k's host side: the chain of reduction passes and its workspace.

use gpu_select_kernels::entry::KernelId;
use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::bitonic::{TOPK_THREADS, TOPK_TILE, TopKLayout, TopKParams, registers_for_k};

#[cfg(test)]
use super::WORKSPACE_ALIGN;
use super::{TopK, WorkspaceCarver};
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::{Order, SelectKey};

/// One sample tile per this many tiles of data feeds the pruning bound (0.8 % of the data).
const SAMPLE_EVERY_TILES: u64 = 128;
/// Inputs of fewer tiles than this are not sampled: the sample chain would cost more than
/// it saves.
const SAMPLE_MIN_TILES: u64 = 4 * SAMPLE_EVERY_TILES;

/// Blocks per multiprocessor of the first pass, unless [`BLOCKS_PER_SM_ENV`] says otherwise.
const BLOCKS_PER_SM: u32 = 4;
/// Environment variable that overrides [`BLOCKS_PER_SM`] (for tuning sweeps).
pub const BLOCKS_PER_SM_ENV: &str = "GPU_SELECT_TOPK_BLOCKS_PER_SM";

fn blocks_per_sm() -> u32 {
    std::env::var(BLOCKS_PER_SM_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&b| b > 0)
        .unwrap_or(BLOCKS_PER_SM)
}
/// Tiles a block of a later pass reduces, so that each pass shrinks the candidates a lot.
const TILES_PER_BLOCK_LATER: u64 = 8;

/// One reduction pass of the bitonic top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pass {
    /// Inputs the pass may read (the data, or the previous pass's candidates).
    inputs: u64,
    /// Tiles of 2048 it reduces, `tile_stride` tiles apart.
    tiles: u64,
    tile_stride: u64,
    blocks: u32,
}

/// A chain of passes: the first over `tiles` tiles of the data (`tile_stride` apart), each
/// next one over the previous pass's `blocks · k` candidates, until one block is left.
fn chain(n: u64, tiles: u64, tile_stride: u64, k: u32, multiprocessors: u32) -> Vec<Pass> {
    let most_blocks = (multiprocessors * blocks_per_sm()) as u64;
    let mut passes = vec![Pass { inputs: n, tiles, tile_stride, blocks: tiles.min(most_blocks) as u32 }];
    while passes.last().unwrap().blocks > 1 {
        let inputs = passes.last().unwrap().blocks as u64 * k as u64;
        let tiles = inputs.div_ceil(TOPK_TILE);
        let blocks = tiles.div_ceil(TILES_PER_BLOCK_LATER).min(most_blocks) as u32;
        passes.push(Pass { inputs, tiles, tile_stride: 1, blocks });
    }
    passes
}

/// The plan of a bitonic top-k: an optional sample chain (whose result is the pruning
/// bound) and the main chain over all the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct BitonicPlan {
    sample: Option<Vec<Pass>>,
    main: Vec<Pass>,
}

impl BitonicPlan {
    pub(super) fn new(n: u64, k: u32, multiprocessors: u32) -> Self {
        let tiles = n.div_ceil(TOPK_TILE);
        // Sample tiles lie evenly over the full tiles, so each holds 2048 real inputs.
        let sample = (tiles >= SAMPLE_MIN_TILES).then(|| {
            let full_tiles = n / TOPK_TILE;
            let sample_tiles = full_tiles / SAMPLE_EVERY_TILES;
            chain(n, sample_tiles, full_tiles / sample_tiles, k, multiprocessors)
        });
        Self { sample, main: chain(n, tiles, 1, k, multiprocessors) }
    }

    fn passes(&self) -> impl Iterator<Item = &Pass> {
        self.sample.iter().flatten().chain(&self.main)
    }
}

/// Where the bitonic top-k keeps its intermediate results in a workspace: two ping-pong
/// buffers of candidates (keys and indices) and the sample's top k. One function sizes and
/// carves it, so the two cannot disagree.
#[derive(Clone, Copy, Debug)]
pub(super) struct BitonicWorkspace {
    keys: [usize; 2],
    indices: [usize; 2],
    sample_keys: usize,
    sample_indices: usize,
    pub(super) bytes: usize,
}

impl BitonicWorkspace {
    pub(super) fn new(plan: &BitonicPlan, k: u32, key_bytes: usize) -> Self {
        let most = plan.passes().map(|pass| pass.blocks as usize * k as usize).max().unwrap_or(0);
        let mut carver = WorkspaceCarver::default();
        let keys = [carver.region(most * key_bytes), carver.region(most * key_bytes)];
        let indices = [carver.region(most * 8), carver.region(most * 8)];
        let sample_keys = carver.region(k as usize * key_bytes);
        let sample_indices = carver.region(k as usize * 8);
        Self { keys, indices, sample_keys, sample_indices, bytes: carver.bytes() }
    }
}

impl Gpu {
    pub(super) fn run_bitonic<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: u32,
        order: Order,
        plan: &BitonicPlan,
        workspace_base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let layout = BitonicWorkspace::new(plan, k, size_of::<K>());
        let at = |offset: usize| workspace_base + offset as u64;
        let (kernel, shared_bytes): (KernelId<TopKParams<K>>, usize) = match registers_for_k(k) {
            1 => (K::TOPK_BITONIC_Q1, TopKLayout::<K::Bits>::new(1).bytes),
            2 => (K::TOPK_BITONIC_Q2, TopKLayout::<K::Bits>::new(2).bytes),
            4 => (K::TOPK_BITONIC_Q4, TopKLayout::<K::Bits>::new(4).bytes),
            _ => (K::TOPK_BITONIC_Q8, TopKLayout::<K::Bits>::new(8).bytes),
        };
        // A chain's last pass writes `final_keys`/`final_indices`; the others ping-pong
        // through the workspace.
        let run_chain = |passes: &[Pass], prune: Option<(u64, u64)>, final_keys: u64, final_indices: u64| {
            let mut keys_in = data.global_ptr();
            let mut indices_in = GlobalPtr::null();
            for (i, pass) in passes.iter().enumerate() {
                let (keys_out, indices_out) = if i + 1 == passes.len() {
                    (final_keys, final_indices)
                } else {
                    (at(layout.keys[i % 2]), at(layout.indices[i % 2]))
                };
                let (prune_key, prune_index) = match (i, prune) {
                    (0, Some((key, index))) => (GlobalPtr::from_address(key), GlobalPtr::from_address(index)),
                    _ => (GlobalPtr::null(), GlobalPtr::null()),
                };
                let params = TopKParams {
                    keys_in,
                    indices_in,
                    original_keys: data.global_ptr(),
                    keys_out: GlobalPtr::from_address(keys_out),
                    indices_out: GlobalPtr::from_address(indices_out),
                    len: pass.inputs,
                    tiles: pass.tiles,
                    tile_stride: pass.tile_stride,
                    prune_key,
                    prune_index,
                    k,
                    order: order.to_raw(),
                };
                let shape = LaunchShape { grid: (pass.blocks, 1), block_threads: TOPK_THREADS, shared_bytes };
                self.launch(kernel, shape, params)?;
                keys_in = GlobalPtr::from_address(keys_out);
                indices_in = GlobalPtr::from_address(indices_out);
            }
            Ok::<(), Error>(())
        };
        let prune = match &plan.sample {
            Some(sample) => {
                run_chain(sample, None, at(layout.sample_keys), at(layout.sample_indices))?;
                // The sample's k-th best: the last of its sorted top k.
                let last = (k as u64 - 1) * size_of::<K>() as u64;
                Some((at(layout.sample_keys) + last, at(layout.sample_indices) + (k as u64 - 1) * 8))
            }
            None => None,
        };
        run_chain(&plan.main, prune, out.values.global_ptr().address(), out.indices.global_ptr().address())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_shrink_to_one_block_and_samples_are_full_tiles() {
        for (n, k) in
            [(1u64 << 28, 32u32), (1 << 28, 256), (3000, 256), (2049, 1), (1 << 20, 100), (1 << 21, 7)]
        {
            let plan = BitonicPlan::new(n, k, 132);
            for chain in plan.sample.iter().chain(std::iter::once(&plan.main)) {
                assert_eq!(chain.last().unwrap().blocks, 1, "{n} {k}");
                assert!(chain.len() <= 4, "{n} {k}: {chain:?}");
                for pass in chain {
                    assert!(pass.blocks as u64 <= pass.tiles && pass.inputs >= k as u64, "{n} {k}: {pass:?}");
                }
            }
            if let Some(sample) = &plan.sample {
                let first = sample[0];
                let last_tile_end = ((first.tiles - 1) * first.tile_stride + 1) * TOPK_TILE;
                assert!(last_tile_end <= n, "sample tiles must be full: {first:?}");
            }
        }
        assert!(BitonicPlan::new(1 << 20, 32, 132).sample.is_some());
        assert!(BitonicPlan::new(1 << 19, 32, 132).sample.is_none());
    }

    #[test]
    fn workspace_regions_are_aligned_and_disjoint() {
        let plan = BitonicPlan::new(1 << 24, 100, 132);
        let layout = BitonicWorkspace::new(&plan, 100, 4);
        let mut starts = [
            layout.keys[0],
            layout.keys[1],
            layout.indices[0],
            layout.indices[1],
            layout.sample_keys,
            layout.sample_indices,
        ];
        starts.sort_unstable();
        assert!(starts.iter().all(|start| start % WORKSPACE_ALIGN == 0));
        assert!(starts.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(layout.bytes >= starts[5] + 100 * 8);
    }
}
