//! Each thread's cache of small blocks ([`tagalloc::ThreadCache`]) and its lifecycle: where
//! it lives, how it is set up without allocating, and how it goes back to its pool.
//!
//! **Where.** One cache per thread, in a constant-initialised thread-local without a
//! destructor: nothing is registered or allocated by the first access. In a shared library
//! Rust reaches it through `__tls_get_addr`; with the `initial-exec-tls` feature on x86-64
//! Linux a bound thread finds it through an initial-exec word instead ([`crate::tls_slot`]:
//! set when the cache is bound, cleared when it is given back at exit). A
//! cache serves one pool: the first one the thread allocates or frees through with a cache;
//! calls on any other pool from that thread take the pool's lock as without a cache.
//!
//! **Set-up.** The first call binds the cache: the pool gets an id and a place in the table of
//! pools with caches, and the thread's exit is set to flush it: a pthread key with a
//! destructor, created once per process, whose value the thread sets to its slot. Neither
//! allocates, as long as the key is one of the first 32 (`PTHREAD_KEY_2NDLEVEL_SIZE`: glibc
//! keeps their values in the thread's descriptor), which a key created at the library's first
//! allocation is. So nothing of this library's own lies among the program's blocks: glibc's
//! other registration, `__cxa_thread_atexit_impl` (C++ `thread_local`, Rust's thread-locals
//! with destructors), `calloc`s a list node, which in the malloc library sat just before the
//! program's first block, where an underflow of that block destroyed it and glibc's exit then
//! faulted on it. Past the first 32 keys `pthread_setspecific` allocates, and a nested call
//! from inside the program's own first `pthread_setspecific` of such a key would install a
//! second-level table the outer call then overwrites, losing the value; so a key past them is
//! deleted and `__cxa_thread_atexit_impl` is used instead (its node allocated while the state
//! below sends the thread's calls to the pool's lock, so nothing recurses into a half-built
//! cache).
//!
//! **Thread exit.** The destructor runs for every thread that set the key, joined or not, after
//! the thread-local destructors (so their frees still go through the cache): it marks the cache
//! gone (later calls from the exiting thread, say from other keys' destructors, go to the lock)
//! and flushes it into its pool, if the pool is still in the table. A process's `exit` runs no
//! key destructor: the calling thread's cache stays as it is, counted as cached, and the
//! program's last writes after free are not read (glibc's tcache is not emptied at exit either).
//!
//! **Damaged links.** A cached block's link or key found overwritten (safe linking: see
//! [`tagalloc::ThreadCache`]) is reported on stderr with the block's address, and the process
//! aborts ([`report_damage`]), as glibc does on a bad tcache link. The table, under its own spin
//! lock, is what makes that sound for a [`crate::HostAllocator`] that is dropped while threads
//! still hold caches of it: its drop takes it out of the table, and a cache whose pool is gone
//! forgets its blocks.
//!
//! **Trim and fork.** `trim` flushes the calling thread's cache before trimming (other
//! threads' caches are theirs, used without a lock, so they stay). After `fork` the child's
//! one thread keeps its cache; the caches of the parent's other threads are lost to the child
//! (their blocks stay counted as cached and in use), as glibc's are: they may be in the middle
//! of a change the fork copied. The table's lock is taken around `fork`, so the child can bind
//! caches.

use core::cell::{Cell, UnsafeCell};
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};

use core::ptr::NonNull;

use tagalloc::{
    Class, Error, InlineHeap, PointerProof, PoolError, ProofMemo, RawLock, SharedPool, ThreadCache,
};

use crate::mmap::MmapSource;
use crate::tls_slot;

/// The pools a cache is served by: an inline heap over `mmap` regions, with any hooks, behind
/// any lock.
type Pool<K, L> = SharedPool<InlineHeap, MmapSource, K, L>;

/// Never bound yet.
const UNBOUND: u8 = 0;
/// Being bound: calls from the thread go to the lock.
const SETTING_UP: u8 = 1;
/// Bound to `pool`/`id`, in use.
const ACTIVE: u8 = 2;
/// Given back (thread exit) or never to be bound (no key, no room): calls go to the lock.
const OFF: u8 = 3;

/// Flushes a cache into the pool at this address (monomorphised per lock type).
type Flush = unsafe fn(usize, &mut ThreadCache);

/// A thread's cache and what it is bound to. Only its own thread touches it, except the
/// fork child, which is the same thread's copy.
struct Slot {
    state: Cell<u8>,
    pool: Cell<usize>,
    id: Cell<u32>,
    flush: Cell<Option<Flush>>,
    cache: UnsafeCell<ThreadCache>,
    /// For the pool `pool` only: emptied whenever the cache is bound.
    memo: ProofMemo,
}

