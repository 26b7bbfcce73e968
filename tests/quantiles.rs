//! Multiselect and quantiles against the CPU oracle (a sort) and numpy's own values
//! (tests/fixtures/numpy_quantiles.txt, written by numpy_quantiles.py beside it).

mod common;

use common::{DISTRIBUTIONS, Distribution, SplitMix, TestKey, generate, gpu, on_emulator};
use gpu_select::{
    Error, Gpu, MultiselectAlgorithm, NanPolicy, OrderedBits, QuantileMethod, QuantileOptions, Tuning,
    reference,
};

const ALGORITHMS: [MultiselectAlgorithm; 3] = [
    MultiselectAlgorithm::Auto,
    MultiselectAlgorithm::BucketMultiselect,
    MultiselectAlgorithm::SortAndChoose,
];

/// Two results agree: the same bits, or both NaN.
fn same(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// `m` ranks spread over `0..n` (as quantiles are), ranks 0 and n − 1, and random ranks
/// with repeats.
fn wanted_ranks(n: usize, m: usize, seed: u64) -> Vec<usize> {
    let mut ranks: Vec<usize> = (0..m).map(|i| if m == 1 { n / 2 } else { i * (n - 1) / (m - 1) }).collect();
    let mut random = SplitMix(seed);
    let extra: Vec<usize> = (0..m.min(50)).map(|_| (random.next() % n as u64) as usize).collect();
    ranks.extend(extra.iter().copied());
    ranks.extend(extra.iter().take(5).copied()); // repeats
    ranks.extend([0, n - 1]);
    ranks
}

fn check_multiselect<K: TestKey>(
    gpu: &Gpu,
    keys: &[K],
    ranks: &[usize],
    algorithm: MultiselectAlgorithm,
    what: &str,
) {
    let mut sorted: Vec<u64> = keys.iter().map(|k| k.to_ordered().to_u64()).collect();
    sorted.sort_unstable();
    let found = gpu.multiselect_host(keys, ranks, algorithm).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(found.len(), ranks.len(), "{what}");
    for (selection, &rank) in found.iter().zip(ranks) {
        assert_eq!(selection.rank, rank as u64, "{what}");
        assert_eq!(
            selection.value.to_ordered().to_u64(),
            sorted[rank],
            "{what}: rank {rank} of {}",
            keys.len()
        );
        if algorithm == MultiselectAlgorithm::BucketMultiselect {
            assert!(selection.passes <= 2, "{what}: {} passes", selection.passes);
        }
    }
}

fn multiselect_over_shapes<K: TestKey>(gpu: &Gpu) {
    let emulator = on_emulator(gpu);
    let sizes: &[usize] =
        if emulator { &[1, 2, 3, 777, 70_001] } else { &[1, 2, 3, 777, 70_001, 1 << 20, 3 << 20] };
    for &n in sizes {
        for (d, distribution) in DISTRIBUTIONS.into_iter().enumerate() {
            let keys: Vec<K> = generate(n, distribution, 17 + d as u64);
            for m in [1, 11, 101, 501, 1001] {
                // The emulator runs the bucket passes on the larger inputs once per shape.
                if emulator && n > 10_000 && m != 101 && !matches!(distribution, Distribution::Uniform) {
                    continue;
                }
                let ranks = wanted_ranks(n, m, n as u64 ^ m as u64);
                for algorithm in ALGORITHMS {
                    let what = format!("{} n={n} {distribution:?} m={m} {algorithm:?}", K::NAME);
                    check_multiselect(gpu, &keys, &ranks, algorithm, &what);
                }
            }
        }
    }
}

#[test]
fn multiselect_matches_a_sort_f32() {
    multiselect_over_shapes::<f32>(&gpu());
}

#[test]
fn multiselect_matches_a_sort_f64() {
    multiselect_over_shapes::<f64>(&gpu());
}

#[test]
fn multiselect_matches_a_sort_halves() {
    let gpu = gpu();
    multiselect_over_shapes::<half::f16>(&gpu);
    multiselect_over_shapes::<half::bf16>(&gpu);
}

#[test]
fn multiselect_matches_a_sort_integers() {
    let gpu = gpu();
    multiselect_over_shapes::<i32>(&gpu);
    multiselect_over_shapes::<u32>(&gpu);
    multiselect_over_shapes::<i64>(&gpu);
    multiselect_over_shapes::<u64>(&gpu);
}

/// Shapes the passes meet: a heavy value the sample may miss, values too close for
/// `f64` (64-bit integers a few apart near 2^62), a narrow band of floats around 0, and
/// NaN and infinities in bulk.
#[test]
fn multiselect_handles_hard_shapes() {
    let gpu = gpu();
    let n = if on_emulator(&gpu) { 150_000 } else { 4 << 20 };
    let mut random = SplitMix(5);
    let mut heavy: Vec<f32> =
        (0..n).map(|i| if i % 700 == 0 { 1.25 } else { (random.next() % 1000) as f32 }).collect();
    heavy[n / 2] = f32::MAX;
    let close: Vec<u64> = (0..n).map(|_| (1u64 << 62) + random.next() % 4096).collect();
    let band: Vec<f32> = (0..n).map(|_| (random.next() % 2001) as f32 * 1e-40 - 1e-37).collect();
    let specials: Vec<f64> = (0..n)
        .map(|i| match i % 5 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            _ => (random.next() % 100) as f64,
        })
        .collect();
    // Few labels holding most keys: 99 % of the keys below 4096, the rest spread over every
    // u32, so the sample's slots are 2^22 wide and four labels of 1024 bit patterns hold
    // almost everything: the picks read tens of thousands of keys a label, more than shared
    // memory takes.
    let crowded: Vec<u32> = (0..n)
        .map(|i| if i % 100 == 0 { random.next() as u32 } else { (random.next() % 4096) as u32 })
        .collect();
    let ranks = wanted_ranks(n, 101, 9);
    for algorithm in [MultiselectAlgorithm::BucketMultiselect, MultiselectAlgorithm::SortAndChoose] {
        check_multiselect(&gpu, &crowded, &ranks, algorithm, &format!("crowded {algorithm:?}"));
        check_multiselect(&gpu, &heavy, &ranks, algorithm, &format!("heavy {algorithm:?}"));
        check_multiselect(&gpu, &close, &ranks, algorithm, &format!("close {algorithm:?}"));
        check_multiselect(&gpu, &band, &ranks, algorithm, &format!("band {algorithm:?}"));
        check_multiselect(&gpu, &specials, &ranks, algorithm, &format!("specials {algorithm:?}"));
    }
}

