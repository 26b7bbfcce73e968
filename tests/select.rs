//! Selection by rank (SampleSelect, QuickSelect) and approximate selection against the CPU
//! oracle: every key type, both orders, the distributions of design.md §4 and the
//! SampleSelect paper's (d = 1, 16, 128, 1024 and n distinct values), random and edge
//! ranks, all ranks of small inputs, cross-checked with the top-k algorithms, and bad input.

mod common;

use common::{DISTRIBUTIONS, Distribution, SplitMix, TestKey, generate, gpu};
use gpu_select::{
    Algorithm, Error, Gpu, Key, Order, SampleSelectPolicy, SelectAlgorithm, SelectOptions, TopKOptions,
    reference,
};

/// `options` with approximate selection of `buckets` buckets.
fn approximate(buckets: usize, options: &SelectOptions) -> SelectOptions {
    options.with_algorithm(SelectAlgorithm::Approximate { buckets })
}

/// The oracle: the key of rank `k` in `order`, as ordered bits (every NaN alike: a
/// selection returns the canonical NaN; -0.0 and +0.0 stay apart).
fn oracle<K: TestKey>(sorted: &[(K, u64)], k: usize) -> K::Bits {
    sorted[k].0.to_ordered()
}

const ALGORITHMS: [SelectAlgorithm; 2] = [SelectAlgorithm::SampleSelect, SelectAlgorithm::QuickSelect];

/// Ranks to check for `n` keys: the edges, the median and random ones (fewer on the
/// emulator, where each selection runs its kernels on host threads).
fn ranks(gpu: &Gpu, n: usize, seed: u64) -> Vec<usize> {
    let mut random = SplitMix(seed);
    let mut ranks = vec![0, n / 2, n - 1];
    let extra = if common::on_emulator(gpu) { 1 } else { 4 };
    ranks.extend((0..extra).map(|_| (random.next() % n as u64) as usize));
    ranks
}

/// Checks every algorithm and both orders on `data` at `ranks`.
fn check<K: TestKey>(gpu: &Gpu, data: &[K], ranks: &[usize], context: &str) {
    let device_data = gpu.upload(data).unwrap();
    for order in [Order::Smallest, Order::Largest] {
        let sorted = reference::sort_pairs(data, order);
        for algorithm in ALGORITHMS {
            let options = SelectOptions::new(order).with_algorithm(algorithm);
            for &k in ranks {
                let got = gpu
                    .select(&device_data, k, &options)
                    .map(|s| s.value)
                    .unwrap_or_else(|e| panic!("{context} {order:?} {algorithm:?} k={k}: {e}"));
                assert_eq!(
                    got.to_ordered(),
                    oracle(&sorted, k),
                    "{context} {order:?} {algorithm:?} k={k}: got {got:?}, want {:?}",
                    sorted[k].0
                );
            }
        }
    }
}

/// The paper's few-distinct inputs (d values) and design.md's distributions.
fn distributions(n: usize) -> Vec<Distribution> {
    let mut all = DISTRIBUTIONS.to_vec();
    all.extend([1, 128, 1024, n as u64].map(Distribution::FewDistinct));
    all
}

fn check_all<K: TestKey>() {
    let gpu = common::gpu();
    let sizes: &[usize] =
        if common::on_emulator(&gpu) { &[2, 2049, 20_000] } else { &[1, 2, 2049, 65_537, 3_000_001] };
    for &n in sizes {
        for (d, distribution) in distributions(n).into_iter().enumerate() {
            let data = generate::<K>(n, distribution, (n * 13 + d) as u64);
            check(&gpu, &data, &ranks(&gpu, n, d as u64), &format!("{} n={n} {distribution:?}", K::NAME));
        }
    }
}

#[test]
fn select_f32() {
    check_all::<f32>();
}

#[test]
fn select_f64() {
    check_all::<f64>();
}

#[test]
fn select_i32() {
    check_all::<i32>();
}

#[test]
fn select_u32() {
    check_all::<u32>();
}

#[test]
fn select_i64() {
    check_all::<i64>();
}

