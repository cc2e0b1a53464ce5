//! The C interface: the functions of glibc's allocator, exported under their own names, so
//! that a dynamically linked program started with this library in `LD_PRELOAD` calls these
//! instead of glibc's.
//!
//! Every function behaves as glibc's does for valid calls, and for the invalid ones as C
//! programs expect: `free(NULL)` does nothing, a failure returns NULL with `errno` set to
//! `ENOMEM` (no memory, or a size that overflows) or `EINVAL` (a bad alignment),
//! `posix_memalign` returns the error number instead. Nothing aborts but a heap whose tags
//! the program damaged (a write past a block's end), reported first, as glibc does.
//!
//! **No unwinding.** None of them can unwind into C: the pool's paths return errors as values,
//! this module uses no operation that panics (no indexing, no unchecked arithmetic, no
//! `unwrap`), and Rust aborts rather than unwind out of an `extern "C"` function (the compiler
//! puts that guard at every one). `catch_unwind` would not help: a panic allocates its message
//! and its exception object, from this allocator, whose lock the panicking thread may hold.
//! `tools/reachable_panics.py` lists, from the built library's call graph, every place where a
//! panic could start below these functions; in the release build they are the compiler's abort
//! guards and three checks that the pool's own invariants keep from failing (a bin index in
//! the core, computed from a chunk size the heap keeps in range; a division by the source's
//! page size in `malloc_trim`, never zero; the parsing of `/proc/meminfo` for huge pages,
//! which this library's source does not use). Were one to fail, the process would abort. The
//! one deliberate abort is `report::corruption`'s, after it has reported damaged heap tags.
//!
//! Exported beyond the standard ones: glibc's `__libc_*` aliases (`__libc_malloc`,
//! `__libc_free`, `__libc_calloc`, `__libc_realloc`, `__libc_memalign`, `__libc_valloc`,
//! `__libc_pvalloc`), which some programs and libraries call directly and which must not reach
//! glibc's allocator with this library's pointers; `cfree` (an old alias of `free`);
//! `malloc_trim`, `malloc_stats`, `mallinfo`, `mallinfo2`, `malloc_info` (the pool's figures
//! and trim) and `mallopt` (no parameters are supported: it returns 0, as glibc does for a
//! parameter it refuses). glibc's removed hooks (`__malloc_hook` ...) and `malloc_get_state`
//! are not: current glibc has no such symbols for new programs either.

use core::ffi::{c_int, c_void};
use core::ptr::{null_mut, NonNull};

use crate::options;
use crate::pool::{self, set_errno, MIN_ALIGN};
use crate::report;

/// Starts the library if it has not started (see [`options::start`]).
#[inline]
fn start() {
    options::start(at_exit);
}

/// The exit handler: the calling thread's cache goes back to the pool (no key destructor runs
/// at `exit`; its blocks' tags and links are checked as they leave), then, when
/// `TAGALLOC_STATS` is set, the pool's figures.
extern "C" fn at_exit() {
    pool::flush_calling_thread();
    if options::stats() {
        report::stats("at exit", report::To::Exit, pool::stats());
    }
}

/// Starts the library when it is loaded, in case the program's first allocation comes late:
/// the loader runs this among the shared libraries' constructors.
extern "C" fn start_at_load() {
    start();
}

#[used]
#[link_section = ".init_array"]
static START_AT_LOAD: extern "C" fn() = start_at_load;

/// The page size (`valloc`, `pvalloc`), read once by the host crate's source; 4096 where it
/// cannot be read.
fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// A block of `size` bytes aligned to `align` (a power of two), or null with `errno` set.
#[inline]
fn alloc(size: usize, align: usize) -> *mut c_void {
    start();
    pool::alloc(size, align.max(MIN_ALIGN)).map_or(null_mut(), |p| p.as_ptr().cast())
}

/// `memalign`'s rules, which glibc's `aligned_alloc` followed before 2.38 too: an alignment
/// that is not a power of two is rounded up to one; one too large for any block is `EINVAL`.
fn memalign_rules(align: usize, size: usize) -> *mut c_void {
    match align.checked_next_power_of_two() {
        Some(a) if a <= isize::MAX as usize => alloc(size, a),
        _ => {
            set_errno(libc::EINVAL);
            null_mut()
        }
    }
}

/// Allocates `size` bytes aligned to 16; `malloc(0)` returns a unique pointer.
#[no_mangle]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    alloc(size, MIN_ALIGN)
}

