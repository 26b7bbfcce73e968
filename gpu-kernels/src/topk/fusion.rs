//! The bitonic top-k's fusions (the paper's §6): a filter on the inputs and a transform of
//! the keys the ranking uses, applied as the kernels read the data, without a pass of
//! their own.
//!
//! * The **filter** admits an input when its key lies in a range (`low ≤ key ≤ high` in the
//!   total order of [`Key`], on the key as stored) or when a byte mask is non-zero at its
//!   position. Inputs it turns away become padding, so they never reach the result; a
//!   result of fewer than `k` admitted inputs ends in padding.
//! * The **transform** maps each key to the one it is ranked by: its magnitude
//!   ([`Key::magnitude`]) or `scale · key + offset` ([`Key::affine`]). The results are still
//!   the keys as stored (gathered by index), so a caller can have both.
//!
//! The kernels apply the filter wherever they read the data itself, and the transform
//! wherever they turn a key into ordered bits: the candidates passed between passes are
//! stored keys, so they are transformed again in every pass (a few instructions next to a
//! load).
//!
//! ```
//! use gpu_select_kernels::Key;
//! use gpu_select_kernels::topk::fusion::Fusion;
//!
//! let fusion = Fusion::identity().with_magnitude().with_range(-4.0f32, 2.0);
//! assert!(unsafe { fusion.admits(-3.5f32, 0) });
//! assert!(!unsafe { fusion.admits(2.5f32, 0) });
//! assert_eq!(fusion.ranked::<f32>(-3.5), 3.5);
//! ```

use crate::Key;
use crate::key::OrderedBits;
use crate::params::GlobalPtr;
use crate::topk::bitonic::NO_INDEX;

/// The transform: none.
pub const TRANSFORM_IDENTITY: u32 = 0;
/// The transform: [`Key::magnitude`].
pub const TRANSFORM_MAGNITUDE: u32 = 1;
/// The transform: [`Key::affine`] with [`Fusion::scale`] and [`Fusion::offset`].
pub const TRANSFORM_AFFINE: u32 = 2;

/// The filter: every input.
pub const FILTER_ALL: u32 = 0;
/// The filter: keys from [`Fusion::low`] to [`Fusion::high`].
pub const FILTER_RANGE: u32 = 1;
/// The filter: inputs whose byte in [`Fusion::mask`] is not zero.
pub const FILTER_MASK: u32 = 2;

/// A filter and a transform, as a kernel parameter. The same layout serves every key type:
/// key-valued fields hold the key's ordered bits ([`Key::to_ordered`]) widened to 64 bits.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Fusion {
    /// `TRANSFORM_*`.
    pub transform: u32,
    /// `FILTER_*`.
    pub filter: u32,
    /// The affine transform's factor (ordered bits).
    pub scale: u64,
    /// The affine transform's addend (ordered bits).
    pub offset: u64,
    /// The range filter's lowest admitted key (ordered bits).
    pub low: u64,
    /// The range filter's highest admitted key (ordered bits).
    pub high: u64,
    /// The mask filter's bytes, one per input.
    pub mask: GlobalPtr<u8>,
}

impl Default for Fusion {
    fn default() -> Self {
        Self::identity()
    }
}

fn ordered_u64<K: Key>(key: K) -> u64 {
    key.to_ordered().to_u64()
}

fn key_of<K: Key>(ordered: u64) -> K {
    K::from_ordered(K::Bits::from_u64(ordered))
}

impl Fusion {
    /// Every input, keys as they are.
    pub const fn identity() -> Self {
        Self {
            transform: TRANSFORM_IDENTITY,
            filter: FILTER_ALL,
            scale: 0,
            offset: 0,
            low: 0,
            high: 0,
            mask: GlobalPtr::null(),
        }
    }

    /// The same, ranking by [`Key::magnitude`].
    pub fn with_magnitude(self) -> Self {
        Self { transform: TRANSFORM_MAGNITUDE, ..self }
    }

    /// The same, ranking by [`Key::affine`]`(scale, offset)`.
    pub fn with_affine<K: Key>(self, scale: K, offset: K) -> Self {
        Self { transform: TRANSFORM_AFFINE, scale: ordered_u64(scale), offset: ordered_u64(offset), ..self }
    }

    /// The same, admitting the keys from `low` to `high` (both included).
    pub fn with_range<K: Key>(self, low: K, high: K) -> Self {
        Self { filter: FILTER_RANGE, low: ordered_u64(low), high: ordered_u64(high), ..self }
    }

    /// The same, admitting the inputs whose byte of `mask` is not zero.
    pub fn with_mask(self, mask: GlobalPtr<u8>) -> Self {
        Self { filter: FILTER_MASK, mask, ..self }
    }

    /// Whether every input is admitted.
    #[inline(always)]
    pub fn admits_all(&self) -> bool {
        self.filter == FILTER_ALL
    }

