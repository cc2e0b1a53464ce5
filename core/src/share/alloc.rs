//! [`SharedAlloc`]: what every heap or pool shared between threads offers a program, host
//! memory by size through `&self`, and, written once over it, what the standard allocator
//! traits need: [`GlobalAlloc`]'s methods here, `allocator_api2`'s `Allocator` (with the
//! `allocator-api2` / `allocator-api2-04` features) below. Each shared type implements the
//! trait under its own lock and forwards each trait method in one line, so the rules (null
//! for every failure, a dangling pointer for a zero-sized `Allocator` request, a move when a
//! resize changes the alignment) are stated in one place.

#[cfg(doc)]
use core::alloc::GlobalAlloc;
use core::alloc::Layout;
use core::ptr::{null_mut, NonNull};

use crate::error::Error;

/// A heap or pool that many threads share through `&self` (its lock inside), allocating host
/// memory by size: [`GlobalHeap`](crate::GlobalHeap), [`SharedPool`](crate::SharedPool) of an
/// [`InlineHeap`](crate::InlineHeap), and wrappers of them such as the host crate's global
/// allocator. Their [`GlobalAlloc`] (and `allocator_api2` `Allocator`) impls forward to the
/// provided methods, which implementers leave as they are.
///
/// # Safety
///
/// [`SharedAlloc::alloc_block`] returns a block of at least `size` bytes aligned to `align`
/// that overlaps no other live block and stays valid until it is given to
/// [`SharedAlloc::free_block`] or [`SharedAlloc::realloc_block`]; a zero `size` is refused.
/// [`SharedAlloc::realloc_block`], when it succeeds, returns such a block for `new_size`
/// holding the old contents up to the smaller size, and the old block is given up; when it
/// fails the old block is untouched. Blocks may be freed from any thread and through any
/// reference to the same value.
pub unsafe trait SharedAlloc {
    /// Why an allocation or resize was refused.
    type Error;

    /// Allocates `size` bytes aligned to `align`.
    fn alloc_block(&self, size: usize, align: usize) -> Result<NonNull<u8>, Self::Error>;

    /// Frees a block of `size` bytes.
    ///
    /// # Safety
    /// `ptr` came from this value's [`SharedAlloc::alloc_block`] or
    /// [`SharedAlloc::realloc_block`] with `size`, is not freed twice, and its memory is not
    /// used after the call (the implementer's own free may check some of this).
    unsafe fn free_block(&self, ptr: NonNull<u8>, size: usize) -> Result<(), Error>;

    /// Resizes a block of `size` bytes aligned to `align` to `new_size`.
    ///
    /// # Safety
    /// As for [`SharedAlloc::free_block`]; on success the old pointer is given up.
    unsafe fn realloc_block(
        &self,
        ptr: NonNull<u8>,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> Result<NonNull<u8>, Self::Error>;

    /// [`GlobalAlloc::alloc`]: null for a zero size (which `GlobalAlloc` callers must not ask
    /// for) and on any error.
    #[inline]
    fn global_alloc(&self, layout: Layout) -> *mut u8 {
        self.alloc_block(layout.size(), layout.align())
            .map_or(null_mut(), NonNull::as_ptr)
    }

    /// [`GlobalAlloc::dealloc`]: a refused free is counted in the statistics (`dealloc` has
    /// no way to return it); null is ignored.
    ///
    /// # Safety
    /// As for [`GlobalAlloc::dealloc`].
    #[inline]
    unsafe fn global_dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: `GlobalAlloc`'s contract: `ptr` was allocated here with `layout`.
            let _ = unsafe { self.free_block(p, layout.size()) };
        }
    }

    /// [`GlobalAlloc::realloc`]: null on any error (the block is kept) and for a null `ptr`.
    ///
    /// # Safety
    /// As for [`GlobalAlloc::realloc`].
    #[inline]
    unsafe fn global_realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Some(p) = NonNull::new(ptr) else {
            return null_mut();
        };
        // SAFETY: `GlobalAlloc`'s contract, as in `global_dealloc`.
        unsafe { self.realloc_block(p, layout.size(), layout.align(), new_size) }
            .map_or(null_mut(), NonNull::as_ptr)
    }
}

