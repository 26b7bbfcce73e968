//! CPU reference implementations: the test oracle, and a fallback for tiny inputs.
//!
//! They follow the same rules as the GPU paths: the total order of [`Key`] (NaN above +inf,
//! -0.0 below +0.0), and ties broken by input position (lower first).

use crate::{Key, Order};

/// Sorts `keys` in `order`, stably; returns `(key, input position)` pairs.
///
/// ```
/// use gpu_select::{Order, reference};
///
/// let sorted = reference::sort_pairs(&[3u32, 1, 3, 2], Order::Largest);
/// assert_eq!(sorted, [(3, 0), (3, 2), (2, 3), (1, 1)]);
/// ```
pub fn sort_pairs<K: Key>(keys: &[K], order: Order) -> Vec<(K, u64)> {
    let mut pairs: Vec<(K, u64)> = keys.iter().enumerate().map(|(i, &k)| (k, i as u64)).collect();
    match order {
        Order::Smallest => pairs.sort_by_key(|&(key, _)| key.to_ordered()),
        Order::Largest => pairs.sort_by_key(|&(key, _)| std::cmp::Reverse(key.to_ordered())),
    }
    pairs
}
