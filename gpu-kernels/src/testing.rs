//! Helpers shared by the kernel crate's unit tests.

/// Xorshift64 from `state` (not 0): the tests' keys, reproducible without a crate.
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
