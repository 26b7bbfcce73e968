//! Split-bucket partition (SBP) top-k and selection: the paper's three datasets (uniform
//! integers below 2^30, the bucket killer, distances from one vector to many), inputs so full
//! of duplicates that every block narrows to the last bit and breaks ties, several passes,
//! both forms (radix and search tree), both orders, against the CPU oracle and the other
//! algorithms; the selection forms; and the limits' errors.
//!
//! The whole design.md §4 matrix (every key type and distribution, edge sizes) runs SBP too,
//! in `tests/top_k.rs`.

mod common;

use common::{Distribution, SplitMix, TestKey, generate};
use gpu_select::{
    Algorithm, Error, Gpu, Keys, Order, SelectAlgorithm, SelectOptions, TopKOptions, reference,
};
use gpu_select_kernels::topk::sbp::{SBP_TILE, TREE_SAMPLE};

const FORMS: [Algorithm; 2] = [Algorithm::SbpRadix, Algorithm::SbpTree];

/// Uniform integers in `0 .. 2^30` (the paper's first dataset).
fn uniform_30_bits(n: usize, seed: u64) -> Vec<u32> {
    let mut random = SplitMix(seed);
    (0..n).map(|_| (random.next() >> 34) as u32).collect()
}

/// The bucket killer: every key `1.0` but four, each differing from it in one byte, so the
/// top digits of every radix level put (almost) every key in one bucket.
fn bucket_killer(n: usize) -> Vec<f32> {
    let mut data = vec![1.0f32; n];
    for byte in 0..4 {
        let at = (n / 5) * (byte + 1) % n;
        data[at] = f32::from_bits(1.0f32.to_bits() ^ (1 << (8 * byte)));
    }
    data
}

/// Squared distances from one 128-dimensional vector to `n` others, clustered (the paper's
/// third dataset, a k-NN query's row).
fn distances(n: usize, seed: u64) -> Vec<f32> {
    let mut random = SplitMix(seed);
    let mut uniform = move || (random.next() >> 40) as f32 / (1u64 << 24) as f32;
    let query: Vec<f32> = (0..128).map(|_| uniform()).collect();
    let centres: Vec<Vec<f32>> = (0..16).map(|_| (0..128).map(|_| uniform()).collect()).collect();
    (0..n)
        .map(|i| {
            let centre = &centres[i % centres.len()];
            centre.iter().zip(&query).map(|(c, q)| (c + 0.1 * uniform() - q).powi(2)).sum()
        })
        .collect()
}

/// Top-k with `options` equals the oracle's, values and indices (ties lowest index first); an
/// unsorted result comes in index order.
fn check<K: TestKey>(gpu: &Gpu, data: &[K], k: usize, options: TopKOptions, context: &str) {
    let indices = common::check_top_k(gpu, data, k, options, context);
    if !options.sorted {
        assert!(indices.windows(2).all(|pair| pair[0] < pair[1]), "{context}: not in index order");
    }
}

/// Sizes: three tiles and a partial one on the emulator (two passes); on a GPU up to three
/// passes.
fn sizes(gpu: &Gpu) -> Vec<usize> {
    if common::on_emulator(gpu) { vec![40_000] } else { vec![40_000, (1 << 22) + 3, 9_000_017] }
}

fn ks(n: usize) -> Vec<usize> {
    [1, 8, 32, 100, 128, 1000, 2048].into_iter().filter(|&k| k <= n).collect()
}

#[test]
fn the_papers_datasets_against_the_oracle() {
    let gpu = common::gpu();
    for n in sizes(&gpu) {
        let (uniform, killer, distances) = (uniform_30_bits(n, 3), bucket_killer(n), distances(n, 4));
        for k in ks(n) {
            for algorithm in FORMS {
                for order in [Order::Largest, Order::Smallest] {
                    let options = TopKOptions::new(order).with_algorithm(algorithm);
                    let context = format!("n={n} k={k} {algorithm:?} {order:?}");
                    check(&gpu, &uniform, k, options, &format!("uniform 2^30 {context}"));
                    check(&gpu, &killer, k, options, &format!("bucket killer {context}"));
                    check(&gpu, &distances, k, options, &format!("distances {context}"));
                }
                let unsorted = TopKOptions::smallest().with_algorithm(algorithm).with_sorted(false);
                check(
                    &gpu,
                    &distances,
                    k,
                    unsorted,
                    &format!("distances unsorted n={n} k={k} {algorithm:?}"),
                );
            }
        }
    }
}

