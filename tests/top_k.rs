//! Top-k against the CPU oracle: every key type, both orders, edge sizes and k, the
//! distributions of design.md §4, every algorithm cross-checked, and bad input.
//!
//! Ties are deterministic (equal keys: lower index first), so values *and* indices must
//! equal the oracle's exactly.

mod common;

use common::{DISTRIBUTIONS, Distribution, TestKey, generate};
use gpu_select::{
    Algorithm, Error, Gpu, InputFilter, Key, KeyTransform, Keys, Order, PADDING_INDEX, TopKOptions, reference,
};

/// A filter and a transform to fuse into a top-k ([`Keys::with_filter`],
/// [`Keys::with_transform`]).
#[derive(Clone, Copy, Default)]
struct Fusion<'a, K> {
    filter: InputFilter<'a, K>,
    transform: KeyTransform<K>,
}

impl<'a, K> Fusion<'a, K> {
    fn with_filter(self, filter: InputFilter<'a, K>) -> Self {
        Self { filter, ..self }
    }

    fn with_transform(self, transform: KeyTransform<K>) -> Self {
        Self { transform, ..self }
    }
}

/// `data` with `fusion` fused in.
fn fused<'a, K: gpu_select::SelectKey>(
    data: &'a gpu_select::DeviceBuffer<K>,
    fusion: &Fusion<'a, K>,
) -> Keys<'a, K> {
    Keys::new(data).with_filter(fusion.filter).with_transform(fusion.transform)
}

/// The oracle check of `common`, its indices unused here.
fn check<K: TestKey>(gpu: &Gpu, data: &[K], k: usize, options: TopKOptions, context: &str) {
    common::check_top_k(gpu, data, k, options, context);
}

/// (n, k) pairs at the edges: one key, warp and tile boundaries, k at 1, n − 1, n and at
/// the register-run sizes ± 1.
fn shapes(gpu: &Gpu) -> Vec<(usize, usize)> {
    let mut shapes = vec![(1, 1), (31, 31), (33, 32), (2048, 2048), (2049, 33), (4100, 256), (20_000, 40)];
    if !common::on_emulator(gpu) {
        shapes.extend([
            (32, 1),
            (2047, 2046),
            (65_537, 1),
            (65_537, 64),
            (65_537, 255),
            (1 << 20, 129),
            (1 << 20, 256),
            (3_000_001, 100),
        ]);
    }
    shapes
}

/// The whole matrix, for every key type, on the emulator and on a GPU (where the shapes
/// are larger).
fn check_all<K: TestKey>() {
    let gpu = common::gpu();
    for (n, k) in shapes(&gpu) {
        for (d, &distribution) in DISTRIBUTIONS.iter().enumerate() {
            let data = generate::<K>(n, distribution, (n * 7 + d) as u64);
            for order in [Order::Smallest, Order::Largest] {
                let context = format!("{} n={n} k={k} {distribution:?} {order:?}", K::NAME);
                check(&gpu, &data, k, TopKOptions::new(order), &format!("{context} auto"));
                let radix = TopKOptions::new(order).with_algorithm(Algorithm::RadixSelect);
                check(&gpu, &data, k, radix.with_sorted(false), &format!("{context} radix unsorted"));
                check(&gpu, &data, k, radix, &format!("{context} radix sorted"));
                let sample = TopKOptions::new(order).with_algorithm(Algorithm::SampleSelect);
                check(&gpu, &data, k, sample.with_sorted(false), &format!("{context} sample unsorted"));
                check(&gpu, &data, k, sample, &format!("{context} sample sorted"));
                if k <= 512 {
                    let heap = TopKOptions::new(order).with_algorithm(Algorithm::PerThreadHeap);
                    check(&gpu, &data, k, heap, &format!("{context} per-thread heap"));
                }
                let sort = TopKOptions::new(order).with_algorithm(Algorithm::SortAndChoose);
                check(&gpu, &data, k, sort, &format!("{context} sort & choose"));
                let bucket = TopKOptions::new(order).with_algorithm(Algorithm::BucketSelect);
                check(&gpu, &data, k, bucket.with_sorted(false), &format!("{context} bucket unsorted"));
                check(&gpu, &data, k, bucket, &format!("{context} bucket sorted"));
                for sbp in [Algorithm::SbpRadix, Algorithm::SbpTree] {
                    let options = TopKOptions::new(order).with_algorithm(sbp);
                    check(&gpu, &data, k, options.with_sorted(false), &format!("{context} {sbp:?} unsorted"));
                    check(&gpu, &data, k, options, &format!("{context} {sbp:?} sorted"));
                }
            }
        }
    }
}

#[test]
fn top_k_f32() {
    check_all::<f32>();
}

#[test]
fn top_k_f64() {
    check_all::<f64>();
}

#[test]
fn top_k_i32() {
    check_all::<i32>();
}

#[test]
fn top_k_u32() {
    check_all::<u32>();
}

#[test]
fn top_k_i64() {
    check_all::<i64>();
}

#[test]
fn top_k_u64() {
    check_all::<u64>();
}

#[test]
fn top_k_f16() {
    check_all::<half::f16>();
}

#[test]
fn top_k_bf16() {
    check_all::<half::bf16>();
}

