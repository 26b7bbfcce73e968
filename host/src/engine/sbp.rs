//! Split-bucket partition (SBP) top-k, the host side: the passes' shapes, the workspace and
//! the launch sequence (kernel docs: `gpu_select_kernels::topk::sbp`).

use gpu_select_kernels::params::GlobalPtr;
use gpu_select_kernels::topk::sbp::{
    MAX_SBP_CUTOFF, MAX_SBP_K, MIN_SBP_CUTOFF, SBP_THREADS, SBP_TILE, SbpLayout, SbpParams, SbpTreeLayout,
    TREE_SAMPLE, TREE_SPLITTERS, TREE_THREADS,
};

use super::sort::Pairs;
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::results::Selection;
use crate::tuning::Tuning;
use crate::workspace::WorkspaceCarver;
use crate::{Order, SelectKey};

/// One pass: `len` inputs in tiles, each tile's candidates at `tile · cutoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pass {
    len: u64,
    tiles: u64,
    cutoff: u32,
}

/// The shape of an SBP top-k of `n` keys: its passes (the last one tile, cutoff `k`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SbpPlan {
    k: u32,
    /// Whether the first pass partitions by the sampled search tree.
    tree: bool,
    /// The sample's rank of the tree's top splitter.
    tree_top: u32,
    passes: Vec<Pass>,
    sort_output: bool,
}

impl SbpPlan {
    /// The plan, or an error when `k` is past the algorithm's reach.
    pub(crate) fn new(n: u64, k: u64, tree: bool, sort_output: bool, tuning: &Tuning) -> Result<Self> {
        let name = if tree { "Algorithm::SbpTree" } else { "Algorithm::SbpRadix" };
        if k > MAX_SBP_K as u64 {
            return Err(Error::k_out_of_range(
                k as usize,
                1,
                MAX_SBP_K as usize,
                format!("{name} takes k ≤ {MAX_SBP_K} (Auto and RadixSelect take any k)"),
            ));
        }
        let cutoff = cutoff_for(k as u32, tuning);
        let mut passes = Vec::new();
        let mut len = n;
        loop {
            let tiles = len.div_ceil(SBP_TILE);
            if tiles == 1 {
                passes.push(Pass { len, tiles, cutoff: k as u32 });
                break;
            }
            passes.push(Pass { len, tiles, cutoff });
            len = tiles * cutoff as u64;
        }
        // A tile's `k`-th best is near the sample's rank `k · TREE_SAMPLE / SBP_TILE`: the
        // splitters cover `tree_spread` times that and three of its standard deviations, so
        // that a tile rarely holds fewer than `k` keys below the top splitter (such a tile
        // narrows the catch-all bucket by radix digits).
        let covered = (k * TREE_SAMPLE).div_ceil(SBP_TILE) * tuning.sbp_tree_spread as u64;
        let tree_top = (covered + 3 * covered.isqrt() + 4).min(TREE_SAMPLE - 1);
        Ok(Self { k: k as u32, tree, tree_top: tree_top as u32, passes, sort_output })
    }

    /// Launches the plan makes: its passes, the tree's, and the sort.
    #[cfg(test)]
    fn launches(&self) -> usize {
        self.passes.len() + usize::from(self.tree) + usize::from(self.sort_output)
    }
}

/// The cutoff of every pass but the last: `k` plus the tuning's slack, rounded up to a power
/// of two (the next pass finds a segment by a shift), at least the tuning's least and the
/// kernel's ([`MIN_SBP_CUTOFF`]: a tile spans at most one input segment per thread).
fn cutoff_for(k: u32, tuning: &Tuning) -> u32 {
    let slack = (k as u64 * tuning.sbp_cutoff_slack_percent as u64).div_ceil(100) as u32;
    let least = tuning.sbp_min_cutoff.max(MIN_SBP_CUTOFF).next_power_of_two();
    (k + slack).next_power_of_two().max(least).clamp(k.next_power_of_two(), MAX_SBP_CUTOFF)
}

