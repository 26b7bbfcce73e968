//! Batched top-k (`top_k_rows`, `top_k_rows_ragged`) against the CPU oracle row by row:
//! every key type, both orders, rows of different distributions in one batch, every queue
//! size, k beyond the queues, rows split over several blocks, ragged rows (empty and shorter
//! than k), and bad input; radix selection (`Algorithm::RadixSelect`) through the same
//! checks.

mod common;

use common::{DISTRIBUTIONS, TestKey, generate};
use gpu_select::{Algorithm, Error, Gpu, Keys, Order, PADDING_INDEX, TopKOptions, Tuning, reference};

/// The oracle's first `k` of `row`, as (exact bits, index), padded as the library pads.
fn expected_row<K: TestKey>(row: &[K], k: usize, order: Order) -> Vec<(u64, u64)> {
    let mut best: Vec<(u64, u64)> =
        reference::sort_pairs(row, order).iter().take(k).map(|&(key, i)| (key.exact(), i)).collect();
    let padding = if order == Order::Largest { K::LOWEST } else { K::HIGHEST };
    best.resize(k, (padding.exact(), PADDING_INDEX));
    best
}

/// A batch whose row `r` follows distribution `r mod 8` (each with its own seed).
fn batch<K: TestKey>(rows: usize, cols: usize, seed: u64) -> Vec<K> {
    (0..rows)
        .flat_map(|r| generate::<K>(cols, DISTRIBUTIONS[r % DISTRIBUTIONS.len()], seed + r as u64))
        .collect()
}

fn check_dense<K: TestKey>(gpu: &Gpu, rows: usize, cols: usize, k: usize, order: Order) {
    check_dense_with::<K>(gpu, rows, cols, k, order, Algorithm::Auto);
}

fn check_dense_with<K: TestKey>(
    gpu: &Gpu,
    rows: usize,
    cols: usize,
    k: usize,
    order: Order,
    algorithm: Algorithm,
) {
    let data = batch::<K>(rows, cols, (rows * 7919 + cols * 31 + k) as u64);
    check_data::<K>(gpu, &data, rows, cols, k, order, algorithm);
}

/// `top_k_rows_with` on `data` (`rows × cols`) against the oracle, row by row.
fn check_data<K: TestKey>(
    gpu: &Gpu,
    data: &[K],
    rows: usize,
    cols: usize,
    k: usize,
    order: Order,
    algorithm: Algorithm,
) {
    let top = gpu
        .top_k(
            Keys::rows(&gpu.upload(data).unwrap(), rows, cols),
            k,
            &TopKOptions::new(order).with_algorithm(algorithm),
        )
        .unwrap_or_else(|e| panic!("{rows}×{cols} k={k} {algorithm:?}: {e}"));
    let (values, indices) = (gpu.download(&top.values).unwrap(), gpu.download(&top.indices).unwrap());
    for r in 0..rows {
        let got: Vec<(u64, u64)> = (r * k..(r + 1) * k).map(|i| (values[i].exact(), indices[i])).collect();
        let want = expected_row(&data[r * cols..(r + 1) * cols], k, order);
        let first_difference = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            first_difference.is_none(),
            "{} {rows}×{cols} k={k} {order:?} {algorithm:?}, row {r}: rank {first_difference:?} got {:?}, want {:?}",
            K::NAME,
            first_difference.map(|i| got[i]),
            first_difference.map(|i| want[i]),
        );
    }
}

/// Shapes at the edges of every queue size (k = 32·Q and one more), k = 1 (the warp
/// reduction), k = cols, rows split over several blocks (few rows of ≥ 8192 keys), and rows
/// many enough that each warp takes its own (≥ 32 rows on the emulator, whose one
/// multiprocessor the choice scales with; ≥ 4224 on a GPU of 132).
fn dense_shapes(gpu: &Gpu) -> Vec<(usize, usize, usize)> {
    let mut shapes = vec![
        (40, 300, 100),
        (33, 50, 1),
        (36, 129, 64),
        (9, 1, 1),
        (8, 77, 1),
        (8, 500, 32),
        (8, 500, 33),
        (3, 700, 128),
        (3, 700, 129),
        (2, 300, 300),
        (2, 20_000, 100),
        (1, 40_000, 7),
    ];
    if !common::on_emulator(gpu) {
        shapes.extend([
            (1000, 1000, 100),
            (200, 5000, 256),
            (100, 5000, 512),
            (100, 5000, 1000),
            (50, 9000, 2048),
            (64, 131_072, 50),
            (64, 131_072, 1024),
            (3, 1 << 20, 64),
            (5, 3000, 2500),
            (4500, 300, 100),
            (4400, 1000, 1),
            (4300, 2000, 1024),
        ]);
    }
    shapes
}

fn check_all_dense<K: TestKey>() {
    let gpu = common::gpu();
    for (rows, cols, k) in dense_shapes(&gpu) {
        for order in [Order::Smallest, Order::Largest] {
            check_dense::<K>(&gpu, rows, cols, k, order);
            if cols <= 1024 && k <= 256 {
                // Auto may take a warp's radix selection here; the queues stay covered.
                check_dense_with::<K>(&gpu, rows, cols, k, order, Algorithm::WarpSelect);
            }
        }
    }
    // The queues on rows long enough that, once the threshold is tight, the 16-byte filter
    // alone decides which keys are offered (Auto takes radix selection for few long rows):
    // a filter that read the wrong keys loses the best ones here (16-bit keys did, GPU run
    // 156, where every emulator shape above passed).
    for (rows, cols, k) in [(2, 6000, 1), (2, 6003, 16), (3, 4100, 100)] {
        for order in [Order::Smallest, Order::Largest] {
            check_dense_with::<K>(&gpu, rows, cols, k, order, Algorithm::WarpSelect);
        }
    }
}