/// Frees a block; `free(NULL)` does nothing. A double free or a pointer that is not a block
/// (into the middle of one, the stack, a mapping of the program's) is refused, counted, and
/// reported once on stderr; damaged tags are reported with their address, then the process
/// aborts (see `pool::free`).
///
/// # Safety
/// `ptr` is null or a block from this allocator that is not used afterwards. Anything else is
/// refused rather than obeyed, except, outside checked mode, a pointer into a block whose
/// preceding bytes happen to read as a sound tag.
#[no_mangle]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    if let Some(p) = NonNull::new(ptr.cast::<u8>()) {
        start();
        // SAFETY: forwarded caller contract.
        unsafe { pool::free(p) };
    }
}

/// `n * size` zeroed bytes; null with `ENOMEM` if the product overflows.
#[no_mangle]
pub extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return null_mut();
    };
    let p = alloc(total, MIN_ALIGN);
    if !p.is_null() {
        // SAFETY: a fresh block of at least `total` bytes.
        unsafe { p.cast::<u8>().write_bytes(0, total) };
    }
    p
}

/// Resizes a block: `realloc(NULL, n)` is `malloc(n)`; `realloc(p, 0)` frees `p` and returns
/// NULL (glibc's behaviour); on failure NULL with `errno` set, `p` untouched.
///
/// # Safety
/// As for [`free`]; on success `ptr` is not used again unless it was returned.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    let Some(p) = NonNull::new(ptr.cast::<u8>()) else {
        return malloc(size);
    };
    start();
    if size == 0 {
        // SAFETY: forwarded caller contract.
        unsafe { pool::free(p) };
        return null_mut();
    }
    // SAFETY: forwarded caller contract.
    unsafe { pool::realloc(p, size) }.map_or(null_mut(), |p| p.as_ptr().cast())
}

/// `realloc(ptr, n * size)`, with `ENOMEM` (and `ptr` untouched) if the product overflows.
///
/// # Safety
/// As for [`realloc`].
#[no_mangle]
pub unsafe extern "C" fn reallocarray(ptr: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: forwarded caller contract.
        Some(total) => unsafe { realloc(ptr, total) },
        None => {
            set_errno(libc::ENOMEM);
            null_mut()
        }
    }
}

/// Stores in `*out` a block of `size` bytes aligned to `align`, which must be a power of two
/// and a multiple of `sizeof(void *)`. Returns 0, `EINVAL` (bad alignment) or `ENOMEM`;
/// `*out` and `errno` are untouched on failure.
///
/// # Safety
/// `out` is valid for a write of one pointer.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(size_of::<*mut c_void>()) || out.is_null()
    {
        return libc::EINVAL;
    }
    // SAFETY: `__errno_location` returns this thread's errno.
    let saved = unsafe { *libc::__errno_location() };
    let p = alloc(size, align);
    set_errno(saved);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller's contract: `out` is valid for a write.
    unsafe { out.write(p) };
    0
}

/// C11's aligned allocation: `align` must be a power of two (else NULL with `EINVAL`, as
/// glibc since 2.38 and C17 have it).
#[no_mangle]
pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    alloc(size, align)
}

/// `size` bytes aligned to `align`, rounded up to a power of two (glibc's rule).
#[no_mangle]
pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    memalign_rules(align, size)
}

/// `size` bytes aligned to the page size.
#[no_mangle]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    alloc(size, page_size())
}

/// `size` rounded up to whole pages (one page for 0), aligned to the page size.
#[no_mangle]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let page = page_size();
    match size.max(1).checked_next_multiple_of(page) {
        Some(n) => alloc(n, page),
        None => {
            set_errno(libc::ENOMEM);
            null_mut()
        }
    }
}

/// The bytes usable at `ptr` (at least what was asked for); 0 for NULL or a refused pointer.
///
/// # Safety
/// `ptr` is null or a live block from this allocator (in checked mode, any pointer).
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> usize {
    match NonNull::new(ptr.cast::<u8>()) {
        // SAFETY: forwarded caller contract.
        Some(p) => unsafe { pool::usable_size(p) },
        None => 0,
    }
}

/// Gives free memory back to the system: wholly free regions and free region ends are
/// unmapped, the pages of free chunks of 64 KiB or more released. `pad` is ignored. Returns 1
/// if anything was given back, else 0.
#[no_mangle]
pub extern "C" fn malloc_trim(_pad: usize) -> c_int {
    c_int::from(pool::trim())
}

/// Accepts no parameter: returns 0 (glibc's answer to a parameter it refuses) and changes
/// nothing.
#[no_mangle]
pub extern "C" fn mallopt(_param: c_int, _value: c_int) -> c_int {
    0
}

/// Writes the pool's figures to stderr, as glibc's does its own.
#[no_mangle]
pub extern "C" fn malloc_stats() {
    report::stats("malloc_stats", report::To::Stderr, pool::stats());
}

