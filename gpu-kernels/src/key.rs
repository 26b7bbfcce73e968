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
    /// Which keys of a 16-byte vector (as memory holds them: [`key_in_vector`]'s order) rank
    /// at or below `bound`, their rank being `to_ordered() ^ flip`: bit `e` for key `e`, of
    /// `16 / size_of::<Self>()` bits. Branch-free, so that a pass keeping few keys tests
    /// each one in a few instructions and branches only for those it keeps; the 16-bit
    /// floats rank the two keys of a word at once (`ranks_at_most_16`).
    #[inline(always)]
    fn ranks_at_most(vector: &[u32; 4], flip: Self::Bits, bound: Self::Bits) -> u32 {
        let mut within = 0;
        for e in 0..16 / size_of::<Self>() {
            let key: Self = unsafe { key_in_vector(vector, e) };
            within |= ((key.to_ordered().xor(flip) <= bound) as u32) << e;
        }
        within
    }
    /// `rank ≤ bound` (the rank `to_ordered() ^ flip`, `flip` that of either order) as a
    /// test on keys' bits as memory holds them, for [`Key::bits_at_most`]: one XOR and one
    /// unsigned compare a key. A float's rank flips its bits by its sign, but every key on
    /// one side of the bound's sign compares alike, so the bound's side picks the XOR once.
    /// `None` where there is no such test: integers (their rank is one XOR already), and
    /// floats whose bound falls among the NaNs' ranks (all NaNs rank as one; the test would
    /// tell their payloads apart).
    #[inline(always)]
    fn bits_bound(flip: Self::Bits, bound: Self::Bits) -> Option<BitsBound<Self::Bits>> {
        let _ = (flip, bound);
        None
    }
    /// [`Key::ranks_at_most`] by a test [`Key::bits_bound`] gave, and whether the vector
    /// holds a negative NaN, whose bits the test misjudges (it ranks as every NaN does, on
    /// top): the caller then takes [`Key::ranks_at_most`]. Types without a test say so.
    #[inline(always)]
    fn bits_at_most(vector: &[u32; 4], test: BitsBound<Self::Bits>) -> (u32, bool) {
        let _ = (vector, test);
        (0, true)
    }
}

/// A bound on ranks as a test on keys' bits ([`Key::bits_bound`]): a key is within it when
/// its bits XOR `xor` are at most `at_most` (unsigned; 16-bit keys in each half of a word).
#[derive(Clone, Copy, Debug)]
pub struct BitsBound<B> {
    /// XOR-ed into a key's bits (into both halves of a word of 16-bit keys).
    pub xor: B,
    /// The most a key within the bound compares, after the XOR.
    pub at_most: B,
}

/// [`Key::bits_bound`] for floats of `B` (16-bit floats in the low bits of a `u32`): `bound`
/// and `flip` on the key's own bits, `infinity` the bits of `+inf`, `sign` the sign bit, `all`
/// every bit. Smallest first (`flip` 0) a key `x` is within when its ordered bits `o ≤ bound`:
/// for `bound ≥ sign` every negative key is, and the others compare `x ^ sign` (their `o`);
/// for `bound < sign` only negative ones with `!x ≤ bound`, i.e. `x ^ all`. Largest first,
/// `o ≥ !bound`, as `≤` by complementing: `x` for `bound ≥ sign` (every non-negative key and
/// the negative ones with `x ≤ bound`), `x ^ !sign` below. NaNs' `o` lie above `+inf`'s; the
/// test holds for them when the bound does not split them.
#[inline(always)]
fn float_bits_bound<B>(flip: B, bound: B, infinity: B, sign: B, all: B) -> Option<B>
where
    B: Copy
        + Ord
        + core::ops::BitXor<Output = B>
        + core::ops::BitOr<Output = B>
        + core::ops::BitAnd<Output = B>,
    B: core::ops::Add<Output = B> + From<bool>,
{
    let first_nan = (infinity | sign) + B::from(true);
    let largest = flip != B::from(false);
    let nans_alike = if largest { (bound ^ all) <= first_nan } else { bound < first_nan || bound == all };
    let side = if bound >= sign { sign } else { all };
    nans_alike.then_some(side ^ (flip & sign))
}