#[test]
fn select_u64() {
    check_all::<u64>();
}

#[test]
fn select_f16() {
    check_all::<half::f16>();
}

#[test]
fn select_bf16() {
    check_all::<half::bf16>();
}

#[test]
fn every_rank_of_small_inputs() {
    let gpu = common::gpu();
    // 300 keys are the base case at once; 2100 take a level first (every 7th rank on the
    // emulator, every rank on a GPU).
    let step = if common::on_emulator(&gpu) { 7 } else { 1 };
    for (n, distribution) in
        [(300, Distribution::Uniform), (2100, Distribution::FewDistinct(16)), (2100, Distribution::Specials)]
    {
        let data = generate::<f32>(n, distribution, n as u64);
        let every: Vec<usize> = (0..n).step_by(if n > 2048 { step } else { 1 }).collect();
        check(&gpu, &data, &every, &format!("every rank n={n} {distribution:?}"));
    }
}

#[test]
fn selection_agrees_with_top_k() {
    // The k-th key of a top-k is the key of rank k − 1.
    let gpu = common::gpu();
    let n = if common::on_emulator(&gpu) { 12_000 } else { 1 << 22 };
    let data = generate::<i64>(n, Distribution::FewDistinct(1024), 17);
    let device_data = gpu.upload(&data).unwrap();
    for k in [1, 100, n / 2, n] {
        for algorithm in [Algorithm::RadixSelect, Algorithm::SampleSelect] {
            let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
            let top = gpu.top_k(&device_data, k, &options).unwrap();
            let kth = gpu.download(&top.values).unwrap()[k - 1];
            for select in [SelectAlgorithm::Auto, SelectAlgorithm::SampleSelect, SelectAlgorithm::QuickSelect]
            {
                let options = SelectOptions::new(Order::Largest).with_algorithm(select);
                assert_eq!(
                    gpu.select(&device_data, k - 1, &options).map(|s| s.value).unwrap(),
                    kth,
                    "{algorithm:?} {select:?} k={k}"
                );
            }
        }
    }
}

#[test]
fn every_policy_gives_the_same_answer() {
    // Fewer buckets, warp-aggregated atomics, small samples (more levels), and a sample so
    // small that target buckets overflow the candidate buffers (n/32) and levels sample
    // again; the radix finish off, so that the levels run to the base case.
    let gpu = common::gpu();
    let n = if common::on_emulator(&gpu) { 40_000 } else { 4_000_000 };
    let data = generate::<f32>(n, Distribution::Uniform, 23);
    let device_data = gpu.upload(&data).unwrap();
    let sorted = reference::sort_pairs(&data, Order::Smallest);
    let default = SampleSelectPolicy { radix_finish: 0, ..SampleSelectPolicy::for_device(gpu.limits()) };
    for policy in [
        SampleSelectPolicy::for_device(gpu.limits()),
        SampleSelectPolicy { warp_aggregated: true, ..default },
        SampleSelectPolicy { bucket_bits: 4, ..default },
        SampleSelectPolicy { bucket_bits: 1, sample_size: 64, ..default },
        SampleSelectPolicy { sample_size: 256, blocks_per_sm: 1, ..default },
        SampleSelectPolicy { sample_size: 32, ..default },
    ] {
        let options = SelectOptions::new(Order::Smallest).with_algorithm(SelectAlgorithm::SampleSelect);
        for k in [0, n / 7, n / 2, n - 1] {
            let got = gpu.select(&device_data, k, &options.with_policy(policy)).map(|s| s.value).unwrap();
            assert_eq!(got.to_ordered(), oracle(&sorted, k), "{policy:?} k={k}");
        }
    }
}

