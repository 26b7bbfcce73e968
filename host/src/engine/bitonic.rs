//! The bitonic top-k's host side: the chain of reduction passes and its workspace.

use gpu_select_kernels::entry::KernelId;
use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::bitonic::{
    FILTER_THREADS, FilterParams, MAX_REGISTER_K, TOPK_THREADS, TOPK_TILE, TopKLayout, TopKParams,
    WARP_INPUTS, registers_for_k,
};
use gpu_select_kernels::topk::fusion::Fusion;

use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::gpu::{Gpu, LaunchShape};
use crate::results::TopK;
use crate::tuning::Tuning;
use crate::workspace::WorkspaceCarver;
use crate::{Order, SelectKey};

/// One sample tile per this many tiles of data feeds the pruning bound (0.8 % of the data).
const SAMPLE_EVERY_TILES: u64 = 128;
/// Inputs of fewer tiles than this are not sampled: the sample chain would cost more than
/// it saves.
const SAMPLE_MIN_TILES: u64 = 4 * SAMPLE_EVERY_TILES;

/// What a chain of passes may launch: the device's multiprocessors and the handle's
/// [`Tuning`] values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PassBudget {
    pub multiprocessors: u32,
    /// [`Tuning::top_k_blocks_per_sm`].
    pub blocks_per_sm: u32,
    /// [`Tuning::top_k_tiles_per_block_later`]: tiles a block of a later pass reduces, so
    /// that each pass shrinks the candidates a lot.
    pub tiles_per_block_later: u64,
    /// [`Tuning::bitonic_tight_bound`].
    pub tight_bound: bool,
}

impl PassBudget {
    pub(crate) fn new(tuning: &Tuning, multiprocessors: u32) -> Self {
        PassBudget {
            multiprocessors,
            blocks_per_sm: tuning.top_k_blocks_per_sm.max(1),
            tiles_per_block_later: tuning.top_k_tiles_per_block_later.max(2),
            tight_bound: tuning.bitonic_tight_bound,
        }
    }

    /// The most blocks of one pass.
    fn most_blocks(&self) -> u64 {
        // In 64 bits: a tuning sweep may ask for any number of blocks per multiprocessor.
        self.multiprocessors as u64 * self.blocks_per_sm as u64
    }

    /// An H100's budget with the default tuning (for the plans' unit tests).
    #[cfg(test)]
    pub(crate) fn h100() -> Self {
        Self::new(&Tuning::default(), 132)
    }
}

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

/// One reduction pass of the bitonic top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pass {
    /// Inputs the pass may read (the data, or the previous pass's candidates).
    inputs: u64,
    /// Tiles of 2048 it reduces, laid over its inputs as `spread` says.
    tiles: u64,
    spread: TileSpread,
    pub(crate) blocks: u32,
}

/// Where a pass's tiles lie in its inputs (the kernel's `tile_stride`, `first_input` and
/// `warp_stride`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TileSpread {
    tile_stride: u64,
    first_input: u64,
    warp_stride: u64,
}

impl TileSpread {
    /// Tiles one after another from the first input.
    const CONTIGUOUS: Self = Self { tile_stride: 1, first_input: 0, warp_stride: WARP_INPUTS };

    /// A sample of one tile per `stride` tiles: each sample tile spreads its 8 warp pieces of
    /// 256 consecutive inputs evenly over its `stride` tiles, starting half a piece step in,
    /// so that the sample is close to a uniform one while each warp still reads 1 KB in one
    /// go, and holds neither end of the data (sorted inputs keep their best there: a sample
    /// holding them gives a bound too tight). The step is an odd number of pieces: a power
    /// of two sends every warp of a block to the same memory partition.
    fn sample(stride: u64) -> Self {
        let odd_pieces = if stride.is_multiple_of(2) { stride - 1 } else { stride.max(3) - 2 };
        let warp_stride = WARP_INPUTS * odd_pieces;
        Self { tile_stride: stride, first_input: WARP_INPUTS * (odd_pieces / 2 + 1), warp_stride }
    }

    /// One past the last input that `tiles` tiles of this spread read.
    #[cfg(test)]
    fn end(&self, tiles: u64) -> u64 {
        let last_tile_start = self.first_input + (tiles - 1) * self.tile_stride * TOPK_TILE;
        last_tile_start + (TOPK_TILE / WARP_INPUTS - 1) * self.warp_stride + WARP_INPUTS
    }
}

