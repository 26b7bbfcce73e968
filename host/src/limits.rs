//! What the library needs to know about a device: read once when a handle opens it.

/// What the library needs to know about the device it runs on.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceLimits {
    /// Device name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability, e.g. `(9, 0)`.
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Most threads in one block.
    pub max_threads_per_block: u32,
    /// Most dynamic shared memory one block may opt in to.
    pub max_shared_bytes_per_block: usize,
    /// L2 cache size.
    pub l2_bytes: usize,
    /// Device memory.
    pub total_memory_bytes: usize,
    /// Peak memory bandwidth from the memory clock and bus width (the datasheet figure;
    /// benchmarks measure the real one).
    pub peak_bandwidth_bytes_per_s: f64,
}