/// Small arrays that `Auto` takes as one row of the rows' radix kernel (from 2^14 keys: to
/// 2^17 for every `k`; 32-bit keys to 2^22 for 128 ≤ k ≤ 1024 and to 2^24 for larger `k`,
/// 16-bit keys to 2^21 and 2^22; 2^24 for `k ≤ 32`; 64-bit keys less: `one_row_pays`), and
/// arrays just beyond: the oracle's keys and indices, sorted, and the caller's indices
/// reported in place of positions.
fn small_arrays_as_one_row<K: TestKey>(gpu: &Gpu, sizes: &[usize]) {
    for &n in sizes {
        for k in [1, 16, 128, 1000, 2048] {
            for (d, distribution) in
                [Distribution::Uniform, Distribution::FewDistinct(7), Distribution::Specials]
                    .into_iter()
                    .enumerate()
            {
                let data = generate::<K>(n, distribution, (n + k + d) as u64);
                for order in [Order::Smallest, Order::Largest] {
                    let context = format!("{} n={n} k={k} {distribution:?} {order:?} auto", K::NAME);
                    let options = TopKOptions::new(order).with_sorted(d == 0);
                    let positions = common::check_top_k(gpu, &data, k, options, &context);
                    let device_data = gpu.upload(&data).unwrap();
                    let indices: Vec<u64> = (0..n as u64).map(|i| 10 * i + 3).collect();
                    let device_indices = gpu.upload(&indices).unwrap();
                    let keys = Keys::new(&device_data).with_indices(&device_indices);
                    let top = gpu.top_k(keys, k, &options).unwrap();
                    let reported = gpu.download(&top.indices).unwrap();
                    let expected: Vec<u64> = positions.iter().map(|&p| 10 * p + 3).collect();
                    assert_eq!(reported, expected, "{context} with the caller's indices");
                }
            }
        }
    }
}

#[test]
fn small_arrays_taken_as_one_row() {
    let gpu = common::gpu();
    if common::on_emulator(&gpu) {
        small_arrays_as_one_row::<f32>(&gpu, &[16_384, 20_001]);
        small_arrays_as_one_row::<half::bf16>(&gpu, &[16_384]);
        return;
    }
    small_arrays_as_one_row::<f32>(
        &gpu,
        &[16_384, 65_537, 131_072, 300_000, 1 << 20, 1 << 22, (1 << 22) + 5, (3 << 22) + 1],
    );
    small_arrays_as_one_row::<half::bf16>(&gpu, &[65_537, 524_288, 1 << 20]);
    small_arrays_as_one_row::<f64>(&gpu, &[65_537, 300_000]);
    small_arrays_as_one_row::<i32>(&gpu, &[100_000]);
}

#[test]
fn bitonic_for_every_queue_size_and_small_inputs() {
    // Each kernel instantiation (k ≤ 32, 64, 128, 256 in registers; 512, 1024 in shared
    // memory) on inputs the block sort would otherwise take, and across tile boundaries.
    let gpu = common::gpu();
    for (n, k) in [
        (1, 1),
        (40, 33),
        (300, 64),
        (300, 65),
        (2049, 129),
        (3000, 256),
        (3000, 257),
        (5000, 512),
        (9000, 1000),
        (1024, 1024),
    ] {
        for &distribution in &[Distribution::Uniform, Distribution::Specials] {
            let data = generate::<f32>(n, distribution, n as u64);
            for order in [Order::Smallest, Order::Largest] {
                let options = TopKOptions::new(order).with_algorithm(Algorithm::Bitonic);
                check(&gpu, &data, k, options, &format!("bitonic n={n} k={k} {distribution:?} {order:?}"));
            }
        }
    }
}

#[test]
fn per_thread_heaps_for_every_reduction_kernel_and_64_bit_keys() {
    // k across the reduction's kernels (≤ 32, 64, 256 in registers; 512 in shared memory),
    // heaps of one slot and of 512, threads that read fewer than k inputs, and 64-bit keys
    // (the widest heaps: 12 bytes a slot).
    let gpu = common::gpu();
    for (n, k) in [(1, 1), (40, 33), (300, 64), (3000, 1), (3000, 256), (9000, 257), (5000, 512)] {
        for &distribution in &[Distribution::Uniform, Distribution::Specials, Distribution::AllEqual] {
            for order in [Order::Smallest, Order::Largest] {
                let options = TopKOptions::new(order).with_algorithm(Algorithm::PerThreadHeap);
                let context = format!("heap n={n} k={k} {distribution:?} {order:?}");
                check(
                    &gpu,
                    &generate::<f32>(n, distribution, n as u64),
                    k,
                    options,
                    &format!("{context} f32"),
                );
                check(
                    &gpu,
                    &generate::<u64>(n, distribution, n as u64),
                    k,
                    options,
                    &format!("{context} u64"),
                );
            }
        }
    }
}

/// One `Gpu` shared by threads: it must be `Send + Sync` by design, not by accident.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Gpu>();
};

#[test]
fn one_kernel_launched_from_two_threads_with_different_shared_memory() {
    // The per-thread heap's kernel at k = 32 and at k = 512 asks for different amounts of
    // dynamic shared memory (both above the 48 KB default): each launch must find its
    // kernel allowed what it asks, whatever the other thread launched just before.
    let gpu = common::gpu();
    let rounds = if common::on_emulator(&gpu) { 2 } else { 200 };
    std::thread::scope(|scope| {
        for k in [32usize, 512] {
            let gpu = gpu.clone();
            scope.spawn(move || {
                let options = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::PerThreadHeap);
                for round in 0..rounds {
                    let data = generate::<f32>(5000, Distribution::Uniform, (k + round) as u64);
                    check(&gpu, &data, k, options, &format!("heap k={k} round {round}"));
                }
            });
        }
    });
}

