//! Many callers and a full device: eight threads making mixed calls on one `Gpu` handle
//! ([`KINDS`] kinds of call: top-k by every algorithm, fused top-k, rows, exact and
//! approximate selections, multiselect of both algorithms and quantiles, segment sorts,
//! k-NN — every kernel family), every result checked against the CPU; and (GPU only) a
//! device filled first, where every operation either answers correctly or returns
//! `Error::OutOfMemory`, and the handle works again once the memory is freed.

mod common;

use common::{gpu, on_emulator};
use gpu_select::{
    Algorithm, DeviceBuffer, Error, Gpu, InputFilter, KeyTransform, Keys, Metric, MultiselectAlgorithm,
    NanPolicy, Order, PADDING_INDEX, QuantileMethod, QuantileOptions, SelectAlgorithm, SelectOptions,
    TopKOptions, Vectors, reference,
};

/// The kinds of call of the mix: call `c` is kind `c % KINDS`, so any `KINDS` consecutive
/// calls (of one thread, or call `i` of threads `0 … KINDS − 1`) make every kind.
const KINDS: usize = 16;
use rand::{RngExt, SeedableRng, rngs::StdRng};

/// One input of the mix, on the device, with what the CPU says of it.
struct Input {
    keys: Vec<f32>,
    data: DeviceBuffer<f32>,
    /// The keys sorted ascending, with their positions (ties by position).
    ascending: Vec<(f32, u64)>,
}

impl Input {
    fn new(gpu: &Gpu, keys: Vec<f32>) -> Self {
        let ascending = reference::sort_pairs(&keys, Order::Smallest);
        Input { data: gpu.upload(&keys).unwrap(), keys, ascending }
    }
}

