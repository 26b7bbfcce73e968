//! The call shape of every operation, through each input kind and on each kind of stream:
//! owned buffers, views of parts of buffers, views from raw addresses (and with the `cudarc`
//! feature on a GPU, cudarc slices), on the handle's own stream, a forked one and (on a GPU)
//! a stream another library made; the caller's indices and strided rows; plans reused;
//! convenient calls from several threads; two streams overlapping on the GPU; tuning values
//! that change speed, never results.

mod common;

use common::{Distribution, TestKey, generate};
use gpu_select::{
    Algorithm, BackendKind, DeviceSlice, DeviceSliceMut, Error, Gpu, Keys, Order, PADDING_INDEX,
    SelectAlgorithm, SelectOptions, TopK, TopKOptions, TopKOut, Tuning, reference,
};

/// The oracle's top `k` of `row` as (ordered bits, index) pairs, indices mapped through
/// `ids` when given.
fn expected<K: TestKey>(row: &[K], k: usize, order: Order, ids: Option<&[u64]>) -> Vec<(u64, u64)> {
    let mut want: Vec<(u64, u64)> =
        reference::sort_pairs(row, order).into_iter().take(k).map(|(key, i)| (key.exact(), i)).collect();
    if let Some(ids) = ids {
        for pair in &mut want {
            pair.1 = ids[pair.1 as usize];
        }
    }
    want
}

fn got<K: TestKey>(gpu: &Gpu, top: &TopK<K>) -> Vec<(u64, u64)> {
    let values = gpu.download(&top.values).unwrap();
    let indices = gpu.download(&top.indices).unwrap();
    values.iter().map(|v| v.exact()).zip(indices).collect()
}

/// The handles a test runs on: the device's own stream, a forked one, and on a GPU a
/// stream made outside the library (through cudarc's driver calls) and wrapped.
fn handles(gpu: &Gpu) -> Vec<(&'static str, Gpu)> {
    let mut handles = vec![("own stream", gpu.clone()), ("forked stream", gpu.fork_stream().unwrap())];
    if gpu.backend() == BackendKind::Cuda {
        let stream = foreign_stream(gpu);
        // Safety: a stream of the device's primary context, never destroyed (leaked: the
        // test process ends).
        handles.push(("caller's raw stream", unsafe { gpu.with_raw_stream(stream) }.unwrap()));
    }
    handles
}

/// A non-blocking stream made with the driver directly, as another library would.
fn foreign_stream(gpu: &Gpu) -> *mut std::ffi::c_void {
    gpu.synchronize().unwrap(); // makes the device's context current on this thread
    let stream =
        cudarc::driver::result::stream::create(cudarc::driver::result::stream::StreamKind::NonBlocking)
            .expect("creating a stream outside the library");
    stream.cast()
}