#[test]
fn radix_and_sample_select_take_any_k() {
    // k past the bitonic limit and up to n, unsorted; radix's buffers (n/32) are exceeded
    // at some levels and not at others; few distinct values end levels early (equality
    // buckets, for SampleSelect).
    let gpu = common::gpu();
    let n = if common::on_emulator(&gpu) { 30_000 } else { 3_000_000 };
    for (d, &distribution) in
        [Distribution::Uniform, Distribution::FewDistinct(16), Distribution::Ascending].iter().enumerate()
    {
        let data = generate::<f32>(n, distribution, 91 + d as u64);
        for k in [257, 2048, n / 3, n - 1, n] {
            for order in [Order::Smallest, Order::Largest] {
                for algorithm in [Algorithm::RadixSelect, Algorithm::SampleSelect] {
                    let options = TopKOptions::new(order).with_algorithm(algorithm);
                    let context = format!("{algorithm:?} n={n} k={k} {distribution:?} {order:?}");
                    check(&gpu, &data, k, options.with_sorted(false), &format!("{context} unsorted"));
                    // Sorted: the block sort's runs of 2048 and 1 to 4 merge passes.
                    if k != n - 1 {
                        check(&gpu, &data, k, options, &format!("{context} sorted"));
                    }
                }
            }
        }
    }
    // Auto takes k > 256 too.
    let data = generate::<u64>(5000, Distribution::Uniform, 3);
    check(&gpu, &data, 300, TopKOptions::new(Order::Largest), "auto k=300");
    check(&gpu, &data, 4000, TopKOptions::new(Order::Largest).with_sorted(false), "auto k=4000");
    check(&gpu, &data, 4097, TopKOptions::new(Order::Smallest), "auto k=4097 sorted");
}

#[test]
fn sample_select_brackets_a_small_k() {
    // SampleSelect's top-k of k ≤ n/64 starts with one read that keeps the keys below a
    // sampled bound, in runs put back in input order: every distribution (ties of the bound
    // end it at once: all-equal, few distinct), both orders, sorted and not, against the
    // usual levels (no bracket), and samples so small that the kept keys overflow the
    // buffer (n/32) and the data is sampled again.
    let gpu = common::gpu();
    // GPU_SELECT_BRACKET_TEST_KEYS: fewer keys, for a run under compute-sanitizer.
    let n = std::env::var("GPU_SELECT_BRACKET_TEST_KEYS").ok().and_then(|keys| keys.parse().ok());
    let n = n.unwrap_or(if common::on_emulator(&gpu) { 40_000 } else { 4_000_000 });
    let default = gpu_select::SampleSelectPolicy::for_device(gpu.limits());
    assert!(default.bracket, "the measured policy brackets");
    let policies = [
        default,
        gpu_select::SampleSelectPolicy { bracket: false, ..default },
        gpu_select::SampleSelectPolicy { sample_size: 16, ..default },
        gpu_select::SampleSelectPolicy { sample_size: 256, blocks_per_sm: 1, ..default },
        // The largest bracket sample: 8192 keys.
        gpu_select::SampleSelectPolicy { large_bracket_sample_from: 0, ..default },
    ];
    // 1024 distinct values: the kept keys repeat across warps, so their order matters.
    let distributions = DISTRIBUTIONS.iter().copied().chain([Distribution::FewDistinct(1024)]);
    for (d, distribution) in distributions.enumerate() {
        let data = generate::<f32>(n, distribution, 41 + d as u64);
        for order in [Order::Smallest, Order::Largest] {
            for (p, policy) in policies.iter().enumerate() {
                for k in [1, 77, n / 1024, n / 64] {
                    let options =
                        TopKOptions::new(order).with_algorithm(Algorithm::SampleSelect).with_policy(*policy);
                    let context = format!("{distribution:?} {order:?} policy {p} k={k}");
                    check(&gpu, &data, k, options, &format!("{context} sorted"));
                    if p == 0 {
                        check(&gpu, &data, k, options.with_sorted(false), &format!("{context} unsorted"));
                    }
                }
            }
        }
    }
    // 16-bit keys: few values, so the bound's ties lie in most warp tiles, which the pass's
    // vote must send the long way (their count and the kept keys' input order).
    for (d, distribution) in [Distribution::Uniform, Distribution::FewDistinct(1024)].into_iter().enumerate()
    {
        let data = generate::<half::bf16>(n, distribution, 51 + d as u64);
        for order in [Order::Smallest, Order::Largest] {
            for (p, policy) in
                [default, gpu_select::SampleSelectPolicy { sample_size: 16, ..default }].iter().enumerate()
            {
                for k in [1, 77, n / 1024, n / 64] {
                    let options =
                        TopKOptions::new(order).with_algorithm(Algorithm::SampleSelect).with_policy(*policy);
                    let context = format!("bf16 {distribution:?} {order:?} policy {p} k={k}");
                    check(&gpu, &data, k, options.with_sorted(false), &format!("{context} unsorted"));
                }
            }
        }
    }
    // Every key has the largest rank (i32::MIN, largest first): the bound is MAX itself.
    let lowest = vec![i32::MIN; n];
    let options = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::SampleSelect);
    check(&gpu, &lowest, n / 100, options, "all i32::MIN, largest first");
    // Ties of the bound spread over every warp, and a bound that is the data's maximum.
    let mut ties = generate::<u32>(n, Distribution::FewDistinct(4), 7);
    ties[n - 1] = u32::MAX;
    for k in [n / 64, 5] {
        check(&gpu, &ties, k, options, &format!("four values and one maximum, k={k}"));
        check(
            &gpu,
            &ties,
            k,
            TopKOptions { order: Order::Smallest, ..options },
            &format!("four values, smallest, k={k}"),
        );
    }
}

