//! Resizing an inline pool's block: in place when the heap can, else moved to a block the pool
//! grows for; a bypassed block keeps its region, or grows with it.

use core::ptr::NonNull;

use crate::error::Error;
use crate::inline::heap::InlineHeap;
use crate::pool::heap::PoolHeap;
use crate::pool::hooks::Hooks;
use crate::pool::source::RegionSource;
use crate::pool::{Pool, PoolError};

impl<S: RegionSource<Base = NonNull<u8>>, K: Hooks> Pool<InlineHeap, S, K> {
    /// Resizes an allocation of `old_size` bytes to `new_size` (see
    /// [`InlineHeap::realloc`]): in place when the heap can, else moved to a new block the pool
    /// grows for if it must. A block above the bypass threshold that stays above it keeps its
    /// place when it shrinks to no less than half its usable size, and, when it has a region of
    /// its own, grows with its region where the source can extend it in place (`mremap`
    /// without moving, for mappings), instead of being copied into a new region at every step
    /// (a buffer built up past the threshold a little at a time).
    ///
    /// # Time Complexity
    /// As for [`InlineHeap::realloc`], plus a miss's cost when the pool grows.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    #[inline]
    pub unsafe fn realloc(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, PoolError> {
        if !self.bypasses(old_size.max(new_size)) {
            // SAFETY: forwarded caller contract.
            match unsafe { self.heap_mut().realloc(ptr, old_size, align, new_size) } {
                Ok(p) => return Ok(p),
                Err(e) => {
                    // SAFETY: forwarded caller contract; the refused realloc left `ptr` live.
                    return unsafe { self.realloc_refused(e, ptr, old_size, align, new_size) };
                }
            }
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.realloc_moving(ptr, old_size, align, new_size) }
    }

    /// [`Pool::realloc`] after the heap refused: a heap that could neither resize nor move the
    /// block needs the pool to grow; any other refusal is reported.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    #[cold]
    #[inline(never)]
    unsafe fn realloc_refused(
        &mut self,
        e: Error,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, PoolError> {
        match e {
            // SAFETY: forwarded caller contract.
            Error::OutOfMemory => unsafe { self.realloc_moving(ptr, old_size, align, new_size) },
            e => Err(self.refusal(e, new_size)),
        }
    }

    /// [`Pool::realloc`] when the block must move through the pool.
    ///
    /// # Safety
    /// As for [`InlineHeap::realloc`].
    #[cold]
    #[inline(never)]
    unsafe fn realloc_moving(
        &mut self,
        ptr: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, PoolError> {
        // SAFETY: forwarded caller contract; this checks `ptr` as `free` would, before
        // anything is allocated.
        let usable = unsafe { PoolHeap::usable_size(self.heap(), &ptr) }
            .map_err(|e| self.refusal(e, new_size))?;
        if self.bypasses(old_size) && self.bypasses(new_size) && align <= self.heap().granule() {
            if new_size <= usable && new_size >= usable / 2 {
                return Ok(ptr);
            }
            if new_size > usable {
                if let Ok(whole) = self.grow_bypassed(ptr.addr().get(), usable, new_size) {
                    // SAFETY: `ptr` is live (checked above); its successor is the region's
                    // new free end, which the block now takes whole.
                    if unsafe { self.heap_mut().resize_in_place(ptr, whole) }.is_ok() {
                        return Ok(ptr);
                    }
                }
            }
        }
        let new = self.alloc(new_size, align)?;
        // SAFETY: both blocks are live and distinct; the copy fits both.
        unsafe {
            core::ptr::copy_nonoverlapping(
                ptr.as_ptr(),
                new.as_ptr(),
                old_size.min(new_size).min(usable),
            )
        };
        // SAFETY: forwarded caller contract; the contents have moved.
        unsafe { self.free(ptr, old_size) }.map_err(|e| self.refusal(e, new_size))?;
        Ok(new)
    }
}
