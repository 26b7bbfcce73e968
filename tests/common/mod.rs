//! Shared by the integration tests: the backend they run on, said once per test binary.

#![allow(dead_code)]

use std::io::Write;
use std::sync::Once;

use gpu_select::{BackendKind, Gpu, SelectKey};

static ANNOUNCE: Once = Once::new();

/// The backend of this run: the GPU when one is present, else the emulator
/// (`GPU_SELECT_BACKEND=cuda|emulator` forces one). Printed once, past the test harness's
/// output capture, so every log says what the tests ran on.
pub fn gpu() -> Gpu {
    let gpu = Gpu::from_env().expect("GPU_SELECT_BACKEND names a backend that cannot start");
    ANNOUNCE.call_once(|| {
        let _ = writeln!(std::io::stderr(), "gpu-select tests run on: {}", gpu.describe());
    });
    gpu
}

/// Whether this run is on the (slow) emulator, so tests can size their matrices.
pub fn on_emulator(gpu: &Gpu) -> bool {
    gpu.backend() == BackendKind::Emulator
}

/// Handles standing for several GPUs of one machine, `count` of them: on a GPU machine
/// every CUDA device (forked streams of them where there are fewer than `count`), on the
/// emulator `count` emulator instances (each its own "device" to the library's checks).
pub fn several_handles(gpu: &Gpu, count: usize) -> Vec<Gpu> {
    if on_emulator(gpu) {
        return (0..count).map(|_| Gpu::emulator()).collect();
    }
    let mut handles: Vec<Gpu> = (0..Gpu::device_count() as u32).filter_map(|d| Gpu::cuda(d).ok()).collect();
    let devices = handles.len();
    while handles.len() < count {
        let forked = handles[handles.len() % devices].fork_stream().expect("a stream of its own");
        handles.push(forked);
    }
    handles.truncate(count);
    handles
}

/// A small deterministic generator (SplitMix64), so failures reproduce.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The input distributions of design.md §4.
#[derive(Clone, Copy, Debug)]
pub enum Distribution {
    Uniform,
    Ascending,
    Descending,
    AllEqual,
    FewDistinct(u64),
    Specials,
    /// All equal but four values, one of them far above and one far below.
    Outliers,
}

pub const DISTRIBUTIONS: [Distribution; 8] = [
    Distribution::Uniform,
    Distribution::Ascending,
    Distribution::Descending,
    Distribution::AllEqual,
    Distribution::FewDistinct(2),
    Distribution::FewDistinct(16),
    Distribution::Specials,
    Distribution::Outliers,
];

pub fn generate<K: TestKey>(n: usize, distribution: Distribution, seed: u64) -> Vec<K> {
    let mut random = SplitMix(seed);
    let specials = K::specials();
    match distribution {
        Distribution::Uniform => (0..n).map(|_| K::random(random.next())).collect(),
        Distribution::Ascending => (0..n).map(|i| K::from_rank(i as i64)).collect(),
        Distribution::Descending => (0..n).map(|i| K::from_rank(-(i as i64))).collect(),
        Distribution::AllEqual => vec![K::from_rank(3); n],
        Distribution::FewDistinct(d) => (0..n).map(|_| K::from_rank((random.next() % d) as i64)).collect(),
        Distribution::Specials => (0..n)
            .map(|_| {
                let pick = random.next();
                if pick.is_multiple_of(4) {
                    K::random(pick)
                } else {
                    specials[(pick >> 8) as usize % specials.len()]
                }
            })
            .collect(),
        Distribution::Outliers if n == 0 => Vec::new(),
        Distribution::Outliers => {
            let mut keys = vec![K::from_rank(5); n];
            for (j, i) in [0, n / 3, n / 2, n - 1].into_iter().enumerate() {
                keys[i] = K::from_rank([1000, -1000, 6, 4][j]);
            }
            keys
        }
    }
}

/// How the tests make and compare keys of each type.
pub trait TestKey: SelectKey {
    /// A key from 64 random bits, spread over negative and positive values.
    fn random(bits: u64) -> Self;
    /// A key from a small integer, order-preserving (for sorted and few-distinct inputs).
    fn from_rank(rank: i64) -> Self;
    /// The values that break encodings: extremes, and for floats ±0, ±inf, NaNs, subnormals.
    fn specials() -> Vec<Self>;
    /// The key's exact bits, so NaNs compare equal to themselves.
    fn exact(self) -> u64;
}

