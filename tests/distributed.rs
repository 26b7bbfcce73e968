//! Distributed multiselect and quantiles (DIBMS and its baselines) over a group of threads,
//! each with its own handle (the emulator, or on a GPU machine the GPU they share): the
//! answers against a sort of all the shards' keys, the bytes sent, and the faults. The same
//! algorithm over MPI processes runs in `cargo xtask test` (examples/dibms.rs).

mod common;

use std::time::Duration;

use common::{DISTRIBUTIONS, SplitMix, TestKey, generate, gpu, on_emulator, several_handles};
use gpu_select::distributed::{
    Communicator, Distributed, DistributedAlgorithm, DistributedOptions, DistributedQuantiles,
    DistributedSelection, ThreadCommunicator, ThreadGroup,
};
use gpu_select::{Error, Gpu, Key, NanPolicy, OrderedBits, QuantileMethod, QuantileOptions, Result};

const ALGORITHMS: [DistributedAlgorithm; 3] =
    [DistributedAlgorithm::Dibms, DistributedAlgorithm::DistributedBms, DistributedAlgorithm::SortAndChoose];

/// Runs `call` on every rank of a thread group (each with its own handle and its shard of
/// `shards`), and returns every rank's result.
fn on_group<K: TestKey, T: Send>(
    shards: &[Vec<K>],
    timeout: Duration,
    call: impl Fn(&Gpu, &ThreadCommunicator, &gpu_select::DeviceBuffer<K>) -> Result<T> + Sync,
) -> Vec<Result<T>> {
    let group = ThreadGroup::new(shards.len(), timeout);
    std::thread::scope(|scope| {
        let runs: Vec<_> = group
            .into_iter()
            .zip(shards)
            .map(|(comm, shard)| {
                let call = &call;
                scope.spawn(move || {
                    let gpu = gpu();
                    let shard = gpu.upload(shard)?;
                    call(&gpu, &comm, &shard)
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().expect("a rank panicked")).collect()
    })
}

/// `keys` cut into `parts` shards of uneven lengths (one of them empty when `empty`).
fn shard<K: Clone>(keys: &[K], parts: usize, empty: bool) -> Vec<Vec<K>> {
    let n = keys.len();
    let mut cuts: Vec<usize> = (0..=parts).map(|i| n * i * i / (parts * parts)).collect();
    if empty && parts > 1 {
        cuts[1] = 0; // the first shard is empty, the second takes its keys
    }
    cuts.windows(2).map(|w| keys[w[0]..w[1]].to_vec()).collect()
}

fn multiselect_group<K: TestKey>(
    shards: &[Vec<K>],
    ranks: &[usize],
    options: DistributedOptions,
) -> Vec<Result<DistributedSelection<K>>> {
    on_group(shards, Duration::from_secs(300), |gpu, comm, shard| {
        Distributed::new(gpu, comm, options).multiselect(shard, ranks)
    })
}

/// Every rank's answer is the sorted keys at the ranks asked for.
fn check_group<K: TestKey>(shards: &[Vec<K>], ranks: &[usize], what: &str) {
    let mut sorted: Vec<u64> = shards.concat().iter().map(|k| k.to_ordered().to_u64()).collect();
    sorted.sort_unstable();
    for algorithm in ALGORITHMS {
        let answers = multiselect_group(shards, ranks, DistributedOptions::with_algorithm(algorithm));
        for (rank, answer) in answers.into_iter().enumerate() {
            let answer = answer.unwrap_or_else(|e| panic!("{what} {algorithm:?} rank {rank}: {e}"));
            assert_eq!(answer.selections.len(), ranks.len());
            for (selection, &wanted) in answer.selections.iter().zip(ranks) {
                assert_eq!(selection.rank, wanted as u64);
                assert_eq!(
                    selection.value.to_ordered().to_u64(),
                    sorted[wanted],
                    "{what} {algorithm:?} rank {rank}: key of rank {wanted}"
                );
            }
        }
    }
}

fn ranks_of(n: usize, m: usize) -> Vec<usize> {
    let mut ranks: Vec<usize> = (0..m).map(|i| if m == 1 { n / 2 } else { i * (n - 1) / (m - 1) }).collect();
    let mut random = SplitMix(n as u64);
    ranks.extend((0..10).map(|_| (random.next() % n as u64) as usize));
    ranks.extend([0, n - 1, n / 2, n / 2]);
    ranks
}

#[test]
fn distributed_multiselect_matches_a_sort() {
    let n = 40_000;
    for (d, distribution) in DISTRIBUTIONS.into_iter().enumerate() {
        let keys: Vec<f32> = generate(n, distribution, 3 + d as u64);
        check_group(&shard(&keys, 3, d % 2 == 1), &ranks_of(n, 11), &format!("f32 {distribution:?}"));
    }
    let keys: Vec<u64> = generate(n, DISTRIBUTIONS[0], 8);
    check_group(&shard(&keys, 2, false), &ranks_of(n, 101), "u64 2 ranks");
    let keys: Vec<i32> = generate(n, DISTRIBUTIONS[0], 9);
    check_group(&shard(&keys, 4, true), &ranks_of(n, 101), "i32 4 ranks");
    let keys: Vec<f64> = generate(n, DISTRIBUTIONS[0], 10);
    check_group(&shard(&keys, 1, false), &ranks_of(n, 5), "f64 alone");
}

/// One rank holds every copy of a value that covers most ranks; tiny inputs; one key.
#[test]
fn distributed_multiselect_handles_hard_shards() {
    let n = 30_000;
    let mut random = SplitMix(77);
    let spread: Vec<u32> = (0..n).map(|_| (random.next() % 1_000_000) as u32).collect();
    let heavy = vec![500_000u32; 2 * n];
    let shards = vec![spread[..n / 2].to_vec(), heavy, spread[n / 2..].to_vec()];
    check_group(&shards, &ranks_of(3 * n, 101), "one rank holds the duplicates");
    check_group(&[vec![7u32], vec![], vec![3u32, 9]], &[0, 1, 2, 1], "three keys");
    check_group(&[vec![], vec![-1.5f64], vec![]], &[0], "one key");
}

#[test]
fn distributed_quantiles_match_one_gpu() {
    let gpu = gpu();
    let n = 50_000;
    let mut keys: Vec<f32> = generate(n, DISTRIBUTIONS[0], 21);
    let qs = [0.0, 0.01, 0.25, 0.5, 0.75, 0.999, 1.0];
    for with_nan in [false, true] {
        if with_nan {
            for i in (0..n).step_by(97) {
                keys[i] = f32::NAN;
            }
        }
        for method in [QuantileMethod::Linear, QuantileMethod::InvertedCdf, QuantileMethod::Midpoint] {
            for nan in [NanPolicy::Propagate, NanPolicy::Omit] {
                let options = QuantileOptions::new(method).with_nan(nan);
                let expected = gpu.quantiles_host(&keys, &qs, &options).unwrap();
                let answers: Vec<Result<DistributedQuantiles>> =
                    on_group(&shard(&keys, 3, false), Duration::from_secs(300), |gpu, comm, shard| {
                        Distributed::new(gpu, comm, DistributedOptions::default())
                            .quantiles(shard, &qs, &options)
                    });
                for answer in answers {
                    let values = answer.unwrap().values;
                    for (a, b) in values.iter().zip(&expected) {
                        assert!(
                            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                            "{method:?} {nan:?}"
                        );
                    }
                }
            }
        }
    }
}

/// DIBMS sends what grows with the ranks asked for (here 1001 and a few), not with the
/// keys: less than twice the bytes for 8 times the keys (one more pass of label totals),
/// and fewer than its baselines once the input is large enough that they differ.
#[test]
fn dibms_bytes_do_not_grow_with_the_keys() {
    let sizes: &[usize] = if on_emulator(&gpu()) { &[1 << 16, 1 << 19] } else { &[1 << 19, 1 << 24] };
    let ranks = ranks_of(sizes[0], 1001);
    let mut dibms = Vec::new();
    for &n in sizes {
        let keys: Vec<f32> = generate(n, DISTRIBUTIONS[0], n as u64);
        let shards = shard(&keys, 3, false);
        let mut sent = Vec::new();
        for algorithm in ALGORITHMS {
            let answers = multiselect_group(&shards, &ranks, DistributedOptions::with_algorithm(algorithm));
            let bytes: u64 = answers.into_iter().map(|a| a.unwrap().traffic.bytes_sent).sum();
            sent.push(bytes);
        }
        eprintln!("n = {n}: bytes sent by DIBMS, DistributedBMS, sort & choose: {sent:?}");
        // Small inputs: the active labels' keys take fewer bytes than another pass's
        // totals, so DIBMS gathers them at once, as DistributedBMS does.
        assert!(sent[0] <= sent[1], "n = {n}: {sent:?}");
        if n == sizes[1] {
            assert!(sent[0] < sent[1] && sent[1] < sent[2], "n = {n}: {sent:?}");
        }
        // Sort & choose sends every key of ranks 1 and 2.
        assert!(sent[2] >= (shards[1].len() + shards[2].len()) as u64 * 4);
        dibms.push(sent[0]);
    }
    assert!(dibms[1] < dibms[0] * 2, "DIBMS bytes {dibms:?} for n = {sizes:?}");
}

/// A rank that fails makes every rank return the same error; a rank that asks something
/// else too; a rank that leaves or stops answering makes the others fail, not hang.
#[test]
fn a_failed_rank_fails_every_rank_alike() {
    let keys: Vec<f32> = generate(9_000, DISTRIBUTIONS[0], 5);
    let shards = shard(&keys, 3, false);
    let options = DistributedOptions::default();
    // Rank 1 passes a shard of another handle (bad input, found before any exchange).
    let answers = on_group(&shards, Duration::from_secs(300), |gpu, comm, shard| {
        let other = Gpu::emulator();
        let foreign = other.upload(&[1.0f32])?;
        let group = Distributed::new(gpu, comm, options);
        if comm.rank() == 1 { group.multiselect(&foreign, &[0]) } else { group.multiselect(shard, &[0]) }
    });
    let errors: Vec<Error> = answers.into_iter().map(|a| a.unwrap_err()).collect();
    assert!(matches!(&errors[0], Error::Distributed { failed_rank: Some(1), .. }), "{:?}", errors[0]);
    assert!(errors.iter().all(|e| *e == errors[0]), "{errors:?}");
    // A rank past the keys: every rank refuses it alike.
    let answers = multiselect_group(&shards, &[9_000], options);
    assert!(answers.iter().all(|a| matches!(a, Err(Error::KOutOfRange { .. }))));
    // Different requests.
    let answers = on_group(&shards, Duration::from_secs(300), |gpu, comm, shard| {
        Distributed::new(gpu, comm, options).multiselect(shard, &[comm.rank()])
    });
    assert!(answers.iter().all(|a| matches!(a, Err(Error::Distributed { failed_rank: None, .. }))));
    // Every shard empty.
    let answers = multiselect_group::<f32>(&[vec![], vec![]], &[0], options);
    assert!(answers.iter().all(|a| matches!(a, Err(Error::EmptyInput))));
    // Rank 2 leaves before the call; the others fail at once.
    let answers = on_group(&shards, Duration::from_secs(300), |gpu, comm, shard| {
        if comm.rank() == 2 {
            return Ok(Vec::new());
        }
        Distributed::new(gpu, comm, options).multiselect(shard, &[0]).map(|a| a.selections)
    });
    assert!(answers[0].is_err() && answers[1].is_err(), "{answers:?}");
}

/// A rank that stops answering (here: sleeps past the timeout) makes the others give up
/// after the timeout.
#[test]
fn a_silent_rank_times_the_others_out() {
    let keys: Vec<f32> = generate(3_000, DISTRIBUTIONS[0], 6);
    let group = ThreadGroup::new(3, Duration::from_millis(500));
    let started = std::time::Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let runs: Vec<_> = group
            .into_iter()
            .map(|comm| {
                let keys = &keys;
                scope.spawn(move || {
                    if comm.rank() == 1 {
                        std::thread::sleep(Duration::from_secs(2));
                        return Ok(());
                    }
                    let gpu = Gpu::emulator();
                    let shard = gpu.upload(keys)?;
                    Distributed::new(&gpu, &comm, DistributedOptions::default())
                        .multiselect(&shard, &[1])
                        .map(|_| ())
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for rank in [0, 2] {
        match &results[rank] {
            Err(Error::Distributed { failed_rank: None, message }) => {
                assert!(message.contains("heard nothing"), "{message}")
            }
            other => panic!("rank {rank}: {other:?}"),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn shards_on_several_handles_of_one_process() {
    use gpu_select::distributed::{multiselect_across, quantiles_across};
    let n = if on_emulator(&gpu()) { 30_000 } else { 3 << 20 };
    let keys: Vec<f32> = generate(n, DISTRIBUTIONS[0], 31);
    let ranks = ranks_of(n, 101);
    let mut sorted: Vec<u64> = keys.iter().map(|k| k.to_ordered().to_u64()).collect();
    sorted.sort_unstable();
    for parts in [1, 3, 4] {
        let handles = several_handles(&gpu(), parts);
        let pieces = shard(&keys, parts, parts == 4);
        let shards: Vec<_> =
            handles.iter().zip(&pieces).map(|(gpu, piece)| gpu.upload(piece).unwrap()).collect();
        let shard_refs: Vec<_> = shards.iter().collect();
        for algorithm in ALGORITHMS {
            let options = DistributedOptions::with_algorithm(algorithm);
            let answers = multiselect_across(&shard_refs, &ranks, options).unwrap();
            assert_eq!(answers.len(), parts);
            for answer in &answers {
                for (selection, &wanted) in answer.selections.iter().zip(&ranks) {
                    assert_eq!(
                        selection.value.to_ordered().to_u64(),
                        sorted[wanted],
                        "{parts} {algorithm:?}"
                    );
                }
            }
        }
        // Quantiles across the handles equal one handle's quantiles of all the keys.
        let qs = [0.0, 0.01, 0.5, 0.999, 1.0];
        let options = QuantileOptions::new(QuantileMethod::Linear);
        let one = gpu().quantiles_host(&keys, &qs, &options).unwrap();
        let answers = quantiles_across(&shard_refs, &qs, &options, DistributedOptions::default()).unwrap();
        assert!(answers.iter().all(|answer| answer.values == one), "{parts} handles");
    }
    assert!(multiselect_across::<f32>(&[], &ranks, DistributedOptions::default()).is_err());
}
