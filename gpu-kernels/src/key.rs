//! Keys and their order-preserving bit encodings.
//!
//! Every selection kernel compares keys as unsigned integers ("ordered bits"): the encoding
//! maps the key's order onto the integers' order, so one code path serves floats, signed and
//! unsigned integers, and radix digits can be taken straight from the bits.
//!
//! # The float order (NaN policy)
//!
//! Floats are ordered totally: `-inf < … < -0.0 < +0.0 < … < +inf < NaN`. Every NaN, whatever
//! its sign or payload, orders above `+inf` and equal to every other NaN; `-0.0` orders just
//! below `+0.0`. So "the k largest" of an array with NaNs starts with its NaNs, and "the k
//! smallest" never holds a NaN while other values remain.
//!
//! ```
//! use gpu_select_kernels::Key;
//!
//! let order = [f32::NEG_INFINITY, -1.0, -0.0, 0.0, 1e-45, 1.0, f32::INFINITY, f32::NAN];
//! for pair in order.windows(2) {
//!     assert!(pair[0].to_ordered() < pair[1].to_ordered());
//! }
//! assert_eq!((-f32::NAN).to_ordered(), f32::NAN.to_ordered());
//! assert_eq!(f32::from_ordered((-2.5f32).to_ordered()), -2.5);
//! ```

/// Unsigned integers that carry encoded keys: `u32` for 32-bit and 16-bit keys, `u64` for
/// 64-bit ones.
pub trait OrderedBits: Copy + Ord + Eq + Default + Send + Sync + core::fmt::Debug + 'static {
    /// The smallest value (all zeros).
    const MIN: Self;
    /// The largest value (all ones): the padding that sorts after every real key.
    const MAX: Self;
    /// Width in bits.
    const BITS: u32;
    /// Bitwise complement: reverses the order, so "largest first" sorts as ascending.
    fn complement(self) -> Self;
    /// Widens to `u64`.
    fn to_u64(self) -> u64;
    /// Narrows from `u64` (the caller guarantees it fits).
    fn from_u64(value: u64) -> Self;
    /// Bitwise exclusive or.
    fn xor(self, other: Self) -> Self;
    /// Logical shift right by `bits` (< [`OrderedBits::BITS`]).
    fn shr(self, bits: u32) -> Self;
    /// The low 32 bits.
    fn low_u32(self) -> u32;
    /// Subtraction modulo 2^BITS.
    fn wrapping_sub(self, other: Self) -> Self;
    /// Bitwise and.
    fn and(self, other: Self) -> Self;
    /// `count + 1` where `self ≥ bound`, else `count`, in two instructions, for `bound` above
    /// [`OrderedBits::MIN`] ([`device::add_if_at_least_u32`](crate::device::add_if_at_least_u32)).
    fn add_if_at_least(self, bound: Self, count: u32) -> u32;
    /// `count + 1` where `self` is [`OrderedBits::MAX`], else `count`
    /// ([`device::add_if_max_u32`](crate::device::add_if_max_u32)).
    fn add_if_max(self, count: u32) -> u32;
}

impl OrderedBits for u32 {
    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        self ^ other
    }
    #[inline(always)]
    fn wrapping_sub(self, other: Self) -> Self {
        u32::wrapping_sub(self, other)
    }
    #[inline(always)]
    fn and(self, other: Self) -> Self {
        self & other
    }
    #[inline(always)]
    fn shr(self, bits: u32) -> Self {
        self >> bits
    }
    #[inline(always)]
    fn low_u32(self) -> u32 {
        self
    }
    #[inline(always)]
    fn add_if_at_least(self, bound: Self, count: u32) -> u32 {
        crate::device::add_if_at_least_u32(count, self, bound)
    }
    #[inline(always)]
    fn add_if_max(self, count: u32) -> u32 {
        crate::device::add_if_max_u32(count, self)
    }
    const MIN: Self = 0;
    const MAX: Self = u32::MAX;
    const BITS: u32 = 32;
    #[inline(always)]
    fn complement(self) -> Self {
        !self
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn from_u64(value: u64) -> Self {
        value as u32
    }
}