#[test]
fn every_operation_takes_buffers_views_and_raw_addresses_on_every_stream() {
    let gpu = common::gpu();
    let n = 6000;
    let data = generate::<f32>(n + 3, Distribution::Uniform, 5);
    for (stream, gpu) in handles(&gpu) {
        let owner = gpu.upload(&data).unwrap();
        // The keys are values 3.. of the buffer: a view, and the same memory from its raw
        // address (which another library would hand over).
        let part = owner.slice(3..);
        let raw = unsafe { DeviceSlice::<f32>::from_raw_parts(&gpu, part.device_address(), n) }.unwrap();
        let keys = &data[3..];
        let whole = gpu.upload(keys).unwrap();
        for (input, view) in [("buffer", whole.slice(..)), ("view", part.slice(..)), ("raw", raw.slice(..))] {
            let context = format!("{stream}, {input}");
            // Top-k of one array and of rows.
            let top = gpu.top_k(&view, 20, &TopKOptions::largest()).unwrap();
            assert_eq!(got(&gpu, &top), expected(keys, 20, Order::Largest, None), "{context}");
            let top = gpu.top_k(Keys::rows(&view, 3, n / 3), 7, &TopKOptions::smallest()).unwrap();
            let want: Vec<_> =
                keys.chunks(n / 3).flat_map(|row| expected(row, 7, Order::Smallest, None)).collect();
            assert_eq!(got(&gpu, &top), want, "{context}");
            // Selection, exact and approximate.
            let sorted = reference::sort_pairs(keys, Order::Smallest);
            let median = gpu.select(&view, n / 2, &SelectOptions::default()).unwrap();
            assert_eq!(
                (median.value.exact(), median.rank),
                (sorted[n / 2].0.exact(), n as u64 / 2),
                "{context}"
            );
            let approximate =
                SelectOptions::default().with_algorithm(SelectAlgorithm::Approximate { buckets: 64 });
            let near = gpu.select(&view, n / 2, &approximate).unwrap();
            assert_eq!(near.value.exact(), sorted[near.rank as usize].0.exact(), "{context}");
            // Sorting segments.
            let sorted_segments = gpu.sort_segments(&view, 2000, Order::Largest).unwrap();
            let want: Vec<u64> = keys
                .chunks(2000)
                .flat_map(|segment| {
                    reference::sort_pairs(segment, Order::Largest).into_iter().map(|(_, i)| i)
                })
                .collect();
            assert_eq!(gpu.download(&sorted_segments.indices).unwrap(), want, "{context}");
        }
    }
}

#[test]
fn outputs_and_workspaces_can_be_views_of_larger_buffers() {
    let gpu = common::gpu();
    let data = generate::<u32>(5000, Distribution::FewDistinct(100), 8);
    let device = gpu.upload(&data).unwrap();
    let options = TopKOptions::largest().with_algorithm(Algorithm::Bitonic);
    let plan = gpu.plan_top_k(&Keys::new(&device), 32, &options).unwrap();
    // One allocation holds the outputs of two runs side by side, another the workspace at
    // an offset of 256 bytes.
    let mut values = gpu.alloc_zeroed::<u32>(64).unwrap();
    let mut indices = gpu.alloc_zeroed::<u64>(64).unwrap();
    let mut workspace = gpu.alloc_zeroed::<u8>(256 + plan.workspace_bytes()).unwrap();
    for run in 0..2 {
        let out = TopKOut::new(
            values.slice_mut(run * 32..(run + 1) * 32),
            indices.slice_mut(run * 32..(run + 1) * 32),
        );
        gpu.top_k_into(&plan, &device, out, workspace.slice_mut(256..)).unwrap();
    }
    let want = expected(&data, 32, Order::Largest, None);
    let (values, indices) = (gpu.download(&values).unwrap(), gpu.download(&indices).unwrap());
    let got: Vec<(u64, u64)> = values.iter().map(|v| v.exact()).zip(indices).collect();
    assert_eq!(&got[..32], &want[..]);
    assert_eq!(&got[32..], &want[..]);
    // Writable raw views: the same outputs through their addresses.
    let mut out =
        TopK { values: gpu.alloc_zeroed::<u32>(32).unwrap(), indices: gpu.alloc_zeroed::<u64>(32).unwrap() };
    let (value_address, index_address) = (out.values.device_address(), out.indices.device_address());
    let raw_out = unsafe {
        TopKOut::new(
            DeviceSliceMut::<u32>::from_raw_parts(&gpu, value_address, 32).unwrap(),
            DeviceSliceMut::<u64>::from_raw_parts(&gpu, index_address, 32).unwrap(),
        )
    };
    gpu.top_k_into(&plan, &device, raw_out, &mut workspace).unwrap();
    assert_eq!(got_top(&gpu, &mut out), want);
}

fn got_top<K: TestKey>(gpu: &Gpu, top: &mut TopK<K>) -> Vec<(u64, u64)> {
    got(gpu, top)
}

