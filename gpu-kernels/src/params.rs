//! Launch parameters: `#[repr(C)]` structs that the host fills and each kernel receives by
//! value as its only argument. Host and device compile them from this one file, so their
//! layouts cannot disagree.

use core::marker::PhantomData;

/// Which end of the order a result starts from.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// Smallest keys first (ascending).
    Smallest = 0,
    /// Largest keys first (descending).
    Largest = 1,
}

impl Order {
    /// The value carried in launch parameters.
    pub const fn to_raw(self) -> u32 {
        self as u32
    }

    /// Reads the value carried in launch parameters; anything but 1 is `Smallest`.
    pub const fn from_raw(raw: u32) -> Self {
        if raw == 1 { Order::Largest } else { Order::Smallest }
    }
}

/// An address in device (global) memory as a launch parameter carries it: 64 bits, typed.
///
/// On the GPU it is a device address; in the emulator, a host address.
#[repr(transparent)]
pub struct GlobalPtr<T> {
    address: u64,
    element: PhantomData<*mut T>,
}

impl<T> Clone for GlobalPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for GlobalPtr<T> {}

impl<T> core::fmt::Debug for GlobalPtr<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "GlobalPtr({:#x})", self.address)
    }
}

// Launch parameters cross to the emulator's threads; the memory behind the address is
// the kernel's business, as on the GPU.
unsafe impl<T> Send for GlobalPtr<T> {}
unsafe impl<T> Sync for GlobalPtr<T> {}

impl<T> GlobalPtr<T> {
    /// The null address: "absent" for optional inputs.
    pub const fn null() -> Self {
        Self { address: 0, element: PhantomData }
    }

    /// Wraps a raw device (or, in the emulator, host) address.
    pub const fn from_address(address: u64) -> Self {
        Self { address, element: PhantomData }
    }

    /// The raw address.
    pub const fn address(self) -> u64 {
        self.address
    }

    /// The address `count` elements further on.
    pub const fn offset(self, count: u64) -> Self {
        Self::from_address(self.address + count * size_of::<T>() as u64)
    }

    /// Whether this is the null address.
    pub const fn is_null(self) -> bool {
        self.address == 0
    }

    /// The pointer this address stands for on the executing side.
    #[inline(always)]
    pub fn as_ptr(self) -> *mut T {
        self.address as usize as *mut T
    }

    /// Reads element `index`.
    ///
    /// # Safety
    /// The element must be in bounds of live device memory.
    #[inline(always)]
    pub unsafe fn read(self, index: u64) -> T {
        unsafe { self.as_ptr().add(index as usize).read() }
    }

    /// Writes element `index`.
    ///
    /// # Safety
    /// The element must be in bounds of live device memory that no other thread accesses
    /// concurrently.
    #[inline(always)]
    pub unsafe fn write(self, index: u64, value: T) {
        unsafe { self.as_ptr().add(index as usize).write(value) }
    }
}

/// Parameters of the block bitonic sort (`block_sort_<key>`): `segments` segments of
/// `segment_len` keys each, stored one after another. A block sorts
/// [`segments_per_block`](crate::block::bitonic_sort::segments_per_block) of them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockSortParams<K> {
    /// `segments × segment_len` keys.
    pub keys_in: GlobalPtr<K>,
    /// Index to report for each input key, or null for the position within its segment.
    pub indices_in: GlobalPtr<u64>,
    /// Sorted keys, same shape as the input.
    pub keys_out: GlobalPtr<K>,
    /// For each sorted key, its index (from `indices_in`, or its position in the segment);
    /// null: keys only (no index is read or written).
    pub indices_out: GlobalPtr<u64>,
    /// Keys per segment, 1 to [`crate::block::bitonic_sort::MAX_BLOCK_SORT_LEN`].
    pub segment_len: u32,
    /// [`Order::to_raw`]: which end comes first.
    pub order: u32,
    /// Number of segments.
    pub segments: u32,
    /// Keeps the struct free of implicit padding (set to 0).
    pub reserved: u32,
}
