//! A byte string behind one thin pointer: its length and its bytes in one
//! allocation, so a table slot or a B-tree entry that holds or points at it
//! takes 8 bytes instead of a slice's 16 (a sorted set's member, held by
//! its map and pointed at by its order; an item, held by its table, whose
//! id its orders point at).

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use super::defrag::Relocate;

/// The length's bytes before the string's (u32, little-endian; alignment 1
/// like any byte string's, so active defrag moves it as one).
const PREFIX: usize = 4;

/// An owned byte string of at most 4 GiB - 1 bytes (a Redis string is at
/// most `proto-max-bulk-len`, 512 MB unless raised).
pub struct Thin(NonNull<u8>);

// SAFETY: a `Thin` owns its allocation alone, like a `Box<[u8]>`.
unsafe impl Send for Thin {}
// SAFETY: shared access only reads.
unsafe impl Sync for Thin {}

fn layout(len: usize) -> Layout {
    Layout::from_size_align(PREFIX + len, 1).expect("a byte string's layout")
}

impl Thin {
    pub fn new(bytes: &[u8]) -> Thin {
        Thin::filled(bytes.len(), |into| into.copy_from_slice(bytes))
    }

    /// A thin string of `len` bytes, written by `fill` in place.
    pub fn filled(len: usize, fill: impl FnOnce(&mut [u8])) -> Thin {
        let prefix = u32::try_from(len).expect("a byte string under 4 GiB");
        let layout = layout(len);
        // SAFETY: the layout's size is at least PREFIX, never zero.
        let Some(start) = NonNull::new(unsafe { alloc::alloc(layout) }) else {
            alloc::handle_alloc_error(layout);
        };
        // SAFETY: the allocation holds PREFIX + len bytes: the length is
        // written, and the bytes zeroed before `fill` sees them.
        unsafe {
            start
                .as_ptr()
                .copy_from_nonoverlapping(prefix.to_le_bytes().as_ptr(), PREFIX);
            start.as_ptr().add(PREFIX).write_bytes(0, len);
        }
        let mut thin = Thin(start);
        fill(thin.bytes_mut());
        thin
    }

    /// Where it starts: what [`Thin::bytes_at`] reads.
    pub fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr()
    }

    /// The bytes of the thin string starting at `start`.
    ///
    /// # Safety
    ///
    /// `start` points at a live thin string (a `Thin`'s allocation, or a
    /// length and bytes laid out the same way) for as long as `'a`.
    pub unsafe fn bytes_at<'a>(start: *const u8) -> &'a [u8] {
        // SAFETY: per the contract, PREFIX length bytes then that many.
        unsafe {
            let len = u32::from_le_bytes(*start.cast::<[u8; PREFIX]>()) as usize;
            std::slice::from_raw_parts(start.add(PREFIX), len)
        }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: our own allocation, alive while `self` is.
        unsafe { Thin::bytes_at(self.as_ptr()) }
    }

    /// Where its bytes start, as a raw pointer of the allocation's own
    /// (valid while it lives and has not moved).
    pub fn bytes_ptr(&self) -> *const u8 {
        self.0.as_ptr().wrapping_add(PREFIX)
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: our own allocation, borrowed mutably through `self`.
        unsafe {
            let len = self.bytes().len();
            std::slice::from_raw_parts_mut(self.0.as_ptr().add(PREFIX), len)
        }
    }

    /// Heap bytes a thin string of `len` bytes takes, as the allocator
    /// rounds it (to 8).
    pub fn heap_of(len: usize) -> usize {
        (PREFIX + len + 7) & !7
    }

    /// Calls `with` on a thin string equal to `bytes`, made on the stack
    /// when short: a lookup key for an order of thin pointers, valid for
    /// the call only.
    pub fn with_key<R>(bytes: &[u8], with: impl FnOnce(*const u8) -> R) -> R {
        const SHORT: usize = 124;
        if bytes.len() <= SHORT {
            let mut key = [0u8; PREFIX + SHORT];
            key[..PREFIX].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
            key[PREFIX..PREFIX + bytes.len()].copy_from_slice(bytes);
            with(key.as_ptr())
        } else {
            let key = Thin::new(bytes);
            with(key.as_ptr())
        }
    }

    /// Offers its allocation to `mover` (active defrag); true when it
    /// moved, and then this points at the new place.
    pub(super) fn relocate(&mut self, mover: &mut impl Relocate) -> bool {
        let layout = layout(self.bytes().len());
        match mover.relocate(self.0, layout) {
            Some(moved) => {
                // The old place was freed by the mover (Relocate's contract).
                self.0 = moved;
                true
            }
            None => false,
        }
    }
}

impl Drop for Thin {
    fn drop(&mut self) {
        let layout = layout(self.bytes().len());
        // SAFETY: allocated by `new` (or moved by a Relocate, which hands
        // back an allocation of the global allocator for the same layout).
        unsafe { alloc::dealloc(self.0.as_ptr(), layout) }
    }
}

impl Clone for Thin {
    fn clone(&self) -> Self {
        Thin::new(self.bytes())
    }
}

impl std::fmt::Debug for Thin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thin_string_holds_its_bytes_and_a_key_reads_the_same() {
        for len in [0, 1, 7, 124, 125, 1000] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let thin = Thin::new(&bytes);
            assert_eq!(thin.bytes(), &bytes[..]);
            assert_eq!(thin.clone().bytes(), &bytes[..]);
            Thin::with_key(&bytes, |key| {
                // SAFETY: the key lives for the call.
                let read = unsafe { Thin::bytes_at(key) };
                assert_eq!(read, &bytes[..]);
            });
            assert_eq!(Thin::heap_of(len) % 8, 0);
            assert!(Thin::heap_of(len) >= len + PREFIX);
        }
        assert_eq!(size_of::<Thin>(), 8);
    }
}
