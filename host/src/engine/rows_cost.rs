//! The cost model behind `RowsAlgorithm::Auto`: a predicted time for each batched top-k
//! kernel from the rows, their length, `k`, the key size and the device.
//!
//! As for the whole-array model (`cost.rs`), each kernel's time is a fixed part (its
//! launches) plus the work of its *units* (a warp or a block, whichever takes a row or a
//! part of one), bounded below by the reads of the data it needs. A unit's work is a sum of
//! terms that grow with what it does: keys read, keys that enter a queue, candidates sorted,
//! `k` written. Units run side by side up to a number per multiprocessor; beyond it they
//! take turns (*waves*), below it the time is one unit's (few rows are latency-bound, which
//! is why long rows are split). Waves count the device's own multiprocessors; the work per
//! unit is the fitted GPU's (an H200, 132 multiprocessors).
//!
//! The constants are a least-squares fit (relative error) to `cargo xtask bench` with
//! `GPU_SELECT_BENCH_SECTIONS=rows-sweep` on an H200, each kernel forced, both in one call:
//! run 196 for rows longer than 1024 keys and run 237 for the shorter ones (which the warp
//! radix kernels per row length took), docs/results/raw/
//! `2026-11-26-h200-run196-237-rows-sweep-warp-select.csv` for the queues and
//! `…-radix-select.csv` for radix selection: 202 shapes, 1 to 100 000 rows of 128 to
//! 4 194 304 keys, `k` from 1 to 2048, f32 and f64. The queues' constants are run 196's
//! fit, with a term per warp that takes a row of its own fitted alone to the merged sweep
//! (refitting them all moved four of run 196's choices to slower kernels, 10–34 %). The
//! fit predicts the radix kernels within 16 % (root mean square) and the queues within 29 %;
//! its choice costs 1.6 % on average against the faster of the two measured kernels, 65 %
//! at worst (10 000 × 1000 at `k = 8`, where the queues' model under-predicts them)
//! (`rows.rs`'s tests check both against the measurements). Against the model before (the
//! single warp kernel for rows up to 1024 keys), it moves 9 shapes of the sweep from the
//! queues to the warp radix kernels: 8 of them 1.3–2.2× faster, f64 10 000 × 1000 at `k = 1`
//! 10 % slower (0.0505 → 0.0557 ms). `docs/results/fit_rows_cost.py` redoes the fit.

use super::cost::Device;

/// How a batched top-k runs: the host dispatches it, sizes its workspace and prices it
/// (`rows.rs::plan` decides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowsPlan {
    /// WarpSelect queues: a warp per row (four rows a block), or a block of four warps per
    /// row, or `parts` blocks per row and a merge pass.
    Queues { warp_per_row: bool, parts: u64 },
    /// Radix selection, a warp per row in registers: the kernel for rows of at most
    /// `row_length` keys (128, 256, 512 or 1024).
    WarpRadix { row_length: u64 },
    /// Radix selection, a block per row or per part of one (`parts`), then the parts'
    /// merge; `one_read` when the sample bounds the `k`-th best before the read.
    BlockRadix { parts: u64, one_read: bool },
    /// Radix selection over `parts` blocks per row that keep only their keys below a bound
    /// they sample alike, then a block per row over those candidates (`expected` of them).
    BoundedRadix { parts: u64, expected: u64 },
}

impl RowsPlan {
    /// Blocks per row of the first pass: more than 1 when rows are split (and merged).
    pub(crate) fn parts(self) -> u64 {
        match self {
            RowsPlan::Queues { parts, .. }
            | RowsPlan::BlockRadix { parts, .. }
            | RowsPlan::BoundedRadix { parts, .. } => parts,
            RowsPlan::WarpRadix { .. } => 1,
        }
    }
}

/// The shape of a batched top-k, as the model sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowsShape {
    pub(crate) rows: u64,
    /// Keys per row (the mean of ragged rows).
    pub(crate) len: u64,
    pub(crate) k: u64,
    pub(crate) key_bytes: usize,
}

