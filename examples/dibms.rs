//! Distributed quantiles over MPI processes (DIBMS), started by `mpirun`:
//!
//! ```text
//! cargo build --release --features mpi --example dibms
//! mpirun -np 3 target/release/examples/dibms            # checks every algorithm
//! mpirun -np 3 target/release/examples/dibms bytes 24   # bytes and times, 2^24 keys
//! ```
//!
//! Each process makes its own shard (uneven lengths; with three or more processes one
//! shard is empty and one holds a heavily repeated value), runs on its GPU (or the
//! emulator; `GPU_SELECT_BACKEND` says which), and checks the answers against a sort of
//! every shard, which each process can make itself. `fault-input`, `fault-silent` and
//! `fault-exit` show what a failed process does to the others (`cargo xtask test` runs
//! them all).

use std::time::{Duration, Instant};

use gpu_select::distributed::{
    Communicator, Distributed, DistributedAlgorithm, DistributedOptions, MpiCommunicator,
};
use gpu_select::{Error, Gpu, Key, QuantileOptions};

const ALGORITHMS: [DistributedAlgorithm; 3] =
    [DistributedAlgorithm::Dibms, DistributedAlgorithm::DistributedBms, DistributedAlgorithm::SortAndChoose];

/// SplitMix64: the same keys on every process for the same seed.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Process `rank`'s shard of `n` keys in all over `size` processes: lengths in proportion
/// to 1, 2, 3, …; with three or more, shard 1 is empty and shard 2 is mostly one value.
fn shard(rank: usize, size: usize, n: usize) -> Vec<f32> {
    let weights: Vec<usize> = (0..size).map(|r| if size >= 3 && r == 1 { 0 } else { r + 1 }).collect();
    let total: usize = weights.iter().sum();
    let len = n * weights[rank] / total;
    let mut state = 0x5eed ^ rank as u64;
    (0..len)
        .map(|i| {
            let bits = splitmix(&mut state);
            if size >= 3 && rank == 2 && i % 4 != 0 {
                0.75 // one value for three keys in four of this shard
            } else {
                ((bits >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1000.0
            }
        })
        .collect()
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialises once");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("check", String::as_str);
    let timeout = if mode == "fault-silent" { Duration::from_secs(3) } else { Duration::from_secs(300) };
    let comm = MpiCommunicator::new(universe.world(), timeout);
    let (rank, size) = (comm.rank(), comm.size());
    // One GPU per process where the machine has several: the process's rank on its machine
    // picks it (all share device 0 where there is one; the emulator where there is none).
    let local_rank = comm.local_rank();
    let gpu = Gpu::from_env_device((local_rank % Gpu::device_count().max(1)) as u32)
        .expect("a GPU or the emulator");
    let outcome = match mode {
        // Once as MPI allows, once in calls of at most 4 KiB (the splitting that exchanges
        // beyond MPI's 2 GiB take).
        "check" => check(&gpu, &comm).and_then(|()| {
            let small = MpiCommunicator::new(universe.world(), timeout).with_message_limit(4096);
            check(&gpu, &small).map_err(|e| format!("in 4 KiB calls: {e}"))
        }),
        "bytes" => bytes(&gpu, &comm, args.get(1).and_then(|e| e.parse().ok()).unwrap_or(20)),
        "fault-input" | "fault-silent" | "fault-exit" => fault(&gpu, &comm, mode),
        other => {
            Err(format!("unknown mode {other}: check, bytes [log2 n], fault-input, fault-silent, fault-exit"))
        }
    };
    match outcome {
        Ok(()) => {}
        Err(message) => {
            eprintln!("rank {rank} of {size}: {message}");
            // Other processes may still wait in a collective operation: end them all.
            comm.abort(2);
        }
    }
}

/// Every algorithm, multiselect and quantiles, against a sort of all the shards.
fn check(gpu: &Gpu, comm: &MpiCommunicator) -> Result<(), String> {
    let (rank, size) = (comm.rank(), comm.size());
    let n = 300_001;
    let mut all: Vec<u64> =
        (0..size).flat_map(|r| shard(r, size, n)).map(|k| k.to_ordered() as u64).collect();
    all.sort_unstable();
    let total = all.len();
    let local = gpu.upload(&shard(rank, size, n)).map_err(|e| e.to_string())?;
    let ranks: Vec<usize> =
        (0..101).map(|i| i * (total - 1) / 100).chain([0, total / 3, total / 3]).collect();
    let qs = [0.0, 0.1, 0.5, 0.9, 0.999, 1.0];
    let expected = gpu
        .quantiles_host(&shard_all(size, n), &qs, &QuantileOptions::default())
        .map_err(|e| e.to_string())?;
    for algorithm in ALGORITHMS {
        let group = Distributed::new(gpu, comm, DistributedOptions::with_algorithm(algorithm));
        let found = group.multiselect(&local, &ranks).map_err(|e| format!("{algorithm:?}: {e}"))?;
        for (selection, &r) in found.selections.iter().zip(&ranks) {
            if selection.value.to_ordered() as u64 != all[r] {
                return Err(format!("{algorithm:?}: rank {r} is {}, not the sort's", selection.value));
            }
        }
        let quantiles =
            group.quantiles(&local, &qs, &QuantileOptions::default()).map_err(|e| e.to_string())?;
        if quantiles.values.iter().zip(&expected).any(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(format!("{algorithm:?}: quantiles {:?}, one GPU {expected:?}", quantiles.values));
        }
        let mut sent = [found.traffic.bytes_sent];
        comm.all_reduce_sum(&mut sent).map_err(|e| e.to_string())?;
        if rank == 0 {
            println!(
                "{algorithm:?}: {total} keys on {size} processes, 104 ranks: right; {} bytes sent in all",
                sent[0]
            );
        }
    }
    Ok(())
}

/// Every shard, concatenated.
fn shard_all(size: usize, n: usize) -> Vec<f32> {
    (0..size).flat_map(|r| shard(r, size, n)).collect()
}

/// Bytes and time of each algorithm for 101 and 1001 quantiles of 2^`log2_n` keys.
fn bytes(gpu: &Gpu, comm: &MpiCommunicator, log2_n: u32) -> Result<(), String> {
    let (rank, size) = (comm.rank(), comm.size());
    let n = 1usize << log2_n;
    // Even shards of uniform keys here (the paper's setting).
    let mut state = 0xb17e5 ^ rank as u64;
    let keys: Vec<f32> = (0..n / size).map(|_| (splitmix(&mut state) >> 40) as f32).collect();
    let local = gpu.upload(&keys).map_err(|e| e.to_string())?;
    for m in [101usize, 501, 1001] {
        let qs: Vec<f64> = (0..m).map(|i| i as f64 / (m - 1) as f64).collect();
        for algorithm in ALGORITHMS {
            // The baselines take seconds at 2^26 keys and more: sort & choose once (its
            // bytes do not depend on m), each of them timed once.
            let large = log2_n >= 26 && algorithm != DistributedAlgorithm::Dibms;
            if large && algorithm == DistributedAlgorithm::SortAndChoose && m != 101 {
                continue;
            }
            let group = Distributed::new(gpu, comm, DistributedOptions::with_algorithm(algorithm));
            group.quantiles(&local, &qs, &QuantileOptions::default()).map_err(|e| e.to_string())?; // warm-up
            let mut times = Vec::new();
            let mut traffic = None;
            for _ in 0..if large { 1 } else { 5 } {
                comm.all_reduce_max(&mut [0]).map_err(|e| e.to_string())?; // start together
                let started = Instant::now();
                let answer =
                    group.quantiles(&local, &qs, &QuantileOptions::default()).map_err(|e| e.to_string())?;
                times.push(started.elapsed().as_secs_f64() * 1e3);
                traffic = Some(answer.traffic);
            }
            times.sort_by(f64::total_cmp);
            let traffic = traffic.expect("five runs");
            let mut sent = [traffic.bytes_sent, traffic.collectives as u64];
            comm.all_reduce_sum(&mut sent).map_err(|e| e.to_string())?;
            if rank == 0 {
                println!(
                    "n=2^{log2_n} p={size} m={m} {algorithm:?}: {:.3} ms (median of {}), {} bytes sent in all ({} per process), {} collectives",
                    times[times.len() / 2],
                    times.len(),
                    sent[0],
                    sent[0] / size as u64,
                    sent[1] / size as u64
                );
            }
        }
    }
    Ok(())
}

/// What a failed process does to the others: `fault-input` (rank 1 asks for a quantile
/// outside [0, 1]: every process returns the same error), `fault-silent` (rank 1 stops
/// answering: the others time out and end the job), `fault-exit` (rank 1 exits: mpirun ends
/// the job).
fn fault(gpu: &Gpu, comm: &MpiCommunicator, mode: &str) -> Result<(), String> {
    let rank = comm.rank();
    let local = gpu.upload(&shard(rank, comm.size(), 30_000)).map_err(|e| e.to_string())?;
    let group = Distributed::new(gpu, comm, DistributedOptions::default());
    if rank == 1 {
        match mode {
            "fault-silent" => std::thread::sleep(Duration::from_secs(600)),
            "fault-exit" => std::process::exit(3),
            _ => {}
        }
    }
    let q = if rank == 1 { 1.5 } else { 0.5 };
    match group.quantiles(&local, &[q], &QuantileOptions::default()) {
        Err(Error::Distributed { failed_rank: Some(1), message }) if mode == "fault-input" => {
            println!("rank {rank}: the same error on every process: rank 1 failed: {message}");
            Ok(())
        }
        Err(error) => Err(format!("returned: {error}")),
        Ok(answer) => Err(format!("answered {:?} despite the fault", answer.values)),
    }
}
