//! Exact k-NN over a base kept in host memory and streamed through the GPU in chunks
//! (`Gpu::streamed_index`): a base larger than the GPU's memory when asked for. The
//! neighbours of a few queries are checked against a brute force on the CPU's threads.
//!
//! `cargo run --release --example knn_streamed` (a 1 GB base on a GPU, 1 MB on the
//! emulator); `KNN_STREAMED_GB=88` for 88 GB (more than an 80 GB GPU holds; the host needs
//! that much memory and more).

use std::time::Instant;

use gpu_select::{BackendKind, Gpu, Metric, Tuning, Vectors};
use rand::{RngExt, SeedableRng, rngs::StdRng};

fn main() -> gpu_select::Result<()> {
    let gpu = Gpu::from_env()?;
    println!("backend: {}", gpu.describe());
    let on_gpu = gpu.backend() == BackendKind::Cuda;
    // The emulator streams chunks of 256 KB, so that its small base crosses in several.
    let gpu = if on_gpu {
        gpu
    } else {
        gpu.with_tuning(Tuning { knn_stream_chunk_bytes: 1 << 18, ..Tuning::default() })
    };
    let gigabytes: f64 = std::env::var("KNN_STREAMED_GB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if on_gpu { 1.0 } else { 0.001 });
    let (dim, k) = (128usize, 10usize);
    let count = (gigabytes * 1e9 / (dim * 4) as f64) as usize;
    let query_count = if on_gpu { 1000 } else { 8 };

    let started = Instant::now();
    let base = random_vectors(count, dim);
    let queries = {
        let mut rng = StdRng::seed_from_u64(u64::MAX);
        (0..query_count * dim).map(|_| rng.random::<f32>()).collect::<Vec<f32>>()
    };
    let base_bytes = count * dim * 4;
    let device_bytes = gpu.limits().total_memory_bytes;
    let against_device = if on_gpu {
        format!(
            " ({:.2}x the device's {:.2} GB)",
            base_bytes as f64 / device_bytes as f64,
            device_bytes as f64 / 1e9
        )
    } else {
        String::new()
    };
    println!(
        "base: {count} vectors x {dim} f32 = {:.3} GB in host memory{against_device}, made in {:.1} s",
        base_bytes as f64 / 1e9,
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let index = gpu.streamed_index(&base, dim, Metric::L2)?;
    println!(
        "index: pinned {} in {:.2} s; {} chunks a search",
        index.is_pinned(),
        started.elapsed().as_secs_f64(),
        index.chunks()
    );
    let uploaded = gpu.upload(&queries)?;
    let mut found = (Vec::new(), Vec::new());
    for call in 0..2 {
        let started = Instant::now();
        let neighbours = index.search(Vectors::new(&uploaded, query_count, dim)?, k)?;
        found = (gpu.download(&neighbours.distances)?, gpu.download(&neighbours.indices)?);
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "search {call}: {query_count} queries, k = {k}: {:.1} ms ({:.1} GB/s of base streamed)",
            seconds * 1e3,
            base_bytes as f64 / seconds / 1e9
        );
    }

    // Four queries against a brute force in f64 on the CPU's threads: each neighbour's
    // distance right, and none farther than the exact k-th (up to f32 rounding).
    let started = Instant::now();
    for q in 0..4.min(query_count) {
        let query = &queries[q * dim..(q + 1) * dim];
        let exact = nearest_on_cpu(&base, dim, query, k);
        let kth = exact[k - 1].0;
        let norm = |v: &[f32]| v.iter().map(|&x| x as f64 * x as f64).sum::<f64>();
        for rank in 0..k {
            let (distance, index) = (found.0[q * k + rank] as f64, found.1[q * k + rank] as usize);
            let vector = &base[index * dim..(index + 1) * dim];
            let truth = squared_l2(query, vector);
            let slack = 1e-5 * (norm(query) + norm(vector));
            assert!((distance - truth).abs() <= slack, "query {q} rank {rank}: {distance} against {truth}");
            assert!(
                truth <= kth + 2.0 * slack,
                "query {q} rank {rank}: index {index} is not among the {k} nearest"
            );
        }
    }
    println!("checked 4 queries against the CPU's brute force in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `count` vectors of uniform components in [0, 1), made on every CPU thread.
fn random_vectors(count: usize, dim: usize) -> Vec<f32> {
    let mut values = vec![0.0f32; count * dim];
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
    let part = (count.div_ceil(threads) * dim).max(dim);
    std::thread::scope(|scope| {
        for (t, chunk) in values.chunks_mut(part).enumerate() {
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t as u64);
                chunk.iter_mut().for_each(|v| *v = rng.random::<f32>());
            });
        }
    });
    values
}

fn squared_l2(x: &[f32], y: &[f32]) -> f64 {
    x.iter().zip(y).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum()
}

/// The `k` nearest of `base` to `query` by squared L2 in f64: `(distance, index)`, nearest first.
fn nearest_on_cpu(base: &[f32], dim: usize, query: &[f32], k: usize) -> Vec<(f64, usize)> {
    let count = base.len() / dim;
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
    let part = count.div_ceil(threads).max(1);
    let mut best: Vec<(f64, usize)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..count.div_ceil(part))
            .map(|t| {
                scope.spawn(move || {
                    let mut best: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
                    for i in t * part..((t + 1) * part).min(count) {
                        let d = squared_l2(query, &base[i * dim..(i + 1) * dim]);
                        if best.len() < k || d < best[k - 1].0 {
                            let at = best.partition_point(|&(e, _)| e <= d);
                            best.insert(at, (d, i));
                            best.truncate(k);
                        }
                    }
                    best
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    best.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    best.truncate(k);
    best
}
