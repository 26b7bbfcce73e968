//! Top-k sampling's first step for a batch of language-model logits: the 50 largest logits
//! of each of 64 rows of a 131 072-token vocabulary (4 rows of 2 048 on the emulator).
//!
//! `cargo run --release --example rows`. It opens the GPU when there is one, else the
//! emulator, says which, times opening the device and the first call (which loads the
//! kernels) apart from a second one, and checks every row against a sort on the CPU.

use std::time::Instant;

use gpu_select::{BackendKind, Gpu, Keys, Order, TopKOptions, reference};
use rand::{RngExt, SeedableRng, rngs::StdRng};

fn main() -> gpu_select::Result<()> {
    let opened = Instant::now();
    let gpu = Gpu::from_env()?;
    let open_ms = opened.elapsed().as_secs_f64() * 1e3;
    println!("backend: {}", gpu.describe());

    let (batch, vocabulary) = if gpu.backend() == BackendKind::Cuda { (64, 131_072) } else { (4, 2_048) };
    let k = 50;
    let mut rng = StdRng::seed_from_u64(11);
    // Logits: mostly small, a few tokens far ahead, as a trained model's are.
    let logits: Vec<f32> = (0..batch * vocabulary)
        .map(|_| {
            let x = rng.random::<f32>();
            if x > 0.9995 { 10.0 + 10.0 * rng.random::<f32>() } else { 4.0 * x - 2.0 }
        })
        .collect();
    let data = gpu.upload(&logits)?;

    let mut calls_ms = Vec::new();
    let mut top = None;
    for _ in 0..2 {
        let started = Instant::now();
        let result = gpu.top_k(Keys::rows(&data, batch, vocabulary), k, &TopKOptions::largest())?;
        gpu.synchronize()?;
        calls_ms.push(started.elapsed().as_secs_f64() * 1e3);
        top = Some(result);
    }
    let top = top.expect("two calls ran");
    let (values, tokens) = (gpu.download(&top.values)?, gpu.download(&top.indices)?);

    println!("opened the device in {open_ms:.1} ms");
    let loads = if gpu.backend() == BackendKind::Cuda { " (loads the kernels)" } else { "" };
    println!(
        "top-{k} of {batch} rows × {vocabulary}: first call {:.1} ms{loads}, second {:.3} ms",
        calls_ms[0], calls_ms[1]
    );
    println!("row 0's five most likely tokens: {:?}", &tokens[..5]);
    for row in 0..batch {
        let expected: Vec<(f32, u64)> =
            reference::sort_pairs(&logits[row * vocabulary..(row + 1) * vocabulary], Order::Largest)
                .into_iter()
                .take(k)
                .collect();
        let got: Vec<(f32, u64)> = values[row * k..(row + 1) * k]
            .iter()
            .copied()
            .zip(tokens[row * k..(row + 1) * k].iter().copied())
            .collect();
        assert_eq!(got, expected, "row {row} differs from the CPU's sort");
    }
    println!("every row matches the CPU's sort");
    Ok(())
}