thread_local! {
    static SLOT: Slot = const {
        Slot {
            state: Cell::new(UNBOUND),
            pool: Cell::new(0),
            id: Cell::new(0),
            flush: Cell::new(None),
            cache: UnsafeCell::new(ThreadCache::new(0)),
            memo: [const { Cell::new(0) }; 9],
        }
    };
}

/// Runs `f` with the calling thread's cache if it serves `pool` (whose cache id is `id`),
/// binding it on first use; with `None` when the thread must use the lock (the cache is being
/// set up, is gone, or serves another pool).
///
/// `f` must not call back into any cached pool from this thread (the pool's paths never
/// allocate).
#[inline]
pub(crate) fn with_cache<K: PointerProof, L: RawLock, R>(
    pool: &Pool<K, L>,
    id: &AtomicU32,
    f: impl FnOnce(Option<&mut ThreadCache>) -> R,
) -> R {
    with_slot(pool, id, |slot| f(slot.map(|(_, cache)| cache)))
}

/// [`with_cache`], with the thread's [`ProofMemo`] for `pool` beside its cache. `f` is called
/// from one place, so that it is inlined whole.
#[inline(always)]
fn with_slot<K: PointerProof, L: RawLock, R>(
    pool: &Pool<K, L>,
    id: &AtomicU32,
    f: impl FnOnce(Option<(&ProofMemo, &mut ThreadCache)>) -> R,
) -> R {
    let addr = pool as *const Pool<K, L> as usize;
    let mut s = tls_slot::get().cast::<Slot>();
    if s.is_null() {
        s = general_slot(pool, id);
    }
    // SAFETY: `s` is null or this thread's own `SLOT` (the initial-exec word is non-null only
    // from `bind`'s success to `release_at_exit`, and then holds that address; only this thread
    // writes its word), which has no destructor and so lives as long as the thread.
    let slot = unsafe { s.as_ref() }.filter(|s| {
        s.state.get() == ACTIVE && s.pool.get() == addr && s.id.get() == id.load(Relaxed)
    });
    let entered = slot.map(|s| {
        s.state.set(SETTING_UP);
        // SAFETY: only this thread reaches its slot, and the state just set sends any call
        // that re-enters from inside `f` to the lock, so this is the only reference.
        (&s.memo, unsafe { &mut *s.cache.get() })
    });
    let r = f(entered);
    if let Some(s) = slot {
        s.state.set(ACTIVE);
    }
    r
}

/// This thread's `SLOT` through Rust's general thread-local access (before the initial-exec
/// word is set, or without it), bound to `pool` on its first use; null once the thread's
/// thread-locals are gone.
#[cold]
#[inline(never)]
fn general_slot<K: PointerProof, L: RawLock>(pool: &Pool<K, L>, id: &AtomicU32) -> *const Slot {
    SLOT.try_with(|s| {
        if s.state.get() == UNBOUND {
            bind(s, pool, id);
        }
        s as *const Slot
    })
    .unwrap_or(core::ptr::null())
}

/// Binds the thread's cache to `pool` (see the module docs); leaves it `OFF` if it cannot, or
/// `UNBOUND`, to be tried again at its next call, if the table's lock is taken.
#[cold]
#[inline(never)]
fn bind<K: PointerProof, L: RawLock>(s: &Slot, pool: &Pool<K, L>, id: &AtomicU32) {
    s.state.set(SETTING_UP);
    let addr = pool as *const Pool<K, L> as usize;
    // `Err` holds the state to leave: `OFF` for good, or `UNBOUND` to try again at the next
    // call (the table's lock was taken: see `try_registry`).
    let bound = (|| {
        register_fork_handlers();
        let pid = pool_id(id);
        match try_registry(|t| t.add(addr, pid)) {
            Some(true) => {}
            Some(false) => return Err(OFF),
            None => return Err(UNBOUND),
        }
        if !release_at_thread_exit(s) {
            registry(|t| t.remove(addr, pid));
            return Err(OFF);
        }
        Ok(pid)
    })();
    match bound {
        Ok(pid) => {
            // SAFETY: the state keeps every other use of the cache out until it is `ACTIVE`.
            unsafe { *s.cache.get() = ThreadCache::new(secret()).on_damage(report_damage) };
            s.memo.iter().for_each(|w| w.set(0));
            s.pool.set(addr);
            s.id.set(pid);
            s.flush.set(Some(flush_into::<K, L>));
            s.state.set(ACTIVE);
            // From now on the thread finds its slot through the initial-exec word.
            tls_slot::set(s as *const Slot as *const ());
        }
        Err(state) => s.state.set(state),
    }
}