#[test]
fn rows_f32() {
    check_all_dense::<f32>();
}
#[test]
fn rows_f64() {
    check_all_dense::<f64>();
}
#[test]
fn rows_i32() {
    check_all_dense::<i32>();
}
#[test]
fn rows_u32() {
    check_all_dense::<u32>();
}
#[test]
fn rows_i64() {
    check_all_dense::<i64>();
}
#[test]
fn rows_u64() {
    check_all_dense::<u64>();
}
#[test]
fn rows_f16() {
    check_all_dense::<half::f16>();
}
#[test]
fn rows_bf16() {
    check_all_dense::<half::bf16>();
}

/// The large queues (k up to 2048, where the queue spills to local memory) and k just beyond
/// them (the batched radix select), on the emulator too.
#[test]
fn large_queues_and_k_beyond_them() {
    let gpu = common::gpu();
    for (rows, cols, k) in [(2, 2100, 513), (2, 2100, 1024), (2, 2500, 2048), (2, 2600, 2049)] {
        check_dense::<f32>(&gpu, rows, cols, k, Order::Smallest);
        check_dense::<u64>(&gpu, rows, cols, k, Order::Largest);
    }
}

/// Dense rows with `k` beyond the queues take the batched radix select (every row's
/// selection in the same launches, then a sort of each row's `k` padded to the sort's runs):
/// `k` padded (2049 → 4096, 5000 → 8192), `k` already a power of two times 2048 (the sort
/// writes the output itself), `k = cols`; rows of every distribution (all equal, few
/// distinct, NaN and infinities among them); every key type, both orders.
fn check_large_k<K: TestKey>() {
    let gpu = common::gpu();
    let mut shapes = vec![(3, 2600, 2049), (2, 4100, 4096), (2, 6000, 5000), (2, 3000, 3000)];
    if !common::on_emulator(&gpu) {
        shapes.extend([(8, 200_000, 16_384), (3, 1 << 20, 262_144), (100, 40_000, 10_000)]);
    }
    for (rows, cols, k) in shapes {
        for order in [Order::Smallest, Order::Largest] {
            check_dense::<K>(&gpu, rows, cols, k, order);
        }
    }
}

#[test]
fn large_k_rows_f32() {
    check_large_k::<f32>();
}

#[test]
fn large_k_rows_f64() {
    check_large_k::<f64>();
}

#[test]
fn large_k_rows_i32() {
    check_large_k::<i32>();
}

#[test]
fn large_k_rows_u32() {
    check_large_k::<u32>();
}

#[test]
fn large_k_rows_i64() {
    check_large_k::<i64>();
}

#[test]
fn large_k_rows_u64() {
    check_large_k::<u64>();
}

#[test]
fn large_k_rows_f16() {
    check_large_k::<half::f16>();
}

#[test]
fn large_k_rows_bf16() {
    check_large_k::<half::bf16>();
}

/// The batched radix select over several launches (a workspace budget of one row per
/// launch; on a GPU also more rows than one launch's grid takes, 65 535), on strided rows
/// with the caller's indices (each row's positions index its own part of the table).
#[test]
fn large_k_rows_in_several_launches_strided_with_indices() {
    let gpu = common::gpu();
    let one_row_per_launch = gpu.with_tuning(Tuning { rows_large_k_workspace_bytes: 1, ..*gpu.tuning() });
    let mut cases = vec![(&one_row_per_launch, 5, 2500, 2600, 2100)];
    if !common::on_emulator(&gpu) {
        cases.push((&gpu, 65_600, 2_100, 2_100, 2_049));
    }
    for (gpu, rows, cols, stride, k) in cases {
        let data = batch::<u32>(rows, stride, 77);
        let table: Vec<u64> =
            (0..data.len() as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8).collect();
        for order in [Order::Smallest, Order::Largest] {
            let (keys, ids) = (gpu.upload(&data).unwrap(), gpu.upload(&table).unwrap());
            let top = gpu
                .top_k(
                    Keys::rows_strided(&keys, rows, cols, stride).with_indices(&ids),
                    k,
                    &TopKOptions::new(order),
                )
                .unwrap();
            let (values, indices) = (gpu.download(&top.values).unwrap(), gpu.download(&top.indices).unwrap());
            for r in 0..rows {
                let want: Vec<(u64, u64)> = expected_row(&data[r * stride..r * stride + cols], k, order)
                    .into_iter()
                    .map(|(key, column)| (key, table[r * stride + column as usize]))
                    .collect();
                let got: Vec<(u64, u64)> =
                    (r * k..(r + 1) * k).map(|i| (values[i].exact(), indices[i])).collect();
                assert!(got == want, "{rows}×{cols} (stride {stride}) k={k} {order:?}: row {r} differs");
            }
        }
    }
}

fn check_ragged<K: TestKey>(gpu: &Gpu, lens: &[usize], k: usize, order: Order) {
    check_ragged_with::<K>(gpu, lens, k, order, Algorithm::Auto);
}