impl OrderedBits for u64 {
    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        self ^ other
    }
    #[inline(always)]
    fn wrapping_sub(self, other: Self) -> Self {
        u64::wrapping_sub(self, other)
    }
    #[inline(always)]
    fn and(self, other: Self) -> Self {
        self & other
    }
    #[inline(always)]
    fn shr(self, bits: u32) -> Self {
        self >> bits
    }
    #[inline(always)]
    fn low_u32(self) -> u32 {
        self as u32
    }
    #[inline(always)]
    fn add_if_at_least(self, bound: Self, count: u32) -> u32 {
        crate::device::add_if_at_least_u64(count, self, bound)
    }
    #[inline(always)]
    fn add_if_max(self, count: u32) -> u32 {
        crate::device::add_if_max_u64(count, self)
    }
    const MIN: Self = 0;
    const MAX: Self = u64::MAX;
    const BITS: u32 = 64;
    #[inline(always)]
    fn complement(self) -> Self {
        !self
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self
    }
    #[inline(always)]
    fn from_u64(value: u64) -> Self {
        value
    }
}

/// A key type the kernels select on: `f32`, `f64`, `i32`, `u32`, `i64`, `u64`, and the 16-bit
/// floats `half::f16` and `half::bf16`.
pub trait Key: Copy + PartialOrd + Default + Send + Sync + core::fmt::Debug + 'static {
    /// The ordered-bits carrier.
    type Bits: OrderedBits;
    /// The name used in kernel symbols (`block_sort_f32`).
    const NAME: &'static str;
    /// The lowest key that is not NaN: `-inf` for floats, `MIN` for integers. Pads results
    /// that hold fewer keys than asked for, when the largest keys were asked for.
    const LOWEST: Self;
    /// The highest key that is not NaN: `+inf` for floats, `MAX` for integers. Pads results
    /// that hold fewer keys than asked for, when the smallest keys were asked for.
    const HIGHEST: Self;
    /// Order-preserving encoding (see the module docs for floats).
    fn to_ordered(self) -> Self::Bits;
    /// Inverse of [`Key::to_ordered`]; every NaN comes back as the canonical quiet NaN.
    fn from_ordered(bits: Self::Bits) -> Self;
    /// The absolute value: floats clear their sign bit (`-0.0` becomes `+0.0`, NaN stays
    /// NaN), signed integers wrap (`MIN` stays `MIN`, as `wrapping_abs`), unsigned ones are
    /// their own.
    fn magnitude(self) -> Self;
    /// `self · scale + offset`: for floats two roundings (a multiply, then an add), for
    /// integers wrapping.
    fn affine(self, scale: Self, offset: Self) -> Self;
    /// The key as an `f64` (rounded to nearest for 64-bit integers beyond 2^53).
    fn to_f64(self) -> f64;
    /// The key nearest to `value`: rounded for floats (16-bit ones through `f32`, so one unit
    /// off the nearest where the first rounding lands halfway); for integers truncated
    /// towards zero and saturated at the type's range (NaN gives 0). Monotone: a larger
    /// `value` never gives a smaller key.
    fn from_f64(value: f64) -> Self;
}

/// Bits below a key's own in its rank (`Key::to_ordered`): 16 for the 16-bit floats, which
/// rank in the high half of a `u32`, else 0. Radix passes that take digits from the top
/// have chosen every bit of the key once they reach them.
#[inline(always)]
pub fn rank_padding_bits<K: Key>() -> u32 {
    K::Bits::BITS - 8 * size_of::<K>() as u32
}

