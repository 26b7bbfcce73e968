//! Top-k: the k largest or smallest keys of a device array, with their indices.

use gpu_select_kernels::entry::KernelId;
use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::bitonic::{
    MAX_BITONIC_K, TOPK_THREADS, TOPK_TILE, TopKLayout, TopKParams, registers_for_k,
};

/// One sample tile per this many tiles of data feeds the pruning bound (0.8 % of the data).
const SAMPLE_EVERY_TILES: u64 = 128;
/// Inputs of fewer tiles than this are not sampled: the sample chain would cost more than
/// it saves.
const SAMPLE_MIN_TILES: u64 = 4 * SAMPLE_EVERY_TILES;

use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::{Order, SelectKey};

/// Which top-k algorithm runs. Each variant says where it wins; [`Algorithm::Auto`] picks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// The library chooses (today: [`Algorithm::Bitonic`] for `k ≤ 256`, the block sort for
    /// inputs of up to 2048 keys).
    #[default]
    Auto,
    /// Bitonic top-k (Shanbhag, Pirk & Madden): tiles of 2048 keys reduced to their `k`
    /// best by sorting networks in registers, then the blocks' results reduced again.
    /// Data-independent time (every distribution costs the same); `k ≤ 256` today.
    Bitonic,
    /// The block bitonic sort of the whole input, then the first `k`: inputs of at most
    /// 2048 keys, any `k`.
    BlockSort,
}

/// Options of [`Gpu::top_k_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopKOptions {
    /// The largest or the smallest keys.
    pub order: Order,
    /// Which algorithm.
    pub algorithm: Algorithm,
}

impl TopKOptions {
    /// `order`, with [`Algorithm::Auto`].
    pub fn new(order: Order) -> Self {
        Self { order, algorithm: Algorithm::Auto }
    }

    /// The same options with another algorithm.
    pub fn with_algorithm(self, algorithm: Algorithm) -> Self {
        Self { algorithm, ..self }
    }
}

/// The result of a top-k: `k` keys, best first, and the index of each in the input.
#[derive(Debug)]
pub struct TopK<K> {
    /// The keys, sorted: largest first for [`Order::Largest`], smallest first otherwise.
    pub values: DeviceBuffer<K>,
    /// Index in the input of each key (64-bit).
    pub indices: DeviceBuffer<u64>,
}

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
/// Workspace regions start on this boundary (as CUB's temporary storage does).
const WORKSPACE_ALIGN: usize = 256;

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
struct BitonicPlan {
    sample: Option<Vec<Pass>>,
    main: Vec<Pass>,
}

impl BitonicPlan {
    fn new(n: u64, k: u32, multiprocessors: u32) -> Self {
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
struct BitonicWorkspace {
    keys: [usize; 2],
    indices: [usize; 2],
    sample_keys: usize,
    sample_indices: usize,
    bytes: usize,
}

impl BitonicWorkspace {
    fn new(plan: &BitonicPlan, k: u32, key_bytes: usize) -> Self {
        let most = plan.passes().map(|pass| pass.blocks as usize * k as usize).max().unwrap_or(0);
        let mut offset = 0;
        let mut region = |bytes: usize| {
            let start = offset;
            offset = (offset + bytes).div_ceil(WORKSPACE_ALIGN) * WORKSPACE_ALIGN;
            start
        };
        let keys = [region(most * key_bytes), region(most * key_bytes)];
        let indices = [region(most * 8), region(most * 8)];
        let sample_keys = region(k as usize * key_bytes);
        let sample_indices = region(k as usize * 8);
        Self { keys, indices, sample_keys, sample_indices, bytes: offset }
    }
}

/// The workspace of the block-sort path: all `n` sorted keys and indices.
#[derive(Clone, Copy, Debug)]
struct BlockSortWorkspace {
    keys: usize,
    indices: usize,
    bytes: usize,
}

impl BlockSortWorkspace {
    fn new(n: usize, key_bytes: usize) -> Self {
        let indices = (n * key_bytes).div_ceil(WORKSPACE_ALIGN) * WORKSPACE_ALIGN;
        Self { keys: 0, indices, bytes: indices + n * 8 }
    }
}

impl Gpu {
    /// The `k` largest (or smallest) keys of `data` and their indices, best first.
    ///
    /// * Order: the total order of [`Key`](crate::Key): NaN above +inf (so `Largest` returns
    ///   NaNs first), -0.0 below +0.0.
    /// * Ties: deterministic, equal keys by lower index first; the same input gives the same
    ///   output every run.
    /// * Errors: [`Error::EmptyInput`]; [`Error::InvalidArgument`] for `k = 0`, `k > n`, or a
    ///   `k` no implemented algorithm covers yet (today: `k > 256` when `n > 2048`).
    ///
    /// ```
    /// use gpu_select::{Gpu, Order};
    ///
    /// let gpu = Gpu::emulator();
    /// let data = gpu.upload(&[4.0f32, 9.5, -1.0, 9.5, 7.0])?;
    /// let top = gpu.top_k(&data, 3, Order::Largest)?;
    /// assert_eq!(gpu.download(&top.values)?, [9.5, 9.5, 7.0]);
    /// assert_eq!(gpu.download(&top.indices)?, [1, 3, 4]);
    /// # Ok::<(), gpu_select::Error>(())
    /// ```
    pub fn top_k<K: SelectKey>(&self, data: &DeviceBuffer<K>, k: usize, order: Order) -> Result<TopK<K>> {
        self.top_k_with(data, k, &TopKOptions::new(order))
    }

    /// [`Gpu::top_k`] with options (algorithm choice).
    pub fn top_k_with<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        options: &TopKOptions,
    ) -> Result<TopK<K>> {
        let bytes = self.top_k_workspace_bytes::<K>(data.len(), k, options)?;
        let mut workspace = self.alloc_zeroed::<u8>(bytes)?;
        let mut out = TopK { values: self.alloc_zeroed::<K>(k)?, indices: self.alloc_zeroed::<u64>(k)? };
        self.top_k_into(data, k, options, &mut workspace, &mut out)?;
        Ok(out)
    }

    /// Top-k of a host slice: uploads it, runs [`Gpu::top_k`], downloads the result.
    pub fn top_k_host<K: SelectKey>(&self, data: &[K], k: usize, order: Order) -> Result<(Vec<K>, Vec<u64>)> {
        let top = self.top_k(&self.upload(data)?, k, order)?;
        Ok((self.download(&top.values)?, self.download(&top.indices)?))
    }

    /// Bytes of workspace [`Gpu::top_k_into`] needs for `n` keys of type `K` (checks the
    /// arguments as the run does).
    pub fn top_k_workspace_bytes<K: SelectKey>(
        &self,
        n: usize,
        k: usize,
        options: &TopKOptions,
    ) -> Result<usize> {
        Ok(self.plan_top_k(n, k, options)?.workspace_bytes(n, k, size_of::<K>()))
    }

    /// Top-k into caller-provided outputs (`out.values` and `out.indices` of length `k`),
    /// with a caller-provided workspace of at least [`Gpu::top_k_workspace_bytes`]. Queues
    /// the work without waiting; a download of `out` waits for it.
    pub fn top_k_into<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        options: &TopKOptions,
        workspace: &mut DeviceBuffer<u8>,
        out: &mut TopK<K>,
    ) -> Result<()> {
        data.check_gpu(self, "the data")?;
        workspace.check_gpu(self, "the workspace")?;
        out.values.check_gpu(self, "the output values")?;
        out.indices.check_gpu(self, "the output indices")?;
        for (what, len) in
            [("top-k output values", out.values.len()), ("top-k output indices", out.indices.len())]
        {
            if len != k {
                return Err(Error::LengthMismatch { what, expected: k, actual: len });
            }
        }
        let plan = self.plan_top_k(data.len(), k, options)?;
        let needed = plan.workspace_bytes(data.len(), k, size_of::<K>());
        if workspace.len() < needed {
            return Err(Error::LengthMismatch {
                what: "top-k workspace bytes (at least)",
                expected: needed,
                actual: workspace.len(),
            });
        }
        let base = workspace.global_ptr().address();
        match plan {
            Plan::Bitonic(plan) => self.run_bitonic(data, k as u32, options.order, &plan, base, out),
            Plan::BlockSort => self.run_block_sort(data, k, options.order, base, out),
        }
    }