/// Key `e` of a 16-byte vector of keys of 2, 4 or 8 bytes, as memory holds them
/// (little-endian: the first key in the lowest bits of the first word).
///
/// # Safety
/// `K` is a plain 2-, 4- or 8-byte key, `e < 16 / size_of::<K>()`.
#[inline(always)]
pub unsafe fn key_in_vector<K: Copy>(words: &[u32; 4], e: usize) -> K {
    const { assert!(size_of::<K>() == 2 || size_of::<K>() == 4 || size_of::<K>() == 8) };
    if size_of::<K>() == 2 {
        let half = (words[e / 2] >> (16 * (e % 2))) as u16;
        unsafe { core::mem::transmute_copy::<u16, K>(&half) }
    } else if size_of::<K>() == 4 {
        unsafe { core::mem::transmute_copy::<u32, K>(&words[e]) }
    } else {
        let bits = words[2 * e] as u64 | (words[2 * e + 1] as u64) << 32;
        unsafe { core::mem::transmute_copy::<u64, K>(&bits) }
    }
}

/// [`Key::ranks_at_most`] for 16-bit floats whose infinity has the bits `infinity` and whose
/// canonical NaN (sign cleared) `nan`: both keys of each word ranked at once, in the word's
/// two halves (NaNs made the canonical one, then the sign rule and `flip`, as
/// [`Key::to_ordered`] does key by key), and each half compared with the bound's key bits.
/// Bit `2i` is the low half (the first key) of word `i`.
#[inline(always)]
fn ranks_at_most_16(vector: &[u32; 4], flip: u32, bound: u32, infinity: u32, nan: u32) -> u32 {
    const LOW: u32 = 0x0001_0001;
    // A rank's low half is zero padding, so `rank ≤ bound` compares the key bits alone.
    let (flip, bound) = ((flip >> 16) * LOW, bound >> 16);
    let mut within = 0;
    for (i, &word) in vector.iter().enumerate() {
        // Bit 15 of a half is set where its magnitude is above infinity's: a NaN.
        let above_infinity = ((word & 0x7fff_7fff) + (0x7fff - infinity) * LOW) & 0x8000_8000;
        let nans = (above_infinity >> 15) * 0xffff;
        let bits = (word & !nans) | ((nan * LOW) & nans);
        let negative = ((bits >> 15) & LOW) * 0xffff;
        let ranks = bits ^ (negative | 0x8000_8000) ^ flip;
        within |= ((ranks & 0xffff <= bound) as u32 | ((ranks >> 16 <= bound) as u32) << 1) << (2 * i);
    }
    within
}