fn check_ragged_with<K: TestKey>(gpu: &Gpu, lens: &[usize], k: usize, order: Order, algorithm: Algorithm) {
    let rows: Vec<Vec<K>> = lens
        .iter()
        .enumerate()
        .map(|(r, &len)| generate::<K>(len, DISTRIBUTIONS[r % DISTRIBUTIONS.len()], 40 + r as u64))
        .collect();
    let mut offsets = vec![0u64];
    for row in &rows {
        offsets.push(offsets.last().unwrap() + row.len() as u64);
    }
    let data: Vec<K> = rows.concat();
    let top = gpu
        .top_k(
            Keys::ragged(&gpu.upload(&data).unwrap(), &gpu.upload(&offsets).unwrap()),
            k,
            &TopKOptions::new(order).with_algorithm(algorithm),
        )
        .unwrap_or_else(|e| panic!("ragged k={k} {algorithm:?}: {e}"));
    let (values, indices) = (gpu.download(&top.values).unwrap(), gpu.download(&top.indices).unwrap());
    for (r, row) in rows.iter().enumerate() {
        let got: Vec<(u64, u64)> = (r * k..(r + 1) * k).map(|i| (values[i].exact(), indices[i])).collect();
        assert_eq!(
            got,
            expected_row(row, k, order),
            "{} ragged k={k} {order:?} {algorithm:?}, row {r} of {}",
            K::NAME,
            row.len()
        );
    }
}

#[test]
fn ragged_rows_pad_what_they_lack() {
    let gpu = common::gpu();
    let lens = [0, 1, 31, 100, 0, 257, 5000, 64, 3, 20_000];
    for order in [Order::Smallest, Order::Largest] {
        for k in [1, 40, 256] {
            check_ragged::<f32>(&gpu, &lens, k, order);
            check_ragged::<i64>(&gpu, &lens, k, order);
        }
        check_ragged::<u32>(&gpu, &lens, 3000, order); // beyond the queues
    }
    // Few long rows: split over several blocks, with a short one beside them.
    check_ragged::<f32>(&gpu, &[30_000, 10, 25_000], 50, Order::Largest);
    // A k past the padding's upload chunk (2^16 entries): padded in several copies.
    check_ragged::<u32>(&gpu, &[150_000, 3, 0], 140_000, Order::Smallest);
}

/// Many ragged rows (each warp its own row): empty rows, rows shorter than k, and rows that
/// start anywhere, so the filter's first and last groups of four are partial.
#[test]
fn many_ragged_rows_one_warp_each() {
    let gpu = common::gpu();
    let rows = if common::on_emulator(&gpu) { 45 } else { 4500 };
    let lens: Vec<usize> = (0..rows).map(|r| if r % 9 == 0 { 0 } else { r * 37 % 1500 }).collect();
    for order in [Order::Smallest, Order::Largest] {
        check_ragged::<f32>(&gpu, &lens, 50, order);
        check_ragged::<u64>(&gpu, &lens, 200, order);
    }
}

/// Radix selection: rows that need no histogram pass (≤ 2048 keys), one pass (uniform),
/// several (few distinct keys, specials), and every bit chosen with the ties still too many
/// (all-equal and two-valued rows longer than 2048: ties placed in column order); k = 1,
/// k = 2048 (the candidates' capacity) and k = cols; rows split over blocks and merged by a
/// warp or a block; every key type, both orders.
fn radix_shapes(gpu: &Gpu) -> Vec<(usize, usize, usize)> {
    let mut shapes = vec![
        (8, 3000, 1000),
        (8, 2048, 2048),
        (8, 5000, 1),
        (8, 700, 300),
        (8, 2300, 2300),
        // Rows within a sort's slots narrowed in the pool first (32-bit keys) to a sort of
        // `k` rounded up, and not (64-bit keys): 2000 keys for 10, 1500 for 600.
        (8, 2000, 10),
        (8, 1500, 600),
        // One row is split over two blocks on the emulator (one multiprocessor): the merge
        // of 200 and 512 candidates takes a warp, of 600 a block.
        (1, 20_000, 100),
        (1, 40_000, 256),
        (1, 20_000, 300),
        // Rows that start off a 16-byte boundary, longer than a tile of 16-byte vector
        // loads (4096 32-bit keys, 8192 16-bit ones): the keys before the boundary, the
        // vector tiles, the keys after them; longer than the pool, so the sample's read
        // too (and, on all-equal rows, its early stop).
        (8, 9001, 7),
        (3, 17_003, 300),
    ];
    if !common::on_emulator(gpu) {
        shapes.extend([
            (1000, 5000, 1000),
            (64, 131_072, 1024),
            (64, 131_072, 50),
            (200, 32_000, 2048),
            (4300, 2000, 700),
            (16, 1 << 20, 257),
        ]);
    }
    shapes
}

/// `Algorithm::RadixSelect` on every shape of `shapes`, both orders; the host picks the
/// block or the warp kernel by the shape.
fn check_radix<K: TestKey>(shapes: fn(&Gpu) -> Vec<(usize, usize, usize)>) {
    let gpu = common::gpu();
    for (rows, cols, k) in shapes(&gpu) {
        for order in [Order::Smallest, Order::Largest] {
            check_dense_with::<K>(&gpu, rows, cols, k, order, Algorithm::RadixSelect);
        }
    }
}

