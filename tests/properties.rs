//! A property test of the public API on whatever backend runs the tests (the emulator in
//! CI): random key types, lengths 0…5000, `k`, ranks, orders, algorithms, row shapes and
//! quantiles, and exact k-NN (random shapes, metrics and `k`, vector components that mix
//! the same specials), over keys that mix NaN, ±inf, ±0, subnormals, extremes and duplicates. Every
//! call must match the CPU oracle or refuse its arguments with an argument error; none may
//! panic or fail otherwise. `PROPTEST_CASES` sets the cases per test (32 by default here;
//! a longer run is recorded in docs/results).

mod common;

use common::gpu;
use gpu_select::{
    Algorithm, Error, Gpu, Key, Metric, MultiselectAlgorithm, NanPolicy, Order, OrderedBits, QuantileMethod,
    QuantileOptions, SelectAlgorithm, SelectKey, SelectOptions, TopKOptions, reference,
};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// Errors that refuse arguments (the only failures a valid backend may return here).
fn refuses_arguments(error: &Error) -> bool {
    matches!(error, Error::InvalidArgument { .. } | Error::KOutOfRange { .. } | Error::EmptyInput)
}

fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(32),
        ..Config::default()
    }
}

const ALGORITHMS: [Algorithm; 10] = [
    Algorithm::Auto,
    Algorithm::Bitonic,
    Algorithm::BlockSort,
    Algorithm::RadixSelect,
    Algorithm::SampleSelect,
    Algorithm::PerThreadHeap,
    Algorithm::BucketSelect,
    Algorithm::SortAndChoose,
    Algorithm::WarpSelect,
    Algorithm::Auto,
];

/// Keys of a type: special values, a few repeated values, and anything.
trait PropKey: SelectKey {
    fn specials() -> Vec<Self>;
    fn from_bits(bits: u64) -> Self;
}

macro_rules! float_key {
    ($t:ty, $bits:ty) => {
        impl PropKey for $t {
            fn specials() -> Vec<Self> {
                vec![
                    <$t>::NAN,
                    -<$t>::NAN,
                    <$t>::INFINITY,
                    <$t>::NEG_INFINITY,
                    0.0,
                    -0.0,
                    <$t>::MIN_POSITIVE / 4.0,
                    -<$t>::MIN_POSITIVE / 4.0,
                    <$t>::MAX,
                    <$t>::MIN,
                    1.0,
                ]
            }
            fn from_bits(bits: u64) -> Self {
                <$t>::from_bits(bits as $bits)
            }
        }
    };
}
float_key!(f32, u32);
float_key!(f64, u64);

macro_rules! half_key {
    ($t:ty) => {
        impl PropKey for $t {
            fn specials() -> Vec<Self> {
                vec![
                    <$t>::NAN,
                    -<$t>::NAN,
                    <$t>::INFINITY,
                    <$t>::NEG_INFINITY,
                    <$t>::ZERO,
                    <$t>::NEG_ZERO,
                    <$t>::from_bits(1),
                    -<$t>::from_bits(1),
                    <$t>::MAX,
                    <$t>::MIN,
                    <$t>::ONE,
                ]
            }
            fn from_bits(bits: u64) -> Self {
                <$t>::from_bits(bits as u16)
            }
        }
    };
}
half_key!(half::f16);
half_key!(half::bf16);

macro_rules! int_key {
    ($t:ty) => {
        impl PropKey for $t {
            fn specials() -> Vec<Self> {
                vec![<$t>::MIN, <$t>::MAX, 0, 1, <$t>::MIN + 1, <$t>::MAX - 1]
            }
            fn from_bits(bits: u64) -> Self {
                bits as $t
            }
        }
    };
}
int_key!(u32);
int_key!(i32);
int_key!(i64);
int_key!(u64);

fn keys<K: PropKey + std::fmt::Debug>() -> impl Strategy<Value = Vec<K>> {
    let key = prop_oneof![
        3 => any::<u64>().prop_map(K::from_bits),
        2 => (0u8..6).prop_map(|v| K::from_f64(v as f64)),
        1 => proptest::sample::select(K::specials()),
    ];
    prop_oneof![
        1 => proptest::collection::vec(key.clone(), 0..40),
        3 => proptest::collection::vec(key, 0..5000),
    ]
}

fn bits<K: Key>(key: K) -> u64 {
    key.to_ordered().to_u64()
}

