//! Exact k-NN search against a CPU brute force in f64: random, clustered and duplicated
//! vectors, shapes at the distance tiles' edges ± 1, every metric, tiling of queries and
//! base, the k-NN graph, non-finite components, bad input, and scikit-learn's handwritten
//! digits (whose integer pixels make every L2 distance exact in f32, so there the lists must
//! equal the oracle's exactly, ties by lower index included).

mod common;

use common::{gpu, on_emulator, several_handles};
use gpu_select::{
    DeviceBuffer, Error, FlatIndex, Gpu, KnnPrecision, Metric, MultiGpuIndex, Neighbours, Placement, TopK,
    TopKOut, Tuning, VectorComponent, Vectors, diagnostics,
};
use gpu_select_kernels::knn::{Bf16Bits, Component, F16Bits};
use half::{bf16, f16};
use rand::{RngExt, SeedableRng, rngs::StdRng};

/// The exact distance (or similarity) of two vectors, in f64.
fn exact(metric: Metric, x: &[f32], y: &[f32]) -> f64 {
    let dot: f64 = x.iter().zip(y).map(|(&a, &b)| a as f64 * b as f64).sum();
    match metric {
        Metric::L2 => x.iter().zip(y).map(|(&a, &b)| (a as f64 - b as f64).powi(2)).sum(),
        Metric::InnerProduct => dot,
        Metric::Cosine => {
            let norms = (x.iter().map(|&a| (a as f64).powi(2)).sum::<f64>()
                * y.iter().map(|&b| (b as f64).powi(2)).sum::<f64>())
            .sqrt();
            if norms == 0.0 { 0.0 } else { dot / norms }
        }
    }
}

/// How far a distance computed in f32 through the norms may be from the exact one.
fn tolerance(metric: Metric, x: &[f32], y: &[f32]) -> f64 {
    let norm = |v: &[f32]| v.iter().map(|&a| (a as f64).powi(2)).sum::<f64>();
    let dim = x.len() as f64;
    match metric {
        Metric::L2 => 4e-7 * (dim.sqrt() + 8.0) * (norm(x) + norm(y)) + 1e-30,
        Metric::InnerProduct => 4e-7 * (dim.sqrt() + 8.0) * (norm(x) * norm(y)).sqrt() + 1e-30,
        Metric::Cosine => 4e-7 * (dim.sqrt() + 8.0) + 1e-30,
    }
}

/// Checks one search: `k` neighbours per query, each a distinct base vector (not the query
/// itself for a graph), its distance the exact one within tolerance, in order, and none
/// clearly worse than the exact `k`-th best.
fn check(
    queries: &[f32],
    base: &[f32],
    dim: usize,
    k: usize,
    metric: Metric,
    graph: bool,
    (distances, indices): (&[f32], &[u64]),
) {
    let nearer_first = |d: f64| if metric == Metric::L2 { d } else { -d };
    let queries_count = queries.len() / dim;
    assert_eq!(distances.len(), queries_count * k);
    for q in 0..queries_count {
        let x = &queries[q * dim..(q + 1) * dim];
        let vector = |j: usize| &base[j * dim..(j + 1) * dim];
        let mut all: Vec<(f64, usize)> = (0..base.len() / dim)
            .filter(|&j| !graph || j != q)
            .map(|j| (nearer_first(exact(metric, x, vector(j))), j))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let kth = all[k - 1].0;
        let row = q * k..(q + 1) * k;
        let mut seen = std::collections::HashSet::new();
        for (rank, (&distance, &index)) in distances[row.clone()].iter().zip(&indices[row]).enumerate() {
            let j = index as usize;
            assert!(j < base.len() / dim, "query {q} rank {rank}: index {index} out of range");
            assert!(seen.insert(j), "query {q}: index {j} twice");
            assert!(!graph || j != q, "query {q}: itself in its graph row");
            let want = exact(metric, x, vector(j));
            let slack = tolerance(metric, x, vector(j));
            assert!(
                (distance as f64 - want).abs() <= slack,
                "query {q} rank {rank} (index {j}): {distance} against exact {want} (slack {slack})"
            );
            assert!(
                nearer_first(want) <= kth + 2.0 * slack.max(tolerance(metric, x, vector(all[k - 1].1))),
                "query {q} rank {rank}: index {j} at {want} is not among the {k} nearest (k-th: {kth})"
            );
            if rank > 0 {
                let previous = distances[q * k + rank - 1];
                assert!(
                    nearer_first(previous as f64) <= nearer_first(distance as f64),
                    "query {q}: rank {rank} out of order"
                );
            }
        }
    }
}

fn download(gpu: &Gpu, found: &Neighbours) -> (Vec<f32>, Vec<u64>) {
    (gpu.download(&found.distances).unwrap(), gpu.download(&found.indices).unwrap())
}

fn search(
    gpu: &Gpu,
    queries: &[f32],
    base: &[f32],
    dim: usize,
    k: usize,
    metric: Metric,
) -> (Vec<f32>, Vec<u64>) {
    let (q, b) = (gpu.upload(queries).unwrap(), gpu.upload(base).unwrap());
    let index = gpu.flat_index(Vectors::new(&b, base.len() / dim, dim).unwrap(), metric).unwrap();
    download(gpu, &index.search(Vectors::new(&q, queries.len() / dim, dim).unwrap(), k).unwrap())
}

fn random_vectors(rng: &mut StdRng, count: usize, dim: usize) -> Vec<f32> {
    (0..count * dim).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()
}

/// `count` vectors around `centres` random centres (SIFT-like clumps), some repeated exactly.
fn clustered_vectors(rng: &mut StdRng, count: usize, dim: usize, centres: usize) -> Vec<f32> {
    let centre_values = random_vectors(rng, centres, dim);
    let mut out = Vec::with_capacity(count * dim);
    for i in 0..count {
        if i % 7 == 3 && i >= 7 {
            // An exact duplicate of an earlier vector: ties at every distance from it.
            let earlier = rng.random_range(0..i);
            out.extend_from_within(earlier * dim..(earlier + 1) * dim);
            continue;
        }
        let c = rng.random_range(0..centres);
        out.extend((0..dim).map(|j| centre_values[c * dim + j] * 4.0 + (rng.random::<f32>() - 0.5) * 0.1));
    }
    out
}

