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

/// A positive number from the environment variable `name`, or `default`.
fn env_override<T: std::str::FromStr + Copy + PartialOrd + Default>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|&v| v > T::default()).unwrap_or(default)
}

fn blocks_per_sm() -> u32 {
    env_override(BLOCKS_PER_SM_ENV, BLOCKS_PER_SM)
}
/// Tiles a block of a later pass reduces, so that each pass shrinks the candidates a lot,
/// unless [`TILES_PER_BLOCK_LATER_ENV`] says otherwise.
const TILES_PER_BLOCK_LATER: u64 = 8;
/// Environment variable that overrides [`TILES_PER_BLOCK_LATER`] (for tuning sweeps).
pub const TILES_PER_BLOCK_LATER_ENV: &str = "GPU_SELECT_TOPK_TILES_PER_BLOCK_LATER";

fn tiles_per_block_later() -> u64 {
    env_override(TILES_PER_BLOCK_LATER_ENV, TILES_PER_BLOCK_LATER)
}

/// Environment variable that, set to `0`, keeps the pruning bound at the sample's `k`-th
/// best (no tight bound and no second chain), for measurements.
pub const TIGHT_BOUND_ENV: &str = "GPU_SELECT_BITONIC_TIGHT_BOUND";

/// The rank (0-based) in the sample's sorted top `k` of the tight pruning bound, or `None`
/// when it would be the sample's `k`-th best anyway.
///
/// The sample holds a share `sample_share` of the data, so about `μ = k·sample_share` of the
/// data's `k` best are in it; the bound is the sample's `j`-th best with `j + 1 = μ + 4√μ +
/// 4` (rounded up): at least `k` inputs lie inside it unless more than `j` of the data's
/// best fell into the sample, which for a random sample is a 4-sigma event. The bound lets
/// about `(j + 1) / sample_share` inputs through instead of `k / sample_share`: at k = 256
/// and a share of 1/128, 1 536 instead of 32 768. When fewer than `k` do come through (a
/// sample unlike the data), the result says so and the safe chain runs (`run_bitonic`).
fn tight_rank(k: u32, sample_share: f64) -> Option<u32> {
    let expected = k as f64 * sample_share;
    let inside = (expected + 4.0 * expected.sqrt() + 4.0).ceil() as u32;
    (inside < k).then(|| inside - 1)
}

fn tight_bound_enabled() -> bool {
    std::env::var(TIGHT_BOUND_ENV).map(|v| v != "0").unwrap_or(true)
}

/// One reduction pass of the bitonic top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pass {
    /// Inputs the pass may read (the data, or the previous pass's candidates).
    inputs: u64,
    /// Tiles of 2048 it reduces, `tile_stride` tiles apart from `first_tile` on.
    tiles: u64,
    tile_stride: u64,
    first_tile: u64,
    blocks: u32,
}

/// A chain of passes: the first over `tiles` tiles of the data (`tile_stride` apart from
/// `first_tile` on), each next one over the previous pass's `blocks · k` candidates, until
/// one block is left.
fn chain(n: u64, tiles: u64, tile_stride: u64, first_tile: u64, k: u32, multiprocessors: u32) -> Vec<Pass> {
    let most_blocks = (multiprocessors * blocks_per_sm()) as u64;
    let mut passes =
        vec![Pass { inputs: n, tiles, tile_stride, first_tile, blocks: tiles.min(most_blocks) as u32 }];
    while passes.last().unwrap().blocks > 1 {
        let inputs = passes.last().unwrap().blocks as u64 * k as u64;
        let tiles = inputs.div_ceil(TOPK_TILE);
        let blocks = tiles.div_ceil(tiles_per_block_later()).min(most_blocks) as u32;
        passes.push(Pass { inputs, tiles, tile_stride: 1, first_tile: 0, blocks });
    }
    passes
}