#[test]
fn raw_views_are_checked() {
    let gpu = common::gpu();
    let buffer = gpu.upload(&[1u64, 2, 3]).unwrap();
    let misaligned = unsafe { DeviceSlice::<u64>::from_raw_parts(&gpu, buffer.device_address() + 4, 2) };
    assert!(matches!(misaligned, Err(Error::InvalidArgument { .. })), "{misaligned:?}");
    let null = unsafe { DeviceSlice::<u64>::from_raw_parts(&gpu, 0, 2) };
    assert!(matches!(null, Err(Error::InvalidArgument { .. })));
    let empty = unsafe { DeviceSlice::<u64>::from_raw_parts(&gpu, 0, 0) }.unwrap();
    assert!(empty.is_empty());
    let huge = unsafe { DeviceSlice::<u64>::from_raw_parts(&gpu, buffer.device_address(), usize::MAX / 4) };
    assert!(matches!(huge, Err(Error::InvalidArgument { .. })));
    if gpu.backend() == BackendKind::Cuda {
        // Host memory is not device memory: the driver says so, and the view is refused.
        let host = [1u64; 16];
        let on_host = unsafe { DeviceSlice::<u64>::from_raw_parts(&gpu, host.as_ptr() as u64, 16) };
        assert!(matches!(on_host, Err(Error::InvalidArgument { .. })), "{on_host:?}");
    }
    // Views at odd offsets reach selections whose fast passes load 16-byte vectors: they
    // run without them, with the same answers.
    let keys = generate::<f32>(70_000, Distribution::Uniform, 3);
    let device = gpu.upload(&keys).unwrap();
    for offset in 1..4 {
        let odd = device.slice(offset..);
        let sorted = reference::sort_pairs(&keys[offset..], Order::Smallest);
        let got = gpu.select(&odd, 100, &SelectOptions::default()).unwrap();
        assert_eq!((got.value.exact(), got.rank), (sorted[100].0.exact(), 100), "offset {offset}");
        let approximate =
            SelectOptions::default().with_algorithm(SelectAlgorithm::Approximate { buckets: 1024 });
        let near = gpu.select(&odd, 30_000, &approximate).unwrap();
        assert_eq!(near.value.exact(), sorted[near.rank as usize].0.exact(), "offset {offset}");
    }
    // A view of another device's memory (another handle) is refused.
    let other = Gpu::emulator();
    if gpu.backend() == BackendKind::Cuda || !gpu.same_device(&other) {
        let foreign = other.upload(&[1.0f32; 16]).unwrap();
        assert!(matches!(
            gpu.top_k(&foreign, 1, &TopKOptions::largest()),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

#[test]
fn the_callers_indices_replace_positions() {
    let gpu = common::gpu();
    // One array (every algorithm of one array reports positions; the ids replace them).
    let n = 40_000;
    let data = generate::<i64>(n, Distribution::Uniform, 21);
    let ids: Vec<u64> = (0..n as u64).map(|i| i * 7 + 1_000_000).collect();
    let (device, device_ids) = (gpu.upload(&data).unwrap(), gpu.upload(&ids).unwrap());
    for algorithm in [Algorithm::Auto, Algorithm::Bitonic, Algorithm::RadixSelect, Algorithm::SampleSelect] {
        for k in [1, 100, 3000] {
            let options = TopKOptions::smallest().with_algorithm(algorithm);
            let Ok(top) = gpu.top_k(Keys::new(&device).with_indices(&device_ids), k, &options) else {
                assert_eq!(algorithm, Algorithm::Bitonic, "only the bitonic top-k limits k");
                continue;
            };
            assert_eq!(
                got(&gpu, &top),
                expected(&data, k, Order::Smallest, Some(&ids)),
                "{algorithm:?} k={k}"
            );
        }
    }
    // Dense rows (the row kernels read the ids), and rows whose k is beyond the queues
    // (one top-k per row, then the ids).
    let (rows, cols) = (4, n / 4);
    for k in [5, 2100] {
        let top = gpu
            .top_k(Keys::rows(&device, rows, cols).with_indices(&device_ids), k, &TopKOptions::largest())
            .unwrap();
        let want: Vec<_> = data
            .chunks(cols)
            .zip(ids.chunks(cols))
            .flat_map(|(row, row_ids)| expected(row, k, Order::Largest, Some(row_ids)))
            .collect();
        assert_eq!(got(&gpu, &top), want, "rows k={k}");
    }
    // Ragged rows, one shorter than k: its padding keeps the padding index.
    let offsets = gpu.upload(&[0u64, 10, 10, 5000]).unwrap();
    let top = gpu
        .top_k(Keys::ragged(&device, &offsets).with_indices(&device_ids), 20, &TopKOptions::largest())
        .unwrap();
    let indices = gpu.download(&top.indices).unwrap();
    let first: Vec<u64> =
        expected(&data[..10], 10, Order::Largest, Some(&ids[..10])).iter().map(|p| p.1).collect();
    assert_eq!(&indices[..10], &first[..]);
    assert!(indices[10..40].iter().all(|&i| i == PADDING_INDEX));
    let third: Vec<u64> =
        expected(&data[10..5000], 20, Order::Largest, Some(&ids[10..5000])).iter().map(|p| p.1).collect();
    assert_eq!(&indices[40..], &third[..]);
    // Indices of another length than the keys are refused.
    let short = device_ids.slice(1..);
    let error = gpu.top_k(Keys::new(&device).with_indices(&short), 3, &TopKOptions::largest()).unwrap_err();
    assert!(matches!(error, Error::LengthMismatch { .. }), "{error}");
}

#[test]
fn strided_rows_skip_what_lies_between_rows() {
    let gpu = common::gpu();
    let (rows, cols, stride) = (5, 3000, 3100);
    let data = generate::<f32>((rows - 1) * stride + cols, Distribution::Uniform, 31);
    let device = gpu.upload(&data).unwrap();
    for algorithm in [Algorithm::Auto, Algorithm::WarpSelect, Algorithm::RadixSelect] {
        for k in [1, 64, 2500] {
            let options = TopKOptions::smallest().with_algorithm(algorithm);
            let top = gpu.top_k(Keys::rows_strided(&device, rows, cols, stride), k, &options).unwrap();
            let want: Vec<_> = (0..rows)
                .flat_map(|r| expected(&data[r * stride..r * stride + cols], k, Order::Smallest, None))
                .collect();
            assert_eq!(got(&gpu, &top), want, "{algorithm:?} k={k}");
        }
    }
    // Too little data for the rows described, and a stride shorter than a row.
    let short = device.slice(..data.len() - 1);
    let error =
        gpu.top_k(Keys::rows_strided(&short, rows, cols, stride), 3, &TopKOptions::smallest()).unwrap_err();
    assert!(matches!(error, Error::LengthMismatch { .. }), "{error}");
    let error = gpu
        .top_k(Keys::rows_strided(&device, rows, cols, cols - 1), 3, &TopKOptions::smallest())
        .unwrap_err();
    assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
    // Algorithms of one array do not take rows, nor WarpSelect one array.
    let bitonic = TopKOptions::smallest().with_algorithm(Algorithm::Bitonic);
    assert!(matches!(
        gpu.top_k(Keys::rows(&device, 2, 100), 3, &bitonic),
        Err(Error::InvalidArgument { .. })
    ));
    let warp = TopKOptions::smallest().with_algorithm(Algorithm::WarpSelect);
    assert!(matches!(gpu.top_k(&device, 3, &warp), Err(Error::InvalidArgument { .. })));
}

#[test]
fn a_ragged_plan_runs_again_on_its_offsets() {
    let gpu = common::gpu();
    let data = generate::<u32>(9000, Distribution::Uniform, 4);
    let device = gpu.upload(&data).unwrap();
    let offsets = gpu.upload(&[0u64, 100, 4000, 9000]).unwrap();
    let keys = || Keys::ragged(&device, &offsets);
    let options = TopKOptions::smallest().with_algorithm(Algorithm::RadixSelect);
    let plan = gpu.plan_top_k(&keys(), 150, &options).unwrap();
    assert_eq!((plan.rows(), plan.k(), plan.outputs()), (3, 150, 450));
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let mut out = TopK {
        values: gpu.alloc_zeroed::<u32>(450).unwrap(),
        indices: gpu.alloc_zeroed::<u64>(450).unwrap(),
    };
    let once = gpu.top_k(keys(), 150, &options).unwrap();
    for _ in 0..2 {
        gpu.top_k_into(&plan, keys(), &mut out, &mut workspace).unwrap();
        assert_eq!(got(&gpu, &out), got(&gpu, &once));
    }
}

#[test]
fn convenient_calls_from_several_threads_share_the_pool() {
    let gpu = common::gpu();
    let n = if gpu.backend() == BackendKind::Cuda { 1 << 20 } else { 20_000 };
    let data = generate::<f32>(n, Distribution::Outliers, 13);
    let device = gpu.upload(&data).unwrap();
    let want = expected(&data, 50, Order::Largest, None);
    let sorted = reference::sort_pairs(&data, Order::Smallest);
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (gpu, device, want, sorted) = (&gpu, &device, &want, &sorted);
            scope.spawn(move || {
                // Two threads on the shared stream, two on streams of their own.
                let gpu = if thread % 2 == 0 { gpu.clone() } else { gpu.fork_stream().unwrap() };
                for round in 0..10 {
                    let top = gpu.top_k(device, 50, &TopKOptions::largest()).unwrap();
                    assert_eq!(got(&gpu, &top), *want, "thread {thread} round {round}");
                    let rank = (round * 997 + thread * 31) % n;
                    let got = gpu.select(device, rank, &SelectOptions::default()).unwrap();
                    assert_eq!(got.value.exact(), sorted[rank].0.exact(), "thread {thread} round {round}");
                }
            });
        }
    });
}

#[test]
fn tuning_changes_speed_never_results() {
    let gpu = common::gpu();
    let n = 1 << 20;
    let data = generate::<f32>(n, Distribution::Uniform, 17);
    let device = gpu.upload(&data).unwrap();
    let matrix = gpu.upload(&data[..64 * 8192]).unwrap();
    let tunings = [
        Tuning::default(),
        Tuning {
            top_k_blocks_per_sm: 1,
            top_k_tiles_per_block_later: 2,
            bitonic_tight_bound: false,
            ..Tuning::default()
        },
        Tuning {
            rows_auto_kernel: Some(gpu_select::RowsKernelFamily::RadixSelect),
            rows_radix_parts: Some(3),
            ..Tuning::default()
        },
        Tuning {
            rows_auto_kernel: Some(gpu_select::RowsKernelFamily::WarpSelect),
            rows_warp_per_row: Some(true),
            ..Tuning::default()
        },
    ];
    let want = expected(&data, 300, Order::Largest, None);
    let want_rows: Vec<_> =
        data[..64 * 8192].chunks(8192).flat_map(|row| expected(row, 40, Order::Smallest, None)).collect();
    for tuning in tunings {
        let tuned = gpu.with_tuning(tuning);
        assert_eq!(*tuned.tuning(), tuning);
        let bitonic = TopKOptions::largest().with_algorithm(Algorithm::Bitonic);
        assert_eq!(got(&tuned, &tuned.top_k(&device, 300, &bitonic).unwrap()), want, "{tuning:?}");
        let top = tuned.top_k(Keys::rows(&matrix, 64, 8192), 40, &TopKOptions::smallest()).unwrap();
        assert_eq!(got(&tuned, &top), want_rows, "{tuning:?}");
    }
}

#[test]
fn driver_errors_keep_their_code_and_source() {
    use std::error::Error as _;
    let error = Error::Driver {
        during: "launching a kernel".to_string(),
        source: gpu_select::DriverError {
            code: 700,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".to_string(),
            message: "an illegal memory access was encountered".to_string(),
        },
    };
    assert!(error.to_string().contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{error}");
    let source = error.source().expect("a driver error has a source");
    assert!(source.to_string().contains("illegal memory access"), "{source}");
    assert!(Error::EmptyInput.source().is_none());
}

/// Two streams run at once on the GPU: the same one-block sorts take about half as long
/// queued alternately on two streams as all on one (CUDA events on the streams, the second
/// stream ordered after the first's start with `wait_for`, and the first after the second's
/// end). On streams that serialized, the two times would be equal.
#[test]
#[ignore = "needs a GPU (the emulator runs each call to its end): run with --include-ignored there"]
fn two_streams_overlap_on_the_gpu() {
    let gpu = common::gpu();
    assert_eq!(gpu.backend(), BackendKind::Cuda, "two streams can only overlap on a GPU");
    use cudarc::driver::result::event;
    use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
    let (a, b) = (gpu.fork_stream().unwrap(), gpu.fork_stream().unwrap());
    let keys = gpu.upload(&generate::<f32>(2048, Distribution::Uniform, 1)).unwrap();
    let mut outputs =
        [(); 2].map(|_| (gpu.alloc_zeroed::<f32>(2048).unwrap(), gpu.alloc_zeroed::<u64>(2048).unwrap()));
    // One block each: the GPU has room for both streams' blocks at once.
    let sort = |on: &Gpu,
                (keys_out, indices_out): &mut (
        gpu_select::DeviceBuffer<f32>,
        gpu_select::DeviceBuffer<u64>,
    )| {
        on.sort_segments_into(&keys, 2048, Order::Largest, (keys_out, indices_out)).unwrap()
    };
    for on in [&a, &b] {
        sort(on, &mut outputs[0]); // loads the kernel before the timing
        on.synchronize().unwrap();
    }
    let new_event = || event::create(CU_EVENT_DEFAULT).unwrap();
    let record = |event, on: &Gpu| unsafe { event::record(event, on.raw_stream().cast()) }.unwrap();
    let elapsed = |start, end| unsafe { event::elapsed(start, end) }.unwrap();
    let launches = 300;
    // All on stream a.
    let (start, end) = (new_event(), new_event());
    record(start, &a);
    for _ in 0..2 * launches {
        sort(&a, &mut outputs[0]);
    }
    record(end, &a);
    a.synchronize().unwrap();
    let one_stream_ms = elapsed(start, end);
    // Alternately on a and b, b starting after a's start event, a's end after b's work.
    let (start, end) = (new_event(), new_event());
    record(start, &a);
    b.wait_for(&a).unwrap();
    let [first, second] = &mut outputs;
    for _ in 0..launches {
        sort(&a, first);
        sort(&b, second);
    }
    a.wait_for(&b).unwrap();
    record(end, &a);
    a.synchronize().unwrap();
    let two_streams_ms = elapsed(start, end);
    eprintln!(
        "{} one-block sorts: {one_stream_ms:.3} ms on one stream, {two_streams_ms:.3} ms on two",
        2 * launches
    );
    assert!(
        two_streams_ms < 0.8 * one_stream_ms,
        "two streams took {two_streams_ms:.3} ms against {one_stream_ms:.3} ms on one: they did not overlap"
    );
}

/// With the `cudarc` feature, on a GPU: cudarc slices as keys and outputs, on a cudarc
/// stream, and the views' events order cudarc's own copies after the library's work.
#[cfg(feature = "cudarc")]
#[test]
#[ignore = "needs a GPU (cudarc slices are device memory): run with --include-ignored there"]
fn cudarc_slices_are_keys_and_outputs() {
    let gpu = common::gpu();
    assert_eq!(gpu.backend(), BackendKind::Cuda, "cudarc slices need a GPU");
    let context = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = context.new_stream().unwrap();
    let on_cudarc = gpu.with_cudarc_stream(&stream).unwrap();
    let data = generate::<f32>(100_000, Distribution::Uniform, 77);
    let keys = stream.clone_htod(&data).unwrap();
    let mut values = stream.alloc_zeros::<f32>(16).unwrap();
    let mut indices = stream.alloc_zeros::<u64>(16).unwrap();
    {
        let view = on_cudarc.view_cudarc(&keys).unwrap();
        let out = TopKOut::new(
            on_cudarc.view_cudarc_mut(&mut values).unwrap(),
            on_cudarc.view_cudarc_mut(&mut indices).unwrap(),
        );
        let plan = on_cudarc.plan_top_k(&Keys::new(&view), 16, &TopKOptions::largest()).unwrap();
        let mut workspace = on_cudarc.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
        on_cudarc.top_k_into(&plan, &view, out, &mut workspace).unwrap();
    }
    let values = stream.clone_dtoh(&values).unwrap();
    let indices = stream.clone_dtoh(&indices).unwrap();
    let got: Vec<(u64, u64)> = values.iter().map(|v| v.exact()).zip(indices).collect();
    assert_eq!(got, expected(&data, 16, Order::Largest, None));
    // Selection and sorting take cudarc slices too.
    {
        let view = on_cudarc.view_cudarc(&keys).unwrap();
        let sorted = reference::sort_pairs(&data, Order::Smallest);
        let median = on_cudarc.select(&view, data.len() / 2, &SelectOptions::default()).unwrap();
        assert_eq!(median.value.exact(), sorted[data.len() / 2].0.exact());
        let segments = on_cudarc.sort_segments(view.slice(..2000), 2000, Order::Smallest).unwrap();
        let want: Vec<u64> =
            reference::sort_pairs(&data[..2000], Order::Smallest).iter().map(|p| p.1).collect();
        assert_eq!(on_cudarc.download(&segments.indices).unwrap(), want);
    }
    // A handle on another stream may not use a stream-bound view.
    let view = on_cudarc.view_cudarc(&keys).unwrap();
    assert!(matches!(gpu.top_k(&view, 3, &TopKOptions::largest()), Err(Error::InvalidArgument { .. })));
    // The library's own handle (not on a cudarc stream) cannot view cudarc slices.
    assert!(matches!(gpu.view_cudarc(&keys), Err(Error::InvalidArgument { .. })));
}

#[test]
fn the_emulator_has_no_streams_to_wrap() {
    let gpu = Gpu::emulator();
    let wrapped = unsafe { gpu.with_raw_stream(std::ptr::null_mut()) };
    assert!(matches!(wrapped, Err(Error::InvalidArgument { .. })));
    assert!(gpu.raw_stream().is_null());
    assert!(gpu.fork_stream().unwrap().same_stream(&gpu));
    gpu.wait_for(&gpu.fork_stream().unwrap()).unwrap();
}

/// With the `cust` feature, on a GPU: cust's buffers as keys and outputs (cust 0.3 works in
/// the primary context too; its copies run on the legacy default stream and wait).
#[cfg(feature = "cust")]
#[test]
#[ignore = "needs a GPU (cust buffers are device memory): run with --include-ignored there"]
fn cust_buffers_are_keys_and_outputs() {
    use cust::memory::{CopyDestination, DeviceBuffer as CustBuffer};
    let gpu = common::gpu();
    assert_eq!(gpu.backend(), BackendKind::Cuda, "cust buffers need a GPU");
    let _context = cust::quick_init().unwrap();
    let data = generate::<u64>(50_000, Distribution::Uniform, 88);
    let keys = CustBuffer::from_slice(&data).unwrap();
    let mut values = CustBuffer::from_slice(&[0u64; 10]).unwrap();
    let mut indices = CustBuffer::from_slice(&[0u64; 10]).unwrap();
    let view = gpu.view_cust(&keys).unwrap();
    let plan = gpu.plan_top_k(&Keys::new(&view), 10, &TopKOptions::smallest()).unwrap();
    let mut workspace = gpu.alloc_zeroed::<u8>(plan.workspace_bytes()).unwrap();
    let out = TopKOut::new(gpu.view_cust_mut(&mut values).unwrap(), gpu.view_cust_mut(&mut indices).unwrap());
    gpu.top_k_into(&plan, &view, out, &mut workspace).unwrap();
    gpu.synchronize().unwrap(); // cust reads on the legacy default stream, which does not wait
    let (mut got_values, mut got_indices) = (vec![0u64; 10], vec![0u64; 10]);
    values.copy_to(&mut got_values[..]).unwrap();
    indices.copy_to(&mut got_indices[..]).unwrap();
    let got: Vec<(u64, u64)> = got_values.iter().map(|v| v.exact()).zip(got_indices).collect();
    assert_eq!(got, expected(&data, 10, Order::Smallest, None));
    let sorted = reference::sort_pairs(&data, Order::Smallest);
    assert_eq!(gpu.select(&view, 777, &SelectOptions::default()).unwrap().value, sorted[777].0);
}

#[test]
fn the_read_pass_checks_its_scratch_and_tuning_takes_any_value() {
    use gpu_select::diagnostics::{queue_read_pass, read_pass};
    let gpu = common::gpu();
    let data = gpu.upload(&[3u32, 9, 4, 1]).unwrap();
    // An empty scratch word would be a write to address 0 (issue 36, item 2).
    let empty = gpu.alloc_zeroed::<u32>(0).unwrap();
    assert!(matches!(queue_read_pass(&gpu, &data, &empty), Err(Error::LengthMismatch { .. })));
    let mut scratch = gpu.alloc_zeroed::<u32>(1).unwrap();
    assert_eq!(read_pass(&gpu, &data, &mut scratch).unwrap(), 9);
    // Blocks per multiprocessor beyond u32 when multiplied (issue 36, item 4): the plan caps
    // them at the tiles there are, and the answer is the same.
    let keys = generate::<f32>(300_000, Distribution::Uniform, 6);
    let device = gpu.upload(&keys).unwrap();
    let tuned = gpu.with_tuning(Tuning { top_k_blocks_per_sm: u32::MAX, ..Tuning::default() });
    let bitonic = TopKOptions::largest().with_algorithm(Algorithm::Bitonic);
    let top = tuned.top_k(&device, 10, &bitonic).unwrap();
    assert_eq!(got(&tuned, &top), expected(&keys, 10, Order::Largest, None));
}

#[test]
fn sizes_no_device_holds_and_partial_warps_are_refused() {
    // Planning a selection or a top-k of more keys than any device holds is an error, not an
    // overflow in the workspace arithmetic (issue 36, item 4).
    let gpu = common::gpu();
    for n in [usize::MAX, usize::MAX / 8, (1 << 56) + 1] {
        let error = gpu.plan_select::<f64>(n, &SelectOptions::default()).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument { .. }), "n = {n}: {error}");
    }
    // A view claiming 2^60 keys (never read: planning reads no keys).
    let buffer = gpu.upload(&[1.0f64; 4]).unwrap();
    let huge = unsafe { DeviceSlice::<f64>::from_raw_parts(&gpu, buffer.device_address(), 1 << 60) };
    if let Ok(huge) = huge {
        // (On a GPU the driver's record of the allocation refuses nothing here: it checks the
        // start address only.)
        let error = gpu.plan_top_k(&Keys::new(&huge), 10, &TopKOptions::largest()).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
        let error =
            gpu.plan_top_k(&Keys::rows(&huge, 1 << 30, 1 << 30), 10, &TopKOptions::largest()).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
    }
    // Probes take whole warps (issue 36, item 2).
    use gpu_select::diagnostics::{Probe, run_probe};
    let error = run_probe(&gpu, Probe::WarpCollectives, (1, 1), 48, &[0; 48]).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument { .. }), "{error}");
    assert!(run_probe(&gpu, Probe::Indices, (1, 1), 0, &[]).is_err());
}