#[test]
fn radix_rows_f32() {
    check_radix::<f32>(radix_shapes);
}
#[test]
fn radix_rows_f64() {
    check_radix::<f64>(radix_shapes);
}
#[test]
fn radix_rows_i32() {
    check_radix::<i32>(radix_shapes);
}
#[test]
fn radix_rows_u32() {
    check_radix::<u32>(radix_shapes);
}
#[test]
fn radix_rows_i64() {
    check_radix::<i64>(radix_shapes);
}
#[test]
fn radix_rows_u64() {
    check_radix::<u64>(radix_shapes);
}
#[test]
fn radix_rows_f16() {
    check_radix::<half::f16>(radix_shapes);
}
#[test]
fn radix_rows_bf16() {
    check_radix::<half::bf16>(radix_shapes);
}

/// One row split over radix blocks (2 on the emulator, 2 to 4 on a GPU) for every
/// distribution: the merge of the parts' sorted runs keeps ties in column order across parts
/// (all-equal, few distinct), NaN and signed zeros bit for bit (specials).
fn check_split_radix_row<K: TestKey>() {
    let gpu = without_bounded_split(&common::gpu());
    for (d, &distribution) in DISTRIBUTIONS.iter().enumerate() {
        for (cols, k) in [(20_000, 100), (20_000, 1000), (40_000, 2048)] {
            let data = generate::<K>(cols, distribution, (d * 31 + k) as u64);
            for order in [Order::Smallest, Order::Largest] {
                check_data::<K>(&gpu, &data, 1, cols, k, order, Algorithm::RadixSelect);
            }
        }
    }
}

#[test]
fn split_radix_row_f32() {
    check_split_radix_row::<f32>();
}

#[test]
fn split_radix_row_i64() {
    check_split_radix_row::<i64>();
}

/// Few long rows split as a GPU's balanced rule splits them (runs 280–281): one row of 2^20
/// keys at k = 8 (256 parts, the block kernel over their 2048 candidates), of 2^19 at k = 16
/// and 2^18 at k = 32 (16 parts: a co-ranking merge, not the warp kernel over 64 or 32), of
/// 2^22 at k = 1024 (64 parts, the radix kernel over 65 536 candidates), 8 rows of 2^20 at
/// k = 2048 (32 parts each), and f64's 2^21 at k = 512; uniform keys and a few distinct
/// values (ties across parts). The emulator splits a row in two at most; it takes smaller
/// rows through the same calls.
#[test]
fn few_long_rows_split_for_balance() {
    let gpu = without_bounded_split(&common::gpu());
    let shapes: &[(usize, usize, usize)] = if common::on_emulator(&gpu) {
        &[(1, 40_000, 16), (2, 30_000, 1024)]
    } else {
        &[(1, 1 << 20, 8), (1, 1 << 19, 16), (1, 1 << 18, 32), (1, 1 << 22, 1024), (8, 1 << 20, 2048)]
    };
    for &(rows, cols, k) in shapes {
        for (d, distribution) in
            [common::Distribution::Uniform, common::Distribution::FewDistinct(7)].into_iter().enumerate()
        {
            let data = generate::<f32>(rows * cols, distribution, (cols + k + d) as u64);
            for order in [Order::Smallest, Order::Largest] {
                check_data::<f32>(&gpu, &data, rows, cols, k, order, Algorithm::RadixSelect);
            }
        }
    }
    if !common::on_emulator(&gpu) {
        let data = generate::<f64>(1 << 21, common::Distribution::Uniform, 21);
        check_data::<f64>(&gpu, &data, 1, 1 << 21, 512, Order::Largest, Algorithm::RadixSelect);
    }
}

/// `gpu` with one long row split the way it was before the bounded split (parts that each
/// keep their `k` best, then a merge), so that the tests above still reach that path.
fn without_bounded_split(gpu: &Gpu) -> Gpu {
    gpu.with_tuning(Tuning { rows_bounded_split: Some(false), ..*gpu.tuning() })
}

/// `gpu` splitting long dense rows under a sampled bound wherever it applies (several rows
/// too, at least two parts each).
fn with_bounded_split(gpu: &Gpu) -> Gpu {
    gpu.with_tuning(Tuning { rows_bounded_split: Some(true), ..*gpu.tuning() })
}

/// The bounded split (one row, and three and four rows forced), every distribution, both
/// orders, 16- and 32-bit keys, `k` from 1 to 2048: the candidates' path (uniform, sorted
/// keys; four rows of two parts at `k = 2048`, about 2 300 candidates a row),
/// the ties' path (all-equal and two-valued rows: the bound is the `k`-th best), ties among
/// the candidates beyond the sort (few distinct values: the whole row), NaN and signed
/// zeros bit for bit (specials), ties broken by column throughout.
fn check_bounded_split<K: TestKey>() {
    let gpu = with_bounded_split(&common::gpu());
    for (d, &distribution) in DISTRIBUTIONS.iter().enumerate() {
        for (rows, cols, k) in
            [(1, 20_000, 1), (1, 20_000, 100), (1, 40_000, 2048), (3, 9_000, 700), (4, 9_000, 2048)]
        {
            let data: Vec<K> = (0..rows)
                .flat_map(|r| generate::<K>(cols, distribution, (d * 31 + k + r * 7) as u64))
                .collect();
            for order in [Order::Smallest, Order::Largest] {
                check_data::<K>(&gpu, &data, rows, cols, k, order, Algorithm::RadixSelect);
            }
        }
    }
}

#[test]
fn bounded_split_f32() {
    check_bounded_split::<f32>();
}

#[test]
fn bounded_split_bf16() {
    check_bounded_split::<half::bf16>();
}

