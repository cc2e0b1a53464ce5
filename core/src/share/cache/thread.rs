//! [`ThreadCache`]: one thread's lists of cached blocks, one per size class, their bounds, and
//! what it moves to and from its pool (see the cache's module docs).

use core::ptr::NonNull;

use crate::error::CheckError;
use crate::inline::heap::InlineHeap;
use crate::pool::hooks::Hooks;
use crate::pool::source::RegionSource;
use crate::pool::Pool;
use crate::share::cache::class::{Class, CLASSES, SLOTS};
use crate::share::cache::link::{
    decode, encode, ignore_damage, link_fault, link_mask, link_sound, OnDamage, BAD_LINK_BITS,
    LINK_OVERWRITTEN,
};
use crate::share::cache::linked_blocks::LinkedBlocks;

/// Whether caches are used at all: not in the `checked` build, where every free must be proven
/// under the lock.
pub const ENABLED: bool = !cfg!(feature = "checked");

/// `ENABLED`, for the crates that put caches in front of pools: whether this build of the
/// core uses them (`false` with the `checked` feature).
#[inline]
pub const fn tcache_enabled() -> bool {
    ENABLED
}

/// The most bytes (of chunks) one cache holds.
pub const TOTAL_BYTES: usize = 512 << 10;

/// One class's list: its first block and how many there are.
#[derive(Clone, Copy, Debug)]
struct Bin {
    head: Option<NonNull<u8>>,
    count: u32,
}

/// A thread's cache of small blocks (see the module docs). It belongs to one pool and is used
/// by one thread at a time; its methods need `&mut self`, so a cache is never shared.
///
/// Invariant: every block on `bins[c]` is a live block (in use for the heap) of the pool the
/// cache belongs to, of class `c` or a larger chunk, owned by no one else, with the next block
/// (or null) encoded with `mask` (`encode`) in its first word and `key` in its second, unless
/// the program wrote over them after freeing it (what `link_fault` finds); `count`, `blocks`
/// and `bytes` count them. Every cache of a pool has the same `key` (the transfer's batches and
/// the double-free check cross caches).
#[derive(Debug)]
pub struct ThreadCache {
    bins: [Bin; SLOTS],
    key: usize,
    /// [`link_mask`] of `key`.
    mask: usize,
    on_damage: OnDamage,
    blocks: usize,
    bytes: usize,
    /// `blocks` and `bytes` as the pool last counted them.
    synced: (usize, usize),
    hits: u64,
    misses: u64,
    spills: u64,
    /// The pool's bypass threshold as of the last exchange (0 before the first): a block
    /// above it has a region of its own, which a cache must not keep.
    bypass_above: usize,
}

// SAFETY: the blocks a cache holds are owned by it alone (type invariant), so a cache may move
// to another thread (the pool's lock is the only other party, and only in its methods).
unsafe impl Send for ThreadCache {}

impl ThreadCache {
    /// An empty cache whose cached blocks carry `key` (not 0: a random secret of the process,
    /// so that the program's own data is never taken for it, the same for every cache of a
    /// pool), which also masks their links (see the module docs). A damaged link or key drops
    /// its class's list and nothing else; [`ThreadCache::on_damage`] sets what else happens.
    pub const fn new(key: usize) -> Self {
        let key = if key == 0 {
            0x9e37_79b9_7f4a_7c15_u64 as usize
        } else {
            key
        };
        ThreadCache {
            bins: [Bin {
                head: None,
                count: 0,
            }; SLOTS],
            key,
            mask: link_mask(key),
            on_damage: ignore_damage,
            blocks: 0,
            bytes: 0,
            synced: (0, 0),
            hits: 0,
            misses: 0,
            spills: 0,
            bypass_above: 0,
        }
    }

    /// The cache, with `f` called on a damaged link or key (see [`OnDamage`]).
    pub const fn on_damage(mut self, f: OnDamage) -> Self {
        self.on_damage = f;
        self
    }

    /// The pool's bypass threshold as the cache last learnt it (0 before it has).
    #[inline]
    pub(crate) fn bypass_above(&self) -> usize {
        self.bypass_above
    }

    /// The most blocks class `c` holds.
    #[inline]
    pub fn limit(c: Class) -> u32 {
        c.limit()
    }

    /// How many blocks move in one batch for class `c`: half its limit.
    #[inline]
    pub fn batch(c: Class) -> u32 {
        Self::limit(c) / 2
    }

    /// Blocks held now.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Bytes of the chunks held now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Blocks of class `c` held now.
    pub fn count(&self, c: Class) -> u32 {
        self.bins[c.index()].count
    }

