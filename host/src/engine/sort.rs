//! Sorts: the block bitonic sort of `gpu-select-kernels` on segments of up to 2048 keys,
//! and the stable sort of any length (block sort runs, then merge passes) that top-k uses
//! to order its outputs.

use gpu_select_kernels::block::bitonic_sort::{BlockSortLayout, SORT_THREADS, segments_per_block};
use gpu_select_kernels::entry::KernelKey;
use gpu_select_kernels::merge::{MERGE_THREADS, MERGE_TILE, MergeLayout, MergeParams, merge_blocks_for};
use gpu_select_kernels::params::{BlockSortParams, GlobalPtr};

use crate::error::{Error, Result};
use crate::gpu::{Gpu, LaunchShape};
use crate::options::MAX_SMALL_SORT_LEN;
use crate::{Order, SelectKey};

impl Gpu {
    /// Queues the block sort of `segments` segments of `segment_len` keys at `input` into
    /// `output` (validated by the caller). Each key reports its index from `input.indices`,
    /// or its position in the segment when that is null. With both index arrays null only
    /// keys are sorted, by the keys-only kernel (`block_sort_keys_<key>`: the network on the
    /// keys' bits alone; NaN keys come back as the canonical NaN).
    pub(crate) fn launch_block_sort<K: SelectKey>(
        &self,
        input: Pairs<K>,
        segment_len: u32,
        segments: u32,
        order: Order,
        output: Pairs<K>,
    ) -> Result<()> {
        let params = BlockSortParams {
            keys_in: input.keys,
            indices_in: input.indices,
            keys_out: output.keys,
            indices_out: output.indices,
            segment_len,
            order: order.to_raw(),
            segments,
            reserved: 0,
        };
        let keys_only = input.indices.is_null() && output.indices.is_null();
        let (kernel, layout) = if keys_only {
            (K::BLOCK_SORT_KEYS, BlockSortLayout::<K::Bits>::keys_only(segment_len))
        } else {
            (K::BLOCK_SORT, BlockSortLayout::<K::Bits>::new(segment_len))
        };
        let shape = LaunchShape {
            grid: (segments.div_ceil(segments_per_block(segment_len)), 1),
            block_threads: SORT_THREADS,
            shared_bytes: layout.bytes,
        };
        self.launch(kernel, shape, params)
    }

    /// Queues a stable sort of `len` key + index pairs of any length: the block sort makes
    /// runs of 2048, then merge passes double them. Reads `input` (which it may overwrite),
    /// uses `scratch` and writes `out`; the three hold `len` pairs each and are disjoint
    /// (`scratch` is only touched when the number of merge passes is odd).
    pub(crate) fn launch_sort_pairs<K: SelectKey>(
        &self,
        input: Pairs<K>,
        scratch: Pairs<K>,
        out: Pairs<K>,
        len: u64,
        order: Order,
    ) -> Result<()> {
        self.launch_sort_pairs_in_segments(input, true, scratch, out, len, len, order)
    }

    /// [`Gpu::launch_sort_pairs`] of each segment of `segment_len` pairs on its own: one
    /// segment (`segment_len == len`, any length), or segments of a power of two times
    /// 2048 pairs (`len` a multiple of them), whose merge passes never cross a segment.
    /// With `indexed` false the input's indices are not read: each key takes its position
    /// in its run of 2048 (`input.indices` is still room the merges may write). With null
    /// indices in all three (and `indexed` false) only keys are sorted: no index is read or
    /// written.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch_sort_pairs_in_segments<K: SelectKey>(
        &self,
        input: Pairs<K>,
        indexed: bool,
        scratch: Pairs<K>,
        out: Pairs<K>,
        len: u64,
        segment_len: u64,
        order: Order,
    ) -> Result<()> {
        let run = MAX_SMALL_SORT_LEN as u64;
        debug_assert!(
            segment_len == len
                || (len.is_multiple_of(segment_len)
                    && segment_len.is_multiple_of(run)
                    && (segment_len / run).is_power_of_two())
        );
        let merge_passes = segment_len.div_ceil(run).next_power_of_two().trailing_zeros();
        // The last merge must write `out`: with an even number of merges the runs start
        // there (out → input → out …), with an odd one in `scratch` (scratch → out → …).
        let (mut from, mut to) = if merge_passes.is_multiple_of(2) { (out, input) } else { (scratch, out) };
        // The block sort's input from `at` on (no indices: null, not null moved on).
        let sorted_input = |at: u64| {
            let indices = if indexed { input.indices.offset(at) } else { GlobalPtr::null() };
            Pairs { keys: input.keys.offset(at), indices }
        };
        let full = (len / run) as u32;
        if full > 0 {
            self.launch_block_sort(sorted_input(0), run as u32, full, order, from)?;
        }
        let tail = len % run;
        if tail > 0 {
            let at = full as u64 * run;
            self.launch_block_sort(sorted_input(at), tail as u32, 1, order, from.offset(at))?;
        }
        let mut run_len = run;
        for _ in 0..merge_passes {
            let params = MergeParams {
                keys_in: from.keys,
                indices_in: from.indices,
                keys_out: to.keys,
                indices_out: to.indices,
                len,
                run_len,
                order: order.to_raw(),
                reserved: 0,
            };
            // Runs of 2048 · 2^j: multiples of half a merge tile (the kernel's condition).
            debug_assert!(run_len.is_multiple_of(MERGE_TILE / 2));
            let blocks = u32::try_from(merge_blocks_for(len))
                .map_err(|_| Error::invalid(format!("{len} pairs: too many to merge in one launch")))?;
            let shape = LaunchShape {
                grid: (blocks, 1),
                block_threads: MERGE_THREADS,
                shared_bytes: MergeLayout::<K>::new().bytes,
            };
            self.launch(K::MERGE_RUNS, shape, params)?;
            std::mem::swap(&mut from, &mut to);
            run_len *= 2;
        }
        Ok(())
    }
}