#[test]
fn bracket_gives_the_levels_answer() {
    // The bracket's first level against the usual levels: ranks at both ends and in the
    // middle, duplicates of the bounds (few distinct values, all equal, outliers), sorted data, and
    // samples so small that the bracket holds more than its buffer (n/8) and the next level
    // samples the data again.
    let gpu = common::gpu();
    let n = if common::on_emulator(&gpu) { 40_000 } else { 4_000_000 };
    let default = SampleSelectPolicy::for_device(gpu.limits());
    assert!(default.bracket, "the measured policy brackets");
    let distributions = [
        Distribution::Uniform,
        Distribution::Ascending,
        Distribution::AllEqual,
        Distribution::FewDistinct(16),
        Distribution::FewDistinct(1024),
        Distribution::Outliers,
    ];
    for (d, distribution) in distributions.into_iter().enumerate() {
        let data = generate::<f32>(n, distribution, 31 + d as u64);
        let device_data = gpu.upload(&data).unwrap();
        for order in [Order::Smallest, Order::Largest] {
            let sorted = reference::sort_pairs(&data, order);
            for policy in [
                default,
                SampleSelectPolicy { bracket: false, ..default },
                SampleSelectPolicy { sample_size: 16, ..default },
                SampleSelectPolicy { sample_size: 256, ..default },
                // The largest bracket sample (8192 keys, the sample kernel's eight a thread)
                // and one of 5000 (most threads' last keys padding); the bracket's keys are
                // selected, not sorted.
                SampleSelectPolicy { large_bracket_sample_from: 0, ..default },
                SampleSelectPolicy { large_bracket_sample_from: 0, large_bracket_sample: 5000, ..default },
                // The radix finish (what the default takes for the level after the bracket
                // here: 2048 < kept ≤ 2^15) off, and forced after a plain first level.
                SampleSelectPolicy { radix_finish: 0, ..default },
                SampleSelectPolicy { bracket: false, sample_size: 16, radix_finish: u32::MAX, ..default },
            ] {
                let options = SelectOptions::new(order).with_policy(policy);
                for k in [0, 1, n / 100, n / 2, n - 2, n - 1] {
                    let context = format!("{distribution:?} {order:?} {policy:?} k={k}");
                    let got = gpu
                        .select(&device_data, k, &options)
                        .map(|s| s.value)
                        .unwrap_or_else(|e| panic!("{context}: {e}"));
                    assert_eq!(got.to_ordered(), oracle(&sorted, k), "{context}");
                }
            }
        }
    }
}

