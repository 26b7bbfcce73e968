//! Top-k: the k largest or smallest keys of a device array, with their indices.

use gpu_select_kernels::entry::KernelId;
use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::bitonic::{
    MAX_BITONIC_K, TOPK_THREADS, TOPK_TILE, TopKLayout, TopKParams, registers_for_k,
};

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

/// Blocks per multiprocessor of the first pass.
const BLOCKS_PER_SM: u32 = 4;
/// Tiles a block of a later pass reduces, so that each pass shrinks the candidates a lot.
const TILES_PER_BLOCK_LATER: u64 = 8;
/// Workspace regions start on this boundary (as CUB's temporary storage does).
const WORKSPACE_ALIGN: usize = 256;

/// One reduction pass of the bitonic top-k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pass {
    inputs: u64,
    blocks: u32,
}

/// The passes for `n` keys: the first over the data, each next one over the previous
/// pass's `blocks · k` candidates, until one block is left.
fn bitonic_passes(n: u64, k: u32, multiprocessors: u32) -> Vec<Pass> {
    let mut passes = Vec::new();
    let mut inputs = n;
    let mut first = true;
    loop {
        // Every block gets at least one full tile, hence at least k ≤ 2048 real inputs.
        let full_tiles = (inputs / TOPK_TILE).max(1);
        let wanted = if first { full_tiles } else { inputs.div_ceil(TOPK_TILE * TILES_PER_BLOCK_LATER) };
        let blocks = wanted.min(full_tiles).min((multiprocessors * BLOCKS_PER_SM) as u64).max(1) as u32;
        passes.push(Pass { inputs, blocks });
        if blocks == 1 {
            return passes;
        }
        inputs = blocks as u64 * k as u64;
        first = false;
    }
}

/// Where the candidates of the intermediate passes live in a workspace: two ping-pong
/// buffers of keys and indices. One function sizes and carves it, so the two cannot
/// disagree.
#[derive(Clone, Copy, Debug)]
struct BitonicWorkspace {
    keys: [usize; 2],
    indices: [usize; 2],
    bytes: usize,
}

impl BitonicWorkspace {
    fn new(passes: &[Pass], k: u32, key_bytes: usize) -> Self {
        let most = passes.iter().map(|pass| pass.blocks as usize * k as usize).max().unwrap_or(0);
        let mut offset = 0;
        let mut region = |bytes: usize| {
            let start = offset;
            offset = (offset + bytes).div_ceil(WORKSPACE_ALIGN) * WORKSPACE_ALIGN;
            start
        };
        let keys = [region(most * key_bytes), region(most * key_bytes)];
        let indices = [region(most * 8), region(most * 8)];
        Self { keys, indices, bytes: offset }
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
        match self.plan_top_k(n, k, options)? {
            Plan::Bitonic(passes) => Ok(BitonicWorkspace::new(&passes, k as u32, size_of::<K>()).bytes),
            Plan::BlockSort => Ok(0),
        }
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
        match self.plan_top_k(data.len(), k, options)? {
            Plan::Bitonic(passes) => self.run_bitonic(data, k as u32, options.order, &passes, workspace, out),
            Plan::BlockSort => {
                let mut sorted = crate::SortedSegments {
                    keys: self.alloc_zeroed::<K>(data.len())?,
                    indices: self.alloc_zeroed::<u64>(data.len())?,
                };
                self.sort_segments_into(data, data.len(), options.order, &mut sorted)?;
                self.copy_prefix(&sorted.keys, &mut out.values)?;
                self.copy_prefix(&sorted.indices, &mut out.indices)
            }
        }
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
        let bitonic = || Plan::Bitonic(bitonic_passes(n as u64, k as u32, self.limits().multiprocessors));
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
        passes: &[Pass],
        workspace: &mut DeviceBuffer<u8>,
        out: &mut TopK<K>,
    ) -> Result<()> {
        let layout = BitonicWorkspace::new(passes, k, size_of::<K>());
        if workspace.len() < layout.bytes {
            return Err(Error::LengthMismatch {
                what: "top-k workspace bytes (at least)",
                expected: layout.bytes,
                actual: workspace.len(),
            });
        }
        let base = workspace.global_ptr().address();
        let q = registers_for_k(k);
        let (kernel, shared_bytes): (KernelId<TopKParams<K>>, usize) = match q {
            1 => (K::TOPK_BITONIC_Q1, TopKLayout::<K::Bits>::new(1).bytes),
            2 => (K::TOPK_BITONIC_Q2, TopKLayout::<K::Bits>::new(2).bytes),
            4 => (K::TOPK_BITONIC_Q4, TopKLayout::<K::Bits>::new(4).bytes),
            _ => (K::TOPK_BITONIC_Q8, TopKLayout::<K::Bits>::new(8).bytes),
        };
        let mut keys_in = data.global_ptr();
        let mut indices_in = GlobalPtr::null();
        for (i, pass) in passes.iter().enumerate() {
            let last = i + 1 == passes.len();
            let (keys_out, indices_out) = if last {
                (out.values.global_ptr(), out.indices.global_ptr())
            } else {
                (
                    GlobalPtr::from_address(base + layout.keys[i % 2] as u64),
                    GlobalPtr::from_address(base + layout.indices[i % 2] as u64),
                )
            };
            let params = TopKParams {
                keys_in,
                indices_in,
                original_keys: data.global_ptr(),
                keys_out,
                indices_out,
                len: pass.inputs,
                k,
                order: order.to_raw(),
            };
            let shape = LaunchShape { grid: (pass.blocks, 1), block_threads: TOPK_THREADS, shared_bytes };
            self.launch(kernel, shape, params)?;
            keys_in = keys_out;
            indices_in = indices_out;
        }
        Ok(())
    }
}

enum Plan {
    Bitonic(Vec<Pass>),
    BlockSort,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_shrink_to_one_block_and_every_block_gets_a_full_tile() {
        for (n, k) in [(1u64 << 28, 32u32), (1 << 28, 256), (3000, 256), (2049, 1), (1 << 20, 100)] {
            let passes = bitonic_passes(n, k, 132);
            assert_eq!(passes.last().unwrap().blocks, 1, "{n} {k}");
            for pass in &passes {
                assert!(pass.inputs / TOPK_TILE >= pass.blocks as u64 || pass.blocks == 1);
                assert!(pass.inputs >= k as u64);
            }
            assert!(passes.len() <= 4, "{n} {k}: {passes:?}");
        }
    }

    #[test]
    fn workspace_regions_are_aligned_and_disjoint() {
        let passes = bitonic_passes(1 << 24, 100, 132);
        let layout = BitonicWorkspace::new(&passes, 100, 4);
        let mut starts = [layout.keys[0], layout.keys[1], layout.indices[0], layout.indices[1]];
        starts.sort_unstable();
        assert!(starts.iter().all(|start| start % WORKSPACE_ALIGN == 0));
        assert!(starts.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(layout.bytes >= starts[3] + 100 * 8);
    }
}