/// A search of `index` made with TF32 tiles and exact re-ranking, through the plan form
/// (so that `search_into` proves and re-searches as `search` does).
fn search_tf32<T: VectorComponent>(
    gpu: &Gpu,
    (index, precision): (FlatIndex<'_, T>, KnnPrecision),
    queries: &[T],
    dim: usize,
    k: usize,
) -> (Vec<f32>, Vec<u64>) {
    let index = index.with_precision(precision).unwrap();
    let count = queries.len() / dim;
    let plan = index.plan_search(count, k).unwrap();
    let mut out = TopK {
        values: gpu.alloc_zeroed::<f32>(plan.outputs()).unwrap(),
        indices: gpu.alloc_zeroed::<u64>(plan.outputs()).unwrap(),
    };
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let queries = gpu.upload(queries).unwrap();
    index.search_into(&plan, Vectors::new(&queries, count, dim).unwrap(), &mut out, &mut workspace).unwrap();
    (gpu.download(&out.values).unwrap(), gpu.download(&out.indices).unwrap())
}

/// The tensor-core paths (TF32 or split-TF32 tiles, each query's candidates re-ranked in
/// f32): against the brute force, and the same neighbours as the f32 search, for every
/// metric, random queries against clustered vectors with exact duplicates, shapes at the
/// tiles' edges, `k` from 1 to the whole base (every vector a candidate), and 16-bit
/// storage.
#[test]
fn tensor_cores_with_exact_reranking_match_the_f32_search() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(91);
    let mut shapes = vec![(3, 5, 3), (127, 129, 8), (129, 300, 33), (40, 700, 24)];
    if !on_emulator(&gpu) {
        shapes.push((1000, 10_000, 128));
    }
    for (queries_count, base_count, dim) in shapes {
        let queries = random_vectors(&mut rng, queries_count, dim);
        let base = clustered_vectors(&mut rng, base_count, dim, 8);
        let device_base = gpu.upload(&base).unwrap();
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            let ks = [1, 10.min(base_count), 100.min(base_count), base_count];
            let precisions = [KnnPrecision::Tf32Reranked, KnnPrecision::Tf32x3Reranked];
            for (k, precision) in ks.into_iter().flat_map(|k| precisions.map(|precision| (k, precision))) {
                let index =
                    gpu.flat_index(Vectors::new(&device_base, base_count, dim).unwrap(), metric).unwrap();
                let found = search_tf32(&gpu, (index, precision), &queries, dim, k);
                check(&queries, &base, dim, k, metric, false, (&found.0, &found.1));
                let f32_search = search(&gpu, &queries, &base, dim, k, metric);
                let first_difference = found.1.iter().zip(&f32_search.1).position(|(a, b)| a != b);
                assert!(
                    first_difference.is_none(),
                    "{queries_count}×{base_count}×{dim} {metric:?} k={k} {precision:?}: at {first_difference:?} {:?} \
                     against {:?}",
                    first_difference.map(|i| (found.1[i], found.0[i])),
                    first_difference.map(|i| (f32_search.1[i], f32_search.0[i])),
                );
            }
        }
    }
    // 16-bit storage: exact in TF32, so only the sums round.
    let (dim, base_count) = (24, 500);
    let base: Vec<f32> =
        clustered_vectors(&mut rng, base_count, dim, 6).iter().map(|&v| (v * 8.0).round() / 8.0).collect();
    let queries: Vec<f32> =
        random_vectors(&mut rng, 30, dim).iter().map(|&v| (v * 8.0).round() / 8.0).collect();
    let want = search(&gpu, &queries, &base, dim, 20, Metric::L2);
    let halves: Vec<f16> = base.iter().map(|&v| f16::from_f32(v)).collect();
    let index = gpu.upload_flat_index(&halves, dim, Metric::L2).unwrap();
    let query_halves: Vec<f16> = queries.iter().map(|&v| f16::from_f32(v)).collect();
    assert_eq!(
        search_tf32(&gpu, (index, KnnPrecision::Tf32Reranked), &query_halves, dim, 20).1,
        want.1,
        "f16"
    );
    let brains: Vec<bf16> = base.iter().map(|&v| bf16::from_f32(v)).collect();
    let index = gpu.upload_flat_index(&brains, dim, Metric::L2).unwrap();
    let query_brains: Vec<bf16> = queries.iter().map(|&v| bf16::from_f32(v)).collect();
    let tensor = (index, KnnPrecision::Tf32x3Reranked);
    assert_eq!(search_tf32(&gpu, tensor, &query_brains, dim, 20).1, want.1, "bf16");
}

/// Where TF32 cannot tell the base vectors apart (values 1 + j · 2^-20, all 1.0 in TF32), its
/// candidates are the first ones by index, not the nearest: no query can be proven, and each
/// is searched again in f32, which finds the true nearest. Split TF32 holds these values
/// exactly (1 and a remainder) and finds them as well, proven or not.
#[test]
fn tensor_cores_fall_back_to_f32_where_they_cannot_prove() {
    let gpu = gpu();
    let base: Vec<f32> = (0..2000).map(|j| 1.0 + j as f32 * (1.0 / 1_048_576.0)).collect();
    let queries = [1.0f32, 2.0, 1.5];
    let want = search(&gpu, &queries, &base, 1, 5, Metric::InnerProduct);
    assert_eq!(&want.1[..5], &[1999, 1998, 1997, 1996, 1995]);
    for precision in [KnnPrecision::Tf32Reranked, KnnPrecision::Tf32x3Reranked] {
        let index = gpu.upload_flat_index(&base, 1, Metric::InnerProduct).unwrap();
        assert_eq!(search_tf32(&gpu, (index, precision), &queries, 1, 5), want, "{precision:?}");
    }
    let index = gpu.upload_flat_index(&base, 1, Metric::InnerProduct).unwrap();
    let index = index.with_precision(KnnPrecision::Tf32Reranked).unwrap();
    let device_queries = gpu.upload(&queries).unwrap();
    let queries = Vectors::new(&device_queries, 3, 1).unwrap();
    assert_eq!(gpu_select::diagnostics::knn_unproven(&index, &queries, 5).unwrap(), 3, "TF32 proves none");
}

/// Every TF32 and split-TF32 tile distance lies within `KnnPrecision::error_bound` of the f32
/// tile's for the same pair (the inequality the proofs rest on), on SIFT-like vectors
/// (components 0 … 128: norms large against the distances) and centred ones, every metric.
/// On a GPU this checks the tensor cores' own sums.
#[test]
fn tensor_tiles_stay_within_the_error_bound() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(17);
    let (queries_count, base_count, dim) =
        if on_emulator(&gpu) { (40, 300, 128) } else { (500, 20_000, 128) };
    for offset in [64.0f32, 0.0] {
        let shifted = |v: Vec<f32>| v.into_iter().map(|x| x * 16.0 + offset).collect::<Vec<f32>>();
        let base = shifted(clustered_vectors(&mut rng, base_count, dim, 50));
        let queries = shifted(random_vectors(&mut rng, queries_count, dim));
        let norm = |v: &[f32]| v.iter().map(|&a| a as f64 * a as f64).sum::<f64>() as f32;
        let base_norm_max = (0..base_count).map(|j| norm(&base[j * dim..(j + 1) * dim])).fold(0.0, f32::max);
        let (device_base, device_queries) = (gpu.upload(&base).unwrap(), gpu.upload(&queries).unwrap());
        let query_set = Vectors::new(&device_queries, queries_count, dim).unwrap();
        for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
            let tiles = |precision| {
                let index =
                    gpu.flat_index(Vectors::new(&device_base, base_count, dim).unwrap(), metric).unwrap();
                let index = index.with_precision(precision).unwrap();
                let mut out = gpu.alloc_zeroed::<f32>(queries_count * base_count).unwrap();
                gpu_select::diagnostics::knn_distances(&index, &query_set, &mut out).unwrap();
                gpu.download(&out).unwrap()
            };
            let exact = tiles(KnnPrecision::F32);
            for precision in [KnnPrecision::Tf32Reranked, KnnPrecision::Tf32x3Reranked] {
                let approximate = tiles(precision);
                let mut worst = 0.0f64;
                for q in 0..queries_count {
                    // The bound of the norms as the library computes them, a hair wider.
                    let query_norm = norm(&queries[q * dim..(q + 1) * dim]) * (1.0 + 1e-6);
                    let bound =
                        precision.error_bound(metric, dim, false, query_norm, base_norm_max * (1.0 + 1e-6));
                    for j in 0..base_count {
                        let at = q * base_count + j;
                        let gap = (approximate[at] as f64 - exact[at] as f64).abs();
                        assert!(
                            gap <= bound,
                            "{precision:?} {metric:?} offset {offset}: query {q}, vector {j}: {} against {} (bound {bound})",
                            approximate[at],
                            exact[at]
                        );
                        worst = worst.max(gap / bound);
                    }
                }
                eprintln!(
                    "{precision:?} {metric:?} offset {offset}: the largest gap is {worst:.4} of the bound"
                );
            }
        }
    }
}