    /// Takes a block of class `c`, if the cache holds one; counted as a hit.
    ///
    /// # Time Complexity
    /// `O(1)`, no atomic operation.
    #[inline]
    pub fn take(&mut self, c: Class) -> Option<NonNull<u8>> {
        let p = self.pop(c)?;
        self.hits += 1;
        Some(p)
    }

    /// Takes the first block of class `c`, its key cleared (see the module docs); `None` when
    /// the class is empty, or when its first block's link is damaged (then reported and the
    /// list dropped, never followed).
    ///
    /// The fast path checks only what following the link needs (glibc's `tcache_get` checks
    /// its alignment alone): the decoded link aligned and below 2^57; the list ends where its
    /// count says whatever the last link holds (so nothing past the end is ever reached). The
    /// key and the list's length are checked where a walk follows several links (a batch, a
    /// flush). Each check here costs instructions on every `malloc` (docs/measurements.md,
    /// "Safe linking: the hot path's cost").
    #[inline]
    fn pop(&mut self, c: Class) -> Option<NonNull<u8>> {
        let mask = self.mask;
        let bin = &mut self.bins[c.index()];
        let p = bin.head?;
        // SAFETY: `p` is on the list (type invariant): a live block of at least 24 bytes that
        // the cache owns, its link in word 0, the key in word 1, both 8-aligned.
        let next = unsafe { decode(p, mask) };
        if next.addr() & BAD_LINK_BITS != 0 {
            self.damaged(c, p, LINK_OVERWRITTEN);
            return None;
        }
        bin.count -= 1;
        bin.head = if bin.count == 0 {
            None
        } else {
            NonNull::new(next)
        };
        // SAFETY: as above.
        unsafe { p.cast::<usize>().add(1).write(0) };
        self.blocks -= 1;
        self.bytes -= c.chunk_bytes();
        Some(p)
    }

    /// Drops class `c`'s list, whose block `at` has a damaged link or key (`what`), and calls
    /// the damage handler: the list's blocks stay in use for the heap, leaked.
    #[cold]
    #[inline(never)]
    fn damaged(&mut self, c: Class, at: NonNull<u8>, what: &'static str) {
        let bin = &mut self.bins[c.index()];
        let n = bin.count as usize;
        *bin = Bin {
            head: None,
            count: 0,
        };
        self.blocks -= n;
        self.bytes -= n * c.chunk_bytes();
        (self.on_damage)(CheckError::new(what, at.as_ptr() as usize));
    }

    /// Whether `ptr` carries the key of a cached block.
    ///
    /// # Safety
    /// `ptr` is a block of the pool of at least 16 bytes that the caller may read.
    #[inline]
    pub unsafe fn carries_key(&self, ptr: NonNull<u8>) -> bool {
        // SAFETY: the caller's promise.
        unsafe { ptr.cast::<usize>().add(1).read() == self.key }
    }

    /// Puts the block `ptr` into class `c`: `Ok(true)` when it is cached, `Ok(false)` (nothing
    /// written) when the class or the cache is full, `Err(DoubleFree)` (nothing written) when
    /// the block carries the key, so sits in a cache already.
    ///
    /// # Time Complexity
    /// `O(1)`, no atomic operation.
    ///
    /// # Safety
    /// `ptr` is a block of the pool this cache belongs to, of class `c` or a larger chunk,
    /// that the caller gives up (it is not used afterwards unless handed out again), unless it
    /// is a double free of a block in a cache, which is refused.
    #[inline]
    pub unsafe fn put(&mut self, c: Class, ptr: NonNull<u8>) -> Result<bool, crate::error::Error> {
        // SAFETY: the caller's promise: a block of at least 24 bytes.
        if unsafe { self.carries_key(ptr) } {
            return Err(crate::error::Error::DoubleFree);
        }
        let bin = &self.bins[c.index()];
        if bin.count >= Self::limit(c) || self.bytes + c.chunk_bytes() > TOTAL_BYTES {
            return Ok(false);
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.push(c, ptr) };
        Ok(true)
    }

    /// Pushes `ptr` onto class `c` without checking the bounds (a refill, which fetches no
    /// more than the bounds leave room for).
    ///
    /// # Safety
    /// As for [`ThreadCache::put`].
    #[inline]
    pub(crate) unsafe fn push(&mut self, c: Class, ptr: NonNull<u8>) {
        let (key, mask) = (self.key, self.mask);
        let bin = &mut self.bins[c.index()];
        // SAFETY: the caller gives the block up; it has at least 24 bytes, 16-aligned.
        unsafe {
            ptr.cast::<*mut u8>().write(encode(ptr, bin.head, mask));
            ptr.cast::<usize>().add(1).write(key);
        }
        bin.head = Some(ptr);
        bin.count += 1;
        self.blocks += 1;
        self.bytes += c.chunk_bytes();
    }