macro_rules! float_test_key {
    ($t:ty) => {
        impl TestKey for $t {
            fn random(bits: u64) -> Self {
                ((bits >> 11) as f64 / (1u64 << 53) as f64 * 2000.0 - 1000.0) as $t
            }
            fn from_rank(rank: i64) -> Self {
                rank as $t * 0.5
            }
            fn specials() -> Vec<Self> {
                vec![
                    <$t>::NEG_INFINITY,
                    <$t>::INFINITY,
                    <$t>::NAN,
                    -<$t>::NAN,
                    <$t>::from_bits(<$t>::NAN.to_bits() | 0x5), // another payload
                    0.0,
                    -0.0,
                    <$t>::from_bits(1),
                    -<$t>::from_bits(3),
                    <$t>::MIN_POSITIVE,
                    <$t>::MAX,
                    <$t>::MIN,
                    1.0,
                    -1.0,
                ]
            }
            fn exact(self) -> u64 {
                self.to_bits() as u64
            }
        }
    };
}
float_test_key!(f32);
float_test_key!(f64);

macro_rules! half_test_key {
    ($t:ty) => {
        impl TestKey for $t {
            fn random(bits: u64) -> Self {
                // ±1000: 16-bit floats hold it coarsely (f16 to 0.5, bf16 to 4), so ties
                // are common, as in real half-precision data.
                <$t>::from_f64((bits >> 11) as f64 / (1u64 << 53) as f64 * 2000.0 - 1000.0)
            }
            fn from_rank(rank: i64) -> Self {
                // Exact up to the type's integers (2048 for f16, 256 for bf16), monotone
                // beyond (rounding, then ±inf): never out of order.
                <$t>::from_f64(rank as f64 * 0.5)
            }
            fn specials() -> Vec<Self> {
                vec![
                    <$t>::NEG_INFINITY,
                    <$t>::INFINITY,
                    <$t>::NAN,
                    -<$t>::NAN,
                    <$t>::from_bits(<$t>::NAN.to_bits() | 0x5), // another payload
                    <$t>::ZERO,
                    <$t>::NEG_ZERO,
                    <$t>::from_bits(1),
                    -<$t>::from_bits(3),
                    <$t>::MIN_POSITIVE,
                    <$t>::MAX,
                    <$t>::MIN,
                    <$t>::ONE,
                    <$t>::NEG_ONE,
                ]
            }
            fn exact(self) -> u64 {
                self.to_bits() as u64
            }
        }
    };
}
half_test_key!(half::f16);
half_test_key!(half::bf16);

macro_rules! int_test_key {
    ($t:ty) => {
        impl TestKey for $t {
            fn random(bits: u64) -> Self {
                bits as $t
            }
            fn from_rank(rank: i64) -> Self {
                // Offset so that unsigned types keep the order of negative ranks too.
                (rank + (1 << 30)) as $t
            }
            fn specials() -> Vec<Self> {
                vec![<$t>::MIN, <$t>::MAX, 0 as $t, 1 as $t, (<$t>::MAX / 2) as $t, <$t>::MIN.wrapping_add(1)]
            }
            fn exact(self) -> u64 {
                self as u64
            }
        }
    };
}
int_test_key!(i32);
int_test_key!(u32);
int_test_key!(i64);
int_test_key!(u64);

/// Runs the top-k and compares with the oracle: exactly for a sorted result; for an
/// unsorted one, as a set (after sorting it the oracle's way). Returns the indices as they
/// came.
pub fn check_top_k<K: TestKey>(
    gpu: &Gpu,
    data: &[K],
    k: usize,
    options: gpu_select::TopKOptions,
    context: &str,
) -> Vec<u64> {
    let device_data = gpu.upload(data).unwrap();
    let top = gpu.top_k(&device_data, k, &options).unwrap_or_else(|e| panic!("{context}: {e}"));
    let (values, indices) = (gpu.download(&top.values).unwrap(), gpu.download(&top.indices).unwrap());
    let sorted = gpu_select::reference::sort_pairs(data, options.order);
    let expected: Vec<(u64, u64)> = sorted.iter().take(k).map(|&(key, i)| (key.exact(), i)).collect();
    let mut got: Vec<(u64, u64)> = values.iter().map(|v| v.exact()).zip(indices.iter().copied()).collect();
    if !options.sorted {
        // Each output must be the input it names; then order them as the oracle does.
        for (&(bits, index), value) in got.iter().zip(&values) {
            assert_eq!(
                data[index as usize].exact(),
                bits,
                "{context}: output {value:?} is not input {index}"
            );
        }
        let rank_of: std::collections::HashMap<u64, usize> =
            sorted.iter().enumerate().map(|(r, &(_, i))| (i, r)).collect();
        got.sort_by_key(|&(_, index)| rank_of[&index]);
    }
    assert_eq!(got, expected, "{context}");
    indices
}
