//! Top-k of one array: the plan of each algorithm (and `Auto`'s choice by the cost model),
//! its workspace, and the run that dispatches to the algorithm's engine module.

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::bitonic::MAX_BITONIC_K;
use gpu_select_kernels::topk::rows_radix::MAX_RADIX_ROWS_K;

use super::bitonic::{BitonicPlan, BitonicWorkspace, PassBudget};
use super::cost;
use super::heap::{HeapPlan, HeapWorkspace};
use super::radix::{RadixPlan, RadixWorkspace};
use super::sample_top_k::{SampleTopKPlan, SampleTopKWorkspace};
use super::sbp::{SbpPlan, SbpWorkspace};
use super::sort::Pairs;
use super::sort_choose::{SortChoosePlan, SortChooseWorkspace};
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::options::{Algorithm, SelectOptions, TopKOptions};
use crate::results::TopK;
use crate::workspace::WorkspaceCarver;
use crate::{Order, SelectKey};

/// The inputs `Auto` takes as one row ([`Gpu::one_row_pays`]): from 2^14 keys (below, a row
/// also falls to the warp kernels, which treat [`PADDING_INDEX`](crate::PADDING_INDEX)
/// apart; not measured) up to a bound that depends on `k` and the keys' rank width. First
/// measured on an H200 (run 245: every `k` to 2^17, 128 ≤ k ≤ 1024 to 2^19); runs 280–281
/// (an H100 and an H200; n = 2^14 … 2^24, k = 16 … 2048; f32, bf16, f64; the array
/// algorithms against the row in every split) moved the bounds, with the row's split
/// balanced between its two passes (`balanced_parts` in the rows' planning). H200 run 280:
/// for `k ≤ 32` the row of 16- and 32-bit keys is faster to 2^24 (2^22 at k = 16: f32 0.058
/// → 0.035 ms, bf16 0.078 → 0.039), of 64-bit keys only to 2^17 (f64 2^19 at k = 16: the
/// array 0.033, the row 0.038); for 128 ≤ k ≤ 1024 to 2^20 (64-bit keys to 2^19: f64 2^20
/// at k = 1024, the array 0.085, the row 0.108); for larger `k` to 2^18 (f32 2^18 at k =
/// 2048: 0.079 → 0.068). The row's bounded split (H200 run 304) moved the bounds of 16- and
/// 32-bit keys: 128 ≤ k ≤ 1024 to 2^21 (f32 2^21 at k = 1024: the fastest array algorithm
/// 0.090 ms, the row 0.047; bf16 0.087 and 0.062), larger `k` to 2^22 (f32 2^22 at k =
/// 2048: 0.114 and 0.068; bf16 0.116 and 0.104). The same run, read again for 32-bit keys
/// alone: f32 takes the row further, 128 ≤ k ≤ 1024 to 2^22 (at 2^22 the row 0.051–0.055 ms
/// against the fastest array algorithm's 0.068–0.085; at 2^23 it loses at k = 128 and 256,
/// 0.078 against 0.074) and larger `k` to 2^24 (2^23 at k = 2048: 0.103 against 0.140; 2^24:
/// 0.122 against 0.159), where bf16 rows lose (2^22 at k = 128…1024: 0.082–0.096 against
/// 0.066–0.074; 2^23 at k = 2048: 0.164 against 0.159).
const ONE_ROW_MIN_KEYS: usize = 1 << 14;
/// See [`ONE_ROW_MIN_KEYS`]: every `k` the rows take.
const ONE_ROW_MAX_KEYS: usize = 1 << 17;
/// See [`ONE_ROW_MIN_KEYS`]: `k` from 1025 to 2048, 64-bit keys.
const ONE_ROW_LARGE_K_MAX_KEYS_64: usize = 1 << 18;
/// See [`ONE_ROW_MIN_KEYS`]: `k` from 1025 to 2048, 16-bit keys.
const ONE_ROW_LARGE_K_MAX_KEYS_16: usize = 1 << 22;
/// See [`ONE_ROW_MIN_KEYS`]: `k` from 1025 to 2048, 32-bit keys.
const ONE_ROW_LARGE_K_MAX_KEYS_32: usize = 1 << 24;
/// See [`ONE_ROW_MIN_KEYS`]: 128 ≤ k ≤ 1024, 64-bit keys.
const ONE_ROW_MID_K_MAX_KEYS_64: usize = 1 << 19;
/// See [`ONE_ROW_MIN_KEYS`]: 128 ≤ k ≤ 1024, 16-bit keys.
const ONE_ROW_MID_K_MAX_KEYS_16: usize = 1 << 21;
/// See [`ONE_ROW_MIN_KEYS`]: 128 ≤ k ≤ 1024, 32-bit keys.
const ONE_ROW_MID_K_MAX_KEYS_32: usize = 1 << 22;
/// See [`ONE_ROW_MIN_KEYS`]: `k ≤ 32`, 16- and 32-bit keys.
const ONE_ROW_SMALL_K_MAX_KEYS: usize = 1 << 24;

