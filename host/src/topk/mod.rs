//! Top-k: the k largest or smallest keys of a device array, with their indices.

mod bitonic;
mod cost;
mod fused;
mod heap;
mod radix;
mod rows;
mod rows_cost;
mod sample;
mod sort_choose;

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::bitonic::MAX_BITONIC_K;
use gpu_select_kernels::topk::heap::MAX_HEAP_K;

use self::bitonic::{BitonicPlan, BitonicWorkspace, PassBudget};
pub use self::fused::{InputFilter, KeyTransform, TopKFusion};
use self::heap::{HeapPlan, HeapWorkspace};
use self::radix::{RadixPlan, RadixWorkspace};
pub use self::rows::{PADDING_INDEX, RowsAlgorithm};
use self::sample::{SampleTopKPlan, SampleTopKWorkspace};
use self::sort_choose::{SortChoosePlan, SortChooseWorkspace};

use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::sort::Pairs;
use crate::{Order, SelectKey};

/// Which top-k algorithm runs. Each variant says where it wins; [`Algorithm::Auto`] picks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Algorithm {
    /// The library chooses: the algorithm with the smallest time predicted by a cost model
    /// (fixed costs, compute per input scaled by the device's multiprocessors, and the
    /// bandwidth bound; fitted to measurements, see [`Gpu::top_k_predicted_ms`]).
    #[default]
    Auto,
    /// Bitonic top-k (Shanbhag, Pirk & Madden): tiles of 2048 keys reduced to their `k`
    /// best by sorting networks (in registers up to k = 256, the block's best in shared
    /// memory above), then the blocks' results reduced again; a bound taken from a sample
    /// skips the tiles that cannot hold a result, so on large inputs it runs near the speed
    /// of one read. Wins for small `k` and large `n`; `k ≤ 1024`, `n < 2^32`.
    Bitonic,
    /// The block bitonic sort of the whole input, then the first `k`: inputs of at most
    /// 2048 keys, any `k`.
    BlockSort,
    /// Radix select: 8-bit digits, most significant first; each level counts its digit,
    /// picks the bucket of the `k`-th best, sends the better buckets straight to the output
    /// and keeps only the target bucket. Any `k` and `n`; its time depends little on `k`
    /// (about three reads of the data for uniform floats), so it wins for large `k`.
    RadixSelect,
    /// SampleSelect with the fused filter (Ribizel & Anzt): each level samples 2048 keys,
    /// splits the candidates into 256 buckets by the sorted sample, sends the buckets
    /// better than the target straight to the output and keeps the target bucket. About two
    /// reads of the data (a count and an oracle-driven filter); repeated keys end it early
    /// (equality buckets). For `k ≤ n/64` (from 32 768 keys) one read instead: a bracket
    /// from the sample keeps the keys below a bound, in input order, and the levels go on
    /// on those. Any `k` and `n`.
    SampleSelect,
    /// Per-thread top-k, the bitonic top-k paper's first baseline: every thread keeps the
    /// best `k` of the inputs it reads in a heap in shared memory, then the bitonic top-k's
    /// reduction passes reduce the heaps' contents. The heaps take `k · (key bytes + 4)`
    /// bytes per thread, so only small `k` keep enough threads busy; it is here to be
    /// measured against, and `Auto` does not pick it. `k ≤ 512` (with 64-bit keys, where a
    /// warp's heaps fit the device's shared memory), `n < 2^32`.
    PerThreadHeap,
    /// Bucket select (Alabi et al.), a baseline of the bitonic top-k paper: the data's
    /// minimum and maximum (one pass), then SampleSelect's levels with 256 buckets of equal
    /// width in key value instead of sampled splitters, each level on the target bucket's
    /// range. Fast on uniform data; skewed data (an outlier far from the rest) leaves most
    /// inputs in one bucket level after level. After 16 levels the buckets split the keys'
    /// ordered bits evenly, so it always ends. Its buffers hold every input: extra memory
    /// `2n` keys and indices. Any `k` and `n`; `Auto` does not pick it.
    BucketSelect,
    /// Sort & choose, the bitonic top-k paper's simplest baseline: a radix sort of every
    /// key with its position (8-bit digits, least significant first, each pass stable),
    /// whose last pass writes only the first `k`. About three reads and two writes of keys
    /// and positions per digit, whatever `k` is: it is here to be measured against, and
    /// `Auto` does not pick it. Any `k`, `n < 2^32`; extra memory `n · (2 · key + 8)` bytes.
    SortAndChoose,
}

