//! Checks of the embedded kernels: every kernel of the table is in the PTX with the
//! parameter size the host passes, the instructions we mean are there, and the machine code
//! `ptxas` made of it keeps its arrays in registers (its `-v` reports, committed beside the
//! cubins in `host/kernels/`; `cargo xtask test` checks that they are what the sources build).

use gpu_select::KernelImage;
use gpu_select_kernels::entry::{KernelKey, PLAIN_KERNEL_NAMES};

fn ptx() -> String {
    KernelImage::ptx_text().expect("the embedded PTX decompresses")
}

fn all_kernel_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = PLAIN_KERNEL_NAMES.to_vec();
    for keyed in [
        <f32 as KernelKey>::KERNEL_NAMES,
        <f64 as KernelKey>::KERNEL_NAMES,
        <i32 as KernelKey>::KERNEL_NAMES,
        <u32 as KernelKey>::KERNEL_NAMES,
        <i64 as KernelKey>::KERNEL_NAMES,
        <u64 as KernelKey>::KERNEL_NAMES,
        <half::f16 as KernelKey>::KERNEL_NAMES,
        <half::bf16 as KernelKey>::KERNEL_NAMES,
    ] {
        names.extend_from_slice(keyed);
    }
    names
}

/// The text of one entry point, from its `.entry` line to the next entry.
fn entry_body<'a>(ptx: &'a str, name: &str) -> &'a str {
    let start =
        ptx.find(&format!(".entry {name}(")).unwrap_or_else(|| panic!("kernel {name} missing from the PTX"));
    let rest = &ptx[start..];
    let end = rest[1..].find(".entry ").map_or(rest.len(), |e| e + 1);
    &rest[..end]
}

#[test]
fn every_table_kernel_is_exported_with_the_host_parameter_size() {
    use gpu_select_kernels::bandwidth::ReadFloorParams;
    use gpu_select_kernels::merge::MergeParams;
    use gpu_select_kernels::params::BlockSortParams;
    use gpu_select_kernels::probe::ProbeParams;
    use gpu_select_kernels::select::multi::{GatherKeysParams, MultiParams, PickParams};
    use gpu_select_kernels::select::sample::SampleParams;
    use gpu_select_kernels::topk::bitonic::{FilterParams, TopKParams};
    use gpu_select_kernels::topk::heap::HeapParams;
    use gpu_select_kernels::topk::radix::RadixParams;
    use gpu_select_kernels::topk::rows::RowsParams;
    use gpu_select_kernels::topk::sort_choose::SortChooseParams;
    let ptx = ptx();
    assert!(ptx.contains(".target sm_80"), "the PTX targets another architecture than sm_80");
    {
        for name in all_kernel_names() {
            let body = entry_body(&ptx, name);
            let size = match name {
                _ if name.starts_with("block_sort_") => size_of::<BlockSortParams<f32>>(),
                _ if name.starts_with("topk_bitonic_filter_") => size_of::<FilterParams<f32>>(),
                _ if name.starts_with("topk_bitonic_") => size_of::<TopKParams<f32>>(),
                _ if name.starts_with("topk_heap_") => size_of::<HeapParams<f32>>(),
                _ if name.starts_with("radix_") => size_of::<RadixParams<f32>>(),
                _ if name.starts_with("sample_select_") => size_of::<SampleParams<f32>>(),
                _ if name.starts_with("multiselect_gather_") => size_of::<GatherKeysParams<f32>>(),
                _ if name.starts_with("multiselect_sample_") => {
                    size_of::<gpu_select_kernels::select::multi::SampleSummaryParams<f32>>()
                }
                _ if name.starts_with("multiselect_pick_") => size_of::<PickParams<f32>>(),
                _ if name.starts_with("multiselect_") => size_of::<MultiParams<f32>>(),
                _ if name.starts_with("sort_choose_") => size_of::<SortChooseParams<f32>>(),
                _ if name.starts_with("merge_runs_") => size_of::<MergeParams<f32>>(),
                _ if name.starts_with("quantiles_rows_") => {
                    size_of::<gpu_select_kernels::select::quantiles::QuantilesRowsParams<f32>>()
                }
                _ if name.starts_with("top_k_rows_radix_bounded") => {
                    size_of::<gpu_select_kernels::topk::rows_radix::BoundedParams<f32>>()
                }
                _ if name.starts_with("top_k_rows_") => size_of::<RowsParams<f32>>(),
                _ if name.starts_with("probe_") => size_of::<ProbeParams>(),
                _ if name.starts_with("sbp_") => size_of::<gpu_select_kernels::topk::sbp::SbpParams<f32>>(),
                "read_floor_u32" => size_of::<ReadFloorParams>(),
                "gather_selected_indices" => size_of::<gpu_select_kernels::gather::GatherIndicesParams>(),
                _ if name.starts_with("knn_norms_") => {
                    size_of::<gpu_select_kernels::knn::norms::NormsParams<f32>>()
                }
                _ if name.starts_with("knn_distance_tile_") => {
                    size_of::<gpu_select_kernels::knn::tile::DistanceTileParams<f32>>()
                }
                _ if name.starts_with("knn_distance_filter_tf32_") => {
                    size_of::<gpu_select_kernels::knn::tensor::Tf32FilterParams<f32>>()
                }
                _ if name.starts_with("knn_distance_filter_") => {
                    size_of::<gpu_select_kernels::knn::tile::DistanceFilterParams<f32>>()
                }
                _ if name.starts_with("knn_rerank_candidates_") => {
                    size_of::<gpu_select_kernels::knn::tensor::RerankCandidatesParams<f32>>()
                }
                _ if name.starts_with("knn_rerank_") => {
                    size_of::<gpu_select_kernels::knn::tensor::RerankParams<f32>>()
                }
                "knn_place" => size_of::<gpu_select_kernels::knn::place::PlaceParams>(),
                _ => panic!("{name}: add its parameter struct to this test"),
            };
            assert!(
                body.contains(&format!("{name}_param_0[{size}]")),
                "{name}: its one parameter is not {size} bytes"
            );
        }
    }
}

