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

/// Orders two register pairs: afterwards `a` sorts before `b` when `ascending`, after it
/// otherwise. The compare-exchange of every sorting network here.
#[inline(always)]
pub fn compare_exchange<B: OrderedBits>(a: &mut (B, u32), b: &mut (B, u32), ascending: bool) {
    if pair_after(a.0, a.1, b.0, b.1) == ascending {
        core::mem::swap(a, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_exchange_orders_both_ways_and_breaks_ties_by_position() {
        let (mut a, mut b) = ((5u32, 0), (3u32, 1));
        compare_exchange(&mut a, &mut b, true);
        assert_eq!((a, b), ((3, 1), (5, 0)));
        compare_exchange(&mut a, &mut b, false);
        assert_eq!((a, b), ((5, 0), (3, 1)));
        let (mut a, mut b) = ((7u64, 9), (7u64, 2));
        compare_exchange(&mut a, &mut b, true);
        assert_eq!((a, b), ((7, 2), (7, 9)));
    }
}