    /// Top-k of at most 2048 keys: sort them all into the workspace (at `workspace_base`,
    /// checked by the caller), copy the first `k`.
    fn run_block_sort<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        order: Order,
        workspace_base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let n = data.len();
        let layout = BlockSortWorkspace::new(n, size_of::<K>());
        let (keys, indices) = (workspace_base + layout.keys as u64, workspace_base + layout.indices as u64);
        self.launch_block_sort(
            data.global_ptr(),
            n as u32,
            1,
            order,
            GlobalPtr::from_address(keys),
            GlobalPtr::from_address(indices),
        )?;
        self.copy_on_device(keys, out.values.global_ptr().address(), k * size_of::<K>())?;
        self.copy_on_device(indices, out.indices.global_ptr().address(), k * 8)
    }

    fn plan_top_k(&self, n: usize, k: usize, options: &TopKOptions) -> Result<Plan> {
        if n == 0 {
            return Err(Error::EmptyInput);
        }
        if k == 0 {
            return Err(Error::invalid("k = 0: ask for at least one key"));
        }
        if k > n {
            return Err(Error::invalid(format!("k = {k} is larger than the input ({n} keys)")));
        }
        let fits_block_sort = n <= crate::MAX_SMALL_SORT_LEN;
        let fits_bitonic = k <= MAX_BITONIC_K as usize && (n as u64) < (1u64 << 32);
        let bitonic = || Plan::Bitonic(BitonicPlan::new(n as u64, k as u32, self.limits().multiprocessors));
        match options.algorithm {
            Algorithm::Auto if fits_block_sort => Ok(Plan::BlockSort),
            Algorithm::Auto | Algorithm::Bitonic if fits_bitonic => Ok(bitonic()),
            Algorithm::BlockSort if fits_block_sort => Ok(Plan::BlockSort),
            Algorithm::BlockSort => Err(Error::invalid(format!(
                "Algorithm::BlockSort takes at most {} keys; the input has {n}",
                crate::MAX_SMALL_SORT_LEN
            ))),
            _ if (n as u64) >= (1u64 << 32) => Err(Error::invalid(format!(
                "{n} keys: the bitonic top-k takes fewer than 2^32 keys (larger inputs need an algorithm not built yet)"
            ))),
            _ => Err(Error::invalid(format!(
                "k = {k} with {n} keys: the bitonic top-k takes k ≤ {MAX_BITONIC_K} (larger k needs an algorithm not built yet)"
            ))),
        }
    }

    fn run_bitonic<K: SelectKey>(
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

enum Plan {
    Bitonic(BitonicPlan),
    BlockSort,
}

impl Plan {
    /// Workspace bytes of the plan: the one source for the size query and the run's check.
    fn workspace_bytes(&self, n: usize, k: usize, key_bytes: usize) -> usize {
        match self {
            Plan::Bitonic(plan) => BitonicWorkspace::new(plan, k as u32, key_bytes).bytes,
            Plan::BlockSort => BlockSortWorkspace::new(n, key_bytes).bytes,
        }
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