/// The plan of a bitonic top-k: an optional sample chain (whose result gives the pruning
/// bound) and the main chain over all the data, with the rank of the tight bound when the
/// sample gives one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct BitonicPlan {
    sample: Option<Vec<Pass>>,
    main: Vec<Pass>,
    /// The rank in the sample's top `k` of the first chain's bound ([`tight_rank`]); the
    /// safe chain with the sample's `k`-th best follows it, to run only when needed.
    tight_rank: Option<u32>,
}

impl BitonicPlan {
    pub(super) fn new(n: u64, k: u32, multiprocessors: u32) -> Self {
        let tiles = n.div_ceil(TOPK_TILE);
        // Sample tiles lie evenly over the full tiles, each in the middle of its stride, so
        // each holds 2048 real inputs and neither end of the data is always sampled (sorted
        // inputs keep their best there: a sample holding them gives a bound too tight).
        let sample = (tiles >= SAMPLE_MIN_TILES).then(|| {
            let full_tiles = n / TOPK_TILE;
            let sample_tiles = full_tiles / SAMPLE_EVERY_TILES;
            let stride = full_tiles / sample_tiles;
            chain(n, sample_tiles, stride, stride / 2, k, multiprocessors)
        });
        let tight_rank = match &sample {
            Some(sample) if tight_bound_enabled() => {
                tight_rank(k, (sample[0].tiles * TOPK_TILE) as f64 / n as f64)
            }
            _ => None,
        };
        Self { sample, main: chain(n, tiles, 1, 0, k, multiprocessors), tight_rank }
    }

    fn passes(&self) -> impl Iterator<Item = &Pass> {
        self.sample.iter().flatten().chain(&self.main)
    }
}

