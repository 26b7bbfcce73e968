//! Dynamic shared memory, carved by typed layouts.
//!
//! Rust has no `__shared__` statics on NVPTX, so every kernel uses the launch-sized dynamic
//! shared memory and carves it with a [`SharedLayout`]. The layout is built by `const fn`s
//! that the host calls too, to size the launch: the bytes a kernel uses and the bytes the host
//! asks for cannot disagree.
//!
//! ```
//! use gpu_select_kernels::device::{SharedLayout, SharedRegion};
//!
//! struct Histogram {
//!     counts: SharedRegion<u32>,
//!     keys: SharedRegion<u64>,
//!     bytes: usize,
//! }
//! const fn histogram(buckets: usize, keys: usize) -> Histogram {
//!     let layout = SharedLayout::new();
//!     let (layout, counts) = layout.push::<u32>(buckets);
//!     let (layout, keys) = layout.push::<u64>(keys);
//!     Histogram { counts, keys, bytes: layout.bytes() }
//! }
//! const H: Histogram = histogram(3, 2);
//! assert_eq!(H.counts.offset(), 0);
//! assert_eq!(H.keys.offset(), 16); // regions start 16-byte aligned
//! assert_eq!(H.bytes, 32);
//! ```

use core::marker::PhantomData;

use super::backend;

/// Every region starts at a multiple of this, so 16-byte vector accesses always work.
const REGION_ALIGN: usize = 16;

const fn round_up(value: usize, to: usize) -> usize {
    value.div_ceil(to) * to
}

/// A layout of dynamic shared memory under construction: the bytes used so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct SharedLayout {
    bytes: usize,
}

impl SharedLayout {
    /// An empty layout.
    pub const fn new() -> Self {
        Self { bytes: 0 }
    }

    /// Appends a region of `len` values of `T` (16-byte aligned) and returns the longer
    /// layout with the region.
    pub const fn push<T>(self, len: usize) -> (Self, SharedRegion<T>) {
        let offset = round_up(self.bytes, REGION_ALIGN);
        let end = offset + len * size_of::<T>();
        (Self { bytes: round_up(end, REGION_ALIGN) }, SharedRegion { offset, len, element: PhantomData })
    }

    /// Bytes of dynamic shared memory the layout needs: what the host passes at launch.
    pub const fn bytes(self) -> usize {
        self.bytes
    }
}

/// A typed region of dynamic shared memory: an offset and a length, known on both sides.
#[derive(Debug)]
pub struct SharedRegion<T> {
    offset: usize,
    len: usize,
    element: PhantomData<fn() -> T>,
}

impl<T> Clone for SharedRegion<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedRegion<T> {}

impl<T> SharedRegion<T> {
    /// Byte offset from the start of dynamic shared memory.
    pub const fn offset(self) -> usize {
        self.offset
    }

    /// Number of values of `T`.
    pub const fn len(self) -> usize {
        self.len
    }

    /// Whether the region holds no value.
    pub const fn is_empty(self) -> bool {
        self.len == 0
    }

    /// The same bytes as values of `U`: for a region written one word at a time and read
    /// as 16-byte vectors. Its bytes must be a multiple of `U`'s size (regions are padded to
    /// 16 bytes, so any size up to 16 that divides the region's bytes).
    pub const fn cast<U>(self) -> SharedRegion<U> {
        assert!(
            (self.len * size_of::<T>()).is_multiple_of(size_of::<U>()),
            "the region is not whole values of U"
        );
        SharedRegion {
            offset: self.offset,
            len: self.len * size_of::<T>() / size_of::<U>(),
            element: PhantomData,
        }
    }

    /// The region's first `len` values of `T`, and the bytes after them as values of `U`:
    /// two views that share the region's bytes (for a phase that uses the region another
    /// way). `len · size_of::<T>()` must be a multiple of 16, so the second view is aligned
    /// as every region is.
    pub const fn split<U>(self, len: usize) -> (SharedRegion<T>, SharedRegion<U>) {
        assert!(len <= self.len, "the split is past the region's end");
        let first_bytes = len * size_of::<T>();
        assert!(first_bytes.is_multiple_of(REGION_ALIGN), "the second view would not be aligned");
        let first = SharedRegion { offset: self.offset, len, element: PhantomData };
        let rest_len = (self.len - len) * size_of::<T>() / size_of::<U>();
        (first, SharedRegion { offset: self.offset + first_bytes, len: rest_len, element: PhantomData })
    }

