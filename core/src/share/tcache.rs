//! A per-thread cache of small blocks in front of a shared inline pool (glibc's tcache over
//! dlmalloc): one thread frees small blocks into it and allocates them back without the
//! pool's lock or any atomic operation; a cache that is full or empty moves a batch under one
//! lock acquisition ([`crate::SharedPool::alloc_with_cache`]).
//!
//! **What it holds.** Blocks the heap counts as in use: a cache never changes a chunk's tags,
//! so the heap below stays exactly as it is (best fit, top and victim, immediate coalescing)
//! and only ever sees the batches. A cached block is on a singly linked list of its size class,
//! threaded through its payload: word 0 the next block, word 1 the cache [key](ThreadCache::new).
//!
//! **Safe linking.** A cached block is memory the program has freed, so a write after free or
//! past the end of its neighbour lands on its link. Followed bare, such a link sends the cache
//! to any address (a fault at the thread's exit, or glibc's "tcache poisoning": the next
//! `malloc` returning memory of the attacker's choice). So, as glibc 2.32's safe-linking does
//! (`PROTECT_PTR`: the link XORed with its own address shifted right by 12), a link is stored
//! XORed with its own address shifted right by 12 and with a mask derived from the process's
//! secret key, and checked before it is followed. A take (every `malloc` served by the cache)
//! checks what following needs, as glibc's `tcache_get` checks alignment: the decoded link
//! granule-aligned and below 2^57 (no user address is higher), and the list ends where its
//! count says, whatever its last link holds. A walk that leaves the cache (a spill, a flush, a
//! batch between caches) checks everything: the link null exactly at the end of the list, and
//! every block still carrying the key. A link or key that fails is [reported](OnDamage) with
//! its block's address, and the class's list is dropped, never followed: its blocks stay in use
//! for the heap (leaked), which the malloc library never sees, as it aborts in its report. A
//! take pays a decode and one compare, a put an encode (figures: docs/measurements.md, "Safe
//! linking: the hot path's cost").
//!
//! **Size classes.** One class per inline chunk size from the smallest (32 bytes, 24 usable)
//! up to 64 classes (1040 bytes, 1032 usable), as glibc's 64 tcache bins: every request that
//! rounds to the same chunk shares a class, so a block cached by one request serves any other
//! of its class, and a class is the heap's own rounding (`Geometry::granules_for`), not a
//! second table. Above them, up to 8 KiB chunks, eight classes per doubling (1152, 1280, …,
//! 2048, 2304, …, 8192 bytes), as jemalloc's and mimalloc's caches reach past glibc's: a
//! request takes the class of the next chunk size up and the pool serves it that whole chunk
//! (at most an eighth more than it asked for), and a freed block goes to the largest class its
//! chunk holds, read from its tag (a Rust layout or a `realloc` in place may leave a block
//! between two class sizes). Without them, every request between 1 and 8 KiB took the pool's
//! lock, and with more threads than cores the waits for it cost more than all the rest
//! (figures: docs/tcache.md, "classes to 8 KiB, larger bounds, the transfer"). Larger sizes,
//! and alignments above the granule, go to the pool.
//!
//! **Bounds.** At most [`ThreadCache::limit`] blocks per class (16 KiB worth, at least 8 and at
//! most 64) and [`TOTAL_BYTES`] in all: more blocks per class means fewer trips to the lock,
//! more bytes per thread means more memory kept from other threads and other sizes; glibc keeps
//! 7 per class, up to about 240 KiB in all. A class's count moves like a random walk between
//! its refills and spills, so the trips to the lock fall with the square of its bound; and a
//! total that binds before the classes' own bounds makes a full cache spill on every other
//! free (figures: docs/tcache.md, "classes to 8 KiB, larger bounds, the transfer").
//!
//! **Batches between caches.** A spill that finds the pool's lock taken leaves its batch in the
//! pool's transfer instead of waiting, and a refill looks there first
//! (`crate::share::transfer`).
//!
//! **Double frees.** A block going into a cache gets the cache's key in its second word; a
//! block handed out gets a zero there, and so does a block that leaves a cache for the pool, so
//! a block carrying the key is in a cache. A free that finds the key is refused
//! ([`crate::Error::DoubleFree`]): a second free of a block in this thread's cache (glibc:
//! "double free detected in tcache 2"), and of one in another thread's cache, which glibc's
//! tcache lets through (it scans only its own bin). What is not detected here: a double free
//! of a block that has left every cache (it is the heap's case: its tag says it is free), and
//! a free of a block the program wrote the key into (a 64-bit secret it can only have read
//! from freed memory).
//!
//! With the `checked` feature the cache is off ([`ENABLED`]): every free is proven by the heap
//! under the lock, as before.

