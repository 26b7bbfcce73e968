//! The cost model behind `Algorithm::Auto`: a predicted time for each top-k algorithm from
//! `n`, `k`, the key size and the device (its multiprocessors and memory bandwidth).
//!
//! In the spirit of the bitonic top-k paper's §7, each algorithm's time is a fixed part
//! (launches, the small passes) plus a part that grows with `n`, bounded below by the time to
//! read the data as often as the algorithm must. The per-input part is *compute*, not memory:
//! ncu shows the big passes of both algorithms compute-bound on an H100 and an H200 (run 12;
//! the bitonic times are the same on both GPUs although the H200 reads 30 % faster), so it is
//! expressed per input per multiprocessor and scales with the multiprocessor count.
//!
//! The constants are fitted to `cargo xtask bench` on an H100 (run 13 in `docs/results/`:
//! 2^20 and 2^28 f32 keys, two points per line); the bitonic sizes between k = 32 and k = 256
//! are interpolated. `cargo xtask bench` prints each prediction beside the measurement.

use super::Algorithm;

/// Multiprocessors of the GPU the constants were fitted on (H100 SXM).
const FITTED_MULTIPROCESSORS: f64 = 132.0;

/// A line `fixed_ms + per_input_ns · n` (per-input time on the fitted GPU).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Line {
    fixed_ms: f64,
    per_input_ns: f64,
    /// Reads of the data the algorithm needs at least (the bandwidth bound).
    reads: f64,
}

/// Bitonic top-k for `k ≤ 32·q`, by `q` = 1, 2, 4, 8 (2 and 4 interpolated).
const BITONIC: [Line; 4] = [
    Line { fixed_ms: 0.081, per_input_ns: 2.48e-3, reads: 1.0 },
    Line { fixed_ms: 0.100, per_input_ns: 3.6e-3, reads: 1.0 },
    Line { fixed_ms: 0.130, per_input_ns: 5.8e-3, reads: 1.0 },
    Line { fixed_ms: 0.165, per_input_ns: 9.27e-3, reads: 1.0 },
];
/// Bitonic top-k for k = 1 (the pruning bound prunes almost everything at once).
const BITONIC_K1: Line = Line { fixed_ms: 0.040, per_input_ns: 1.84e-3, reads: 1.0 };
/// Radix select, any `k`, 32-bit keys (count, then two filters over the data for uniform
/// floats); 64-bit keys run twice the levels.
const RADIX: Line = Line { fixed_ms: 0.081, per_input_ns: 9.28e-3, reads: 3.0 };
/// The block sort of at most 2048 keys: one launch.
const BLOCK_SORT: Line = Line { fixed_ms: 0.012, per_input_ns: 0.0, reads: 1.0 };

/// A read-only pass reaches this share of the peak bandwidth the driver reports (measured:
/// 3.04 of 3.35 TB/s on the H100, 4.30 of 4.8 TB/s on the H200).
pub(crate) const READ_EFFICIENCY: f64 = 0.9;

/// What the model knows of the device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Device {
    pub(crate) multiprocessors: u32,
    /// Bytes per second a read-only pass reaches (0 when unknown: the bound is dropped).
    pub(crate) read_bytes_per_s: f64,
}

/// The predicted time in milliseconds of `algorithm` (not `Auto`) on `n` keys of
/// `key_bytes` bytes; `None` when it does not take the shape.
pub(crate) fn predict_ms(
    algorithm: Algorithm,
    n: u64,
    k: u64,
    key_bytes: usize,
    device: Device,
) -> Option<f64> {
    if !algorithm.takes(n, k) {
        return None;
    }
    let line = match algorithm {
        Algorithm::BlockSort => BLOCK_SORT,
        Algorithm::Bitonic => {
            if k == 1 {
                BITONIC_K1
            } else {
                BITONIC[(k.div_ceil(32).next_power_of_two().trailing_zeros()) as usize]
            }
        }
        Algorithm::RadixSelect => {
            let wide = if key_bytes > 4 { 2.0 } else { 1.0 };
            Line { fixed_ms: RADIX.fixed_ms * wide, ..RADIX }
        }
        Algorithm::Auto | Algorithm::SampleSelect => return None,
    };
    let scale = FITTED_MULTIPROCESSORS / device.multiprocessors.max(1) as f64;
    // 64-bit keys are not measured yet: the same work per input is assumed, and the read
    // bound doubles with the bytes.
    let compute_ms = line.per_input_ns * 1e-6 * n as f64 * scale;
    let read_ms = if device.read_bytes_per_s > 0.0 {
        line.reads * (n as f64 * key_bytes as f64) / device.read_bytes_per_s * 1e3
    } else {
        0.0
    };
    Some(line.fixed_ms + compute_ms.max(read_ms))
}

/// The algorithm with the smallest predicted time among those that take the shape.
pub(crate) fn cheapest(n: u64, k: u64, key_bytes: usize, device: Device) -> Algorithm {
    [Algorithm::BlockSort, Algorithm::Bitonic, Algorithm::RadixSelect]
        .into_iter()
        .filter_map(|algorithm| Some((algorithm, predict_ms(algorithm, n, k, key_bytes, device)?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(Algorithm::RadixSelect, |(algorithm, _)| algorithm)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: Device = Device { multiprocessors: 132, read_bytes_per_s: 3.04e12 };

    #[test]
    fn predictions_reproduce_the_fitted_measurements() {
        let n = 1u64 << 28;
        // Run 13 (H100, ms): the model must land within 10 % of what it was fitted to.
        for (algorithm, k, measured) in [
            (Algorithm::Bitonic, 1, 0.533),
            (Algorithm::Bitonic, 32, 0.747),
            (Algorithm::Bitonic, 256, 2.654),
            (Algorithm::RadixSelect, 1024, 2.572),
        ] {
            let predicted = predict_ms(algorithm, n, k, 4, H100).unwrap();
            assert!(
                (predicted / measured - 1.0).abs() < 0.1,
                "{algorithm:?} k={k}: {predicted} vs {measured}"
            );
        }
    }

    #[test]
    fn auto_picks_what_the_measurements_say() {
        assert_eq!(cheapest(1000, 10, 4, H100), Algorithm::BlockSort);
        assert_eq!(cheapest(1 << 28, 32, 4, H100), Algorithm::Bitonic);
        assert_eq!(cheapest(1 << 28, 1024, 4, H100), Algorithm::RadixSelect);
        assert_eq!(cheapest(1 << 33, 8, 4, H100), Algorithm::RadixSelect);
        assert!(predict_ms(Algorithm::Bitonic, 1 << 20, 257, 4, H100).is_none());
        assert!(predict_ms(Algorithm::BlockSort, 2049, 1, 4, H100).is_none());
    }
}