/// Implements [`SharedAlloc`] for a shared heap or pool of this crate whose own methods
/// `$alloc`, `$free` and `$realloc` (by `&self`, under its lock) already have the trait's
/// signatures and contract, with `$err` its error; the rest of the argument is the impl's
/// header.
macro_rules! shared_alloc_via {
    ($alloc:ident, $free:ident, $realloc:ident, $err:ty => $($head:tt)*) => {
        // SAFETY: `$alloc` returns a fresh block of at least `size` bytes aligned to `align`
        // that no other live block overlaps, or an error (the heap's invariants, for a pool over
        // regions its source hands it for its sole use); `$free` and `$realloc` forward the
        // caller's promise that `ptr` came from this value with `size`.
        unsafe $($head)* {
            type Error = $err;

            #[inline]
            fn alloc_block(
                &self,
                size: usize,
                align: usize,
            ) -> Result<::core::ptr::NonNull<u8>, $err> {
                self.$alloc(size, align)
            }

            #[inline]
            unsafe fn free_block(
                &self,
                ptr: ::core::ptr::NonNull<u8>,
                size: usize,
            ) -> Result<(), $crate::Error> {
                // SAFETY: forwarded caller contract.
                unsafe { self.$free(ptr, size) }
            }

            #[inline]
            unsafe fn realloc_block(
                &self,
                ptr: ::core::ptr::NonNull<u8>,
                size: usize,
                align: usize,
                new_size: usize,
            ) -> Result<::core::ptr::NonNull<u8>, $err> {
                // SAFETY: forwarded caller contract.
                unsafe { self.$realloc(ptr, size, align, new_size) }
            }
        }
    };
}

/// Implements [`GlobalAlloc`](core::alloc::GlobalAlloc) for a type that implements
/// [`SharedAlloc`]: each method forwards to the trait's provided `global_*` method, where the
/// rules are. The argument is the impl's header, so an impl is its header alone:
///
/// ```
/// use core::ptr::NonNull;
/// use tagalloc::{Error, GlobalHeap, SharedAlloc};
///
/// /// A program's own allocator over a shared heap (its statistics, say, kept beside it).
/// struct Mine(GlobalHeap);
///
/// // SAFETY: every method forwards to the heap's, which keeps the trait's contract.
/// unsafe impl SharedAlloc for Mine {
///     type Error = Error;
///     fn alloc_block(&self, size: usize, align: usize) -> Result<NonNull<u8>, Error> {
///         self.0.alloc_block(size, align)
///     }
///     unsafe fn free_block(&self, ptr: NonNull<u8>, size: usize) -> Result<(), Error> {
///         // SAFETY: forwarded caller contract.
///         unsafe { self.0.free_block(ptr, size) }
///     }
///     unsafe fn realloc_block(
///         &self,
///         ptr: NonNull<u8>,
///         size: usize,
///         align: usize,
///         new_size: usize,
///     ) -> Result<NonNull<u8>, Error> {
///         // SAFETY: forwarded caller contract.
///         unsafe { self.0.realloc_block(ptr, size, align, new_size) }
///     }
/// }
///
/// tagalloc::global_alloc_via_shared!(impl core::alloc::GlobalAlloc for Mine);
///
/// let mine = Mine(GlobalHeap::new());
/// // A heap given no arena refuses every request; `GlobalAlloc` says so with null.
/// let layout = core::alloc::Layout::from_size_align(64, 8).unwrap();
/// // SAFETY: a non-zero size.
/// assert!(unsafe { core::alloc::GlobalAlloc::alloc(&mine, layout) }.is_null());
/// ```
#[macro_export]
macro_rules! global_alloc_via_shared {
    ($($head:tt)*) => {
        // SAFETY: `SharedAlloc`'s contract, which every method forwards to.
        unsafe $($head)* {
            #[inline]
            unsafe fn alloc(&self, layout: ::core::alloc::Layout) -> *mut u8 {
                $crate::SharedAlloc::global_alloc(self, layout)
            }

            #[inline]
            unsafe fn dealloc(&self, ptr: *mut u8, layout: ::core::alloc::Layout) {
                // SAFETY: forwarded caller contract.
                unsafe { $crate::SharedAlloc::global_dealloc(self, ptr, layout) }
            }

            #[inline]
            unsafe fn realloc(
                &self,
                ptr: *mut u8,
                layout: ::core::alloc::Layout,
                new_size: usize,
            ) -> *mut u8 {
                // SAFETY: forwarded caller contract.
                unsafe { $crate::SharedAlloc::global_realloc(self, ptr, layout, new_size) }
            }
        }
    };
}

/// `allocator_api2::alloc::Allocator` for a [`SharedAlloc`] of this crate, for each supported
/// version of that crate (its trait is a distinct trait in each), written once: the argument
/// is the impl's header (naming `Allocator`), so a shared type's impl is its header alone,
/// given where the type is defined.
#[cfg(any(feature = "allocator-api2", feature = "allocator-api2-04"))]
macro_rules! allocator_via_shared {
    ($($head:tt)*) => {
        #[cfg(feature = "allocator-api2")]
        $crate::share::alloc::allocator_via_shared_in!(allocator_api2 => $($head)*);
        #[cfg(feature = "allocator-api2-04")]
        $crate::share::alloc::allocator_via_shared_in!(allocator_api2_04 => $($head)*);
    };
}
#[cfg(any(feature = "allocator-api2", feature = "allocator-api2-04"))]
pub(crate) use allocator_via_shared;