/// One read and no more when every rank falls on a repeated value (the sample's equality
/// labels answer at the count), two for spread data.
#[test]
fn bucket_multiselect_reads_the_data_at_most_twice() {
    let gpu = gpu();
    let n = if on_emulator(&gpu) { 100_000 } else { 1 << 24 };
    let equal = vec![42u32; n];
    let found =
        gpu.multiselect_host(&equal, &[0, n / 2, n - 1], MultiselectAlgorithm::BucketMultiselect).unwrap();
    assert!(found.iter().all(|s| s.value == 42 && s.passes == 1), "{found:?}");
    let spread: Vec<u32> = generate(n, Distribution::Uniform, 3);
    let found =
        gpu.multiselect_host(&spread, &[1, n / 3, n - 2], MultiselectAlgorithm::BucketMultiselect).unwrap();
    assert!(found.iter().all(|s| s.passes == 2), "{found:?}");
}

/// numpy's values for every method, for `quantile` and `nanquantile`, by every algorithm.
#[test]
fn quantiles_match_numpy() {
    let gpu = gpu();
    let text = include_str!("fixtures/numpy_quantiles.txt");
    let numbers = |line: &str, skip: usize| -> Vec<f64> {
        line.split_whitespace().skip(skip).map(|w| w.parse::<f64>().expect("a number")).collect()
    };
    let mut qs = Vec::new();
    let mut case = String::new();
    let mut data = Vec::new();
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("qs") => qs = numbers(line, 1),
            Some("case") => case = words.next().expect("a name").to_owned(),
            Some("data") => data = numbers(line, 1),
            Some(function @ ("quantile" | "nanquantile")) => {
                let method = QuantileMethod::from_numpy_name(words.next().expect("a method")).expect("known");
                let expected = numbers(line, 2);
                let nan = if function == "quantile" { NanPolicy::Propagate } else { NanPolicy::Omit };
                for algorithm in ALGORITHMS {
                    let options = QuantileOptions::new(method).with_nan(nan).with_algorithm(algorithm);
                    let got = gpu.quantiles_host(&data, &qs, &options).unwrap();
                    for ((&g, &e), &q) in got.iter().zip(&expected).zip(&qs) {
                        assert!(
                            same(g, e),
                            "{case} {function} {method:?} {algorithm:?} q={q}: {g} != numpy's {e}"
                        );
                    }
                    let oracle = reference::quantiles(&data, &qs, method, nan);
                    assert!(
                        oracle.iter().zip(&expected).all(|(&o, &e)| same(o, e)),
                        "oracle {case} {method:?}"
                    );
                    checked += 1;
                }
            }
            other => panic!("unexpected line {other:?}"),
        }
    }
    assert_eq!(checked, 10 * 2 * 13 * 3);
}

