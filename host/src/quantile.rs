//! numpy's quantiles on the host: the quantiles' checks, their ranks for a multiselect, and
//! the interpolation of the keys found. The methods' formulas live in the kernel crate
//! ([`gpu_select_kernels::quantile`]), one definition for the host and the device.

pub use gpu_select_kernels::quantile::{QuantileMethod, QuantilePoint};

/// Checks that every quantile is in `[0, 1]` (NaN is not).
pub(crate) fn check_quantiles(qs: &[f64]) -> crate::Result<()> {
    match qs.iter().find(|q| !(0.0..=1.0).contains(*q)) {
        Some(q) => Err(crate::Error::invalid(format!("quantile {q} is outside [0, 1]"))),
        None => Ok(()),
    }
}

/// The points of quantiles `qs` of `n` keys of which `nan_count` are NaN, and the ranks
/// (two per point) a multiselect must find; no points when every quantile is NaN (a NaN
/// propagates, or no key is left).
pub(crate) fn quantile_ranks(
    n: u64,
    nan_count: u64,
    qs: &[f64],
    options: &crate::QuantileOptions,
) -> (Option<Vec<QuantilePoint>>, Vec<u64>) {
    let counted = match options.nan {
        crate::NanPolicy::Propagate if nan_count > 0 => 0,
        crate::NanPolicy::Propagate => n,
        crate::NanPolicy::Omit => n - nan_count,
    };
    if counted == 0 {
        return (None, Vec::new());
    }
    let points: Vec<QuantilePoint> = qs.iter().map(|&q| options.method.point(counted, q)).collect();
    let ranks = points.iter().flat_map(|p| [p.below, p.above]).collect();
    (Some(points), ranks)
}

/// The quantiles from their points and the keys of their ranks (two per point, as
/// [`quantile_ranks`] named them); `count` NaNs without points.
pub(crate) fn quantile_values<K: gpu_select_kernels::Key>(
    points: Option<&[QuantilePoint]>,
    keys: &[K],
    count: usize,
) -> Vec<f64> {
    let Some(points) = points else {
        return vec![f64::NAN; count];
    };
    debug_assert_eq!(points.len(), count);
    debug_assert_eq!(keys.len(), 2 * count);
    points
        .iter()
        .zip(keys.chunks_exact(2))
        .map(|(point, pair)| point.value(pair[0].to_f64(), pair[1].to_f64()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for method in QuantileMethod::ALL {
            assert_eq!(QuantileMethod::from_numpy_name(method.numpy_name()), Some(method));
        }
        assert_eq!(QuantileMethod::from_numpy_name("cubic"), None);
    }

    #[test]
    fn points_stay_inside() {
        for method in QuantileMethod::ALL {
            for n in [1u64, 2, 3, 10, 101] {
                for q in [0.0, 1e-9, 0.1, 0.25, 0.5, 0.75, 0.999, 1.0] {
                    let p = method.point(n, q);
                    assert!(p.below <= p.above && p.above < n, "{method:?} {n} {q}: {p:?}");
                    assert!(p.above - p.below <= 1);
                }
            }
        }
    }
}