/// The workspace of the block-sort path: all `n` sorted keys and indices.
#[derive(Clone, Copy, Debug)]
struct BlockSortWorkspace {
    keys: usize,
    indices: usize,
    bytes: usize,
}

impl BlockSortWorkspace {
    fn new(n: usize, key_bytes: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        let keys = carver.region(n * key_bytes);
        let indices = carver.region(n * 8);
        Self { keys, indices, bytes: carver.bytes() }
    }
}

impl Gpu {
    /// Queues the top-k `plan` describes on `data` (checked against it by the caller) into
    /// `out`, with the workspace at `base`.
    pub(crate) fn run_top_k<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        order: Order,
        plan: &Plan,
        base: u64,
        out: &mut TopK<K>,
    ) -> Result<()> {
        match plan {
            Plan::Bitonic(plan) => {
                let fusion = gpu_select_kernels::topk::fusion::Fusion::identity();
                self.run_bitonic(data, k as u32, order, fusion, plan, base, out)
            }
            Plan::BlockSort => self.run_block_sort(data, k, order, base, out),
            Plan::Heap(plan) => self.run_heap(data, k as u32, order, plan, base, out),
            Plan::Radix(plan) => self.run_radix(data, k, order, plan, base, out),
            Plan::Sample(plan) => self.run_sample_top_k(data, k, order, plan, base, out),
            Plan::SortChoose(plan) => self.run_sort_choose(data, k, order, plan, base, out),
            Plan::Sbp(plan) => {
                let out_pairs = Pairs { keys: out.values.global_ptr(), indices: out.indices.global_ptr() };
                self.run_sbp(data, order, plan, base, out_pairs)
            }
        }
    }

    /// Checks that caller-provided outputs are on this GPU and hold `len` values and
    /// indices (`what`: how the error names each).
    pub(crate) fn check_outputs<K: SelectKey>(
        &self,
        out: &TopK<K>,
        len: usize,
        what: [&'static str; 2],
    ) -> Result<()> {
        out.values.check_gpu(self, "the output values")?;
        out.indices.check_gpu(self, "the output indices")?;
        for (what, actual) in what.into_iter().zip([out.values.len(), out.indices.len()]) {
            if actual != len {
                return Err(Error::LengthMismatch { what, expected: len, actual });
            }
        }
        Ok(())
    }

    /// Checks that a caller-provided workspace is on this GPU and holds `needed` bytes.
    pub(crate) fn check_workspace(&self, workspace: &DeviceBuffer<u8>, needed: usize) -> Result<()> {
        workspace.check_gpu(self, "the workspace")?;
        Error::check_workspace_size(needed, workspace.len())
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
        let input = Pairs { keys: data.global_ptr(), indices: GlobalPtr::null() };
        self.launch_block_sort(input, n as u32, 1, order, Pairs::at(keys, indices))?;
        self.copy_on_device(keys, out.values.global_ptr().address(), k * size_of::<K>())?;
        self.copy_on_device(indices, out.indices.global_ptr().address(), k * 8)
    }

    /// The cost model's predicted time, in milliseconds, of a top-k of `n` keys of
    /// `key_bytes` with `algorithm` on this device; for [`Algorithm::Auto`], of the algorithm
    /// it picks. `None` when the algorithm does not take the shape (or the backend is the
    /// emulator, whose speed says nothing about a GPU's).
    pub(crate) fn top_k_predicted_ms(
        &self,
        n: usize,
        k: usize,
        key_bytes: usize,
        algorithm: Algorithm,
    ) -> Option<f64> {
        if self.backend() == crate::BackendKind::Emulator || k == 0 || k > n {
            return None;
        }
        let algorithm = self.resolve(algorithm, n, k, key_bytes);
        cost::predict_ms(algorithm, n as u64, k as u64, key_bytes, self.cost_device())
    }

    /// Whether `Auto` takes a top-k of one array of `n` keys (`1 ≤ k ≤ n`) as one row of
    /// the rows' radix kernel: the row split over blocks, each narrowing its part in shared
    /// memory and sorting its best `k`, then one pass over their candidates (a co-ranking
    /// merge or the radix kernel: two launches), where the array algorithms take a chain of
    /// passes sized for large inputs. `key_bytes`: 64-bit keys pay over a shorter range, and
    /// from `k = 128` 16-bit keys over a shorter one than 32-bit keys.
    pub(crate) fn one_row_pays(n: usize, k: usize, key_bytes: usize) -> bool {
        let narrow = super::rank_bytes(key_bytes) == 4;
        let most = match (k, key_bytes) {
            (1..=32, _) if narrow => ONE_ROW_SMALL_K_MAX_KEYS,
            (128..=1024, 2) => ONE_ROW_MID_K_MAX_KEYS_16,
            (128..=1024, 4) => ONE_ROW_MID_K_MAX_KEYS_32,
            (128..=1024, _) => ONE_ROW_MID_K_MAX_KEYS_64,
            (1025.., 2) => ONE_ROW_LARGE_K_MAX_KEYS_16,
            (1025.., 4) => ONE_ROW_LARGE_K_MAX_KEYS_32,
            (1025.., _) => ONE_ROW_LARGE_K_MAX_KEYS_64,
            _ => ONE_ROW_MAX_KEYS,
        };
        (ONE_ROW_MIN_KEYS..=most).contains(&n) && (1..=MAX_RADIX_ROWS_K as usize).contains(&k)
    }

    /// The named algorithm, or for `Auto` the one the cost model predicts fastest.
    fn resolve(&self, algorithm: Algorithm, n: usize, k: usize, key_bytes: usize) -> Algorithm {
        match algorithm {
            Algorithm::Auto => cost::cheapest(n as u64, k as u64, key_bytes, self.cost_device()),
            named => named,
        }
    }

    pub(crate) fn cost_device(&self) -> cost::Device {
        let limits = self.limits();
        cost::Device {
            multiprocessors: limits.multiprocessors,
            read_bytes_per_s: limits.peak_bandwidth_bytes_per_s * cost::READ_EFFICIENCY,
        }
    }

    pub(crate) fn plan_array_top_k(
        &self,
        n: usize,
        k: usize,
        key_bytes: usize,
        options: &TopKOptions,
    ) -> Result<Plan> {
        if n == 0 {
            return Err(Error::EmptyInput);
        }
        crate::workspace::check_key_count(n)?;
        if k == 0 {
            return Err(Error::k_out_of_range(0, 1, n, "ask for at least one key"));
        }
        if k > n {
            return Err(Error::k_out_of_range(k, 1, n, format!("the input has {n} keys")));
        }
        let multiprocessors = self.limits().multiprocessors;
        let budget = PassBudget::new(self.tuning(), multiprocessors);
        let algorithm = self.resolve(options.algorithm, n, k, key_bytes);
        let takes = algorithm.takes(n as u64, k as u64);
        match algorithm {
            Algorithm::Bitonic if takes => Ok(Plan::Bitonic(BitonicPlan::new(n as u64, k as u32, budget))),
            Algorithm::Auto | Algorithm::RadixSelect => {
                Ok(Plan::Radix(RadixPlan::new(n as u64, multiprocessors, options.sorted && k > 1)))
            }
            Algorithm::SampleSelect | Algorithm::BucketSelect => {
                use gpu_select_kernels::select::sample::flags;
                // SampleSelect brackets a small `k` (when its policy brackets): one read keeps
                // the keys below a sampled bound, in input order.
                let extra = if algorithm == Algorithm::BucketSelect {
                    flags::EQUAL_WIDTH
                } else if k as u64 <= n as u64 / super::sample_select::TOP_K_BRACKET_DIVISOR {
                    flags::BRACKET
                } else {
                    0
                };
                let mut select_options = SelectOptions::new(options.order);
                select_options.policy = options.policy;
                let select = self.plan_exact_select(n, key_bytes, &select_options, flags::EMIT | extra)?;
                Ok(Plan::Sample(SampleTopKPlan { select, sort_output: options.sorted && k > 1 }))
            }
            Algorithm::BlockSort if takes => Ok(Plan::BlockSort),
            Algorithm::PerThreadHeap => {
                let limits = self.limits();
                // The heaps hold ordered bits in shared memory.
                let rank_bytes = super::rank_bytes(key_bytes);
                let plan =
                    HeapPlan::new(n as u64, k as u64, rank_bytes, budget, limits.max_shared_bytes_per_block)?;
                Ok(Plan::Heap(plan))
            }
            Algorithm::SortAndChoose => Ok(Plan::SortChoose(SortChoosePlan::new(n as u64, multiprocessors)?)),
            Algorithm::SbpRadix | Algorithm::SbpTree => {
                let tree = algorithm == Algorithm::SbpTree;
                Ok(Plan::Sbp(SbpPlan::new(n as u64, k as u64, tree, options.sorted, self.tuning())?))
            }
            Algorithm::BlockSort => Err(Error::invalid(format!(
                "Algorithm::BlockSort takes at most {} keys; the input has {n}",
                crate::MAX_SMALL_SORT_LEN
            ))),
            Algorithm::WarpSelect => Err(Error::invalid(
                "Algorithm::WarpSelect runs per row: describe the keys as rows (Keys::rows)",
            )),
            Algorithm::Bitonic if (n as u64) >= (1u64 << 32) => {
                Err(Error::invalid(format!("{n} keys: the bitonic top-k takes fewer than 2^32 keys")))
            }
            Algorithm::Bitonic => Err(Error::k_out_of_range(
                k,
                1,
                MAX_BITONIC_K as usize,
                format!("the bitonic top-k takes k ≤ {MAX_BITONIC_K}"),
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Plan {
    Bitonic(BitonicPlan),
    BlockSort,
    Heap(HeapPlan),
    Radix(RadixPlan),
    Sample(SampleTopKPlan),
    SortChoose(SortChoosePlan),
    Sbp(SbpPlan),
}

impl Plan {
    /// Workspace bytes of the plan: the one source for the size query and the run's check.
    pub(crate) fn workspace_bytes(&self, n: usize, k: usize, key_bytes: usize) -> usize {
        match self {
            Plan::Bitonic(plan) => BitonicWorkspace::new(plan, k as u32, key_bytes).bytes,
            Plan::BlockSort => BlockSortWorkspace::new(n, key_bytes).bytes,
            Plan::Heap(plan) => HeapWorkspace::new(plan, k as u32, key_bytes).bytes,
            Plan::Radix(plan) => RadixWorkspace::new(plan, 1, k, key_bytes).bytes,
            Plan::Sample(plan) => SampleTopKWorkspace::new(plan, n, k, key_bytes).bytes,
            Plan::SortChoose(plan) => SortChooseWorkspace::new(plan, n, key_bytes).bytes,
            Plan::Sbp(plan) => SbpWorkspace::new(plan, key_bytes).bytes,
        }
    }
}