impl Algorithm {
    /// Whether the algorithm takes `n` keys and this `k` (1 ≤ k ≤ n): the one place that
    /// knows each algorithm's limits, for the plan and for the cost model.
    fn takes(self, n: u64, k: u64) -> bool {
        match self {
            Algorithm::Bitonic => k <= MAX_BITONIC_K as u64 && n < 1 << 32,
            Algorithm::PerThreadHeap => k <= MAX_HEAP_K as u64 && n < 1 << 32,
            Algorithm::SortAndChoose => n < 1 << 32,
            Algorithm::BlockSort => n <= crate::MAX_SMALL_SORT_LEN as u64,
            Algorithm::Auto | Algorithm::RadixSelect | Algorithm::SampleSelect | Algorithm::BucketSelect => {
                true
            }
        }
    }
}

/// Options of [`Gpu::top_k_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopKOptions {
    /// The largest or the smallest keys.
    pub order: Order,
    /// Which algorithm.
    pub algorithm: Algorithm,
    /// Whether the result is sorted, best first (the default). Unsorted results skip a
    /// final sort where the algorithm does not sort anyway; their order is still the same
    /// every run, and equal keys still come lowest index first.
    pub sorted: bool,
    /// Tuning of [`Algorithm::SampleSelect`] and [`Algorithm::BucketSelect`] (its sample
    /// size, blocks and bracket); `None`: the measured default,
    /// [`SampleSelectPolicy::for_device`](crate::SampleSelectPolicy::for_device).
    pub policy: Option<crate::SampleSelectPolicy>,
}

impl TopKOptions {
    /// `order`, with [`Algorithm::Auto`] and a sorted result.
    pub fn new(order: Order) -> Self {
        Self { order, algorithm: Algorithm::Auto, sorted: true, policy: None }
    }

    /// The same options with another algorithm.
    pub fn with_algorithm(self, algorithm: Algorithm) -> Self {
        Self { algorithm, ..self }
    }

    /// The same options, asking for a sorted (`true`) or unsorted (`false`) result.
    pub fn with_sorted(self, sorted: bool) -> Self {
        Self { sorted, ..self }
    }

    /// The same options with a SampleSelect policy (for [`Algorithm::SampleSelect`] and
    /// [`Algorithm::BucketSelect`]; the others ignore it).
    pub fn with_policy(self, policy: crate::SampleSelectPolicy) -> Self {
        Self { policy: Some(policy), ..self }
    }
}

/// The result of a top-k: `k` keys, best first, and the index of each in the input.
#[derive(Debug)]
pub struct TopK<K> {
    /// The keys. Sorted (unless [`TopKOptions::sorted`] is off): largest first for
    /// [`Order::Largest`], smallest first otherwise.
    pub values: DeviceBuffer<K>,
    /// Index in the input of each key (64-bit).
    pub indices: DeviceBuffer<u64>,
}

/// Workspace regions start on this boundary (as CUB's temporary storage does).
const WORKSPACE_ALIGN: usize = 256;

/// Carves a workspace into aligned regions: each algorithm sizes and places its regions
/// with one function, so the size query and the run cannot disagree.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WorkspaceCarver {
    bytes: usize,
}

impl WorkspaceCarver {
    /// A region of `bytes` bytes: its offset.
    pub(crate) fn region(&mut self, bytes: usize) -> usize {
        let start = self.bytes;
        self.bytes = (start + bytes).div_ceil(WORKSPACE_ALIGN) * WORKSPACE_ALIGN;
        start
    }

    /// Bytes carved so far.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Where a selection that emits its top `k` level by level (radix select, SampleSelect)
/// puts them when the output is sorted afterwards: the unsorted keys and indices, then the
/// sort's scratch (more than [`MAX_SMALL_SORT_LEN`](crate::MAX_SMALL_SORT_LEN) keys). Empty
/// when the output stays unsorted: the selection writes the output itself.
#[derive(Clone, Copy, Debug)]
pub(super) struct OutputStaging {
    keys: [usize; 2],
    indices: [usize; 2],
    sorted: bool,
}

impl OutputStaging {
    pub(super) fn carve(carver: &mut WorkspaceCarver, sorted: bool, k: usize, key_bytes: usize) -> Self {
        let staged = if sorted { k } else { 0 };
        let scratch = if staged > crate::MAX_SMALL_SORT_LEN { k } else { 0 };
        let keys = [carver.region(staged * key_bytes), carver.region(scratch * key_bytes)];
        let indices = [carver.region(staged * 8), carver.region(scratch * 8)];
        Self { keys, indices, sorted }
    }

