//! The emulator's own tests: it must run correct kernels and refuse broken ones with a
//! message that names the problem.

extern crate std;

use std::string::String;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use std::vec;
use std::vec::Vec;

use super::{BlockOrder, EmulatorError, LaunchConfig, launch};
use crate::device::{self, FULL_WARP, SharedLayout};

fn config(blocks: u32, threads: u32, shared_bytes: usize) -> LaunchConfig {
    LaunchConfig { grid: (blocks, 1), block_threads: threads, shared_bytes }
}

fn expect_error(result: Result<(), EmulatorError>, needle: &str) -> String {
    let message = result.expect_err("the emulator accepted a broken kernel").message;
    assert!(message.contains(needle), "error {message:?} should mention {needle:?}");
    message
}

#[test]
fn every_thread_runs_once_with_its_indices() {
    let seen: Vec<AtomicU32> = (0..3 * 70).map(|_| AtomicU32::new(0)).collect();
    launch(&config(3, 70, 0), &|| {
        let index = device::global_thread_idx() as usize;
        assert_eq!(index, (device::block_idx_x() * 70 + device::thread_idx_x()) as usize);
        assert_eq!(device::lane_id(), device::thread_idx_x() % 32);
        seen[index].fetch_add(1, Ordering::SeqCst);
    })
    .unwrap();
    assert!(seen.iter().all(|count| count.load(Ordering::SeqCst) == 1));
}

#[test]
fn barrier_orders_shared_memory_between_threads() {
    let (layout, region) = SharedLayout::new().push::<u32>(64);
    let sums: Vec<AtomicU32> = (0..64).map(|_| AtomicU32::new(0)).collect();
    launch(&config(1, 64, layout.bytes()), &|| unsafe {
        let values = region.bind();
        let thread = device::thread_idx_x() as usize;
        values.store(thread, thread as u32 * 3);
        device::sync_threads();
        let neighbour = values.load((thread + 1) % 64);
        sums[thread].store(neighbour, Ordering::SeqCst);
    })
    .unwrap();
    for (thread, sum) in sums.iter().enumerate() {
        assert_eq!(sum.load(Ordering::SeqCst), ((thread + 1) % 64) as u32 * 3);
    }
}

#[test]
fn reports_a_thread_that_skips_a_barrier() {
    let result = launch(&config(1, 64, 0), &|| unsafe {
        if device::thread_idx_x() < 40 {
            device::sync_threads();
        }
    });
    expect_error(result, "barrier");
}

#[test]
fn reports_reads_of_shared_memory_nothing_wrote() {
    let (layout, region) = SharedLayout::new().push::<u32>(32);
    let result = launch(&config(1, 32, layout.bytes()), &|| unsafe {
        let values = region.bind();
        if device::thread_idx_x() != 7 {
            values.store(device::thread_idx_x() as usize, 1);
        }
        device::sync_threads();
        let _ = values.load(7);
    });
    expect_error(result, "nothing wrote");
}

#[test]
fn reports_a_missing_barrier_between_warps() {
    let (layout, region) = SharedLayout::new().push::<u32>(64);
    let result = launch(&config(1, 64, layout.bytes()), &|| unsafe {
        let values = region.bind();
        let thread = device::thread_idx_x() as usize;
        values.store(thread, 1);
        // Missing sync_threads: thread t reads what thread t + 32 (another warp) writes.
        let partner = (thread + 32) % 64;
        device::sync_warp(FULL_WARP);
        let _ = values.load(partner);
    });
    // Either the read came before the partner's write (uninitialised) or after it (race);
    // both are errors on a GPU.
    let message = result.expect_err("the emulator accepted a racy kernel").message;
    assert!(message.contains("race") || message.contains("nothing wrote"), "{message}");
}

#[test]
fn reports_out_of_bounds_shared_indices() {
    let (layout, region) = SharedLayout::new().push::<u32>(8);
    let result = launch(&config(1, 32, layout.bytes()), &|| unsafe {
        region.bind().store(device::thread_idx_x() as usize, 0);
    });
    expect_error(result, "out of bounds");
}

#[test]
fn reports_a_shuffle_whose_mask_omits_the_caller() {
    let result = launch(&config(1, 32, 0), &|| unsafe {
        let _ = device::shfl_xor_u32(0x0000_ffff, 1, 1);
    });
    expect_error(result, "omits it");
}

