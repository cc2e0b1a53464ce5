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
//! (figures: docs/measurements.md, "classes to 8 KiB, larger bounds, the transfer"). Larger sizes,
//! and alignments above the granule, go to the pool.
//!
//! **Bounds.** At most [`ThreadCache::limit`] blocks per class (16 KiB worth, at least 8 and at
//! most 64) and [`TOTAL_BYTES`] in all: more blocks per class means fewer trips to the lock,
//! more bytes per thread means more memory kept from other threads and other sizes; glibc keeps
//! 7 per class, up to about 240 KiB in all. A class's count moves like a random walk between
//! its refills and spills, so the trips to the lock fall with the square of its bound; and a
//! total that binds before the classes' own bounds makes a full cache spill on every other
//! free (figures: docs/measurements.md, "classes to 8 KiB, larger bounds, the transfer").
//!
//! **Batches between caches.** A spill that finds the pool's lock taken leaves its batch in the
//! pool's transfer instead of waiting, and a refill looks there first
//! ([`transfer`]).
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

pub(crate) mod class;
pub(crate) mod link;
pub(crate) mod linked_blocks;
pub(crate) mod proof;
pub(crate) mod thread;
pub(crate) mod transfer;