/// Every method and NaN policy against the oracle, on inputs large enough for the bucket
/// passes, for floats with NaN and for integers.
#[test]
fn quantiles_match_the_oracle() {
    let gpu = gpu();
    let n = if on_emulator(&gpu) { 80_000 } else { 2 << 20 };
    let mut random = SplitMix(77);
    let floats: Vec<f32> = (0..n)
        .map(|i| if i % 997 == 0 { f32::NAN } else { (random.next() >> 40) as f32 * 1e-3 - 8000.0 })
        .collect();
    let integers: Vec<i64> = (0..n).map(|_| (random.next() % 50_000) as i64 - 25_000).collect();
    let qs: Vec<f64> = (0..=100).map(|i| i as f64 / 100.0).chain([1e-7, 0.123_456_789, 0.999_999]).collect();
    for method in QuantileMethod::ALL {
        for nan in [NanPolicy::Propagate, NanPolicy::Omit] {
            let options = QuantileOptions::new(method)
                .with_nan(nan)
                .with_algorithm(MultiselectAlgorithm::BucketMultiselect);
            let got = gpu.quantiles_host(&floats, &qs, &options).unwrap();
            let expected = reference::quantiles(&floats, &qs, method, nan);
            assert!(got.iter().zip(&expected).all(|(&g, &e)| same(g, e)), "f32 {method:?} {nan:?}");
            let got = gpu.quantiles_host(&integers, &qs, &options).unwrap();
            let expected = reference::quantiles(&integers, &qs, method, nan);
            assert!(got.iter().zip(&expected).all(|(&g, &e)| same(g, e)), "i64 {method:?} {nan:?}");
        }
    }
    // Propagate: NaN everywhere; all NaN with Omit: NaN everywhere.
    let options = QuantileOptions::default();
    assert!(gpu.quantiles_host(&floats, &qs, &options).unwrap().iter().all(|v| v.is_nan()));
    let nans = vec![f64::NAN; 100_000.min(n)];
    let omit = options.with_nan(NanPolicy::Omit).with_algorithm(MultiselectAlgorithm::BucketMultiselect);
    assert!(gpu.quantiles_host(&nans, &[0.0, 0.5, 1.0], &omit).unwrap().iter().all(|v| v.is_nan()));
}

