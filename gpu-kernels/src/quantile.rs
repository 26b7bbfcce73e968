//! numpy's thirteen quantile methods: where quantile `q` of `n` sorted keys lies (one or two
//! ranks and a weight), and the interpolation between them, written from numpy's
//! definitions (`numpy/lib/_function_base_impl.py`, numpy 2.x), in `f64`.
//!
//! With `v` numpy's *virtual index* for the method:
//!
//! | method | `v` | result |
//! |---|---|---|
//! | `inverted_cdf` | `n·q − 1` | key `⌊v⌋` when `v` is whole, else `⌊v⌋ + 1` (at least 0) |
//! | `averaged_inverted_cdf` | `n·q − 1` | `lerp(⌊v⌋, ⌊v⌋+1, γ)`, γ = ½ when `v` is whole, else 1 |
//! | `closest_observation` | `n·q − 1.5` | key `⌊v⌋` when `v` is whole and odd (an even order statistic counted from 1), else `⌊v⌋ + 1` (at least 0) |
//! | `interpolated_inverted_cdf` | `n·q + (0 + q·(1 − 0 − 1)) − 1` | `lerp(⌊v⌋, ⌊v⌋+1, v − ⌊v⌋)` |
//! | `hazen` | α = β = ½ | as above |
//! | `weibull` | α = β = 0 | as above |
//! | `linear` (numpy's default) | `(n − 1)·q` | as above |
//! | `median_unbiased` | α = β = ⅓ | as above |
//! | `normal_unbiased` | α = β = ⅜ | as above |
//! | `lower` / `higher` / `nearest` | `(n − 1)·q` | key `⌊v⌋` / `⌈v⌉` / `v` rounded half to even |
//! | `midpoint` | `(⌊(n−1)q⌋ + ⌈(n−1)q⌉) / 2` | `lerp(⌊v⌋, ⌊v⌋+1, γ)`, γ = 0 when `v` is whole, else ½ |
//!
//! where the α, β rows are `v = n·q + (α + q·(1 − α − β)) − 1`. As numpy does: when
//! `v ≥ n − 1` both neighbours are the last key (and γ is taken from `v + 1`), when `v < 0`
//! both are the first; `lerp(a, b, γ) = a + (b − a)·γ`, or `b − (b − a)·(1 − γ)` when
//! `γ ≥ ½`. So a quantile between two equal infinite keys is NaN (`inf − inf`), as numpy's.
//!
//! One definition for the host (which names a quantile's ranks and interpolates on the CPU
//! where it must) and the kernels (which interpolate rows of sorted keys on the device),
//! so both give the same `f64`s. `no_std` has no `floor`: the few roundings it needs are
//! written below from exact conversions, and their tests compare them with `std`'s.

/// One of numpy's quantile methods (`numpy.quantile(…, method=…)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QuantileMethod {
    /// Hyndman–Fan 1: the inverse of the empirical distribution function.
    InvertedCdf,
    /// Hyndman–Fan 2: its average at discontinuities.
    AveragedInvertedCdf,
    /// Hyndman–Fan 3: the nearest key, ties to the even index.
    ClosestObservation,
    /// Hyndman–Fan 4: linear interpolation of the empirical distribution function.
    InterpolatedInvertedCdf,
    /// Hyndman–Fan 5: piecewise linear, knots at the middles of the steps.
    Hazen,
    /// Hyndman–Fan 6: `p(k) = k / (n + 1)`.
    Weibull,
    /// Hyndman–Fan 7, numpy's default: `p(k) = (k − 1) / (n − 1)`.
    #[default]
    Linear,
    /// Hyndman–Fan 8: medians unbiased whatever the distribution.
    MedianUnbiased,
    /// Hyndman–Fan 9: unbiased for normal data.
    NormalUnbiased,
    /// The key at `⌊(n − 1)·q⌋`.
    Lower,
    /// The key at `⌈(n − 1)·q⌉`.
    Higher,
    /// The key at `(n − 1)·q` rounded, halves to even.
    Nearest,
    /// The mean of `lower` and `higher`.
    Midpoint,
}

/// Where a quantile lies among `n` sorted keys: its value is
/// [`QuantilePoint::value`]`(key[below], key[above])`, the keys as `f64`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantilePoint {
    /// Rank of the lower neighbour.
    pub below: u64,
    /// Rank of the upper neighbour (`below` or `below + 1`).
    pub above: u64,
    /// numpy's γ: the weight of the upper neighbour (0 for the methods that pick one key).
    pub weight: f64,
    /// Whether the value is interpolated (numpy's `_lerp`, even between equal keys) rather
    /// than one key taken as it is (`inverted_cdf`, `closest_observation`, `lower`,
    /// `higher`, `nearest`).
    pub interpolates: bool,
}