use core::ptr::NonNull;

use crate::algo::geometry::W;
use crate::error::CheckError;
use crate::inline::granule::HOST_GEOMETRY;
use crate::pool::CacheStats;
use crate::share::transfer::Batch;

/// How many size classes a cache has: 64 of one chunk size each (to 1040 bytes), then eight
/// per doubling over three doublings (to 8 KiB).
pub const CLASSES: usize = EXACT_CLASSES + STEPS * DOUBLINGS;

/// Room for [`CLASSES`] in the per-class arrays, a power of two: an index masked to it needs no
/// bounds check on the fast path.
const SLOTS: usize = CLASSES.next_power_of_two();

/// The largest request a class serves: [`Class::cacheable`] sizes are 1 to this.
pub const MAX_CACHED_SIZE: usize = Class::bytes_of_index(CLASSES - 1) - W;

/// Classes of one chunk size each, from the smallest chunk up.
pub const EXACT_CLASSES: usize = 64;

/// Classes per doubling above the exact ones.
const STEPS: usize = 8;

/// Doublings the classes above the exact ones cover, from `1 << LOG_BASE` bytes (to 8 KiB).
const DOUBLINGS: usize = 3;

/// log2 of the chunk size the classes above the exact ones start doubling from: 64 granules
/// (1024 bytes with the host's 16-byte granule), just below the largest exact class.
const LOG_BASE: u32 = (64 * HOST_GEOMETRY.granule()).trailing_zeros();

/// log2 of [`STEPS`].
const LOG_STEPS: u32 = STEPS.trailing_zeros();

/// A class's chunk size and bound, looked up rather than computed on every take and put (the
/// bound is a division).
#[derive(Clone, Copy)]
struct Size {
    bytes: u16,
    limit: u8,
}

/// [`Size`] of every class: 16 KiB worth of blocks, at least 8 and at most 64.
static SIZES: [Size; SLOTS] = {
    let mut t = [Size { bytes: 0, limit: 0 }; SLOTS];
    let mut i = 0;
    while i < CLASSES {
        let bytes = Class::bytes_of_index(i);
        let per = 16384 / bytes;
        t[i] = Size {
            bytes: bytes as u16,
            limit: if per < 8 {
                8
            } else if per > 64 {
                64
            } else {
                per as u8
            },
        };
        i += 1;
    }
    t
};

/// log2 of `x`, for `x > 0`.
#[inline]
const fn log2(x: usize) -> u32 {
    usize::BITS - 1 - x.leading_zeros()
}

/// The most bytes (of chunks) one cache holds.
pub const TOTAL_BYTES: usize = 512 << 10;

/// What a cache does with a damaged link or key (see the module docs), after dropping the
/// class's list: the malloc library reports the block's address and aborts, as glibc does on a
/// bad tcache link ("malloc(): unaligned tcache chunk detected"). The default does nothing more.
pub type OnDamage = fn(CheckError);

/// The default [`OnDamage`]: the list is dropped, nothing else.
fn ignore_damage(_: CheckError) {}

/// The address bits a decoded link must have clear: the granule's (a payload is granule-aligned)
/// and those from 2^57 up (x86-64's five-level paging and AArch64's 52-bit addresses stay below).
const BAD_LINK_BITS: usize = (HOST_GEOMETRY.granule() - 1) | ((!((1u64 << 57) - 1)) as usize);

/// What a link is XORed with besides its own address: derived from the caches' `key`, so that a
/// program that knows where a block lies still cannot forge its link without the secret.
#[inline]
pub(crate) const fn link_mask(key: usize) -> usize {
    key.rotate_left(29)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize)
}