/// A chain of passes: the first over `tiles` tiles of the data (laid as `spread` says),
/// each next one over the previous pass's `blocks · k` candidates, until one block is left.
fn chain(n: u64, tiles: u64, spread: TileSpread, k: u32, budget: PassBudget, last: LastPass) -> Vec<Pass> {
    let first = Pass { inputs: n, tiles, spread, blocks: tiles.min(budget.most_blocks()) as u32 };
    let mut passes = vec![first];
    if first.blocks > 1 {
        passes.extend(candidate_passes(first.blocks as u64 * k as u64, k, budget, last));
    }
    passes
}

/// Tiles the last block of a chain reduces at most, when [`LastPass::Split`]: a last pass
/// over [`Tuning::top_k_tiles_per_block_later`] full tiles reduces them one after another (8 whole-tile
/// sorts took about 75 µs of 0.635 ms for sorted inputs at 2^28, k = 1024, run 52; the
/// tight sample chain's 6 tiles took 40 µs at k = 1024, run 56), so one more pass splits
/// them over blocks.
const LAST_BLOCK_TILES: u64 = 2;

/// Whether a chain's last block may be left with more than [`LAST_BLOCK_TILES`] tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LastPass {
    /// Split them over one more pass: for chains whose tiles are full (samples, heaps),
    /// and for k above 256, where each tile is sorted whole in shared memory (about 24 µs).
    Split,
    /// Keep one pass: for counted chains with a register kernel, whose tiles are mostly
    /// empty on most inputs, where the extra pass would cost a launch (2^20 keys, k ≤ 256:
    /// 7 to 13 µs slower with it, run 58).
    Keep,
}

impl LastPass {
    /// [`LastPass::Split`] above [`MAX_REGISTER_K`], else `register_path`.
    pub(crate) fn for_k(k: u32, register_path: LastPass) -> Self {
        if k > MAX_REGISTER_K { LastPass::Split } else { register_path }
    }
}

/// Passes over at most `inputs` candidates (each block takes
/// [`Tuning::top_k_tiles_per_block_later`] tiles, the last at most [`LAST_BLOCK_TILES`] when `last` says so), each next one over
/// the previous pass's `blocks · k`, until one block is left.
pub(crate) fn candidate_passes(mut inputs: u64, k: u32, budget: PassBudget, last: LastPass) -> Vec<Pass> {
    let mut passes = Vec::new();
    loop {
        let tiles = inputs.div_ceil(TOPK_TILE);
        let mut blocks = tiles.div_ceil(budget.tiles_per_block_later).min(budget.most_blocks()) as u32;
        if blocks == 1 && last == LastPass::Split && tiles > LAST_BLOCK_TILES {
            blocks = tiles.div_ceil(LAST_BLOCK_TILES) as u32;
        }
        passes.push(Pass { inputs, tiles, spread: TileSpread::CONTIGUOUS, blocks });
        if blocks == 1 {
            return passes;
        }
        inputs = blocks as u64 * k as u64;
    }
}

/// The filter's room for inputs inside the tight bound, as a share of the data: a few
/// thousand come through on most inputs (about `(j + 1) / sample_share`), sorted and
/// all-equal ones about half a step of the sample's warp pieces (16 384 at 2^28: the
/// first sampled inputs lie there, `TileSpread::sample`); more than the room sends the
/// safe chain on.
const CANDIDATE_ROOM_SHARE: u64 = 64;
/// Blocks per multiprocessor of the filter (no shared memory, few registers: many blocks
/// keep enough loads in flight).
const FILTER_BLOCKS_PER_SM: u32 = 8;

/// The first chain of a sampled input: the sample's best `rank + 1` (a cheap chain: fewer
/// than 32 for every `k` ≤ 1024), the filter of the inputs inside its last, then the
/// reduction of what the filter appended.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TightPlan {
    /// The bound's rank in the sample's best ([`tight_rank`], or `k − 1` when it gives none).
    rank: u32,
    /// The chain over the sample tiles keeping their best `rank + 1`; empty when that is
    /// `k` (the safe sample chain then runs first, ungated).
    sample: Vec<Pass>,
    /// Blocks of the filter (grid-stride over the data's tiles).
    filter_blocks: u32,
    /// Room for the inputs inside the bound.
    room: u64,
    /// The reduction of the filter's output.
    passes: Vec<Pass>,
}