#[test]
fn shapes_at_the_tile_edges_match_the_brute_force() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(33);
    let mut shapes =
        vec![(1, 1, 1), (3, 5, 3), (127, 129, 8), (129, 127, 9), (128, 257, 17), (2, 300, 130), (2, 2100, 5)];
    if !on_emulator(&gpu) {
        shapes.extend([(1000, 10_000, 128), (257, 4096, 96)]);
    }
    for (queries_count, base_count, dim) in shapes {
        let queries = random_vectors(&mut rng, queries_count, dim);
        let base = random_vectors(&mut rng, base_count, dim);
        search_and_check_every_metric(&gpu, (&queries, &base, dim), &[1, 10.min(base_count), base_count]);
    }
}

/// Searches with every metric and each `k`, and checks every result against the brute force.
fn search_and_check_every_metric(gpu: &Gpu, (queries, base, dim): (&[f32], &[f32], usize), ks: &[usize]) {
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        for &k in ks {
            let found = search(gpu, queries, base, dim, k, metric);
            check(queries, base, dim, k, metric, false, (&found.0, &found.1));
        }
    }
}

#[test]
fn clustered_and_duplicated_vectors_match_the_brute_force() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(7);
    // (On a GPU larger, as far as the f64 oracle's time allows.)
    let (queries_count, base_count, dim) = if on_emulator(&gpu) { (40, 700, 24) } else { (300, 20_000, 64) };
    let base = clustered_vectors(&mut rng, base_count, dim, 16);
    // Queries among the base vectors themselves (distance 0 to a duplicate) and new ones.
    let mut queries = base[..queries_count / 2 * dim].to_vec();
    queries.extend(clustered_vectors(&mut rng, queries_count - queries_count / 2, dim, 16));
    search_and_check_every_metric(&gpu, (&queries, &base, dim), &[1, 5, 64, 300]);
}

#[test]
fn tiling_queries_and_base_changes_nothing() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(11);
    let (queries_count, base_count, dim) = (150, 1000, 12);
    let queries = clustered_vectors(&mut rng, queries_count, dim, 5);
    let base = clustered_vectors(&mut rng, base_count, dim, 5);
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        for (k, budgets) in [(7, &[60_000, 20_000][..]), (100, &[200_000][..]), (333, &[1][..])] {
            let whole = search(&gpu, &queries, &base, dim, k, metric);
            // Budgets small enough for several query tiles and column tiles (down to one
            // query a tile and column tiles of exactly what each keeps), and the search
            // gives the same bits.
            for (&budget, streams) in budgets.iter().zip([2, 1, 3]) {
                // Two or three streams taking the query tiles in turn, where the budget
                // makes several.
                let tiled =
                    gpu.with_tuning(Tuning { knn_tile_bytes: budget, knn_streams: streams, ..*gpu.tuning() });
                let found = search(&tiled, &queries, &base, dim, k, metric);
                assert_eq!(found.1, whole.1, "{metric:?} k={k} budget {budget}, {streams} streams: indices");
                assert_eq!(
                    found.0.iter().map(|d| d.to_bits()).collect::<Vec<_>>(),
                    whole.0.iter().map(|d| d.to_bits()).collect::<Vec<_>>(),
                    "{metric:?} k={k} budget {budget}, {streams} streams: distances"
                );
            }
            check(&queries, &base, dim, k, metric, false, (&whole.0, &whole.1));
        }
    }
}

#[test]
fn the_graph_leaves_each_vector_out_of_its_own_row() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(5);
    let dim = 6;
    // Many exact duplicates: a vector's own index must go, its twins stay.
    let mut base = clustered_vectors(&mut rng, 300, dim, 4);
    let twin = base[..dim].to_vec();
    for copy in 0..20 {
        base[(10 + copy) * dim..(11 + copy) * dim].copy_from_slice(&twin);
    }
    let data = gpu.upload(&base).unwrap();
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        let index = gpu.flat_index(Vectors::new(&data, 300, dim).unwrap(), metric).unwrap();
        for (k, budget) in [(1, None), (15, None), (30, Some(20_000)), (299, None), (299, Some(1))] {
            let index_gpu = budget.map(|b| gpu.with_tuning(Tuning { knn_tile_bytes: b, ..*gpu.tuning() }));
            let graph = match &index_gpu {
                Some(tiled) => tiled
                    .flat_index(Vectors::new(&data, 300, dim).unwrap(), metric)
                    .unwrap()
                    .knn_graph(k)
                    .unwrap(),
                None => index.knn_graph(k).unwrap(),
            };
            let found = download(&gpu, &graph);
            check(&base, &base, dim, k, metric, true, (&found.0, &found.1));
        }
        assert!(matches!(index.knn_graph(300), Err(Error::KOutOfRange { .. })));
        assert!(matches!(index.knn_graph(0), Err(Error::KOutOfRange { .. })));
    }
}

/// scikit-learn's bundled copy of the UCI handwritten digits (1797 images of 8 × 8 pixels,
/// 0–16; tests/fixtures/digits.csv, the 65th column the label).
fn digits() -> (Vec<f32>, Vec<u8>) {
    let text = include_str!("fixtures/digits.csv");
    let (mut pixels, mut labels) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let values: Vec<f32> = line.split(',').map(|v| v.trim().parse().unwrap()).collect();
        assert_eq!(values.len(), 65);
        pixels.extend_from_slice(&values[..64]);
        labels.push(values[64] as u8);
    }
    assert_eq!(labels.len(), 1797);
    (pixels, labels)
}