/// A cached block's link as stored in its first word: `next` (or null) XORed with `at`'s
/// address shifted right by 12 and with `mask` (see the module docs). The stored pointer keeps
/// `next`'s provenance.
#[inline]
fn encode(at: NonNull<u8>, next: Option<NonNull<u8>>, mask: usize) -> *mut u8 {
    let salt = (at.as_ptr() as usize >> 12) ^ mask;
    match next {
        Some(n) => n.as_ptr().map_addr(|a| a ^ salt),
        None => core::ptr::without_provenance_mut(salt),
    }
}

/// The link stored in the first word of the cached block `at`, decoded (its address not yet
/// checked).
///
/// # Safety
/// `at` is a cached block (at least 16 bytes, 8-aligned) the caller may read.
#[inline]
pub(crate) unsafe fn decode(at: NonNull<u8>, mask: usize) -> *mut u8 {
    let salt = (at.as_ptr() as usize >> 12) ^ mask;
    // SAFETY: the caller's promise.
    unsafe { at.cast::<*mut u8>().read() }.map_addr(|a| a ^ salt)
}

/// What a link that decodes to no block's address says.
const LINK_OVERWRITTEN: &str = "a cached block's link was overwritten (a write after free?)";

/// Whether the link of a cached block, decoded as `next`, can be followed, when `last` says
/// whether the block ends its list and `key` is its second word.
#[inline(always)]
pub(crate) fn link_sound(next: *mut u8, last: bool, key: usize, expected: usize) -> bool {
    key == expected && next.addr() & BAD_LINK_BITS == 0 && next.is_null() == last
}

/// What is wrong with a link [`link_sound`] refused, in words.
#[cold]
pub(crate) fn link_fault(next: *mut u8, last: bool, key: usize, expected: usize) -> &'static str {
    if key != expected {
        "a cached block's key was overwritten (a write after free?)"
    } else if next.addr() & BAD_LINK_BITS != 0 {
        LINK_OVERWRITTEN
    } else if next.is_null() != last {
        "a cached block's link disagrees with its list's length (a write after free?)"
    } else {
        "a cached block's link is sound"
    }
}

/// Whether caches are used at all: not in the `checked` build, where every free must be proven
/// under the lock.
pub const ENABLED: bool = !cfg!(feature = "checked");

/// `ENABLED`, for the crates that put caches in front of pools: whether this build of the
/// core uses them (`false` with the `checked` feature).
#[inline]
pub const fn tcache_enabled() -> bool {
    ENABLED
}

/// A size class: the chunks of `MIN + class` granules (host granule), always below
/// [`CLASSES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Class(u8);

impl Class {
    /// The class of a request of `size` bytes aligned to at most the granule, if it has one:
    /// the smallest whose chunks hold it.
    #[inline]
    pub fn of(size: usize, align: usize) -> Option<Class> {
        if align > HOST_GEOMETRY.granule() {
            return None;
        }
        let g = HOST_GEOMETRY.granules_for(size).ok()?;
        let c = g - HOST_GEOMETRY.min_chunk();
        if c < EXACT_CLASSES {
            return Some(Class(c as u8));
        }
        // Above the exact classes: the class of the next size up. `b` is at least
        // `1 << LOG_BASE` (the exact classes reach past it), and `b >> shift` is 8..=15 (its top
        // four bits), so its class's size, `(b >> shift) + 1 << shift`, is the first at least
        // `b + 1` bytes.
        let b = g * HOST_GEOMETRY.granule() - 1;
        let d = log2(b) - LOG_BASE;
        if d as usize >= DOUBLINGS {
            return None;
        }
        let shift = LOG_BASE - LOG_STEPS + d;
        let k = EXACT_CLASSES + d as usize * STEPS + (b >> shift) - STEPS;
        Some(Class(k as u8))
    }

    /// Whether a request of `size` bytes aligned to at most the granule has a class: the same
    /// answer as `Class::of(size, 1).is_some()`, in one compare.
    #[inline]
    pub fn cacheable(size: usize) -> bool {
        size.wrapping_sub(1) < MAX_CACHED_SIZE
    }