/// [`allocator_via_shared!`] for one version of `allocator_api2` (`$krate`).
#[cfg(any(feature = "allocator-api2", feature = "allocator-api2-04"))]
macro_rules! allocator_via_shared_in {
    ($krate:ident => $($head:tt)*) => {
        const _: () = {
            use core::ptr::{self, NonNull};
            use $krate::alloc::{AllocError, Allocator, Layout};

            use $crate::share::alloc::SharedAlloc;

            /// The well-aligned dangling pointer `Allocator` hands out for zero-sized requests.
            fn dangling(layout: Layout) -> Result<NonNull<u8>, AllocError> {
                NonNull::new(ptr::without_provenance_mut(layout.align())).ok_or(AllocError)
            }

            /// [`Allocator::allocate`]: zero-sized requests get a dangling aligned pointer that
            /// is never passed to the heap.
            fn allocate<A: SharedAlloc>(
                a: &A,
                layout: Layout,
            ) -> Result<NonNull<[u8]>, AllocError> {
                if layout.size() == 0 {
                    return Ok(NonNull::slice_from_raw_parts(dangling(layout)?, 0));
                }
                let p = a
                    .alloc_block(layout.size(), layout.align())
                    .map_err(|_| AllocError)?;
                Ok(NonNull::slice_from_raw_parts(p, layout.size()))
            }

            /// [`Allocator::deallocate`].
            ///
            /// # Safety
            /// As for [`Allocator::deallocate`].
            unsafe fn deallocate<A: SharedAlloc>(a: &A, ptr: NonNull<u8>, layout: Layout) {
                if layout.size() != 0 {
                    // SAFETY: `Allocator`'s contract: `ptr` is live here with `layout`. A
                    // refused free is counted in the statistics.
                    let _ = unsafe { a.free_block(ptr, layout.size()) };
                }
            }

            /// Moves an allocation to a fresh one for `new` (a resize that also changes the
            /// alignment, or one from or to zero bytes).
            ///
            /// # Safety
            /// `ptr` is a live allocation of `a` with `old`, given up if this succeeds.
            unsafe fn move_to<A: SharedAlloc>(
                a: &A,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, AllocError> {
                let fresh = allocate(a, new)?;
                let keep = old.size().min(new.size());
                // SAFETY: both blocks are live, distinct, and at least `keep` long.
                unsafe { ptr::copy_nonoverlapping(ptr.as_ptr(), fresh.cast().as_ptr(), keep) };
                // SAFETY: the caller's contract; the contents have been moved.
                unsafe { deallocate(a, ptr, old) };
                Ok(fresh)
            }

            /// [`Allocator::grow`] and [`Allocator::shrink`]: in place when the heap can (same
            /// alignment, neither size zero), else moved.
            ///
            /// # Safety
            /// As for [`Allocator::grow`] / [`Allocator::shrink`].
            unsafe fn resize<A: SharedAlloc>(
                a: &A,
                ptr: NonNull<u8>,
                old: Layout,
                new: Layout,
            ) -> Result<NonNull<[u8]>, AllocError> {
                if old.size() == 0 || new.size() == 0 || old.align() != new.align() {
                    // SAFETY: forwarded caller contract.
                    return unsafe { move_to(a, ptr, old, new) };
                }
                // SAFETY: forwarded caller contract: `ptr` is live with `old`.
                let p = unsafe { a.realloc_block(ptr, old.size(), old.align(), new.size()) }
                    .map_err(|_| AllocError)?;
                Ok(NonNull::slice_from_raw_parts(p, new.size()))
            }

            // SAFETY: `SharedAlloc`'s contract makes blocks fresh, non-overlapping, as large and
            // aligned as asked and valid until freed; zero-sized requests never reach the heap;
            // the heap may be moved or shared (it is `Sync`), and blocks are freed through
            // whichever reference to it.
            $($head)* {
                fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
                    allocate(self, layout)
                }

                unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
                    // SAFETY: forwarded caller contract.
                    unsafe { deallocate(self, ptr, layout) }
                }

                unsafe fn grow(
                    &self,
                    ptr: NonNull<u8>,
                    old: Layout,
                    new: Layout,
                ) -> Result<NonNull<[u8]>, AllocError> {
                    // SAFETY: forwarded caller contract.
                    unsafe { resize(self, ptr, old, new) }
                }

                unsafe fn shrink(
                    &self,
                    ptr: NonNull<u8>,
                    old: Layout,
                    new: Layout,
                ) -> Result<NonNull<[u8]>, AllocError> {
                    // SAFETY: forwarded caller contract.
                    unsafe { resize(self, ptr, old, new) }
                }
            }
        };
    };
}
#[cfg(any(feature = "allocator-api2", feature = "allocator-api2-04"))]
pub(crate) use allocator_via_shared_in;