#[test]
fn reports_a_full_warp_mask_in_a_partial_warp() {
    let result = launch(&config(1, 48, 0), &|| unsafe {
        let _ = device::ballot(FULL_WARP, true);
    });
    expect_error(result, "do not exist");
}

#[test]
fn reports_a_lane_that_never_joins_a_collective() {
    let result = launch(&config(1, 32, 0), &|| unsafe {
        if device::lane_id() != 3 {
            let _ = device::ballot(FULL_WARP, true);
        } else {
            // Lane 3 waits at a different collective that nobody else joins.
            let _ = device::ballot(0x8, true);
            std::thread::sleep(Duration::from_secs(2));
        }
    });
    let message = result.expect_err("the emulator accepted a stuck warp").message;
    assert!(message.contains("deadlock") || message.contains("returned"), "{message}");
}

#[test]
fn barrier_with_a_vote_reports_any_true_predicate() {
    let results: Vec<AtomicU32> = (0..96).map(|_| AtomicU32::new(0)).collect();
    launch(&config(2, 96, 0), &|| unsafe {
        let thread = device::thread_idx_x();
        let none = device::sync_threads_or(false);
        let last_only = device::sync_threads_or(thread == 95 && device::block_idx_x() == 1);
        let all = device::sync_threads_or(true);
        if device::block_idx_x() == 1 {
            results[thread as usize]
                .store(none as u32 | (last_only as u32) << 1 | (all as u32) << 2, Ordering::SeqCst);
        }
    })
    .unwrap();
    assert!(results.iter().all(|r| r.load(Ordering::SeqCst) == 0b110));
}

#[test]
fn warp_collectives_under_divergent_masks() {
    let results: Vec<AtomicU32> = (0..32).map(|_| AtomicU32::new(0)).collect();
    launch(&config(1, 32, 0), &|| unsafe {
        let lane = device::lane_id();
        let value = if lane < 16 {
            device::ballot(0x0000_ffff, lane.is_multiple_of(2))
        } else {
            device::shfl_idx_u32(0xffff_0000, lane * 10, 16)
        };
        results[lane as usize].store(value, Ordering::SeqCst);
    })
    .unwrap();
    let results: Vec<u32> = results.iter().map(|r| r.load(Ordering::SeqCst)).collect();
    assert_eq!(results[..16], vec![0x5555u32; 16][..]);
    assert_eq!(results[16..], vec![160u32; 16][..]);
}

#[test]
fn reports_panics_in_kernel_code_and_bad_launches() {
    let result = launch(&config(2, 32, 0), &|| {
        if device::block_idx_x() == 1 && device::thread_idx_x() == 5 {
            panic!("index arithmetic overflowed");
        }
    });
    let message = expect_error(result, "overflowed");
    assert!(message.contains("block (1, 0)") && message.contains("thread 5"), "{message}");
    expect_error(launch(&config(1, 0, 0), &|| {}), "threads");
    expect_error(launch(&config(1, 2048, 0), &|| {}), "threads");
    expect_error(launch(&config(1, 32, 1 << 20), &|| {}), "shared memory");
}

#[test]
fn every_launch_runs_each_block_once_in_an_order_of_its_own() {
    let mut orders = std::collections::HashSet::new();
    for blocks in [1u32, 2, 3, 7, 64, 1000] {
        for launch in 0..8 {
            let config = LaunchConfig { grid: (blocks, 1), block_threads: 32, shared_bytes: 0 };
            let order = BlockOrder::new(&config, launch);
            let mut seen: Vec<u64> = (0..order.blocks).map(|i| order.block(i)).collect();
            if blocks == 64 {
                orders.insert(seen.clone());
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..blocks as u64).collect::<Vec<_>>(), "{blocks} blocks, launch {launch}");
        }
    }
    assert!(orders.len() >= 6, "64 blocks over 8 launches took {} orders", orders.len());
    // Two-dimensional grids too: the order covers x and y.
    let config = LaunchConfig { grid: (5, 3), block_threads: 32, shared_bytes: 0 };
    let order = BlockOrder::new(&config, 1);
    let mut seen: Vec<u64> = (0..15).map(|i| order.block(i)).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..15).collect::<Vec<_>>());
}