/// The per-thread caches of one `'static` host pool, for a program that keeps its own pool in a
/// `static` rather than a [`crate::HostAllocator`] (a malloc-compatible library, say): small
/// requests go through the calling thread's cache (see [`tagalloc::ThreadCache`] and this
/// module's docs), everything else to the pool.
///
/// # Examples
///
/// ```
/// use tagalloc::{InlineHeap, Pool, SharedPool};
/// use tagalloc_host::{CacheBinding, HostAllocator, HostPool, MmapSource};
///
/// static POOL: HostPool = SharedPool::new(Pool::new(
///     InlineHeap::new(),
///     MmapSource::new(),
///     HostAllocator::POLICY,
/// ));
/// static CACHES: CacheBinding = CacheBinding::new();
///
/// let p = CACHES.alloc(&POOL, 100, 16).unwrap();
/// // SAFETY: a live 100-byte block of `POOL`, given up once.
/// unsafe { CACHES.free(&POOL, p, 100).unwrap() };
/// CACHES.flush_current(&POOL);
/// assert_eq!(POOL.stats().unwrap().heap.in_use, 0);
/// ```
#[derive(Debug, Default)]
pub struct CacheBinding {
    id: AtomicU32,
}

impl CacheBinding {
    /// A binding no cache uses yet.
    pub const fn new() -> Self {
        CacheBinding {
            id: AtomicU32::new(0),
        }
    }

    /// Allocates `size` bytes aligned to `align` from `pool` through the calling thread's
    /// cache (see [`SharedPool::alloc_with_cache`]).
    #[inline]
    pub fn alloc<K: PointerProof, L: RawLock>(
        &self,
        pool: &'static Pool<K, L>,
        size: usize,
        align: usize,
    ) -> Result<NonNull<u8>, PoolError> {
        with_cache(pool, &self.id, |cache| match cache {
            Some(cache) => pool.alloc_with_cache(cache, size, align),
            None => pool.alloc(size, align),
        })
    }

    /// A block of `size` bytes aligned to `align` from the calling thread's cache if it holds
    /// one (a hit: no lock, no system call, so `errno` is untouched); `None` otherwise, and
    /// nothing counted as a miss.
    #[inline]
    pub fn take<K: PointerProof, L: RawLock>(
        &self,
        pool: &'static Pool<K, L>,
        size: usize,
        align: usize,
    ) -> Option<NonNull<u8>> {
        if !tagalloc::tcache_enabled() {
            return None;
        }
        let class = Class::of(size, align)?;
        with_cache(pool, &self.id, |cache| cache?.take(class))
    }

    /// Frees a block of `size` bytes into the calling thread's cache (see
    /// [`SharedPool::free_with_cache`]), whichever thread allocated it.
    ///
    /// # Safety
    /// As for `tagalloc::Pool::free`: `ptr` came from `pool` (through this binding or not)
    /// with `size` bytes, or `size` is its usable size, and is not used afterwards.
    #[inline]
    pub unsafe fn free<K: PointerProof, L: RawLock>(
        &self,
        pool: &'static Pool<K, L>,
        ptr: NonNull<u8>,
        size: usize,
    ) -> Result<(), Error> {
        with_cache(pool, &self.id, |cache| match cache {
            // SAFETY: forwarded caller contract; the cache serves `pool`.
            Some(cache) => unsafe { pool.free_with_cache(cache, ptr, size) },
            // SAFETY: forwarded caller contract.
            None => unsafe { pool.free(ptr, size) },
        })
    }

    /// [`CacheBinding::free`] of a block whose usable size the pool's proof gives
    /// ([`PointerProof::cached_size`], without the lock, with the thread's [`ProofMemo`] for
    /// `pool` when the thread's cache serves it); a proof that gives none leaves the block
    /// alone: then this returns `None` with nothing done.
    ///
    /// # Safety
    /// As for [`CacheBinding::free`], with the size the proof gives, if it gives one.
    #[inline]
    pub unsafe fn free_proven<K: PointerProof, L: RawLock>(
        &self,
        pool: &'static Pool<K, L>,
        ptr: NonNull<u8>,
    ) -> Option<Result<(), Error>> {
        // The proof in each arm: one path past it, not one that tells the two apart again.
        with_slot(pool, &self.id, |slot| match slot {
            Some((memo, cache)) => {
                let size = K::cached_size(ptr, Some(memo))?;
                // SAFETY: forwarded caller contract; the cache serves `pool`.
                Some(unsafe { pool.free_with_cache(cache, ptr, size) })
            }
            None => {
                let size = K::cached_size(ptr, None)?;
                // SAFETY: forwarded caller contract.
                Some(unsafe { pool.free(ptr, size) })
            }
        })
    }