/// The pool's figures in glibc's `struct mallinfo2`: `arena` the bytes held from the system
/// (the pool's regions and the mappings kept for reuse), `ordblks` the free chunks, `uordblks`
/// the bytes in use, `fordblks` the free bytes (free chunks and kept mappings), `usmblks` the
/// peak bytes held, `keepcost` the bytes of the mappings kept for reuse (what `malloc_trim`
/// gives back besides free regions and pages, as glibc's is the releasable top); the other
/// fields (fastbins, separate mappings) have no counterpart and are 0.
#[no_mangle]
pub extern "C" fn mallinfo2() -> libc::mallinfo2 {
    let s = pool::stats().unwrap_or_default();
    let held = s.reserved.saturating_add(s.cached);
    libc::mallinfo2 {
        arena: held,
        ordblks: s.heap.free_chunks,
        smblks: 0,
        hblks: 0,
        hblkhd: 0,
        usmblks: s.peak_reserved.max(held),
        fsmblks: 0,
        uordblks: s.heap.in_use,
        fordblks: s.heap.free.saturating_add(s.cached),
        keepcost: s.cached,
    }
}

/// [`mallinfo2`] in the old `int` fields, each capped at `INT_MAX`.
#[no_mangle]
pub extern "C" fn mallinfo() -> libc::mallinfo {
    let m = mallinfo2();
    let int = |v: usize| c_int::try_from(v).unwrap_or(c_int::MAX);
    libc::mallinfo {
        arena: int(m.arena),
        ordblks: int(m.ordblks),
        smblks: int(m.smblks),
        hblks: int(m.hblks),
        hblkhd: int(m.hblkhd),
        usmblks: int(m.usmblks),
        fsmblks: int(m.fsmblks),
        uordblks: int(m.uordblks),
        fordblks: int(m.fordblks),
        keepcost: int(m.keepcost),
    }
}

/// Writes the pool's figures to `stream` as XML (glibc writes its arenas'); `options` must be
/// 0 (else `EINVAL`). Returns 0, or -1 with `errno` set.
///
/// # Safety
/// `stream` is a valid open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn malloc_info(options: c_int, stream: *mut libc::FILE) -> c_int {
    if options != 0 || stream.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let s = pool::stats().unwrap_or_default();
    let ok = report::to_stream(
        stream,
        format_args!(
            "<malloc version=\"tagalloc-1\">\n<heap nr=\"0\">\n<total type=\"free\" count=\"{}\" \
             size=\"{}\"/>\n<system type=\"current\" size=\"{}\"/>\n<system type=\"max\" \
             size=\"{}\"/>\n<inuse size=\"{}\" peak=\"{}\" blocks=\"{}\"/>\n</heap>\n</malloc>\n",
            s.heap.free_chunks,
            s.heap.free,
            s.reserved,
            s.peak_reserved,
            s.heap.in_use,
            s.heap.peak_in_use,
            s.heap.live,
        ),
    );
    if ok {
        0
    } else {
        -1
    }
}

/// glibc's alias of [`free`], from before C89.
///
/// # Safety
/// As for [`free`].
#[no_mangle]
pub unsafe extern "C" fn cfree(ptr: *mut c_void) {
    // SAFETY: forwarded caller contract.
    unsafe { free(ptr) }
}

/// glibc's internal name of [`malloc`].
#[no_mangle]
pub extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
    malloc(size)
}

/// glibc's internal name of [`free`].
///
/// # Safety
/// As for [`free`].
#[no_mangle]
pub unsafe extern "C" fn __libc_free(ptr: *mut c_void) {
    // SAFETY: forwarded caller contract.
    unsafe { free(ptr) }
}

/// glibc's internal name of [`calloc`].
#[no_mangle]
pub extern "C" fn __libc_calloc(n: usize, size: usize) -> *mut c_void {
    calloc(n, size)
}

/// glibc's internal name of [`realloc`].
///
/// # Safety
/// As for [`realloc`].
#[no_mangle]
pub unsafe extern "C" fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: forwarded caller contract.
    unsafe { realloc(ptr, size) }
}

/// glibc's internal name of [`memalign`].
#[no_mangle]
pub extern "C" fn __libc_memalign(align: usize, size: usize) -> *mut c_void {
    memalign(align, size)
}

/// glibc's internal name of [`valloc`].
#[no_mangle]
pub extern "C" fn __libc_valloc(size: usize) -> *mut c_void {
    valloc(size)
}

/// glibc's internal name of [`pvalloc`].
#[no_mangle]
pub extern "C" fn __libc_pvalloc(size: usize) -> *mut c_void {
    pvalloc(size)
}
