//! Run 231's sweep: bucket multiselect's last pass placed from the data or after a filter,
//! by the number of quantiles (numpy's linear method), 2^28 f32, host clock, median of 5.
use gpu_select::{Gpu, QuantileOptions, Tuning};
fn main() {
    let base = Gpu::from_env().unwrap();
    let n = 1usize << 28;
    let mut state = 12345u64;
    let mut next = || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64 };
    for shape in ["uniform", "normal"] {
        let keys: Vec<f32> = (0..n).map(|_| match shape {
            "uniform" => next() as f32,
            _ => { let (u, v) = (next(), next()); ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32 }
        }).collect();
        let data = base.upload(&keys).unwrap();
        for m in [101usize, 201, 301, 401, 601, 1001] {
            let qs: Vec<f64> = (0..m).map(|i| i as f64 / (m - 1) as f64).collect();
            let mut line = format!("{shape} m={m}:");
            for place_labels in [u32::MAX, 0] {
                let gpu = base.with_tuning(Tuning { multiselect_place_labels: place_labels, ..*base.tuning() });
                gpu.quantiles(&data, &qs, &QuantileOptions::default()).unwrap();
                let mut times: Vec<f64> = (0..5).map(|_| {
                    let t = std::time::Instant::now();
                    gpu.quantiles(&data, &qs, &QuantileOptions::default()).unwrap();
                    t.elapsed().as_secs_f64() * 1e3
                }).collect();
                times.sort_by(f64::total_cmp);
                line += &format!(" {} {:.3} ms", if place_labels == 0 { "filter first" } else { "place from data" }, times[2]);
            }
            println!("{line}");
        }
    }
}