#[test]
fn bounded_split_u32() {
    check_bounded_split::<u32>();
}

/// One row of 2^21 bf16 keys rounded from uniform values in [0, 1) (1 in 512 keys is 1.0, 1
/// in 256 each value below): largest first, the bound falls on a value shared by thousands of
/// keys and about 12 000 candidates (more than a block's threads load at once, 256 × 32, the
/// last load partial) tie in runs far beyond the sort, so the finish narrows them by column
/// over several passes; smallest first, about 30 keys share a value and the candidates
/// number 6 300 … 8 700 (two loads at `k = 2048`).
#[test]
fn bounded_split_many_tied_candidates() {
    let gpu = with_bounded_split(&common::gpu());
    let cols = 1 << 21;
    let mut random = common::SplitMix(21);
    let data: Vec<half::bf16> =
        (0..cols).map(|_| half::bf16::from_f32((random.next() >> 40) as f32 / (1u64 << 24) as f32)).collect();
    for k in [16, 1024, 2048] {
        for order in [Order::Largest, Order::Smallest] {
            check_data::<half::bf16>(&gpu, &data, 1, cols, k, order, Algorithm::RadixSelect);
        }
    }
}

/// Rows whose bounded split's sample (`BOUNDED_SAMPLE` keys at `bounded_sample_position`)
/// misleads it: sampled keys that are the row's best and all equal (no key ranks below the
/// bound, more than `k` tie with it: the ties' path), the row's best and distinct (fewer
/// than `k` keys at or below the bound: the whole row), and the row's worst (nearly every
/// key below the bound, more than the candidates hold and than a part's pool: the whole
/// row). Each must still give the oracle's answer.
#[test]
fn bounded_split_whose_sample_misleads() {
    use gpu_select_kernels::topk::rows_radix::{BOUNDED_SAMPLE, bounded_sample_position};
    let gpu = with_bounded_split(&common::gpu());
    let (cols, k) = (40_000, 1500);
    for order in [Order::Smallest, Order::Largest] {
        // Uniform keys are in [-1000, 1000).
        let sign = if order == Order::Smallest { -1.0f32 } else { 1.0 };
        let cases: [&dyn Fn(usize) -> f32; 3] =
            [&|_| 2000.0 * sign, &|i| (2000.0 + i as f32) * sign, &|i| -(2000.0 + i as f32) * sign];
        for (c, sampled) in cases.into_iter().enumerate() {
            let mut data = generate::<f32>(2 * cols, common::Distribution::Uniform, 11 + c as u64);
            for row in data.chunks_mut(cols) {
                for i in 0..BOUNDED_SAMPLE {
                    row[bounded_sample_position(i, cols as u64, BOUNDED_SAMPLE) as usize] =
                        sampled(i as usize);
                }
            }
            check_data::<f32>(&gpu, &data[..cols], 1, cols, k, order, Algorithm::RadixSelect);
            check_data::<f32>(&gpu, &data, 2, cols, k, order, Algorithm::RadixSelect);
        }
    }
}

/// Long rows (longer than the pool, so one read gathers them under the sample's bound) whose
/// `k`-th best falls on `+0`, on `-0`, among NaNs, or among negative keys, with NaNs of both
/// signs and several payloads spread through them: the gather tests whole tiles by the keys'
/// bits against the bound (`Key::bits_bound`), takes ranks for a tile holding a negative NaN
/// and for a bound among the NaNs' ranks, and the keys outside whole tiles one by one. Row 0
/// is mostly negative, row 1 its mirror; both orders, the radix kernel and the bounded split.
fn check_gather_at_zeros_and_nans<K: TestKey>(convert: fn(f32) -> K, nans: [K; 4]) {
    let cols = 20_011;
    let mut random = common::SplitMix(cols as u64);
    let mut row = |sign: f32| -> Vec<K> {
        let mut keys: Vec<K> = (0..cols)
            .map(|i| match i % 50 {
                0..=1 => convert(sign * 0.0),
                2 => convert(-sign * 0.0),
                3 if i % 200 == 3 => convert(-sign * (1.0 + (random.next() >> 44) as f32 / 4096.0)),
                _ => convert(sign * (1e-3 + (random.next() >> 40) as f32 / (1u64 << 24) as f32)),
            })
            .collect();
        for (j, nan) in nans.iter().cycle().take(40).enumerate() {
            keys[(j * 997 + 11) % cols] = *nan;
        }
        keys
    };
    let data: Vec<K> = [row(-1.0), row(1.0)].concat();
    let plain = common::gpu();
    for gpu in [without_bounded_split(&plain), with_bounded_split(&plain)] {
        for k in [10, 60, 150, 500, 1000, 2048] {
            for order in [Order::Largest, Order::Smallest] {
                check_data::<K>(&gpu, &data, 2, cols, k, order, Algorithm::RadixSelect);
            }
        }
    }
}

#[test]
fn long_rows_gathered_at_zeros_and_nans() {
    check_gather_at_zeros_and_nans::<f32>(
        |value| value,
        [0x7fc0_0000, 0xffc0_0000, 0xff80_0001, 0x7fff_ffff].map(f32::from_bits),
    );
    check_gather_at_zeros_and_nans::<half::bf16>(
        half::bf16::from_f32,
        [0x7fc0, 0xffc0, 0xff81, 0x7fff].map(half::bf16::from_bits),
    );
    check_gather_at_zeros_and_nans::<half::f16>(
        half::f16::from_f32,
        [0x7e00, 0xfe00, 0xfc01, 0x7fff].map(half::f16::from_bits),
    );
}