#[test]
fn duplicates_make_blocks_narrow_to_the_last_bit_and_break_ties() {
    // All equal: every tile narrows through every bit and keeps its first k (ties by index);
    // two values: the target bucket is half a tile; the outliers: one key far from the rest.
    let gpu = common::gpu();
    let n = sizes(&gpu)[sizes(&gpu).len() - 1];
    for distribution in [Distribution::AllEqual, Distribution::FewDistinct(2), Distribution::Outliers] {
        for (seed, k) in ks(n).into_iter().enumerate() {
            for algorithm in FORMS {
                let context = format!("{distribution:?} n={n} k={k} {algorithm:?}");
                let options = TopKOptions::largest().with_algorithm(algorithm);
                check(
                    &gpu,
                    &generate::<f32>(n, distribution, seed as u64),
                    k,
                    options,
                    &format!("f32 {context}"),
                );
                check(
                    &gpu,
                    &generate::<u64>(n, distribution, seed as u64),
                    k,
                    options,
                    &format!("u64 {context}"),
                );
            }
        }
    }
}

#[test]
fn samples_that_mislead_the_tree_still_give_the_top_k() {
    // Inputs whose sample misleads the tree form's first pass. The first 600 sampled
    // positions hold 1.0 and every other key lies below it: the splitters (sampled ranks up
    // to 571 at `k = 1000`, 92 at `k = 128`) are all 1.0, and at `k = 1000` the 600 keys at
    // or above the top splitter are fewer than `k`, so the top `k` reach into the
    // catch-all bucket. With all of tile 1 but its sampled positions above 2.0, that tile
    // is nearly all better than the top splitter. Ascending keys (largest): every tile but
    // the last holds nothing at or below the top splitter. Both orders. (Also the inputs
    // of the fallbacks of a first pass that keeps only the keys at or below the top
    // splitter as it loads: tried in H100 runs 268-269, not landed.)
    let gpu = common::gpu();
    let n = 5 * SBP_TILE as usize + 77;
    // The positions of the tree kernel's first `slots` samples (its strided sample).
    let sampled_positions = |slots: usize| -> std::collections::HashSet<usize> {
        (0..slots).map(|slot| slot * n / TREE_SAMPLE as usize).collect()
    };
    let (sampled, first_sampled) = (sampled_positions(TREE_SAMPLE as usize), sampled_positions(600));
    let mut random = SplitMix(21);
    let mut below_one = move || (random.next() >> 40) as f32 / (1u64 << 25) as f32;
    let ties_sampled: Vec<f32> =
        (0..n).map(|i| if first_sampled.contains(&i) { 1.0 } else { below_one() }).collect();
    let tile = SBP_TILE as usize..2 * SBP_TILE as usize;
    let tile_above: Vec<f32> = (0..n)
        .map(|i| match (sampled.contains(&i), tile.contains(&i)) {
            (true, _) => 1.0,
            (false, true) => 2.0 + i as f32 / 65_536.0,
            (false, false) => below_one(),
        })
        .collect();
    let ascending = generate::<f32>(n, Distribution::Ascending, 0);
    for k in [1, 8, 128, 1000] {
        for order in [Order::Largest, Order::Smallest] {
            let options = TopKOptions::new(order).with_algorithm(Algorithm::SbpTree);
            check(&gpu, &ties_sampled, k, options, &format!("sampled ties k={k} {order:?}"));
            check(&gpu, &tile_above, k, options, &format!("a tile above the sample k={k} {order:?}"));
            check(&gpu, &ascending, k, options, &format!("ascending k={k} {order:?}"));
        }
    }
}

#[test]
fn both_forms_agree_with_radix_select_on_every_key_type() {
    fn agree<K: TestKey>(gpu: &Gpu, n: usize) {
        let data = generate::<K>(n, Distribution::Uniform, 11);
        let device_data = gpu.upload(&data).unwrap();
        for k in [1, 77, 2048] {
            let reference = TopKOptions::largest().with_algorithm(Algorithm::RadixSelect);
            let expected = gpu.top_k(&device_data, k, &reference).unwrap();
            for algorithm in FORMS {
                let top =
                    gpu.top_k(&device_data, k, &TopKOptions::largest().with_algorithm(algorithm)).unwrap();
                assert_eq!(gpu.download(&top.indices).unwrap(), gpu.download(&expected.indices).unwrap());
                let (got, want) =
                    (gpu.download(&top.values).unwrap(), gpu.download(&expected.values).unwrap());
                assert!(
                    got.iter().zip(&want).all(|(a, b)| a.exact() == b.exact()),
                    "{} k={k} {algorithm:?}",
                    K::NAME
                );
            }
        }
    }
    let gpu = common::gpu();
    let n = if common::on_emulator(&gpu) { 20_000 } else { 3_000_001 };
    agree::<f32>(&gpu, n);
    agree::<f64>(&gpu, n);
    agree::<i32>(&gpu, n);
    agree::<u32>(&gpu, n);
    agree::<i64>(&gpu, n);
    agree::<u64>(&gpu, n);
    agree::<half::f16>(&gpu, n);
    agree::<half::bf16>(&gpu, n);
}

