//! Every device-layer primitive, checked against a CPU model of what each thread must see.
//! The same assertions run on the emulator and on a GPU.

mod common;

use gpu_select::diagnostics::{Probe, ProbeOutput, run_probe};

fn inputs(threads: usize, seed: u64) -> Vec<u64> {
    let mut random = common::SplitMix(seed);
    (0..threads).map(|_| random.next()).collect()
}

fn run(probe: Probe, grid: (u32, u32), block_threads: u32, input: &[u64]) -> ProbeOutput {
    run_probe(&common::gpu(), probe, grid, block_threads, input).expect("probe launch failed")
}

#[test]
fn indices_lanes_and_masks() {
    let (grid, threads) = ((3, 2), 96u32);
    let total = 3 * 2 * 96;
    let output = run(Probe::Indices, grid, threads, &vec![0; total]);
    for linear in 0..total {
        let block = linear as u64 / 96;
        let (block_x, block_y, thread) = (block % 3, block / 3, linear as u64 % 96);
        let lane = thread % 32;
        let expected =
            [thread, 96, block_x, block_y, 3, 2, lane, thread / 32, (1 << lane) - 1, block_x * 96 + thread];
        assert_eq!(&output.thread(linear)[..10], &expected, "thread {linear}");
    }
}

#[test]
fn shuffles_votes_match_and_warp_reductions() {
    let threads = 64u32;
    let mut input = inputs(threads as usize, 1);
    input[5] = 97 * 1234; // some lane of warp 0 makes `any` true
    for value in &mut input[32..] {
        *value = *value / 1000 * 1000 + *value % 900; // warp 1: `all(value % 1000 < 900)`
    }
    for value in &mut input[40..48] {
        *value = 7; // repeated values for `match_any`
    }
    let output = run(Probe::WarpCollectives, (1, 1), threads, &input);
    for warp in input.chunks(32).enumerate() {
        let (warp, values) = warp;
        let small = |lane: usize| values[lane] as u32 as u64;
        for lane in 0..32usize {
            let got = output.thread(warp * 32 + lane);
            let ballot = |mask: u32, f: &dyn Fn(u64) -> bool| {
                (0..32).filter(|&l| mask & (1 << l) != 0 && f(values[l])).fold(0u64, |b, l| b | 1 << l)
            };
            let half = if lane < 16 { 0x0000_ffffu32 } else { 0xffff_0000 };
            let expected = [
                small((lane * 7 + 3) % 32),
                if lane < 3 { small(lane) } else { small(lane - 3) },
                if lane + 5 > 31 { small(lane) } else { small(lane + 5) },
                small(lane ^ 9),
                values[31 - lane],
                if lane < 1 { values[lane] } else { values[lane - 1] },
                if lane + 1 > 31 { values[lane] } else { values[lane + 1] },
                values[lane ^ 16],
                ballot(u32::MAX, &|v| v & 1 == 1),
                values.iter().all(|v| v % 1000 < 900) as u64,
                values.iter().any(|v| v % 97 == 0) as u64,
                ballot(u32::MAX, &|v| v as u32 % 4 == values[lane] as u32 % 4),
                u32::MAX as u64,
                values.iter().fold(0u32, |s, &v| s.wrapping_add(v as u32 & 0xffff)) as u64,
                values.iter().map(|&v| v as u32).max().unwrap() as u64,
                values[..=lane].iter().fold(0u32, |s, &v| s.wrapping_add(v as u32 & 0xff)) as u64,
                ballot(half, &|v| v & 2 != 0),
                small(lane ^ 1),
            ];
            assert_eq!(got, &expected, "warp {warp} lane {lane}");
        }
    }
}

#[test]
fn shared_memory_barriers_and_shared_atomics() {
    let (blocks, threads) = (2u32, 128u32);
    let input = inputs((blocks * threads) as usize, 2);
    let output = run(Probe::SharedMemory, (blocks, 1), threads, &input);
    for block in 0..blocks as usize {
        let values = &input[block * 128..(block + 1) * 128];
        let mut winners = 0;
        for thread in 0..128 {
            let got = output.thread(block * 128 + thread);
            assert_eq!(got[0], values[(thread + 1) % 128], "neighbour through shared memory");
            assert_eq!(got[1], values.iter().filter(|&&v| v % 32 == (thread % 32) as u64).count() as u64);
            assert_eq!(got[2], values.iter().map(|&v| v as u32).min().unwrap() as u64);
            assert_eq!(got[3], values.iter().map(|&v| v as u32).max().unwrap() as u64);
            if got[5] == 1 {
                winners += 1;
                assert_eq!(got[4], thread as u64 + 1, "the CAS winner's id is in the word");
            }
        }
        assert_eq!(winners, 1, "exactly one thread wins the CAS in block {block}");
    }
}

#[test]
fn global_atomics_and_fences() {
    let (blocks, threads) = (3u32, 64u32);
    let input = inputs((blocks * threads) as usize, 3);
    let output = run(Probe::GlobalAtomics, (blocks, 1), threads, &input);
    for bucket in 0..16u64 {
        let members: Vec<usize> = (0..input.len()).filter(|&t| input[t] % 16 == bucket).collect();
        assert_eq!(output.scratch[bucket as usize], members.len() as u32, "counter {bucket}");
        // The old values returned to the members are 0, 1, …, count − 1 in some order.
        let mut olds: Vec<u64> = members.iter().map(|&t| output.thread(t)[0]).collect();
        olds.sort_unstable();
        assert_eq!(olds, (0..members.len() as u64).collect::<Vec<_>>());
    }
    assert_eq!(output.scratch[16], input.iter().map(|&v| v as u32).min().unwrap());
    assert_eq!(output.scratch[17], input.iter().map(|&v| v as u32).max().unwrap());
    let winners: Vec<usize> = (0..input.len()).filter(|&t| output.thread(t)[1] == 1).collect();
    assert_eq!(winners.len(), 1);
    assert_eq!(output.scratch[18], winners[0] as u32 + 1);
    let sum = output.scratch[20] as u64 | (output.scratch[21] as u64) << 32;
    assert_eq!(sum, input.iter().fold(0u64, |s, &v| s.wrapping_add(v)));
}