#[test]
fn a_sample_drawn_by_many_blocks_is_the_one_block_draws() {
    // From the policy's `spread_sample_from` keys on, the first level's sample is drawn by
    // 32 blocks and the last of them to finish works on it: the same sample, so approximate
    // selection (whose answer is a sample key) answers alike with as many passes, and
    // top-k's unsorted output comes in the same order (its levels keep input order). Exact
    // selection is checked against the oracle only: its later levels sample candidates
    // that its gather left in no fixed order, so its levels may differ from run to run on a
    // GPU. Brackets of both sizes, the plain first level, small samples (most blocks draw
    // nothing), QuickSelect, and bucket select (whose equal widths draw nothing).
    let gpu = common::gpu();
    let n = if common::on_emulator(&gpu) { 40_000 } else { 4_000_000 };
    let default = SampleSelectPolicy::for_device(gpu.limits());
    let one_block =
        |policy: SampleSelectPolicy| SampleSelectPolicy { spread_sample_from: u64::MAX, ..policy };
    let spread = |policy: SampleSelectPolicy| SampleSelectPolicy { spread_sample_from: 0, ..policy };
    let small_sample = SampleSelectPolicy { sample_size: 20, ..default };
    let selections = [
        (SelectAlgorithm::SampleSelect, default),
        (SelectAlgorithm::SampleSelect, SampleSelectPolicy { bracket: false, ..default }),
        (SelectAlgorithm::SampleSelect, SampleSelectPolicy { large_bracket_sample_from: 0, ..default }),
        (SelectAlgorithm::SampleSelect, small_sample),
        (SelectAlgorithm::QuickSelect, SampleSelectPolicy::quick_select()),
        (SelectAlgorithm::Approximate { buckets: 256 }, default),
        (SelectAlgorithm::Approximate { buckets: 16 }, default),
        (SelectAlgorithm::Approximate { buckets: 64 }, small_sample),
    ];
    let top_ks = [
        (Algorithm::SampleSelect, 1, default),
        (Algorithm::SampleSelect, n / 1024, SampleSelectPolicy { large_bracket_sample_from: 0, ..default }),
        (Algorithm::SampleSelect, n / 10, default),
        (Algorithm::BucketSelect, n / 10, default),
    ];
    for (d, distribution) in [Distribution::Uniform, Distribution::FewDistinct(16), Distribution::Ascending]
        .into_iter()
        .enumerate()
    {
        let data = generate::<f32>(n, distribution, 61 + d as u64);
        let device_data = gpu.upload(&data).unwrap();
        for order in [Order::Smallest, Order::Largest] {
            let sorted = reference::sort_pairs(&data, order);
            for (algorithm, policy) in selections {
                for k in [0, n / 100, n / 2, n - 1] {
                    let context = format!("{distribution:?} {order:?} {algorithm:?} {policy:?} k={k}");
                    let run = |policy| {
                        let options = SelectOptions::new(order).with_algorithm(algorithm).with_policy(policy);
                        gpu.select(&device_data, k, &options).unwrap_or_else(|e| panic!("{context}: {e}"))
                    };
                    let (alone, spread) = (run(one_block(policy)), run(spread(policy)));
                    if matches!(algorithm, SelectAlgorithm::Approximate { .. }) {
                        assert_eq!(
                            (spread.value.to_ordered(), spread.rank, spread.passes),
                            (alone.value.to_ordered(), alone.rank, alone.passes),
                            "{context}"
                        );
                    }
                    assert_eq!(spread.value.to_ordered(), oracle(&sorted, spread.rank as usize), "{context}");
                    assert_eq!(alone.value.to_ordered(), oracle(&sorted, alone.rank as usize), "{context}");
                }
            }
            for (algorithm, k, policy) in top_ks {
                let run = |policy| {
                    let options = TopKOptions::new(order)
                        .with_algorithm(algorithm)
                        .with_policy(policy)
                        .with_sorted(false);
                    let top = gpu.top_k(&device_data, k, &options).unwrap();
                    (gpu.download(&top.values).unwrap(), gpu.download(&top.indices).unwrap())
                };
                let ((alone_keys, alone_indices), (keys, indices)) =
                    (run(one_block(policy)), run(spread(policy)));
                let context = format!("{distribution:?} {order:?} top-k {algorithm:?} k={k}");
                assert_eq!(indices, alone_indices, "{context}");
                let bits = |keys: &[f32]| keys.iter().map(|key| key.to_ordered()).collect::<Vec<_>>();
                assert_eq!(bits(&keys), bits(&alone_keys), "{context}");
                let mut wanted = sorted[..k].iter().map(|&(_, index)| index).collect::<Vec<_>>();
                let mut got = indices;
                wanted.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, wanted, "{context}: the top k's indices");
            }
        }
    }
}