#[test]
fn handwritten_digits_graph_equals_the_brute_force_exactly() {
    let gpu = gpu();
    let (pixels, labels) = digits();
    let count = labels.len();
    let data = gpu.upload(&pixels).unwrap();
    let index = gpu.flat_index(Vectors::new(&data, count, 64).unwrap(), Metric::L2).unwrap();
    let k = 10;
    let (distances, indices) = download(&gpu, &index.knn_graph(k).unwrap());
    // Integer pixels: every squared distance is an integer below 2^24, exact in f32 by
    // either formula, so the lists must be the oracle's, ties by lower index.
    let mut agree = 0;
    for q in 0..count {
        let x = &pixels[q * 64..(q + 1) * 64];
        let mut all: Vec<(f64, usize)> = (0..count)
            .filter(|&j| j != q)
            .map(|j| (exact(Metric::L2, x, &pixels[j * 64..(j + 1) * 64]), j))
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let want: Vec<u64> = all[..k].iter().map(|&(_, j)| j as u64).collect();
        let want_distances: Vec<f32> = all[..k].iter().map(|&(d, _)| d as f32).collect();
        assert_eq!(indices[q * k..(q + 1) * k], want, "digit {q}");
        assert_eq!(distances[q * k..(q + 1) * k], want_distances, "digit {q}");
        agree += all[..k].iter().filter(|&&(_, j)| labels[j] == labels[q]).count();
    }
    // The classic sanity figure: nearly all neighbours share the query's digit.
    let share = agree as f64 / (count * k) as f64;
    assert!(share > 0.95, "only {share:.3} of the neighbours share their digit");
}

#[test]
fn non_finite_components_rank_last() {
    let gpu = gpu();
    let dim = 4;
    let mut base: Vec<f32> = (0..10 * dim).map(|i| (i % 13) as f32 * 0.25 - 1.0).collect();
    base[2 * dim + 1] = f32::NAN; // vector 2: NaN distances under every metric
    base[5 * dim] = f32::INFINITY; // vector 5
    base[7 * dim + 3] = f32::NEG_INFINITY; // vector 7
    let queries = vec![0.5f32, 0.25, 0.0, 1.0, -1.0, 2.0, 0.5, 0.0];
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        let (distances, indices) = search(&gpu, &queries, &base, dim, 10, metric);
        for q in 0..2 {
            let (row, values) = (&indices[q * 10..(q + 1) * 10], &distances[q * 10..(q + 1) * 10]);
            // NaN ranks after every number, infinities included, under every metric.
            let first_nan = values.iter().position(|d| d.is_nan()).expect("vector 2's distance is NaN");
            assert!(values[first_nan..].iter().all(|d| d.is_nan()), "{metric:?} query {q}: {values:?}");
            assert!(
                row[first_nan..].contains(&2),
                "{metric:?} query {q}: the NaN vector is not last: {row:?}"
            );
            // The finite vectors have finite distances, in order.
            let finite: Vec<usize> = (0..10).filter(|i| ![2, 5, 7].contains(&row[*i])).collect();
            assert_eq!(finite.len(), 7);
            assert!(finite.iter().all(|&i| values[i].is_finite()), "{metric:?} query {q}: {values:?}");
            if metric == Metric::L2 {
                // Distances to the infinite vectors are +inf or NaN: after all the finite ones.
                assert_eq!(finite, (0..7).collect::<Vec<_>>(), "{metric:?} query {q}: {row:?}");
            }
        }
    }
}

#[test]
fn bad_input_gets_clear_errors() {
    let gpu = gpu();
    let data = gpu.upload(&[1.0f32; 12]).unwrap();
    assert!(matches!(Vectors::new(&data, 0, 3), Err(Error::EmptyInput)));
    assert!(matches!(Vectors::new(&data, 4, 0), Err(Error::EmptyInput)));
    assert!(matches!(Vectors::new(&data, 5, 3), Err(Error::LengthMismatch { .. })));
    assert!(matches!(Vectors::new(&data, 3, 3), Err(Error::LengthMismatch { .. })));
    assert!(matches!(Vectors::strided(&data, 2, 4, 3), Err(Error::InvalidArgument { .. })));
    assert!(matches!(Vectors::strided(&data, 3, 4, 5), Err(Error::LengthMismatch { .. })));
    assert!(matches!(Vectors::strided(&data, usize::MAX, 4, 5), Err(Error::InvalidArgument { .. })));
    let index = gpu.flat_index(Vectors::new(&data, 4, 3).unwrap(), Metric::L2).unwrap();
    assert_eq!((index.len(), index.dim(), index.metric()), (4, 3, Metric::L2));
    let queries = gpu.upload(&[0.0f32; 8]).unwrap();
    let mismatched = index.search(Vectors::new(&queries, 2, 4).unwrap(), 1);
    assert!(matches!(mismatched, Err(Error::InvalidArgument { .. })), "{mismatched:?}");
    let six = queries.slice(..6);
    assert!(matches!(index.search(Vectors::new(six, 2, 3).unwrap(), 0), Err(Error::KOutOfRange { .. })));
    let six = queries.slice(..6);
    assert!(matches!(index.search(Vectors::new(six, 2, 3).unwrap(), 5), Err(Error::KOutOfRange { .. })));
    assert!(matches!(index.search_host(&[0.0; 7], 1), Err(Error::InvalidArgument { .. })));
    let (distances, indices) = index.search_host(&[1.0; 6], 4).unwrap();
    assert_eq!(indices, [0, 1, 2, 3, 0, 1, 2, 3]); // all equal: ties by index
    assert_eq!(distances, [0.0; 8]);
    if !on_emulator(&gpu) {
        // Vectors of another device's handle (the emulator) are refused.
        let elsewhere = Gpu::emulator().upload(&[0.0f32; 3]).unwrap();
        let foreign = index.search(Vectors::new(&elsewhere, 1, 3).unwrap(), 1);
        assert!(matches!(foreign, Err(Error::InvalidArgument { .. })), "{foreign:?}");
    }
}

#[test]
fn half_precision_components_widen_exactly() {
    // Every bit pattern, against the half crate's conversions.
    for bits in 0..=u16::MAX {
        let (mine, theirs) = (F16Bits(bits).to_f32(), f16::from_bits(bits).to_f32());
        assert!(
            mine.to_bits() == theirs.to_bits() || mine.is_nan() && theirs.is_nan(),
            "f16 {bits:#06x}: {mine} {theirs}"
        );
        let (mine, theirs) = (Bf16Bits(bits).to_f32(), bf16::from_bits(bits).to_f32());
        assert!(
            mine.to_bits() == theirs.to_bits() || mine.is_nan() && theirs.is_nan(),
            "bf16 {bits:#06x}: {mine} {theirs}"
        );
    }
}

/// A search with vectors stored as `T`, and the same values as `f32`.
fn search_as<T: VectorComponent>(
    gpu: &Gpu,
    (queries, base): (&[T], &[T]),
    dim: usize,
    k: usize,
    metric: Metric,
) -> (Vec<f32>, Vec<u64>) {
    let (q, b) = (gpu.upload(queries).unwrap(), gpu.upload(base).unwrap());
    let index = gpu.flat_index(Vectors::new(&b, base.len() / dim, dim).unwrap(), metric).unwrap();
    download(gpu, &index.search(Vectors::new(&q, queries.len() / dim, dim).unwrap(), k).unwrap())
}