#[test]
fn kernels_carry_their_launch_bounds() {
    // Kernels of more than 256 threads carry their block size (or the launch may fail); the
    // SBP partition asks for as many blocks per multiprocessor as fit without spilling
    // (xtask's LAUNCH_BOUNDS): four with 32-bit keys, three with 16-bit keys and 64-bit
    // integers, and `f64` only its block size; the radix select's filter with 32- and 16-bit
    // keys the two blocks its host plan launches per multiprocessor (64-bit keys: none); the
    // k-NN filtered products and the TF32 tile (not split) the two blocks of the plain distance
    // tile.
    use gpu_select_kernels::knn::tile::DISTANCE_THREADS;
    use gpu_select_kernels::select::sample::SAMPLE_SORT_THREADS;
    use gpu_select_kernels::topk::radix::RADIX_THREADS;
    use gpu_select_kernels::topk::sbp::{SBP_THREADS, TREE_THREADS};
    let ptx = ptx();
    let blocks_per_sm = |key: &str| match key {
        "f32" | "i32" | "u32" => Some(4),
        "f16" | "bf16" | "i64" | "u64" => Some(3),
        _ => None,
    };
    for name in all_kernel_names() {
        let expected = if name.starts_with("sample_select_sample_") {
            format!(".maxntid {SAMPLE_SORT_THREADS}, 1, 1\n{{")
        } else if name.starts_with("sbp_tree_") {
            format!(".maxntid {TREE_THREADS}, 1, 1\n{{")
        } else if let Some(rest) = name.strip_prefix("sbp_partition_") {
            // Both partition kernels: `sbp_partition_<key>` and `sbp_partition_tree_<key>`.
            match blocks_per_sm(rest.strip_prefix("tree_").unwrap_or(rest)) {
                Some(blocks) => format!(".maxntid {SBP_THREADS}, 1, 1\n.minnctapersm {blocks}\n{{"),
                None => format!(".maxntid {SBP_THREADS}, 1, 1\n{{"),
            }
        } else if let Some(key) = name.strip_prefix("radix_filter_")
            && !key.ends_with("64")
        {
            format!(".maxntid {RADIX_THREADS}, 1, 1\n.minnctapersm 2\n{{")
        } else if name.starts_with("knn_distance_filter_") || name.starts_with("knn_distance_tile_tf32_") {
            format!(".maxntid {DISTANCE_THREADS}, 1, 1\n.minnctapersm 2\n{{")
        } else {
            String::new()
        };
        let body = entry_body(&ptx, name);
        if expected.is_empty() {
            assert!(
                !body.contains(".maxntid") && !body.contains(".minnctapersm"),
                "{name}: no launch bounds expected"
            );
        } else {
            assert!(body.contains(&expected), "{name}: lacks {expected:?}");
        }
    }
}