#[test]
fn the_largest_bracket_sample_selects_every_key_type() {
    // The bracket's sample of 8192 keys (eight a thread of the sample kernel, a kernel of
    // its own per key type; and 3001, most threads' last keys padding) for 64-, 32- and 16-bit keys,
    // spread and repeated: taken for
    // the middle ranks (n/3, n/2); the end ranks keep the levels' sample.
    fn check<K: TestKey>(gpu: &Gpu, n: usize) {
        let default = SampleSelectPolicy::for_device(gpu.limits());
        let large = SampleSelectPolicy { large_bracket_sample_from: 0, ..default };
        for (d, distribution) in
            [Distribution::Uniform, Distribution::FewDistinct(1024)].into_iter().enumerate()
        {
            let data = generate::<K>(n, distribution, 61 + d as u64);
            let device_data = gpu.upload(&data).unwrap();
            for order in [Order::Smallest, Order::Largest] {
                let sorted = reference::sort_pairs(&data, order);
                let options = SelectOptions::new(order).with_policy(large);
                let odd = SelectOptions::new(order)
                    .with_policy(SampleSelectPolicy { large_bracket_sample: 3001, ..large });
                for k in [0, n / 3, n / 2, n - 1] {
                    let context = format!(
                        "{} {distribution:?} {order:?} k={k} sample 3001",
                        std::any::type_name::<K>()
                    );
                    let got = gpu.select(&device_data, k, &odd).unwrap_or_else(|e| panic!("{context}: {e}"));
                    assert_eq!(got.value.to_ordered(), oracle(&sorted, k), "{context}");
                }
                for k in [0, n / 3, n / 2, n - 1] {
                    let context = format!("{} {distribution:?} {order:?} k={k}", std::any::type_name::<K>());
                    let got =
                        gpu.select(&device_data, k, &options).unwrap_or_else(|e| panic!("{context}: {e}"));
                    assert_eq!(got.value.to_ordered(), oracle(&sorted, k), "{context}");
                    if k == n / 2 && d == 0 && size_of::<K>() >= 4 {
                        // The larger sample's bracket holds about half the keys: a median of
                        // spread keys ends in fewer levels than with the levels' 2048.
                        // (The radix finish off: it would end both at the level after the
                        // bracket.)
                        let levels_sample = SampleSelectPolicy {
                            large_bracket_sample_from: u64::MAX,
                            radix_finish: 0,
                            ..default
                        };
                        let before =
                            gpu.select(&device_data, k, &options.with_policy(levels_sample)).unwrap();
                        assert_eq!(before.value.to_ordered(), oracle(&sorted, k), "{context}");
                        assert!(
                            got.passes < before.passes,
                            "{context}: {} passes, {}",
                            got.passes,
                            before.passes
                        );
                    }
                }
            }
        }
    }
    // 40 000 keys on either backend: the larger sample's bracket (4.4 % of a median's keys)
    // then fits the base case's sort where the levels' (8.8 %) takes one more level.
    let gpu = common::gpu();
    let n = 40_000;
    check::<f64>(&gpu, n);
    check::<u64>(&gpu, n);
    check::<i32>(&gpu, n);
    check::<half::bf16>(&gpu, n);
}