/// Long rows whose evenly spaced keys (the radix kernel's sample: `SAMPLE` of them at
/// `i · len / SAMPLE`) are the row's best: the sample bounds the `k`-th best too tightly, fewer
/// than `k` keys fall within the bound, and the kernel must read the row again the usual way.
#[test]
fn radix_rows_whose_sample_misleads() {
    const SAMPLE: usize = gpu_select_kernels::topk::rows_radix::SAMPLE as usize;
    let gpu = common::gpu();
    // Enough rows that the GPU does not split them (a part would sample other positions).
    let rows = if common::on_emulator(&gpu) { 2 } else { 300 };
    let (cols, k) = (20_000, 1500);
    for order in [Order::Smallest, Order::Largest] {
        // Uniform keys are in [-1000, 1000).
        let best = if order == Order::Smallest { -2000.0f32 } else { 2000.0 };
        let mut data = generate::<f32>(rows * cols, common::Distribution::Uniform, 5);
        for row in data.chunks_mut(cols) {
            for i in 0..SAMPLE {
                row[i * cols / SAMPLE] = best;
            }
        }
        check_data::<f32>(&gpu, &data, rows, cols, k, order, Algorithm::RadixSelect);
    }
}

/// Radix selection with a warp per row (rows of at most 1024 keys, `k ≤ 256`): every sort
/// size (`k` = 32·R and one more), k = 1 (the warp's minimum) and k = cols, rows of one key,
/// rows at both sides of each kernel's length (128, 256, 512, 1024 keys), rows whose length is
/// no multiple of 32; the batch's all-equal and two-valued rows take the ordered ties (and
/// at k = 1 the lowest column of the best), its sorted and few-distinct rows several passes.
fn warp_radix_shapes(gpu: &Gpu) -> Vec<(usize, usize, usize)> {
    let mut shapes = vec![
        (8, 1024, 256),
        (8, 1000, 100),
        (8, 1024, 1),
        (9, 33, 33),
        (8, 500, 129),
        (8, 64, 64),
        (8, 1, 1),
        (8, 200, 32),
        (8, 700, 65),
        (8, 128, 1),
        (8, 128, 128),
        (8, 129, 8),
        (8, 256, 100),
        (8, 257, 1),
        (8, 512, 256),
        (8, 513, 33),
    ];
    if !common::on_emulator(gpu) {
        shapes.extend([
            (10_000, 1000, 100),
            (4500, 1024, 256),
            (5000, 17, 3),
            (3000, 999, 128),
            (100_000, 128, 8),
            (10_000, 256, 1),
            (4000, 500, 50),
        ]);
    }
    shapes
}

#[test]
fn warp_radix_rows_f32() {
    check_radix::<f32>(warp_radix_shapes);
}
#[test]
fn warp_radix_rows_f64() {
    check_radix::<f64>(warp_radix_shapes);
}
#[test]
fn warp_radix_rows_i32() {
    check_radix::<i32>(warp_radix_shapes);
}
#[test]
fn warp_radix_rows_u32() {
    check_radix::<u32>(warp_radix_shapes);
}
#[test]
fn warp_radix_rows_i64() {
    check_radix::<i64>(warp_radix_shapes);
}
#[test]
fn warp_radix_rows_u64() {
    check_radix::<u64>(warp_radix_shapes);
}
#[test]
fn warp_radix_rows_f16() {
    check_radix::<half::f16>(warp_radix_shapes);
}
#[test]
fn warp_radix_rows_bf16() {
    check_radix::<half::bf16>(warp_radix_shapes);
}

/// `k = 1` (the warp's minimum) on rows whose best key has the largest rank there is: every
/// key `u64::MAX` (or `i64::MAX`) for the smallest, every key 0 (`i64::MIN`) for the
/// largest; rows of one key and of each kernel's length.
#[test]
fn the_best_of_rows_of_extreme_keys() {
    let gpu = common::gpu();
    for cols in [1, 100, 256, 1000] {
        for (order, unsigned, signed) in
            [(Order::Smallest, u64::MAX, i64::MAX), (Order::Largest, 0, i64::MIN)]
        {
            check_data::<u64>(&gpu, &vec![unsigned; 3 * cols], 3, cols, 1, order, Algorithm::RadixSelect);
            check_data::<i64>(&gpu, &vec![signed; 3 * cols], 3, cols, 1, order, Algorithm::RadixSelect);
        }
    }
}

/// A warp's radix selection over ragged rows of at most 1024, 256 and 128 keys (each its own
/// kernel): empty rows, rows shorter than k (padded), rows that start anywhere.
#[test]
fn warp_radix_ragged_rows() {
    let gpu = common::gpu();
    let lens = [0, 1, 31, 1024, 0, 257, 1000, 64, 3, 512, 1023, 33];
    // The kernels for rows of at most 128 and 256 keys.
    let short = [0, 1, 31, 128, 0, 100, 64, 3, 127, 33];
    let shorter = [0, 200, 256, 3, 129, 0, 255];
    for order in [Order::Smallest, Order::Largest] {
        for k in [1, 40, 256] {
            for lens in [&lens[..], &short, &shorter] {
                check_ragged_with::<f32>(&gpu, lens, k, order, Algorithm::RadixSelect);
                check_ragged_with::<i64>(&gpu, lens, k, order, Algorithm::RadixSelect);
            }
        }
    }
}