    /// A `realloc` of `ptr` to `new_size` bytes aligned to `align` through the calling
    /// thread's cache, without the lock (see [`SharedPool::realloc_with_cache`]), with the
    /// usable size the pool's proof gives, as for [`CacheBinding::free_proven`]. `None`,
    /// nothing done, when the thread has no cache for `pool`, the proof gives no size, the
    /// block carries the caches' key (a freed block: the locked path refuses it) or the cache
    /// cannot serve the new size: the caller then takes the lock.
    ///
    /// # Safety
    /// `ptr` came from `pool`, with the usable size the proof gives if it gives one; on
    /// `Some(Ok(p))` with `p` other than `ptr`, `ptr` is not used again.
    #[inline]
    pub unsafe fn realloc_proven<K: PointerProof, L: RawLock>(
        &self,
        pool: &'static Pool<K, L>,
        ptr: NonNull<u8>,
        align: usize,
        new_size: usize,
    ) -> Option<Result<NonNull<u8>, Error>> {
        with_slot(pool, &self.id, |slot| {
            let (memo, cache) = slot?;
            let usable = K::cached_size(ptr, Some(memo))?;
            // SAFETY: `ptr` is a live block of `usable` bytes (proven), at least 24.
            if unsafe { self.is_cached(ptr) } {
                return None;
            }
            // SAFETY: forwarded caller contract; the cache serves `pool`, and `ptr` does not
            // sit in a cache.
            unsafe { pool.realloc_with_cache(cache, ptr, usable, align, new_size) }
        })
    }

    /// Whether the block at `ptr` carries the caches' key, so sits in a thread's cache (freed):
    /// what a `realloc` or a size query checks before it trusts a block the heap calls in use.
    ///
    /// # Safety
    /// `ptr` is a block of a pool these caches serve, in use for its heap, of at least 16
    /// bytes (proven so under the pool's lock). Its second word is read: racing with its
    /// owner's writes only if it is in another thread's cache, that is, for a call on a freed
    /// block.
    #[inline]
    pub unsafe fn is_cached(&self, ptr: NonNull<u8>) -> bool {
        // SAFETY: the caller's promise: 16 readable, 8-aligned bytes.
        unsafe { ptr.cast::<usize>().add(1).read_volatile() == secret() }
    }

    /// Gives the calling thread's cache back to `pool` (before a trim).
    pub fn flush_current<K: PointerProof, L: RawLock>(&self, pool: &'static Pool<K, L>) {
        flush_current(pool, &self.id);
    }
}

/// Flushes `cache` into the pool at `addr`.
///
/// # Safety
/// `addr` is a live `Pool<K, L>` that `cache` belongs to (the table says it is alive).
unsafe fn flush_into<K: PointerProof, L: RawLock>(addr: usize, cache: &mut ThreadCache) {
    // SAFETY: the caller's promise.
    let pool = unsafe { &*(addr as *const Pool<K, L>) };
    // SAFETY: the cache belongs to this pool. A refusal (this thread holds the lock: only
    // from inside a hook) leaves the blocks cached and counted.
    let _ = unsafe { pool.flush_cache(cache) };
}

/// Flushes the calling thread's cache into `pool`, if it serves `pool` (before a trim).
pub(crate) fn flush_current<K: PointerProof, L: RawLock>(pool: &Pool<K, L>, id: &AtomicU32) {
    with_cache(pool, id, |cache| {
        if let Some(cache) = cache {
            // SAFETY: the cache serves this pool (`with_cache` checked it).
            let _ = unsafe { pool.flush_cache(cache) };
        }
    });
}

/// Forgets `pool`: its caches' blocks are not flushed into it any more (it is being dropped).
/// The calling thread's cache is flushed first if it serves `pool`.
pub(crate) fn unbind<K: PointerProof, L: RawLock>(pool: &Pool<K, L>, id: &AtomicU32) {
    flush_current(pool, id);
    let pid = id.load(Relaxed);
    if pid != 0 {
        registry(|t| t.remove(pool as *const Pool<K, L> as usize, pid));
    }
}

/// glibc's `PTHREAD_KEY_2NDLEVEL_SIZE`: the keys whose values live in the thread's descriptor,
/// so that `pthread_setspecific` of them never allocates.
const KEYS_WITHOUT_ALLOCATION: libc::pthread_key_t = 32;