/// Where an SBP top-k keeps its candidates in a workspace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SbpWorkspace {
    keys: [usize; 2],
    indices: [usize; 2],
    counts: [usize; 2],
    splitters: usize,
    /// The last pass's `k` keys and indices when they are sorted afterwards.
    final_keys: usize,
    final_indices: usize,
    /// A selection's sorted `k` keys and indices (else empty).
    out_keys: usize,
    out_indices: usize,
    pub(crate) bytes: usize,
}

impl SbpWorkspace {
    pub(crate) fn new(plan: &SbpPlan, key_bytes: usize) -> Self {
        Self::with_output(plan, key_bytes, 0)
    }

    /// The workspace with room for `outputs` sorted keys and indices after it (selection).
    fn with_output(plan: &SbpPlan, key_bytes: usize, outputs: usize) -> Self {
        let mut carver = WorkspaceCarver::default();
        // Pass p writes buffer p % 2 (the last pass writes elsewhere); each pass at least
        // quarters its input, so the first pass of each parity writes the most.
        let first = |parity: usize| {
            plan.passes[..plan.passes.len() - 1]
                .get(parity)
                .map_or((0, 0), |pass| ((pass.tiles * pass.cutoff as u64) as usize, pass.tiles as usize))
        };
        let (candidates, tiles) = ([first(0).0, first(1).0], [first(0).1, first(1).1]);
        let keys = candidates.map(|count| carver.region(count * key_bytes));
        let indices = candidates.map(|count| carver.region(count * 8));
        let counts = tiles.map(|count| carver.region(count * 4));
        let splitters = carver.region(if plan.tree { TREE_SPLITTERS * 8 } else { 0 });
        let staged = if plan.sort_output { plan.k as usize } else { 0 };
        let final_keys = carver.region(staged * key_bytes);
        let final_indices = carver.region(staged * 8);
        let out_keys = carver.region(outputs * key_bytes);
        let out_indices = carver.region(outputs * 8);
        Self {
            keys,
            indices,
            counts,
            splitters,
            final_keys,
            final_indices,
            out_keys,
            out_indices,
            bytes: carver.bytes(),
        }
    }
}

