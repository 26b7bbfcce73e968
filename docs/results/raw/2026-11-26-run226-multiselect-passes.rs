use gpu_select::{Gpu, QuantileOptions, Tuning};
fn main() {
    let base = Gpu::from_env().unwrap();
    let log_n: u32 = std::env::var("LOG_N").ok().and_then(|v| v.parse().ok()).unwrap_or(28);
    let n = 1usize << log_n;
    let mut state = 12345u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let configs: &[(&str, usize, u32)] = &[
        ("uniform", 101, 1024),
        ("uniform", 101, 1024),
        ("uniform", 101, 16384),
        ("uniform", 1001, 1024),
        ("uniform", 1001, 16384),
        ("normal", 101, 1024),
        ("normal", 1001, 1024),
        ("normal", 1001, 16384),
        ("zipf", 101, 1024),
        ("zipf", 1001, 1024),
    ];
    let mut current = String::new();
    let mut data = None;
    for &(shape, m, sample) in configs {
        if shape != current {
            let keys: Vec<f32> = (0..n)
                .map(|_| match shape {
                    "uniform" => next() as f32,
                    "normal" => {
                        let (u, v) = (next(), next());
                        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
                    }
                    _ => next().powf(-1.0 / 1.1).floor() as f32,
                })
                .collect();
            data = Some(base.upload(&keys).unwrap());
            current = shape.to_string();
        }
        let gpu = base.with_tuning(Tuning { multiselect_sample: sample, ..*base.tuning() });
        let qs: Vec<f64> = (0..m).map(|i| i as f64 / (m - 1) as f64).collect();
        let t = std::time::Instant::now();
        gpu.quantiles(data.as_ref().unwrap(), &qs, &QuantileOptions::default()).unwrap();
        println!("CONFIG {shape} m={m} sample={sample}: {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
    }
}
