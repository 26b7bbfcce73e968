//! Benchmarks, timed with CUDA events on the library's stream (`Gpu::time_ms`), reported by
//! criterion and summarised in `docs/results/<gpu>-<date>.{json,md}` with the ratio of each
//! case to the read floor of the same bytes, measured in the same run.
//!
//! `cargo xtask bench [FILTER]` runs it. Without a CUDA device it says so, runs a short demo
//! on the emulator and writes no results.

use std::fmt::Write as _;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use gpu_select::diagnostics::{knn_distances, knn_unproven, queue_read_pass, read_pass};
use gpu_select::{
    Algorithm, BackendKind, DeviceBuffer, FlatIndex, Gpu, InputFilter, KeyTransform, Keys, KnnPrecision,
    Metric, MultiselectAlgorithm, Order, QuantileOptions, RowsKernelFamily, SampleSelectPolicy,
    SelectAlgorithm, SelectKey, SelectOptions, TopK, TopKOptions, TopKOut, TopKPlan, Tuning, Vectors,
};

/// One measured case of the summary.
struct Case {
    group: &'static str,
    name: String,
    elements: u64,
    bytes: u64,
    median_ms: f64,
    floor_ms: f64,
    /// The cost model's prediction (top-k cases).
    predicted_ms: Option<f64>,
}

/// CUDA-event timings of every iteration criterion asked for, per case.
#[derive(Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn median(&mut self) -> f64 {
        self.0.sort_by(f64::total_cmp);
        self.0.get(self.0.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

/// Times `work` `iterations` times with events and records each time.
fn timed(
    gpu: &Gpu,
    samples: &mut Samples,
    iterations: u64,
    mut work: impl FnMut() -> gpu_select::Result<()>,
) -> Duration {
    let mut total = 0.0;
    for _ in 0..iterations {
        let ((), ms) = gpu.time_ms(&mut work).expect("benchmark launch failed");
        samples.0.push(ms);
        total += ms;
    }
    Duration::from_secs_f64(total / 1e3)
}

/// `n` words of a 64-bit linear congruential generator from `seed` (Knuth's MMIX constants).
fn random_words(n: usize, seed: u64) -> impl Iterator<Item = u64> {
    let mut state = seed;
    (0..n).map(move |_| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state
    })
}

/// Uniform f32 keys in [0, 1) with 24 random bits each.
fn uniform_f32(n: usize, seed: u64) -> Vec<f32> {
    random_words(n, seed).map(|word| (word >> 40) as f32 / (1u64 << 24) as f32).collect()
}

/// The median of 10 event-timed calls of `work` after 2 warm-up calls.
fn median_of_calls(gpu: &Gpu, mut work: impl FnMut() -> gpu_select::Result<()>) -> f64 {
    for _ in 0..2 {
        work().unwrap();
    }
    let mut samples = Samples::default();
    timed(gpu, &mut samples, 10, &mut work);
    samples.median()
}

/// The median of 3 calls of `work` (long ones: a k-NN search), each timed alone, after one
/// warm-up call (pool blocks, first launches).
fn median_of_long_calls(gpu: &Gpu, mut work: Box<dyn FnMut() -> gpu_select::Result<()> + '_>) -> f64 {
    work().unwrap();
    let mut samples = Samples::default();
    for _ in 0..3 {
        samples.0.push(gpu.time_ms(&mut work).unwrap().1);
    }
    samples.median()
}

/// Median read-floor time for `buffer`, timed directly (not through criterion, so that a
/// filter on the command line never leaves a case without its floor).
fn read_floor(gpu: &Gpu, buffer: &DeviceBuffer<f32>) -> f64 {
    let mut scratch = gpu.alloc_zeroed::<u32>(1).unwrap();
    read_pass(gpu, buffer, &mut scratch).unwrap();
    let mut samples = Samples::default();
    timed(gpu, &mut samples, 50, || queue_read_pass(gpu, buffer, &scratch));
    samples.median()
}

fn bench_sort<K: SelectKey>(
    criterion: &mut Criterion,
    gpu: &Gpu,
    keys: &DeviceBuffer<K>,
    segment_len: usize,
    floor_ms: f64,
    cases: &mut Vec<Case>,
) {
    let n = keys.len();
    let name = format!("{} n=2^{} segments of {segment_len}", K::NAME, n.trailing_zeros());
    let mut sorted = gpu_select::SortedSegments {
        keys: gpu.alloc_zeroed::<K>(n).unwrap(),
        indices: gpu.alloc_zeroed::<u64>(n).unwrap(),
    };
    let mut samples = Samples::default();
    let mut group = criterion.benchmark_group("sort_segments");
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function(BenchmarkId::from_parameter(&name), |b| {
        b.iter_custom(|iterations| {
            timed(gpu, &mut samples, iterations, || {
                gpu.sort_segments_into(
                    keys,
                    segment_len,
                    Order::Largest,
                    (&mut sorted.keys, &mut sorted.indices),
                )
            })
        })
    });
    group.finish();
    cases.push(Case {
        group: "sort_segments",
        name,
        elements: n as u64,
        bytes: keys.bytes() as u64,
        median_ms: samples.median(),
        floor_ms,
        predicted_ms: None,
    });
}

fn bench_top_k<K: SelectKey>(
    criterion: &mut Criterion,
    gpu: &Gpu,
    data: &DeviceBuffer<K>,
    (k, options): (usize, TopKOptions),
    label: &str,
    floor_ms: f64,
    cases: &mut Vec<Case>,
) {
    let n = data.len();
    let plan = gpu.plan_top_k(&Keys::new(data), k, &options).unwrap();
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let mut out =
        TopK { values: gpu.alloc_zeroed::<K>(k).unwrap(), indices: gpu.alloc_zeroed::<u64>(k).unwrap() };
    let algorithm = match options.algorithm {
        Algorithm::Bitonic => "bitonic",
        Algorithm::RadixSelect => "radix",
        Algorithm::BlockSort => "block-sort",
        Algorithm::SampleSelect => "sample",
        Algorithm::PerThreadHeap => "heap",
        Algorithm::SortAndChoose => "sort-choose",
        Algorithm::BucketSelect => "bucket",
        _ => "auto",
    };
    let sorted = if options.sorted { "" } else { " unsorted" };
    let name = format!("{algorithm}{sorted} {} n=2^{} k={k} {label}", K::NAME, n.trailing_zeros());
    let predicted_ms = plan.predicted_ms();
    record_top_k_case(criterion, gpu, data, name, (floor_ms, predicted_ms), cases, || {
        gpu.top_k_into(&plan, data, &mut out, &mut workspace)
    });
}

/// The bitonic top-k with a fused filter and transform (`Keys::with_filter`,
/// `Keys::with_transform`), named `bitonic fused-<label>` so that it sits next to the plain
/// bitonic top-k of the same data.
fn bench_top_k_fused(
    criterion: &mut Criterion,
    gpu: &Gpu,
    data: &DeviceBuffer<f32>,
    (k, label, (filter, transform)): (usize, &str, (InputFilter<'_, f32>, KeyTransform<f32>)),
    floor_ms: f64,
    cases: &mut Vec<Case>,
) {
    let n = data.len();
    let options = TopKOptions::new(Order::Largest);
    let keys = || Keys::new(data).with_filter(filter).with_transform(transform);
    let plan = gpu.plan_top_k(&keys(), k, &options).unwrap();
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let mut out =
        TopK { values: gpu.alloc_zeroed::<f32>(k).unwrap(), indices: gpu.alloc_zeroed::<u64>(k).unwrap() };
    let name = format!("bitonic fused-{label} f32 n=2^{} k={k} uniform", n.trailing_zeros());
    record_top_k_case(criterion, gpu, data, name, (floor_ms, None), cases, || {
        gpu.top_k_into(&plan, keys(), &mut out, &mut workspace)
    });
}

/// Times `work` (a top-k of `data`) as the case `name` of the `top_k` group, and records it
/// with the read floor and the cost model's prediction.
fn record_top_k_case<K: SelectKey>(
    criterion: &mut Criterion,
    gpu: &Gpu,
    data: &DeviceBuffer<K>,
    name: String,
    (floor_ms, predicted_ms): (f64, Option<f64>),
    cases: &mut Vec<Case>,
    mut work: impl FnMut() -> gpu_select::Result<()>,
) {
    let mut samples = Samples::default();
    let mut group = criterion.benchmark_group("top_k");
    group.throughput(Throughput::Bytes(data.bytes() as u64));
    group.bench_function(BenchmarkId::from_parameter(&name), |b| {
        b.iter_custom(|iterations| timed(gpu, &mut samples, iterations, &mut work))
    });
    group.finish();
    cases.push(Case {
        group: "top_k",
        name,
        elements: data.len() as u64,
        bytes: data.bytes() as u64,
        median_ms: samples.median(),
        floor_ms,
        predicted_ms,
    });
}

/// Exact selection of rank `k` (`select_into`: queues the levels, reads the outcome back).
fn bench_select<K: SelectKey>(
    criterion: &mut Criterion,
    gpu: &Gpu,
    data: &DeviceBuffer<K>,
    (k, options): (usize, SelectOptions),
    label: &str,
    floor_ms: f64,
    cases: &mut Vec<Case>,
) {
    let n = data.len();
    let plan = gpu.plan_select::<K>(n, &options).unwrap();
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let algorithm = match options.algorithm {
        SelectAlgorithm::QuickSelect => "quick",
        SelectAlgorithm::SampleSelect => "sample",
        _ => "auto",
    };
    let policy = options.policy.map_or(String::new(), |p| {
        format!(
            " [b=2^{} s={} bps={}{}{}]",
            p.bucket_bits,
            p.sample_size,
            p.blocks_per_sm,
            if p.warp_aggregated { " warp-agg" } else { "" },
            if p.bracket { "" } else { " no-bracket" }
        )
    });
    let name = format!("{algorithm} {} n=2^{} k={k}{policy} {label}", K::NAME, n.trailing_zeros());
    let mut samples = Samples::default();
    let mut group = criterion.benchmark_group("select");
    group.throughput(Throughput::Bytes(data.bytes() as u64));
    group.bench_function(BenchmarkId::from_parameter(&name), |b| {
        b.iter_custom(|iterations| {
            timed(gpu, &mut samples, iterations, || {
                gpu.select_into(&plan, data, k, &mut workspace).map(|_| ())
            })
        })
    });
    group.finish();
    cases.push(Case {
        group: "select",
        name,
        elements: n as u64,
        bytes: data.bytes() as u64,
        median_ms: samples.median(),
        floor_ms,
        predicted_ms: None,
    });
}

/// Approximate selection with `buckets` buckets at 20 random ranks: the time of the median
/// rank and, per selection, of all 20 (the window count's misses included), and the mean
/// relative rank error (|rank − k| / n) over the 20 in the case name.
fn bench_select_approx(
    criterion: &mut Criterion,
    gpu: &Gpu,
    data: &DeviceBuffer<f32>,
    (buckets, window_count): (usize, bool),
    floor_ms: f64,
    cases: &mut Vec<Case>,
) {
    let n = data.len();
    let policy =
        SampleSelectPolicy { window_count, ..SampleSelectPolicy::for_keys(gpu.limits(), size_of::<f32>()) };
    let options =
        SelectOptions::default().with_policy(policy).with_algorithm(SelectAlgorithm::Approximate { buckets });
    // As the exact cases: one workspace, allocated before the timing.
    let plan = gpu.plan_select::<f32>(n, &options).unwrap();
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let mut state = 99u64;
    let ranks: Vec<usize> = (0..20)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) % n as u64) as usize
        })
        .collect();
    let error_sum: f64 =
        ranks.iter().map(|&k| gpu.select(data, k, &options).unwrap().error(k as u64) as f64 / n as f64).sum();
    let mean_error = error_sum / 20.0;
    let label = format!(
        "approx f32 n=2^{} buckets={buckets}{} (mean rank error over 20 ranks {:.4} %)",
        n.trailing_zeros(),
        if window_count { "" } else { " without window" },
        mean_error * 100.0
    );
    for all_ranks in [false, true] {
        let name = if all_ranks { format!("{label}, 20 ranks, per rank") } else { format!("{label}, k=n/2") };
        let ranks_per_iteration = if all_ranks { ranks.len() } else { 1 };
        let mut samples = Samples::default();
        let mut group = criterion.benchmark_group("select_approx");
        group.throughput(Throughput::Bytes((data.bytes() * ranks_per_iteration) as u64));
        group.bench_function(BenchmarkId::from_parameter(&name), |b| {
            b.iter_custom(|iterations| {
                timed(gpu, &mut samples, iterations, || {
                    if all_ranks {
                        ranks
                            .iter()
                            .try_for_each(|&k| gpu.select_into(&plan, data, k, &mut workspace).map(|_| ()))
                    } else {
                        gpu.select_into(&plan, data, n / 2, &mut workspace).map(|_| ())
                    }
                })
            })
        });
        group.finish();
        cases.push(Case {
            group: "select_approx",
            name,
            elements: n as u64,
            bytes: data.bytes() as u64,
            median_ms: samples.median() / ranks_per_iteration as f64,
            floor_ms,
            predicted_ms: None,
        });
    }
}