    /// Where the selection writes its keys and indices (addresses), with the workspace at
    /// `base`.
    pub(super) fn targets<K: SelectKey>(&self, base: u64, out: &TopK<K>) -> (u64, u64) {
        if self.sorted {
            (base + self.keys[0] as u64, base + self.indices[0] as u64)
        } else {
            (out.values.global_ptr().address(), out.indices.global_ptr().address())
        }
    }
}

impl Gpu {
    /// Sorts the `k` staged outputs into `out` (nothing when unsorted). The sort is stable
    /// and the selections emit equal keys in index order, so ties stay lowest index first.
    pub(super) fn sort_staged<K: SelectKey>(
        &self,
        staging: &OutputStaging,
        base: u64,
        out: &mut TopK<K>,
        k: usize,
        order: Order,
    ) -> Result<()> {
        if !staging.sorted {
            return Ok(());
        }
        let at = |offset: usize| base + offset as u64;
        self.launch_sort_pairs(
            Pairs::<K>::at(at(staging.keys[0]), at(staging.indices[0])),
            Pairs::at(at(staging.keys[1]), at(staging.indices[1])),
            Pairs::at(out.values.global_ptr().address(), out.indices.global_ptr().address()),
            k as u64,
            order,
        )
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
        let mut carver = WorkspaceCarver::default();
        let keys = carver.region(n * key_bytes);
        let indices = carver.region(n * 8);
        Self { keys, indices, bytes: carver.bytes() }
    }
}

impl Gpu {
    /// The `k` largest (or smallest) keys of `data` and their indices, best first.
    ///
    /// * Order: the total order of [`Key`](crate::Key): NaN above +inf (so `Largest` returns
    ///   NaNs first), -0.0 below +0.0.
    /// * Ties: deterministic, equal keys by lower index first; the same input gives the same
    ///   output every run.
    /// * Errors: [`Error::EmptyInput`]; [`Error::KOutOfRange`] for `k = 0`, `k > n`, or `k`
    ///   over the chosen algorithm's bound; [`Error::InvalidArgument`] for an input the
    ///   chosen algorithm does not take (see [`Algorithm`]).
    /// * Waits: for the outputs' allocation only, except where SampleSelect runs (chosen, or
    ///   by `Auto` for large `k`): it reads back whether its levels have found the rank,
    ///   once for most inputs.
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
        // Nothing zeroed: the run clears what its kernels count into, and writes every output.
        // The workspace goes back to the pool in stream order, after the kernels.
        let mut workspace = self.alloc_uninit::<u8>(bytes)?;
        let mut out = TopK { values: self.alloc_uninit::<K>(k)?, indices: self.alloc_uninit::<u64>(k)? };
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
        Ok(self.plan_top_k(n, k, size_of::<K>(), options)?.workspace_bytes(n, k, size_of::<K>()))
    }