#[test]
fn sample_select_bracket_offsets_span_many_warps() {
    // The bracket's choose turns every warp's kept count into an offset (a scan over
    // `blocks · 8` values, each warp of the choose taking batches of 8 chunks of 32): with
    // 489 blocks (3912 warps, a last chunk of 8) the scan runs two batches a warp, and a
    // wrong offset puts kept keys out of input order or over each other.
    let gpu = common::gpu();
    let n = 1_000_001;
    let default = gpu_select::SampleSelectPolicy::for_device(gpu.limits());
    let blocks_per_sm = 1000u32.div_ceil(gpu.limits().multiprocessors);
    let policy = gpu_select::SampleSelectPolicy { blocks_per_sm, ..default };
    for (d, distribution) in [Distribution::Uniform, Distribution::FewDistinct(1024)].into_iter().enumerate()
    {
        let data = generate::<f32>(n, distribution, 61 + d as u64);
        for order in [Order::Smallest, Order::Largest] {
            for k in [1, 1000, n / 64] {
                let options =
                    TopKOptions::new(order).with_algorithm(Algorithm::SampleSelect).with_policy(policy);
                let context = format!("{distribution:?} {order:?} k={k} blocks_per_sm={blocks_per_sm}");
                check(&gpu, &data, k, options.with_sorted(false), &format!("{context} unsorted"));
            }
        }
    }
}

#[test]
fn pruned_passes_agree_with_the_oracle() {
    // Inputs of 512 tiles and more are sampled first: the sample's k-th best bounds the main
    // pass, and blocks tighten it with their own running k-th best. Distributions where
    // the bound prunes almost everything (uniform, ascending) or nothing (all equal, where
    // ties are broken by index) must give the oracle's answer.
    let gpu = common::gpu();
    let n = (1 << 20) + 12_345;
    for (d, &distribution) in
        [Distribution::Uniform, Distribution::Ascending, Distribution::AllEqual].iter().enumerate()
    {
        let data = generate::<f32>(n, distribution, 77 + d as u64);
        for (k, order) in
            [(32, Order::Largest), (100, Order::Smallest), (256, Order::Largest), (1000, Order::Smallest)]
        {
            let options = TopKOptions::new(order).with_algorithm(Algorithm::Bitonic);
            check(&gpu, &data, k, options, &format!("pruned n={n} k={k} {distribution:?} {order:?}"));
        }
    }
}

/// Uniform keys of `n` (seed `seed`) with `shift` added to every key the bitonic top-k
/// samples (the plan of host/src/topk/bitonic.rs).
fn with_sampled_tiles_shifted(n: usize, seed: u64, shift: f32) -> Vec<f32> {
    // The plan's sample (`TileSpread::sample`): one tile per stride of full tiles, its 8
    // warp pieces of 256 inputs spread over the stride an odd number of pieces apart.
    let full_tiles = n / 2048;
    let sample_tiles = full_tiles / 128;
    let stride = full_tiles / sample_tiles;
    let odd_pieces = if stride.is_multiple_of(2) { stride - 1 } else { stride - 2 };
    let (first, step) = (256 * (odd_pieces / 2 + 1), 256 * odd_pieces);
    let mut data = generate::<f32>(n, Distribution::Uniform, seed);
    for tile in 0..sample_tiles {
        for piece in 0..8 {
            let start = first + tile * stride * 2048 + piece * step;
            for key in &mut data[start..start + 256] {
                *key += shift;
            }
        }
    }
    data
}

#[test]
fn a_sample_unlike_the_data_falls_back_to_the_safe_bound() {
    // The bitonic top-k first prunes with a bound tighter than the sample's k-th best; when
    // fewer than k inputs lie inside it, the safe chain must run. Here the sampled inputs
    // (`with_sampled_tiles_shifted`) hold the largest keys, so the tight bound (the
    // sample's 9th best at this size) lets only 9 inputs through: a result without the
    // safe chain would end in padding.
    let gpu = common::gpu();
    let data = with_sampled_tiles_shifted((1 << 20) + 12_345, 5, 10.0);
    for k in [100, 1000] {
        let options = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::Bitonic);
        check(&gpu, &data, k, options, &format!("sample unlike the data, k={k}"));
        check(&gpu, &data, k, options.with_sorted(false), &format!("sample unlike the data, k={k} unsorted"));
    }
}

#[test]
fn a_bound_that_lets_too_many_through_falls_back_to_the_safe_bound() {
    // The tight bound's chain filters the inputs inside it into room for n/64 of them; when
    // more come through, some are lost, so the chain must report padding and the safe chain
    // run. Here the sampled inputs (as in the test above) hold keys below all others (the
    // uniform keys lie in ±1000), so every other input lies inside the sample's 9th best.
    let gpu = common::gpu();
    let data = with_sampled_tiles_shifted((1 << 20) + 12_345, 6, -3000.0);
    for k in [32, 1000] {
        let options = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::Bitonic);
        check(&gpu, &data, k, options, &format!("too many inside the bound, k={k}"));
    }
}