/// Sets the calling thread's exit to run [`release_at_exit`] (see the module docs): through
/// the process's pthread key when it is one of the first 32, else through
/// `__cxa_thread_atexit_impl`. `false` if neither could be set.
fn release_at_thread_exit(s: &Slot) -> bool {
    if let Some(key) = exit_key() {
        // SAFETY: `key` is a live key of this process; the value, the thread's own slot, is
        // only handed back to `release_key`. Below `KEYS_WITHOUT_ALLOCATION` this allocates
        // nothing.
        return unsafe { libc::pthread_setspecific(key, s as *const Slot as *const c_void) } == 0;
    }
    // SAFETY: `release_at_exit` is an `extern "C"` function of this object, which
    // `__dso_handle` names so that the loader keeps it while the destructor is pending; the
    // argument is unused. This allocates (glibc's `calloc`, which in the malloc library is
    // ours: the state `bind` set sends it to the lock).
    unsafe {
        __cxa_thread_atexit_impl(
            release_at_exit,
            core::ptr::null_mut(),
            &raw const __dso_handle as *mut c_void,
        ) == 0
    }
}

/// The process's key whose destructor gives an exiting thread's cache back, created at the
/// first bind; `None` when it could not be created or is not among the first 32 (then it is
/// deleted, and never tried again).
fn exit_key() -> Option<libc::pthread_key_t> {
    /// Not tried yet.
    const UNTRIED: usize = 0;
    /// No key: the fallback.
    const NONE: usize = 1;
    /// Otherwise the key plus 2.
    static KEY: AtomicUsize = AtomicUsize::new(UNTRIED);
    let k = KEY.load(Relaxed);
    if k == UNTRIED {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `key` is writable; `release_key` is an `extern "C"` function of this object,
        // which stays loaded while threads hold caches (it is the allocator).
        let made = unsafe { libc::pthread_key_create(&mut key, Some(release_key)) } == 0;
        let fresh = if made && key < KEYS_WITHOUT_ALLOCATION {
            key as usize + 2
        } else {
            if made {
                // SAFETY: the key was just created and is used by no one.
                unsafe { libc::pthread_key_delete(key) };
            }
            NONE
        };
        return match KEY.compare_exchange(UNTRIED, fresh, Relaxed, Relaxed) {
            Ok(_) => (fresh >= 2).then(|| (fresh - 2) as libc::pthread_key_t),
            Err(other) => {
                if fresh >= 2 {
                    // SAFETY: another thread's key won; this one is used by no one.
                    unsafe { libc::pthread_key_delete(key) };
                }
                (other >= 2).then(|| (other - 2) as libc::pthread_key_t)
            }
        };
    }
    (k >= 2).then(|| (k - 2) as libc::pthread_key_t)
}

/// The exit key's destructor: [`release_at_exit`].
unsafe extern "C" fn release_key(_: *mut c_void) {
    // SAFETY: no preconditions beyond being called at the thread's exit.
    unsafe { release_at_exit(core::ptr::null_mut()) }
}

/// Reports a cached block's damaged link or key (see [`tagalloc::ThreadCache`]) on stderr,
/// without allocating, and aborts, as glibc does on a bad tcache link.
pub(crate) fn report_damage(e: tagalloc::CheckError) {
    use core::fmt::Write;
    /// A message on the stack; what does not fit is cut.
    struct Line {
        bytes: [u8; 256],
        len: usize,
    }
    impl Write for Line {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let room = self.bytes.len() - 1 - self.len;
            let take = s.len().min(room);
            if let (Some(d), Some(src)) = (
                self.bytes.get_mut(self.len..self.len + take),
                s.as_bytes().get(..take),
            ) {
                d.copy_from_slice(src);
                self.len += take;
            }
            Ok(())
        }
    }
    let mut line = Line {
        bytes: [0; 256],
        len: 0,
    };
    let _ = write!(
        line,
        "tagalloc: heap corruption at {:#x}: {}; aborting",
        e.at, e.what
    );
    if let Some(end) = line.bytes.get_mut(line.len) {
        *end = b'\n';
        line.len += 1;
    }
    // SAFETY: `write` reads `len` bytes of the buffer; `abort` has no preconditions.
    unsafe {
        libc::write(2, line.bytes.as_ptr().cast(), line.len);
        libc::abort();
    }
}