/// Each row's ranks against a sort of that row: rows of one key, short rows (a block sort
/// each), long rows (padded and merged; at 2048 · 2^j keys copied unpadded), and rows in
/// many batches, over every distribution (NaNs among the floats' specials), by every
/// algorithm (a multiselect per row on two shapes: it is the one-array path's).
fn multiselect_rows_over_shapes<K: TestKey>(gpu: &Gpu) {
    let batched = small_batches(gpu);
    // The longest rows: on a GPU past `Auto`'s bound for sorting rows together (sorted
    // together by `SortAndChoose`); the emulator takes shorter ones (the bound itself is a
    // unit test's).
    let long = if on_emulator(gpu) { 70_001 } else { 1_048_577 };
    let shapes = [(1, 1), (5, 1), (3, 7), (9, 300), (4, 2048), (3, 2049), (2, 4096), (2, 5000), (2, long)];
    for (rows, cols) in shapes {
        for (d, distribution) in DISTRIBUTIONS.into_iter().enumerate() {
            if cols == long && (d > 0 || K::NAME != "f32") {
                continue; // one case suffices for the bound
            }
            let keys: Vec<K> = generate(rows * cols, distribution, 41 + d as u64);
            let data = gpu.upload(&keys).unwrap();
            let mut random = SplitMix(cols as u64 ^ d as u64);
            let mut ranks = vec![0, cols - 1, cols / 2, cols - 1];
            ranks.extend((0..6).map(|_| (random.next() % cols as u64) as usize));
            let runs: [(&Gpu, MultiselectAlgorithm); 5] = [
                (gpu, MultiselectAlgorithm::Auto),
                (gpu, MultiselectAlgorithm::SortAndChoose),
                (gpu, MultiselectAlgorithm::BucketMultiselect),
                (&batched, MultiselectAlgorithm::Auto),
                (&batched, MultiselectAlgorithm::SortAndChoose),
            ];
            for (gpu, algorithm) in runs {
                // A bucket multiselect per row is the one-array path's, tested on its own.
                let per_row = algorithm == MultiselectAlgorithm::BucketMultiselect
                    || (algorithm == MultiselectAlgorithm::Auto && cols > 1 << 20);
                if per_row && ![7, 2049].contains(&cols) {
                    continue;
                }
                let what = format!("{} {rows}x{cols} {distribution:?} {algorithm:?}", K::NAME);
                let found = gpu
                    .multiselect_rows(&data, rows, &ranks, algorithm)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(found.len(), rows * ranks.len(), "{what}");
                for (row, answers) in found.chunks_exact(ranks.len()).enumerate() {
                    let mut sorted: Vec<u64> =
                        keys[row * cols..(row + 1) * cols].iter().map(|k| k.to_ordered().to_u64()).collect();
                    sorted.sort_unstable();
                    for (selection, &rank) in answers.iter().zip(&ranks) {
                        assert_eq!(selection.rank, rank as u64, "{what}");
                        assert_eq!(
                            selection.value.to_ordered().to_u64(),
                            sorted[rank],
                            "{what}: row {row} rank {rank}"
                        );
                    }
                }
            }
        }
    }
    let data = gpu.upload(&generate::<K>(12, Distribution::Uniform, 1)).unwrap();
    for algorithm in ALGORITHMS {
        let result = gpu.multiselect_rows(&data, 3, &[0, 4], algorithm);
        assert!(matches!(result, Err(Error::KOutOfRange { k: 4, max: 3, .. })), "{algorithm:?}: {result:?}");
        let result = gpu.multiselect_rows(&data, 5, &[0], algorithm);
        assert!(matches!(result, Err(Error::InvalidArgument { .. })), "{algorithm:?}: {result:?}");
        let empty = gpu.upload::<K>(&[]).unwrap();
        assert!(matches!(gpu.multiselect_rows(&empty, 2, &[0], algorithm), Err(Error::EmptyInput)));
    }
}

/// `gpu` sorting rows in batches of 4096 padded keys, and reading their ranks' keys to the
/// host a few rows at a time (100 bytes: 1–2 rows of the tests' ranks).
fn small_batches(gpu: &Gpu) -> Gpu {
    gpu.with_tuning(Tuning { multiselect_rows_batch_keys: 4096, host_staging_bytes: 100, ..*gpu.tuning() })
}

#[test]
fn multiselect_of_rows_matches_a_sort_of_each_row() {
    let gpu = gpu();
    multiselect_rows_over_shapes::<f32>(&gpu);
    multiselect_rows_over_shapes::<half::bf16>(&gpu);
    multiselect_rows_over_shapes::<i64>(&gpu);
}