/// The caller's indices, some of them [`PADDING_INDEX`]: those keys take no part, in the
/// queues and in a warp's radix selection alike (rows of each warp kernel's length, the
/// best keys of every row marked, and a row with fewer keys taking part than `k`, padded);
/// the other keys report the caller's index.
#[test]
fn keys_marked_by_the_padding_index_take_no_part() {
    let gpu = common::gpu();
    for (rows, cols) in [(8usize, 100usize), (8, 256), (8, 500), (8, 1000)] {
        let data = batch::<f32>(rows, cols, cols as u64);
        // Every third key of each row, and the whole of row 5 but for 3 keys, take no part.
        let marked = |r: usize, c: usize| c % 3 == 1 || (r == 5 && c >= 3);
        let ids: Vec<u64> = (0..rows * cols)
            .map(|i| if marked(i / cols, i % cols) { PADDING_INDEX } else { 10 * i as u64 + 7 })
            .collect();
        let (keys, device_ids) = (gpu.upload(&data).unwrap(), gpu.upload(&ids).unwrap());
        for (k, order, algorithm) in [
            (1, Order::Largest, Algorithm::RadixSelect),
            (10, Order::Smallest, Algorithm::RadixSelect),
            (100, Order::Largest, Algorithm::RadixSelect),
            (10, Order::Largest, Algorithm::WarpSelect),
        ] {
            let top = gpu
                .top_k(
                    Keys::rows(&keys, rows, cols).with_indices(&device_ids),
                    k,
                    &TopKOptions::new(order).with_algorithm(algorithm),
                )
                .unwrap();
            let (values, indices) = (gpu.download(&top.values).unwrap(), gpu.download(&top.indices).unwrap());
            for r in 0..rows {
                let taking_part: Vec<(usize, f32)> =
                    (0..cols).filter(|&c| !marked(r, c)).map(|c| (c, data[r * cols + c])).collect();
                let row: Vec<f32> = taking_part.iter().map(|p| p.1).collect();
                let want: Vec<(u64, u64)> = expected_row(&row, k, order)
                    .into_iter()
                    .map(|(key, i)| {
                        let id =
                            if i == PADDING_INDEX { i } else { ids[r * cols + taking_part[i as usize].0] };
                        (key, id)
                    })
                    .collect();
                let got: Vec<(u64, u64)> =
                    (r * k..(r + 1) * k).map(|i| (values[i].exact(), indices[i])).collect();
                assert_eq!(got, want, "{rows}×{cols} k={k} {order:?} {algorithm:?}, row {r}");
            }
        }
    }
}

/// Radix selection over ragged rows: empty rows, rows shorter than k (padded), rows that
/// start anywhere, and the choice of the two kernels agreeing on one batch. The `k`s take
/// every register layout of the block sort (`sort_and_write`: 2 pairs a thread for at most
/// 64 candidates and `k ≤ 512`, 4 up to 1024, 8 beyond), short rows padding to `k` in each.
#[test]
fn radix_ragged_rows() {
    let gpu = common::gpu();
    let lens = [0, 1, 31, 2049, 0, 257, 5000, 64, 3, 20_000, 2048];
    for order in [Order::Smallest, Order::Largest] {
        for k in [1, 300, 2048] {
            check_ragged_with::<f32>(&gpu, &lens, k, order, Algorithm::RadixSelect);
            check_ragged_with::<u64>(&gpu, &lens, k, order, Algorithm::RadixSelect);
        }
        for k in [600, 1024, 1025] {
            check_ragged_with::<f32>(&gpu, &lens, k, order, Algorithm::RadixSelect);
        }
    }
    check_ragged_with::<i32>(&gpu, &lens, 40, Order::Largest, Algorithm::WarpSelect);
}

#[test]
fn one_row_agrees_with_top_k() {
    let gpu = common::gpu();
    let data = generate::<f32>(30_000, common::Distribution::Uniform, 9);
    let device = gpu.upload(&data).unwrap();
    for k in [1, 64, 700] {
        let rows =
            gpu.top_k(Keys::rows(&device, 1, data.len()), k, &TopKOptions::new(Order::Largest)).unwrap();
        let whole = gpu.top_k(&device, k, &TopKOptions::largest()).unwrap();
        assert_eq!(gpu.download(&rows.indices).unwrap(), gpu.download(&whole.indices).unwrap(), "k={k}");
    }
}

