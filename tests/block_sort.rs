//! The block bitonic sort against the CPU oracle: every key type, both orders, edge lengths,
//! adversarial distributions, NaN / ±0 / ±inf / subnormals, and bad input.

mod common;

use common::{SplitMix, TestKey};
use gpu_select::{Error, Gpu, MAX_SMALL_SORT_LEN, Order, reference};

/// The distributions of design.md §4 that fit a small segment.
fn segments<K: TestKey>(len: usize, seed: u64) -> Vec<Vec<K>> {
    let mut random = SplitMix(seed);
    let specials = K::specials();
    // All equal but four outliers, the shape that stalls bucket-based selection.
    let mut outliers = vec![K::from_rank(1); len];
    if len > 4 {
        for (n, i) in [1usize, len / 3, len / 2, len - 1].into_iter().enumerate() {
            outliers[i] = K::from_rank(if n % 2 == 0 { 2 } else { 0 });
        }
    }
    vec![
        (0..len).map(|_| K::random(random.next())).collect(),
        (0..len).map(|i| K::from_rank(i as i64)).collect(),
        (0..len).map(|i| K::from_rank(len as i64 - i as i64)).collect(),
        vec![K::from_rank(7); len],
        (0..len).map(|_| K::from_rank((random.next() % 3) as i64)).collect(),
        (0..len).map(|_| K::from_rank((random.next() % 16) as i64 - 8)).collect(),
        (0..len)
            .map(|_| {
                let pick = random.next();
                if pick.is_multiple_of(3) {
                    K::random(pick)
                } else {
                    specials[(pick >> 8) as usize % specials.len()]
                }
            })
            .collect(),
        outliers,
    ]
}

fn check_sort<K: TestKey>(gpu: &Gpu, len: usize, order: Order) {
    let segments = segments::<K>(len, len as u64 * 31 + order as u64);
    let keys: Vec<K> = segments.concat();
    let device_keys = gpu.upload(&keys).unwrap();
    let sorted = gpu.sort_segments(&device_keys, len, order).unwrap();
    let (got_keys, got_indices) =
        (gpu.download(&sorted.keys).unwrap(), gpu.download(&sorted.indices).unwrap());
    for (s, segment) in segments.iter().enumerate() {
        let expected = reference::sort_pairs(segment, order);
        let range = s * len..(s + 1) * len;
        let got: Vec<(u64, u64)> = got_keys[range.clone()]
            .iter()
            .map(|k| k.exact())
            .zip(got_indices[range].iter().copied())
            .collect();
        let want: Vec<(u64, u64)> = expected.iter().map(|&(k, i)| (k.exact(), i)).collect();
        assert_eq!(got, want, "{} len {len} {order:?} segment {s}", K::NAME);
    }
}

fn lengths(gpu: &Gpu) -> Vec<usize> {
    let mut lengths =
        vec![1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 255, 256, 257, 1000, 1023, 1024, 1025, 2047, 2048];
    if common::on_emulator(gpu) {
        // A 1024-thread block costs 1024 host threads: keep the longest lengths to one key type.
        lengths.retain(|&len| len <= 257);
    }
    lengths
}

fn check_all_lengths<K: TestKey>() {
    let gpu = common::gpu();
    for len in lengths(&gpu) {
        for order in [Order::Smallest, Order::Largest] {
            check_sort::<K>(&gpu, len, order);
        }
    }
}

#[test]
fn sorts_f32() {
    check_all_lengths::<f32>();
}

#[test]
fn sorts_f64() {
    check_all_lengths::<f64>();
}

#[test]
fn sorts_i32() {
    check_all_lengths::<i32>();
}

#[test]
fn sorts_u32() {
    check_all_lengths::<u32>();
}

#[test]
fn sorts_i64() {
    check_all_lengths::<i64>();
}

#[test]
fn sorts_u64() {
    check_all_lengths::<u64>();
}

#[test]
fn sorts_halves() {
    check_all_lengths::<half::f16>();
    check_all_lengths::<half::bf16>();
}

#[test]
fn sorts_the_longest_segments() {
    // Full-size blocks (1024 threads, 2048 slots) for one 32- and one 64-bit key type on
    // every backend, the emulator included.
    let gpu = common::gpu();
    let lengths: &[usize] = if common::on_emulator(&gpu) {
        &[1025, MAX_SMALL_SORT_LEN]
    } else {
        &[1023, 1025, 2047, MAX_SMALL_SORT_LEN]
    };
    for &len in lengths {
        check_sort::<f32>(&gpu, len, Order::Largest);
        check_sort::<i64>(&gpu, len, Order::Smallest);
    }
}

#[test]
fn many_segments_in_one_launch() {
    let gpu = common::gpu();
    let segments = if common::on_emulator(&gpu) { 300 } else { 100_000 };
    let len = 20;
    let mut random = SplitMix(99);
    let keys: Vec<u32> = (0..segments * len).map(|_| random.next() as u32 % 50).collect();
    let sorted = gpu.sort_segments(&gpu.upload(&keys).unwrap(), len, Order::Smallest).unwrap();
    let (got_keys, got_indices) =
        (gpu.download(&sorted.keys).unwrap(), gpu.download(&sorted.indices).unwrap());
    for s in 0..segments {
        let expected = reference::sort_pairs(&keys[s * len..(s + 1) * len], Order::Smallest);
        let got: Vec<(u32, u64)> = (s * len..(s + 1) * len).map(|i| (got_keys[i], got_indices[i])).collect();
        assert_eq!(got, expected, "segment {s}");
    }
}

#[test]
fn host_slice_sort_matches_the_oracle() {
    let gpu = common::gpu();
    let keys = [3.5f64, -0.0, f64::NAN, 0.0, f64::NEG_INFINITY, 3.5];
    let (sorted, indices) = gpu.sort_small(&keys, Order::Largest).unwrap();
    assert_eq!(indices, [2, 0, 5, 3, 1, 4]);
    assert!(sorted[0].is_nan());
    assert_eq!(
        sorted[1..].iter().map(|k| k.to_bits()).collect::<Vec<_>>(),
        [3.5f64, 3.5, 0.0, -0.0, f64::NEG_INFINITY].iter().map(|k| k.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn bad_input_gives_clear_errors() {
    let gpu = common::gpu();
    let keys = gpu.upload(&[1u32, 2, 3, 4, 5, 6]).unwrap();
    assert_eq!(
        gpu.sort_segments(&gpu.upload::<u32>(&[]).unwrap(), 4, Order::Smallest).unwrap_err(),
        Error::EmptyInput
    );
    for bad_len in [0, 4, MAX_SMALL_SORT_LEN + 1] {
        let error = gpu.sort_segments(&keys, bad_len, Order::Smallest).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument { .. }), "{bad_len}: {error}");
    }
    let too_long = vec![0i32; MAX_SMALL_SORT_LEN + 1];
    let message = gpu.sort_small(&too_long, Order::Smallest).unwrap_err().to_string();
    assert!(message.contains("2048"), "{message}");
    let other = Gpu::emulator();
    let foreign = other.upload(&[1u32]).unwrap();
    assert!(matches!(gpu.sort_segments(&foreign, 1, Order::Smallest), Err(Error::InvalidArgument { .. })));
    assert_eq!(gpu.sort_small::<u32>(&[], Order::Smallest).unwrap_err(), Error::EmptyInput);
}
