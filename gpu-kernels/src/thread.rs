//! Single-thread building blocks: comparisons of key + position pairs.
//!
//! Keys travel as [`OrderedBits`] next to a position; comparing the pair (bits first, then
//! position) gives a *strict* total order even among equal keys, so every network built on
//! it is deterministic: equal keys keep their input order.

use crate::key::OrderedBits;

/// Whether `(bits_a, position_a)` sorts after `(bits_b, position_b)`.
#[inline(always)]
pub fn pair_after<B: OrderedBits>(bits_a: B, position_a: u32, bits_b: B, position_b: u32) -> bool {
    bits_a > bits_b || (bits_a == bits_b && position_a > position_b)
}

/// Whether `(bits_a, position_a)` sorts after `(bits_b, position_b)` in a network that
/// breaks ties by position when `TIES` (a stable sort), and compares bits alone otherwise: a
/// sort of keys whose positions no one reads (SampleSelect's sample), where the positions
/// then never move and the compiler drops them.
#[inline(always)]
pub fn slot_after<B: OrderedBits, const TIES: bool>(
    bits_a: B,
    position_a: u32,
    bits_b: B,
    position_b: u32,
) -> bool {
    if TIES { pair_after(bits_a, position_a, bits_b, position_b) } else { bits_a > bits_b }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_break_ties_by_position_and_keys_alone_do_not() {
        assert!(pair_after(5u32, 0, 3, 1));
        assert!(!pair_after(3u32, 1, 5, 0));
        assert!(pair_after(7u64, 9, 7, 2));
        assert!(!pair_after(7u64, 2, 7, 9));
        assert!(slot_after::<u32, true>(7, 9, 7, 2));
        assert!(!slot_after::<u32, false>(7, 9, 7, 2));
        assert!(slot_after::<u32, false>(8, 0, 7, 2));
    }
}