#[test]
fn approximate_selection_reports_its_exact_rank() {
    let gpu = common::gpu();
    let n = if common::on_emulator(&gpu) { 20_000 } else { 1 << 24 };
    for (d, distribution) in [
        Distribution::Uniform,
        Distribution::FewDistinct(16),
        Distribution::AllEqual,
        Distribution::Ascending,
    ]
    .into_iter()
    .enumerate()
    {
        let data = generate::<f32>(n, distribution, 31 + d as u64);
        let device_data = gpu.upload(&data).unwrap();
        for order in [Order::Smallest, Order::Largest] {
            let sorted = reference::sort_pairs(&data, order);
            for buckets in [2, 16, 256, 1024] {
                for k in ranks(&gpu, n, buckets as u64) {
                    let context = format!("{distribution:?} {order:?} buckets={buckets} k={k}");
                    let approx = gpu
                        .select(&device_data, k, &approximate(buckets, &SelectOptions::new(order)))
                        .unwrap_or_else(|e| panic!("{context}: {e}"));
                    // The value is an input, and the rank it reports is exact.
                    assert_eq!(approx.value.to_ordered(), oracle(&sorted, approx.rank as usize), "{context}");
                    // Splitters are about n / buckets apart; the sample's noise allows a few
                    // times that, more at the edges (the first and last buckets).
                    let bound = 8 * n / buckets;
                    assert!(approx.error(k as u64) <= bound as u64, "{context}: {approx:?}");
                    if buckets >= 64
                        && matches!(distribution, Distribution::AllEqual | Distribution::FewDistinct(16))
                    {
                        // Every value is sampled and has an equality bucket: exact.
                        assert_eq!(approx.error(k as u64), 0, "{context}: {approx:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn window_count_gives_the_full_counts_answer() {
    // The window count answers only when it proves the full count's answer; a small
    // sample makes its window miss often, so both of its outcomes are exercised.
    let gpu = common::gpu();
    let n = if common::on_emulator(&gpu) { 30_000 } else { 1 << 22 };
    let default = SampleSelectPolicy::for_device(gpu.limits());
    let mut passes = [0u32; 2];
    for (d, distribution) in [Distribution::Uniform, Distribution::FewDistinct(128), Distribution::Ascending]
        .into_iter()
        .enumerate()
    {
        let data = generate::<f32>(n, distribution, 53 + d as u64);
        let device_data = gpu.upload(&data).unwrap();
        for (buckets, sample_size) in [(128, 2048), (1024, 2048), (1024, 128), (512, 16)] {
            for k in ranks(&gpu, n, buckets as u64 + sample_size as u64) {
                let answer = |window_count| {
                    let policy = SampleSelectPolicy { sample_size, window_count, ..default };
                    let options = SelectOptions::default().with_policy(policy);
                    gpu.select(&device_data, k, &approximate(buckets, &options)).unwrap()
                };
                let (windowed, counted) = (answer(true), answer(false));
                let case = format!("{distribution:?} buckets={buckets} sample={sample_size} k={k}");
                assert_eq!((windowed.value, windowed.rank), (counted.value, counted.rank), "{case}");
                assert_eq!(counted.passes, 1, "{case}");
                passes[windowed.passes as usize - 1] += 1;
                if matches!(distribution, Distribution::Uniform) && sample_size == 2048 && k == n / 2 {
                    // The window of a good sample holds the median's answer (at the ends it
                    // cannot prove it: no splitter beyond it bounds the rest).
                    assert_eq!(windowed.passes, 1, "{case}");
                }
            }
        }
    }
    // The window answered (its last block weighed it) and missed (the full count ran).
    assert!(passes[0] > 0 && passes[1] > 0, "window answered / missed: {passes:?}");
}

#[test]
fn approximate_selection_is_exact_on_small_inputs() {
    // At most 2048 keys: the sample is the whole input, sorted.
    let gpu = common::gpu();
    let data = generate::<u32>(2048, Distribution::Uniform, 41);
    let device_data = gpu.upload(&data).unwrap();
    let sorted = reference::sort_pairs(&data, Order::Smallest);
    for k in [0, 1, 1000, 2047] {
        let approx = gpu.select(&device_data, k, &approximate(64, &SelectOptions::default())).unwrap();
        assert_eq!((approx.value.to_ordered(), approx.rank), (oracle(&sorted, k), k as u64), "k={k}");
    }
}

#[test]
fn workspace_is_sized_checked_and_reused() {
    let gpu = common::gpu();
    let data = generate::<u64>(10_000, Distribution::Uniform, 43);
    let device_data = gpu.upload(&data).unwrap();
    let options = SelectOptions::default();
    let plan = gpu.plan_select::<u64>(data.len(), &options).unwrap();
    let bytes = plan.workspace_bytes();
    // One byte of oracle per key, two buffers of n/32 keys (at least 2048), a few KB.
    assert!(bytes >= data.len() + 2 * 2048 * 8, "{bytes}");
    assert!(bytes <= data.len() + 2 * 2048 * 8 + 64 * 1024, "{bytes}");
    let sorted = reference::sort_pairs(&data, Order::Smallest);
    let mut workspace = gpu.alloc_zeroed::<u8>(bytes).unwrap();
    for k in [5, 9_999, 0] {
        let got = gpu.select_into(&plan, &device_data, k, &mut workspace).unwrap();
        assert_eq!((got.value.to_ordered(), got.rank), (oracle(&sorted, k), k as u64), "k={k}");
    }
    let mut small = gpu.alloc_zeroed::<u8>(bytes - 1).unwrap();
    assert!(matches!(
        gpu.select_into(&plan, &device_data, 5, &mut small),
        Err(Error::WorkspaceTooSmall { .. })
    ));
    // A plan runs on the number of keys it was made for.
    assert!(matches!(
        gpu.select_into(&plan, device_data.slice(1..), 5, &mut workspace),
        Err(Error::LengthMismatch { .. })
    ));

    // Approximate selection's workspace: no oracles or buffers, reused across ranks (the
    // runs before leave their totals in it) with exact ranks and the answers of fresh
    // workspaces (8-byte keys: the window pass loads them two to a vector).
    let buckets = 1024;
    let plan = gpu.plan_select::<u64>(data.len(), &approximate(buckets, &options)).unwrap();
    let bytes = plan.workspace_bytes();
    assert!(bytes < 64 * 1024, "{bytes}");
    let mut workspace = gpu.alloc_zeroed::<u8>(bytes).unwrap();
    for k in [5, 9_999, 0, 5_000, 5_001] {
        let reused = gpu.select_into(&plan, &device_data, k, &mut workspace).unwrap();
        assert_eq!(reused.value.to_ordered(), oracle(&sorted, reused.rank as usize), "k={k}");
        assert_eq!(reused, gpu.select(&device_data, k, &approximate(buckets, &options)).unwrap(), "k={k}");
    }
    let mut small = gpu.alloc_zeroed::<u8>(bytes - 1).unwrap();
    assert!(matches!(
        gpu.select_into(&plan, &device_data, 5, &mut small),
        Err(Error::WorkspaceTooSmall { .. })
    ));
}

#[test]
fn bad_input_gives_clear_errors() {
    let gpu = common::gpu();
    let empty = gpu.upload::<f32>(&[]).unwrap();
    assert!(matches!(gpu.select(&empty, 0, &SelectOptions::default()), Err(Error::EmptyInput)));
    assert!(matches!(
        gpu.select(&empty, 0, &approximate(16, &SelectOptions::default())),
        Err(Error::EmptyInput)
    ));
    let data = gpu.upload(&[1.0f32, 2.0, 3.0]).unwrap();
    assert!(matches!(
        gpu.select(&data, 3, &SelectOptions::default()),
        Err(Error::KOutOfRange { k: 3, min: 0, max: 2, .. })
    ));
    for buckets in [0, 1, 3, 2048] {
        assert!(
            matches!(
                gpu.select(&data, 1, &approximate(buckets, &SelectOptions::default())),
                Err(Error::InvalidArgument { .. })
            ),
            "{buckets}"
        );
    }
    let default = SampleSelectPolicy::for_device(gpu.limits());
    for policy in [
        SampleSelectPolicy { bucket_bits: 0, ..default },
        SampleSelectPolicy { bucket_bits: 9, ..default },
        SampleSelectPolicy { sample_size: 1, ..default },
        SampleSelectPolicy { sample_size: 4096, ..default },
        SampleSelectPolicy { large_bracket_sample: 1, ..default },
        SampleSelectPolicy { large_bracket_sample: 8193, ..default },
        SampleSelectPolicy { blocks_per_sm: 0, ..default },
    ] {
        let options = SelectOptions::default().with_policy(policy);
        assert!(matches!(gpu.select(&data, 1, &options), Err(Error::InvalidArgument { .. })), "{policy:?}");
    }
    let quick = SelectOptions::default()
        .with_algorithm(SelectAlgorithm::QuickSelect)
        .with_policy(SampleSelectPolicy { bucket_bits: 1, ..default });
    assert!(matches!(gpu.select(&data, 1, &quick), Err(Error::InvalidArgument { .. })));
}

#[test]
fn nan_and_signed_zero_follow_the_total_order() {
    let gpu = common::gpu();
    let data = gpu.upload(&[f32::NAN, 1.0, -0.0, 0.0, f32::INFINITY, -f32::NAN]).unwrap();
    let exact = |k| gpu.select(&data, k, &SelectOptions::default()).map(|s| s.value).unwrap().to_bits();
    assert_eq!(exact(0), (-0.0f32).to_bits());
    assert_eq!(exact(1), 0.0f32.to_bits());
    assert_eq!(exact(3), f32::INFINITY.to_bits());
    assert!(gpu.select(&data, 4, &SelectOptions::default()).map(|s| s.value).unwrap().is_nan());
    let largest = SelectOptions::new(Order::Largest);
    assert!(gpu.select(&data, 1, &largest).map(|s| s.value).unwrap().is_nan());
    assert_eq!(gpu.select(&data, 2, &largest).map(|s| s.value).unwrap(), f32::INFINITY);
}

/// The sample positions of SampleSelect's kernel (`gpu_select_kernels::select::sample`,
/// private there): splitmix64 of the seed, level, attempt and index. Copied here to build
/// the input that defeats them.
fn sample_position(seed: u64, level: u32, attempt: u32, i: u32, len: u64) -> u64 {
    let mut z = seed
        .wrapping_add((level as u64) << 40 | (attempt as u64) << 20 | i as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % len
}

/// Inputs that make every sample miss (keys set to −inf where SampleSelect's fixed seed
/// samples, level after level) and policies that cannot split (two samples for 256
/// buckets): every selection and SampleSelect top-k still finishes, with the right answer.
#[test]
fn sampling_that_always_misses_still_finishes() {
    let gpu = gpu();
    let n = 1 << 20;
    let mut random = SplitMix(3);
    let mut keys: Vec<f32> = (0..n).map(|_| (random.next() % 1_000_000) as f32).collect();
    let seed = 0x5a3c_71e9_0b2d_4f86; // the library's SAMPLE_SEED
    for level in 0..64u32 {
        for attempt in [0, level.saturating_sub(1), level] {
            for i in 0..2048 {
                keys[sample_position(seed, level, attempt, i, n as u64) as usize] = f32::NEG_INFINITY;
            }
        }
    }
    let ranks = [n / 2, n - 1 - n / 100];
    check(&gpu, &keys, &ranks, "samples all -inf");
    let spread: Vec<f32> = (0..100_000).map(|_| (random.next() % 1_000_000) as f32).collect();
    let useless = SelectOptions::default().with_policy(SampleSelectPolicy {
        sample_size: 2,
        bracket: false,
        ..SampleSelectPolicy::for_device(gpu.limits())
    });
    let mut sorted = spread.clone();
    sorted.sort_by(f32::total_cmp);
    let median = gpu.select_host(&spread, 50_000, &useless).expect("a policy of two samples still finishes");
    assert_eq!(median.value, sorted[50_000]);
    // Top-k by SampleSelect on the same inputs.
    for (name, data) in [("samples all -inf", &keys), ("spread", &spread)] {
        let k = data.len() / 3;
        let options = TopKOptions::new(Order::Smallest).with_algorithm(Algorithm::SampleSelect);
        let top = gpu.top_k_host(data, 1, k, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut expected = data.to_vec();
        expected.sort_by(f32::total_cmp);
        assert_eq!(top.0[..], expected[..k], "{name}");
    }
}

/// The window pass's last block weighs the window with the other blocks' totals (a ticket:
/// release and acquire fences around a global atomic). Many approximate selections (10^4 on
/// a GPU), each against the full count's answer: a block that saw stale totals would answer
/// differently.
#[test]
fn window_answers_hold_under_repetition() {
    let gpu = common::gpu();
    let (n, repetitions) = if common::on_emulator(&gpu) { (30_000, 200) } else { (1 << 22, 10_000) };
    let data = generate::<f32>(n, Distribution::Uniform, 71);
    let device_data = gpu.upload(&data).unwrap();
    let default = SampleSelectPolicy::for_device(gpu.limits());
    let options = |window_count| {
        let policy = SampleSelectPolicy { window_count, ..default };
        approximate(1024, &SelectOptions::default().with_policy(policy))
    };
    let mut random = SplitMix(72);
    let ranks: Vec<usize> = (0..64).map(|_| (random.next() % n as u64) as usize).collect();
    let counted: Vec<_> = ranks
        .iter()
        .map(|&k| gpu.select(&device_data, k, &options(false)).map(|s| (s.value, s.rank)).unwrap())
        .collect();
    let windowed = options(true);
    let mut answered_by_window = 0;
    for i in 0..repetitions {
        let slot = i % ranks.len();
        let found = gpu.select(&device_data, ranks[slot], &windowed).unwrap();
        assert_eq!((found.value, found.rank), counted[slot], "repetition {i}, k = {}", ranks[slot]);
        answered_by_window += (found.passes == 1) as usize;
    }
    assert!(
        answered_by_window > repetitions / 2,
        "the window answered {answered_by_window} of {repetitions}"
    );
}