#[test]
fn half_precision_vectors_search_as_their_f32_values() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(16);
    let (queries_count, base_count, dim) = (70, 300, 19);
    // Small integers are exact in both 16-bit formats: the searches must equal the f32
    // search of the same values bit for bit (the kernels widen exactly, then do the same
    // arithmetic).
    let small = |count: usize, rng: &mut StdRng| -> Vec<f32> {
        (0..count * dim).map(|_| rng.random_range(-20..=20) as f32).collect()
    };
    let (queries, base) = (small(queries_count, &mut rng), small(base_count, &mut rng));
    let to = |values: &[f32], f: fn(f32) -> f16| values.iter().map(|&v| f(v)).collect::<Vec<_>>();
    let (queries16, base16) = (to(&queries, f16::from_f32), to(&base, f16::from_f32));
    let (queries_bf, base_bf): (Vec<bf16>, Vec<bf16>) = (
        queries.iter().map(|&v| bf16::from_f32(v)).collect(),
        base.iter().map(|&v| bf16::from_f32(v)).collect(),
    );
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        for k in [1, 13, 300] {
            let want = search(&gpu, &queries, &base, dim, k, metric);
            assert_eq!(search_as(&gpu, (&queries16, &base16), dim, k, metric), want, "f16 {metric:?} k={k}");
            assert_eq!(
                search_as(&gpu, (&queries_bf, &base_bf), dim, k, metric),
                want,
                "bf16 {metric:?} k={k}"
            );
        }
    }
    // Random values: against the brute force of the values as stored (widened).
    let queries: Vec<f16> =
        random_vectors(&mut rng, queries_count, dim).into_iter().map(f16::from_f32).collect();
    let base: Vec<f16> = random_vectors(&mut rng, base_count, dim).into_iter().map(f16::from_f32).collect();
    let widened = |values: &[f16]| values.iter().map(|v| v.to_f32()).collect::<Vec<_>>();
    for metric in [Metric::L2, Metric::Cosine] {
        let found = search_as(&gpu, (&queries, &base), dim, 10, metric);
        check(&widened(&queries), &widened(&base), dim, 10, metric, false, (&found.0, &found.1));
    }
}

#[test]
fn several_gpus_sharded_or_replicated_equal_one() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(37);
    let (queries_count, base_count, dim) =
        if on_emulator(&gpu) { (45, 400, 10) } else { (1000, 100_000, 64) };
    let base = clustered_vectors(&mut rng, base_count, dim, 6);
    let queries = clustered_vectors(&mut rng, queries_count, dim, 6);
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        let one = gpu.upload_flat_index(&base, dim, metric).unwrap();
        for k in [1, 9, base_count / 3 + 5] {
            let want = one.search_host(&queries, k).unwrap();
            for handles in [1, 2, 3] {
                let gpus = several_handles(&gpu, handles);
                for placement in [Placement::Sharded, Placement::Replicated] {
                    let index = MultiGpuIndex::new(&gpus, &base, dim, metric, placement).unwrap();
                    let got = index.search_host(&queries, k).unwrap();
                    assert_eq!(got.1, want.1, "{metric:?} k={k} {handles} handles {placement:?}: indices");
                    let bits = |v: &[f32]| v.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&got.0),
                        bits(&want.0),
                        "{metric:?} k={k} {handles} handles {placement:?}"
                    );
                }
            }
        }
    }
    // More handles than base vectors (some take no part), and fewer queries than handles.
    let gpus = several_handles(&gpu, 5);
    let small: Vec<f32> = base[..3 * dim].to_vec();
    for placement in [Placement::Sharded, Placement::Replicated] {
        let index = MultiGpuIndex::new(&gpus, &small, dim, Metric::L2, placement).unwrap();
        assert_eq!(index.len(), 3);
        let want = gpu
            .upload_flat_index(&small, dim, Metric::L2)
            .unwrap()
            .search_host(&queries[..2 * dim], 3)
            .unwrap();
        assert_eq!(index.search_host(&queries[..2 * dim], 3).unwrap(), want, "{placement:?}");
        assert!(matches!(index.search_host(&queries[..2 * dim], 4), Err(Error::KOutOfRange { .. })));
        assert!(matches!(index.search_host(&queries[..dim + 1], 1), Err(Error::InvalidArgument { .. })));
    }
    assert!(matches!(
        MultiGpuIndex::new(&[] as &[Gpu], &small, dim, Metric::L2, Placement::Sharded),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn a_plan_runs_again_into_the_callers_memory() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(41);
    let (queries_count, base_count, dim, k) = (40, 500, 9, 12);
    let base = random_vectors(&mut rng, base_count, dim);
    let data = gpu.upload(&base).unwrap();
    for (metric, streams) in [(Metric::L2, 1), (Metric::Cosine, 2)] {
        // A small budget: several query and column tiles, over one or two streams.
        let tuned = gpu.with_tuning(Tuning { knn_tile_bytes: 40_000, knn_streams: streams, ..*gpu.tuning() });
        let index = tuned.flat_index(Vectors::new(&data, base_count, dim).unwrap(), metric).unwrap();
        let plan = index.plan_search(queries_count, k).unwrap();
        assert_eq!((plan.queries(), plan.k(), plan.outputs()), (queries_count, k, queries_count * k));
        // Outputs and workspace as parts of larger buffers of the caller's.
        let mut values = gpu.alloc_zeroed::<f32>(plan.outputs() + 7).unwrap();
        let mut indices = gpu.alloc_zeroed::<u64>(plan.outputs() + 3).unwrap();
        let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes() + 512).unwrap();
        for round in 0..3 {
            let queries = random_vectors(&mut rng, queries_count, dim);
            let uploaded = gpu.upload(&queries).unwrap();
            let out = TopKOut::new(values.slice_mut(7..), indices.slice_mut(..plan.outputs()));
            index
                .search_into(
                    &plan,
                    Vectors::new(&uploaded, queries_count, dim).unwrap(),
                    out,
                    workspace.slice_mut(512..),
                )
                .unwrap();
            let got = (
                gpu.download(&values).unwrap()[7..].to_vec(),
                gpu.download(&indices).unwrap()[..plan.outputs()].to_vec(),
            );
            assert_eq!(got, search(&gpu, &queries, &base, dim, k, metric), "{metric:?} round {round}");
        }
        // What the plan was not made for.
        let queries = gpu.upload(&vec![0.5f32; (queries_count + 1) * dim]).unwrap();
        let mut out = TopK {
            values: gpu.alloc_zeroed(plan.outputs()).unwrap(),
            indices: gpu.alloc_zeroed(plan.outputs()).unwrap(),
        };
        let other_count = Vectors::new(&queries, queries_count + 1, dim).unwrap();
        let refused = index.search_into(&plan, other_count, &mut out, &mut workspace);
        assert!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
        // The planned count of queries, into the given outputs and workspace, by `index`.
        let run_into = |index: &FlatIndex<'_>, out: &mut TopK<f32>, workspace: &mut DeviceBuffer<u8>| {
            let right = queries.slice(..queries_count * dim);
            index.search_into(&plan, Vectors::new(right, queries_count, dim).unwrap(), out, workspace)
        };
        let mut small = gpu.alloc_zeroed::<u8>(plan.workspace_bytes() - 1).unwrap();
        let refused = run_into(&index, &mut out, &mut small);
        assert!(matches!(refused, Err(Error::WorkspaceTooSmall { .. })), "{refused:?}");
        let mut short = TopK {
            values: gpu.alloc_zeroed(plan.outputs() - 1).unwrap(),
            indices: gpu.alloc_zeroed(plan.outputs()).unwrap(),
        };
        let refused = run_into(&index, &mut short, &mut workspace);
        assert!(matches!(refused, Err(Error::LengthMismatch { .. })), "{refused:?}");
        // Another index: of the same base by another metric, or of another size.
        let same_base_other_metric =
            tuned.flat_index(Vectors::new(&data, base_count, dim).unwrap(), Metric::InnerProduct).unwrap();
        let refused = run_into(&same_base_other_metric, &mut out, &mut workspace);
        assert!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
        let other = gpu.upload_flat_index(&base[..100 * dim], dim, metric).unwrap();
        let refused = run_into(&other, &mut out, &mut workspace);
        assert!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
    }
    assert!(matches!(
        gpu.upload_flat_index(&base, dim, Metric::L2).unwrap().plan_search(0, 1),
        Err(Error::EmptyInput)
    ));
}