impl QuantilePoint {
    /// numpy's `_lerp` of the two neighbours' values.
    pub fn value(&self, below: f64, above: f64) -> f64 {
        if !self.interpolates {
            return below;
        }
        let difference = above - below;
        if self.weight >= 0.5 {
            above - difference * (1.0 - self.weight)
        } else {
            below + difference * self.weight
        }
    }
}

impl QuantileMethod {
    /// All thirteen, in numpy's order.
    pub const ALL: [QuantileMethod; 13] = [
        QuantileMethod::InvertedCdf,
        QuantileMethod::AveragedInvertedCdf,
        QuantileMethod::ClosestObservation,
        QuantileMethod::InterpolatedInvertedCdf,
        QuantileMethod::Hazen,
        QuantileMethod::Weibull,
        QuantileMethod::Linear,
        QuantileMethod::MedianUnbiased,
        QuantileMethod::NormalUnbiased,
        QuantileMethod::Lower,
        QuantileMethod::Higher,
        QuantileMethod::Nearest,
        QuantileMethod::Midpoint,
    ];

    /// numpy's name for it (`"linear"`, `"median_unbiased"`, …).
    pub fn numpy_name(self) -> &'static str {
        match self {
            QuantileMethod::InvertedCdf => "inverted_cdf",
            QuantileMethod::AveragedInvertedCdf => "averaged_inverted_cdf",
            QuantileMethod::ClosestObservation => "closest_observation",
            QuantileMethod::InterpolatedInvertedCdf => "interpolated_inverted_cdf",
            QuantileMethod::Hazen => "hazen",
            QuantileMethod::Weibull => "weibull",
            QuantileMethod::Linear => "linear",
            QuantileMethod::MedianUnbiased => "median_unbiased",
            QuantileMethod::NormalUnbiased => "normal_unbiased",
            QuantileMethod::Lower => "lower",
            QuantileMethod::Higher => "higher",
            QuantileMethod::Nearest => "nearest",
            QuantileMethod::Midpoint => "midpoint",
        }
    }

    /// The method numpy calls `name`.
    pub fn from_numpy_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.numpy_name() == name)
    }

    /// Where quantile `q` (in `[0, 1]`, checked by the caller) of `n ≥ 1` sorted keys lies.
    ///
    /// ```
    /// use gpu_select_kernels::quantile::{QuantileMethod, QuantilePoint};
    ///
    /// // The median of 4 keys: halfway between ranks 1 and 2.
    /// let median = QuantileMethod::Linear.point(4, 0.5);
    /// assert_eq!(median, QuantilePoint { below: 1, above: 2, weight: 0.5, interpolates: true });
    /// assert_eq!(median.value(20.0, 30.0), 25.0);
    /// assert_eq!(QuantileMethod::Lower.point(4, 0.5).below, 1);
    /// assert_eq!(QuantileMethod::InvertedCdf.point(4, 0.5).below, 1);
    /// ```
    pub fn point(self, n: u64, q: f64) -> QuantilePoint {
        let count = n as f64;
        let last = n - 1;
        let one = |index: f64| {
            let at = (index.max(0.0) as u64).min(last);
            QuantilePoint { below: at, above: at, weight: 0.0, interpolates: false }
        };
        let alpha_beta = |alpha: f64, beta: f64| count * q + (alpha + q * (1.0 - alpha - beta)) - 1.0;
        let (virtual_index, fix): (f64, fn(f64, f64) -> f64) = match self {
            QuantileMethod::InvertedCdf => {
                let v = count * q - 1.0;
                let previous = floor(v);
                return one(if v - previous == 0.0 { previous } else { previous + 1.0 });
            }
            QuantileMethod::ClosestObservation => {
                let v = count * q - 1.0 - 0.5;
                let previous = floor(v);
                // The nearest even order statistic, counted from 1: an odd index from 0.
                let odd = !is_whole(previous * 0.5);
                return one(if v - previous == 0.0 && odd { previous } else { previous + 1.0 });
            }
            QuantileMethod::Lower => return one(floor(last as f64 * q)),
            QuantileMethod::Higher => return one(ceil(last as f64 * q)),
            QuantileMethod::Nearest => return one(round_ties_even(last as f64 * q)),
            QuantileMethod::AveragedInvertedCdf => {
                (count * q - 1.0, |gamma, _| if gamma == 0.0 { 0.5 } else { 1.0 })
            }
            QuantileMethod::Midpoint => {
                let v = last as f64 * q;
                (0.5 * (floor(v) + ceil(v)), |_, index| if is_whole(index) { 0.0 } else { 0.5 })
            }
            QuantileMethod::InterpolatedInvertedCdf => (alpha_beta(0.0, 1.0), |gamma, _| gamma),
            QuantileMethod::Hazen => (alpha_beta(0.5, 0.5), |gamma, _| gamma),
            QuantileMethod::Weibull => (alpha_beta(0.0, 0.0), |gamma, _| gamma),
            QuantileMethod::Linear => (last as f64 * q, |gamma, _| gamma),
            QuantileMethod::MedianUnbiased => (alpha_beta(1.0 / 3.0, 1.0 / 3.0), |gamma, _| gamma),
            QuantileMethod::NormalUnbiased => (alpha_beta(3.0 / 8.0, 3.0 / 8.0), |gamma, _| gamma),
        };
        // numpy's `_get_indexes`: past the last key both neighbours are the last (its
        // previous index is −1, from which γ is measured), before the first both the first.
        let (below, above, previous) = if virtual_index >= last as f64 {
            (last, last, -1.0)
        } else if virtual_index < 0.0 {
            (0, 0, 0.0)
        } else {
            let previous = floor(virtual_index);
            (previous as u64, previous as u64 + 1, previous)
        };
        QuantilePoint {
            below,
            above,
            weight: fix(virtual_index - previous, virtual_index),
            interpolates: true,
        }
    }
}