    /// How many blocks a refill of class `c` may add: a batch, within both bounds.
    pub(crate) fn room(&self, c: Class) -> u32 {
        let by_class = Self::limit(c)
            .saturating_sub(self.count(c))
            .min(Self::batch(c));
        let by_bytes = (TOTAL_BYTES.saturating_sub(self.bytes) / c.chunk_bytes()) as u32;
        by_class.min(by_bytes)
    }

    /// Takes up to `n` blocks of class `c` for the pool (a spill or a flush), keys cleared,
    /// each link and key checked in full (a damaged one is reported, and the list dropped).
    pub(crate) fn drain(&mut self, c: Class, n: u32, mut each: impl FnMut(NonNull<u8>)) {
        for _ in 0..n {
            match self.pop_checked(c) {
                Some(p) => each(p),
                None => break,
            }
        }
    }

    /// [`ThreadCache::pop`] with every check: the key, and the link null exactly at the end of
    /// the list, besides its address.
    #[inline]
    fn pop_checked(&mut self, c: Class) -> Option<NonNull<u8>> {
        let (key, mask) = (self.key, self.mask);
        let bin = &mut self.bins[c.index()];
        let p = bin.head?;
        let last = bin.count == 1;
        // SAFETY: `p` is on the list (type invariant): a live block of at least 24 bytes that
        // the cache owns, its link in word 0, the key in word 1, both 8-aligned.
        let (next, k) = unsafe { (decode(p, mask), p.cast::<usize>().add(1).read()) };
        if !link_sound(next, last, k, key) {
            self.damaged(c, p, link_fault(next, last, k, key));
            return None;
        }
        bin.count -= 1;
        bin.head = NonNull::new(next);
        // SAFETY: as above.
        unsafe { p.cast::<usize>().add(1).write(0) };
        self.blocks -= 1;
        self.bytes -= c.chunk_bytes();
        Some(p)
    }

    /// Takes up to `n` blocks of class `c` as a batch for another cache (through the pool's
    /// transfer), keys kept: they stay cached. `None` when the class is empty, or when a link
    /// or key on the way is damaged (reported, the list dropped).
    pub(crate) fn take_batch(&mut self, c: Class, n: u32) -> Option<LinkedBlocks> {
        let (key, mask) = (self.key, self.mask);
        let bin = &self.bins[c.index()];
        let head = bin.head?;
        let count = bin.count;
        let len = n.min(count).max(1);
        let mut last = head;
        let mut rest = core::ptr::null_mut();
        for i in 1..=len {
            // SAFETY: `last` is on the list (type invariant), its `i`th block of `count`.
            let (next, k) = unsafe { (decode(last, mask), last.cast::<usize>().add(1).read()) };
            if !link_sound(next, i == count, k, key) {
                self.damaged(c, last, link_fault(next, i == count, k, key));
                return None;
            }
            rest = next;
            match NonNull::new(next) {
                Some(n) if i < len => last = n,
                _ => break,
            }
        }
        // SAFETY: as above; the rest of the list becomes the bin's, and the batch ends here.
        unsafe { last.cast::<*mut u8>().write(encode(last, None, mask)) };
        let bin = &mut self.bins[c.index()];
        bin.head = NonNull::new(rest);
        bin.count -= len;
        self.blocks -= len as usize;
        self.bytes -= len as usize * c.chunk_bytes();
        Some(LinkedBlocks {
            head,
            len,
            key,
            on_damage: self.on_damage,
        })
    }

    /// Gives back a batch [`ThreadCache::take_batch`] took from class `c` (the transfer had no
    /// room for it).
    ///
    /// # Safety
    /// `batch` is the one `take_batch(c, _)` returned, untouched since.
    pub(crate) unsafe fn untake_batch(&mut self, c: Class, batch: LinkedBlocks) {
        // SAFETY: forwarded caller contract.
        unsafe { self.link(c, batch.head, batch.len) };
    }