/// The thread's destructor: the exiting thread's cache goes back to its pool.
unsafe extern "C" fn release_at_exit(_: *mut c_void) {
    let _ = SLOT.try_with(|s| {
        if s.state.get() != ACTIVE {
            return;
        }
        s.state.set(OFF);
        tls_slot::set(core::ptr::null());
        let (addr, pid) = (s.pool.get(), s.id.get());
        // SAFETY: the state is `OFF`, so nothing else reaches the cache any more.
        let cache = unsafe { &mut *s.cache.get() };
        registry(|t| {
            match s.flush.get() {
                // SAFETY: the table says the pool is alive, and it cannot be dropped while the
                // table's lock is held (its drop takes it).
                Some(flush) if t.holds(addr, pid) => unsafe { flush(addr, cache) },
                // The pool is gone: its blocks went with it.
                _ => *cache = ThreadCache::new(0),
            }
        });
    });
}

extern "C" {
    /// glibc's registration of a thread-local destructor (what C++ `thread_local` and Rust's
    /// thread-locals with destructors use): `func(obj)` runs when the thread exits, joined or
    /// not, or calls `exit`, before the pthread keys' destructors.
    fn __cxa_thread_atexit_impl(
        func: unsafe extern "C" fn(*mut c_void),
        obj: *mut c_void,
        dso_symbol: *mut c_void,
    ) -> libc::c_int;
    /// This object's handle (from the C runtime's start files), which names it to the loader.
    static __dso_handle: u8;
}

/// `id`'s value, given one from a process-wide counter on first use.
fn pool_id(id: &AtomicU32) -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let now = id.load(Relaxed);
    if now != 0 {
        return now;
    }
    let fresh = NEXT.fetch_add(1, Relaxed).max(1);
    match id.compare_exchange(0, fresh, Relaxed, Relaxed) {
        Ok(_) => fresh,
        Err(other) => other,
    }
}

/// The process's random key for cached blocks (see `tagalloc::ThreadCache`), the same in
/// every cache so that a free finding it in a block refuses a double free whichever thread's
/// cache holds the block: the kernel's 16 random bytes from the auxiliary vector, mixed with
/// an address (ASLR), made once.
fn secret() -> usize {
    static KEY: AtomicUsize = AtomicUsize::new(0);
    let k = KEY.load(Relaxed);
    if k != 0 {
        return k;
    }
    // SAFETY: `getauxval` has no preconditions; `AT_RANDOM` is the address of 16 bytes the
    // kernel put on the initial stack, readable for the life of the process.
    let at = unsafe { libc::getauxval(libc::AT_RANDOM) } as *const u64;
    let mut fresh = &KEY as *const AtomicUsize as u64;
    if !at.is_null() {
        // SAFETY: as above: 16 readable bytes, possibly unaligned.
        let (a, b) = unsafe { (at.read_unaligned(), at.add(1).read_unaligned()) };
        fresh ^= a.rotate_left(23) ^ b;
    }
    let fresh = fresh as usize | 1;
    match KEY.compare_exchange(0, fresh, Relaxed, Relaxed) {
        Ok(_) => fresh,
        Err(other) => other,
    }
}

/// The pools with caches, as (address, id); a slot with id 0 is free.
struct Table {
    slots: [(usize, u32); 16],
}

impl Table {
    fn holds(&self, addr: usize, id: u32) -> bool {
        self.slots.contains(&(addr, id))
    }