/// The selection cases at 2^28 f32: exact median by both algorithms on uniform and
/// duplicate-heavy inputs, approximate selection, SampleSelect top-k, and the policy sweep
/// that chose [`SampleSelectPolicy::for_keys`].
fn bench_selection(
    criterion: &mut Criterion,
    gpu: &Gpu,
    keys: &DeviceBuffer<f32>,
    floor_ms: f64,
    cases: &mut Vec<Case>,
) {
    let n = keys.len();
    let sample = SelectOptions::default().with_algorithm(SelectAlgorithm::SampleSelect);
    let quick = SelectOptions::default().with_algorithm(SelectAlgorithm::QuickSelect);
    eprintln!("select: median, uniform");
    bench_select(criterion, gpu, keys, (n / 2, sample), "uniform", floor_ms, cases);
    bench_select(criterion, gpu, keys, (n / 2, quick), "uniform", floor_ms, cases);
    bench_select(criterion, gpu, keys, (n / 100, sample), "uniform", floor_ms, cases);
    eprintln!("select: approximate");
    for approx in [(256, true), (1024, true), (1024, false)] {
        bench_select_approx(criterion, gpu, keys, approx, floor_ms, cases);
    }
    eprintln!("select: SampleSelect top-k");
    let default = SampleSelectPolicy::for_keys(gpu.limits(), size_of::<f32>());
    let sample_top_k = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::SampleSelect);
    let levels_only = sample_top_k.with_policy(SampleSelectPolicy { bracket: false, ..default });
    for (k, options, label) in [
        (1024, sample_top_k, "uniform"),
        (262_144, sample_top_k, "uniform"),
        (262_144, sample_top_k.with_sorted(false), "uniform"),
        (262_144, levels_only, "uniform no-bracket"),
        // The largest k the bracket takes (n/64), and one past it.
        (n / 64, sample_top_k, "uniform"),
        (n / 64 + 1, sample_top_k, "uniform"),
    ] {
        bench_top_k(criterion, gpu, keys, (k, options), label, floor_ms, cases);
    }
    eprintln!("select: policy sweep");
    for policy in [
        SampleSelectPolicy { bracket: false, ..default },
        SampleSelectPolicy { warp_aggregated: true, ..default },
        SampleSelectPolicy { bucket_bits: 7, ..default },
        SampleSelectPolicy { bucket_bits: 6, ..default },
        SampleSelectPolicy { sample_size: 1024, ..default },
        SampleSelectPolicy { blocks_per_sm: 1, ..default },
        SampleSelectPolicy { blocks_per_sm: 3, ..default },
        SampleSelectPolicy { blocks_per_sm: 2, ..default },
        SampleSelectPolicy { blocks_per_sm: 4, ..default },
        SampleSelectPolicy { blocks_per_sm: 6, ..default },
    ] {
        bench_select(criterion, gpu, keys, (n / 2, sample.with_policy(policy)), "uniform", floor_ms, cases);
    }
}

/// Selection on inputs with repeated keys: all equal, and d distinct values (the paper's).
fn bench_selection_duplicates(
    criterion: &mut Criterion,
    gpu: &Gpu,
    n: usize,
    floor_ms: f64,
    cases: &mut Vec<Case>,
) {
    let sample = SelectOptions::default().with_algorithm(SelectAlgorithm::SampleSelect);
    let sample_top_k = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::SampleSelect);
    for distinct in [1u64, 16, 1024] {
        let mut state = distinct;
        let values: Vec<f32> = (0..n)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((state >> 33) % distinct) as f32
            })
            .collect();
        let data = gpu.upload(&values).unwrap();
        drop(values);
        let label = if distinct == 1 { "all-equal".to_string() } else { format!("d={distinct}") };
        eprintln!("select: {label}");
        bench_select(criterion, gpu, &data, (n / 2, sample), &label, floor_ms, cases);
        bench_top_k(criterion, gpu, &data, (1024, sample_top_k), &label, floor_ms, cases);
        bench_top_k(criterion, gpu, &data, (262_144, sample_top_k), &label, floor_ms, cases);
    }
}

/// `n` f32 keys of a named shape for the quantile cases: uniform in [0, 1), normal
/// (Box–Muller), Zipf-like (`⌊u^(−1/1.1)⌋`: half the keys are 1, a long heavy tail), all
/// equal.
fn quantile_keys(shape: &str, n: usize, seed: u64) -> Vec<f32> {
    let uniform = |word: u64| ((word >> 40) as f64 + 0.5) / (1u64 << 24) as f64;
    match shape {
        "uniform" => uniform_f32(n, seed),
        "normal" => {
            let words: Vec<u64> = random_words(2 * n, seed).collect();
            words
                .chunks_exact(2)
                .map(|pair| {
                    let (u, v) = (uniform(pair[0]), uniform(pair[1]));
                    ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
                })
                .collect()
        }
        "zipf" => random_words(n, seed).map(|word| uniform(word).powf(-1.0 / 1.1).floor() as f32).collect(),
        "all-equal" => vec![0.75; n],
        _ => unreachable!("unknown shape {shape}"),
    }
}

/// Quantiles of f32 keys (`Gpu::quantiles`, numpy's linear method, which reads the keys of
/// two ranks per quantile): 101 and 1001 evenly spaced, by bucket multiselect on four
/// shapes, and by sort & choose (the baseline: a radix sort of every key) on uniform keys.
fn bench_quantiles(criterion: &mut Criterion, gpu: &Gpu, cases: &mut Vec<Case>) {
    for log_n in [20u32, 24, 28] {
        let n = 1usize << log_n;
        let mut floor_ms = f64::NAN;
        for shape in ["uniform", "normal", "zipf", "all-equal"] {
            let data = gpu.upload(&quantile_keys(shape, n, log_n as u64)).unwrap();
            if shape == "uniform" {
                floor_ms = read_floor(gpu, &data);
                cases.push(Case {
                    group: "read_floor",
                    name: format!("f32 n=2^{log_n} (quantiles)"),
                    elements: n as u64,
                    bytes: data.bytes() as u64,
                    median_ms: floor_ms,
                    floor_ms,
                    predicted_ms: None,
                });
            }
            let mut runs = vec![
                (101, MultiselectAlgorithm::BucketMultiselect),
                (1001, MultiselectAlgorithm::BucketMultiselect),
            ];
            if shape == "uniform" {
                runs.extend([
                    (101, MultiselectAlgorithm::SortAndChoose),
                    (1001, MultiselectAlgorithm::SortAndChoose),
                ]);
            }
            for (m, algorithm) in runs {
                let qs: Vec<f64> = (0..m).map(|i| i as f64 / (m - 1) as f64).collect();
                let options = QuantileOptions::default().with_algorithm(algorithm);
                let name = format!("{algorithm:?} f32 n=2^{log_n} m={m} {shape}");
                eprintln!("quantiles: {name}");
                let mut samples = Samples::default();
                let mut group = criterion.benchmark_group("quantiles");
                group.throughput(Throughput::Bytes(data.bytes() as u64));
                group.bench_function(BenchmarkId::from_parameter(&name), |b| {
                    b.iter_custom(|iterations| {
                        timed(gpu, &mut samples, iterations, || {
                            gpu.quantiles(&data, &qs, &options).map(|_| ())
                        })
                    })
                });
                group.finish();
                cases.push(Case {
                    group: "quantiles",
                    name,
                    elements: n as u64,
                    bytes: data.bytes() as u64,
                    median_ms: samples.median(),
                    floor_ms,
                    predicted_ms: None,
                });
            }
        }
    }
}

/// The shapes of section `quantiles-rows` (rows × cols, f32): many short rows (a block
/// sort each), rows padded and merged, and long rows either side of `Auto`'s bound (2^20
/// keys a row) for sorting rows together.
const QUANTILE_ROWS_SHAPES: [(usize, usize); 6] =
    [(10_000, 1000), (1000, 10_000), (100, 100_000), (64, 1 << 18), (16, 1 << 20), (4, 1 << 22)];

/// Quantiles of each row (`Gpu::quantiles_rows`, numpy's linear method, 5 and 101 evenly
/// spaced; section `quantiles-rows`): the rows sorted together (`SortAndChoose`) against a
/// bucket multiselect per row, each beside the read floor of the keys it reads. The per-row
/// calls of the many-row shapes are timed on their first 100 rows (a call each: they take
/// about as long whatever the row), named with the rows timed; the rows sorted together also
/// into an output kept from call to call (`quantiles_rows_into`, named "into") and left on the
/// device (`quantiles_rows_on_device`, "on device").
/// docs/results/quantiles_rows_torch.py times `torch.quantile(x, q, dim=1)` on the same shapes.
fn bench_quantile_rows(gpu: &Gpu, cases: &mut Vec<Case>) {
    for (rows, cols) in QUANTILE_ROWS_SHAPES {
        let data = gpu.upload(&uniform_f32(rows * cols, cols as u64)).unwrap();
        let floor_ms = read_floor(gpu, &data);
        for m in [5usize, 101] {
            let qs: Vec<f64> = (0..m).map(|i| i as f64 / (m - 1) as f64).collect();
            let per_row_rows = rows.min(100);
            let runs = [
                (MultiselectAlgorithm::SortAndChoose, rows),
                (MultiselectAlgorithm::BucketMultiselect, per_row_rows),
            ];
            for (algorithm, timed_rows) in runs {
                let floor_ms = if timed_rows == rows {
                    floor_ms
                } else {
                    read_floor(gpu, &gpu.alloc_zeroed::<f32>(timed_rows * cols).unwrap())
                };
                let options = QuantileOptions::default().with_algorithm(algorithm);
                let matrix = data.slice(0..timed_rows * cols);
                let median_ms = median_of_calls(gpu, || {
                    gpu.quantiles_rows(&matrix, timed_rows, &qs, &options).map(|_| ())
                });
                // The same into memory kept from call to call (no new host pages).
                let mut out = vec![0.0; timed_rows * m];
                let into_ms = (timed_rows == rows).then(|| {
                    median_of_calls(gpu, || {
                        gpu.quantiles_rows_into(&matrix, timed_rows, &qs, &options, &mut out)
                    })
                });
                // Left on the device (no copy to the host).
                let on_device_ms = (timed_rows == rows).then(|| {
                    median_of_calls(gpu, || {
                        gpu.quantiles_rows_on_device(&matrix, timed_rows, &qs, &options).map(|_| ())
                    })
                });
                for (form, median_ms) in
                    [("", Some(median_ms)), (" into", into_ms), (" on device", on_device_ms)]
                {
                    let Some(median_ms) = median_ms else { continue };
                    let name = format!("{algorithm:?}{form} f32 {timed_rows}x{cols} m={m}");
                    eprintln!("quantiles-rows: {name}: {median_ms:.4} ms (read floor {floor_ms:.4} ms)");
                    cases.push(Case {
                        group: "quantiles_rows",
                        name,
                        elements: (timed_rows * cols) as u64,
                        bytes: (timed_rows * cols * 4) as u64,
                        median_ms,
                        floor_ms,
                        predicted_ms: None,
                    });
                }
            }
        }
    }
}

/// SIFT1M-shaped clustered vectors (`count × dim`): 1000 centres, each vector a centre plus
/// noise a tenth of the centres' spread, components around 0..128 as SIFT's bytes are.
fn sift_like(count: usize, dim: usize, seed: u64) -> Vec<f32> {
    let centres: Vec<f32> = uniform_f32(1000 * dim, 1).iter().map(|v| v * 128.0).collect();
    let noise = uniform_f32(count * dim, seed);
    let picks: Vec<u64> = random_words(count, seed ^ 0x5eed).collect();
    let mut out = Vec::with_capacity(count * dim);
    for i in 0..count {
        let centre = (picks[i] >> 33) as usize % 1000;
        out.extend((0..dim).map(|j| centres[centre * dim + j] + (noise[i * dim + j] - 0.5) * 12.8));
    }
    out
}

