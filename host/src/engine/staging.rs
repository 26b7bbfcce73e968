//! Where a selection that emits its top `k` level by level (radix select, SampleSelect)
//! stages its outputs when they are sorted afterwards, and the sort that orders them.

use super::sort::Pairs;
use crate::error::Result;
use crate::gpu::Gpu;
use crate::results::TopK;
use crate::workspace::WorkspaceCarver;
use crate::{Order, SelectKey};

/// Where a selection that emits its top `k` level by level (radix select, SampleSelect)
/// puts them when the output is sorted afterwards: the unsorted keys and indices, then the
/// sort's scratch (more than [`MAX_SMALL_SORT_LEN`](crate::MAX_SMALL_SORT_LEN) keys). Empty
/// when the output stays unsorted: the selection writes the output itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutputStaging {
    keys: [usize; 2],
    indices: [usize; 2],
    sorted: bool,
}

impl OutputStaging {
    pub(crate) fn carve(carver: &mut WorkspaceCarver, sorted: bool, k: usize, key_bytes: usize) -> Self {
        let staged = if sorted { k } else { 0 };
        let scratch = if staged > crate::MAX_SMALL_SORT_LEN { k } else { 0 };
        let keys = [carver.region(staged * key_bytes), carver.region(scratch * key_bytes)];
        let indices = [carver.region(staged * 8), carver.region(scratch * 8)];
        Self { keys, indices, sorted }
    }

    /// Where the selection writes its keys and indices (addresses), with the workspace at
    /// `base`.
    pub(crate) fn targets<K: SelectKey>(&self, base: u64, out: &TopK<K>) -> (u64, u64) {
        if self.sorted {
            (base + self.keys[0] as u64, base + self.indices[0] as u64)
        } else {
            (out.values.global_ptr().address(), out.indices.global_ptr().address())
        }
    }
}

impl OutputStaging {
    /// The sort's scratch, with the workspace at `base`.
    pub(crate) fn scratch<K>(&self, base: u64) -> Pairs<K> {
        Pairs::at(base + self.keys[1] as u64, base + self.indices[1] as u64)
    }
}

impl Gpu {
    /// Sorts the `k` staged outputs into `out` (nothing when unsorted). The sort is stable
    /// and the selections emit equal keys in index order, so ties stay lowest index first.
    pub(crate) fn sort_staged<K: SelectKey>(
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
            staging.scratch(base),
            Pairs::at(out.values.global_ptr().address(), out.indices.global_ptr().address()),
            k as u64,
            order,
        )
    }
}
