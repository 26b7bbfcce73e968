//! The 32 largest of 16 M random floats (64 K on the emulator), with their indices.
//!
//! `cargo run --release --example top_k`. It opens the GPU when there is one, else the
//! emulator, says which, times opening the device and the first call (which loads the
//! kernels) apart from a second one, and checks the result against a sort on the CPU.

use std::time::Instant;

use gpu_select::{BackendKind, Gpu, Order, TopKOptions, reference};
use rand::{RngExt, SeedableRng, rngs::StdRng};

fn main() -> gpu_select::Result<()> {
    let opened = Instant::now();
    let gpu = Gpu::from_env()?;
    let open_ms = opened.elapsed().as_secs_f64() * 1e3;
    println!("backend: {}", gpu.describe());

    let n = if gpu.backend() == BackendKind::Cuda { 1 << 24 } else { 1 << 16 };
    let k = 32;
    let mut rng = StdRng::seed_from_u64(7);
    let keys: Vec<f32> = (0..n).map(|_| rng.random::<f32>()).collect();
    let data = gpu.upload(&keys)?;

    // The first call loads the kernels; the second shows the steady state.
    let mut calls_ms = Vec::new();
    let mut top = None;
    for _ in 0..2 {
        let started = Instant::now();
        let result = gpu.top_k(&data, k, &TopKOptions::largest())?;
        gpu.synchronize()?;
        calls_ms.push(started.elapsed().as_secs_f64() * 1e3);
        top = Some(result);
    }
    let top = top.expect("two calls ran");
    let (values, indices) = (gpu.download(&top.values)?, gpu.download(&top.indices)?);

    println!("opened the device in {open_ms:.1} ms");
    let loads = if gpu.backend() == BackendKind::Cuda { " (loads the kernels)" } else { "" };
    println!(
        "top-k of {n} f32, k = {k}: first call {:.1} ms{loads}, second {:.3} ms",
        calls_ms[0], calls_ms[1]
    );
    for (value, index) in values.iter().zip(&indices).take(5) {
        println!("  keys[{index}] = {value}");
    }
    let expected: Vec<(f32, u64)> =
        reference::sort_pairs(&keys, Order::Largest).into_iter().take(k).collect();
    let got: Vec<(f32, u64)> = values.into_iter().zip(indices).collect();
    assert_eq!(got, expected, "the GPU's top-k differs from the CPU's");
    println!("matches the CPU's sort");
    Ok(())
}