    /// Puts the `n` linked blocks from `head` in front of class `c`'s list. A damaged link or
    /// key among them is reported and the `n` blocks are dropped (leaked), never followed.
    ///
    /// # Safety
    /// `head` starts `n ≥ 1` blocks linked as a [`LinkedBlocks`]'s (encoded with this cache's
    /// mask), with the caches' key in their second words, of this cache's pool, of class `c` or
    /// larger chunks, given up by the caller, and the class has room for them.
    unsafe fn link(&mut self, c: Class, head: NonNull<u8>, n: u32) {
        let (key, mask) = (self.key, self.mask);
        let mut tail = head;
        for i in 1..=n {
            // SAFETY: the caller's promise: `n` linked blocks, `tail` the `i`th.
            let (next, k) = unsafe { (decode(tail, mask), tail.cast::<usize>().add(1).read()) };
            if !link_sound(next, i == n, k, key) {
                let what = link_fault(next, i == n, k, key);
                (self.on_damage)(CheckError::new(what, tail.as_ptr() as usize));
                return;
            }
            match NonNull::new(next) {
                Some(next) => tail = next,
                None => break,
            }
        }
        let bin = &mut self.bins[c.index()];
        // SAFETY: `tail` is the last of them; the bin's list follows it.
        unsafe { tail.cast::<*mut u8>().write(encode(tail, bin.head, mask)) };
        bin.head = Some(head);
        bin.count += n;
        self.blocks += n as usize;
        self.bytes += n as usize * c.chunk_bytes();
    }

    /// Whether a batch of class `c` (at most [`ThreadCache::batch`] blocks) fits.
    pub(crate) fn fits_batch(&self, c: Class) -> bool {
        self.room(c) >= Self::batch(c)
    }

    /// Takes `batch` into class `c`, then one block of it for the caller (a refill from the
    /// transfer, counted as a miss); `None` when a link or key of the batch is damaged
    /// (reported; the batch's blocks from there on are dropped, never followed).
    ///
    /// # Safety
    /// `batch` is as [`LinkedBlocks`] says, of blocks of this cache's pool of class `c` or larger
    /// chunks, given up by the caller; at most [`ThreadCache::batch`] of them, and the cache
    /// [fits](ThreadCache::fits_batch) it.
    pub(crate) unsafe fn refill_from(
        &mut self,
        c: Class,
        batch: LinkedBlocks,
    ) -> Option<NonNull<u8>> {
        let first = batch.head;
        // SAFETY: the caller's promise: `first` is a block of the batch, given up; its link
        // and key are read and checked before it is handed out with its key cleared.
        let (rest, k) = unsafe {
            (
                decode(first, self.mask),
                first.cast::<usize>().add(1).read(),
            )
        };
        if !link_sound(rest, batch.len == 1, k, self.key) {
            let what = link_fault(rest, batch.len == 1, k, self.key);
            (self.on_damage)(CheckError::new(what, first.as_ptr() as usize));
            return None;
        }
        // SAFETY: as above.
        unsafe { first.cast::<usize>().add(1).write(0) };
        if let (Some(head), n @ 1..) = (NonNull::new(rest), batch.len.saturating_sub(1)) {
            // SAFETY: the rest of the batch, given up by the caller, which fits it.
            unsafe { self.link(c, head, n) };
        }
        self.misses += 1;
        Some(first)
    }

    /// Takes every block for the pool (see [`ThreadCache::drain`]), class by class.
    pub(crate) fn drain_all(&mut self, mut each: impl FnMut(Class, NonNull<u8>)) {
        for i in 0..CLASSES {
            let c = Class::from_index(i);
            self.drain(c, u32::MAX, |p| each(c, p));
        }
    }

    /// Counts a miss.
    pub(crate) fn missed(&mut self) {
        self.misses += 1;
    }

    /// Counts a spill.
    pub(crate) fn spilled(&mut self) {
        self.spills += 1;
    }

    /// An exchange with the pool the cache belongs to, under its lock: what changed since the
    /// last exchange joins the pool's figures, and the cache learns the pool's bypass
    /// threshold.
    pub(crate) fn exchange_with<S, K>(&mut self, pool: &mut Pool<InlineHeap, S, K>)
    where
        S: RegionSource<Base = NonNull<u8>>,
        K: Hooks,
    {
        self.bypass_above = pool.bypass_above();
        let s = pool.cache_stats_mut();
        s.blocks = s
            .blocks
            .wrapping_add(self.blocks)
            .wrapping_sub(self.synced.0);
        s.bytes = s.bytes.wrapping_add(self.bytes).wrapping_sub(self.synced.1);
        self.synced = (self.blocks, self.bytes);
        s.hits += core::mem::take(&mut self.hits);
        s.misses += core::mem::take(&mut self.misses);
        s.spills += core::mem::take(&mut self.spills);
    }
}