/// [`Key::bits_at_most`] for 16-bit floats whose infinity has the bits `infinity`: both keys
/// of each word at once, the high one compared whole (its low half below `at_most`'s
/// `0xffff`), the low one shifted up; a negative NaN has the sign bit and a magnitude above
/// infinity's.
#[inline(always)]
fn bits_at_most_16(vector: &[u32; 4], test: BitsBound<u32>, infinity: u32) -> (u32, bool) {
    const LOW: u32 = 0x0001_0001;
    let (mut within, mut negative_nans) = (0, 0);
    for (i, &word) in vector.iter().enumerate() {
        negative_nans |= ((word & 0x7fff_7fff) + (0x7fff - infinity) * LOW) & word;
        let bits = word ^ test.xor;
        within |= (((bits << 16) <= test.at_most) as u32 | ((bits <= test.at_most) as u32) << 1) << (2 * i);
    }
    (within, negative_nans & 0x8000_8000 != 0)
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
            fn bits_bound(flip: $bits, bound: $bits) -> Option<BitsBound<$bits>> {
                const SIGN: $bits = 1 << (<$bits>::BITS - 1);
                let infinity = <$float>::INFINITY.to_bits();
                float_bits_bound(flip, bound, infinity, SIGN, <$bits>::MAX)
                    .map(|xor| BitsBound { xor, at_most: bound })
            }
            #[inline(always)]
            fn bits_at_most(vector: &[u32; 4], test: BitsBound<$bits>) -> (u32, bool) {
                const SIGN: $bits = 1 << (<$bits>::BITS - 1);
                let (mut within, mut negative_nan) = (0, false);
                for e in 0..16 / size_of::<Self>() {
                    let bits = unsafe { key_in_vector::<$float>(vector, e) }.to_bits();
                    negative_nan |= bits > (<$float>::INFINITY.to_bits() | SIGN);
                    within |= (((bits ^ test.xor) <= test.at_most) as u32) << e;
                }
                (within, negative_nan)
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
            #[inline(always)]
            fn ranks_at_most(vector: &[u32; 4], flip: u32, bound: u32) -> u32 {
                let (infinity, nan) = (<$half>::INFINITY.to_bits(), <$half>::NAN.to_bits() & 0x7fff);
                ranks_at_most_16(vector, flip, bound, infinity as u32, nan as u32)
            }
            #[inline(always)]
            fn bits_bound(flip: u32, bound: u32) -> Option<BitsBound<u32>> {
                // A rank's low half is zero padding: `rank ≤ bound` compares the key bits alone.
                let (flip, bound) = (flip >> 16, bound >> 16);
                let infinity = <$half>::INFINITY.to_bits() as u32;
                float_bits_bound(flip, bound, infinity, 0x8000, 0xffff)
                    .map(|xor| BitsBound { xor: xor * 0x0001_0001, at_most: bound << 16 | 0xffff })
            }
            #[inline(always)]
            fn bits_at_most(vector: &[u32; 4], test: BitsBound<u32>) -> (u32, bool) {
                bits_at_most_16(vector, test, <$half>::INFINITY.to_bits() as u32)
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
    use crate::testing::xorshift;

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

    /// `ranks_at_most` against `rank ≤ bound` key by key: every 16-bit key (NaNs of both
    /// signs and any payload, ±0, ±inf, subnormals) in every slot of a vector beside keys
    /// of every kind, under both orders and bounds at, next to and between the keys' ranks
    /// (padding bits set or not); the 32-bit keys' default on a few keys.
    fn check_ranks_at_most<K: Key<Bits = u32>>(from_bits: fn(u16) -> K) {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for x in 0..=u16::MAX {
            let slot = (x % 8) as usize;
            let mut keys = [0u16; 8];
            for (e, key) in keys.iter_mut().enumerate() {
                *key = if e == slot { x } else { next() as u16 };
            }
            let vector: [u32; 4] =
                core::array::from_fn(|i| keys[2 * i] as u32 | (keys[2 * i + 1] as u32) << 16);
            let rank = from_bits(x).to_ordered();
            for flip in [0, 0xffff_0000] {
                let own = rank ^ flip;
                let random = next() as u32;
                for bound in [
                    own,
                    own | 0xffff,
                    own.wrapping_sub(1 << 16),
                    own.wrapping_add(1 << 16),
                    random,
                    0,
                    u32::MAX,
                ] {
                    let expected: u32 =
                        (0..8).map(|e| ((from_bits(keys[e]).to_ordered() ^ flip <= bound) as u32) << e).sum();
                    assert_eq!(
                        K::ranks_at_most(&vector, flip, bound),
                        expected,
                        "{x:#x} {flip:#x} {bound:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn ranks_at_most_is_rank_at_most_bound_key_by_key() {
        check_ranks_at_most(half::bf16::from_bits);
        check_ranks_at_most(half::f16::from_bits);
        let keys = [f32::NAN, -f32::NAN, -0.0, 0.0, 1.0, f32::NEG_INFINITY, -3.5, f32::INFINITY];
        let vector = |keys: &[f32]| -> [u32; 4] { core::array::from_fn(|i| keys[i].to_bits()) };
        for pair in [&keys[..4], &keys[4..]] {
            for flip in [0, u32::MAX] {
                for bound in pair.iter().map(|key| key.to_ordered() ^ flip) {
                    let expected: u32 =
                        (0..4).map(|e| ((pair[e].to_ordered() ^ flip <= bound) as u32) << e).sum();
                    assert_eq!(f32::ranks_at_most(&vector(pair), flip, bound), expected);
                }
            }
        }
    }

    /// `bits_at_most` against `rank ≤ bound` key by key, for every 16-bit key (in 8192
    /// vectors, and alone) under both orders and a spread of bounds (every 127th, and all near the
    /// signs, the zeros, the infinities and the NaNs, padding bits random): where
    /// `bits_bound` gives a test, a vector's answer is exact or it is flagged as holding
    /// a negative NaN, and it is flagged only then; the test is missing exactly for bounds
    /// that split the NaNs' ranks.
    fn check_bits_at_most<K: Key<Bits = u32>>(from_bits: fn(u16) -> K) {
        // Eight consecutive keys a vector, and each key alone (eight times: its own flag).
        let mut vectors: std::vec::Vec<[u32; 4]> = (0..8192u32)
            .map(|v| core::array::from_fn(|i| (8 * v + 2 * i as u32) | (8 * v + 2 * i as u32 + 1) << 16))
            .collect();
        vectors.extend((0..=0xffffu32).map(|key| [key * 0x0001_0001; 4]));
        // NaNs order above +inf.
        let negative_nan =
            |bits: u32| from_bits(bits as u16).to_ordered() > K::HIGHEST.to_ordered() && bits & 0x8000 != 0;
        let special = [0x0000u32, 0x7c00, 0x7e00, 0x7f80, 0x7fc0, 0x8000, 0xfc00, 0xff80, 0xffff];
        let mut bounds: std::vec::Vec<u32> = (0..=0xffffu32).step_by(127).collect();
        for centre in special {
            bounds.extend((0..96u32).map(|d| (centre + d).wrapping_sub(48) & 0xffff));
        }
        let first_nan = (K::HIGHEST.to_ordered() >> 16) + 1;
        for (b, &bound16) in bounds.iter().enumerate() {
            let bound = bound16 << 16 | (b as u32 * 7919) & 0xffff;
            for flip in [0, 0xffff_0000] {
                // The ranks of NaNs: `first_nan ..= 0xffff`, complemented when largest first.
                let nan_ranks = if flip == 0 { first_nan..=0xffff } else { 0..=0xffff - first_nan };
                let splits_nans = nan_ranks.contains(&bound16) && bound16 != *nan_ranks.end();
                let Some(test) = K::bits_bound(flip, bound) else {
                    assert!(splits_nans, "no test for {bound:#x}, flip {flip:#x}");
                    continue;
                };
                assert!(!splits_nans, "a test for {bound:#x}, flip {flip:#x}");
                for vector in &vectors {
                    let (within, flagged) = K::bits_at_most(vector, test);
                    let holds_negative_nan =
                        vector.iter().any(|&w| negative_nan(w & 0xffff) || negative_nan(w >> 16));
                    assert_eq!(flagged, holds_negative_nan, "{vector:x?}");
                    if !flagged {
                        assert_eq!(
                            within,
                            K::ranks_at_most(vector, flip, bound),
                            "{vector:x?} {flip:#x} {bound:#x}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bits_at_most_is_rank_at_most_bound_or_says_it_is_not() {
        check_bits_at_most(half::bf16::from_bits);
        check_bits_at_most(half::f16::from_bits);
        // f32: specials and random keys, bounds at, beside and between their ranks.
        let mut random = xorshift(0x2545_f491_4f6c_dd1d);
        let mut next = || random() as u32;
        let mut keys: std::vec::Vec<u32> = [
            0,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7fc0_0000,
            0xffc0_0000,
            0x7f80_0001,
            0xffff_ffff,
            1,
            0x8000_0001,
        ]
        .into();
        keys.extend((0..4000).map(|_| next()));
        let mut bounds: std::vec::Vec<u32> = keys.iter().map(|&k| f32::from_bits(k).to_ordered()).collect();
        bounds.extend(bounds.clone().iter().flat_map(|&b| [b.wrapping_add(1), b.wrapping_sub(1), !b]));
        bounds.extend([0, u32::MAX, 0x8000_0000, 0x7fff_ffff]);
        let (mut tested, mut missing) = (0, 0);
        for &bound in &bounds {
            for flip in [0, u32::MAX] {
                let Some(test) = f32::bits_bound(flip, bound) else {
                    missing += 1;
                    continue;
                };
                tested += 1;
                for vector in keys.chunks_exact(4) {
                    let vector = [vector[0], vector[1], vector[2], vector[3]];
                    let (within, flagged) = f32::bits_at_most(&vector, test);
                    let holds_negative_nan =
                        vector.iter().any(|&k| f32::from_bits(k).is_nan() && k >> 31 == 1);
                    assert_eq!(flagged, holds_negative_nan);
                    if !flagged {
                        assert_eq!(
                            within,
                            f32::ranks_at_most(&vector, flip, bound),
                            "{vector:x?} {flip:#x} {bound:#x}"
                        );
                    }
                }
            }
        }
        assert!(missing * 20 < tested, "{missing} bounds without a test, {tested} with");
    }

    #[test]
    fn integers_keep_their_order() {
        assert_order_preserved(&[i32::MIN, -1, 0, 1, i32::MAX]);
        assert_order_preserved(&[i64::MIN, -1, 0, 1, i64::MAX]);
        assert_order_preserved(&[0u32, 1, u32::MAX]);
        assert_order_preserved(&[0u64, 1, u64::MAX]);
    }
}