/// A streamed search of `queries` (host) against `base` (host) with chunks of
/// `chunk_bytes` and merge rows within `tile_bytes`: `(distances, indices)` and the chunks.
fn search_streamed<T: VectorComponent>(
    gpu: &Gpu,
    (queries, base): (&[T], &[T]),
    dim: usize,
    k: usize,
    metric: Metric,
    (chunk_bytes, tile_bytes): (usize, usize),
) -> ((Vec<f32>, Vec<u64>), usize) {
    let tuned = gpu.with_tuning(Tuning {
        knn_stream_chunk_bytes: chunk_bytes,
        knn_tile_bytes: tile_bytes,
        ..*gpu.tuning()
    });
    let index = tuned.streamed_index(base, dim, metric).unwrap();
    assert_eq!((index.len(), index.dim(), index.metric()), (base.len() / dim, dim, metric));
    // A GPU page-locks the base; the emulator has nothing to lock.
    assert_eq!(index.is_pinned(), !on_emulator(gpu));
    (index.search_host(queries, k).unwrap(), index.chunks())
}

#[test]
fn a_base_streamed_from_host_memory_equals_the_device_index() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(43);
    let (queries_count, base_count, dim) = if on_emulator(&gpu) { (30, 500, 10) } else { (700, 60_000, 48) };
    let base = clustered_vectors(&mut rng, base_count, dim, 7);
    let queries = clustered_vectors(&mut rng, queries_count, dim, 7);
    let vector_bytes = dim * 4;
    let bits = |v: &[f32]| v.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        for k in [1, 9, base_count / 3 + 5, base_count] {
            let want = search(&gpu, &queries, &base, dim, k, metric);
            // Chunks of at most 37 vectors (fewer than k but for k = 1 and 9: the best so
            // far fill up over several chunks), of a seventh of the base, and one chunk;
            // merge rows of every query at once, and (at the large k, where the merge rows
            // are wide) of a quarter of the queries a group, each group streaming the base
            // again. (A budget that small for small k would tile the chunk searches down to
            // single queries: slow, and tested elsewhere.)
            let quarter = queries_count.div_ceil(4) * k * 48;
            let grouped = (base_count / 7 * vector_bytes, if k > 9 { quarter } else { 1 << 30 }, 7);
            for (chunk_bytes, tile_bytes, least_chunks) in [
                (37 * vector_bytes, 1 << 30, base_count / 37),
                (base_count / 7 * vector_bytes, 1 << 30, 7),
                grouped,
                (32 * base_count * vector_bytes, 1 << 30, 1),
            ] {
                let (got, chunks) =
                    search_streamed(&gpu, (&queries, &base), dim, k, metric, (chunk_bytes, tile_bytes));
                let label = format!("{metric:?} k={k} {chunks} chunks, tile budget {tile_bytes}");
                if least_chunks == 1 {
                    assert_eq!(chunks, 1, "{label}");
                } else {
                    assert!(chunks >= least_chunks, "{label}");
                }
                assert_eq!(got.1, want.1, "{label}: indices");
                assert_eq!(bits(&got.0), bits(&want.0), "{label}: distances");
            }
        }
    }
    // Points on a line, chunks of at most k vectors: each query's nearest all lie within a
    // few middle chunks, and the later, shorter chunks rank against them.
    let line: Vec<f32> = (0..500).map(|i| i as f32).collect();
    let k = 171;
    let middle: Vec<f32> = vec![256.0, 255.5, 200.0];
    for metric in [Metric::L2, Metric::InnerProduct] {
        let want = search(&gpu, &middle, &line, 1, k, metric);
        let (got, chunks) = search_streamed(&gpu, (&middle, &line), 1, k, metric, (k * 4, 1 << 30));
        assert!(chunks >= 8, "{metric:?}: {chunks} chunks");
        assert_eq!(got.1, want.1, "{metric:?}: short chunks");
        assert_eq!(bits(&got.0), bits(&want.0), "{metric:?}: short chunks");
    }
    // 16-bit storage, and non-finite components (NaN ranks last under every metric).
    let base16: Vec<bf16> = base.iter().map(|&v| bf16::from_f32(v)).collect();
    let queries16: Vec<bf16> = queries.iter().map(|&v| bf16::from_f32(v)).collect();
    let mut odd = base.clone();
    odd[3 * dim + 1] = f32::NAN;
    odd[(base_count - 2) * dim] = f32::INFINITY;
    for metric in [Metric::L2, Metric::Cosine] {
        let chunk_bytes = base_count / 5 * vector_bytes;
        let want = search_as(&gpu, (&queries16, &base16), dim, 12, metric);
        let (got, chunks) =
            search_streamed(&gpu, (&queries16, &base16), dim, 12, metric, (chunk_bytes / 2, 1 << 30));
        assert!(chunks >= 5, "{chunks}");
        assert_eq!(got.1, want.1, "bf16 {metric:?}");
        assert_eq!(bits(&got.0), bits(&want.0), "bf16 {metric:?}");
        let want = search(&gpu, &queries, &odd, dim, base_count, metric);
        let (got, _) =
            search_streamed(&gpu, (&queries, &odd), dim, base_count, metric, (chunk_bytes, 1 << 30));
        assert_eq!(got.1, want.1, "non-finite {metric:?}");
        assert_eq!(bits(&got.0), bits(&want.0), "non-finite {metric:?}");
        // Vector 3's distances are NaN, the infinite vector's +inf (L2) or NaN (cosine):
        // both after every finite one, NaNs by lower index.
        let last_two = &got.1[2 * base_count - 2..2 * base_count];
        assert!(last_two.contains(&3), "{metric:?}: the NaN vector is not last: {last_two:?}");
        assert!(last_two.contains(&(base_count as u64 - 2)), "{metric:?}: {last_two:?}");
    }
}