/// The plan of a bitonic top-k: an optional sample chain keeping the sample's `k` best
/// (whose `k`-th is the safe pruning bound), the main chain over all the data, and on
/// sampled inputs the tight plan that runs first (the safe sample chain, when it is not the
/// tight plan's, and the main chain then run only when the tight plan's result says so).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BitonicPlan {
    sample: Option<Vec<Pass>>,
    main: Vec<Pass>,
    tight: Option<TightPlan>,
}

impl BitonicPlan {
    pub(crate) fn new(n: u64, k: u32, budget: PassBudget) -> Self {
        let tiles = n.div_ceil(TOPK_TILE);
        // One sample tile per stride of the full tiles, its inputs spread over the stride
        // (`TileSpread::sample`): each holds 2048 real inputs.
        let full_tiles = n / TOPK_TILE;
        let sample_tiles = full_tiles / SAMPLE_EVERY_TILES;
        let stride = full_tiles / sample_tiles.max(1);
        let sample_chain = |k| chain(n, sample_tiles, TileSpread::sample(stride), k, budget, LastPass::Split);
        let sampled = tiles >= SAMPLE_MIN_TILES;
        let tight = (sampled && budget.tight_bound).then(|| {
            let rank = tight_rank(k, (sample_tiles * TOPK_TILE) as f64 / n as f64).unwrap_or(k - 1);
            let room = (n / CANDIDATE_ROOM_SHARE).max(k as u64);
            TightPlan {
                rank,
                sample: if rank + 1 < k { sample_chain(rank + 1) } else { Vec::new() },
                filter_blocks: tiles.min((budget.multiprocessors * FILTER_BLOCKS_PER_SM) as u64) as u32,
                room,
                passes: candidate_passes(room, k, budget, LastPass::for_k(k, LastPass::Keep)),
            }
        });
        let sample = sampled.then(|| sample_chain(k));
        Self {
            sample,
            main: chain(n, tiles, TileSpread::CONTIGUOUS, k, budget, LastPass::for_k(k, LastPass::Keep)),
            tight,
        }
    }

    fn passes(&self) -> impl Iterator<Item = &Pass> {
        self.sample
            .iter()
            .flatten()
            .chain(&self.main)
            .chain(self.tight.iter().flat_map(|tight| tight.sample.iter().chain(&tight.passes)))
    }

    /// Counters of appended results: one per main pass; with a tight bound, one for the
    /// filter and one per pass of its chain.
    fn counters(&self) -> usize {
        self.main.len() + self.tight.as_ref().map_or(0, |tight| 1 + tight.passes.len())
    }
}

/// Where the bitonic top-k keeps its intermediate results in a workspace: two ping-pong
/// buffers of candidates (keys and indices), the sample's top k, the filter's output, and
/// the counters of appended results ([`BitonicPlan::counters`]). One function sizes and
/// carves it, so the two cannot disagree.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BitonicWorkspace {
    between: ChainBuffers,
    sample_keys: usize,
    sample_indices: usize,
    filtered_keys: usize,
    filtered_indices: usize,
    counters: usize,
    counters_bytes: usize,
    pub(crate) bytes: usize,
}

impl BitonicWorkspace {
    pub(crate) fn new(plan: &BitonicPlan, k: u32, key_bytes: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        let between = ChainBuffers::carve(&mut carver, plan.passes(), k, key_bytes);
        let sample_keys = carver.region(k as usize * key_bytes);
        let sample_indices = carver.region(k as usize * 8);
        let room = plan.tight.as_ref().map_or(0, |tight| tight.room as usize);
        let filtered_keys = carver.region(room * key_bytes);
        let filtered_indices = carver.region(room * 8);
        let counters_bytes = plan.counters() * 8;
        let counters = carver.region(counters_bytes);
        Self {
            between,
            sample_keys,
            sample_indices,
            filtered_keys,
            filtered_indices,
            counters,
            counters_bytes,
            bytes: carver.bytes(),
        }
    }
}