/// Top-k of 1-D keys and of rows against the sorted pairs, for one algorithm and order.
fn check_top_k<K: PropKey>(gpu: &Gpu, keys: &[K], rows: usize, k: usize, order: Order, algorithm: Algorithm) {
    let options = TopKOptions::new(order).with_algorithm(algorithm);
    let what = format!("top-k n={} rows={rows} k={k} {order:?} {algorithm:?}", keys.len());
    match gpu.top_k_host(keys, rows, k, &options) {
        Ok((values, indices)) => {
            let cols = keys.len() / rows;
            assert_eq!(values.len(), rows * k, "{what}");
            for row in 0..rows {
                let expected = reference::sort_pairs(&keys[row * cols..(row + 1) * cols], order);
                for i in 0..k {
                    let (value, index) = (values[row * k + i], indices[row * k + i]);
                    assert_eq!(bits(value), bits(expected[i].0), "{what}: row {row} place {i}");
                    assert_eq!(index, expected[i].1, "{what}: row {row} place {i} (ties by index)");
                }
            }
        }
        Err(error) => assert!(refuses_arguments(&error), "{what}: {error}"),
    }
}

fn check_api<K: PropKey + std::fmt::Debug>(keys: Vec<K>, k_seed: u64, choice: u64, qs: Vec<f64>) {
    let gpu = gpu();
    let n = keys.len();
    let order = if choice & 1 == 0 { Order::Smallest } else { Order::Largest };
    let algorithm = ALGORITHMS[(choice >> 1) as usize % ALGORITHMS.len()];
    // k from 0 to n + 1 (the ends refused), mostly inside.
    let k = match k_seed % 8 {
        0 => 0,
        1 => n + 1,
        2 => n,
        _ => (k_seed >> 3) as usize % (n + 1),
    };
    check_top_k(&gpu, &keys, 1, k, order, algorithm);
    // Rows: a divisor of n (or not: refused).
    let rows = 1 + (choice >> 8) as usize % 7;
    if n > 0 {
        let row_k = k.min(n / rows).max(1);
        check_top_k(&gpu, &keys, rows, row_k, order, algorithm);
    }
    // Selection: exact, QuickSelect and approximate.
    let sorted = reference::sort_pairs(&keys, order);
    for select in [
        SelectAlgorithm::Auto,
        SelectAlgorithm::QuickSelect,
        SelectAlgorithm::Approximate { buckets: 1 << (1 + (choice >> 12) % 10) },
    ] {
        let rank = if n == 0 { 0 } else { (k_seed >> 7) as usize % (n + 1) };
        let what = format!("select n={n} rank={rank} {order:?} {select:?}");
        match gpu.select_host(&keys, rank, &SelectOptions::new(order).with_algorithm(select)) {
            Ok(found) => {
                let at = found.rank as usize;
                assert!(at < n, "{what}: rank {at}");
                if !matches!(select, SelectAlgorithm::Approximate { .. }) {
                    assert_eq!(at, rank, "{what}");
                }
                assert_eq!(bits(found.value), bits(sorted[at].0), "{what}");
            }
            Err(error) => assert!(refuses_arguments(&error), "{what}: {error}"),
        }
    }
    // Multiselect and quantiles.
    let ascending = reference::sort_pairs(&keys, Order::Smallest);
    let ranks: Vec<usize> =
        (0..5)
            .map(|i: u32| {
                if n == 0 {
                    i as usize
                } else {
                    (k_seed.rotate_left(i * 9) as usize) % (n + (i == 4) as usize)
                }
            })
            .collect();
    for algorithm in [MultiselectAlgorithm::Auto, MultiselectAlgorithm::BucketMultiselect] {
        let what = format!("multiselect n={n} ranks={ranks:?} {algorithm:?}");
        match gpu.multiselect_host(&keys, &ranks, algorithm) {
            Ok(found) => {
                for (selection, &rank) in found.iter().zip(&ranks) {
                    assert_eq!(bits(selection.value), bits(ascending[rank].0), "{what}");
                }
            }
            Err(error) => assert!(refuses_arguments(&error), "{what}: {error}"),
        }
    }
    let method = QuantileMethod::ALL[(choice >> 20) as usize % QuantileMethod::ALL.len()];
    let nan = if choice & (1 << 30) == 0 { NanPolicy::Propagate } else { NanPolicy::Omit };
    let options = QuantileOptions::new(method).with_nan(nan);
    let what = format!("quantiles n={n} {qs:?} {method:?} {nan:?}");
    match gpu.quantiles_host(&keys, &qs, &options) {
        Ok(values) => {
            let expected = reference::quantiles(&keys, &qs, method, nan);
            for (a, b) in values.iter().zip(&expected) {
                assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{what}: {a} against {b}");
            }
        }
        Err(error) => assert!(refuses_arguments(&error), "{what}: {error}"),
    }
}