    /// The region inside this block's shared memory.
    ///
    /// # Safety
    /// The launch must have asked for at least the layout's [`SharedLayout::bytes`].
    #[inline(always)]
    pub unsafe fn bind(self) -> SharedSlice<T> {
        SharedSlice { base: unsafe { super::shared_base().add(self.offset) }.cast::<T>(), len: self.len }
    }
}

/// A typed view of a region of this block's shared memory.
///
/// Accesses go through methods so that the emulator can check them (bounds, reads of
/// memory nothing wrote, conflicting accesses between barriers); on the GPU each method is
/// one `ld.shared` / `st.shared` / `atom.shared` without bounds checks.
#[derive(Debug)]
pub struct SharedSlice<T> {
    base: *mut T,
    len: usize,
}

impl<T> Clone for SharedSlice<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedSlice<T> {}

impl<T: Copy> SharedSlice<T> {
    /// Number of values.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice holds no value.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `len` values (all of them when there are fewer).
    #[inline(always)]
    pub fn prefix(&self, len: usize) -> Self {
        Self { base: self.base, len: if len < self.len { len } else { self.len } }
    }

    /// Reads value `index`. *Any thread*; it must be ordered after the write by a barrier
    /// when another thread wrote it.
    ///
    /// # Safety
    /// `index < len()` (checked by the emulator only).
    #[inline(always)]
    pub unsafe fn load(&self, index: usize) -> T {
        backend::check_shared_index(index, self.len);
        unsafe { backend::shared_load(self.base.add(index)) }
    }

    /// The address of value `index`, for an asynchronous copy into it
    /// ([`super::copy_async_16`]).
    ///
    /// # Safety
    /// `index < len()` (checked by the emulator only).
    #[inline(always)]
    pub unsafe fn address(&self, index: usize) -> *mut T {
        backend::check_shared_index(index, self.len);
        unsafe { self.base.add(index) }
    }

    /// Writes value `index`. *Any thread*.
    ///
    /// # Safety
    /// `index < len()` (checked by the emulator only).
    #[inline(always)]
    pub unsafe fn store(&self, index: usize, value: T) {
        backend::check_shared_index(index, self.len);
        unsafe { backend::shared_store(self.base.add(index), value) }
    }
}

impl SharedSlice<u32> {
    /// Atomic add (`atom.shared.add.u32`), returning the old value. *Any thread.*
    ///
    /// # Safety
    /// `index < len()` (checked by the emulator only).
    #[inline(always)]
    pub unsafe fn atomic_add(&self, index: usize, value: u32) -> u32 {
        backend::check_shared_index(index, self.len);
        unsafe { backend::shared_atomic_add_u32(self.base.add(index), value) }
    }

    /// Atomic minimum (`atom.shared.min.u32`), returning the old value. *Any thread.*
    ///
    /// # Safety
    /// `index < len()` (checked by the emulator only).
    #[inline(always)]
    pub unsafe fn atomic_min(&self, index: usize, value: u32) -> u32 {
        backend::check_shared_index(index, self.len);
        unsafe { backend::shared_atomic_min_u32(self.base.add(index), value) }
    }

    /// Atomic maximum (`atom.shared.max.u32`), returning the old value. *Any thread.*
    ///
    /// # Safety
    /// `index < len()` (checked by the emulator only).
    #[inline(always)]
    pub unsafe fn atomic_max(&self, index: usize, value: u32) -> u32 {
        backend::check_shared_index(index, self.len);
        unsafe { backend::shared_atomic_max_u32(self.base.add(index), value) }
    }

    /// Atomic compare-and-swap (`atom.shared.cas.b32`), returning the old value.
    /// *Any thread.*
    ///
    /// # Safety
    /// `index < len()` (checked by the emulator only).
    #[inline(always)]
    pub unsafe fn atomic_cas(&self, index: usize, expected: u32, new: u32) -> u32 {
        backend::check_shared_index(index, self.len);
        unsafe { backend::shared_atomic_cas_u32(self.base.add(index), expected, new) }
    }
}