    /// Whether the input `key` at `position` of the data is admitted.
    ///
    /// # Safety
    /// With a mask filter, `mask` holds at least `position + 1` bytes.
    #[inline(always)]
    pub unsafe fn admits<K: Key>(&self, key: K, position: u64) -> bool {
        match self.filter {
            FILTER_RANGE => {
                let bits = key.to_ordered();
                K::Bits::from_u64(self.low) <= bits && bits <= K::Bits::from_u64(self.high)
            }
            FILTER_MASK => (unsafe { self.mask.read(position) }) != 0,
            _ => true,
        }
    }

    /// The key `key` is ranked by.
    #[inline(always)]
    pub fn ranked<K: Key>(&self, key: K) -> K {
        match self.transform {
            TRANSFORM_MAGNITUDE => key.magnitude(),
            TRANSFORM_AFFINE => {
                let (scale, offset) = self.affine_terms();
                key.affine(scale, offset)
            }
            _ => key,
        }
    }

    /// The affine transform's factor and addend as keys.
    #[inline(always)]
    pub fn affine_terms<K: Key>(&self) -> (K, K) {
        (key_of(self.scale), key_of(self.offset))
    }

    /// The pruning bound a kernel reads from `key` and `index` (a best pair of some rank,
    /// found by an earlier pass): the ordered bits of its ranked key (complemented for
    /// "largest") and its position. No bound (a null `key`), or a bound whose index is
    /// [`NO_INDEX`] (padding: a filter admitted fewer than that rank), bounds nothing:
    /// every pair is inside it.
    ///
    /// # Safety
    /// `key` is null, or `index` holds one element and so does `key` when that element is
    /// not [`NO_INDEX`].
    #[inline(always)]
    pub unsafe fn bound<K: Key>(
        &self,
        key: GlobalPtr<K>,
        index: GlobalPtr<u64>,
        largest: bool,
    ) -> (K::Bits, u32) {
        let position = if key.is_null() { NO_INDEX } else { unsafe { index.read(0) } };
        if position == NO_INDEX {
            (K::Bits::MAX, u32::MAX)
        } else {
            (self.rank_bits(unsafe { key.read(0) }, largest), position as u32)
        }
    }

    /// The ordered bits of the ranked key, complemented for "largest" (the form the
    /// kernels sort).
    #[inline(always)]
    pub fn rank_bits<K: Key>(&self, key: K, largest: bool) -> K::Bits {
        sorted_bits(self.ranked(key), largest)
    }
}

/// The form the kernels sort of a key already ranked (transformed): its ordered bits,
/// complemented for "largest". Kernels that pick the transform once call this in their
/// loop instead of [`Fusion::rank_bits`], which dispatches on the transform per key.
#[inline(always)]
pub fn sorted_bits<K: Key>(ranked: K, largest: bool) -> K::Bits {
    let ordered = ranked.to_ordered();
    if largest { ordered.complement() } else { ordered }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_use_the_total_order_and_include_both_ends() {
        let range = Fusion::identity().with_range(-0.0f32, 1.0);
        let admitted = |key: f32| unsafe { range.admits(key, 0) };
        assert!(admitted(-0.0) && admitted(0.0) && admitted(1.0));
        assert!(!admitted(-1e-45) && !admitted(1.0000001) && !admitted(f32::NAN));
        let ints = Fusion::identity().with_range(-3i64, 3);
        assert!(unsafe { ints.admits(-3i64, 0) && ints.admits(3i64, 0) && !ints.admits(i64::MIN, 0) });
    }

    #[test]
    fn masks_admit_nonzero_bytes() {
        let bytes = [0u8, 1, 255, 0];
        let fusion = Fusion::identity().with_mask(GlobalPtr::from_address(bytes.as_ptr() as u64));
        let admitted: [bool; 4] = core::array::from_fn(|i| unsafe { fusion.admits(7u32, i as u64) });
        assert_eq!(admitted, [false, true, true, false]);
    }

    #[test]
    fn transforms_rank_by_magnitude_or_affine() {
        let magnitude = Fusion::identity().with_magnitude();
        assert_eq!(magnitude.ranked(-2.5f64), 2.5);
        assert_eq!(magnitude.ranked(-0.0f32).to_bits(), 0.0f32.to_bits());
        assert!(magnitude.ranked(-f32::NAN).is_nan());
        assert_eq!(magnitude.ranked(-7i32), 7);
        assert_eq!(magnitude.ranked(i32::MIN), i32::MIN, "wraps, as i32::wrapping_abs");
        assert_eq!(magnitude.ranked(9u64), 9);
        let affine = Fusion::identity().with_affine(-2.0f32, 0.5);
        assert_eq!(affine.ranked(3.0f32), -5.5);
        let wrapping = Fusion::identity().with_affine(3u32, 1);
        assert_eq!(wrapping.ranked(u32::MAX), u32::MAX.wrapping_mul(3).wrapping_add(1));
        // Largest first sorts the complemented bits ascending.
        assert!(magnitude.rank_bits(-5i32, true) < magnitude.rank_bits(4i32, true));
    }
}