/// Fitted per-unit work of the queue kernels (ms per wave on the fitted GPU).
mod queues {
    pub(crate) const FIXED_MS: f64 = 0.015_62;
    /// Per 1000 keys a warp reads (16- and 32-bit keys), `k > 1`.
    pub(crate) const PER_KILO_KEY: f64 = 0.001_562;
    /// Per 1000 64-bit keys a warp reads, whatever `k` (not twice a 32-bit key's: a load
    /// instruction each, in flight alike; H200 run 196's 64-bit rows of 32 000 and 131 072
    /// keys took 1.3–1.8× the 32-bit ones' time, not 2×).
    pub(crate) const PER_KILO_KEY_64: f64 = 0.001_881;
    /// Per 1000 keys a warp reads for `k = 1` (a warp's minimum, no queue).
    pub(crate) const PER_KILO_KEY_K1: f64 = 0.000_984_2;
    /// Per 1000 keys that enter a warp's queue.
    pub(crate) const PER_KILO_INSERT: f64 = 0.016_97;
    /// Per 1000 insertions times a merge's work per insertion (`Q·log2(32·Q)` over the
    /// thread queue's registers).
    pub(crate) const PER_KILO_MERGE: f64 = 0.000_338_3;
    /// Per block of four warps, the merge of their queues in shared memory (times
    /// `Q·log2(32·Q)/100`).
    pub(crate) const BLOCK_MERGE: f64 = 0.004_243;
    /// The merge pass of split rows: its launch, per 1000 candidates a warp reads, per
    /// 1000 insertions and merges.
    pub(crate) const SPLIT_FIXED_MS: f64 = 0.006_452;
    pub(crate) const SPLIT_PER_KILO_KEY: f64 = 0.008_244;
    pub(crate) const SPLIT_PER_KILO_INSERT: f64 = 0.000_167_3;
    /// Per warp that takes a row of its own: its set-up and final write, whatever the row's
    /// length (what short rows mostly cost; fitted alone, the other constants held).
    pub(crate) const WARP_PER_ROW_UNIT: f64 = 0.000_120;
    /// Blocks of the queue kernel per multiprocessor at full speed.
    pub(crate) const BLOCKS_PER_SM: f64 = 1.0;
}

/// Fitted per-unit work of the radix kernels (ms per wave on the fitted GPU).
mod radix {
    /// A warp per row: launch, per warp, per 1000 keys of its kernel's row length, per 1000
    /// of `k`, per sort unit; with `k = 1` (the warp's minimum) per warp and per 1000 keys.
    pub(crate) const WARP_FIXED_MS: f64 = 0.007_036;
    pub(crate) const WARP_PER_UNIT: f64 = 0.0;
    pub(crate) const WARP_PER_KILO_KEY: f64 = 0.002_811;
    pub(crate) const WARP_PER_KILO_K: f64 = 0.005_617;
    pub(crate) const WARP_PER_SORT: f64 = 0.000_239_8;
    pub(crate) const WARP_PER_UNIT_K1: f64 = 0.000_097_72;
    pub(crate) const WARP_PER_KILO_KEY_K1: f64 = 0.001_027;
    /// Warps of the warp kernel per multiprocessor at full speed.
    pub(crate) const WARPS_PER_SM: f64 = 4.0;
    /// A block per row or part: launch, per block, per 1000 keys read once (the sample's
    /// bound) or twice (a histogram, then the gathering), per 1000 of `k`.
    pub(crate) const BLOCK_FIXED_MS: f64 = 0.007_599;
    pub(crate) const BLOCK_PER_UNIT: f64 = 0.006_454;
    pub(crate) const BLOCK_PER_KILO_KEY_ONE_READ: f64 = 0.000_341_6;
    pub(crate) const BLOCK_PER_KILO_KEY_TWO_READS: f64 = 0.000_629_4;
    pub(crate) const BLOCK_PER_KILO_K: f64 = 0.013_26;
    /// Per 1000 keys of 64-bit keys, which narrow from the row pass after pass (no pool).
    pub(crate) const BLOCK_PER_KILO_KEY_64: f64 = 0.000_484_9;
    /// Blocks of the block kernel per multiprocessor (its registers allow two).
    pub(crate) const BLOCKS_PER_SM: f64 = 2.0;
    /// The merge of split rows: launch, per 1000 candidates a block stages.
    pub(crate) const MERGE_FIXED_MS: f64 = 0.007_169;
    pub(crate) const MERGE_PER_KILO_CANDIDATE: f64 = 0.000_736_4;
    /// Blocks of the merge per multiprocessor.
    pub(crate) const MERGE_BLOCKS_PER_SM: f64 = 4.0;
}