    fn add(&mut self, addr: usize, id: u32) -> bool {
        if self.holds(addr, id) {
            return true;
        }
        match self.slots.iter_mut().find(|s| s.1 == 0) {
            Some(s) => {
                *s = (addr, id);
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, addr: usize, id: u32) {
        for s in &mut self.slots {
            if *s == (addr, id) {
                *s = (0, 0);
            }
        }
    }
}

/// The table and its lock (a spin lock: taken only when a thread binds or exits, a pool is
/// dropped, and around `fork`).
struct Registry {
    lock: AtomicBool,
    table: UnsafeCell<Table>,
}

// SAFETY: the table is only reached with `lock` held (see `registry`).
unsafe impl Sync for Registry {}

static REGISTRY: Registry = Registry {
    lock: AtomicBool::new(false),
    table: UnsafeCell::new(Table {
        slots: [(0, 0); 16],
    }),
};

/// Takes the table's lock. Its holder may wait for a pool's lock (an exiting thread flushes
/// its cache under it), so a waiter reads before it tries again and gives its core away after
/// a few rounds: threads that exit together would otherwise burn the cores the holder needs.
fn lock_registry() {
    let mut spins = 0u32;
    while REGISTRY
        .lock
        .compare_exchange_weak(false, true, core::sync::atomic::Ordering::Acquire, Relaxed)
        .is_err()
    {
        while REGISTRY.lock.load(Relaxed) {
            if spins < 64 {
                spins += 1;
                core::hint::spin_loop();
            } else {
                // SAFETY: `sched_yield` has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

fn unlock_registry() {
    REGISTRY
        .lock
        .store(false, core::sync::atomic::Ordering::Release);
}

/// [`registry`] if the table's lock is free right now; `None`, `f` not run, if it is taken.
///
/// A thread binds its cache with this: its first allocation may come from inside glibc's
/// loader, under the loader's TLS lock (a DTV resized in `__tls_get_addr`), while an exiting
/// thread holds the table's lock and waits for that TLS lock (its flush reads a thread-local).
/// Waiting here would then never end; the binding is tried again at the next call instead.
fn try_registry<R>(f: impl FnOnce(&mut Table) -> R) -> Option<R> {
    REGISTRY
        .lock
        .compare_exchange(false, true, core::sync::atomic::Ordering::Acquire, Relaxed)
        .ok()?;
    // SAFETY: the lock was just taken.
    Some(unsafe { held_registry(f) })
}

/// Runs `f` with the table, under its lock.
fn registry<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    lock_registry();
    // SAFETY: the lock was just taken.
    unsafe { held_registry(f) }
}

/// Runs `f` with the table, then gives the table's lock back.
///
/// # Safety
/// This thread holds the table's lock.
unsafe fn held_registry<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    // SAFETY: the caller holds the lock, so this is the only reference to the table.
    let r = f(unsafe { &mut *REGISTRY.table.get() });
    unlock_registry();
    r
}

/// Whether `prepare` took the table's lock for a fork in progress.
static HELD_FOR_FORK: AtomicBool = AtomicBool::new(false);

extern "C" fn fork_prepare() {
    lock_registry();
    HELD_FOR_FORK.store(true, Relaxed);
}

extern "C" fn fork_release() {
    if HELD_FOR_FORK.swap(false, Relaxed) {
        unlock_registry();
    }
}

/// Registers [`fork_prepare`] and [`fork_release`] once per process.
fn register_fork_handlers() {
    static DONE: AtomicBool = AtomicBool::new(false);
    if !DONE.swap(true, Relaxed) {
        // SAFETY: the handlers are `extern "C"`, take nothing, and stay loaded. A refusal
        // (no memory) leaves a fork during a bind or exit to wait in the child.
        unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_release), Some(fork_release)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HostAllocator, HostPool};
    use tagalloc::Pool;

    /// A pool of its own for each test, as the host allocator's.
    const fn host_pool() -> HostPool {
        SharedPool::new(Pool::new(
            InlineHeap::new(),
            MmapSource::new(),
            HostAllocator::POLICY,
        ))
    }

    static POOL: HostPool = host_pool();
    static CACHES: CacheBinding = CacheBinding::new();

    /// When its thread exits: reports whether the initial-exec word was still set (the cache
    /// still bound), then frees its block through the cache.
    struct Witness(std::sync::mpsc::Sender<bool>, usize);

    impl Drop for Witness {
        fn drop(&mut self) {
            let _ = self.0.send(tls_slot::get().is_null() != tls_slot::PRESENT);
            let p = NonNull::new(self.1 as *mut u8).unwrap();
            // SAFETY: a live 40-byte block of `POOL`, given up once.
            unsafe { CACHES.free(&POOL, p, 40).unwrap() };
        }
    }

    /// Held by every test here that binds a cache: one of them holds the table's lock.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    std::thread_local! {
        static WITNESS: core::cell::RefCell<Option<Witness>> = const { core::cell::RefCell::new(None) };
    }

    /// The cache's exit destructor (a pthread key's) runs after the thread-locals' destructors:
    /// their frees still go through the bound cache, and it then gives everything back.
    #[test]
    fn a_bound_thread_finds_its_cache_through_the_word_until_it_exits() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let (tx, rx) = std::sync::mpsc::channel();
        let during = std::thread::spawn(move || {
            assert!(tls_slot::get().is_null());
            let p = CACHES.alloc(&POOL, 40, 16).unwrap();
            let bound = tls_slot::get();
            let kept = CACHES.alloc(&POOL, 40, 16).unwrap();
            WITNESS.with(|w| *w.borrow_mut() = Some(Witness(tx, kept.as_ptr() as usize)));
            // SAFETY: a live 40-byte block of `POOL`, given up once (into this thread's cache).
            unsafe { CACHES.free(&POOL, p, 40).unwrap() };
            bound.is_null()
        })
        .join()
        .unwrap();
        assert_eq!(during, !tls_slot::PRESENT);
        // The thread-local's destructor found the cache bound, and the cache's destructor,
        // after it, gave the cache back with the block freed into it.
        assert!(rx.recv().unwrap());
        let s = POOL.stats().unwrap();
        assert_eq!(s.heap.in_use, 0);
        assert_eq!(s.cache.blocks, 0);
    }

    static BUSY_POOL: HostPool = host_pool();
    static BUSY: CacheBinding = CacheBinding::new();

    /// A thread whose first allocation finds the table's lock taken does not wait for it (its
    /// holder may be waiting for a lock this thread holds: see `try_registry`): it allocates
    /// through the pool's lock, its cache unbound, and binds at a later call once the table
    /// is free.
    #[test]
    fn a_thread_that_finds_the_table_taken_allocates_without_its_cache_and_binds_later() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        lock_registry();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let p = BUSY.alloc(&BUSY_POOL, 40, 16).unwrap();
            let bound_while_taken = !tls_slot::get().is_null();
            let state = SLOT.with(|s| s.state.get());
            // SAFETY: a live 40-byte block of the pool, given up once.
            unsafe { BUSY.free(&BUSY_POOL, p, 40).unwrap() };
            tx.send((bound_while_taken, state)).unwrap();
            std::thread::park();
            let q = BUSY.alloc(&BUSY_POOL, 40, 16).unwrap();
            let state = SLOT.with(|s| s.state.get());
            // SAFETY: as above.
            unsafe { BUSY.free(&BUSY_POOL, q, 40).unwrap() };
            state
        });
        let (bound_while_taken, state) = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the allocation waited for the table's lock");
        unlock_registry();
        assert!(!bound_while_taken);
        assert_eq!(state, UNBOUND, "to be bound at a later call");
        t.thread().unpark();
        assert_eq!(t.join().unwrap(), ACTIVE, "bound once the table was free");
        let s = BUSY_POOL.stats().unwrap();
        assert_eq!((s.heap.in_use, s.cache.blocks), (0, 0));
    }

    std::thread_local! {
        /// What [`Scripted`]'s proof does at its next call: `(step, the size it gives)`.
        static SCRIPT: Cell<(u8, Option<usize>)> = const { Cell::new((0, None)) };
    }

    /// Hooks whose unlocked proof follows the calling thread's [`SCRIPT`], checking the memo
    /// it is given: zero at the first call, which writes 7 in its first word; that word at the
    /// second.
    struct Scripted;

    impl tagalloc::Hooks for Scripted {}

    impl PointerProof for Scripted {
        fn cached_size(_: NonNull<u8>, m: Option<&ProofMemo>) -> Option<usize> {
            let memo = m.expect("a bound cache's memo").each_ref().map(Cell::get);
            let (step, size) = SCRIPT.get();
            match step {
                0 => {
                    assert_eq!(memo, [0; 9]);
                    m.unwrap()[0].set(7);
                }
                1 => assert_eq!(memo, [7, 0, 0, 0, 0, 0, 0, 0, 0]),
                _ => {}
            }
            SCRIPT.set((step + 1, size));
            size
        }
    }

    static PROVEN_POOL: SharedPool<InlineHeap, MmapSource, Scripted, crate::FutexLock> =
        SharedPool::new(Pool::with_hooks(
            InlineHeap::new(),
            MmapSource::new(),
            HostAllocator::POLICY,
            Scripted,
        ));
    static PROVEN: CacheBinding = CacheBinding::new();

    /// `free_proven` leaves the block alone when the pool's proof gives no size and frees it
    /// into the thread's cache when it gives one (a second free then finds the cache's key);
    /// the proof gets the thread's memo once its cache is bound: zero at first, the same words
    /// from one free to the next.
    #[test]
    fn free_proven_frees_what_its_proof_sizes_through_the_threads_memo() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::spawn(|| {
            let p = PROVEN.alloc(&PROVEN_POOL, 40, 16).unwrap();
            // SAFETY: `p` is a live 40-byte block of the pool; the first call frees nothing,
            // the second frees it once, the third is refused before anything is written.
            unsafe {
                SCRIPT.set((0, None));
                let kept = PROVEN.free_proven(&PROVEN_POOL, p);
                assert_eq!(kept, None);
                SCRIPT.set((1, Some(40)));
                let freed = PROVEN.free_proven(&PROVEN_POOL, p);
                assert_eq!(freed, Some(Ok(())));
                let again = PROVEN.free_proven(&PROVEN_POOL, p);
                assert_eq!(again, Some(Err(Error::DoubleFree)));
            }
        })
        .join()
        .unwrap();
        let s = PROVEN_POOL.stats().unwrap();
        assert_eq!((s.heap.in_use, s.cache.blocks), (0, 0));
    }
}
