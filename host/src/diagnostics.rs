//! Measurement and self-test: the read floor every benchmark divides by ([`read_pass`]),
//! and the probe kernels of `gpu-select-kernels` (one per group of device-layer primitives),
//! which return what every thread saw. The test suite compares that with a CPU model on
//! whatever backend is present, so the emulator and a GPU answer the same assertions.

use gpu_select_kernels::entry::{KernelId, PROBE_GLOBAL_ATOMICS, PROBE_INDICES, PROBE_SHARED, PROBE_WARP};
pub use gpu_select_kernels::probe::{GLOBAL_SCRATCH_WORDS, PROBE_SLOTS};
use gpu_select_kernels::probe::{ProbeParams, SharedProbeLayout};

use crate::api::{FlatIndex, VectorComponent, Vectors};
pub use crate::bandwidth::{queue_read_pass, read_pass};
use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};

/// Which probe to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Thread, block and grid indices, lane and warp ids, lane masks.
    Indices,
    /// Shuffles, votes, match, warp reductions and scans.
    WarpCollectives,
    /// Shared memory across barriers and shared atomics.
    SharedMemory,
    /// Global atomics and fences.
    GlobalAtomics,
}

/// What a probe run returns.
#[derive(Debug)]
pub struct ProbeOutput {
    /// [`PROBE_SLOTS`] values per thread, threads in launch order.
    pub slots: Vec<u64>,
    /// The scratch words after the run (global-atomics probe).
    pub scratch: Vec<u32>,
}

impl ProbeOutput {
    /// The slots of thread `thread` (linear over the grid).
    pub fn thread(&self, thread: usize) -> &[u64] {
        &self.slots[thread * PROBE_SLOTS..(thread + 1) * PROBE_SLOTS]
    }
}

/// Runs `probe` on a grid of `grid` blocks of `block_threads` threads (a multiple of 32),
/// one `input` value per thread.
pub fn run_probe(
    gpu: &Gpu,
    probe: Probe,
    grid: (u32, u32),
    block_threads: u32,
    input: &[u64],
) -> Result<ProbeOutput> {
    if block_threads == 0 || !block_threads.is_multiple_of(32) {
        // The warp probe shuffles and votes over full warps; a partial warp would read lanes
        // that do not exist.
        return Err(Error::invalid(format!(
            "{block_threads} threads per block: probes take whole warps (a multiple of 32)"
        )));
    }
    let threads = grid.0 as usize * grid.1 as usize * block_threads as usize;
    if input.len() != threads {
        return Err(Error::LengthMismatch {
            what: "probe input (one per thread)",
            expected: threads,
            actual: input.len(),
        });
    }
    let input = gpu.upload(input)?;
    let out = gpu.alloc_zeroed::<u64>(threads * PROBE_SLOTS)?;
    let mut initial_scratch = vec![0u32; GLOBAL_SCRATCH_WORDS];
    initial_scratch[16] = u32::MAX;
    // Buffers start 16-byte aligned, so the 64-bit counter at word 20 is 8-byte aligned.
    let scratch = gpu.upload(&initial_scratch)?;
    let params =
        ProbeParams { input: input.global_ptr(), out: out.global_ptr(), scratch: scratch.global_ptr() };
    let (kernel, shared_bytes): (KernelId<ProbeParams>, usize) = match probe {
        Probe::Indices => (PROBE_INDICES, 0),
        Probe::WarpCollectives => (PROBE_WARP, 0),
        Probe::SharedMemory => (PROBE_SHARED, SharedProbeLayout::new(block_threads).bytes),
        Probe::GlobalAtomics => (PROBE_GLOBAL_ATOMICS, 0),
    };
    gpu.launch(kernel, LaunchShape { grid, block_threads, shared_bytes }, params)?;
    let slots = gpu.download(&out)?;
    let scratch = gpu.download(&scratch)?;
    Ok(ProbeOutput { slots, scratch })
}

/// Queues the distances a k-NN search of `index` ranks, every query against every base
/// vector, into `out` (`queries.count() · index.len()`, row after row; similarities
/// negated), with no selection: the distance-tile kernel alone, for measuring the
/// matrix product's rate against a BLAS. Nothing waits.
///
/// ```
/// use gpu_select::{Gpu, Metric, Vectors, diagnostics};
///
/// let gpu = Gpu::emulator();
/// let base = gpu.upload(&[0.0f32, 1.0, 3.0])?;
/// let index = gpu.flat_index(Vectors::new(&base, 3, 1)?, Metric::L2)?;
/// let queries = gpu.upload(&[2.0f32])?;
/// let mut out = gpu.alloc_zeroed::<f32>(3)?;
/// diagnostics::knn_distances(&index, &Vectors::new(&queries, 1, 1)?, &mut out)?;
/// assert_eq!(gpu.download(&out)?, [4.0, 1.0, 1.0]);
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub fn knn_distances<T: VectorComponent>(
    index: &FlatIndex<'_, T>,
    queries: &Vectors<'_, T>,
    out: &mut DeviceBuffer<f32>,
) -> Result<()> {
    index.queue_distances(queries, out)
}

/// How many of `queries` a search of `index` for their `k` nearest searches again: with TF32
/// ([`KnnPrecision::Tf32Reranked`](crate::KnnPrecision::Tf32Reranked)) those it cannot prove
/// from its candidates (searched again in `f32`); a filtered `f32` search
/// ([`SearchPlan::filters`](crate::SearchPlan::filters)) those whose pairs within their bound
/// overflow their row (searched again unfiltered); else 0. Runs the search (without the
/// second one) and waits for it.
///
/// ```
/// use gpu_select::{Gpu, KnnPrecision, Metric, Vectors, diagnostics};
///
/// let gpu = Gpu::emulator();
/// // Values TF32 cannot tell apart (1 + j · 2^-20 all round to 1.0).
/// let base: Vec<f32> = (0..100).map(|j| 1.0 + j as f32 / 1_048_576.0).collect();
/// let index = gpu.upload_flat_index(&base, 1, Metric::InnerProduct)?;
/// let index = index.with_precision(KnnPrecision::Tf32Reranked)?;
/// let queries = gpu.upload(&[1.0f32, 3.0])?;
/// assert_eq!(diagnostics::knn_unproven(&index, &Vectors::new(&queries, 2, 1)?, 5)?, 2);
/// # Ok::<(), gpu_select::Error>(())
/// ```
pub fn knn_unproven<T: VectorComponent>(
    index: &FlatIndex<'_, T>,
    queries: &Vectors<'_, T>,
    k: usize,
) -> Result<usize> {
    index.unproven_queries(queries, k)
}