impl Gpu {
    /// Queues the bitonic top-k of `data` (its chains: [`BitonicPlan`]) into `out`, with
    /// the filter and transform `fusion` in every pass.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_bitonic<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: u32,
        order: Order,
        fusion: Fusion,
        plan: &BitonicPlan,
        workspace_base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let layout = BitonicWorkspace::new(plan, k, size_of::<K>());
        let at = |offset: usize| workspace_base + offset as u64;
        let between = layout.between.at(workspace_base);
        let run_chain = |chain: Chain<K>, output: (u64, u64)| {
            self.run_chain(data, order, between, chain.fused(fusion), output)
        };
        let the_data =
            ChainInput { keys: data.global_ptr(), indices: GlobalPtr::null(), count: GlobalPtr::null() };
        let out_pairs = (out.values.global_ptr().address(), out.indices.global_ptr().address());
        let sample_pairs = (at(layout.sample_keys), at(layout.sample_indices));
        self.clear_on_device(at(layout.counters), layout.counters_bytes)?;
        let main_counters = Some(at(layout.counters));
        let unsampled = Chain::over(&plan.main, k, the_data).counted(main_counters);
        let Some(sample) = &plan.sample else {
            return run_chain(unsampled, out_pairs);
        };
        // The sample's best of rank r, as a bound: its key and its index.
        let sample_bound = |rank: u32| {
            (sample_pairs.0 + rank as u64 * size_of::<K>() as u64, sample_pairs.1 + rank as u64 * 8)
        };
        // The sample's passes see no pruning, so their blocks' results are all real. Its
        // k-th best is safe: at least k inputs (the sample's k best) lie inside it.
        let sample_chain = Chain::over(sample, k, the_data);
        let main_chain = unsampled.pruned(sample_bound(k - 1));
        let Some(tight) = &plan.tight else {
            run_chain(sample_chain, sample_pairs)?;
            return run_chain(main_chain, out_pairs);
        };
        if tight.sample.is_empty() {
            run_chain(sample_chain, sample_pairs)?;
        } else {
            run_chain(Chain::over(&tight.sample, tight.rank + 1, the_data), sample_pairs)?;
        }
        // The filter appends the inputs inside the tight bound; its chain reduces them.
        let filter_count = at(layout.counters) + plan.main.len() as u64 * 8;
        let (bound_key, bound_index) = sample_bound(tight.rank);
        let filter = FilterParams {
            keys: data.global_ptr(),
            len: data.len() as u64,
            bound_key: GlobalPtr::from_address(bound_key),
            bound_index: GlobalPtr::from_address(bound_index),
            keys_out: GlobalPtr::from_address(at(layout.filtered_keys)),
            indices_out: GlobalPtr::from_address(at(layout.filtered_indices)),
            count: GlobalPtr::from_address(filter_count),
            capacity: tight.room,
            fusion,
            order: order.to_raw(),
        };
        let shape =
            LaunchShape { grid: (tight.filter_blocks, 1), block_threads: FILTER_THREADS, shared_bytes: 0 };
        self.launch(K::TOPK_BITONIC_FILTER, shape, filter)?;
        let filtered = ChainInput {
            keys: GlobalPtr::from_address(at(layout.filtered_keys)),
            indices: GlobalPtr::from_address(at(layout.filtered_indices)),
            count: GlobalPtr::from_address(filter_count),
        };
        run_chain(Chain::over(&tight.passes, k, filtered).counted(Some(filter_count + 8)), out_pairs)?;
        // The result's k-th index is padding exactly when fewer than k inputs lay inside
        // the tight bound (or more than the filter had room for); only then do the blocks of
        // the safe chains (the sample's k best, then the main chain) do anything.
        let kth_index = GlobalPtr::from_address(out_pairs.1 + (k as u64 - 1) * 8);
        if !tight.sample.is_empty() {
            run_chain(sample_chain.gated_by(kth_index), sample_pairs)?;
        }
        run_chain(main_chain.gated_by(kth_index), out_pairs)
    }

    /// Queues the passes of `chain`: its first reads `chain.input` and its last writes
    /// `output` (key and index addresses); the others ping-pong through `between`, each big
    /// enough for the most candidates a pass of the chain writes.
    pub(crate) fn run_chain<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        order: Order,
        between: [(u64, u64); 2],
        chain: Chain<K>,
        output: (u64, u64),
    ) -> Result<()> {
        let (kernel, shared_bytes) = bitonic_kernel::<K>(chain.k);
        let counter = |i: usize| {
            chain.counters.map_or(GlobalPtr::null(), |base| GlobalPtr::from_address(base + i as u64 * 8))
        };
        let (mut keys_in, mut indices_in) = (chain.input.keys, chain.input.indices);
        for (i, pass) in chain.passes.iter().enumerate() {
            let last = i + 1 == chain.passes.len();
            let (keys_out, indices_out) = if last { output } else { between[i % 2] };
            let (prune_key, prune_index) = match (i, chain.prune) {
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
                tile_stride: pass.spread.tile_stride,
                first_input: pass.spread.first_input,
                warp_stride: pass.spread.warp_stride,
                prune_key,
                prune_index,
                skip_unless_padding: chain.skip_unless_padding,
                in_count: if i == 0 { chain.input.count } else { counter(i - 1) },
                out_count: if last { GlobalPtr::null() } else { counter(i) },
                fusion: chain.fusion,
                k: chain.k,
                order: order.to_raw(),
            };
            let shape = LaunchShape { grid: (pass.blocks, 1), block_threads: TOPK_THREADS, shared_bytes };
            self.launch(kernel, shape, params)?;
            keys_in = GlobalPtr::from_address(keys_out);
            indices_in = GlobalPtr::from_address(indices_out);
        }
        Ok(())
    }
}