#[test]
fn bucket_select_ends_on_ranges_that_equal_widths_split_badly() {
    // A cluster of tiny distinct keys and a few huge ones: equal widths in value leave the
    // whole cluster in one bucket for many levels, until the buckets split the ordered bits
    // instead (after 16 levels); and keys with no finite width at all (inf, NaN).
    let gpu = common::gpu();
    let n = 20_000;
    let mut tiny: Vec<f64> =
        (0..n).map(|i| (i as f64) * 1e-300 * if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
    for j in 0..5 {
        tiny[j * 3001 + 7] = 1e300 - j as f64 * 1e290;
    }
    let mut subnormal: Vec<f32> = (0..n).map(|i| f32::from_bits(i as u32 * 7 % 9001)).collect();
    subnormal[11] = 3e38;
    subnormal[12_345] = -3e38;
    let mut specials: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    for (j, &value) in
        [f32::INFINITY, f32::NAN, f32::NEG_INFINITY, -f32::NAN, f32::INFINITY].iter().enumerate()
    {
        specials[j * 999] = value;
    }
    for order in [Order::Largest, Order::Smallest] {
        let bucket = TopKOptions::new(order).with_algorithm(Algorithm::BucketSelect);
        for k in [1, 10, 3000, n] {
            check(&gpu, &tiny, k, bucket, &format!("f64 tiny cluster and outliers, k={k} {order:?}"));
            check(&gpu, &subnormal, k, bucket, &format!("f32 subnormals and outliers, k={k} {order:?}"));
            check(&gpu, &specials, k, bucket, &format!("f32 with inf and NaN, k={k} {order:?}"));
        }
    }
}

#[test]
fn algorithms_agree_with_each_other() {
    let gpu = common::gpu();
    for n in [1usize, 100, 2048] {
        let data = generate::<i64>(n, Distribution::FewDistinct(16), 5);
        for k in [1, n.div_ceil(2).min(256), n.min(256)] {
            let results: Vec<_> = [
                Algorithm::Bitonic,
                Algorithm::BlockSort,
                Algorithm::RadixSelect,
                Algorithm::SampleSelect,
                Algorithm::PerThreadHeap,
                Algorithm::SortAndChoose,
                Algorithm::BucketSelect,
                Algorithm::SbpRadix,
                Algorithm::SbpTree,
                Algorithm::Auto,
            ]
            .into_iter()
            .map(|algorithm| {
                let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
                let top = gpu.top_k(&gpu.upload(&data).unwrap(), k, &options).unwrap();
                (gpu.download(&top.values).unwrap(), gpu.download(&top.indices).unwrap())
            })
            .collect();
            assert!(results.windows(2).all(|pair| pair[0] == pair[1]), "n={n} k={k}");
        }
    }
}

#[test]
fn nan_orders_above_infinity_and_negative_zero_below_zero() {
    let gpu = common::gpu();
    let data = [1.0f32, f32::NAN, f32::INFINITY, -0.0, 0.0, f32::NEG_INFINITY, -f32::NAN];
    let (largest, indices) = gpu.top_k_host(&data, 1, 4, &TopKOptions::largest()).unwrap();
    assert!(largest[0].is_nan() && largest[1].is_nan());
    assert_eq!(indices, [1, 6, 2, 0]);
    let (smallest, indices) = gpu.top_k_host(&data, 1, 3, &TopKOptions::smallest()).unwrap();
    assert_eq!(indices, [5, 3, 4]);
    assert_eq!(smallest[1].to_bits(), (-0.0f32).to_bits());
}

#[test]
fn caller_workspace_is_reused_and_checked() {
    let gpu = common::gpu();
    let data = generate::<u32>(5000, Distribution::Uniform, 11);
    let device_data = gpu.upload(&data).unwrap();
    let options = TopKOptions::new(Order::Smallest).with_algorithm(Algorithm::Bitonic);
    let plan = gpu.plan_top_k(&Keys::new(&device_data), 50, &options).unwrap();
    let bytes = plan.workspace_bytes();
    let mut workspace = gpu.alloc_zeroed::<u8>(bytes).unwrap();
    let mut out =
        gpu_select::TopK { values: gpu.alloc_zeroed(50).unwrap(), indices: gpu.alloc_zeroed(50).unwrap() };
    for _ in 0..2 {
        gpu.top_k_into(&plan, &device_data, &mut out, &mut workspace).unwrap();
        let expected: Vec<u64> =
            reference::sort_pairs(&data, Order::Smallest).into_iter().take(50).map(|(_, i)| i).collect();
        assert_eq!(gpu.download(&out.indices).unwrap(), expected);
    }
    if bytes > 0 {
        let mut small = gpu.alloc_zeroed::<u8>(bytes - 1).unwrap();
        let error = gpu.top_k_into(&plan, &device_data, &mut out, &mut small).unwrap_err();
        assert!(matches!(error, Error::WorkspaceTooSmall { .. }), "{error}");
    }
    let mut wrong_out =
        gpu_select::TopK { values: gpu.alloc_zeroed(49).unwrap(), indices: gpu.alloc_zeroed(50).unwrap() };
    assert!(matches!(
        gpu.top_k_into(&plan, &device_data, &mut wrong_out, &mut workspace),
        Err(Error::LengthMismatch { .. })
    ));
    // A plan runs only on the shape it was made for.
    let shorter = device_data.slice(1..);
    assert!(matches!(
        gpu.top_k_into(&plan, &shorter, &mut out, &mut workspace),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn block_sort_path_works_in_the_caller_workspace_alone() {
    let gpu = common::gpu();
    let data = generate::<i32>(1000, Distribution::FewDistinct(16), 12);
    let device_data = gpu.upload(&data).unwrap();
    let options = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::BlockSort);
    let plan = gpu.plan_top_k(&Keys::new(&device_data), 10, &options).unwrap();
    let bytes = plan.workspace_bytes();
    assert!(bytes >= 1000 * (4 + 8), "the workspace holds the sorted keys and indices");
    let mut workspace = gpu.alloc_zeroed::<u8>(bytes).unwrap();
    let mut out =
        gpu_select::TopK { values: gpu.alloc_zeroed(10).unwrap(), indices: gpu.alloc_zeroed(10).unwrap() };
    gpu.top_k_into(&plan, &device_data, &mut out, &mut workspace).unwrap();
    let expected: Vec<u64> =
        reference::sort_pairs(&data, Order::Largest).into_iter().take(10).map(|(_, i)| i).collect();
    assert_eq!(gpu.download(&out.indices).unwrap(), expected);
    let mut small = gpu.alloc_zeroed::<u8>(bytes - 1).unwrap();
    assert!(matches!(
        gpu.top_k_into(&plan, &device_data, &mut out, &mut small),
        Err(Error::WorkspaceTooSmall { .. })
    ));
}

#[test]
fn bad_input_gives_clear_errors() {
    let gpu = common::gpu();
    let data = gpu.upload(&[3u32, 1, 2]).unwrap();
    let message = |result: gpu_select::Result<gpu_select::TopK<u32>>| result.unwrap_err().to_string();
    assert!(message(gpu.top_k(&data, 0, &TopKOptions::new(Order::Largest))).contains("k = 0"));
    assert!(message(gpu.top_k(&data, 4, &TopKOptions::new(Order::Largest))).contains("the input has 3 keys"));
    assert!(matches!(
        gpu.top_k(&data, 4, &TopKOptions::new(Order::Largest)),
        Err(Error::KOutOfRange { k: 4, min: 1, max: 3, .. })
    ));
    assert!(matches!(
        gpu.top_k(&data, 0, &TopKOptions::new(Order::Largest)),
        Err(Error::KOutOfRange { k: 0, .. })
    ));
    assert_eq!(
        gpu.top_k(&gpu.upload::<u32>(&[]).unwrap(), 1, &TopKOptions::new(Order::Largest)).unwrap_err(),
        Error::EmptyInput
    );
    let big = gpu.alloc_zeroed::<u32>(5000).unwrap();
    let bitonic = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::Bitonic);
    let error = message(gpu.top_k(&big, 1025, &bitonic));
    assert!(error.contains("k ≤ 1024"), "{error}");
    let options = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::BlockSort);
    assert!(message(gpu.top_k(&big, 3, &options)).contains("at most 2048"));
    let heap = TopKOptions::new(Order::Largest).with_algorithm(Algorithm::PerThreadHeap);
    let error = message(gpu.top_k(&big, 513, &heap));
    assert!(error.contains("k ≤ 512"), "{error}");
}

/// The fused top-k of `data` against the oracle: the admitted inputs (`admits(index, key)`)
/// ranked by `rank(key)`, their stored keys and indices, padded as documented when fewer
/// than `k` are admitted.
fn check_fused<K: TestKey>(
    gpu: &Gpu,
    data: &[K],
    (k, order): (usize, Order),
    fusion: &Fusion<'_, K>,
    admits: impl Fn(usize, K) -> bool,
    rank: impl Fn(K) -> K,
    context: &str,
) {
    let device_data = gpu.upload(data).unwrap();
    let options = TopKOptions::new(order);
    let top =
        gpu.top_k(fused(&device_data, fusion), k, &options).unwrap_or_else(|e| panic!("{context}: {e}"));
    let (values, indices) = (gpu.download(&top.values).unwrap(), gpu.download(&top.indices).unwrap());
    let admitted: Vec<usize> = (0..data.len()).filter(|&i| admits(i, data[i])).collect();
    let ranked: Vec<K> = admitted.iter().map(|&i| rank(data[i])).collect();
    let mut expected: Vec<(u64, u64)> = reference::sort_pairs(&ranked, order)
        .into_iter()
        .take(k)
        .map(|(_, local)| {
            let index = admitted[local as usize];
            (data[index].exact(), index as u64)
        })
        .collect();
    let padding = if order == Order::Largest { K::LOWEST } else { K::HIGHEST };
    expected.resize(k, (padding.exact(), PADDING_INDEX));
    let got: Vec<(u64, u64)> = values.iter().map(|v| v.exact()).zip(indices).collect();
    assert_eq!(got, expected, "{context} ({} admitted)", admitted.len());
}

#[test]
fn fused_filters_and_transforms_agree_with_the_oracle() {
    // 20 000 keys: the main chain alone; 2^20 + 12 345: the sample chains, the filter of the
    // inputs inside the tight bound and its chain. Specials hold NaNs, ±0 and ±inf.
    let gpu = common::gpu();
    let sizes: &[usize] = if common::on_emulator(&gpu) {
        &[20_000, (1 << 20) + 12_345]
    } else {
        &[20_000, (1 << 20) + 12_345, 3_000_001]
    };
    for (s, &n) in sizes.iter().enumerate() {
        let seed = 90 + s as u64;
        let floats = generate::<f32>(n, Distribution::Specials, seed);
        let magnitude = Fusion::default()
            .with_filter(InputFilter::Range { low: -500.0, high: f32::INFINITY })
            .with_transform(KeyTransform::Magnitude);
        for (k, order) in [(1, Order::Largest), (40, Order::Smallest), (1000, Order::Largest)] {
            let context = format!("f32 n={n} k={k} {order:?} range, magnitude");
            let admits = |_, key: f32| !key.is_nan() && key >= -500.0;
            check_fused(&gpu, &floats, (k, order), &magnitude, admits, |key: f32| key.magnitude(), &context);
        }
        let mask_bytes: Vec<u8> = (0..n).map(|i| (i % 3 != 1) as u8).collect();
        let mask = gpu.upload(&mask_bytes).unwrap();
        let uniform = generate::<f32>(n, Distribution::Uniform, seed);
        let affine = Fusion::default()
            .with_filter(InputFilter::Mask(&mask))
            .with_transform(KeyTransform::Affine { scale: -2.0, offset: 0.5 });
        for (k, order) in [(32, Order::Largest), (256, Order::Smallest)] {
            let context = format!("f32 n={n} k={k} {order:?} mask, affine");
            let admits = |i: usize, _| mask_bytes[i] != 0;
            check_fused(&gpu, &uniform, (k, order), &affine, admits, |key: f32| key * -2.0 + 0.5, &context);
        }
        // 16-bit floats: the same range and magnitude on bf16, an affine map on f16 (its
        // operators round each step to f16, as the kernels do).
        let brains = generate::<half::bf16>(n, Distribution::Specials, seed);
        let bf = half::bf16::from_f32;
        let magnitude = Fusion::default()
            .with_filter(InputFilter::Range { low: bf(-500.0), high: half::bf16::INFINITY })
            .with_transform(KeyTransform::Magnitude);
        let admits = |_, key: half::bf16| !key.is_nan() && key >= bf(-500.0);
        let rank = |key: half::bf16| key.magnitude();
        check_fused(&gpu, &brains, (100, Order::Largest), &magnitude, admits, rank, &format!("bf16 n={n}"));
        let halves = generate::<half::f16>(n, Distribution::Uniform, seed);
        let (scale, offset) = (half::f16::from_f32(-2.0), half::f16::from_f32(0.5));
        let affine = Fusion::default().with_transform(KeyTransform::Affine { scale, offset });
        let rank = |key: half::f16| key * scale + offset;
        check_fused(&gpu, &halves, (50, Order::Smallest), &affine, |_, _| true, rank, &format!("f16 n={n}"));
        let ints = generate::<i32>(n, Distribution::FewDistinct(16), seed);
        let fusion = Fusion::default()
            .with_filter(InputFilter::Range { low: -3, high: 5 })
            .with_transform(KeyTransform::Magnitude);
        let admits = |_, key: i32| (-3..=5).contains(&key);
        check_fused(
            &gpu,
            &ints,
            (300, Order::Largest),
            &fusion,
            admits,
            i32::wrapping_abs,
            &format!("i32 n={n}"),
        );
        let wide = generate::<u64>(n, Distribution::Uniform, seed);
        let fusion = Fusion::default().with_transform(KeyTransform::Affine { scale: 3u64, offset: 7 });
        let rank = |key: u64| key.wrapping_mul(3).wrapping_add(7);
        check_fused(&gpu, &wide, (64, Order::Smallest), &fusion, |_, _| true, rank, &format!("u64 n={n}"));
    }
}

#[test]
fn fused_filters_that_admit_fewer_than_k_pad_the_result() {
    // Few admitted inputs make the sample's bounds padding (they then bound nothing) and
    // the tight chain's result padding, so every chain runs; the result ends in padding.
    let gpu = common::gpu();
    for n in [5000, (1 << 20) + 12_345] {
        let data = generate::<f32>(n, Distribution::Uniform, 7);
        let mask_bytes: Vec<u8> = (0..n).map(|i| (i % (n / 9) == 3) as u8).collect();
        let mask = gpu.upload(&mask_bytes).unwrap();
        let fusion = Fusion::default().with_filter(InputFilter::Mask(&mask));
        for (k, order) in [(5, Order::Largest), (50, Order::Smallest), (1024, Order::Largest)] {
            let admits = |i: usize, _| mask_bytes[i] != 0;
            check_fused(
                &gpu,
                &data,
                (k, order),
                &fusion,
                admits,
                |key| key,
                &format!("n={n} k={k} {order:?}"),
            );
        }
        let nothing = Fusion::default().with_filter(InputFilter::Range { low: 5000.0, high: 6000.0 });
        check_fused(
            &gpu,
            &data,
            (3, Order::Smallest),
            &nothing,
            |_, _| false,
            |key| key,
            &format!("n={n} empty"),
        );
    }
}

#[test]
fn fused_top_k_rejects_what_it_cannot_do() {
    let gpu = common::gpu();
    let data = gpu.upload(&generate::<f32>(5000, Distribution::Uniform, 3)).unwrap();
    let options = TopKOptions::new(Order::Largest);
    let message = |result: gpu_select::Result<gpu_select::TopK<f32>>| result.unwrap_err().to_string();
    let magnitude = Fusion::default().with_transform(KeyTransform::Magnitude);
    let radix = options.with_algorithm(Algorithm::RadixSelect);
    assert!(message(gpu.top_k(fused(&data, &magnitude), 5, &radix)).contains("bitonic top-k only"));
    assert!(message(gpu.top_k(fused(&data, &magnitude), 1025, &options)).contains("k ≤ 1024"));
    assert!(message(gpu.top_k(fused(&data, &magnitude), 0, &options)).contains("k = 0"));
    let reversed = Fusion::default().with_filter(InputFilter::Range { low: 1.0, high: -1.0 });
    assert!(message(gpu.top_k(fused(&data, &reversed), 5, &options)).contains("orders above"));
    let short_mask = gpu.upload(&[1u8; 4999]).unwrap();
    let masked = Fusion::default().with_filter(InputFilter::Mask(&short_mask));
    assert!(matches!(gpu.top_k(fused(&data, &masked), 5, &options), Err(Error::LengthMismatch { .. })));
    // The caller's workspace: sized by the fused plan, checked by the fused run.
    let plan = gpu.plan_top_k(&fused(&data, &magnitude), 5, &options).unwrap();
    let bytes = plan.workspace_bytes();
    let mut out =
        gpu_select::TopK { values: gpu.alloc_zeroed(5).unwrap(), indices: gpu.alloc_zeroed(5).unwrap() };
    let mut workspace = gpu.alloc_zeroed::<u8>(bytes).unwrap();
    gpu.top_k_into(&plan, fused(&data, &magnitude), &mut out, &mut workspace).unwrap();
    // A fused plan takes the fused keys only, and a plain plan the plain ones.
    assert!(matches!(
        gpu.top_k_into(&plan, &data, &mut out, &mut workspace),
        Err(Error::InvalidArgument { .. })
    ));
    let plain = gpu.top_k(&data, 5, &TopKOptions::new(Order::Largest)).unwrap();
    assert_ne!(
        gpu.download(&out.indices).unwrap(),
        gpu.download(&plain.indices).unwrap(),
        "ranked by magnitude"
    );
    let mut small = gpu.alloc_zeroed::<u8>(bytes - 1).unwrap();
    let error = gpu.top_k_into(&plan, fused(&data, &magnitude), &mut out, &mut small).unwrap_err();
    assert!(
        matches!(error, Error::WorkspaceTooSmall { needed, given } if needed == bytes && given == bytes - 1),
        "{error}"
    );
}

#[test]
fn inputs_above_2_pow_31_on_a_gpu() {
    let gpu = common::gpu();
    if common::on_emulator(&gpu) {
        // 8 GiB through host threads is out of the emulator's reach; this runs on a GPU.
        eprintln!("inputs_above_2_pow_31_on_a_gpu: not run on the emulator");
        return;
    }
    let n = (1usize << 31) + 3;
    let mut data = vec![0.5f32; n];
    data[n - 1] = 3.0; // the largest sits past index 2^31
    data[(1 << 31) + 1] = 2.0;
    data[12] = 1.0;
    let device_data = gpu.upload(&data).unwrap();
    for algorithm in [
        Algorithm::Auto,
        Algorithm::Bitonic,
        Algorithm::RadixSelect,
        Algorithm::SampleSelect,
        Algorithm::PerThreadHeap,
        Algorithm::SortAndChoose,
        Algorithm::BucketSelect,
    ] {
        let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
        let top = gpu.top_k(&device_data, 3, &options).unwrap();
        assert_eq!(gpu.download(&top.values).unwrap(), [3.0, 2.0, 1.0], "{algorithm:?}");
        assert_eq!(gpu.download(&top.indices).unwrap(), [n as u64 - 1, (1 << 31) + 1, 12], "{algorithm:?}");
    }
}

#[test]
fn inputs_of_2_pow_32_and_more_on_a_gpu() {
    let gpu = common::gpu();
    if common::on_emulator(&gpu) {
        eprintln!("inputs_of_2_pow_32_and_more_on_a_gpu: not run on the emulator (16 GiB)");
        return;
    }
    // Past the bitonic top-k's 32-bit positions: Auto takes SampleSelect, and radix select
    // is run too; both count and index in 64 bits. The ties (0.5) past 2^32 must lose to
    // the ones before it.
    let n = (1usize << 32) + 5;
    let mut data = vec![0.5f32; n];
    data[n - 2] = 7.0;
    data[(1 << 32) + 1] = 6.0;
    data[5] = -1.0;
    let device_data = gpu.upload(&data).unwrap();
    drop(data);
    // Not bucket select: its buffers hold every input, 25 bytes per f32 key with the
    // oracles, more than an 80 GB GPU holds here (run 66: `OutOfMemory`, as it should).
    for algorithm in [Algorithm::Auto, Algorithm::RadixSelect, Algorithm::SampleSelect] {
        let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
        let top = gpu.top_k(&device_data, 4, &options).unwrap();
        assert_eq!(gpu.download(&top.values).unwrap(), [7.0, 6.0, 0.5, 0.5], "{algorithm:?}");
        assert_eq!(gpu.download(&top.indices).unwrap(), [n as u64 - 2, (1 << 32) + 1, 0, 1], "{algorithm:?}");
        let options = TopKOptions::new(Order::Smallest).with_algorithm(algorithm).with_sorted(false);
        let top = gpu.top_k(&device_data, 2, &options).unwrap();
        assert_eq!(gpu.download(&top.indices).unwrap(), [5, 0], "{algorithm:?}");
    }
    for algorithm in [Algorithm::Bitonic, Algorithm::PerThreadHeap, Algorithm::SortAndChoose] {
        let options = TopKOptions::new(Order::Largest).with_algorithm(algorithm);
        let result = gpu.top_k(&device_data, 4, &options);
        assert!(matches!(result, Err(Error::InvalidArgument { .. })), "{algorithm:?}");
    }
}