/// Every method and NaN policy on rows whose NaN counts differ (none, some, all but one,
/// all), short and long rows, in one batch and in many, against the oracle row by row.
#[test]
fn quantiles_of_rows_with_nans_match_the_oracle() {
    let gpu = gpu();
    let batched = small_batches(&gpu);
    let qs: Vec<f64> = [0.0, 1e-7, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999_999, 1.0].to_vec();
    for (rows, cols) in [(14, 100), (6, 3001)] {
        let mut random = SplitMix(cols as u64);
        let mut keys: Vec<f64> =
            (0..rows * cols).map(|_| (random.next() % 1000) as f64 * 0.25 - 100.0).collect();
        for row in 0..rows {
            let nans = match row % 7 {
                0 => 0,
                5 => cols - 1,
                6 => cols,
                r => r * 3,
            };
            for _ in 0..nans {
                let at = row * cols + (random.next() % cols as u64) as usize;
                keys[at] = f64::NAN;
            }
            // Repeated places leave fewer NaNs than drawn: the counts still differ by row.
            if nans >= cols - 1 {
                keys[row * cols..row * cols + nans].fill(f64::NAN);
            }
        }
        let floats: Vec<f32> = keys.iter().map(|&k| k as f32).collect();
        let (data64, data32) = (gpu.upload(&keys).unwrap(), gpu.upload(&floats).unwrap());
        // Every method on the short rows; the long rows (the same host code on other
        // kernels) with three.
        let methods = if cols < 2048 {
            QuantileMethod::ALL.to_vec()
        } else {
            vec![QuantileMethod::Linear, QuantileMethod::InvertedCdf, QuantileMethod::Midpoint]
        };
        for method in methods {
            for nan in [NanPolicy::Propagate, NanPolicy::Omit] {
                for (gpu, algorithm) in
                    [(&gpu, MultiselectAlgorithm::Auto), (&batched, MultiselectAlgorithm::SortAndChoose)]
                {
                    let options = QuantileOptions::new(method).with_nan(nan).with_algorithm(algorithm);
                    let got64 = gpu.quantiles_rows(&data64, rows, &qs, &options).unwrap();
                    // Into memory that held other values: every one is written.
                    let mut got32 = vec![-1.0; rows * qs.len()];
                    gpu.quantiles_rows_into(&data32, rows, &qs, &options, &mut got32).unwrap();
                    // Left on the device: the same values.
                    let on_device = gpu.quantiles_rows_on_device(&data64, rows, &qs, &options).unwrap();
                    let on_device = gpu.download(&on_device).unwrap();
                    let what = format!("{rows}x{cols} {method:?} {nan:?} {algorithm:?}");
                    assert!(
                        on_device.iter().zip(&got64).all(|(&d, &h)| same(d, h)),
                        "on the device {what}: {on_device:?} {got64:?}"
                    );
                    for row in 0..rows {
                        let range = row * cols..(row + 1) * cols;
                        let what = format!("{rows}x{cols} row {row} {method:?} {nan:?} {algorithm:?}");
                        let expected = reference::quantiles(&keys[range.clone()], &qs, method, nan);
                        let got = &got64[row * qs.len()..(row + 1) * qs.len()];
                        assert!(
                            got.iter().zip(&expected).all(|(&g, &e)| same(g, e)),
                            "f64 {what}: {got:?} {expected:?}"
                        );
                        let expected = reference::quantiles(&floats[range], &qs, method, nan);
                        let got = &got32[row * qs.len()..(row + 1) * qs.len()];
                        assert!(
                            got.iter().zip(&expected).all(|(&g, &e)| same(g, e)),
                            "f32 {what}: {got:?} {expected:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn quantiles_of_rows() {
    let gpu = gpu();
    let (rows, columns) = (3, 70_001);
    let keys: Vec<u32> = generate(rows * columns, Distribution::Uniform, 8);
    let qs = [0.0, 0.25, 0.5, 0.99, 1.0];
    let options = QuantileOptions::new(QuantileMethod::Hazen);
    let got = gpu.quantiles_rows(&gpu.upload(&keys).unwrap(), rows, &qs, &options).unwrap();
    for row in 0..rows {
        let expected = reference::quantiles(
            &keys[row * columns..(row + 1) * columns],
            &qs,
            QuantileMethod::Hazen,
            NanPolicy::Omit,
        );
        assert_eq!(&got[row * qs.len()..(row + 1) * qs.len()], &expected[..], "row {row}");
    }
    assert!(matches!(
        gpu.quantiles_rows(&gpu.upload(&keys).unwrap(), 4, &qs, &options),
        Err(Error::InvalidArgument { .. })
    ));
    // Rows that cannot be: an error before anything of their size is allocated.
    assert!(matches!(
        gpu.quantiles_rows(&gpu.upload(&keys).unwrap(), usize::MAX / 2, &qs, &options),
        Err(Error::InvalidArgument { .. })
    ));
    let mut short = vec![0.0; rows * qs.len() - 1];
    assert!(matches!(
        gpu.quantiles_rows_into(&gpu.upload(&keys).unwrap(), rows, &qs, &options, &mut short),
        Err(Error::LengthMismatch { expected: 15, actual: 14, .. })
    ));
}

/// Quantiles of rows of every kind of key, to the host and left on the device, against the
/// oracle: short rows (a block sort each) and long ones, sorted together in one batch and in
/// many (37 rows of 300: three batches), and a bucket multiselect per row (its values
/// uploaded).
fn quantiles_of_rows_of<K: TestKey>(gpu: &Gpu) {
    let batched = small_batches(gpu);
    let qs = [0.0, 0.01, 0.3, 0.5, 0.5, 0.875, 1.0];
    for (rows, cols) in [(1, 1), (37, 300), (3, 300), (2, 5000)] {
        let distributions = [Distribution::Uniform, Distribution::FewDistinct(16), Distribution::Specials];
        for (d, distribution) in distributions.into_iter().enumerate() {
            let keys: Vec<K> = generate(rows * cols, distribution, 77 + d as u64);
            let data = gpu.upload(&keys).unwrap();
            // Three methods on the short rows, numpy's default on the others.
            let methods = if cols == 300 {
                &[QuantileMethod::Linear, QuantileMethod::Nearest, QuantileMethod::AveragedInvertedCdf][..]
            } else {
                &[QuantileMethod::Linear][..]
            };
            // Both NaN policies where there are NaNs (floats' specials).
            let nans = if matches!(distribution, Distribution::Specials) {
                &[NanPolicy::Omit, NanPolicy::Propagate][..]
            } else {
                &[NanPolicy::Omit][..]
            };
            for (&method, &nan) in methods.iter().flat_map(|m| nans.iter().map(move |n| (m, n))) {
                let runs: [(&Gpu, MultiselectAlgorithm); 3] = [
                    (gpu, MultiselectAlgorithm::Auto),
                    (&batched, MultiselectAlgorithm::SortAndChoose),
                    (gpu, MultiselectAlgorithm::BucketMultiselect),
                ];
                for (gpu, algorithm) in runs {
                    // A multiselect per row is the one-array path's, tested on its own: here
                    // on a few rows, its values uploaded; the sorts on the others.
                    if (algorithm == MultiselectAlgorithm::BucketMultiselect) != (rows == 3) {
                        continue;
                    }
                    let what = format!(
                        "{} {rows}x{cols} {distribution:?} {method:?} {nan:?} {algorithm:?}",
                        K::NAME
                    );
                    let options = QuantileOptions::new(method).with_nan(nan).with_algorithm(algorithm);
                    let on_host = gpu.quantiles_rows(&data, rows, &qs, &options).unwrap();
                    let on_device = gpu
                        .download(&gpu.quantiles_rows_on_device(&data, rows, &qs, &options).unwrap())
                        .unwrap();
                    for row in 0..rows {
                        let expected =
                            reference::quantiles(&keys[row * cols..(row + 1) * cols], &qs, method, nan);
                        for got in [&on_host, &on_device] {
                            let got = &got[row * qs.len()..(row + 1) * qs.len()];
                            assert!(
                                got.iter().zip(&expected).all(|(&g, &e)| same(g, e)),
                                "{what} row {row}: {got:?} {expected:?}"
                            );
                        }
                    }
                }
            }
        }
    }
    // No quantiles: nothing to write, on the host or the device.
    let data = gpu.upload(&generate::<K>(12, Distribution::Uniform, 1)).unwrap();
    let options = QuantileOptions::default();
    assert!(gpu.quantiles_rows(&data, 3, &[], &options).unwrap().is_empty());
    assert!(gpu.quantiles_rows_on_device(&data, 3, &[], &options).unwrap().is_empty());
    let result = gpu.quantiles_rows_on_device(&data, 5, &[0.5], &options);
    assert!(matches!(result, Err(Error::InvalidArgument { .. })), "{result:?}");
    let result = gpu.quantiles_rows_on_device(&data, 3, &[1.5], &options);
    assert!(matches!(result, Err(Error::InvalidArgument { .. })), "{result:?}");
}

#[test]
fn quantiles_of_rows_of_every_key_type() {
    let gpu = gpu();
    quantiles_of_rows_of::<f32>(&gpu);
    quantiles_of_rows_of::<f64>(&gpu);
    quantiles_of_rows_of::<half::f16>(&gpu);
    quantiles_of_rows_of::<half::bf16>(&gpu);
    quantiles_of_rows_of::<i32>(&gpu);
    quantiles_of_rows_of::<u32>(&gpu);
    quantiles_of_rows_of::<i64>(&gpu);
    quantiles_of_rows_of::<u64>(&gpu);
}

#[test]
fn bad_arguments_are_refused() {
    let gpu = gpu();
    let data = gpu.upload(&[1.0f32, 2.0, 3.0]).unwrap();
    for q in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let result = gpu.quantiles(&data, &[0.5, q], &QuantileOptions::default());
        assert!(matches!(result, Err(Error::InvalidArgument { .. })), "q = {q}: {result:?}");
    }
    for algorithm in ALGORITHMS {
        let result = gpu.multiselect(&data, &[0, 3], algorithm);
        assert!(matches!(result, Err(Error::KOutOfRange { k: 3, max: 2, .. })), "{result:?}");
        let empty = gpu.upload::<f32>(&[]).unwrap();
        assert!(matches!(gpu.multiselect(&empty, &[0], algorithm), Err(Error::EmptyInput)));
        assert!(matches!(gpu.quantiles(&empty, &[0.5], &QuantileOptions::default()), Err(Error::EmptyInput)));
    }
    // No ranks, no quantiles: nothing to find.
    assert!(gpu.multiselect(&data, &[], MultiselectAlgorithm::BucketMultiselect).unwrap().is_empty());
    assert!(gpu.quantiles(&data, &[], &QuantileOptions::default()).unwrap().is_empty());
}

/// Every way a bucket multiselect ends, on inputs the emulator can take: with a pick limit
/// of 8 keys and 64 labels per filter, the runs subdivide over several filters, stop when a
/// pass cannot halve (duplicates the sample misses), and sort when most labels are active.
#[test]
fn bucket_multiselect_ends_every_way() {
    let gpu = gpu();
    let small = gpu.with_tuning(gpu_select::Tuning {
        multiselect_pick_max: 8,
        multiselect_labels: 64,
        ..*gpu.tuning()
    });
    let n = 120_000;
    let mut random = SplitMix(31);
    let shapes: Vec<(&str, Vec<f32>)> = vec![
        ("uniform", generate(n, Distribution::Uniform, 4)),
        // Each value 12 times: labels never get below 12 keys, so only the sort ends it.
        ("twelve of each", (0..n).map(|i| (i / 12) as f32).collect()),
        (
            "clustered",
            (0..n)
                .map(|_| {
                    if random.next().is_multiple_of(2) {
                        1.0 + (random.next() % 64) as f32 * 1e-7
                    } else {
                        (random.next() % 1_000_000) as f32
                    }
                })
                .collect(),
        ),
    ];
    for (name, keys) in &shapes {
        for m in [1, 11, 101, 501] {
            let ranks = wanted_ranks(n, m, m as u64);
            check_multiselect(
                &small,
                keys,
                &ranks,
                MultiselectAlgorithm::BucketMultiselect,
                &format!("{name} m={m}"),
            );
        }
    }
}

/// The last pass placed straight from the data (few active labels) and from a filter's
/// candidates (`Tuning::multiselect_place_keys` below the keys kept) give the same, right
/// keys.
#[test]
fn placing_from_the_data_or_from_a_filter() {
    let gpu = gpu();
    let n = 200_003;
    let keys: Vec<f32> = generate(n, Distribution::Uniform, 9);
    for place_keys in [0, u64::MAX] {
        let tuned =
            gpu.with_tuning(gpu_select::Tuning { multiselect_place_keys: place_keys, ..*gpu.tuning() });
        for m in [1, 11, 101, 1001] {
            let ranks = wanted_ranks(n, m, m as u64 + 5);
            let name = format!("place keys {place_keys}, m={m}");
            check_multiselect(&tuned, &keys, &ranks, MultiselectAlgorithm::BucketMultiselect, &name);
        }
    }
}

/// A label whose keys span one bit pattern only within the data's extremes (keys of one
/// value and one key just above it, which the sample misses): its rank is that key, found
/// from the extremes, not read from keys the last filter did not keep.
#[test]
fn a_lone_key_beside_a_repeated_value() {
    let gpu = gpu();
    let n = 100_001;
    for lone_at in [0, n / 3, n - 1] {
        let mut keys = vec![5u32; n];
        keys[lone_at] = 6;
        let ranks = [n - 1, 0, n / 2, n - 2];
        check_multiselect(
            &gpu,
            &keys,
            &ranks,
            MultiselectAlgorithm::BucketMultiselect,
            &format!("6 at {lone_at}"),
        );
        let mut below = vec![5u32; n];
        below[lone_at] = 4;
        check_multiselect(
            &gpu,
            &below,
            &ranks,
            MultiselectAlgorithm::BucketMultiselect,
            &format!("4 at {lone_at}"),
        );
    }
}
