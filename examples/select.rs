//! The median and the 99th percentile of 16 M floats (64 K on the emulator), exactly, and an
//! approximate median that reports its exact rank.
//!
//! `cargo run --release --example select`. It opens the GPU when there is one, else the
//! emulator, says which, times opening the device and the first call (which loads the
//! kernels) apart from a second one, and checks the answers against a sort on the CPU.

use std::time::Instant;

use gpu_select::{BackendKind, Gpu, Order, SelectAlgorithm, SelectOptions, reference};
use rand::{RngExt, SeedableRng, rngs::StdRng};

fn main() -> gpu_select::Result<()> {
    let opened = Instant::now();
    let gpu = Gpu::from_env()?;
    let open_ms = opened.elapsed().as_secs_f64() * 1e3;
    println!("backend: {}", gpu.describe());

    let n = if gpu.backend() == BackendKind::Cuda { 1 << 24 } else { 1 << 16 };
    let mut rng = StdRng::seed_from_u64(3);
    // Latencies in ms: a log-normal-ish body with a long tail.
    let keys: Vec<f32> =
        (0..n).map(|_| (4.0 * rng.random::<f32>()).exp() * (1.0 + rng.random::<f32>())).collect();
    let data = gpu.upload(&keys)?;
    let (median_rank, p99_rank) = (n / 2, n * 99 / 100);

    let exact = SelectOptions::default();
    let mut calls_ms = Vec::new();
    let mut median = 0.0;
    for _ in 0..2 {
        let started = Instant::now();
        median = gpu.select(&data, median_rank, &exact)?.value;
        calls_ms.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let p99 = gpu.select(&data, p99_rank, &exact)?.value;
    let approximate = exact.with_algorithm(SelectAlgorithm::Approximate { buckets: 1024 });
    let approx = gpu.select(&data, median_rank, &approximate)?;

    println!("opened the device in {open_ms:.1} ms");
    let loads = if gpu.backend() == BackendKind::Cuda { " (loads the kernels)" } else { "" };
    println!("median of {n} f32: first call {:.1} ms{loads}, second {:.3} ms", calls_ms[0], calls_ms[1]);
    println!("median = {median}, 99th percentile = {p99}");
    println!(
        "approximate median = {} at rank {} ({:.3} % of n from the median's rank)",
        approx.value,
        approx.rank,
        100.0 * (approx.rank as f64 - median_rank as f64).abs() / n as f64
    );
    let sorted = reference::sort_pairs(&keys, Order::Smallest);
    assert_eq!(median, sorted[median_rank].0, "the median differs from the CPU's");
    assert_eq!(p99, sorted[p99_rank].0, "the 99th percentile differs from the CPU's");
    assert_eq!(approx.value, sorted[approx.rank as usize].0, "the approximate median's rank is not exact");
    println!("matches the CPU's sort");
    Ok(())
}