#[test]
fn selection_forms_near_both_ends() {
    let gpu = common::gpu();
    let n = sizes(&gpu)[sizes(&gpu).len() - 1];
    let data = distances(n, 9);
    let device_data = gpu.upload(&data).unwrap();
    for order in [Order::Smallest, Order::Largest] {
        let sorted = reference::sort_pairs(&data, order);
        for algorithm in [SelectAlgorithm::SbpRadix, SelectAlgorithm::SbpTree] {
            let options = SelectOptions::new(order).with_algorithm(algorithm);
            // A plan made once serves every rank (its workspace covers the largest k).
            let plan = gpu.plan_select::<f32>(n, &options).unwrap();
            let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
            for rank in [0, 1, 57, 127, n - 128, n - 2, n - 1] {
                let got = gpu.select_into(&plan, &device_data, rank, &mut workspace).unwrap();
                assert_eq!(
                    got.value.to_bits(),
                    sorted[rank].0.to_bits(),
                    "{algorithm:?} {order:?} rank {rank}"
                );
                assert_eq!(got.rank, rank as u64);
            }
            match gpu.select(&device_data, n / 2, &options) {
                Err(Error::KOutOfRange { .. }) => {}
                other => panic!("{algorithm:?}: the median is past SBP's reach, got {other:?}"),
            }
        }
    }
}

#[test]
fn limits_are_clear_errors() {
    let gpu = common::gpu();
    let data = gpu.upload(&generate::<f32>(5000, Distribution::Uniform, 1)).unwrap();
    for algorithm in FORMS {
        let options = TopKOptions::largest().with_algorithm(algorithm);
        match gpu.top_k(&data, 2049, &options) {
            Err(Error::KOutOfRange { .. }) => {}
            other => panic!("{algorithm:?} k = 2049: {:?}", other.map(|_| ())),
        }
        assert!(matches!(gpu.top_k(&data, 0, &options), Err(Error::KOutOfRange { .. })));
        assert!(matches!(gpu.top_k(&data, 5001, &options), Err(Error::KOutOfRange { .. })));
        let rows = Keys::rows(&data, 50, 100);
        assert!(
            matches!(gpu.top_k(rows, 5, &options), Err(Error::InvalidArgument { .. })),
            "{algorithm:?} rows"
        );
    }
}

#[test]
fn a_workspace_full_of_garbage_changes_nothing() {
    // The plan form with a reused workspace holding random bytes: nothing may be read before
    // it is written (a tree read without its kernel, counts, segments).
    let gpu = common::gpu();
    let mut random = SplitMix(77);
    for n in [33usize, 5000, 40_000] {
        let data = distances(n, 12);
        let device_data = gpu.upload(&data).unwrap();
        for algorithm in FORMS {
            for k in [1usize, 32, 100.min(n)] {
                let options = TopKOptions::smallest().with_algorithm(algorithm);
                let plan = gpu.plan_top_k(&Keys::new(&device_data), k, &options).unwrap();
                let garbage: Vec<u8> = (0..plan.workspace_bytes()).map(|_| random.next() as u8).collect();
                let mut workspace = gpu.upload(&garbage).unwrap();
                let mut out = gpu_select::TopK {
                    values: gpu.alloc_zeroed::<f32>(k).unwrap(),
                    indices: gpu.alloc_zeroed::<u64>(k).unwrap(),
                };
                gpu.top_k_into(&plan, &device_data, &mut out, &mut workspace).unwrap();
                let expected: Vec<u64> =
                    reference::sort_pairs(&data, Order::Smallest).iter().take(k).map(|&(_, i)| i).collect();
                assert_eq!(gpu.download(&out.indices).unwrap(), expected, "n={n} k={k} {algorithm:?}");
            }
        }
    }
}