#[test]
fn the_intended_instructions_are_emitted() {
    let ptx = &ptx();
    let shared = entry_body(ptx, "probe_shared");
    for instruction in ["atom.shared.add.u32", "atom.shared.min.u32", "atom.shared.max.u32", "bar.sync"] {
        assert!(shared.contains(instruction), "probe_shared lacks {instruction}");
    }
    let warp = entry_body(ptx, "probe_warp");
    for instruction in [
        "shfl.sync.idx",
        "shfl.sync.up",
        "shfl.sync.down",
        "shfl.sync.bfly",
        "vote.sync.ballot",
        "match.any.sync",
        "bar.warp.sync",
        "activemask",
    ] {
        assert!(warp.contains(instruction), "probe_warp lacks {instruction}");
    }
    let sort = entry_body(ptx, "block_sort_f32");
    assert!(sort.contains("ld.shared") && sort.contains("st.shared"), "the sort works in shared memory");
    assert!(!sort.contains(".local"), "the sort keeps no array in local memory");
    let filter = entry_body(ptx, "radix_filter_f32");
    for instruction in ["bar.red.or", "vote.sync.ballot", "atom.shared.add.u32"] {
        assert!(filter.contains(instruction), "radix_filter_f32 lacks {instruction}");
    }
    // The distance tile's product reads its shared stages as 16-byte vectors, and fuses
    // each multiply-add.
    for storage in ["f32", "f16", "bf16"] {
        let tile = entry_body(ptx, &format!("knn_distance_tile_{storage}"));
        for instruction in ["ld.shared.v4", "fma.rn.f32", "bar.sync"] {
            assert!(tile.contains(instruction), "knn_distance_tile_{storage} lacks {instruction}");
        }
    }
    // The tensor-core tile: TF32 rounding as it stages, 16 warp products a step.
    for kernel in ["tf32_f32", "tf32_f16", "tf32_bf16", "tf32x3_f32"] {
        let tile = entry_body(ptx, &format!("knn_distance_tile_{kernel}"));
        for instruction in
            ["cvt.rna.tf32.f32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "bar.sync"]
        {
            assert!(tile.contains(instruction), "knn_distance_tile_{kernel} lacks {instruction}");
        }
        assert!(!tile.contains(".local"), "knn_distance_tile_{kernel} keeps an array in local memory");
        // `f32` vectors' stages copied asynchronously, 16 bytes a copy where they are
        // aligned; 16-bit vectors widened in registers. Every form copies its norms a word at
        // a time.
        assert_eq!(
            tile.contains("cp.async.cg.shared.global"),
            kernel.ends_with("f32"),
            "knn_distance_tile_{kernel}"
        );
        for instruction in ["cp.async.ca.shared.global", "cp.async.wait_group"] {
            assert!(tile.contains(instruction), "knn_distance_tile_{kernel} lacks {instruction}");
        }
    }
    let read = entry_body(ptx, "read_floor_u32");
    assert!(read.contains("ld.global.v4") || read.contains("ld.v4"), "the read pass uses 16-byte loads");
    // The bitonic top-k's tile loads (8 keys per thread) issue back to back, with no branch
    // between them: one memory round trip per tile. Once the fusion's branches let LLVM sink
    // 7 of them below the first key's, the filter lost 15 % at 2^28 (run 59).
    for key in ["f32", "f64", "i32", "u64"] {
        for kernel in [
            format!("topk_bitonic_filter_{key}"),
            format!("topk_bitonic_q1_{key}"),
            format!("topk_bitonic_q32_{key}"),
        ] {
            let longest = longest_run_of_loads(entry_body(ptx, &kernel));
            assert!(longest >= 8, "{kernel}: at most {longest} loads issue back to back, not 8");
        }
    }
}

/// The most scalar 32/64-bit loads through a register address that follow one another in a
/// PTX body with no branch between them (address arithmetic may sit between).
fn longest_run_of_loads(body: &str) -> usize {
    let (mut run, mut longest) = (0, 0);
    for line in body.lines().map(str::trim) {
        if line.starts_with("ld.b32") || line.starts_with("ld.b64") || line.starts_with("ld.global.b") {
            if line.contains("[%rd") {
                run += 1;
                longest = longest.max(run);
            }
        } else if line.contains(" bra") || line.starts_with("bra") || line.starts_with("$L__") {
            run = 0;
        }
    }
    longest
}

/// The kernels allowed to use local memory: batched top-k queues of more than 1024 keys
/// (`q64`, 2048 pairs per warp: 192 registers per lane for 32-bit keys before any
/// temporaries), and the `f32` k-NN filters, which keep the plain distance tile's 128
/// registers (two blocks a multiprocessor) and may spill a few words (4 bytes on sm_90).
/// The TF32 kernels spilled too (filter 32 bytes, tile 20) until their stages were copied
/// asynchronously, which freed the registers of the prefetched step: they may not now, but
/// for the `f32` filter, whose walk over base tiles holds its state beside the tile's 128
/// registers and may keep a few words of it in local memory ([`WALK_STACK_BYTES`]).
/// Everything else, every queue of k ≤ 1024 for every key width included (64-bit keys at
/// k = 1024: 216 registers on sm_80), must stay in registers.
fn may_use_local_memory(kernel: &str) -> bool {
    kernel.starts_with("top_k_rows_q64_")
        || (kernel.starts_with("knn_distance_filter_") && !kernel.starts_with("knn_distance_filter_tf32_"))
}

/// The most local memory (stack frame bytes) the walking TF32 filter may use.
const WALK_STACK_BYTES: usize = 32;

#[test]
fn the_machine_code_keeps_its_arrays_in_registers() {
    let names = all_kernel_names();
    for arch in ["sm_80", "sm_90"] {
        let path = format!("{}/host/kernels/ptxas.{arch}.txt", env!("CARGO_MANIFEST_DIR"));
        let report = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut kernels = Vec::new();
        for kernel in report.split("Compiling entry function '").skip(1) {
            let name = &kernel[..kernel.find('\'').unwrap()];
            assert!(kernel.starts_with(&format!("{name}' for '{arch}'")), "{path}: {name} is not for {arch}");
            // The kernel's own line: the section goes on with the properties of functions
            // it calls, which must not stand in for it.
            let properties = format!("Function properties for {name}\n");
            let at =
                kernel.find(&properties).unwrap_or_else(|| panic!("{arch} {name}: no properties:\n{kernel}"));
            let line = kernel[at + properties.len()..].lines().next().unwrap_or_default().trim();
            if name == "knn_distance_filter_tf32_f32" {
                let frame: usize = line.split(' ').next().unwrap().parse().unwrap();
                assert!(frame <= WALK_STACK_BYTES, "{arch} {name}: {line}");
            } else if !may_use_local_memory(name) {
                assert_eq!(
                    line, "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads",
                    "{arch} {name} uses local memory:\n{kernel}"
                );
            }
            kernels.push(name.to_string());
        }
        kernels.sort();
        let mut expected: Vec<String> = names.iter().map(|name| name.to_string()).collect();
        expected.sort();
        assert_eq!(kernels, expected, "{path}: the machine code holds other kernels than the table's");
    }
}
