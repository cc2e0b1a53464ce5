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
//! **Size classes.** One class per inline chunk size from the smallest (32 bytes, 24 usable)
//! up to 64 classes (1040 bytes, 1032 usable), as glibc's 64 tcache bins: every request that
//! rounds to the same chunk shares a class, so a block cached by one request serves any other
//! of its class, and a class is the heap's own rounding (`Geometry::granules_for`), not a
//! second table. Larger sizes, and alignments above the granule, go to the pool.
//!
//! **Bounds.** At most [`ThreadCache::limit`] blocks per class (32 for chunks up to 128 bytes,
//! then 4 KiB worth, at least 4) and [`TOTAL_BYTES`] in all: more blocks per class means fewer
//! trips to the lock, more bytes per thread means more memory kept from other threads and
//! other sizes; glibc keeps 7 per class, up to about 240 KiB in all.
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
use crate::inline::granule::HOST_GEOMETRY;
use crate::pool::CacheStats;

/// How many size classes a cache has.
pub const CLASSES: usize = 64;

/// The most bytes (of chunks) one cache holds.
pub const TOTAL_BYTES: usize = 128 << 10;

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
    /// The class of a request of `size` bytes aligned to at most the granule, if it has one.
    #[inline]
    pub fn of(size: usize, align: usize) -> Option<Class> {
        if align > HOST_GEOMETRY.granule() {
            return None;
        }
        let g = HOST_GEOMETRY.granules_for(size).ok()?;
        let c = g - HOST_GEOMETRY.min_chunk();
        if c < CLASSES {
            Some(Class(c as u8))
        } else {
            None
        }
    }

    /// Its index, below [`CLASSES`].
    #[inline]
    pub fn index(self) -> usize {
        usize::from(self.0) & (CLASSES - 1)
    }

    /// The bytes of its chunks.
    #[inline]
    pub fn chunk_bytes(self) -> usize {
        (self.index() + HOST_GEOMETRY.min_chunk()) * HOST_GEOMETRY.granule()
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
/// (or null) in its first word and `key` in its second; `count`, `blocks` and `bytes` count
/// them.
#[derive(Debug)]
pub struct ThreadCache {
    bins: [Bin; CLASSES],
    key: usize,
    blocks: usize,
    bytes: usize,
    /// `blocks` and `bytes` as the pool last counted them.
    synced: (usize, usize),
    hits: u64,
    misses: u64,
    spills: u64,
}

// SAFETY: the blocks a cache holds are owned by it alone (type invariant), so a cache may move
// to another thread (the pool's lock is the only other party, and only in its methods).
unsafe impl Send for ThreadCache {}

impl ThreadCache {
    /// An empty cache whose cached blocks carry `key` (not 0: a random secret of the process,
    /// so that the program's own data is never taken for it).
    pub const fn new(key: usize) -> Self {
        ThreadCache {
            bins: [Bin {
                head: None,
                count: 0,
            }; CLASSES],
            key: if key == 0 {
                0x9e37_79b9_7f4a_7c15_u64 as usize
            } else {
                key
            },
            blocks: 0,
            bytes: 0,
            synced: (0, 0),
            hits: 0,
            misses: 0,
            spills: 0,
        }
    }

    /// The most blocks class `c` holds.
    #[inline]
    pub fn limit(c: Class) -> u32 {
        let bytes = c.chunk_bytes();
        if bytes <= 128 {
            32
        } else {
            ((4096 / bytes) as u32).max(4)
        }
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

    /// Takes the first block of class `c`, its key cleared (see the module docs).
    #[inline]
    fn pop(&mut self, c: Class) -> Option<NonNull<u8>> {
        let bin = &mut self.bins[c.index()];
        let p = bin.head?;
        // SAFETY: `p` is on the list (type invariant): a live block of at least 24 bytes that
        // the cache owns, its next link in word 0, the key in word 1, both 8-aligned.
        unsafe {
            bin.head = p.cast::<Option<NonNull<u8>>>().read();
            p.cast::<usize>().add(1).write(0);
        }
        bin.count -= 1;
        self.blocks -= 1;
        self.bytes -= c.chunk_bytes();
        Some(p)
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
        let key = self.key;
        let bin = &mut self.bins[c.index()];
        // SAFETY: the caller gives the block up; it has at least 24 bytes, 16-aligned.
        unsafe {
            ptr.cast::<Option<NonNull<u8>>>().write(bin.head);
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

    /// Takes up to `n` blocks of class `c` for the pool (a spill or a flush), keys cleared.
    pub(crate) fn drain(&mut self, c: Class, n: u32, mut each: impl FnMut(NonNull<u8>)) {
        for _ in 0..n {
            match self.pop(c) {
                Some(p) => each(p),
                None => break,
            }
        }
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

    /// Adds what changed since the last exchange to the pool's figures.
    pub(crate) fn exchange(&mut self, s: &mut CacheStats) {
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