    /// Top-k into caller-provided outputs (`out.values` and `out.indices` of length `k`),
    /// with a caller-provided workspace of at least [`Gpu::top_k_workspace_bytes`]
    /// ([`Error::WorkspaceTooSmall`] otherwise). Queues the work without waiting, except on
    /// the SampleSelect and bucket-select paths, which read back whether their levels found
    /// the rank (once for most inputs: they launch the levels they expect to need, then
    /// check); a download of `out` waits for the rest.
    pub fn top_k_into<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        k: usize,
        options: &TopKOptions,
        workspace: &mut DeviceBuffer<u8>,
        out: &mut TopK<K>,
    ) -> Result<()> {
        data.check_gpu(self, "the data")?;
        self.check_outputs(out, k, ["top-k output values", "top-k output indices"])?;
        let plan = self.plan_top_k(data.len(), k, size_of::<K>(), options)?;
        let needed = plan.workspace_bytes(data.len(), k, size_of::<K>());
        self.check_workspace(workspace, needed)?;
        let base = workspace.global_ptr().address();
        match plan {
            Plan::Bitonic(plan) => {
                let fusion = gpu_select_kernels::topk::fusion::Fusion::identity();
                self.run_bitonic(data, k as u32, options.order, fusion, &plan, base, out)
            }
            Plan::BlockSort => self.run_block_sort(data, k, options.order, base, out),
            Plan::Heap(plan) => self.run_heap(data, k as u32, options.order, &plan, base, out),
            Plan::Radix(plan) => self.run_radix(data, k, options.order, &plan, base, out),
            Plan::Sample(plan) => self.run_sample_top_k(data, k, options.order, &plan, base, out),
            Plan::SortChoose(plan) => self.run_sort_choose(data, k, options.order, &plan, base, out),
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

    /// The cost model's predicted time, in milliseconds, of a top-k of `n` keys of type `K`
    /// with `algorithm` on this device; for [`Algorithm::Auto`], of the algorithm it picks.
    /// `None` when the algorithm does not take the shape (or the backend is the emulator,
    /// whose speed says nothing about a GPU's).
    ///
    /// ```
    /// use gpu_select::{Algorithm, Gpu};
    ///
    /// let gpu = Gpu::emulator();
    /// assert_eq!(gpu.top_k_predicted_ms::<f32>(1 << 28, 32, Algorithm::Bitonic), None);
    /// ```
    pub fn top_k_predicted_ms<K: SelectKey>(&self, n: usize, k: usize, algorithm: Algorithm) -> Option<f64> {
        if self.backend() == crate::BackendKind::Emulator || k == 0 || k > n {
            return None;
        }
        let algorithm = self.resolve(algorithm, n, k, size_of::<K>());
        cost::predict_ms(algorithm, n as u64, k as u64, size_of::<K>(), self.cost_device())
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

    fn plan_top_k(&self, n: usize, k: usize, key_bytes: usize, options: &TopKOptions) -> Result<Plan> {
        if n == 0 {
            return Err(Error::EmptyInput);
        }
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
                } else if k as u64 <= n as u64 / crate::select::TOP_K_BRACKET_DIVISOR {
                    flags::BRACKET
                } else {
                    0
                };
                let mut select_options = crate::SelectOptions::new(options.order);
                select_options.policy = options.policy;
                let select = self.plan_select(n, &select_options, flags::EMIT | extra)?;
                Ok(Plan::Sample(SampleTopKPlan { select, sort_output: options.sorted && k > 1 }))
            }
            Algorithm::BlockSort if takes => Ok(Plan::BlockSort),
            Algorithm::PerThreadHeap => {
                let limits = self.limits();
                let plan =
                    HeapPlan::new(n as u64, k as u64, key_bytes, budget, limits.max_shared_bytes_per_block)?;
                Ok(Plan::Heap(plan))
            }
            Algorithm::SortAndChoose => Ok(Plan::SortChoose(SortChoosePlan::new(n as u64, multiprocessors)?)),
            Algorithm::BlockSort => Err(Error::invalid(format!(
                "Algorithm::BlockSort takes at most {} keys; the input has {n}",
                crate::MAX_SMALL_SORT_LEN
            ))),
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

enum Plan {
    Bitonic(BitonicPlan),
    BlockSort,
    Heap(HeapPlan),
    Radix(RadixPlan),
    Sample(SampleTopKPlan),
    SortChoose(SortChoosePlan),
}

impl Plan {
    /// Workspace bytes of the plan: the one source for the size query and the run's check.
    fn workspace_bytes(&self, n: usize, k: usize, key_bytes: usize) -> usize {
        match self {
            Plan::Bitonic(plan) => BitonicWorkspace::new(plan, k as u32, key_bytes).bytes,
            Plan::BlockSort => BlockSortWorkspace::new(n, key_bytes).bytes,
            Plan::Heap(plan) => HeapWorkspace::new(plan, k as u32, key_bytes).bytes,
            Plan::Radix(plan) => RadixWorkspace::new(plan, k, key_bytes).bytes,
            Plan::Sample(plan) => SampleTopKWorkspace::new(plan, n, k, key_bytes).bytes,
            Plan::SortChoose(plan) => SortChooseWorkspace::new(plan, n, key_bytes).bytes,
        }
    }
}