/// Keys that enter a queue of `k` while a warp reads `len` random keys: each of the first
/// `k`, then the `i`-th with probability `k / i` (`k · (1 + ln(len / k))`).
fn insertions(len: f64, k: f64) -> f64 {
    let k = k.min(len);
    if k <= 0.0 { 0.0 } else { k * (1.0 + (len / k).max(1.0).ln()) }
}

/// Registers a lane's share of a warp queue of `k` takes (`gpu_select_kernels`'
/// `queue_registers`).
fn queue_registers(k: u64) -> f64 {
    gpu_select_kernels::warp::select::queue_registers(k.min(u32::MAX as u64) as u32) as f64
}

/// The bitonic sort's compare-exchange stages for `k` rounded up to a power of two (at
/// least 64), per 2560 slots: the radix kernels sort their candidates this way.
fn sort_work(k: u64) -> f64 {
    let slots = k.next_power_of_two().max(64) as f64;
    let stages = slots.log2();
    slots * stages * (stages + 1.0) / 2.0 / 2560.0
}

/// `units` running `per_sm` to a multiprocessor: how many times a unit's time passes (at
/// least once).
fn waves(units: f64, per_sm: f64, device: Device) -> f64 {
    (units / (per_sm * device.multiprocessors.max(1) as f64)).max(1.0)
}

/// The predicted time in milliseconds of `plan` on `shape`.
pub(crate) fn predict_ms(plan: RowsPlan, shape: RowsShape, device: Device) -> f64 {
    let RowsShape { rows, len, k, key_bytes } = shape;
    let (rows, len, kf) = (rows as f64, len as f64, k as f64);
    // Work per key scales with the ranks' width (16-bit keys rank as 32-bit ones); the
    // read floor below with the keys' own.
    let width = super::rank_bytes(key_bytes) as f64 / 4.0;
    let (compute_ms, reads) = match plan {
        RowsPlan::Queues { warp_per_row, parts } => (queues_ms(warp_per_row, parts, shape, device), 1.0),
        RowsPlan::WarpRadix { row_length } => {
            // The lanes loop over the kernel's `row_length / 32` registers, whatever the
            // row holds.
            let warp_waves = waves(rows, radix::WARPS_PER_SM, device);
            let keys = row_length as f64 * width / 1000.0;
            let per_warp = if k == 1 {
                radix::WARP_PER_UNIT_K1 + radix::WARP_PER_KILO_KEY_K1 * keys
            } else {
                radix::WARP_PER_UNIT
                    + radix::WARP_PER_KILO_KEY * keys
                    + radix::WARP_PER_KILO_K * kf / 1000.0
                    + radix::WARP_PER_SORT * sort_work(k)
            };
            (radix::WARP_FIXED_MS + warp_waves * per_warp, 1.0)
        }
        RowsPlan::BlockRadix { parts, one_read } => {
            let part_len = len / parts as f64;
            let block_waves = waves(rows * parts as f64, radix::BLOCKS_PER_SM, device);
            let per_key = if width > 1.0 {
                radix::BLOCK_PER_KILO_KEY_64
            } else if one_read {
                radix::BLOCK_PER_KILO_KEY_ONE_READ
            } else {
                radix::BLOCK_PER_KILO_KEY_TWO_READS
            };
            let per_block = radix::BLOCK_PER_UNIT
                + per_key * part_len * width / 1000.0
                + radix::BLOCK_PER_KILO_K * kf / 1000.0;
            let mut ms = radix::BLOCK_FIXED_MS + block_waves * per_block;
            if parts > 1 {
                let candidates = parts * k;
                let blocks = rows * candidates.div_ceil(1024) as f64;
                ms += radix::MERGE_FIXED_MS
                    + waves(blocks, radix::MERGE_BLOCKS_PER_SM, device)
                        * radix::MERGE_PER_KILO_CANDIDATE
                        * candidates as f64
                        / 1000.0;
            }
            (ms, if one_read { 1.0 } else { 2.0 })
        }
        RowsPlan::BoundedRadix { parts, expected } => {
            // Both passes as the block kernel's: its parts read once, then a block per
            // row over the candidates (read once when they pass the pool).
            let block_waves = waves(rows * parts as f64, radix::BLOCKS_PER_SM, device);
            let part_ms =
                radix::BLOCK_PER_UNIT + radix::BLOCK_PER_KILO_KEY_ONE_READ * len / parts as f64 / 1000.0;
            let finish_ms = radix::BLOCK_PER_UNIT
                + radix::BLOCK_PER_KILO_KEY_ONE_READ * expected as f64 / 1000.0
                + radix::BLOCK_PER_KILO_K * kf / 1000.0;
            let finish_waves = waves(rows, radix::BLOCKS_PER_SM, device);
            (2.0 * radix::BLOCK_FIXED_MS + block_waves * part_ms + finish_waves * finish_ms, 1.0)
        }
    };
    let read_ms = if device.read_bytes_per_s > 0.0 {
        reads * rows * len * key_bytes as f64 / device.read_bytes_per_s * 1e3
    } else {
        0.0
    };
    compute_ms.max(read_ms)
}