/// Call `call` of the mix on `input`; panics with the call's name when a result is wrong.
fn mixed_call(gpu: &Gpu, input: &Input, call: usize, rng: &mut StdRng) {
    let n = input.keys.len();
    let k = rng.random_range(1..=n.min(300));
    let positions =
        |ascending: &[(f32, u64)], k: usize| ascending[..k].iter().map(|&(_, i)| i).collect::<Vec<_>>();
    match call % KINDS {
        kind @ 0..=5 => {
            let algorithm = [
                Algorithm::Auto,
                Algorithm::Bitonic,
                Algorithm::RadixSelect,
                Algorithm::SampleSelect,
                Algorithm::PerThreadHeap,
                Algorithm::BucketSelect,
            ][kind];
            let top = gpu.top_k(&input.data, k, &TopKOptions::smallest().with_algorithm(algorithm)).unwrap();
            assert_eq!(
                gpu.download(&top.indices).unwrap(),
                positions(&input.ascending, k),
                "top-k {algorithm:?} k={k}"
            );
        }
        6 => {
            // Sort & choose sorts every key: a smaller share of the input.
            let len = n.min(2000);
            let k = k.min(len);
            let options = TopKOptions::smallest().with_algorithm(Algorithm::SortAndChoose);
            let top = gpu.top_k(input.data.slice(..len), k, &options).unwrap();
            let ascending = reference::sort_pairs(&input.keys[..len], Order::Smallest);
            assert_eq!(gpu.download(&top.indices).unwrap(), positions(&ascending, k), "sort & choose k={k}");
        }
        7 => {
            // Fused: the largest magnitudes among the keys in [0.25, 3.5).
            let filter = InputFilter::Range { low: 0.25, high: 3.5 };
            let keys = Keys::new(&input.data).with_filter(filter).with_transform(KeyTransform::Magnitude);
            let top = gpu.top_k(keys, k, &TopKOptions::largest()).unwrap();
            let mut admitted: Vec<(f32, u64)> = input
                .keys
                .iter()
                .enumerate()
                .filter(|&(_, &key)| (0.25..3.5).contains(&key))
                .map(|(i, &key)| (key, i as u64))
                .collect();
            admitted.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut want: Vec<u64> = admitted.iter().take(k).map(|&(_, i)| i).collect();
            want.resize(k, PADDING_INDEX);
            assert_eq!(gpu.download(&top.indices).unwrap(), want, "fused top-k k={k}");
        }
        8 => {
            // Rows: the keys as rows of 100 (n is a multiple of 100).
            let rows = n / 100;
            let k = k.min(100);
            let top = gpu.top_k(Keys::rows(&input.data, rows, 100), k, &TopKOptions::largest()).unwrap();
            let values = gpu.download(&top.values).unwrap();
            for r in 0..rows {
                let mut row = input.keys[r * 100..(r + 1) * 100].to_vec();
                row.sort_by(|a, b| b.total_cmp(a));
                assert_eq!(values[r * k..(r + 1) * k], row[..k], "rows k={k} row {r}");
            }
        }
        9 => {
            let rank = rng.random_range(0..n);
            let algorithm = [SelectAlgorithm::Auto, SelectAlgorithm::QuickSelect][rank % 2];
            let selection =
                gpu.select(&input.data, rank, &SelectOptions::default().with_algorithm(algorithm)).unwrap();
            assert_eq!(
                selection.value.to_bits(),
                input.ascending[rank].0.to_bits(),
                "select {rank} {algorithm:?}"
            );
        }
        10 => {
            // Approximate: a key and its exact rank, whatever rank it lands on.
            let rank = rng.random_range(0..n);
            let options =
                SelectOptions::default().with_algorithm(SelectAlgorithm::Approximate { buckets: 256 });
            let near = gpu.select(&input.data, rank, &options).unwrap();
            let at = near.rank as usize;
            assert_eq!(near.value.to_bits(), input.ascending[at].0.to_bits(), "approximate select {rank}");
        }
        kind @ 11..=12 => {
            let algorithm = [MultiselectAlgorithm::Auto, MultiselectAlgorithm::BucketMultiselect][kind - 11];
            let ranks: Vec<usize> = (0..11).map(|_| rng.random_range(0..n)).collect();
            let found = gpu.multiselect(&input.data, &ranks, algorithm).unwrap();
            for (selection, &rank) in found.iter().zip(&ranks) {
                let want = input.ascending[rank].0.to_bits();
                assert_eq!(selection.value.to_bits(), want, "multiselect {rank} {algorithm:?}");
            }
        }
        13 => {
            let qs = [0.0, 0.1, 0.5, 0.99, 1.0];
            let options = QuantileOptions::new(QuantileMethod::Linear);
            let got = gpu.quantiles(&input.data, &qs, &options).unwrap();
            let want = reference::quantiles(&input.keys, &qs, QuantileMethod::Linear, NanPolicy::Propagate);
            assert_eq!(got, want, "quantiles");
        }
        14 => {
            // Segments of 200 sorted (n is a multiple of 200), largest first.
            let sorted = gpu.sort_segments(&input.data, 200, Order::Largest).unwrap();
            let keys = gpu.download(&sorted.keys).unwrap();
            for (segment, got) in input.keys.chunks(200).zip(keys.chunks(200)) {
                let mut want = segment.to_vec();
                want.sort_by(|a, b| b.total_cmp(a));
                assert_eq!(got, want, "segment sort");
            }
        }
        _ => {
            // k-NN over the keys as 4-component vectors, against themselves.
            let count = n / 4;
            let index = gpu.flat_index(Vectors::new(&input.data, count, 4).unwrap(), Metric::L2).unwrap();
            let queries = input.data.slice(..8 * 4);
            let found = index.search(Vectors::new(queries, 8, 4).unwrap(), 1).unwrap();
            let distances = gpu.download(&found.distances).unwrap();
            // Each of the first eight vectors is in the base: nearest at distance (about) 0.
            assert!(distances.iter().all(|&d| d.abs() < 1e-3), "knn: {distances:?}");
        }
    }
}