/// The two ping-pong buffers (keys and indices) between the passes of a workspace's
/// chains, each as big as the most candidates one of their passes writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChainBuffers {
    keys: [usize; 2],
    indices: [usize; 2],
}

impl ChainBuffers {
    /// Carves them for chains of `passes` keeping `k`.
    pub(crate) fn carve<'a>(
        carver: &mut WorkspaceCarver,
        passes: impl IntoIterator<Item = &'a Pass>,
        k: u32,
        key_bytes: usize,
    ) -> Self {
        let most = passes.into_iter().map(|pass| pass.blocks as usize * k as usize).max().unwrap_or(0);
        let keys = [carver.region(most * key_bytes), carver.region(most * key_bytes)];
        let indices = [carver.region(most * 8), carver.region(most * 8)];
        Self { keys, indices }
    }

    /// Their (keys, indices) addresses in a workspace at `base`, as [`Gpu::run_chain`] takes
    /// them.
    pub(crate) fn at(&self, base: u64) -> [(u64, u64); 2] {
        [0, 1].map(|i| (base + self.keys[i] as u64, base + self.indices[i] as u64))
    }
}

/// The kernel that keeps the best `k` (its `Q`) and its shared memory bytes.
fn bitonic_kernel<K: SelectKey>(k: u32) -> (KernelId<TopKParams<K>>, usize) {
    match registers_for_k(k) {
        1 => (K::TOPK_BITONIC_Q1, TopKLayout::<K::Bits>::new(1).bytes),
        2 => (K::TOPK_BITONIC_Q2, TopKLayout::<K::Bits>::new(2).bytes),
        4 => (K::TOPK_BITONIC_Q4, TopKLayout::<K::Bits>::new(4).bytes),
        8 => (K::TOPK_BITONIC_Q8, TopKLayout::<K::Bits>::new(8).bytes),
        16 => (K::TOPK_BITONIC_Q16, TopKLayout::<K::Bits>::new(16).bytes),
        _ => (K::TOPK_BITONIC_Q32, TopKLayout::<K::Bits>::new(32).bytes),
    }
}

/// One chain of reduction passes as it runs: its passes, the `k` it keeps, what its first
/// pass reads, the bound (key and index addresses) that prunes its first pass, the index
/// whose being real makes every block of the chain leave at once (null: never), and the
/// zeroed counters through which each pass appends only its real results and the next
/// reads only those (none: every block writes `k`), and the filter and transform.
#[derive(Clone, Copy)]
pub(crate) struct Chain<'a, K> {
    passes: &'a [Pass],
    k: u32,
    input: ChainInput<K>,
    prune: Option<(u64, u64)>,
    skip_unless_padding: GlobalPtr<u64>,
    counters: Option<u64>,
    fusion: Fusion,
}

impl<'a, K> Chain<'a, K> {
    pub(crate) fn over(passes: &'a [Pass], k: u32, input: ChainInput<K>) -> Self {
        Self {
            passes,
            k,
            input,
            prune: None,
            skip_unless_padding: GlobalPtr::null(),
            counters: None,
            fusion: Fusion::identity(),
        }
    }

    fn fused(self, fusion: Fusion) -> Self {
        Self { fusion, ..self }
    }

    fn counted(self, counters: Option<u64>) -> Self {
        Self { counters, ..self }
    }

    fn pruned(self, bound: (u64, u64)) -> Self {
        Self { prune: Some(bound), ..self }
    }

