//! The lock-free stack of frees that could not take the shared inline heap's lock at once
//! (DESIGN.md, "Concurrency").
//!
//! The stack is intrusive: a queued allocation's own first bytes hold its link (the next
//! queued payload and the size it was freed with), so pushing needs no memory. Pushers race
//! with a compare-exchange; the lock holder takes the whole stack with one swap. Nothing is ever
//! popped singly, so the ABA problem of Treiber stacks cannot arise.
//!
//! Ordering: a push publishes its link (and every write the freeing thread made to the
//! allocation) with a Release compare-exchange; the take is an Acquire swap, so the lock
//! holder reads every link it walks, and reuses the memory, after those writes.

use core::ptr::{self, null_mut, NonNull};

use crate::sync::{const_unless_loom, AtomicPtr, Ordering, UnsafeCell, PUBLISH, TAKE};

/// What a queued allocation carries in its first bytes.
#[derive(Clone, Copy)]
struct Link {
    /// The payload queued before this one, or null.
    next: *mut u8,
    /// The size the allocation was freed with (checked again when it is really freed).
    size: usize,
}

type LinkCell = UnsafeCell<Link>;

/// The bytes a payload needs to be queued.
pub(crate) const LINK_BYTES: usize = size_of::<LinkCell>();
/// The alignment a payload needs to be queued.
pub(crate) const LINK_ALIGN: usize = align_of::<LinkCell>();

/// A stack of payloads waiting to be freed.
///
/// Invariant: `head` is null or the payload of an allocation that was given up by its owner
/// and holds an initialised [`LinkCell`] whose `next` continues the stack the same way.
pub(crate) struct RemoteStack {
    head: AtomicPtr<u8>,
}

impl RemoteStack {
    const_unless_loom! {
        pub(crate) fn new() -> Self {
            RemoteStack {
                head: AtomicPtr::new(null_mut()),
            }
        }
    }

    /// Queues the allocation at `payload`, freed with `size`.
    ///
    /// # Safety
    /// `payload` must be a live allocation that the caller gives up for good (as if freeing
    /// it), at least [`LINK_BYTES`] long and aligned to [`LINK_ALIGN`], and it must not be
    /// queued already.
    pub(crate) unsafe fn push(&self, payload: NonNull<u8>, size: usize) {
        let cell = payload.as_ptr().cast::<LinkCell>();
        let mut head = self.head.load(Ordering::Relaxed);
        // SAFETY: the caller gives the memory up, and it is big and aligned enough for a cell;
        // no one else reads it until the compare-exchange below publishes it.
        unsafe { ptr::write(cell, LinkCell::new(Link { next: head, size })) };
        loop {
            match self.head.compare_exchange_weak(
                head,
                payload.as_ptr(),
                PUBLISH,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => {
                    head = now;
                    // SAFETY: still unpublished, so this thread is the cell's only user.
                    unsafe { (*cell).with_mut(|l| (*l).next = now) };
                }
            }
        }
    }

    /// Whether nothing is queued (a hint: a push may land right after).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// Takes everything queued so far, newest first.
    ///
    /// # Safety
    /// The caller must free every payload the iterator yields (each is a live allocation that
    /// its owner gave up); an iterator dropped early leaks the rest.
    pub(crate) unsafe fn take_all(&self) -> Taken {
        if self.is_empty() {
            return Taken { next: null_mut() };
        }
        Taken {
            next: self.head.swap(null_mut(), TAKE),
        }
    }
}

/// The payloads taken from a [`RemoteStack`], with their sizes.
///
/// Invariant: `next` is null or a payload holding an initialised [`LinkCell`] published by a
/// push that happens-before the take that made this iterator.
pub(crate) struct Taken {
    next: *mut u8,
}

impl Iterator for Taken {
    type Item = (NonNull<u8>, usize);

    fn next(&mut self) -> Option<Self::Item> {
        let payload = NonNull::new(self.next)?;
        let cell = payload.as_ptr().cast::<LinkCell>();
        // SAFETY: the invariant: the cell is initialised and its writes happen-before this
        // read. Reading it through `with` lets loom check exactly that; `drop_in_place` ends
        // the cell's life before its memory is freed.
        let link = unsafe {
            let link = (*cell).with(|l| *l);
            ptr::drop_in_place(cell);
            link
        };
        self.next = link.next;
        Some((payload, link.size))
    }
}