/// The queue kernels' time: each unit's warps read their share of the row and merge what
/// enters their queues; blocks merge their warps' queues; split rows add a merge pass over
/// `parts · k` candidates per row.
fn queues_ms(warp_per_row: bool, parts: u64, shape: RowsShape, device: Device) -> f64 {
    let RowsShape { rows, len, k, key_bytes } = shape;
    let (rows, len, kf) = (rows as f64, len as f64, k as f64);
    // Work per key scales with the ranks' width (16-bit keys rank as 32-bit ones); the
    // read floor below with the keys' own.
    let width = super::rank_bytes(key_bytes) as f64 / 4.0;
    let q = queue_registers(k);
    let merge_size = q * (32.0 * q).log2();
    let thread_registers = gpu_select_kernels::warp::select::thread_registers(
        q as usize,
        8 * super::rank_bytes(key_bytes) as u32,
    ) as f64;
    // One warp's work over `warp_len` keys.
    let warp_work = |warp_len: f64| {
        let read = if width > 1.0 {
            queues::PER_KILO_KEY_64 * warp_len / 1000.0
        } else if k == 1 {
            queues::PER_KILO_KEY_K1 * warp_len / 1000.0
        } else {
            queues::PER_KILO_KEY * warp_len / 1000.0
        };
        if k == 1 {
            read
        } else {
            let inserted = insertions(warp_len, kf);
            read + queues::PER_KILO_INSERT * inserted / 1000.0
                + queues::PER_KILO_MERGE * inserted * merge_size / thread_registers * width / 1000.0
        }
    };
    let block_merge = queues::BLOCK_MERGE * merge_size * width / 100.0;
    let blocks_per_sm = queues::BLOCKS_PER_SM;
    let mut ms = queues::FIXED_MS;
    if warp_per_row {
        ms += waves(rows, 4.0 * blocks_per_sm, device) * (queues::WARP_PER_ROW_UNIT + warp_work(len));
    } else {
        let parts = parts as f64;
        ms += waves(rows * parts, blocks_per_sm, device) * (warp_work(len / (4.0 * parts)) + block_merge);
        if parts > 1.0 {
            ms += queues::SPLIT_FIXED_MS;
        }
        if parts > 1.0 && k > 1 {
            // The merge pass: a block of four warps per row over its parts' candidates.
            let warp_len = parts * kf / 4.0;
            let inserted = insertions(warp_len, kf);
            let merge_waves = waves(rows, blocks_per_sm, device);
            ms += merge_waves
                * (queues::SPLIT_PER_KILO_KEY * warp_len * width / 1000.0
                    + queues::SPLIT_PER_KILO_INSERT
                        * (inserted + inserted * merge_size / thread_registers * width)
                        / 1000.0);
        }
    }
    ms
}