    fn gated_by(self, kth_index: GlobalPtr<u64>) -> Self {
        Self { skip_unless_padding: kth_index, ..self }
    }
}

/// What a chain's first pass reads: keys, their indices in the data (null: their
/// positions), and how many there are (null: all the pass's inputs).
pub(crate) struct ChainInput<K> {
    pub(crate) keys: GlobalPtr<K>,
    pub(crate) indices: GlobalPtr<u64>,
    pub(crate) count: GlobalPtr<u64>,
}

// Manual: a derive would ask `K: Copy`, and the pointers are Copy for every `K`.
impl<K> Clone for ChainInput<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for ChainInput<K> {}

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
            let plan = BitonicPlan::new(n, k, PassBudget::h100());
            for chain in plan
                .sample
                .iter()
                .chain(std::iter::once(&plan.main))
                .chain(plan.tight.iter().map(|t| &t.passes))
            {
                assert_eq!(chain.last().unwrap().blocks, 1, "{n} {k}");
                if k > MAX_REGISTER_K {
                    // The last block sorts at most two whole tiles one after the other.
                    assert!(chain.last().unwrap().tiles <= LAST_BLOCK_TILES, "{n} {k}: {chain:?}");
                }
                assert!(chain.len() <= 4, "{n} {k}: {chain:?}");
                for pass in chain {
                    assert!(pass.blocks as u64 <= pass.tiles && pass.inputs >= k as u64, "{n} {k}: {pass:?}");
                }
            }
            if let Some(sample) = &plan.sample {
                let first = sample[0];
                // Full, and neither end of the data in the sample.
                assert!(first.spread.end(first.tiles) < n, "sample tiles must be full: {first:?}");
                assert!(first.spread.first_input > 0, "{first:?}");
            }
        }
        assert!(BitonicPlan::new(1 << 20, 32, PassBudget::h100()).sample.is_some());
        assert!(BitonicPlan::new(1 << 19, 32, PassBudget::h100()).sample.is_none());
    }

    #[test]
    fn any_tuning_value_gives_a_plan() {
        // The product of multiprocessors and blocks per multiprocessor does not fit 32 bits.
        let tuning = Tuning { top_k_blocks_per_sm: u32::MAX, ..Tuning::default() };
        let budget = PassBudget::new(&tuning, 132);
        assert_eq!(budget.most_blocks(), 132 * u32::MAX as u64);
        let plan = BitonicPlan::new(1 << 24, 32, budget);
        assert_eq!(plan.main[0].blocks as u64, (1u64 << 24).div_ceil(TOPK_TILE), "a block per tile at most");
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
        assert_eq!(BitonicPlan::new(1 << 19, 256, PassBudget::h100()).tight, None);
        let tight = BitonicPlan::new(1 << 28, 256, PassBudget::h100()).tight.unwrap();
        assert_eq!(tight.rank, 11);
        // Room for the expected 1 536 inputs inside many times over, and for the about
        // 131 072 of sorted or all-equal inputs (a stride of sample tiles).
        assert_eq!(tight.room, 1 << 22);
        assert_eq!(tight.passes.last().unwrap().blocks, 1);
        // The tight plan has its own sample chain (keeping only the best 12).
        assert_eq!(tight.sample.last().map(|pass| pass.blocks), Some(1));
        // Without a tight rank (k = 1) the bound is the sample's k-th best, from the safe
        // sample chain itself.
        let tight = BitonicPlan::new(1 << 28, 1, PassBudget::h100()).tight.unwrap();
        assert_eq!((tight.rank, tight.sample.len()), (0, 0));
    }

    #[test]
    fn workspace_regions_are_aligned_and_disjoint() {
        let plan = BitonicPlan::new(1 << 24, 100, PassBudget::h100());
        let layout = BitonicWorkspace::new(&plan, 100, 4);
        let mut starts = [
            layout.between.keys[0],
            layout.between.keys[1],
            layout.between.indices[0],
            layout.between.indices[1],
            layout.sample_keys,
            layout.sample_indices,
            layout.filtered_keys,
            layout.filtered_indices,
            layout.counters,
        ];
        starts.sort_unstable();
        assert!(starts.iter().all(|start| start % crate::workspace::WORKSPACE_ALIGN == 0));
        assert!(starts.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(layout.bytes >= layout.counters + layout.counters_bytes && layout.counters == starts[8]);
    }
}