impl QuantileMethod {
    /// The value carried in launch parameters (its place in [`QuantileMethod::ALL`]).
    pub const fn to_raw(self) -> u32 {
        self as u32
    }

    /// Reads the value carried in launch parameters; anything out of range is `Linear`.
    pub const fn from_raw(raw: u32) -> Self {
        if (raw as usize) < Self::ALL.len() { Self::ALL[raw as usize] } else { QuantileMethod::Linear }
    }
}

/// Above this every `f64` is whole (2^52).
const WHOLE_ABOVE: f64 = 4_503_599_627_370_496.0;

/// `x.floor()` for a finite or infinite `x`, as `std`'s (a whole `x`, `-0.0` too, comes
/// back as it is).
#[inline(always)]
fn floor(x: f64) -> f64 {
    if x.abs() >= WHOLE_ABOVE {
        return x;
    }
    // Exact: |x| < 2^52 fits an i64, and a whole number of that size an f64.
    let toward_zero = x as i64 as f64;
    if toward_zero == x {
        x
    } else if x < 0.0 {
        toward_zero - 1.0
    } else {
        toward_zero
    }
}

/// `x.ceil()` for a finite `x`, as `std`'s.
#[inline(always)]
fn ceil(x: f64) -> f64 {
    -floor(-x)
}

/// Whether a finite `x` is a whole number.
#[inline(always)]
fn is_whole(x: f64) -> bool {
    floor(x) == x
}

/// `x.round_ties_even()` for a finite `x`, up to the sign of a zero result (only turned
/// into a rank here).
#[inline(always)]
fn round_ties_even(x: f64) -> f64 {
    let below = floor(x);
    // Exact: a fraction of an f64 is an f64.
    let fraction = x - below;
    if fraction > 0.5 || (fraction == 0.5 && !is_whole(below * 0.5)) { below + 1.0 } else { below }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn roundings_are_std_s() {
        let mut values = std::vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.49999999999999994,
            1e-300,
            -1e-300,
            4503599627370495.5,
            -4503599627370495.5,
            4503599627370496.0,
            9007199254740993.0,
            1e300,
            -1e300,
            123.75,
            -123.25,
            7.0,
            -7.0,
            100.0 / 3.0
        ];
        // Quantile-like products: n·q and (n − 1)·q over many n and q.
        for n in [1u64, 2, 3, 7, 10, 101, 1000, 1 << 20, (1 << 40) + 3] {
            for i in 0..=64 {
                let q = i as f64 / 64.0;
                values.extend([n as f64 * q, (n - 1) as f64 * q, n as f64 * q - 1.0, n as f64 * q - 1.5]);
            }
        }
        for x in values {
            assert_eq!(floor(x).to_bits(), x.floor().to_bits(), "floor({x})");
            assert_eq!(ceil(x).to_bits(), x.ceil().to_bits(), "ceil({x})");
            assert_eq!(round_ties_even(x), x.round_ties_even(), "round_ties_even({x})");
            assert_eq!(is_whole(x), x % 1.0 == 0.0, "is_whole({x})");
        }
    }

    #[test]
    fn raw_values_round_trip() {
        for method in QuantileMethod::ALL {
            assert_eq!(QuantileMethod::from_raw(method.to_raw()), method);
        }
        assert_eq!(QuantileMethod::from_raw(13), QuantileMethod::Linear);
    }
}