/// Key + index arrays in device memory, as sorts pass them around.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pairs<K> {
    pub(crate) keys: GlobalPtr<K>,
    pub(crate) indices: GlobalPtr<u64>,
}

impl<K> Pairs<K> {
    /// The pairs `count` further on (null indices, keys only, stay null).
    pub(crate) fn offset(self, count: u64) -> Self {
        let indices = if self.indices.is_null() { self.indices } else { self.indices.offset(count) };
        Self { keys: self.keys.offset(count), indices }
    }

    /// The pairs at two device addresses.
    pub(crate) fn at(keys: u64, indices: u64) -> Self {
        Self { keys: GlobalPtr::from_address(keys), indices: GlobalPtr::from_address(indices) }
    }
}

// Every key type of the library has a block-sort kernel (a compile-time check of the table).
const _: () = {
    const fn has_sort<K: KernelKey>() {}
    has_sort::<f32>();
    has_sort::<f64>();
    has_sort::<i32>();
    has_sort::<u32>();
    has_sort::<i64>();
    has_sort::<u64>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_select_kernels::OrderedBits;

    /// The keys-only block sort (both index arrays null) against a sort of the keys' ordered
    /// bits, in both orders, for segments from 1 key to 2048 (several to a block, one warp's
    /// slots, the shared-memory stages), keys with NaN, ±0 and repeats. On the GPU when
    /// `GPU_SELECT_BACKEND` names one.
    fn keys_only_sort_of<K: SelectKey>(gpu: &Gpu, make: impl Fn(u64) -> K) {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for segment_len in [1usize, 5, 256, 300, 1024, 2048] {
            let segments = 7;
            let keys: Vec<K> = (0..segment_len * segments)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    make(state)
                })
                .collect();
            let input = gpu.upload(&keys).unwrap();
            for order in [Order::Smallest, Order::Largest] {
                let out = gpu.alloc_zeroed::<K>(keys.len()).unwrap();
                let pairs = |buffer: &crate::buffer::DeviceBuffer<K>| Pairs {
                    keys: buffer.global_ptr(),
                    indices: GlobalPtr::null(),
                };
                gpu.launch_block_sort(pairs(&input), segment_len as u32, segments as u32, order, pairs(&out))
                    .unwrap();
                let got = gpu.download(&out).unwrap();
                for (segment, (got, keys)) in
                    got.chunks_exact(segment_len).zip(keys.chunks_exact(segment_len)).enumerate()
                {
                    let mut expected: Vec<u64> = keys.iter().map(|k| k.to_ordered().to_u64()).collect();
                    expected.sort_unstable();
                    if order == Order::Largest {
                        expected.reverse();
                    }
                    let got: Vec<u64> = got.iter().map(|k| k.to_ordered().to_u64()).collect();
                    assert_eq!(got, expected, "{} {segment_len} {order:?} segment {segment}", K::NAME);
                }
            }
        }
    }

    #[test]
    fn keys_only_block_sort_sorts_each_segment() {
        let gpu = Gpu::from_env().unwrap();
        let specials = [f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN];
        keys_only_sort_of::<f32>(&gpu, |r| {
            if r % 5 == 0 { specials[(r >> 8) as usize % specials.len()] } else { (r % 64) as f32 - 32.0 }
        });
        keys_only_sort_of::<f64>(&gpu, |r| if r % 7 == 0 { f64::NAN } else { (r >> 11) as f64 * -1e-3 });
        keys_only_sort_of::<half::bf16>(&gpu, |r| half::bf16::from_bits(r as u16));
        keys_only_sort_of::<i64>(&gpu, |r| if r % 3 == 0 { i64::MAX } else { r as i64 });
        keys_only_sort_of::<u32>(&gpu, |r| if r % 3 == 0 { u32::MAX } else { (r >> 40) as u32 });
    }

    #[test]
    fn keys_only_pairs_stay_keys_only_further_on() {
        let keys_only = Pairs::<f32> { keys: GlobalPtr::from_address(4096), indices: GlobalPtr::null() };
        let later = keys_only.offset(10);
        assert_eq!(later.keys.address(), 4096 + 40);
        assert!(later.indices.is_null(), "a null index array moved on is a bogus address");
        let pairs = Pairs::<f32>::at(4096, 8192).offset(10);
        assert_eq!(pairs.indices.address(), 8192 + 80);
    }
}