fn inputs(gpu: &Gpu) -> Vec<Input> {
    let mut rng = StdRng::seed_from_u64(36);
    let mut inputs = Vec::new();
    for n in [1000usize, 4000, 20_000] {
        inputs.push(Input::new(gpu, (0..n).map(|_| rng.random::<f32>()).collect()));
        // Few distinct values: ties everywhere.
        inputs.push(Input::new(gpu, (0..n).map(|_| rng.random_range(0..7) as f32).collect()));
    }
    inputs
}

#[test]
fn eight_threads_share_one_handle_with_mixed_calls() {
    let gpu = gpu();
    // 10^4 calls per thread on a GPU (8 · 10^4 in all); every kind once per thread on the
    // emulator; or as many as GPU_SELECT_STRESS_CALLS says (a handful under
    // compute-sanitizer).
    let calls: usize = std::env::var("GPU_SELECT_STRESS_CALLS")
        .ok()
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(if on_emulator(&gpu) { KINDS } else { 10_000 });
    let inputs = inputs(&gpu);
    // GPU_SELECT_STRESS_KIND=K: kind K alone, on each input once, one thread (which kind a
    // sanitizer finding or a slow sanitizer run comes from: runs 155, 158).
    if let Some(kind) =
        std::env::var("GPU_SELECT_STRESS_KIND").ok().and_then(|kind| kind.parse::<usize>().ok())
    {
        let mut rng = StdRng::seed_from_u64(kind as u64);
        for input in &inputs {
            mixed_call(&gpu, input, kind, &mut rng);
        }
        eprintln!("kind {kind} alone on {} inputs: every result checked", inputs.len());
        return;
    }
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..8u64 {
            let (gpu, inputs) = (gpu.clone(), &inputs);
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(thread);
                for call in 0..calls {
                    let input = &inputs[rng.random_range(0..inputs.len())];
                    mixed_call(&gpu, input, call * 8 + thread as usize, &mut rng);
                }
            });
        }
    });
    eprintln!(
        "8 threads x {calls} mixed calls, every result checked: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
#[ignore = "needs a GPU (fills its memory): run with --include-ignored there"]
fn a_full_device_gives_out_of_memory_and_recovers() {
    let gpu = gpu();
    assert!(!on_emulator(&gpu), "fills the device's memory: GPU only");
    let inputs = inputs(&gpu);
    let mut rng = StdRng::seed_from_u64(9);
    // Fill the device: blocks of 1 GiB, then smaller, until even 1 KiB is refused (so that
    // the small calls of the mix cannot fit in what is left over either).
    let mut filler: Vec<DeviceBuffer<u8>> = Vec::new();
    let mut block = 1usize << 30;
    while block >= 1 << 10 {
        match gpu.alloc_zeroed::<u8>(block) {
            Ok(buffer) => filler.push(buffer),
            Err(Error::OutOfMemory { .. }) => block /= 2,
            Err(other) => panic!("filling the device: {other}"),
        }
    }
    let filled: usize = filler.iter().map(|b| b.len()).sum();
    eprintln!("device filled with {:.2} GiB", filled as f64 / (1u64 << 30) as f64);
    // An upload of 16 MiB cannot fit; every operation answers right or says OutOfMemory,
    // nothing else, no panic of its own.
    let upload = gpu.upload(&vec![0.5f32; 1 << 22]);
    assert!(matches!(upload, Err(Error::OutOfMemory { .. })), "upload to a full device: {upload:?}");
    let (mut answered, mut refused) = (0, 0);
    for call in 0..200 {
        let input = &inputs[call % inputs.len()];
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            mixed_call(&gpu, input, call, &mut rng);
        }));
        match outcome {
            Ok(()) => answered += 1,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                assert!(
                    message.contains("OutOfMemory"),
                    "call {call}: not an out-of-memory error: {message}"
                );
                refused += 1;
            }
        }
    }
    eprintln!("on the full device: {answered} calls answered right, {refused} refused with OutOfMemory");
    assert!(refused > 0, "nothing was refused: the device was not full");
    drop(filler);
    // The handle works again.
    for call in 0..90 {
        mixed_call(&gpu, &inputs[call % inputs.len()], call, &mut rng);
    }
}