/// Exact k-NN of `queries` against `base` (both `dim` wide, components of `keys`'s mix):
/// every answer has `k` distinct neighbours in range, nearest first (NaN last), and none
/// is the query itself in a graph; with small integer components (exact distances) by
/// squared L2, exactly the brute force's lists, ties by index. Or an argument error.
fn check_knn(components: Vec<f32>, shape: u64, k_seed: u64) {
    let gpu = gpu();
    let dim = 1 + (shape % 9) as usize;
    let count = components.len() / dim;
    let queries = (shape >> 8) as usize % 7;
    let metric = [Metric::L2, Metric::InnerProduct, Metric::Cosine][(shape >> 16) as usize % 3];
    let k = match k_seed % 6 {
        0 => 0,
        1 => count + 1,
        _ => (k_seed >> 3) as usize % (count + 1),
    };
    let graph = shape >> 24 & 1 == 1;
    let base = &components[..count * dim];
    let what = format!("knn count={count} dim={dim} queries={queries} k={k} {metric:?} graph={graph}");
    let index = match gpu.upload_flat_index(base, dim, metric) {
        Ok(index) => index,
        Err(error) => return assert!(refuses_arguments(&error) && count == 0, "{what}: {error}"),
    };
    // The queries: the last base vectors, reversed (as many as there are, up to `queries`).
    let query_values: Vec<f32> = base.iter().rev().take(queries * dim).copied().collect();
    let queries = query_values.len() / dim;
    let (rows, found) = if graph {
        let found =
            index.knn_graph(k).and_then(|n| Ok((gpu.download(&n.distances)?, gpu.download(&n.indices)?)));
        (count, found)
    } else {
        (queries, index.search_host(&query_values, k))
    };
    let (distances, indices) = match found {
        Ok(found) => found,
        Err(error) => return assert!(refuses_arguments(&error), "{what}: {error}"),
    };
    assert_eq!((distances.len(), indices.len()), (rows * k, rows * k), "{what}");
    let nearer_first = |d: f32| if metric == Metric::L2 { d } else { -d };
    let small = base.iter().chain(&query_values).all(|v| v.fract() == 0.0 && (0.0..6.0).contains(v));
    for row in 0..rows {
        let (row_indices, row_distances) =
            (&indices[row * k..(row + 1) * k], &distances[row * k..(row + 1) * k]);
        let mut seen = std::collections::HashSet::new();
        for (place, (&index, &distance)) in row_indices.iter().zip(row_distances).enumerate() {
            assert!((index as usize) < count && seen.insert(index), "{what}: row {row}: {row_indices:?}");
            assert!(!graph || index as usize != row, "{what}: row {row} holds itself");
            if place > 0 {
                let previous = row_distances[place - 1];
                let in_order = previous.is_nan() <= distance.is_nan()
                    && (distance.is_nan() || nearer_first(previous) <= nearer_first(distance));
                assert!(in_order, "{what}: row {row} out of order: {row_distances:?}");
            }
        }
        if small && metric == Metric::L2 {
            let query = if graph {
                &base[row * dim..(row + 1) * dim]
            } else {
                &query_values[row * dim..(row + 1) * dim]
            };
            let mut all: Vec<(f32, u64)> = (0..count)
                .filter(|&j| !graph || j != row)
                .map(|j| {
                    (
                        base[j * dim..(j + 1) * dim].iter().zip(query).map(|(a, b)| (a - b) * (a - b)).sum(),
                        j as u64,
                    )
                })
                .collect();
            all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let want: Vec<u64> = all[..k].iter().map(|&(_, j)| j).collect();
            assert_eq!(row_indices, want, "{what}: row {row}");
        }
    }
}

fn quantile_list() -> impl Strategy<Value = Vec<f64>> {
    proptest::collection::vec(
        prop_oneof![4 => 0.0f64..=1.0, 1 => Just(0.0), 1 => Just(1.0), 1 => Just(1.5)],
        0..6,
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn f32_calls_match_the_oracle_or_refuse(keys in keys::<f32>(), k in any::<u64>(), choice in any::<u64>(), qs in quantile_list()) {
        check_api(keys, k, choice, qs);
    }

    #[test]
    fn knn_calls_match_the_oracle_or_refuse(components in keys::<f32>(), shape in any::<u64>(), k in any::<u64>()) {
        // At most 600 components: the emulator's product grows as count² · dim.
        check_knn(components.into_iter().take(600).collect(), shape, k);
    }

    #[test]
    fn f64_calls_match_the_oracle_or_refuse(keys in keys::<f64>(), k in any::<u64>(), choice in any::<u64>(), qs in quantile_list()) {
        check_api(keys, k, choice, qs);
    }

    #[test]
    fn half_calls_match_the_oracle_or_refuse(
        a in keys::<half::f16>(), b in keys::<half::bf16>(), k in any::<u64>(), choice in any::<u64>(),
        qs in quantile_list(),
    ) {
        check_api(a, k, choice, qs.clone());
        check_api(b, k, choice.rotate_left(7), qs);
    }

    #[test]
    fn integer_calls_match_the_oracle_or_refuse(
        a in keys::<u32>(), b in keys::<i32>(), c in keys::<i64>(), d in keys::<u64>(),
        k in any::<u64>(), choice in any::<u64>(), qs in quantile_list(),
    ) {
        check_api(a, k, choice, qs.clone());
        check_api(b, k, choice.rotate_left(7), qs.clone());
        check_api(c, k, choice.rotate_left(14), qs.clone());
        check_api(d, k, choice.rotate_left(21), qs);
    }
}