impl Gpu {
    /// Queues the SBP top-k `plan` describes on `data` into `out`, with the workspace at
    /// `workspace_base`: the tree (if any), one partition launch per pass, and the sort of
    /// the last pass's `k` (which come in index order) when sorted.
    pub(crate) fn run_sbp<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        order: Order,
        plan: &SbpPlan,
        workspace_base: u64,
        out: Pairs<K>,
    ) -> Result<()> {
        let layout = SbpWorkspace::new(plan, size_of::<K>());
        let at = |offset: usize| workspace_base + offset as u64;
        let k = plan.k;
        // Only a plan of several passes builds the tree (one tile goes straight to its `k`).
        let tree = plan.tree && plan.passes.len() > 1;
        let splitters = if tree { GlobalPtr::from_address(at(layout.splitters)) } else { GlobalPtr::null() };
        let mut params = SbpParams {
            keys_in: data.global_ptr(),
            indices_in: GlobalPtr::null(),
            counts_in: GlobalPtr::null(),
            splitters,
            keys_out: GlobalPtr::null(),
            indices_out: GlobalPtr::null(),
            counts_out: GlobalPtr::null(),
            len: data.len() as u64,
            k,
            cutoff: 0,
            cutoff_in_log2: 0,
            order: order.to_raw(),
            tree_top: plan.tree_top,
            reserved: 0,
        };
        if tree {
            let shape = LaunchShape {
                grid: (1, 1),
                block_threads: TREE_THREADS,
                shared_bytes: SbpTreeLayout::<K::Bits>::new().bytes,
            };
            self.launch(K::SBP_TREE, shape, params)?;
        }
        let shared_bytes = SbpLayout::<K::Bits>::new().bytes;
        let (staged_keys, staged_indices) = if plan.sort_output {
            (at(layout.final_keys), at(layout.final_indices))
        } else {
            (out.keys.address(), out.indices.address())
        };
        for (p, pass) in plan.passes.iter().enumerate() {
            let last = p + 1 == plan.passes.len();
            params.len = pass.len;
            params.cutoff = pass.cutoff;
            if p > 0 {
                params.splitters = GlobalPtr::null();
            }
            if last {
                params.keys_out = GlobalPtr::from_address(staged_keys);
                params.indices_out = GlobalPtr::from_address(staged_indices);
                params.counts_out = GlobalPtr::null();
            } else {
                params.keys_out = GlobalPtr::from_address(at(layout.keys[p % 2]));
                params.indices_out = GlobalPtr::from_address(at(layout.indices[p % 2]));
                params.counts_out = GlobalPtr::from_address(at(layout.counts[p % 2]));
            }
            let shape =
                LaunchShape { grid: (pass.tiles as u32, 1), block_threads: SBP_THREADS, shared_bytes };
            // The tree form's first pass has a kernel of its own (its splitters may let it
            // drop most keys at load).
            let kernel = if tree && p == 0 { K::SBP_PARTITION_TREE } else { K::SBP_PARTITION };
            self.launch(kernel, shape, params)?;
            // The next pass reads this one's segments.
            params.keys_in = params.keys_out;
            params.indices_in = params.indices_out;
            params.counts_in = params.counts_out;
            params.cutoff_in_log2 = pass.cutoff.trailing_zeros();
        }
        if plan.sort_output {
            let staged = Pairs::at(staged_keys, staged_indices);
            self.launch_block_sort(staged, k, 1, order, out)?;
        }
        Ok(())
    }
}

/// The farthest rank from either end that SBP selection takes: its workspace is planned
/// before the rank is known.
pub(crate) const MAX_SBP_SELECT_K: u64 = 128;

/// The `k` of the SBP top-k behind selecting rank `rank` (from 0) of `n` in `order`, and the
/// order it runs in: the `rank + 1` best near the wanted end, else the `n − rank` best from
/// the other; `None` past [`MAX_SBP_SELECT_K`] from both ends.
fn selection_top_k(n: u64, rank: u64, order: Order) -> Option<(u64, Order)> {
    let other = match order {
        Order::Smallest => Order::Largest,
        Order::Largest => Order::Smallest,
    };
    if rank < MAX_SBP_SELECT_K {
        Some((rank + 1, order))
    } else if n - rank <= MAX_SBP_SELECT_K {
        Some((n - rank, other))
    } else {
        None
    }
}

/// Workspace bytes of an SBP selection of `n` keys, whatever the rank: the plan of the
/// largest `k` it runs (cutoffs grow with `k`) and that many sorted keys and indices.
pub(crate) fn selection_workspace_bytes(n: u64, key_bytes: usize, tuning: &Tuning) -> usize {
    let k = MAX_SBP_SELECT_K.min(n.max(1));
    let plan = SbpPlan::new(n.max(1), k, true, true, tuning).expect("k within the kernels' reach");
    SbpWorkspace::with_output(&plan, key_bytes, k as usize).bytes
}