    /// The largest class whose chunks a chunk of `bytes` bytes (a block's own, from its tag,
    /// at least the smallest chunk) can stand in for: where a free files it.
    #[inline]
    pub fn holding(bytes: usize) -> Class {
        let g = HOST_GEOMETRY.granules_of(bytes);
        let c = g.saturating_sub(HOST_GEOMETRY.min_chunk());
        if c < EXACT_CLASSES {
            return Class(c as u8);
        }
        // Above the exact classes: `bytes >> shift` is 8..=15, and the class of size
        // `m << shift` is `d * STEPS + m - 9` past the exact ones (`m = 8`: the previous
        // doubling's last, or the last exact class).
        let d = log2(bytes) - LOG_BASE;
        if d as usize >= DOUBLINGS {
            return Class((CLASSES - 1) as u8);
        }
        let shift = LOG_BASE - LOG_STEPS + d;
        let k = EXACT_CLASSES + d as usize * STEPS + (bytes >> shift) - (STEPS + 1);
        Class(k as u8)
    }

    /// The class of index `i`, below [`CLASSES`].
    pub(crate) fn from_index(i: usize) -> Class {
        debug_assert!(i < CLASSES);
        Class(i as u8)
    }

    /// Whether the class is above the exact ones: its chunks may be larger than its size, and
    /// a block's class must be read from its tag.
    #[inline]
    pub fn is_coarse(self) -> bool {
        self.index() >= EXACT_CLASSES
    }

    /// Its index, below [`CLASSES`].
    #[inline]
    pub fn index(self) -> usize {
        usize::from(self.0) & (SLOTS - 1)
    }

    /// The bytes of its chunks (the least, above the exact classes).
    #[inline]
    pub fn chunk_bytes(self) -> usize {
        SIZES[self.index()].bytes as usize
    }

    /// [`Class::chunk_bytes`] of index `i`, computed (for [`SIZES`]).
    const fn bytes_of_index(i: usize) -> usize {
        if i < EXACT_CLASSES {
            return (i + HOST_GEOMETRY.min_chunk()) * HOST_GEOMETRY.granule();
        }
        let k = i - EXACT_CLASSES;
        (STEPS + 1 + k % STEPS) << (LOG_BASE - LOG_STEPS + (k / STEPS) as u32)
    }

    /// The usable bytes of its blocks: the request the pool serves for it.
    #[inline]
    pub fn usable(self) -> usize {
        self.chunk_bytes() - W
    }
}

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
        SIZES[c.index()].limit as u32
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
    pub(crate) fn take_batch(&mut self, c: Class, n: u32) -> Option<Batch> {
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
        Some(Batch {
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
    pub(crate) unsafe fn untake_batch(&mut self, c: Class, batch: Batch) {
        // SAFETY: forwarded caller contract.
        unsafe { self.link(c, batch.head, batch.len) };
    }

    /// Puts the `n` linked blocks from `head` in front of class `c`'s list. A damaged link or
    /// key among them is reported and the `n` blocks are dropped (leaked), never followed.
    ///
    /// # Safety
    /// `head` starts `n ≥ 1` blocks linked as a [`Batch`]'s (encoded with this cache's mask),
    /// with the caches' key in their second words, of this cache's pool, of class `c` or larger
    /// chunks, given up by the caller, and the class has room for them.
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
    /// `batch` is as [`Batch`] says, of blocks of this cache's pool of class `c` or larger
    /// chunks, given up by the caller; at most [`ThreadCache::batch`] of them, and the cache
    /// [fits](ThreadCache::fits_batch) it.
    pub(crate) unsafe fn refill_from(&mut self, c: Class, batch: Batch) -> Option<NonNull<u8>> {
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
            let c = Class(i as u8);
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

    /// Adds what changed since the last exchange to the pool's figures `s`, and learns the
    /// pool's bypass threshold (under the pool's lock).
    pub(crate) fn exchange(&mut self, s: &mut CacheStats, bypass_above: usize) {
        self.bypass_above = bypass_above;
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