/// Where the bitonic top-k keeps its intermediate results in a workspace: two ping-pong
/// buffers of candidates (keys and indices), the sample's top k, and the counters of the
/// main passes' appended results (one set for the first main chain, one for the safe
/// chain). One function sizes and carves it, so the two cannot disagree.
#[derive(Clone, Copy, Debug)]
pub(super) struct BitonicWorkspace {
    keys: [usize; 2],
    indices: [usize; 2],
    sample_keys: usize,
    sample_indices: usize,
    counters: usize,
    counters_bytes: usize,
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
        let counters_bytes = 2 * plan.main.len() * 8;
        let counters = carver.region(counters_bytes);
        Self { keys, indices, sample_keys, sample_indices, counters, counters_bytes, bytes: carver.bytes() }
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
            8 => (K::TOPK_BITONIC_Q8, TopKLayout::<K::Bits>::new(8).bytes),
            16 => (K::TOPK_BITONIC_Q16, TopKLayout::<K::Bits>::new(16).bytes),
            _ => (K::TOPK_BITONIC_Q32, TopKLayout::<K::Bits>::new(32).bytes),
        };
        // A chain's last pass writes `final_keys`/`final_indices`; the others ping-pong
        // through the workspace. `prune` is the bound's key and index; `skip_unless_padding`
        // the index whose being real makes every block of the chain leave at once;
        // `counters`, when given, the (zeroed) counters through which each pass appends
        // only its real results and the next reads only those.
        let run_chain = |passes: &[Pass],
                         prune: Option<(u64, u64)>,
                         skip_unless_padding: GlobalPtr<u64>,
                         counters: Option<u64>,
                         final_keys: u64,
                         final_indices: u64| {
            let counter = |i: usize| {
                counters.map_or(GlobalPtr::null(), |base| GlobalPtr::from_address(base + i as u64 * 8))
            };
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
                    first_tile: pass.first_tile,
                    prune_key,
                    prune_index,
                    skip_unless_padding,
                    in_count: if i == 0 { GlobalPtr::null() } else { counter(i - 1) },
                    out_count: if i + 1 == passes.len() { GlobalPtr::null() } else { counter(i) },
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
        let (out_keys, out_indices) = (out.values.global_ptr().address(), out.indices.global_ptr().address());
        self.clear_on_device(at(layout.counters), layout.counters_bytes)?;
        let main_counters = Some(at(layout.counters));
        let safe_counters = Some(at(layout.counters) + plan.main.len() as u64 * 8);
        let Some(sample) = &plan.sample else {
            return run_chain(&plan.main, None, GlobalPtr::null(), main_counters, out_keys, out_indices);
        };
        // The sample's passes see no pruning, so their blocks' results are all real.
        run_chain(sample, None, GlobalPtr::null(), None, at(layout.sample_keys), at(layout.sample_indices))?;
        // The sample's best of rank r, as a bound: its key and its index.
        let sample_bound = |rank: u32| {
            (
                at(layout.sample_keys) + rank as u64 * size_of::<K>() as u64,
                at(layout.sample_indices) + rank as u64 * 8,
            )
        };
        // The sample's k-th best: at least k inputs (the sample's k best) lie inside it.
        let safe_bound = sample_bound(k - 1);
        match plan.tight_rank {
            None => run_chain(
                &plan.main,
                Some(safe_bound),
                GlobalPtr::null(),
                main_counters,
                out_keys,
                out_indices,
            ),
            Some(rank) => {
                let tight_bound = sample_bound(rank);
                run_chain(
                    &plan.main,
                    Some(tight_bound),
                    GlobalPtr::null(),
                    main_counters,
                    out_keys,
                    out_indices,
                )?;
                // The result's k-th index is padding exactly when fewer than k inputs lay
                // inside the tight bound; only then do the safe chain's blocks do anything.
                let kth_index = GlobalPtr::from_address(out_indices + (k as u64 - 1) * 8);
                run_chain(&plan.main, Some(safe_bound), kth_index, safe_counters, out_keys, out_indices)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_shrink_to_one_block_and_samples_are_full_tiles() {
        for (n, k) in [
            (1u64 << 28, 32u32),
            (1 << 28, 256),
            (1 << 28, 1024),
            (3000, 256),
            (2049, 1),
            (1 << 20, 100),
            (1 << 20, 1000),
            (1 << 21, 7),
        ] {
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
                let last_tile_end =
                    (first.first_tile + (first.tiles - 1) * first.tile_stride + 1) * TOPK_TILE;
                assert!(last_tile_end <= n, "sample tiles must be full: {first:?}");
                assert!(first.first_tile > 0 && first.first_tile < first.tile_stride, "{first:?}");
            }
        }
        assert!(BitonicPlan::new(1 << 20, 32, 132).sample.is_some());
        assert!(BitonicPlan::new(1 << 19, 32, 132).sample.is_none());
    }

    #[test]
    fn the_tight_bound_sits_between_the_expected_rank_and_k() {
        let share = 1.0 / 128.0;
        assert_eq!(tight_rank(1, share), None);
        assert_eq!(tight_rank(5, share), None);
        // μ = 0.25: 7 inside; μ = 2: 12; μ = 8: 24.
        assert_eq!(tight_rank(32, share), Some(6));
        assert_eq!(tight_rank(256, share), Some(11));
        assert_eq!(tight_rank(1024, share), Some(23));
        for k in 1..=1024 {
            if let Some(rank) = tight_rank(k, share) {
                assert!(rank < k - 1 && rank as f64 >= k as f64 * share, "k = {k}: {rank}");
            }
        }
        // Without a sample there is no tight bound.
        assert_eq!(BitonicPlan::new(1 << 19, 256, 132).tight_rank, None);
        if tight_bound_enabled() {
            assert_eq!(BitonicPlan::new(1 << 28, 256, 132).tight_rank, Some(11));
        }
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
            layout.counters,
        ];
        starts.sort_unstable();
        assert!(starts.iter().all(|start| start % WORKSPACE_ALIGN == 0));
        assert!(starts.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(layout.bytes >= layout.counters + layout.counters_bytes && layout.counters == starts[6]);
    }
}