impl Gpu {
    /// SBP selection (the paper's `S_RdSP`, `S_StSPT`): the key of rank `rank` (from 0) in
    /// `order`, as the last of the sorted top-k that ends at it, from whichever end is
    /// nearer. Waits for the result.
    pub(crate) fn run_sbp_selection<K: SelectKey>(
        &self,
        data: &DeviceBuffer<K>,
        rank: usize,
        order: Order,
        tree: bool,
        workspace_base: u64,
    ) -> Result<Selection<K>> {
        let n = data.len() as u64;
        super::sample_select::check_rank(data.len(), rank)?;
        let name = if tree { "SelectAlgorithm::SbpTree" } else { "SelectAlgorithm::SbpRadix" };
        let (k, run_order) = selection_top_k(n, rank as u64, order).ok_or_else(|| {
            Error::k_out_of_range(
                rank,
                0,
                data.len() - 1,
                format!(
                    "{name} takes ranks below {MAX_SBP_SELECT_K} from either end (0..{MAX_SBP_SELECT_K} or \
                     {}..{n}); SampleSelect takes any",
                    n.saturating_sub(MAX_SBP_SELECT_K)
                ),
            )
        })?;
        let plan = SbpPlan::new(n, k, tree, true, self.tuning())?;
        let key_bytes = size_of::<K>();
        let layout = SbpWorkspace::with_output(&plan, key_bytes, k as usize);
        let (keys, indices) =
            (workspace_base + layout.out_keys as u64, workspace_base + layout.out_indices as u64);
        self.run_sbp(data, run_order, &plan, workspace_base, Pairs::at(keys, indices))?;
        let mut value = [K::default()];
        self.copy_from_address(keys + (k - 1) * key_bytes as u64, &mut value)?;
        Ok(Selection { value: value[0], rank: rank as u64, passes: plan.passes.len() as u32 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_shrink_to_one_tile_and_cutoffs_suit_the_kernel() {
        let tuning = Tuning::default();
        for n in [1u64, 2048, SBP_TILE, SBP_TILE + 1, 1 << 24, 1 << 28, 3 << 31] {
            for k in [1u64, 8, 100, 128, 1000, MAX_SBP_K as u64] {
                if k > n {
                    continue;
                }
                for tree in [false, true] {
                    let plan = SbpPlan::new(n, k, tree, true, &tuning).unwrap();
                    let (last, rest) = plan.passes.split_last().unwrap();
                    assert_eq!((last.tiles, last.cutoff), (1, k as u32), "{n} {k}");
                    for pass in rest {
                        assert!(pass.cutoff.is_power_of_two() && pass.cutoff as u64 >= k);
                        assert!(pass.cutoff <= MAX_SBP_CUTOFF && pass.tiles < 1 << 31);
                    }
                    // Each pass at least quarters what the next reads.
                    for pair in plan.passes.windows(2) {
                        assert!(pair[1].len * 4 <= pair[0].tiles * SBP_TILE, "{n} {k}: {:?}", plan.passes);
                    }
                    assert!(plan.launches() <= plan.passes.len() + 2);
                    assert!((plan.tree_top as u64) < TREE_SAMPLE);
                }
            }
        }
        assert!(SbpPlan::new(1 << 20, MAX_SBP_K as u64 + 1, false, true, &tuning).is_err());
    }

    #[test]
    fn selection_runs_from_the_nearer_end_and_its_workspace_covers_every_rank() {
        use Order::{Largest, Smallest};
        assert_eq!(selection_top_k(1000, 0, Smallest), Some((1, Smallest)));
        assert_eq!(selection_top_k(1000, 127, Largest), Some((128, Largest)));
        assert_eq!(selection_top_k(1000, 999, Smallest), Some((1, Largest)));
        assert_eq!(selection_top_k(1000, 872, Smallest), Some((128, Largest)));
        assert_eq!(selection_top_k(1000, 500, Smallest), None);
        assert_eq!(selection_top_k(100, 99, Smallest), Some((100, Smallest)));
        let tuning = Tuning::default();
        for n in [1u64, 100, 1 << 20] {
            let bytes = selection_workspace_bytes(n, 4, &tuning);
            for k in [1, n.min(MAX_SBP_SELECT_K)] {
                for tree in [false, true] {
                    let plan = SbpPlan::new(n, k, tree, true, &tuning).unwrap();
                    let needed = SbpWorkspace::with_output(&plan, 4, k as usize).bytes;
                    assert!(needed <= bytes, "{n} {k} {tree}");
                }
            }
        }
    }
}