#[test]
fn a_streamed_index_refuses_bad_input_clearly() {
    let gpu = gpu();
    let base = [1.0f32; 12];
    assert!(matches!(gpu.streamed_index(&base[..0], 3, Metric::L2), Err(Error::EmptyInput)));
    assert!(matches!(gpu.streamed_index(&base, 0, Metric::L2), Err(Error::EmptyInput)));
    assert!(matches!(gpu.streamed_index(&base[..11], 3, Metric::L2), Err(Error::InvalidArgument { .. })));
    let index = gpu.streamed_index(&base, 3, Metric::L2).unwrap();
    assert!(matches!(index.search_host(&[0.0; 6], 0), Err(Error::KOutOfRange { .. })));
    assert!(matches!(index.search_host(&[0.0; 6], 5), Err(Error::KOutOfRange { .. })));
    assert!(matches!(index.search_host(&[0.0; 7], 1), Err(Error::InvalidArgument { .. })));
    let queries = gpu.upload(&[0.0f32; 8]).unwrap();
    let mismatched = index.search(Vectors::new(&queries, 2, 4).unwrap(), 1);
    assert!(matches!(mismatched, Err(Error::InvalidArgument { .. })), "{mismatched:?}");
    let (distances, indices) = index.search_host(&[1.0; 6], 4).unwrap();
    assert_eq!(indices, [0, 1, 2, 3, 0, 1, 2, 3]); // all equal: ties by index
    assert_eq!(distances, [0.0; 8]);
    // Queries of another device's handle (another emulator instance counts as one).
    let foreign = Gpu::emulator().upload(&[0.0f32; 3]).unwrap();
    let refused = index.search(Vectors::new(&foreign, 1, 3).unwrap(), 1);
    assert!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
}

#[test]
fn a_streamed_plan_runs_again_into_the_callers_memory() {
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(53);
    let (queries_count, base_count, dim, k) = (30, 700, 6, 9);
    let base = random_vectors(&mut rng, base_count, dim);
    // Chunks of at most 40 vectors: several per run.
    let tuned = gpu.with_tuning(Tuning { knn_stream_chunk_bytes: 40 * dim * 4, ..*gpu.tuning() });
    let index = tuned.streamed_index(&base, dim, Metric::Cosine).unwrap();
    let plan = index.plan_search(queries_count, k).unwrap();
    assert_eq!((plan.queries(), plan.k(), plan.outputs()), (queries_count, k, queries_count * k));
    assert!(plan.chunks() > 4, "{} chunks", plan.chunks());
    // Outputs and workspace as parts of larger buffers of the caller's.
    let mut values = gpu.alloc_zeroed::<f32>(plan.outputs() + 5).unwrap();
    let mut indices = gpu.alloc_zeroed::<u64>(plan.outputs() + 2).unwrap();
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes() + 256).unwrap();
    for round in 0..3 {
        let queries = random_vectors(&mut rng, queries_count, dim);
        let uploaded = gpu.upload(&queries).unwrap();
        let out = TopKOut::new(values.slice_mut(5..), indices.slice_mut(..plan.outputs()));
        index
            .search_into(
                &plan,
                Vectors::new(&uploaded, queries_count, dim).unwrap(),
                out,
                workspace.slice_mut(256..),
            )
            .unwrap();
        let got = (
            gpu.download(&values).unwrap()[5..].to_vec(),
            gpu.download(&indices).unwrap()[..plan.outputs()].to_vec(),
        );
        assert_eq!(got, search(&gpu, &queries, &base, dim, k, Metric::Cosine), "round {round}");
    }
    // What the plan was not made for.
    let queries = gpu.upload(&vec![0.5f32; (queries_count + 1) * dim]).unwrap();
    let mut out = TopK {
        values: gpu.alloc_zeroed::<f32>(plan.outputs()).unwrap(),
        indices: gpu.alloc_zeroed::<u64>(plan.outputs()).unwrap(),
    };
    let more = Vectors::new(&queries, queries_count + 1, dim).unwrap();
    let refused = index.search_into(&plan, more, &mut out, &mut workspace);
    assert!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
    let fitting = queries.slice(..queries_count * dim);
    let mut small = gpu.alloc_zeroed::<u8>(plan.workspace_bytes() - 1).unwrap();
    let refused =
        index.search_into(&plan, Vectors::new(fitting, queries_count, dim).unwrap(), &mut out, &mut small);
    assert!(matches!(refused, Err(Error::WorkspaceTooSmall { .. })), "{refused:?}");
    let mut short = TopK {
        values: gpu.alloc_zeroed::<f32>(plan.outputs() - 1).unwrap(),
        indices: gpu.alloc_zeroed::<u64>(plan.outputs()).unwrap(),
    };
    let fitting = queries.slice(..queries_count * dim);
    let refused = index.search_into(
        &plan,
        Vectors::new(fitting, queries_count, dim).unwrap(),
        &mut short,
        &mut workspace,
    );
    assert!(matches!(refused, Err(Error::LengthMismatch { .. })), "{refused:?}");
    let other = tuned.streamed_index(&base, dim, Metric::L2).unwrap();
    let fitting = queries.slice(..queries_count * dim);
    let refused = other.search_into(
        &plan,
        Vectors::new(fitting, queries_count, dim).unwrap(),
        &mut out,
        &mut workspace,
    );
    assert!(matches!(refused, Err(Error::InvalidArgument { .. })), "{refused:?}");
    assert!(matches!(index.plan_search(0, k), Err(Error::EmptyInput)));
    assert!(matches!(index.plan_search(3, base_count + 1), Err(Error::KOutOfRange { .. })));
}

/// The walking TF32 filter (`f32` vectors of up to 128 components: each block a query tile
/// and every `width`-th base tile): blocks that walk several base tiles (on the emulator's
/// eight blocks and on a GPU's), vectors of 1, 2, 3 and 8 steps (a tile of one step reuses
/// its column norms' buffer soonest), and beside it the filter of longer vectors (9 and 13
/// steps, one tile a block) and the written tiles: the f32 search's neighbours, bit for bit.
#[test]
fn the_walking_tf32_filter_matches_the_f32_search() {
    let gpu = gpu();
    let tiles = gpu.with_tuning(Tuning { knn_filter: false, ..*gpu.tuning() });
    let mut rng = StdRng::seed_from_u64(47);
    let (queries_count, base_count) = if on_emulator(&gpu) { (70, 2100) } else { (300, 40_000) };
    for (dim, metrics) in [
        (5, &[Metric::L2][..]),
        (20, &[Metric::L2, Metric::InnerProduct, Metric::Cosine][..]),
        (40, &[Metric::L2][..]),
        (128, &[Metric::L2][..]),
        (130, &[Metric::InnerProduct][..]),
        (200, &[Metric::L2][..]),
    ] {
        let (queries, base, _) = filter_cases(&mut rng, queries_count, base_count, dim);
        let (q, b) = (gpu.upload(&queries).unwrap(), gpu.upload(&base).unwrap());
        let (query_set, vectors) =
            (|| Vectors::new(&q, queries_count, dim).unwrap(), || Vectors::new(&b, base_count, dim).unwrap());
        for &metric in metrics {
            for (handle, filters) in [(&gpu, true), (&tiles, false)] {
                let exact = handle.flat_index(vectors(), metric).unwrap();
                let tf32 = handle
                    .flat_index(vectors(), metric)
                    .unwrap()
                    .with_precision(KnnPrecision::Tf32Reranked)
                    .unwrap();
                let what = format!("{dim}-d {metric:?} filtered {filters}");
                assert_eq!(tf32.plan_search(queries_count, 10).unwrap().filters(), filters, "{what}");
                let found = download(&gpu, &tf32.search(query_set(), 10).unwrap());
                let whole = download(&gpu, &exact.search(query_set(), 10).unwrap());
                assert_same_bits(&found, &whole, &what);
            }
        }
    }
}