/// Exact k-NN (section `knn`): SIFT1M's shape (10^6 base vectors of 128 components, 10^4
/// queries) at k = 1 … 1000 by squared L2 (k = 10 000 with 10^3 queries: rows top-k beyond
/// 2048 runs one top-k per row), the median of three whole searches after one warm-up; and
/// the distance tiles alone (1024 queries against the base, no selection) for the matrix
/// product's rate.
fn bench_knn(gpu: &Gpu, cases: &mut Vec<Case>) {
    let (base_count, query_count, dim) = (1_000_000usize, 10_000usize, 128usize);
    let base = gpu.upload(&sift_like(base_count, dim, 2)).unwrap();
    let queries = gpu.upload(&sift_like(query_count, dim, 3)).unwrap();
    let floor_ms = read_floor(gpu, &base);
    cases.push(Case {
        group: "read_floor",
        name: "f32 1e6 x 128 (knn base)".into(),
        elements: (base_count * dim) as u64,
        bytes: base.bytes() as u64,
        median_ms: floor_ms,
        floor_ms,
        predicted_ms: None,
    });
    let index = gpu.flat_index(Vectors::new(&base, base_count, dim).unwrap(), Metric::L2).unwrap();
    // Two streams taking the query tiles in turn (Tuning::knn_streams), beside one at k = 100.
    let two_streams = gpu.with_tuning(Tuning { knn_streams: 2, ..*gpu.tuning() });
    let index_two =
        two_streams.flat_index(Vectors::new(&base, base_count, dim).unwrap(), Metric::L2).unwrap();
    // Every distance tile written and selected from (Tuning::knn_filter off), beside the
    // filtered search.
    let tiles = gpu.with_tuning(Tuning { knn_filter: false, ..*gpu.tuning() });
    let index_tiles = tiles.flat_index(Vectors::new(&base, base_count, dim).unwrap(), Metric::L2).unwrap();
    let knn_case = |name: String, elements: usize, bytes: usize, ms: f64| Case {
        group: "knn",
        name,
        elements: elements as u64,
        bytes: bytes as u64,
        median_ms: ms,
        floor_ms,
        predicted_ms: None,
    };
    let runs = [
        (1, query_count, ""),
        (1, query_count, " tiles"),
        (10, query_count, ""),
        (10, query_count, " tiles"),
        (100, query_count, ""),
        (100, query_count, " tiles"),
        (100, query_count, " two streams"),
    ];
    let runs =
        runs.into_iter().chain([(300, query_count, ""), (500, query_count, ""), (1000, query_count, "")]);
    let runs = runs.chain([(1000, query_count, " tiles"), (10_000, 1000, "")]);
    for (k, count, label) in runs {
        let part = queries.slice(..count * dim);
        let index = match label {
            "" => &index,
            " tiles" => &index_tiles,
            _ => &index_two,
        };
        let filters = index.plan_search(count, k).unwrap().filters();
        let searched_again = if filters {
            knn_unproven(index, &Vectors::new(&part, count, dim).unwrap(), k).unwrap()
        } else {
            0
        };
        let ms = median_of_long_calls(
            gpu,
            Box::new(|| index.search(Vectors::new(&part, count, dim)?, k).map(|_| ())),
        );
        let name = format!("L2 {count} queries x 1e6 x 128 k={k}{label}");
        let how = if filters {
            format!("filtered, {searched_again} queries searched again")
        } else {
            "tiles".into()
        };
        println!("knn: {name}: {ms:.3} ms ({how})");
        cases.push(knn_case(name, count * base_count, base.bytes(), ms));
    }
    // The tensor cores: TF32 or split-TF32 tiles, each query's candidates re-ranked in f32
    // (the same neighbours as above up to ties), with how many queries the proof sent back
    // to f32.
    let with_precision = |precision| {
        let index = gpu.flat_index(Vectors::new(&base, base_count, dim).unwrap(), Metric::L2).unwrap();
        index.with_precision(precision).unwrap()
    };
    let (index_tf32, index_tf32x3) =
        (with_precision(KnnPrecision::Tf32Reranked), with_precision(KnnPrecision::Tf32x3Reranked));
    // TF32 filtered (the default where it pays) beside TF32's written tiles at k = 1000,
    // where its proof holds on this data.
    let index_tf32_tiles = tiles
        .flat_index(Vectors::new(&base, base_count, dim).unwrap(), Metric::L2)
        .unwrap()
        .with_precision(KnnPrecision::Tf32Reranked)
        .unwrap();
    let tensor_runs: [(&FlatIndex<'_>, &str, &[usize]); 3] = [
        (&index_tf32, "tf32", &[1, 10, 100, 300, 500, 1000]),
        (&index_tf32_tiles, "tf32 tiles", &[1000]),
        (&index_tf32x3, "split tf32", &[1, 10, 100, 1000]),
    ];
    for (tensor_index, label, ks) in tensor_runs {
        for &k in ks {
            let part = Vectors::new(&queries, query_count, dim).unwrap();
            let unproven = knn_unproven(tensor_index, &part, k).unwrap();
            let ms = median_of_long_calls(
                gpu,
                Box::new(|| tensor_index.search(Vectors::new(&queries, query_count, dim)?, k).map(|_| ())),
            );
            let name = format!("L2 {query_count} queries x 1e6 x 128 k={k} {label} reranked");
            println!("knn: {name}: {ms:.3} ms ({unproven} queries searched again in f32)");
            cases.push(knn_case(name, query_count * base_count, base.bytes(), ms));
        }
    }
    let tile_queries = 1024;
    let mut out = gpu.alloc_zeroed::<f32>(tile_queries * base_count).unwrap();
    let part = queries.slice(..tile_queries * dim);
    let part = Vectors::new(&part, tile_queries, dim).unwrap();
    for (index, label) in [(&index, ""), (&index_tf32, " tf32"), (&index_tf32x3, " split tf32")] {
        let ms = median_of_long_calls(gpu, Box::new(|| knn_distances(index, &part, &mut out)));
        let flops = 2.0 * (tile_queries * base_count * dim) as f64;
        println!(
            "knn: distance tiles{label} alone, 1024 x 1e6 x 128: {ms:.3} ms, {:.1} TFLOP/s, {:.0} GB/s written",
            flops / ms / 1e9,
            out.bytes() as f64 / ms / 1e6
        );
        let name = format!("distance tiles{label} 1024 x 1e6 x 128 ({:.1} TFLOP/s)", flops / ms / 1e9);
        cases.push(knn_case(name, tile_queries * base_count, out.bytes(), ms));
    }
}

/// Exact k-NN over a base in host memory (section `knn-streamed`, not in the default set):
/// SIFT1M's shape with the base in page-locked host memory, streamed in chunks for each
/// search (`StreamedIndex`), beside the same search of the base on the device; chunks of
/// 64 MiB … 1 GiB at k = 100; 10^3 queries, where the copies weigh most; and the bus's rate
/// (one copy of the whole base from the locked memory), the floor a streamed search cannot
/// beat. The median of three whole searches after one warm-up.
fn bench_knn_streamed(gpu: &Gpu, cases: &mut Vec<Case>) {
    let (base_count, query_count, dim) = (1_000_000usize, 10_000usize, 128usize);
    let host_base = sift_like(base_count, dim, 2);
    let base = gpu.upload(&host_base).unwrap();
    let queries = gpu.upload(&sift_like(query_count, dim, 3)).unwrap();
    let index = gpu.streamed_index(&host_base, dim, Metric::L2).unwrap();
    // The bus: one copy of the whole base from the locked memory (the index holds the lock).
    let mut target = gpu.alloc_zeroed::<f32>(host_base.len()).unwrap();
    let copy_ms = median_of_long_calls(gpu, Box::new(|| gpu.copy_to_device(&host_base, &mut target)));
    let gb_per_s = base.bytes() as f64 / copy_ms / 1e6;
    println!(
        "knn-streamed: base pinned: {}; copy of the base (512 MB) to the device: {copy_ms:.3} ms, {gb_per_s:.1} GB/s",
        index.is_pinned()
    );
    let case = |name: String, ms: f64, floor_ms: f64| Case {
        group: "knn-streamed",
        name,
        elements: (query_count * base_count) as u64,
        bytes: base.bytes() as u64,
        median_ms: ms,
        floor_ms,
        predicted_ms: None,
    };
    let resident = gpu.flat_index(Vectors::new(&base, base_count, dim).unwrap(), Metric::L2).unwrap();
    for (k, count) in [(10, query_count), (100, query_count), (100, 1000)] {
        let part = queries.slice(..count * dim);
        let on_device = median_of_long_calls(
            gpu,
            Box::new(|| resident.search(Vectors::new(&part, count, dim)?, k).map(|_| ())),
        );
        println!("knn-streamed: L2 {count} x 1e6 x 128 k={k}, base on the device: {on_device:.3} ms");
        cases.push(case(format!("L2 {count} x 1e6 x 128 k={k} base on the device"), on_device, copy_ms));
        // The default (256 MiB: full chunks of a quarter of the base, 64 MiB here) and
        // smaller chunks (16 MiB).
        let chunk_sizes: &[usize] = if k == 100 { &[16, 256] } else { &[256] };
        for &mib in chunk_sizes {
            let tuned = gpu.with_tuning(Tuning { knn_stream_chunk_bytes: mib << 20, ..*gpu.tuning() });
            let streamed = tuned.streamed_index(&host_base, dim, Metric::L2).unwrap();
            let chunks = streamed.chunks();
            let ms = median_of_long_calls(
                gpu,
                Box::new(|| streamed.search(Vectors::new(&part, count, dim)?, k).map(|_| ())),
            );
            println!(
                "knn-streamed: L2 {count} x 1e6 x 128 k={k}, base streamed from host memory in {chunks} chunks (at most {mib} MiB): {ms:.3} ms ({:.3}x the device-resident search)",
                ms / on_device
            );
            cases.push(case(format!("L2 {count} x 1e6 x 128 k={k} streamed, {mib} MiB chunks"), ms, copy_ms));
        }
    }
}

/// Several GPUs (section `multi-gpu`, not in the default set): exact k-NN of SIFT1M's
/// shape at k = 100 on 1, 2, … of the machine's GPUs (every device; forked streams of one
/// where there is one), sharded and replicated, the median of three whole searches
/// (`MultiGpuIndex::search_host`, host clock: the GPUs work at once); and DIBMS quantiles
/// (101 and 1001) of 2^28 and 2^30 uniform f32 keys per GPU, the GPUs of one process
/// (`quantiles_across`), time and bytes sent per GPU, beside one GPU's `Gpu::quantiles` of
/// one shard.
fn bench_multi_gpu(gpu: &Gpu) {
    use gpu_select::distributed::{DistributedOptions, quantiles_across};
    use gpu_select::{MultiGpuIndex, Placement};
    let devices = Gpu::device_count().max(1);
    let handles: Vec<Gpu> = (0..devices as u32).map(|d| Gpu::cuda(d).unwrap()).collect();
    println!("multi-gpu: {devices} devices");
    let wall = |runs: usize, mut work: Box<dyn FnMut() + '_>| {
        work();
        let mut times: Vec<f64> = (0..runs)
            .map(|_| {
                let started = std::time::Instant::now();
                work();
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        times[runs / 2]
    };
    let (base_count, query_count, dim, k) = (1_000_000usize, 10_000usize, 128usize, 100usize);
    let base = sift_like(base_count, dim, 2);
    let queries = sift_like(query_count, dim, 3);
    let mut counts: Vec<usize> = vec![1];
    let mut c = 2;
    while c <= devices {
        counts.push(c);
        c *= 2;
    }
    for &count in &counts {
        for placement in [Placement::Sharded, Placement::Replicated] {
            let index = MultiGpuIndex::new(&handles[..count], &base, dim, Metric::L2, placement).unwrap();
            let ms = wall(
                3,
                Box::new(|| {
                    index.search_host(&queries, k).unwrap();
                }),
            );
            println!("multi-gpu: knn L2 1e4 x 1e6 x 128 k={k} on {count} GPUs {placement:?}: {ms:.2} ms");
        }
    }
    for log_n in [28u32, 30] {
        let keys = uniform_f32(1usize << log_n, log_n as u64);
        for &count in &counts {
            let shards: Vec<DeviceBuffer<f32>> =
                handles[..count].iter().map(|h| h.upload(&keys).unwrap()).collect();
            let refs: Vec<&DeviceBuffer<f32>> = shards.iter().collect();
            for m in [101usize, 1001] {
                let qs: Vec<f64> = (0..m).map(|i| i as f64 / (m - 1) as f64).collect();
                let options = QuantileOptions::default();
                let mut bytes = 0;
                let ms = wall(
                    5,
                    Box::new(|| {
                        let answers =
                            quantiles_across(&refs, &qs, &options, DistributedOptions::default()).unwrap();
                        bytes = answers.iter().map(|a| a.traffic.bytes_sent).max().unwrap_or(0);
                    }),
                );
                println!(
                    "multi-gpu: DIBMS {m} quantiles of 2^{log_n} f32 per GPU on {count} GPUs: {ms:.2} ms, at most {bytes} bytes sent per GPU"
                );
            }
        }
        let data = gpu.upload(&keys).unwrap();
        for m in [101usize, 1001] {
            let qs: Vec<f64> = (0..m).map(|i| i as f64 / (m - 1) as f64).collect();
            let ms = wall(
                5,
                Box::new(|| {
                    gpu.quantiles(&data, &qs, &QuantileOptions::default()).unwrap();
                }),
            );
            println!("multi-gpu: one GPU's Gpu::quantiles, {m} of 2^{log_n} f32: {ms:.2} ms");
        }
    }
}

/// Distributed quantiles (section `distributed`): DIBMS and its two baselines over four
/// processes as threads, each with its own handle on the one GPU and a quarter of 2^20,
/// 2^24 and 2^28 uniform f32 keys, for 101 and 501 quantiles (the paper's Table 4
/// cases): the median time of a call (every process starting together) and the bytes
/// sent. The bytes are the algorithm's own, whatever carries them; the times are one
/// machine's, with no network between the processes.
fn bench_distributed(gpu: &Gpu) {
    use gpu_select::distributed::{
        Communicator, Distributed, DistributedAlgorithm, DistributedOptions, ThreadGroup, Traffic,
    };
    const PROCESSES: usize = 4;
    const RUNS: usize = 5;
    println!(
        "\ndistributed quantiles: {PROCESSES} processes as threads, a handle each on {}",
        gpu.describe()
    );
    let gpus: Vec<Gpu> = (0..PROCESSES).map(|_| Gpu::new().unwrap()).collect();
    for log_n in [20u32, 24, 28] {
        let n = 1usize << log_n;
        let keys = quantile_keys("uniform", n, log_n as u64);
        let shards: Vec<DeviceBuffer<f32>> = gpus
            .iter()
            .zip(keys.chunks(n / PROCESSES))
            .map(|(gpu, shard)| gpu.upload(shard).unwrap())
            .collect();
        drop(keys);
        for m in [101usize, 501] {
            let qs: Vec<f64> = (0..m).map(|i| i as f64 / (m - 1) as f64).collect();
            let mut expected: Option<Vec<f64>> = None;
            for algorithm in [
                DistributedAlgorithm::Dibms,
                DistributedAlgorithm::DistributedBms,
                DistributedAlgorithm::SortAndChoose,
            ] {
                let group = ThreadGroup::new(PROCESSES, Duration::from_secs(600));
                let per_process: Vec<(f64, Traffic, Vec<f64>)> = std::thread::scope(|scope| {
                    let runs: Vec<_> = group
                        .into_iter()
                        .zip(gpus.iter().zip(&shards))
                        .map(|(comm, (gpu, shard))| {
                            let qs = &qs;
                            scope.spawn(move || {
                                let options = DistributedOptions::with_algorithm(algorithm);
                                let group = Distributed::new(gpu, &comm, options);
                                let quantiles = QuantileOptions::default();
                                let mut answer = group.quantiles(shard, qs, &quantiles).unwrap(); // warm-up
                                let mut times = Vec::with_capacity(RUNS);
                                for _ in 0..RUNS {
                                    comm.all_reduce_max(&mut [0]).unwrap(); // start together
                                    let started = std::time::Instant::now();
                                    answer = group.quantiles(shard, qs, &quantiles).unwrap();
                                    times.push(started.elapsed().as_secs_f64() * 1e3);
                                }
                                times.sort_by(f64::total_cmp);
                                (times[RUNS / 2], answer.traffic, answer.values)
                            })
                        })
                        .collect();
                    runs.into_iter().map(|run| run.join().unwrap()).collect()
                });
                let slowest = per_process.iter().map(|p| p.0).fold(0.0, f64::max);
                let bytes: u64 = per_process.iter().map(|p| p.1.bytes_sent).sum();
                let values = &per_process[0].2;
                let agree = per_process.iter().all(|p| p.2 == *values)
                    && expected
                        .as_ref()
                        .is_none_or(|e| e.iter().zip(values).all(|(a, b)| a.to_bits() == b.to_bits()));
                expected.get_or_insert_with(|| values.clone());
                println!(
                    "distributed f32 n=2^{log_n} p={PROCESSES} m={m} {algorithm:?}: {slowest:.3} ms, {bytes} bytes sent in all ({} per process), {} collectives per process, answers {}",
                    bytes / PROCESSES as u64,
                    per_process[0].1.collectives,
                    if agree { "agree" } else { "DISAGREE" }
                );
            }
        }
    }
}

/// The plan, workspace and outputs of a top-k of every row of a `rows × cols` matrix of `K`,
/// made once per case (as torch's caching allocator serves `torch.topk`).
fn rows_buffers<K: SelectKey>(
    gpu: &Gpu,
    matrix: &DeviceBuffer<K>,
    (rows, cols, k): (usize, usize, usize),
    order: Order,
) -> (TopKPlan<K>, DeviceBuffer<u8>, TopK<K>) {
    let plan = gpu.plan_top_k(&Keys::rows(matrix, rows, cols), k, &TopKOptions::new(order)).unwrap();
    let out = TopK {
        values: gpu.alloc_zeroed::<K>(rows * k).unwrap(),
        indices: gpu.alloc_zeroed(rows * k).unwrap(),
    };
    let workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    (plan, workspace, out)
}

/// Batched top-k of a `rows × cols` matrix (`top_k_rows_into`).
#[allow(clippy::too_many_arguments)]
fn bench_rows(
    criterion: &mut Criterion,
    gpu: &Gpu,
    matrix: &DeviceBuffer<f32>,
    (rows, cols, k): (usize, usize, usize),
    order: Order,
    floor_ms: f64,
    cases: &mut Vec<Case>,
) {
    // A kernel or layout forced through the library's measurement hooks is part of the name.
    let algorithm =
        std::env::var("GPU_SELECT_ROWS_ALGORITHM").map_or(String::new(), |a| format!(" algorithm={a}"));
    let layout =
        std::env::var("GPU_SELECT_ROWS_WARPS_PER_ROW").map_or(String::new(), |w| format!(" warps/row={w}"));
    let parts =
        std::env::var("GPU_SELECT_ROWS_RADIX_PARTS").map_or(String::new(), |p| format!(" radix-parts={p}"));
    let name = format!("f32 {rows}x{cols} k={k} {order:?}{algorithm}{layout}{parts}");
    let mut samples = Samples::default();
    // The workspace form.
    let (plan, mut workspace, mut out) = rows_buffers::<f32>(gpu, matrix, (rows, cols, k), order);
    let mut group = criterion.benchmark_group("top_k_rows");
    group.throughput(Throughput::Bytes(matrix.bytes() as u64));
    group.bench_function(BenchmarkId::from_parameter(&name), |b| {
        b.iter_custom(|iterations| {
            timed(gpu, &mut samples, iterations, || {
                gpu.top_k_into(&plan, Keys::rows(matrix, rows, cols), &mut out, &mut workspace)
            })
        })
    });
    group.finish();
    cases.push(Case {
        group: "top_k_rows",
        name,
        elements: (rows * cols) as u64,
        bytes: matrix.bytes() as u64,
        median_ms: samples.median(),
        floor_ms,
        predicted_ms: plan.predicted_ms(),
    });
}

/// The batched shapes of design.md §5 and the issue: 10 000 rows of 1 000 / 32 000 /
/// 128 000 keys (k = 100 and 1000 smallest; on rows of 1 000 also k = 1, 32 and 256, where
/// Auto chooses between a warp's queue and a warp's radix selection), 100 000 × 128 (k = 1,
/// 10 and 32 smallest: short rows, issue "Half-precision keys …"), and 64 × 131 072 (k = 50,
/// 256 and 1024 largest).
fn bench_all_rows(criterion: &mut Criterion, gpu: &Gpu, cases: &mut Vec<Case>) {
    let shapes: [(usize, usize, &[usize], Order); 5] = [
        (10_000, 1000, &[1, 32, 100, 256], Order::Smallest),
        (100_000, 128, &[1, 10, 32], Order::Smallest),
        (10_000, 32_000, &[100, 1000], Order::Smallest),
        (10_000, 128_000, &[100, 1000], Order::Smallest),
        (64, 131_072, &[50, 256, 1024], Order::Largest),
    ];
    for (rows, cols, ks, order) in shapes {
        let matrix = gpu.upload(&uniform_f32(rows * cols, cols as u64)).unwrap();
        let floor_ms = read_floor(gpu, &matrix);
        cases.push(Case {
            group: "read_floor",
            name: format!("f32 {rows}x{cols}"),
            elements: (rows * cols) as u64,
            bytes: matrix.bytes() as u64,
            median_ms: floor_ms,
            floor_ms,
            predicted_ms: None,
        });
        for &k in ks {
            eprintln!("top_k_rows f32 {rows}x{cols} k={k} {order:?}");
            bench_rows(criterion, gpu, &matrix, (rows, cols, k), order, floor_ms, cases);
        }
    }
}

/// The half-precision section's rows shapes (largest first): LLM sampling, batch ×
/// vocabulary (issue "Half-precision keys …": 64 × 131 072 and 256 × 262 144 at k = 50 and
/// 1024), and one row.
const HALF_ROWS: [(usize, usize); 3] = [(64, 131_072), (256, 262_144), (1, 262_144)];
/// The `k` of the half-precision rows.
const HALF_KS: [usize; 2] = [50, 1024];

/// Logit-like values: normal, mean 0, standard deviation 4 (Box–Muller over
/// [`uniform_f32`]'s pairs), so that the best of a row lie in a sparse tail, as a model's
/// logits do.
fn logits_f32(n: usize, seed: u64) -> Vec<f32> {
    let uniform = uniform_f32(n + 1, seed);
    (0..n)
        .map(|i| {
            let (u, v) = (1.0 - uniform[i] as f64, uniform[i + 1] as f64);
            (4.0 * (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

/// One key type of the half-precision section, stored as `K` (`convert` rounds the same f32
/// values for every type): the rows of [`HALF_ROWS`] at [`HALF_KS`] over logit-like values
/// ([`logits_f32`]), and 1-D top-k and the median of 2^28 uniform values in [0, 1) (in bf16
/// only about 16 000 distinct values, so the best 262 144 are ties: the hard case), each
/// beside the read floor of its own bytes.
fn bench_half_type<K: SelectKey>(gpu: &Gpu, convert: fn(f32) -> K, cases: &mut Vec<Case>) {
    // The read floor of `bytes`, read as f32 words.
    let floor_of = |bytes: usize| {
        let words = gpu.alloc_zeroed::<f32>(bytes / 4).unwrap();
        read_floor(gpu, &words)
    };
    for (rows, cols) in HALF_ROWS {
        let keys: Vec<K> = logits_f32(rows * cols, cols as u64).into_iter().map(convert).collect();
        let matrix = gpu.upload(&keys).unwrap();
        let floor_ms = floor_of(matrix.bytes());
        for k in HALF_KS {
            let (plan, mut workspace, mut out) =
                rows_buffers::<K>(gpu, &matrix, (rows, cols, k), Order::Largest);
            let median_ms = median_of_calls(gpu, || {
                gpu.top_k_into(&plan, Keys::rows(&matrix, rows, cols), &mut out, &mut workspace)
            });
            let name = format!("{} {rows}x{cols} k={k} Largest", K::NAME);
            eprintln!("half: rows {name}: {median_ms:.4} ms, floor {floor_ms:.4} ms");
            cases.push(Case {
                group: "half_rows",
                name,
                elements: (rows * cols) as u64,
                bytes: matrix.bytes() as u64,
                median_ms,
                floor_ms,
                predicted_ms: plan.predicted_ms(),
            });
        }
    }
    let n = 1usize << 28;
    let keys: Vec<K> = uniform_f32(n, 28).into_iter().map(convert).collect();
    let data = gpu.upload(&keys).unwrap();
    drop(keys);
    let floor_ms = floor_of(data.bytes());
    for k in [1024, 262_144] {
        time_array_top_k(gpu, &data, (28, k), floor_ms, ("half", "half_top_k"), cases);
    }
    let median_ms = median_of_calls(gpu, || gpu.select(&data, n / 2, &SelectOptions::default()).map(|_| ()));
    let name = format!("{} n=2^28 median", K::NAME);
    eprintln!("half: select {name}: {median_ms:.4} ms, floor {floor_ms:.4} ms");
    cases.push(Case {
        group: "half_select",
        name,
        elements: n as u64,
        bytes: data.bytes() as u64,
        median_ms,
        floor_ms,
        predicted_ms: None,
    });
}

/// The half-precision section (`half`): bf16, f16 and f32 keys of the same values on the
/// same shapes, so that each 16-bit time stands beside the f32 one and the floor of its
/// own bytes (docs/results/half_torch.py times torch.topk on the same shapes).
fn bench_half(gpu: &Gpu, cases: &mut Vec<Case>) {
    bench_half_type::<half::bf16>(gpu, half::bf16::from_f32, cases);
    bench_half_type::<half::f16>(gpu, half::f16::from_f32, cases);
    bench_half_type::<f32>(gpu, |value| value, cases);
}

/// Times `Auto`'s top-k (the `k` largest) of `data`, one array of 2^`log_n` keys, into the
/// caller's workspace; prints it under `label` and records it in `group`.
fn time_array_top_k<K: SelectKey>(
    gpu: &Gpu,
    data: &DeviceBuffer<K>,
    (log_n, k): (u32, usize),
    floor_ms: f64,
    (label, group): (&str, &'static str),
    cases: &mut Vec<Case>,
) {
    let plan = gpu.plan_top_k(&Keys::new(data), k, &TopKOptions::largest()).unwrap();
    let mut out = TopK { values: gpu.alloc_zeroed::<K>(k).unwrap(), indices: gpu.alloc_zeroed(k).unwrap() };
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let median_ms = median_of_calls(gpu, || gpu.top_k_into(&plan, Keys::new(data), &mut out, &mut workspace));
    let name = format!("{} n=2^{log_n} k={k} Largest", K::NAME);
    eprintln!("{label}: top_k {name}: {median_ms:.4} ms, floor {floor_ms:.4} ms");
    cases.push(Case {
        group,
        name,
        elements: data.len() as u64,
        bytes: data.bytes() as u64,
        median_ms,
        floor_ms,
        predicted_ms: plan.predicted_ms(),
    });
}

/// Times the same top-k as one row of a matrix (the rows' planning: the radix kernel with
/// the parts `GPU_SELECT_ROWS_RADIX_PARTS` asks for, or its own choice), printed beside the
/// array's under `small one-row`, so that a run can compare splits of the row.
fn time_one_row_top_k<K: SelectKey>(
    gpu: &Gpu,
    data: &DeviceBuffer<K>,
    (log_n, k): (u32, usize),
    floor_ms: f64,
) {
    let (plan, mut workspace, mut out) = rows_buffers::<K>(gpu, data, (1, data.len(), k), Order::Largest);
    let median_ms = median_of_calls(gpu, || {
        gpu.top_k_into(&plan, Keys::rows(data, 1, data.len()), &mut out, &mut workspace)
    });
    eprintln!(
        "small one-row: top_k {} n=2^{log_n} k={k} Largest: {median_ms:.4} ms, floor {floor_ms:.4} ms",
        K::NAME
    );
}

/// Exact selection and SampleSelect's top-k with the bracket's sample as the policy takes
/// it (8192 keys from 2^27 for top-k and middle ranks) and held at the levels' 2048 (section
/// `bracket-sweep`, never on by default): uniform f32 at 2^27 and 2^28 (the median, ranks
/// n/10 and n/100, the approximate median of 1024 buckets, top-k of 1024 and 262 144 by
/// SampleSelect), f64 and bf16 medians at 2^28,
/// each beside the read floor of its bytes, `GPU_SELECT_BRACKET_ROUNDS` rounds (default 2);
/// `GPU_SELECT_BRACKET_LOG_N` takes f32 at those sizes only, `GPU_SELECT_SAMPLE_BLOCKS_PER_SM`
/// adds policies with other grids, `GPU_SELECT_BRACKET_SAMPLE` policies with other bracket
/// samples at every size, `GPU_SELECT_RADIX_FINISH` with other radix finishes,
/// `GPU_SELECT_SPREAD_SAMPLE_FROM` with samples drawn by many blocks from other sizes on.
fn bracket_sweep(gpu: &Gpu) {
    fn one<K: SelectKey>(gpu: &Gpu, log_n: u32, convert: fn(f32) -> K, top_k: bool) {
        let n = 1usize << log_n;
        let data =
            gpu.upload(&uniform_f32(n, log_n as u64).into_iter().map(convert).collect::<Vec<K>>()).unwrap();
        let floor_ms = read_floor(gpu, &gpu.alloc_zeroed::<f32>(data.bytes() / 4).unwrap());
        let default = SampleSelectPolicy::for_keys(gpu.limits(), size_of::<K>());
        let levels_sample = SampleSelectPolicy { large_bracket_sample_from: u64::MAX, ..default };
        let rounds: u32 =
            std::env::var("GPU_SELECT_BRACKET_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
        // Lists (comma-separated) that add the default policy with other values:
        // `GPU_SELECT_SAMPLE_BLOCKS_PER_SM` blocks per multiprocessor for the count and filter
        // passes, `GPU_SELECT_BRACKET_SAMPLE` brackets of that many sample keys at every size
        // (`large_bracket_sample_from` 0), `GPU_SELECT_RADIX_FINISH` other radix finishes,
        // `GPU_SELECT_SPREAD_SAMPLE_FROM` other sizes from which many blocks draw the samples
        // (4294967295: one block at every size measured).
        let mut policies = vec![(default, "default".to_string()), (levels_sample, "2048".to_string())];
        type WithValue = fn(SampleSelectPolicy, u32) -> SampleSelectPolicy;
        let variants: [(&str, WithValue, &str); 4] = [
            ("GPU_SELECT_SAMPLE_BLOCKS_PER_SM", |p, v| SampleSelectPolicy { blocks_per_sm: v, ..p }, "bps{}"),
            (
                "GPU_SELECT_BRACKET_SAMPLE",
                |p, v| SampleSelectPolicy { large_bracket_sample_from: 0, large_bracket_sample: v, ..p },
                "{}-all",
            ),
            ("GPU_SELECT_RADIX_FINISH", |p, v| SampleSelectPolicy { radix_finish: v, ..p }, "rf{}"),
            (
                "GPU_SELECT_SPREAD_SAMPLE_FROM",
                |p, v| SampleSelectPolicy { spread_sample_from: v as u64, ..p },
                "spread{}",
            ),
        ];
        for (variable, with, label) in variants {
            for value in env_numbers(variable) {
                policies.push((with(default, value), label.replace("{}", &value.to_string())));
            }
        }
        for round in 1..=rounds {
            for (policy, label) in policies.iter().map(|(policy, label)| (*policy, label.as_str())) {
                let select = SelectOptions::default()
                    .with_algorithm(SelectAlgorithm::SampleSelect)
                    .with_policy(policy);
                for (rank, what) in [(n / 2, "median"), (n / 10, "n/10"), (n / 100, "n/100")] {
                    let ms = median_of_calls(gpu, || gpu.select(&data, rank, &select).map(|_| ()));
                    eprintln!(
                        "bracket-sweep: {} n=2^{log_n} {what} sample {label} round {round}: {ms:.4} ms, floor {floor_ms:.4} ms",
                        K::NAME
                    );
                }
                let approximate = select.with_algorithm(SelectAlgorithm::Approximate { buckets: 1024 });
                let ms = median_of_calls(gpu, || gpu.select(&data, n / 2, &approximate).map(|_| ()));
                eprintln!(
                    "bracket-sweep: {} n=2^{log_n} approximate median sample {label} round {round}: {ms:.4} ms, floor {floor_ms:.4} ms",
                    K::NAME
                );
                if !top_k {
                    continue;
                }
                for k in [1024, 262_144] {
                    let options = TopKOptions::new(Order::Largest)
                        .with_algorithm(Algorithm::SampleSelect)
                        .with_policy(policy);
                    let plan = gpu.plan_top_k(&Keys::new(&data), k, &options).unwrap();
                    let mut out = TopK {
                        values: gpu.alloc_zeroed::<K>(k).unwrap(),
                        indices: gpu.alloc_zeroed(k).unwrap(),
                    };
                    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
                    let ms = median_of_calls(gpu, || {
                        gpu.top_k_into(&plan, Keys::new(&data), &mut out, &mut workspace)
                    });
                    eprintln!(
                        "bracket-sweep: {} n=2^{log_n} top-k {k} sample {label} round {round}: {ms:.4} ms, floor {floor_ms:.4} ms",
                        K::NAME
                    );
                }
            }
        }
    }
    // `GPU_SELECT_BRACKET_LOG_N` (sizes, comma-separated) narrows the section to f32 at
    // those sizes, so that a profiler's first launches are the first size's median.
    let sizes = env_numbers("GPU_SELECT_BRACKET_LOG_N");
    if !sizes.is_empty() {
        for log_n in sizes {
            one::<f32>(gpu, log_n, |value| value, true);
        }
        return;
    }
    for log_n in [27, 28] {
        one::<f32>(gpu, log_n, |value| value, true);
    }
    one::<f64>(gpu, 28, |value| value as f64, false);
    one::<half::bf16>(gpu, 28, half::bf16::from_f32, false);
}

/// The numbers of the comma-separated list in environment variable `name` (none when it is
/// unset; entries that are not numbers are skipped).
fn env_numbers(name: &str) -> Vec<u32> {
    std::env::var(name).unwrap_or_default().split(',').filter_map(|v| v.trim().parse().ok()).collect()
}

/// Whether the comma-separated names of environment variable `name` hold `item`; `None`
/// when it is not set (the section's default applies).
fn env_names_hold(name: &str, item: &str) -> Option<bool> {
    std::env::var(name).ok().map(|names| names.split(',').any(|n| n.trim() == item))
}

/// Top-k of small arrays (section `small`): the issue's 2^16 and 2^20 keys at `k` = 32 and
/// 1024, f32 and bf16 (`Auto`, which takes 2^16 as one row of the rows' radix kernel and
/// 2^20 by the array algorithms), into the caller's workspace, beside the read floor.
fn bench_small_arrays(gpu: &Gpu, cases: &mut Vec<Case>) {
    fn one<K: SelectKey>(gpu: &Gpu, convert: fn(f32) -> K, cases: &mut Vec<Case>) {
        for log_n in [16u32, 20] {
            let n = 1usize << log_n;
            let data = gpu
                .upload(&uniform_f32(n, log_n as u64).into_iter().map(convert).collect::<Vec<K>>())
                .unwrap();
            let floor_ms = read_floor(gpu, &gpu.alloc_zeroed::<f32>(data.bytes() / 4).unwrap());
            for k in [32usize, 1024] {
                time_array_top_k(gpu, &data, (log_n, k), floor_ms, ("small", "small_top_k"), cases);
                time_one_row_top_k(gpu, &data, (log_n, k), floor_ms);
            }
        }
    }
    one::<f32>(gpu, |value| value, cases);
    one::<half::bf16>(gpu, half::bf16::from_f32, cases);
}

/// Sizes (log2 n) of the small-array sweep: around the bounds of `Auto`'s one-row path.
const SMALL_SWEEP_LOG_N: std::ops::RangeInclusive<u32> = 14..=24;
/// `k` of the small-array sweep.
const SMALL_SWEEP_KS: [usize; 7] = [16, 32, 128, 256, 512, 1024, 2048];
/// The forced splits of one row the small-array sweep times (powers of two to the rows'
/// most, 256).
const SMALL_SWEEP_PARTS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// One array of the small-array sweeps: 2^`log_n` uniform keys (seeded by `log_n`, so both
/// sweeps time the same keys) on the device, and the read floor of as many bytes.
fn sweep_array<K: SelectKey>(gpu: &Gpu, log_n: u32, convert: fn(f32) -> K) -> (usize, DeviceBuffer<K>, f64) {
    let n = 1usize << log_n;
    let data =
        gpu.upload(&uniform_f32(n, log_n as u64 + 7).into_iter().map(convert).collect::<Vec<K>>()).unwrap();
    let floor_ms = read_floor(gpu, &gpu.alloc_zeroed::<f32>(data.bytes().div_ceil(4)).unwrap());
    (n, data, floor_ms)
}

/// The small-array sweep (section `small-sweep`, never on by default): one array of
/// 2^14 … 2^24 uniform keys (f32, bf16, f64), `k` of [`SMALL_SWEEP_KS`], largest first,
/// into the caller's workspace: `Auto`, each array algorithm that takes the shape (bitonic,
/// radix, SampleSelect, SBP radix, block sort; with the cost model's predictions in the
/// CSV, so that `Auto`'s pick can be read off), the array as one row (`row`: the rows' `Auto`, its kernel and
/// split; `queues`: the WarpSelect queues kernel), and the row forced into the radix kernel
/// with each split of [`SMALL_SWEEP_PARTS`] up to `n / k` parts; one line per case and `small-sweep.csv` in the results folder, so that `Auto`'s
/// one-row bounds and the row's split can be read off one run. `GPU_SELECT_SMALL_SWEEP_LOG_N`
/// (sizes, comma-separated, e.g. `22,23,24`) and `GPU_SELECT_SMALL_SWEEP_KEYS` (key names,
/// e.g. `f32,bf16`) narrow it.
fn small_sweep(gpu: &Gpu) {
    fn row_ms<K: SelectKey>(gpu: &Gpu, data: &DeviceBuffer<K>, k: usize) -> f64 {
        let (plan, mut workspace, mut out) = rows_buffers::<K>(gpu, data, (1, data.len(), k), Order::Largest);
        median_of_calls(gpu, || {
            gpu.top_k_into(&plan, Keys::rows(data, 1, data.len()), &mut out, &mut workspace)
        })
    }
    fn one<K: SelectKey>(gpu: &Gpu, convert: fn(f32) -> K, csv: &mut String) {
        if env_names_hold("GPU_SELECT_SMALL_SWEEP_KEYS", K::NAME) == Some(false) {
            return;
        }
        let only = env_numbers("GPU_SELECT_SMALL_SWEEP_LOG_N");
        for log_n in SMALL_SWEEP_LOG_N.filter(|log_n| only.is_empty() || only.contains(log_n)) {
            let (n, data, floor_ms) = sweep_array(gpu, log_n, convert);
            for k in SMALL_SWEEP_KS.into_iter().filter(|&k| k <= n) {
                // (form, measured ms, the cost model's prediction where the plan has one).
                let mut forms: Vec<(String, f64, Option<f64>)> = Vec::new();
                for (name, algorithm) in [
                    ("auto", Algorithm::Auto),
                    ("bitonic", Algorithm::Bitonic),
                    ("radix", Algorithm::RadixSelect),
                    ("sample", Algorithm::SampleSelect),
                    ("sbp", Algorithm::SbpRadix),
                    ("block-sort", Algorithm::BlockSort),
                ] {
                    let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
                    if let Some((ms, predicted)) = top_k_into_ms(gpu, &data, k, &options) {
                        forms.push((name.to_string(), ms, predicted));
                    }
                }
                forms.push(("row".to_string(), row_ms(gpu, &data, k), None));
                let queues = Tuning { rows_auto_kernel: Some(RowsKernelFamily::WarpSelect), ..*gpu.tuning() };
                forms.push(("queues".to_string(), row_ms(&gpu.with_tuning(queues), &data, k), None));
                for parts in SMALL_SWEEP_PARTS.into_iter().filter(|&parts| parts as usize <= n / k) {
                    let split = Tuning {
                        rows_radix_parts: Some(parts),
                        rows_auto_kernel: Some(RowsKernelFamily::RadixSelect),
                        ..*gpu.tuning()
                    };
                    forms.push((format!("p{parts}"), row_ms(&gpu.with_tuning(split), &data, k), None));
                }
                let line: Vec<String> = forms.iter().map(|(name, ms, _)| format!("{name} {ms:.4}")).collect();
                eprintln!(
                    "small-sweep: {} n=2^{log_n} k={k} floor {floor_ms:.4} | {}",
                    K::NAME,
                    line.join(" | ")
                );
                for (name, ms, predicted) in forms {
                    let predicted = predicted.map_or(String::new(), |ms| format!("{ms:.5}"));
                    let _ = writeln!(csv, "{},{n},{k},{name},{ms:.5},{floor_ms:.5},{predicted}", K::NAME);
                }
            }
        }
    }
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("cannot create the results folder");
    let path = dir.join("small-sweep.csv");
    let mut csv = String::from("key,n,k,form,ms,floor_ms,predicted_ms\n");
    one::<f32>(gpu, |value| value, &mut csv);
    one::<half::bf16>(gpu, half::bf16::from_f32, &mut csv);
    one::<f64>(gpu, |value| value as f64, &mut csv);
    std::fs::write(&path, &csv).expect("cannot write the sweep");
    println!("written: {}", path.display());
    // Few long rows, which the rows' split balances too (the rows sweep's 8 × 2^20).
    let (rows, cols) = (8, 1usize << 20);
    let matrix = gpu.upload(&uniform_f32(rows * cols, 820)).unwrap();
    for k in [256, 1024, 2048] {
        let (plan, mut workspace, mut out) =
            rows_buffers::<f32>(gpu, &matrix, (rows, cols, k), Order::Largest);
        let ms = median_of_calls(gpu, || {
            gpu.top_k_into(&plan, Keys::rows(&matrix, rows, cols), &mut out, &mut workspace)
        });
        eprintln!("small-sweep rows: f32 {rows}x2^20 k={k}: {ms:.4} ms");
    }
}

/// The bounded split against the split before it (section `bounded-sweep`, never on by
/// default): one row of 2^14 … 2^24 uniform keys (f32, bf16), `k` of [`SMALL_SWEEP_KS`],
/// largest first, into the caller's workspace, with `rows_bounded_split` at `Some(true)`
/// (wherever it applies) and `Some(false)` (never), beside the fastest array algorithm
/// (bitonic, radix, SampleSelect), then many rows both ways ([`BOUNDED_SWEEP_ROWS`] of
/// logit-like values, bf16 and f32, `k` of [`BOUNDED_SWEEP_ROWS_KS`]: where `bounded_pays`
/// could take the split for many rows beyond the shapes it was measured on); one line per
/// case.
fn bounded_sweep(gpu: &Gpu) {
    fn both<K: SelectKey>(
        gpu: &Gpu,
        data: &DeviceBuffer<K>,
        (rows, cols, k): (usize, usize, usize),
    ) -> [f64; 2] {
        [Some(true), Some(false)].map(|bounded| {
            let gpu = gpu.with_tuning(Tuning { rows_bounded_split: bounded, ..*gpu.tuning() });
            let (plan, mut workspace, mut out) =
                rows_buffers::<K>(&gpu, data, (rows, cols, k), Order::Largest);
            median_of_calls(&gpu, || {
                gpu.top_k_into(&plan, Keys::rows(data, rows, cols), &mut out, &mut workspace)
            })
        })
    }
    fn one<K: SelectKey>(gpu: &Gpu, convert: fn(f32) -> K) {
        for log_n in SMALL_SWEEP_LOG_N {
            let (n, data, floor_ms) = sweep_array(gpu, log_n, convert);
            for k in SMALL_SWEEP_KS.into_iter().filter(|&k| k <= n) {
                let [bounded, before] = both(gpu, &data, (1, n, k));
                // The array algorithms, for `Auto`'s one-row bounds: the fastest of them.
                let array = [Algorithm::Bitonic, Algorithm::RadixSelect, Algorithm::SampleSelect]
                    .into_iter()
                    .filter_map(|algorithm| {
                        let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
                        top_k_into_ms(gpu, &data, k, &options).map(|(ms, _)| ms)
                    })
                    .fold(f64::INFINITY, f64::min);
                eprintln!(
                    "bounded-sweep: {} 1x2^{log_n} k={k} floor {floor_ms:.4} | bounded {bounded:.4} | before {before:.4} | {:.3} | array {array:.4}",
                    K::NAME,
                    bounded / before
                );
            }
        }
    }
    one::<f32>(gpu, |value| value);
    one::<half::bf16>(gpu, half::bf16::from_f32);
    fn rows_of<K: SelectKey>(gpu: &Gpu, convert: fn(f32) -> K, (rows, cols): (usize, usize)) {
        let matrix = gpu
            .upload(
                &logits_f32(rows * cols, (rows + cols) as u64).into_iter().map(convert).collect::<Vec<K>>(),
            )
            .unwrap();
        for k in BOUNDED_SWEEP_ROWS_KS {
            let [bounded, before] = both(gpu, &matrix, (rows, cols, k));
            eprintln!(
                "bounded-sweep rows: {} {rows}x{cols} k={k} | bounded {bounded:.4} | before {before:.4} | {:.3}",
                K::NAME,
                bounded / before
            );
        }
    }
    for shape in BOUNDED_SWEEP_ROWS {
        rows_of::<half::bf16>(gpu, half::bf16::from_f32, shape);
        rows_of::<f32>(gpu, |value| value, shape);
    }
}

/// The many-rows shapes of the bounded sweep: batch × vocabulary of LLM sampling (Llama 2's
/// 32 000 to Gemma's 262 144), fewer and more rows than a wave of blocks, longer rows.
const BOUNDED_SWEEP_ROWS: [(usize, usize); 9] = [
    (64, 32_000),
    (64, 131_072),
    (256, 131_072),
    (256, 262_144),
    (512, 131_072),
    (1024, 131_072),
    (8, 1 << 20),
    (64, 1 << 19),
    (64, 1 << 20),
];
/// The `k` of the bounded sweep's many rows.
const BOUNDED_SWEEP_ROWS_KS: [usize; 6] = [50, 128, 256, 512, 1024, 2048];

/// The batches of the half-precision sweep (section `half-sweep`): one sequence, a serving
/// batch, a large batch.
const HALF_SWEEP_ROWS: [usize; 3] = [1, 64, 256];
/// Its vocabulary sizes: Llama 2's 32 000 to Gemma's 262 144.
const HALF_SWEEP_COLS: [usize; 4] = [32_000, 65_536, 131_072, 262_144];
/// Its `k`: greedy, top-50 sampling, and larger.
const HALF_SWEEP_KS: [usize; 4] = [1, 50, 256, 1024];

/// The half-precision sweep (section `half-sweep`, never on by default): bf16 logit-like
/// rows ([`logits_f32`]) of every batch × vocabulary of [`HALF_SWEEP_ROWS`] ×
/// [`HALF_SWEEP_COLS`] at every `k` of [`HALF_SWEEP_KS`] (largest, `Auto`), written to
/// `half-sweep.csv` (`key,rows,cols,k,ms,floor_ms`) in the results folder, for the plot of
/// time against n and k beside torch's (`docs/results/half_torch.py --sweep`,
/// `docs/results/half_plot.py`).
fn half_sweep(gpu: &Gpu) {
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("cannot create the results folder");
    let path = dir.join("half-sweep.csv");
    let mut csv = String::from("key,rows,cols,k,ms,floor_ms\n");
    for rows in HALF_SWEEP_ROWS {
        for cols in HALF_SWEEP_COLS {
            let keys: Vec<half::bf16> =
                logits_f32(rows * cols, cols as u64).into_iter().map(half::bf16::from_f32).collect();
            let matrix = gpu.upload(&keys).unwrap();
            let floor_ms = read_floor(gpu, &gpu.alloc_zeroed::<f32>(matrix.bytes() / 4).unwrap());
            for k in HALF_SWEEP_KS {
                let (plan, mut workspace, mut out) =
                    rows_buffers::<half::bf16>(gpu, &matrix, (rows, cols, k), Order::Largest);
                let ms = median_of_calls(gpu, || {
                    gpu.top_k_into(&plan, Keys::rows(&matrix, rows, cols), &mut out, &mut workspace)
                });
                eprintln!("half-sweep: bf16 {rows}x{cols} k={k}: {ms:.4} ms, floor {floor_ms:.4} ms");
                writeln!(csv, "bf16,{rows},{cols},{k},{ms:.5},{floor_ms:.5}").unwrap();
            }
            // Written shape by shape, so that a run cut short keeps what it measured.
            std::fs::write(&path, &csv).expect("cannot write the sweep");
        }
    }
    println!("written: {}", path.display());
}

/// The large-k section's rows (largest first): LLM-sized rows with `k` from 4096 to half a
/// row, and the k-NN bench's rows at `k = 10 000` (a query tile's distances to 10^6 base
/// vectors).
const LARGE_K_ROWS: [(usize, usize, &[usize]); 3] =
    [(64, 131_072, &[4096, 16_384, 65_536]), (256, 262_144, &[16_384, 131_072]), (128, 1_000_000, &[10_000])];

/// One key type of the large-k section: the rows of [`LARGE_K_ROWS`] over logit-like values
/// ([`logits_f32`]), by the batched radix select and, in the same call, by the per-row path
/// it replaced (a one-array top-k per row, planned once: the A/B), each beside the read
/// floor of its own bytes.
fn bench_large_k_type<K: SelectKey>(gpu: &Gpu, convert: fn(f32) -> K, cases: &mut Vec<Case>) {
    for (rows, cols, ks) in LARGE_K_ROWS {
        let keys: Vec<K> = logits_f32(rows * cols, cols as u64).into_iter().map(convert).collect();
        let matrix = gpu.upload(&keys).unwrap();
        drop(keys);
        let floor_ms = read_floor(gpu, &gpu.alloc_zeroed::<f32>(matrix.bytes() / 4).unwrap());
        for &k in ks {
            let (plan, mut workspace, mut out) =
                rows_buffers::<K>(gpu, &matrix, (rows, cols, k), Order::Largest);
            let batched_ms = median_of_calls(gpu, || {
                gpu.top_k_into(&plan, Keys::rows(&matrix, rows, cols), &mut out, &mut workspace)
            });
            let row_plan =
                gpu.plan_top_k(&Keys::new(matrix.slice(0..cols)), k, &TopKOptions::largest()).unwrap();
            let mut row_workspace = gpu.alloc_zeroed::<u8>(row_plan.workspace_bytes()).unwrap();
            let per_row_ms = median_of_calls(gpu, || {
                for row in 0..rows {
                    let outputs = TopKOut::new(
                        out.values.slice_mut(row * k..(row + 1) * k),
                        out.indices.slice_mut(row * k..(row + 1) * k),
                    );
                    let keys = Keys::new(matrix.slice(row * cols..(row + 1) * cols));
                    gpu.top_k_into(&row_plan, keys, outputs, &mut row_workspace)?;
                }
                Ok(())
            });
            let name = format!("{} {rows}x{cols} k={k} Largest", K::NAME);
            eprintln!(
                "large-k: rows {name}: batched {batched_ms:.4} ms, per row {per_row_ms:.4} ms, floor {floor_ms:.4} ms"
            );
            for (group, median_ms) in [("large_k_rows", batched_ms), ("large_k_rows_per_row", per_row_ms)] {
                cases.push(Case {
                    group,
                    name: name.clone(),
                    elements: (rows * cols) as u64,
                    bytes: matrix.bytes() as u64,
                    median_ms,
                    floor_ms,
                    predicted_ms: None,
                });
            }
        }
    }
}

/// The large-k section (`large-k`): rows with `k` beyond the rows kernels' 2048, in bf16 and
/// f32 (docs/results/large_k_torch.py times torch.topk on the same shapes).
fn bench_large_k(gpu: &Gpu, cases: &mut Vec<Case>) {
    bench_large_k_type::<half::bf16>(gpu, half::bf16::from_f32, cases);
    bench_large_k_type::<f32>(gpu, |value| value, cases);
}

/// The shapes of the rows sweep: rows × cols, from many short rows to a few very long ones,
/// so that the rows cost model sees every kernel and split the library chooses.
const SWEEP_SHAPES: [(usize, usize); 23] = [
    (100_000, 128),
    (100_000, 512),
    (10_000, 256),
    (10_000, 1000),
    (10_000, 128),
    (100_000, 256),
    (100_000, 1000),
    (10_000, 2048),
    (10_000, 4096),
    (10_000, 16_384),
    (10_000, 32_000),
    (10_000, 128_000),
    (2000, 32_768),
    (2000, 131_072),
    (500, 8192),
    (500, 131_072),
    (64, 4096),
    (64, 32_768),
    (64, 131_072),
    (64, 1 << 20),
    (8, 131_072),
    (8, 1 << 20),
    (1, 1 << 22),
];
/// The `k` of the rows sweep (those up to a row's length).
const SWEEP_KS: [usize; 8] = [1, 8, 32, 100, 256, 512, 1024, 2048];
/// The 64-bit shapes of the rows sweep (f64): the cost model's key-size terms.
const SWEEP_SHAPES_64: [(usize, usize); 5] =
    [(10_000, 1000), (10_000, 4096), (10_000, 32_000), (64, 131_072), (2000, 131_072)];

/// Uniform f64 keys in [0, 1) with 53 random bits each.
fn uniform_f64(n: usize, seed: u64) -> Vec<f64> {
    random_words(n, seed).map(|word| (word >> 11) as f64 / (1u64 << 53) as f64).collect()
}

/// One line of the rows sweep: `top_k_rows_into` on `matrix` for every `k` of
/// [`SWEEP_KS`] that fits, the median of 10 event-timed calls after 2 warm-up calls
/// (criterion would take minutes over the whole grid).
fn sweep_rows<K: SelectKey>(
    gpu: &Gpu,
    matrix: &DeviceBuffer<K>,
    (rows, cols): (usize, usize),
    floor_ms: f64,
    csv: &mut String,
) {
    let algorithm = std::env::var("GPU_SELECT_ROWS_ALGORITHM").unwrap_or_else(|_| "auto".to_string());
    for k in SWEEP_KS.into_iter().filter(|&k| k <= cols) {
        let order = Order::Smallest;
        let (plan, mut workspace, mut out) = rows_buffers::<K>(gpu, matrix, (rows, cols, k), order);
        let median_ms = median_of_calls(gpu, || {
            gpu.top_k_into(&plan, Keys::rows(matrix, rows, cols), &mut out, &mut workspace)
        });
        let predicted = plan.predicted_ms();
        eprintln!("sweep {} {rows}x{cols} k={k} {algorithm}: {median_ms:.4} ms", K::NAME);
        let _ = writeln!(
            csv,
            "{},{rows},{cols},{k},{algorithm},{median_ms:.5},{floor_ms:.5},{}",
            K::NAME,
            predicted.map_or(String::new(), |ms| format!("{ms:.5}"))
        );
    }
}

/// The rows sweep (section `rows-sweep`, never on by default): every shape of
/// [`SWEEP_SHAPES`] (f32) and [`SWEEP_SHAPES_64`] (f64) at every `k`, with whatever kernel
/// `GPU_SELECT_ROWS_ALGORITHM` forces, written to `rows-sweep-<algorithm>.csv` in the
/// results folder. The rows cost model is fitted to it (`host/src/engine/rows_cost.rs`).
/// `GPU_SELECT_SWEEP_MAX_COLS` keeps the shapes of at most that many columns (the warp
/// kernels' short rows take seconds; the whole sweep minutes).
fn rows_sweep(gpu: &Gpu) {
    let max_cols = std::env::var("GPU_SELECT_SWEEP_MAX_COLS")
        .map_or(usize::MAX, |cols| cols.parse().expect("GPU_SELECT_SWEEP_MAX_COLS is a number of columns"));
    let algorithm = std::env::var("GPU_SELECT_ROWS_ALGORITHM").unwrap_or_else(|_| "auto".to_string());
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("cannot create the results folder");
    let path = dir.join(format!("rows-sweep-{algorithm}.csv"));
    let mut csv = String::from("key,rows,cols,k,algorithm,ms,floor_ms,predicted_ms\n");
    for (rows, cols) in SWEEP_SHAPES.into_iter().filter(|&(_, cols)| cols <= max_cols) {
        let matrix = gpu.upload(&uniform_f32(rows * cols, cols as u64)).unwrap();
        let floor_ms = read_floor(gpu, &matrix);
        sweep_rows(gpu, &matrix, (rows, cols), floor_ms, &mut csv);
        // Written shape by shape, so that a run cut short keeps what it measured.
        std::fs::write(&path, &csv).expect("cannot write the sweep");
    }
    for (rows, cols) in SWEEP_SHAPES_64.into_iter().filter(|&(_, cols)| cols <= max_cols) {
        let matrix = gpu.upload(&uniform_f64(rows * cols, cols as u64)).unwrap();
        // The floor of the same bytes, read as twice as many f32 words.
        let words = gpu.upload(&uniform_f32(2 * rows * cols, 1)).unwrap();
        let floor_ms = read_floor(gpu, &words);
        drop(words);
        sweep_rows(gpu, &matrix, (rows, cols), floor_ms, &mut csv);
        std::fs::write(&path, &csv).expect("cannot write the sweep");
    }
    println!("written: {}", path.display());
}

/// The sizes (log2 n) of the top-k sweep: the range over which `Auto` must stay within
/// 10 % of the best algorithm.
const TOP_K_SWEEP_LOG_N: [u32; 6] = [20, 22, 24, 26, 28, 30];
/// The `k` of the top-k sweep.
const TOP_K_SWEEP_KS: [usize; 8] = [1, 8, 32, 100, 256, 512, 1000, 1024];

/// The median time of `top_k_into` of `keys` with `options` into buffers made once (as
/// [`median_of_calls`] times it), and the plan's predicted time; `None` when the algorithm
/// does not take the shape. The sweeps' one timing of a top-k.
fn top_k_into_ms<K: SelectKey>(
    gpu: &Gpu,
    keys: &DeviceBuffer<K>,
    k: usize,
    options: &TopKOptions,
) -> Option<(f64, Option<f64>)> {
    let plan = gpu.plan_top_k(&Keys::new(keys), k, options).ok()?;
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let mut out =
        TopK { values: gpu.alloc_zeroed::<K>(k).unwrap(), indices: gpu.alloc_zeroed::<u64>(k).unwrap() };
    let ms = median_of_calls(gpu, || gpu.top_k_into(&plan, keys, &mut out, &mut workspace));
    Some((ms, plan.predicted_ms()))
}

/// The top-k sweep (section `topk-sweep`, never on by default): uniform keys at every
/// size of [`TOP_K_SWEEP_LOG_N`] and `k` of [`TOP_K_SWEEP_KS`], largest first, with each
/// algorithm and with `Auto` (the median of 10 event-timed calls after 2 warm-up calls),
/// written to `topk-sweep.csv` in the results folder with the model's prediction. f32 keys;
/// `GPU_SELECT_TOPK_SWEEP_KEYS` (key names, comma-separated, of f32, bf16 and f64) names
/// others: the same values in [0, 1) rounded to bf16 (about 16 000 distinct values, ties
/// beyond the sort at every `k`: the key size's cost, not a benign case) or widened to f64.
/// `GPU_SELECT_TOPK_SWEEP_LOG_N` (sizes, e.g. `20,28`) and `GPU_SELECT_TOPK_SWEEP_ALGORITHMS`
/// (the CSV's names, e.g. `sample,bitonic`) narrow it (for a profiler).
fn top_k_sweep(gpu: &Gpu) {
    fn one<K: SelectKey>(gpu: &Gpu, convert: fn(f32) -> K, csv: &mut String, path: &std::path::Path) {
        let algorithms = [
            ("auto", Algorithm::Auto),
            ("bitonic", Algorithm::Bitonic),
            ("radix", Algorithm::RadixSelect),
            ("sample", Algorithm::SampleSelect),
            ("heap", Algorithm::PerThreadHeap),
            ("sort-choose", Algorithm::SortAndChoose),
            ("bucket", Algorithm::BucketSelect),
        ];
        let sizes = env_numbers("GPU_SELECT_TOPK_SWEEP_LOG_N");
        let named = |name: &str| env_names_hold("GPU_SELECT_TOPK_SWEEP_ALGORITHMS", name) != Some(false);
        for log_n in TOP_K_SWEEP_LOG_N.into_iter().filter(|log_n| sizes.is_empty() || sizes.contains(log_n)) {
            let n = 1usize << log_n;
            let keys = gpu
                .upload(&uniform_f32(n, log_n as u64 + 100).into_iter().map(convert).collect::<Vec<K>>())
                .unwrap();
            // The floor of the same bytes, read as f32 words.
            let floor_ms = read_floor(gpu, &gpu.alloc_zeroed::<f32>(keys.bytes().div_ceil(4)).unwrap());
            for k in TOP_K_SWEEP_KS {
                for (name, algorithm) in algorithms.into_iter().filter(|(name, _)| named(name)) {
                    let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
                    let Some((median_ms, predicted)) = top_k_into_ms(gpu, &keys, k, &options) else {
                        continue;
                    };
                    eprintln!("topk-sweep {} n=2^{log_n} k={k} {name}: {median_ms:.4} ms", K::NAME);
                    let _ = writeln!(
                        csv,
                        "{},{n},{k},{name},{median_ms:.5},{floor_ms:.5},{}",
                        K::NAME,
                        predicted.map_or(String::new(), |ms| format!("{ms:.5}"))
                    );
                }
            }
            // Written size by size, so that a run cut short keeps what it measured.
            std::fs::write(path, &*csv).expect("cannot write the sweep");
        }
    }
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("cannot create the results folder");
    let path = dir.join("topk-sweep.csv");
    let mut csv = String::from("key,n,k,algorithm,ms,floor_ms,predicted_ms\n");
    // f32 unless the variable names others.
    let keys = |name: &str| env_names_hold("GPU_SELECT_TOPK_SWEEP_KEYS", name).unwrap_or(name == "f32");
    if keys("f32") {
        one::<f32>(gpu, |value| value, &mut csv, &path);
    }
    if keys("bf16") {
        one::<half::bf16>(gpu, half::bf16::from_f32, &mut csv, &path);
    }
    if keys("f64") {
        one::<f64>(gpu, |value| value as f64, &mut csv, &path);
    }
    println!("written: {}", path.display());
}

/// Sizes of the SBP sweep (the paper's 2^21 … 2^29, and 2^28, the size of the targets).
const SBP_SWEEP_LOG_N: [u32; 6] = [21, 23, 25, 27, 28, 29];
/// `K` of the SBP sweep (the paper's 8 … 128).
const SBP_SWEEP_KS: [usize; 5] = [8, 16, 32, 64, 128];

/// The SBP paper's datasets, `n` keys each as f32: integers uniform in `0 .. 2^30` (as f32,
/// so 24 significant bits), the bucket killer (every key 1.0 but four, each one byte away),
/// and squared distances from one vector to `n` others (32-dimensional, uniform in
/// `[0, 1)`, computed on all cores: the 128 dimensions of the paper would take the GPU
/// machine minutes per size for the same shape of distribution).
fn sbp_dataset(name: &str, n: usize, seed: u64) -> Vec<f32> {
    match name {
        "uniform" => random_words(n, seed).map(|word| (word >> 34) as f32).collect(),
        "bucket-killer" => {
            let mut data = vec![1.0f32; n];
            for byte in 0..4 {
                data[n / 5 * (byte + 1)] = f32::from_bits(0x3F80_0000 ^ (1 << (8 * byte)));
            }
            data
        }
        _ => {
            const DIM: usize = 32;
            let query: Vec<f32> = uniform_f32(DIM, seed);
            let mut data = vec![0.0f32; n];
            let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
            let chunk = n.div_ceil(threads);
            std::thread::scope(|scope| {
                for (c, part) in data.chunks_mut(chunk).enumerate() {
                    let query = &query;
                    scope.spawn(move || {
                        let mut words = random_words(part.len() * DIM, seed + 1 + c as u64);
                        for distance in part.iter_mut() {
                            *distance = query
                                .iter()
                                .map(|q| {
                                    ((words.next().unwrap() >> 40) as f32 / (1u64 << 24) as f32 - q).powi(2)
                                })
                                .sum();
                        }
                    });
                }
            });
            data
        }
    }
}

/// The SBP sweep (section `sbp-sweep`, never on by default): the SBP paper's comparisons on
/// this GPU. SBP radix against the multi-kernel radix select, SBP tree against SampleSelect
/// (and the bitonic top-k and `Auto`), top-k largest and selection of the `K`-th largest, on
/// the paper's three datasets, for `K` of [`SBP_SWEEP_KS`] and `n` of [`SBP_SWEEP_LOG_N`]
/// (medians of 10 event-timed calls after 2 warm-up calls, caller-provided workspace),
/// written to `sbp-sweep.csv` in the results folder with the read floor of the same bytes.
fn sbp_sweep(gpu: &Gpu) {
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("cannot create the results folder");
    let path = dir.join("sbp-sweep.csv");
    let mut csv = String::from("dataset,n,k,op,algorithm,ms,floor_ms\n");
    let top_k = [
        ("sbp-radix", Algorithm::SbpRadix),
        ("radix", Algorithm::RadixSelect),
        ("sbp-tree", Algorithm::SbpTree),
        ("sample", Algorithm::SampleSelect),
        ("bitonic", Algorithm::Bitonic),
        ("auto", Algorithm::Auto),
    ];
    let select = [
        ("sbp-radix", SelectAlgorithm::SbpRadix),
        ("sbp-tree", SelectAlgorithm::SbpTree),
        ("sample", SelectAlgorithm::SampleSelect),
    ];
    // `GPU_SELECT_SBP_SWEEP_LOG_N` (comma-separated) narrows the sizes, for tuning sweeps.
    let sizes: Vec<u32> =
        std::env::var("GPU_SELECT_SBP_SWEEP_LOG_N").map_or(SBP_SWEEP_LOG_N.to_vec(), |list| {
            list.split(',').map(|s| s.trim().parse().expect("GPU_SELECT_SBP_SWEEP_LOG_N: numbers")).collect()
        });
    for log_n in sizes {
        let n = 1usize << log_n;
        for dataset in ["uniform", "bucket-killer", "distances"] {
            let keys = gpu.upload(&sbp_dataset(dataset, n, log_n as u64)).unwrap();
            let floor_ms = read_floor(gpu, &keys);
            for k in SBP_SWEEP_KS {
                for (name, algorithm) in top_k {
                    let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
                    let Some((ms, _)) = top_k_into_ms(gpu, &keys, k, &options) else { continue };
                    eprintln!(
                        "sbp-sweep {dataset} n=2^{log_n} k={k} top_k {name}: {ms:.4} ms ({:.2}× floor)",
                        ms / floor_ms
                    );
                    let _ = writeln!(csv, "{dataset},{n},{k},top_k,{name},{ms:.5},{floor_ms:.5}");
                }
                for (name, algorithm) in select {
                    let options = SelectOptions::new(Order::Largest).with_algorithm(algorithm);
                    let plan = gpu.plan_select::<f32>(n, &options).unwrap();
                    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
                    let ms = median_of_calls(gpu, || {
                        gpu.select_into(&plan, &keys, k - 1, &mut workspace).map(|_| ())
                    });
                    eprintln!(
                        "sbp-sweep {dataset} n=2^{log_n} k={k} select {name}: {ms:.4} ms ({:.2}× floor)",
                        ms / floor_ms
                    );
                    let _ = writeln!(csv, "{dataset},{n},{k},select,{name},{ms:.5},{floor_ms:.5}");
                }
            }
            std::fs::write(&path, &csv).expect("cannot write the sweep");
        }
    }
    println!("written: {}", path.display());
}

/// Median of `runs` host-clock timings of `call` followed by a wait for the GPU: the latency
/// a caller sees, allocation and freeing included (CUDA events would miss host time spent
/// in the driver while the GPU idles).
fn wall_ms(gpu: &Gpu, runs: usize, mut call: impl FnMut() -> gpu_select::Result<()>) -> f64 {
    for _ in 0..5 {
        call().unwrap();
        gpu.synchronize().unwrap();
    }
    let mut samples = Samples::default();
    for _ in 0..runs {
        let started = std::time::Instant::now();
        call().unwrap();
        gpu.synchronize().unwrap();
        samples.0.push(started.elapsed().as_secs_f64() * 1e3);
    }
    samples.median()
}

/// The convenient calls (which allocate their workspace and outputs) against the forms
/// that take the caller's (`_into`), same inputs, same process: the price of convenience.
fn convenience(gpu: &Gpu) {
    println!(
        "\nconvenient call against the caller-workspace form (host clock + synchronize, median of 50 runs)"
    );
    println!("{:<44} {:>12} {:>12} {:>10} {:>12}", "case", "convenient", "workspace", "ratio", "difference");
    let print = |name: &str, convenient: f64, into: f64| {
        println!(
            "{name:<44} {convenient:>9.4} ms {into:>9.4} ms {:>10.3} {:>9.1} us",
            convenient / into,
            (convenient - into) * 1e3
        );
    };
    for log_n in [16u32, 20, 24, 28] {
        let n = 1usize << log_n;
        let data = gpu.upload(&uniform_f32(n, 5 + log_n as u64)).unwrap();
        for k in [1usize, 32, 262_144].into_iter().filter(|&k| k <= n / 4) {
            let options = TopKOptions::new(Order::Largest);
            let plan = gpu.plan_top_k(&Keys::new(&data), k, &options).unwrap();
            let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
            let mut out = TopK {
                values: gpu.alloc_zeroed::<f32>(k).unwrap(),
                indices: gpu.alloc_zeroed::<u64>(k).unwrap(),
            };
            // The plan form first, then the convenient call, then a plan made each call into
            // the caller's buffers: what the convenient call adds, split into planning and
            // allocation.
            let into = wall_ms(gpu, 50, || gpu.top_k_into(&plan, &data, &mut out, &mut workspace));
            let convenient = wall_ms(gpu, 50, || gpu.top_k(&data, k, &options).map(drop));
            let planned = wall_ms(gpu, 50, || {
                let plan = gpu.plan_top_k(&Keys::new(&data), k, &options)?;
                gpu.top_k_into(&plan, &data, &mut out, &mut workspace)
            });
            print(&format!("top_k n=2^{log_n} k={k}"), convenient, into);
            println!("{:<44} {planned:>9.4} ms (a plan each call, the caller's buffers)", "");
        }
        for rank in [n / 2, n / 100] {
            let options = SelectOptions::default();
            let plan = gpu.plan_select::<f32>(n, &options).unwrap();
            let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
            let convenient = wall_ms(gpu, 50, || gpu.select(&data, rank, &options).map(drop));
            let into = wall_ms(gpu, 50, || gpu.select_into(&plan, &data, rank, &mut workspace).map(drop));
            print(&format!("select n=2^{log_n} rank={rank}"), convenient, into);
        }
    }
    for (rows, cols, k) in [(16usize, 1024usize, 8usize), (10_000, 1000, 100), (64, 131_072, 50)] {
        let matrix = gpu.upload(&uniform_f32(rows * cols, 17)).unwrap();
        let (plan, mut workspace, mut out) =
            rows_buffers::<f32>(gpu, &matrix, (rows, cols, k), Order::Largest);
        let options = TopKOptions::largest();
        let convenient =
            wall_ms(gpu, 50, || gpu.top_k(Keys::rows(&matrix, rows, cols), k, &options).map(drop));
        let into = wall_ms(gpu, 50, || {
            gpu.top_k_into(&plan, Keys::rows(&matrix, rows, cols), &mut out, &mut workspace)
        });
        print(&format!("top_k_rows {rows}x{cols} k={k}"), convenient, into);
    }
}

/// Which parts of the benchmark run: `GPU_SELECT_BENCH_SECTIONS` (a comma-separated list
/// of `sizes` (sort, top-k, selection at 2^20, 2^24, 2^28), `rows`, `half` (16-bit keys
/// beside f32 on LLM sampling shapes and 2^28), `large-k` (rows with `k` beyond 2048),
/// `quantiles`,
/// `distributed` (DIBMS over four threads' handles), `knn` (exact k-NN, SIFT1M's shape),
/// `knn-streamed` (exact k-NN over a base in host memory), `multi-gpu` (k-NN and DIBMS over
/// every GPU of the machine), `convenience` (the
/// convenient calls against the caller-workspace forms), `rows-sweep`, `topk-sweep`,
/// `sbp-sweep`, `half-sweep` and `small-sweep`), all but `knn-streamed`, `multi-gpu` and the sweeps by
/// default.
fn section_enabled(section: &str) -> bool {
    if section.ends_with("-sweep") || section == "multi-gpu" || section == "knn-streamed" {
        return std::env::var("GPU_SELECT_BENCH_SECTIONS")
            .is_ok_and(|list| list.split(',').any(|s| s.trim() == section));
    }
    std::env::var("GPU_SELECT_BENCH_SECTIONS")
        .map_or(true, |list| list.split(',').any(|s| s.trim() == section))
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn today() -> String {
    let days =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64 / 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    format!("{year:04}-{month:02}-{day:02}")
}

fn results_dir() -> std::path::PathBuf {
    if let Ok(dir) = std::env::var("GPU_SELECT_RESULTS_DIR") {
        return dir.into();
    }
    let in_workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results");
    if in_workspace.is_dir() { in_workspace } else { "docs/results".into() }
}

fn write_results(gpu: &Gpu, cases: &[Case]) {
    let limits = gpu.limits();
    let date = today();
    let slug: String = limits
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect();
    let dir = results_dir();
    std::fs::create_dir_all(&dir).expect("cannot create the results folder");
    let mut json = format!(
        "{{\n  \"gpu\": {:?},\n  \"date\": {:?},\n  \"backend\": {:?},\n  \"cases\": [\n",
        limits.name,
        date,
        gpu.describe()
    );
    let mut markdown = format!(
        "# Benchmarks on {} ({date})\n\n{}\n\nMedians of CUDA-event timings. *floor* = a read-only pass over the same \
         bytes, measured in the same run.\n\n| group | case | ms | elements/s | GB/s | read floor ms | × floor | predicted ms |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
        limits.name,
        gpu.describe()
    );
    for (i, case) in cases.iter().enumerate() {
        let elements_per_s = case.elements as f64 / (case.median_ms * 1e-3);
        let gb_per_s = case.bytes as f64 / (case.median_ms * 1e-3) / 1e9;
        let ratio = case.median_ms / case.floor_ms;
        let _ = writeln!(
            json,
            "    {{\"group\": {:?}, \"case\": {:?}, \"elements\": {}, \"bytes\": {}, \"median_ms\": {:.5}, \
             \"elements_per_s\": {:.4e}, \"gb_per_s\": {:.2}, \"read_floor_ms\": {:.5}, \"ratio_to_floor\": {:.3}, \"predicted_ms\": {}}}{}",
            case.group,
            case.name,
            case.elements,
            case.bytes,
            case.median_ms,
            elements_per_s,
            gb_per_s,
            case.floor_ms,
            ratio,
            case.predicted_ms.map_or("null".to_string(), |ms| format!("{ms:.5}")),
            if i + 1 < cases.len() { "," } else { "" }
        );
        let _ = writeln!(
            markdown,
            "| {} | {} | {:.4} | {:.3e} | {:.1} | {:.4} | {:.2} | {} |",
            case.group,
            case.name,
            case.median_ms,
            elements_per_s,
            gb_per_s,
            case.floor_ms,
            ratio,
            case.predicted_ms.map_or(String::new(), |ms| format!("{ms:.3}"))
        );
    }
    json.push_str("  ]\n}\n");
    let base = dir.join(format!("{slug}-{date}"));
    std::fs::write(base.with_extension("json"), json).expect("cannot write the JSON results");
    std::fs::write(base.with_extension("md"), &markdown).expect("cannot write the Markdown results");
    println!("\n{markdown}\nwritten: {}.{{json,md}}", base.display());
}

/// Without a GPU: say so, and show the library working on the emulator.
fn emulator_demo(reason: &str) {
    println!("No CUDA device ({reason}).");
    println!("Benchmarks need a GPU; running a short demo on the emulator instead (no results written).\n");
    let gpu = Gpu::emulator();
    let keys = uniform_f32(8 * 256, 7);
    let device_keys = gpu.upload(&keys).unwrap();
    let (sorted, ms) = gpu.time_ms(|| gpu.sort_segments(&device_keys, 256, Order::Largest)).unwrap();
    let sorted_keys = gpu.download(&sorted.keys).unwrap();
    println!("sorted 8 segments of 256 f32 keys, largest first, in {ms:.1} ms (emulated)");
    println!("segment 0 starts {:?}", &sorted_keys[..4]);
    let (top, ms) = gpu.time_ms(|| gpu.top_k(&device_keys, 5, &TopKOptions::largest())).unwrap();
    println!(
        "top 5 of {} keys in {ms:.1} ms (emulated): {:?} at {:?}",
        keys.len(),
        gpu.download(&top.values).unwrap(),
        gpu.download(&top.indices).unwrap()
    );
    // The same keys, filtered inside the top-k's kernels: the largest up to 0.9.
    let below = Keys::new(&device_keys).with_filter(InputFilter::Range { low: f32::NEG_INFINITY, high: 0.9 });
    let (top, ms) = gpu.time_ms(|| gpu.top_k(below, 3, &TopKOptions::largest())).unwrap();
    println!(
        "top 3 of the keys up to 0.9 (fused range filter) in {ms:.1} ms (emulated): {:?} at {:?}",
        gpu.download(&top.values).unwrap(),
        gpu.download(&top.indices).unwrap()
    );
    let quartiles = [0.0, 0.25, 0.5, 0.75, 1.0];
    let (values, ms) =
        gpu.time_ms(|| gpu.quantiles(&device_keys, &quartiles, &QuantileOptions::default())).unwrap();
    println!("quartiles (numpy's linear method) in {ms:.1} ms (emulated): {values:?}");
    let mut scratch = gpu.alloc_zeroed::<u32>(1).unwrap();
    let max_bits = read_pass(&gpu, &device_keys, &mut scratch).unwrap();
    println!(
        "read pass over {} bytes: largest word {max_bits:#x} = {}",
        device_keys.bytes(),
        f32::from_bits(max_bits)
    );
}

/// The tuning this run measures: the library's values, with the sweeps' overrides from the
/// environment (the benchmark reads these variables; the library reads none):
/// `GPU_SELECT_TOPK_BLOCKS_PER_SM`, `GPU_SELECT_TOPK_TILES_PER_BLOCK_LATER`,
/// `GPU_SELECT_BITONIC_TIGHT_BOUND=0`, `GPU_SELECT_ROWS_ALGORITHM` (`warp-select`,
/// `radix-select`: what `Algorithm::Auto` runs on rows), `GPU_SELECT_ROWS_WARPS_PER_ROW` (`1`
/// or `4`), `GPU_SELECT_ROWS_RADIX_PARTS`, `GPU_SELECT_ROWS_BOUNDED` (`0`: never the
/// bounded split of long rows, `1`: wherever it applies), `GPU_SELECT_MULTISELECT_SAMPLE` and
/// `GPU_SELECT_MULTISELECT_PLACE_KEYS`.
fn tuning_from_env(gpu: &Gpu) -> Tuning {
    fn number<T: std::str::FromStr>(name: &str) -> Option<T> {
        std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name}={v}: not a number")))
    }
    let mut tuning = *gpu.tuning();
    if let Some(blocks) = number("GPU_SELECT_TOPK_BLOCKS_PER_SM") {
        tuning.top_k_blocks_per_sm = blocks;
    }
    if let Some(tiles) = number("GPU_SELECT_TOPK_TILES_PER_BLOCK_LATER") {
        tuning.top_k_tiles_per_block_later = tiles;
    }
    if let Some(bytes) = number("GPU_SELECT_KNN_TILE_BYTES") {
        tuning.knn_tile_bytes = bytes;
    }
    if let Some(keys) = number("GPU_SELECT_MULTISELECT_SAMPLE") {
        tuning.multiselect_sample = keys;
    }
    if let Some(keys) = number("GPU_SELECT_MULTISELECT_PLACE_KEYS") {
        tuning.multiselect_place_keys = keys;
    }
    if let Some(percent) = number("GPU_SELECT_KNN_RERANK_EXTRA_PERCENT") {
        tuning.knn_rerank_extra_percent = percent;
    }
    if let Ok(tight) = std::env::var("GPU_SELECT_BITONIC_TIGHT_BOUND") {
        tuning.bitonic_tight_bound = tight != "0";
    }
    tuning.rows_auto_kernel = match std::env::var("GPU_SELECT_ROWS_ALGORITHM").as_deref() {
        Ok("warp-select") => Some(RowsKernelFamily::WarpSelect),
        Ok("radix-select") => Some(RowsKernelFamily::RadixSelect),
        Ok(other) => panic!("GPU_SELECT_ROWS_ALGORITHM={other}: expected warp-select or radix-select"),
        Err(_) => None,
    };
    tuning.rows_warp_per_row = match std::env::var("GPU_SELECT_ROWS_WARPS_PER_ROW").as_deref() {
        Ok("1") => Some(true),
        Ok("4") => Some(false),
        Ok(other) => panic!("GPU_SELECT_ROWS_WARPS_PER_ROW={other}: expected 1 or 4"),
        Err(_) => None,
    };
    tuning.rows_radix_parts = number("GPU_SELECT_ROWS_RADIX_PARTS");
    tuning.rows_bounded_split = match std::env::var("GPU_SELECT_ROWS_BOUNDED").as_deref() {
        Ok("0") => Some(false),
        Ok("1") => Some(true),
        Ok(other) => panic!("GPU_SELECT_ROWS_BOUNDED={other}: expected 0 or 1"),
        Err(_) => None,
    };
    if let Some(slack) = number("GPU_SELECT_SBP_CUTOFF_SLACK_PERCENT") {
        tuning.sbp_cutoff_slack_percent = slack;
    }
    if let Some(least) = number("GPU_SELECT_SBP_MIN_CUTOFF") {
        tuning.sbp_min_cutoff = least;
    }
    if let Some(spread) = number("GPU_SELECT_SBP_TREE_SPREAD") {
        tuning.sbp_tree_spread = spread;
    }
    tuning
}

fn main() {
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(error) => return emulator_demo(&error.to_string()),
    };
    let gpu = gpu.with_tuning(tuning_from_env(&gpu));
    assert_eq!(gpu.backend(), BackendKind::Cuda);
    println!("benchmarking on {}", gpu.describe());
    if gpu.tuning() != &Tuning::for_device(gpu.limits()) {
        println!("tuning (from the environment): {:?}", gpu.tuning());
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
        .configure_from_args();
    let mut cases = Vec::new();
    let sizes: &[u32] = if section_enabled("sizes") { &[20, 24, 28] } else { &[] };
    let bitonic = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::Bitonic);
    let radix = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::RadixSelect);
    let heap = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::PerThreadHeap);
    let sort = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::SortAndChoose);
    let bucket = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::BucketSelect);
    let sbp_radix = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::SbpRadix);
    let sbp_tree = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::SbpTree);
    let auto = TopKOptions::new(Order::Largest);
    let total = sizes.len() * 24 + 4 + 21 + 8;
    let mut step = 0;
    for &log_n in sizes {
        let n = 1usize << log_n;
        let keys = gpu.upload(&uniform_f32(n, log_n as u64)).unwrap();
        step += 1;
        eprintln!("[{step}/{total}] read floor n=2^{log_n}");
        let floor_ms = read_floor(&gpu, &keys);
        cases.push(Case {
            group: "read_floor",
            name: format!("f32 n=2^{log_n}"),
            elements: n as u64,
            bytes: keys.bytes() as u64,
            median_ms: floor_ms,
            floor_ms,
            predicted_ms: None,
        });
        for segment_len in [32, 256, 2048] {
            step += 1;
            eprintln!("[{step}/{total}] sort_segments f32 n=2^{log_n} segments of {segment_len}");
            bench_sort(&mut criterion, &gpu, &keys, segment_len, floor_ms, &mut cases);
        }
        let mut top_k_cases = vec![
            (1, bitonic),
            (32, bitonic),
            (256, bitonic),
            (512, bitonic),
            (1024, bitonic),
            (32, radix),
            (256, radix),
            (1024, radix),
            (32, heap),
            (256, heap),
            (1024, sort),
            (32, bucket),
            (1024, bucket),
            (32, sbp_radix),
            (128, sbp_radix),
            (1024, sbp_radix),
            (32, sbp_tree),
            (128, sbp_tree),
        ];
        // Auto, against the best of the above: the cost model's choice.
        top_k_cases.extend([(1, auto), (32, auto), (256, auto), (1024, auto)]);
        if log_n == 28 {
            top_k_cases.extend([
                (262_144, radix),
                (262_144, radix.with_sorted(false)),
                (262_144, sort),
                (262_144, bucket),
            ]);
        }
        for (k, options) in top_k_cases {
            step += 1;
            eprintln!("[{step}/{total}] top_k f32 n=2^{log_n} k={k} {:?} uniform", options.algorithm);
            bench_top_k(&mut criterion, &gpu, &keys, (k, options), "uniform", floor_ms, &mut cases);
        }
        if log_n == 28 {
            // The fusions, on the same keys (uniform in [0, 1)): a transform, a range that
            // admits half (the best admitted lie in the middle, below keys it turns away),
            // a mask that admits every other input, and a range that admits none (fewer
            // than k: every chain runs, the worst case).
            let mask = gpu.upload(&(0..n).map(|i| (i % 2) as u8).collect::<Vec<u8>>()).unwrap();
            let fusions = [
                ("magnitude", (InputFilter::All, KeyTransform::Magnitude)),
                ("range", (InputFilter::Range { low: 0.25, high: 0.75 }, KeyTransform::Identity)),
                ("empty-range", (InputFilter::Range { low: 2.0, high: 3.0 }, KeyTransform::Identity)),
                ("mask-magnitude", (InputFilter::Mask(&mask), KeyTransform::Magnitude)),
            ];
            for &(label, fusion) in &fusions {
                for k in [32, 1024] {
                    step += 1;
                    eprintln!("[{step}/{total}] top_k f32 n=2^{log_n} k={k} fused {label}");
                    bench_top_k_fused(&mut criterion, &gpu, &keys, (k, label, fusion), floor_ms, &mut cases);
                }
            }
            drop(mask);
            bench_selection(&mut criterion, &gpu, &keys, floor_ms, &mut cases);
            drop(keys);
            bench_selection_duplicates(&mut criterion, &gpu, n, floor_ms, &mut cases);
            // The distributions whose time must stay within 10 % of uniform.
            let ascending: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let all_equal = vec![1.0f32; n];
            let mut killer = vec![1.0f32; n];
            for (j, bit) in [3u32, 11, 19, 27].into_iter().enumerate() {
                killer[n / 5 * (j + 1)] = f32::from_bits(0x3F80_0000 ^ (1 << bit));
            }
            for (label, values) in
                [("ascending", ascending), ("all-equal", all_equal), ("bucket-killer", killer)]
            {
                let data = gpu.upload(&values).unwrap();
                for (k, options) in [
                    (32, bitonic),
                    (256, bitonic),
                    (1024, bitonic),
                    (1024, radix),
                    (1024, sort),
                    (1024, bucket),
                    (128, sbp_radix),
                    (128, sbp_tree),
                ] {
                    step += 1;
                    eprintln!("[{step}/{total}] top_k f32 n=2^{log_n} k={k} {:?} {label}", options.algorithm);
                    bench_top_k(&mut criterion, &gpu, &data, (k, options), label, floor_ms, &mut cases);
                }
            }
        }
    }
    if section_enabled("rows") {
        bench_all_rows(&mut criterion, &gpu, &mut cases);
    }
    if section_enabled("half") {
        bench_half(&gpu, &mut cases);
    }
    if section_enabled("bracket-sweep") {
        bracket_sweep(&gpu);
    }
    if section_enabled("small") {
        bench_small_arrays(&gpu, &mut cases);
    }
    if section_enabled("bounded-sweep") {
        bounded_sweep(&gpu);
    }
    if section_enabled("small-sweep") {
        small_sweep(&gpu);
    }
    if section_enabled("large-k") {
        bench_large_k(&gpu, &mut cases);
    }
    if section_enabled("quantiles") {
        bench_quantiles(&mut criterion, &gpu, &mut cases);
    }
    if section_enabled("quantiles-rows") {
        bench_quantile_rows(&gpu, &mut cases);
    }
    if section_enabled("distributed") {
        bench_distributed(&gpu);
    }
    if section_enabled("knn") {
        bench_knn(&gpu, &mut cases);
    }
    if section_enabled("knn-streamed") {
        bench_knn_streamed(&gpu, &mut cases);
    }
    if section_enabled("multi-gpu") {
        bench_multi_gpu(&gpu);
    }
    if section_enabled("convenience") {
        convenience(&gpu);
    }
    if section_enabled("rows-sweep") {
        rows_sweep(&gpu);
    }
    if section_enabled("topk-sweep") {
        top_k_sweep(&gpu);
    }
    if section_enabled("sbp-sweep") {
        sbp_sweep(&gpu);
    }
    if section_enabled("half-sweep") {
        half_sweep(&gpu);
    }
    criterion.final_summary();
    if !cases.is_empty() {
        write_results(&gpu, &cases);
    }
}
