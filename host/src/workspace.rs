//! Workspaces carved into aligned regions, as CUB's temporary storage is: each plan sizes
//! and places its regions with one function, so the size query and the run cannot disagree.

/// Workspace regions start on this boundary (as CUB's temporary storage does).
pub(crate) const WORKSPACE_ALIGN: usize = 256;

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