/// The filtered searches' data: clustered base vectors, queries half of them from the base
/// (exact duplicates) and half new, and a base of the first three vectors repeated (every
/// row of candidates overflows).
fn filter_cases(
    rng: &mut StdRng,
    queries_count: usize,
    base_count: usize,
    dim: usize,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let base = clustered_vectors(rng, base_count, dim, 12);
    let mut queries = base[..queries_count / 2 * dim].to_vec();
    queries.extend(clustered_vectors(rng, queries_count - queries_count / 2, dim, 12));
    let repeated = (0..base_count).flat_map(|i| base[(i % 3) * dim..(i % 3 + 1) * dim].to_vec()).collect();
    (queries, base, repeated)
}

/// Two searches' results (distances, indices) are the same, distances bit for bit.
fn assert_same_bits(found: &(Vec<f32>, Vec<u64>), whole: &(Vec<f32>, Vec<u64>), what: &str) {
    assert_eq!(found.1, whole.1, "{what}: indices");
    let bits = |d: &[f32]| d.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&found.0), bits(&whole.0), "{what}: distances");
}

/// The filtered search (`Tuning::knn_filter`: a probe's bound per query, only the pairs
/// within it kept by the product) gives the unfiltered search's bits: clustered vectors with
/// exact duplicates (ties at the `k`-th distance, kept by lower index), queries among the base
/// and new ones, every metric. Where the pairs within a bound overflow their row (a base of
/// a few repeated vectors: thousands of equal distances), those queries are searched again
/// unfiltered, with the same result.
#[test]
fn the_filtered_search_equals_the_tiles_bit_for_bit() {
    let gpu = gpu();
    let tiles = gpu.with_tuning(Tuning { knn_filter: false, ..*gpu.tuning() });
    let mut rng = StdRng::seed_from_u64(41);
    let (queries_count, base_count, dim) = if on_emulator(&gpu) { (40, 5000, 7) } else { (300, 40_000, 24) };
    let (queries, base, repeated) = filter_cases(&mut rng, queries_count, base_count, dim);
    let (q, b, r) =
        (gpu.upload(&queries).unwrap(), gpu.upload(&base).unwrap(), gpu.upload(&repeated).unwrap());
    let query_set = || Vectors::new(&q, queries_count, dim).unwrap();
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        for k in [1, 5, 10, 64] {
            for (data, overflows) in [(&b, false), (&r, true)] {
                let vectors = || Vectors::new(data, base_count, dim).unwrap();
                let (filtered, plain) = (
                    gpu.flat_index(vectors(), metric).unwrap(),
                    tiles.flat_index(vectors(), metric).unwrap(),
                );
                assert!(filtered.plan_search(queries_count, k).unwrap().filters(), "{metric:?} k={k}");
                assert!(!plain.plan_search(queries_count, k).unwrap().filters());
                let again = diagnostics::knn_unproven(&filtered, &query_set(), k).unwrap();
                let expected = if overflows { queries_count } else { 0 };
                assert_eq!(again, expected, "{metric:?} k={k} repeated {overflows}: queries searched again");
                let found = download(&gpu, &filtered.search(query_set(), k).unwrap());
                let whole = download(&gpu, &plain.search(query_set(), k).unwrap());
                let what = format!("{metric:?} k={k} repeated {overflows}");
                assert_same_bits(&found, &whole, &what);
                if k == 10 && !overflows {
                    check(&queries, &base, dim, k, metric, false, (&found.0, &found.1));
                }
            }
        }
    }
}

#[test]
fn the_tf32_filtered_search_equals_the_f32_search_bit_for_bit() {
    // The TF32 filter keeps every pair within its query's bound widened by TF32's margin; the
    // candidates that can be among the nearest get their exact distances: the results are
    // the f32 search's, ties included. A base of three repeated vectors overflows every row
    // and is searched again.
    let gpu = gpu();
    let mut rng = StdRng::seed_from_u64(43);
    let (queries_count, base_count, dim, ks) = if on_emulator(&gpu) {
        (40, 8000, 7, &[1usize, 5, 10, 16][..])
    } else {
        (300, 40_000, 24, &[1usize, 5, 10, 64][..])
    };
    let (queries, base, repeated) = filter_cases(&mut rng, queries_count, base_count, dim);
    let (q, b, r) =
        (gpu.upload(&queries).unwrap(), gpu.upload(&base).unwrap(), gpu.upload(&repeated).unwrap());
    let query_set = || Vectors::new(&q, queries_count, dim).unwrap();
    for metric in [Metric::L2, Metric::InnerProduct, Metric::Cosine] {
        for &k in ks {
            for (data, overflows) in [(&b, false), (&r, true)] {
                let vectors = || Vectors::new(data, base_count, dim).unwrap();
                let exact = gpu.flat_index(vectors(), metric).unwrap();
                let tf32 = gpu
                    .flat_index(vectors(), metric)
                    .unwrap()
                    .with_precision(KnnPrecision::Tf32Reranked)
                    .unwrap();
                let what = format!("{metric:?} k={k} repeated {overflows}");
                assert!(tf32.plan_search(queries_count, k).unwrap().filters(), "{what}");
                let again = diagnostics::knn_unproven(&tf32, &query_set(), k).unwrap();
                let expected = if overflows { queries_count } else { 0 };
                assert_eq!(again, expected, "{what}: queries searched again");
                let found = download(&gpu, &tf32.search(query_set(), k).unwrap());
                let whole = download(&gpu, &exact.search(query_set(), k).unwrap());
                assert_same_bits(&found, &whole, &what);
            }
        }
    }
    // Large k (the TF32 filter is planned up to the queues' 2048): a base large enough to
    // filter there, on a GPU only (the emulator's would take minutes).
    if !on_emulator(&gpu) {
        let (queries_count, base_count, dim) = (100, 200_000, 24);
        let (queries, base, _) = filter_cases(&mut rng, queries_count, base_count, dim);
        let (q, b) = (gpu.upload(&queries).unwrap(), gpu.upload(&base).unwrap());
        let query_set = || Vectors::new(&q, queries_count, dim).unwrap();
        let vectors = || Vectors::new(&b, base_count, dim).unwrap();
        for k in [1000, 2048] {
            let exact = gpu.flat_index(vectors(), Metric::L2).unwrap();
            let tf32 = gpu
                .flat_index(vectors(), Metric::L2)
                .unwrap()
                .with_precision(KnnPrecision::Tf32Reranked)
                .unwrap();
            let what = format!("L2 k={k} of {base_count}");
            assert!(tf32.plan_search(queries_count, k).unwrap().filters(), "{what}");
            let found = download(&gpu, &tf32.search(query_set(), k).unwrap());
            let whole = download(&gpu, &exact.search(query_set(), k).unwrap());
            assert_same_bits(&found, &whole, &what);
        }
    }
}