macro_rules! float_key {
    ($float:ty, $bits:ty, $signed:ty, $name:literal) => {
        impl Key for $float {
            type Bits = $bits;
            const NAME: &'static str = $name;
            const LOWEST: Self = <$float>::NEG_INFINITY;
            const HIGHEST: Self = <$float>::INFINITY;
            #[inline(always)]
            fn to_ordered(self) -> $bits {
                const SIGN: $bits = 1 << (<$bits>::BITS - 1);
                // One NaN for all: positive, so it orders above +inf.
                let bits = if self.is_nan() { <$float>::NAN.to_bits() & !SIGN } else { self.to_bits() };
                // Negative: all bits flipped; else the sign set. Branch-free: the sign
                // spread over the word, with the sign bit always set, flips the bits.
                let flip = ((bits as $signed) >> (<$bits>::BITS - 1)) as $bits | SIGN;
                bits ^ flip
            }
            #[inline(always)]
            fn from_ordered(bits: $bits) -> Self {
                const SIGN: $bits = 1 << (<$bits>::BITS - 1);
                <$float>::from_bits(if bits & SIGN != 0 { bits & !SIGN } else { !bits })
            }
            #[inline(always)]
            fn magnitude(self) -> Self {
                const SIGN: $bits = 1 << (<$bits>::BITS - 1);
                <$float>::from_bits(self.to_bits() & !SIGN)
            }
            #[inline(always)]
            fn affine(self, scale: Self, offset: Self) -> Self {
                self * scale + offset
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(value: f64) -> Self {
                value as $float
            }
        }
    };
}

macro_rules! signed_key {
    ($int:ty, $bits:ty, $name:literal) => {
        impl Key for $int {
            type Bits = $bits;
            const NAME: &'static str = $name;
            const LOWEST: Self = <$int>::MIN;
            const HIGHEST: Self = <$int>::MAX;
            #[inline(always)]
            fn to_ordered(self) -> $bits {
                (self as $bits) ^ (1 << (<$bits>::BITS - 1))
            }
            #[inline(always)]
            fn from_ordered(bits: $bits) -> Self {
                (bits ^ (1 << (<$bits>::BITS - 1))) as $int
            }
            #[inline(always)]
            fn magnitude(self) -> Self {
                self.wrapping_abs()
            }
            #[inline(always)]
            fn affine(self, scale: Self, offset: Self) -> Self {
                self.wrapping_mul(scale).wrapping_add(offset)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(value: f64) -> Self {
                value as $int
            }
        }
    };
}

macro_rules! unsigned_key {
    ($int:ty, $name:literal) => {
        impl Key for $int {
            type Bits = $int;
            const NAME: &'static str = $name;
            const LOWEST: Self = <$int>::MIN;
            const HIGHEST: Self = <$int>::MAX;
            #[inline(always)]
            fn to_ordered(self) -> $int {
                self
            }
            #[inline(always)]
            fn from_ordered(bits: $int) -> Self {
                bits
            }
            #[inline(always)]
            fn magnitude(self) -> Self {
                self
            }
            #[inline(always)]
            fn affine(self, scale: Self, offset: Self) -> Self {
                self.wrapping_mul(scale).wrapping_add(offset)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(value: f64) -> Self {
                // Saturating, NaN to 0 (as `as` does), written out so that the branch to
                // the unchecked conversion is visible.
                if value.is_nan() || value <= 0.0 {
                    0
                } else if value >= <$int>::MAX as f64 {
                    <$int>::MAX
                } else {
                    // SAFETY: finite, positive and below MAX: it truncates into range.
                    unsafe { value.to_int_unchecked() }
                }
            }
        }
    };
}

/// 16-bit floats (`half::f16`, `half::bf16`): ordered as the other floats (NaN on top, `-0.0`
/// just below `+0.0`), their 16 ordered bits in the **high** half of a `u32`. The low half
/// is zero for every key, so the radix passes, which take digits from the top, decide on
/// the key's own bits first; registers and shared memory hold the `u32` as for `f32`
/// keys, while global memory holds the keys at their own width (half the bytes of `f32`).
/// Arithmetic widens to `f32` and rounds back (`widen`, `narrow`: one instruction each on
/// the GPU, see `crate::device::f32_to_f16`).
macro_rules! half_key {
    ($half:ty, $name:literal, widen: $widen:expr, narrow: $narrow:expr) => {
        impl Key for $half {
            type Bits = u32;
            const NAME: &'static str = $name;
            const LOWEST: Self = <$half>::NEG_INFINITY;
            const HIGHEST: Self = <$half>::INFINITY;
            #[inline(always)]
            fn to_ordered(self) -> u32 {
                // One NaN for all: positive, so it orders above +inf.
                let bits = if self.is_nan() { <$half>::NAN.to_bits() & 0x7fff } else { self.to_bits() };
                // As for f32: negative flips every bit, positive sets the sign.
                let flip = ((bits as i16) >> 15) as u16 | 0x8000;
                ((bits ^ flip) as u32) << 16
            }
            #[inline(always)]
            fn from_ordered(bits: u32) -> Self {
                let ordered = (bits >> 16) as u16;
                <$half>::from_bits(if ordered & 0x8000 != 0 { ordered & 0x7fff } else { !ordered })
            }
            #[inline(always)]
            fn magnitude(self) -> Self {
                <$half>::from_bits(self.to_bits() & 0x7fff)
            }
            #[inline(always)]
            fn affine(self, scale: Self, offset: Self) -> Self {
                // As `half`'s operators: each step in f32, rounded to the key's type.
                let (widen, narrow): (fn(u16) -> f32, fn(f32) -> u16) = ($widen, $narrow);
                let product = narrow(widen(self.to_bits()) * widen(scale.to_bits()));
                <$half>::from_bits(narrow(widen(product) + widen(offset.to_bits())))
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                // Exact: every 16-bit float is an f32.
                let widen: fn(u16) -> f32 = $widen;
                widen(self.to_bits()) as f64
            }
            #[inline(always)]
            fn from_f64(value: f64) -> Self {
                // Through f32: two roundings, so a value halfway between two keys after the
                // first may land one unit from the nearest; monotone either way (all that
                // bucket select's splitters, its one use in a kernel, need).
                let narrow: fn(f32) -> u16 = $narrow;
                <$half>::from_bits(narrow(value as f32))
            }
        }
    };
}

float_key!(f32, u32, i32, "f32");
float_key!(f64, u64, i64, "f64");
signed_key!(i32, u32, "i32");
signed_key!(i64, u64, "i64");
unsigned_key!(u32, "u32");
unsigned_key!(u64, "u64");
half_key!(half::f16, "f16", widen: crate::device::f16_to_f32, narrow: crate::device::f32_to_f16);
half_key!(
    half::bf16,
    "bf16",
    // bfloat16 is the high half of an f32.
    widen: |bits| f32::from_bits((bits as u32) << 16),
    narrow: crate::device::f32_to_bf16
);

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    fn assert_order_preserved<K: Key>(sorted: &[K]) {
        for pair in sorted.windows(2) {
            assert!(pair[0].to_ordered() < pair[1].to_ordered(), "{:?} !< {:?}", pair[0], pair[1]);
        }
        for &key in sorted {
            assert_eq!(K::from_ordered(key.to_ordered()).to_ordered(), key.to_ordered());
        }
    }

    #[test]
    fn floats_order_totally_with_nan_on_top() {
        let min_subnormal = f32::from_bits(1);
        assert_order_preserved(&[
            f32::NEG_INFINITY,
            f32::MIN,
            -1.0,
            -min_subnormal,
            -0.0,
            0.0,
            min_subnormal,
            f32::MIN_POSITIVE,
            1.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ]);
        assert_order_preserved(&[
            f64::NEG_INFINITY,
            -1.0,
            -0.0,
            0.0,
            f64::from_bits(1),
            f64::INFINITY,
            f64::NAN,
        ]);
        // Every NaN encodes the same, whatever its sign or payload.
        let odd_nan = f32::from_bits(0xffc0_1234);
        assert!(odd_nan.is_nan());
        assert_eq!(odd_nan.to_ordered(), f32::NAN.to_ordered());
        assert_eq!((-f64::NAN).to_ordered(), f64::NAN.to_ordered());
    }

    #[test]
    fn half_floats_order_as_their_f32_values_with_nan_on_top() {
        use half::{bf16, f16};
        // Every f16 bit pattern: the order of the encoding is the order of the f32 value
        // (total_cmp, which puts -0.0 below +0.0), every NaN above +inf and equal, and the
        // low 16 bits zero.
        let mut all: std::vec::Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        all.sort_by(|a, b| a.to_f32().total_cmp(&b.to_f32()));
        let numbers: std::vec::Vec<f16> = all.iter().copied().filter(|key| !key.is_nan()).collect();
        assert_order_preserved(&numbers);
        assert_eq!(numbers.first().copied(), Some(f16::NEG_INFINITY));
        assert_eq!(numbers.last().copied(), Some(f16::INFINITY));
        for key in &all {
            let bits = key.to_ordered();
            assert_eq!(bits & 0xffff, 0, "{key:?}");
            if key.is_nan() {
                assert_eq!(bits, f16::NAN.to_ordered());
                assert!(bits > f16::INFINITY.to_ordered());
            }
        }
        let bf_numbers: std::vec::Vec<bf16> = {
            let mut all: std::vec::Vec<bf16> =
                (0..=u16::MAX).map(bf16::from_bits).filter(|key| !key.is_nan()).collect();
            all.sort_by(|a, b| a.to_f32().total_cmp(&b.to_f32()));
            all
        };
        assert_order_preserved(&bf_numbers);
        assert_eq!((-bf16::NAN).to_ordered(), bf16::NAN.to_ordered());
        assert!(bf16::NAN.to_ordered() > bf16::INFINITY.to_ordered());
        assert_eq!(bf16::from_ordered(bf16::from_f32(-2.5).to_ordered()), bf16::from_f32(-2.5));
    }

    #[test]
    fn integers_keep_their_order() {
        assert_order_preserved(&[i32::MIN, -1, 0, 1, i32::MAX]);
        assert_order_preserved(&[i64::MIN, -1, 0, 1, i64::MAX]);
        assert_order_preserved(&[0u32, 1, u32::MAX]);
        assert_order_preserved(&[0u64, 1, u64::MAX]);
    }
}