#[test]
fn bad_input_gives_clear_errors() {
    let gpu = common::gpu();
    let data = gpu.upload(&[1.0f32; 12]).unwrap();
    let invalid = |result: Result<_, Error>| matches!(result, Err(Error::InvalidArgument { .. }));
    let k_out_of_range = |result: Result<_, Error>| matches!(result, Err(Error::KOutOfRange { .. }));
    assert!(k_out_of_range(gpu.top_k(Keys::rows(&data, 3, 4), 0, &TopKOptions::new(Order::Smallest))));
    assert!(k_out_of_range(gpu.top_k(Keys::rows(&data, 3, 4), 5, &TopKOptions::new(Order::Smallest))));
    assert!(matches!(
        gpu.top_k(Keys::rows(&data, 0, 4), 1, &TopKOptions::new(Order::Smallest)),
        Err(Error::EmptyInput)
    ));
    assert!(matches!(
        gpu.top_k(Keys::rows(&data, 3, 0), 1, &TopKOptions::new(Order::Smallest)),
        Err(Error::EmptyInput)
    ));
    assert!(matches!(
        gpu.top_k(Keys::rows(&data, 4, 4), 1, &TopKOptions::new(Order::Smallest)),
        Err(Error::LengthMismatch { .. })
    ));
    // More keys than the rows hold is a mistake too (a strided matrix says so with its stride).
    assert!(matches!(
        gpu.top_k(Keys::rows(&data, 2, 4), 1, &TopKOptions::smallest()),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(gpu.top_k(Keys::rows_strided(&data, 2, 4, 4), 1, &TopKOptions::smallest()).is_ok());
    assert!(matches!(
        gpu.top_k_host(&[1u32; 10], 4, 1, &TopKOptions::new(Order::Smallest)),
        Err(Error::InvalidArgument { .. })
    ));

    let offsets = |values: &[u64]| gpu.upload(values).unwrap();
    assert!(matches!(
        gpu.top_k(Keys::ragged(&data, &offsets(&[0])), 1, &TopKOptions::new(Order::Smallest)),
        Err(Error::EmptyInput)
    ));
    assert!(invalid(gpu.top_k(
        Keys::ragged(&data, &offsets(&[0, 5, 3])),
        1,
        &TopKOptions::new(Order::Smallest)
    )));
    assert!(invalid(gpu.top_k(
        Keys::ragged(&data, &offsets(&[0, 5, 13])),
        1,
        &TopKOptions::new(Order::Smallest)
    )));
    assert!(k_out_of_range(gpu.top_k(
        Keys::ragged(&data, &offsets(&[0, 12])),
        0,
        &TopKOptions::new(Order::Smallest)
    )));
}

/// The plan form: sized by the plan, one workspace reused across plans of different
/// shapes, and checked (short workspace, wrong output lengths, another shape).
#[test]
fn caller_workspace_and_outputs() {
    let gpu = common::gpu();
    // One long row (split by either kernel on any GPU and the emulator, so a workspace is
    // needed), then many short rows, then k beyond the queues, all through one workspace
    // sized for the largest.
    let shapes = [(1, 40_000, 40), (50, 300, 7), (2, 2600, 2049)];
    let matrices: Vec<_> =
        shapes.iter().map(|&(rows, cols, _)| gpu.upload(&batch::<f32>(rows, cols, 77)).unwrap()).collect();
    let plans: Vec<_> = shapes
        .iter()
        .zip(&matrices)
        .map(|(&(rows, cols, k), matrix)| {
            gpu.plan_top_k(&Keys::rows(matrix, rows, cols), k, &TopKOptions::largest()).unwrap()
        })
        .collect();
    assert!(plans[0].workspace_bytes() > 0);
    assert_eq!(plans[1].workspace_bytes(), 0);
    let bytes = plans.iter().map(|plan| plan.workspace_bytes()).max().unwrap();
    let mut workspace = gpu.alloc_zeroed::<u8>(bytes).unwrap();
    for ((&(rows, cols, k), matrix), plan) in shapes.iter().zip(&matrices).zip(&plans) {
        assert_eq!(plan.outputs(), rows * k);
        let mut out = gpu_select::TopK {
            values: gpu.alloc_zeroed::<f32>(rows * k).unwrap(),
            indices: gpu.alloc_zeroed::<u64>(rows * k).unwrap(),
        };
        gpu.top_k_into(plan, Keys::rows(matrix, rows, cols), &mut out, &mut workspace).unwrap();
        let (values, indices) = (gpu.download(&out.values).unwrap(), gpu.download(&out.indices).unwrap());
        let data = gpu.download(matrix).unwrap();
        for (r, row) in data.chunks(cols).enumerate() {
            let got: Vec<(u64, u64)> =
                (r * k..(r + 1) * k).map(|i| (values[i].exact(), indices[i])).collect();
            assert_eq!(got, expected_row(row, k, Order::Largest), "{rows}x{cols} k={k} row {r}");
        }
    }

    let matrix = gpu.upload(&batch::<f32>(1, 40_000, 5)).unwrap();
    let keys = || Keys::rows(&matrix, 1, 40_000);
    let plan = gpu.plan_top_k(&keys(), 40, &TopKOptions::smallest()).unwrap();
    let needed = plan.workspace_bytes();
    let mut short = gpu.alloc_zeroed::<u8>(needed - 1).unwrap();
    let mut out = gpu_select::TopK {
        values: gpu.alloc_zeroed::<f32>(40).unwrap(),
        indices: gpu.alloc_zeroed::<u64>(40).unwrap(),
    };
    assert!(matches!(
        gpu.top_k_into(&plan, keys(), &mut out, &mut short),
        Err(Error::WorkspaceTooSmall { needed: n, given: g }) if n == needed && g == needed - 1
    ));
    let mut wrong = gpu_select::TopK {
        values: gpu.alloc_zeroed::<f32>(40).unwrap(),
        indices: gpu.alloc_zeroed::<u64>(39).unwrap(),
    };
    assert!(matches!(
        gpu.top_k_into(&plan, keys(), &mut wrong, &mut workspace),
        Err(Error::LengthMismatch { .. })
    ));
    // Another shape than planned: refused.
    assert!(matches!(
        gpu.top_k_into(&plan, Keys::rows(&matrix, 2, 20_000), &mut out, &mut workspace),
        Err(Error::InvalidArgument { .. })
    ));
}
