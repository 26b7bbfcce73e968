//! Exact k-nearest-neighbour search: the kernels of the Faiss paper's brute-force search
//! (Johnson, Douze & Jégou, "Billion-scale similarity search with GPUs", §5), for `f32`
//! vectors of any dimension.
//!
//! The distance between a query `x` and a base vector `y` is computed through the
//! decomposition the paper uses, so that the work is a matrix product:
//!
//! ```text
//! squared L2:     ‖x − y‖² = ‖x‖² + ‖y‖² − 2⟨x, y⟩     (clamped at 0)
//! inner product:  −⟨x, y⟩                             (negated: smaller is nearer)
//! cosine:         −⟨x, y⟩ / (‖x‖ ‖y‖)                 (0 when either vector is zero)
//! ```
//!
//! 1. [`norms`](norms::squared_norms): `‖y‖²` of every base vector (once per base) and of
//!    every query.
//! 2. [`distance_tile`](tile::distance_tile): a register- and shared-memory-tiled matrix
//!    product of a tile of queries with a tile of base vectors, whose epilogue adds the
//!    norms (or divides by them), so that the tile holds finished distances: written once,
//!    read once by the selection (the rows top-k of `crate::topk::rows`, smallest first).
//! 3. [`place`](place::place_neighbours): each query's `k` best of a column tile moved
//!    into its row of candidates (the column tile's first base index added), of which one
//!    more rows top-k keeps the `k` best; then the signs of the similarity metrics restored,
//!    and for a k-NN graph each vector's own index dropped.
//!
//! Every metric is selected smallest first, so a NaN distance (a vector with a NaN, or
//! `inf − inf`) ranks after every number, under every metric.
//!
//! Vectors are stored as `f32`, or as 16-bit floats ([`F16Bits`], [`Bf16Bits`]: half the
//! bytes) that the kernels widen to `f32` as they read them ([`Component`]); the products
//! and distances are `f32` either way.

pub mod norms;
pub mod place;
pub mod tensor;
pub mod tile;

/// A stored vector component, widened to `f32` where a kernel reads it. Each widening is
/// exact, and the same integer code on the GPU and in the emulator.
pub trait Component: Copy + Default + Send + Sync + 'static {
    /// The component as an `f32`.
    fn to_f32(self) -> f32;
}

impl Component for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

/// An IEEE 754 binary16 value, as its bits (the host's `half::f16`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F16Bits(pub u16);

impl Component for F16Bits {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        let bits = self.0 as u32;
        let sign = (bits & 0x8000) << 16;
        let exponent = (bits >> 10) & 0x1f;
        let mantissa = bits & 0x3ff;
        let magnitude = match exponent {
            // Zero and subnormals: mantissa · 2^-24, exact in f32.
            0 => (mantissa as f32 * (1.0 / 16_777_216.0)).to_bits(),
            // Infinities and NaNs (the payload kept in the high mantissa bits).
            0x1f => 0x7f80_0000 | mantissa << 13,
            // Normal: rebias the exponent (15 → 127).
            _ => (exponent + 112) << 23 | mantissa << 13,
        };
        f32::from_bits(sign | magnitude)
    }
}

/// A bfloat16 value, as its bits (the host's `half::bf16`): the high half of an `f32`.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bf16Bits(pub u16);

impl Component for Bf16Bits {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}

/// How distances are measured (`DistanceTileParams::metric`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Metric {
    /// Squared Euclidean distance.
    L2 = 0,
    /// Inner product (larger is nearer), selected as its negation.
    InnerProduct = 1,
    /// Cosine similarity (larger is nearer), selected as its negation.
    Cosine = 2,
}

impl Metric {
    /// The raw value the kernels take.
    pub const fn to_raw(self) -> u32 {
        self as u32
    }

    /// The metric of a raw value (anything unknown is L2).
    pub const fn from_raw(raw: u32) -> Self {
        match raw {
            1 => Metric::InnerProduct,
            2 => Metric::Cosine,
            _ => Metric::L2,
        }
    }

    /// Whether the tiles hold the negation of what the caller is given (a similarity).
    pub const fn is_similarity(self) -> bool {
        !matches!(self, Metric::L2)
    }
}

/// The distance the tiles hold for a dot product and the two vectors' squared norms (module
/// docs). Written once, for the kernels and for the host's reference of the same
/// arithmetic.
#[inline(always)]
pub fn tile_distance(metric: Metric, dot: f32, query_norm: f32, base_norm: f32) -> f32 {
    match metric {
        Metric::L2 => {
            let distance = query_norm + base_norm - 2.0 * dot;
            // Rounding can take a distance of (nearly) zero below it; NaN stays NaN.
            if distance < 0.0 { 0.0 } else { distance }
        }
        Metric::InnerProduct => -dot,
        Metric::Cosine => {
            let scale = crate::device::sqrt_f32(query_norm) * crate::device::sqrt_f32(base_norm);
            // A zero vector is orthogonal to everything: similarity 0 (its negation, -0.0).
            if scale == 0.0 { -0.0 } else { -(dot / scale) }
        }
    }
}
