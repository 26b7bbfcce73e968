//! Workspaces carved into aligned regions, as CUB's temporary storage is: each plan sizes
//! and places its regions with one function, so the size query and the run cannot disagree.

use crate::error::{Error, Result};

/// The most keys one array (or one batch of rows) may hold: 2^56. No device holds that
/// many bytes, and every workspace size of so many keys (a few times `n · (key + index)`
/// bytes at most) stays far inside 64 bits, so the plans' arithmetic cannot overflow.
pub(crate) const MAX_KEYS: usize = 1 << 56;

/// Checks `n` keys against [`MAX_KEYS`] before a plan computes sizes from it.
pub(crate) fn check_key_count(n: usize) -> Result<()> {
    if n > MAX_KEYS {
        return Err(Error::invalid(format!("{n} keys: more than any device holds (at most 2^56)")));
    }
    Ok(())
}

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
