//! LinkedBlockses of cached blocks handed from one thread's cache to another's while the pool's
//! lock is taken (tcmalloc's transfer cache, reached only by try-locks, so it never waits).
//!
//! **Why.** A cache that runs empty or full takes the pool's lock for one batch. With more
//! threads than cores, the holder of that lock is often descheduled while the others wait for
//! it, and the threads then spend more time waiting than allocating (figures: docs/measurements.md,
//! "classes to 8 KiB, larger bounds, the transfer"). Here, a spill that finds the lock taken
//! leaves its batch in the transfer instead of waiting, and a refill takes a batch from the
//! transfer before it waits for the lock, so a batch can pass from a thread that frees what
//! others allocated to one that allocates, without the heap and without waiting. A spill that
//! finds the lock free gives its batch to the heap as before, so a program whose threads never
//! meet at the lock (one thread, say) never uses the transfer, and its heap is what it was
//! without it.
//!
//! **What it holds.** At most [`DEPTH`] batches per class, each a list of blocks linked through
//! their first words and carrying the caches' key in their second, exactly as they were in the
//! cache they came from: they stay in use for the heap and cached for its figures, and a
//! second free of one is refused by the key as in a cache.
//!
//! **Its lock.** One spin lock for all classes, only ever tried: a push or pop that finds it
//! taken, or finds no room or no batch, goes to the pool's lock instead. Its critical sections
//! copy a batch's two words, so nothing waits on it and a thread descheduled inside one delays
//! nobody. A `fork` child whose parent had another thread inside one finds it taken forever,
//! and then uses the pool alone (the batches left in it stay counted as cached, as the caches
//! of the parent's other threads do).

use crate::share::cache::class::{Class, CLASSES};
use crate::share::cache::linked_blocks::LinkedBlocks;
use crate::share::lock::{Locked, SpinLock};
use crate::sync::{const_unless_loom, AtomicUsize, Ordering};

/// LinkedBlockses one class holds at most.
pub const DEPTH: usize = 4;

/// What the lock guards: per class, its batches (the first `lens[c]` are `Some`).
struct Held {
    batches: [[Option<LinkedBlocks>; DEPTH]; CLASSES],
    lens: [u8; CLASSES],
}

// SAFETY: the blocks of the batches are owned by the transfer (no thread holds them), so the
// lists may be used from whichever thread holds the lock.
unsafe impl Send for Held {}

/// The batches a pool's caches hand to one another (see the module docs).
///
/// Invariant: every batch held is as [`LinkedBlocks`] says, of blocks of the pool that owns this
/// transfer, of its class or larger chunks, owned by no thread; `blocks` and `bytes` count
/// them (by their classes' sizes), changed only by the lock's holder.
pub(crate) struct Transfer {
    held: Locked<SpinLock, Held>,
    blocks: AtomicUsize,
    bytes: AtomicUsize,
}

impl Transfer {
    const_unless_loom! {
        /// An empty transfer.
        pub(crate) fn new() -> Self {
            Transfer {
                held: Locked::new(Held {
                    batches: [[None; DEPTH]; CLASSES],
                    lens: [0; CLASSES],
                }),
                blocks: AtomicUsize::new(0),
                bytes: AtomicUsize::new(0),
            }
        }
    }

    /// Takes `batch` of class `c`, unless the lock is taken or the class holds [`DEPTH`]
    /// batches already: then it is handed back.
    ///
    /// # Safety
    /// `batch` is as [`LinkedBlocks`] says, of blocks of this transfer's pool of class `c` or
    /// larger chunks, owned by the caller, which gives them up if it is taken.
    pub(crate) unsafe fn push(&self, c: Class, batch: LinkedBlocks) -> Result<(), LinkedBlocks> {
        let Some(mut h) = self.held.try_lock() else {
            return Err(batch);
        };
        let i = c.index();
        let n = usize::from(h.lens[i]);
        if n >= DEPTH {
            return Err(batch);
        }
        h.batches[i][n] = Some(batch);
        h.lens[i] += 1;
        self.count(c, &batch, true);
        Ok(())
    }

    /// A batch of class `c`, if the transfer holds one and its lock is free.
    pub(crate) fn pop(&self, c: Class) -> Option<LinkedBlocks> {
        // A hint only (a stale zero costs one trip to the pool's lock): most refills of a
        // program whose threads do not meet at the lock find nothing, without touching the lock.
        if self.blocks.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut h = self.held.try_lock()?;
        let i = c.index();
        let n = usize::from(h.lens[i]);
        let batch = h.batches[i][n.checked_sub(1)?].take()?;
        h.lens[i] -= 1;
        self.count(c, &batch, false);
        Some(batch)
    }

    /// Takes every batch, class by class, for `each` (a trim); `false` (nothing taken) if the
    /// lock is taken.
    pub(crate) fn take_all(&self, mut each: impl FnMut(Class, LinkedBlocks)) -> bool {
        let Some(mut h) = self.held.try_lock() else {
            return false;
        };
        for i in 0..CLASSES {
            let c = Class::from_index(i);
            while h.lens[i] > 0 {
                h.lens[i] -= 1;
                let n = usize::from(h.lens[i]);
                if let Some(batch) = h.batches[i][n].take() {
                    self.count(c, &batch, false);
                    each(c, batch);
                }
            }
        }
        true
    }

    /// Blocks held now.
    pub(crate) fn blocks(&self) -> usize {
        self.blocks.load(Ordering::Relaxed)
    }

    /// Bytes of the chunks held now (by their classes' sizes).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Adds `batch` of class `c` to the figures, or takes it away (the lock's holder only).
    fn count(&self, c: Class, batch: &LinkedBlocks, add: bool) {
        let blocks = batch.len as usize;
        let bytes = blocks * c.chunk_bytes();
        if add {
            self.blocks.fetch_add(blocks, Ordering::Relaxed);
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.blocks.fetch_sub(blocks, Ordering::Relaxed);
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}
