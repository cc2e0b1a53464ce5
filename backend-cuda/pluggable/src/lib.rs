//! tagalloc's CUDA device pool as a shared library with the C signatures of PyTorch's
//! `CUDAPluggableAllocator`, so that PyTorch allocates every tensor from it:
//!
//! ```python
//! import torch
//! alloc = torch.cuda.memory.CUDAPluggableAllocator(
//!     "target/release/libtagalloc_cuda_pluggable.so", "tagalloc_malloc", "tagalloc_free")
//! torch.cuda.memory.change_current_allocator(alloc)   # before any CUDA allocation
//! ```
//!
//! Exported:
//!
//! ```c
//! void* tagalloc_malloc(ssize_t size, int device, cudaStream_t stream);
//! void  tagalloc_free(void* ptr, ssize_t size, int device, cudaStream_t stream);
//! void  tagalloc_record_stream(void* ptr, cudaStream_t stream);  /* set_record_stream_fn */
//! void  tagalloc_empty_cache(void);                              /* set_reset_fn */
//! void  tagalloc_begin_allocate_to_pool(int device, MempoolId pool, void* filter);
//!                                                  /* set_begin_allocate_to_pool */
//! void  tagalloc_end_allocate_to_pool(int device, MempoolId pool);  /* set_end_allocate_to_pool_fn */
//! void  tagalloc_release_pool(int device, MempoolId pool);      /* set_release_pool */
//! int   tagalloc_forget_stream(cudaStream_t stream);  /* before destroying a stream: 0 or -1 */
//! int   tagalloc_check_captures(int on);    /* without the graph-pool hooks: 0 */
//! int   tagalloc_trim(int device);          /* empty_cache of one device, or all for -1: 0 or -1 */
//! int   tagalloc_stats(int device, TagallocStats* out);
//! size_t tagalloc_stats_size(void);                    /* sizeof(TagallocStats) */
//! size_t tagalloc_snapshot(int device, char* buf, size_t len);  /* JSON; (size_t)-1 on failure */
//! size_t tagalloc_last_error(char* buf, size_t len);   /* copies the message, returns its length */
//! ```
//!
//! `TagallocStats` only ever grows at its end: the offsets of its fields never change, but
//! `tagalloc_stats` writes the whole struct, so a caller declares every field of the version
//! it loads (the Python module checks `sizeof` against `tagalloc_stats_size()`). The JSON of
//! `tagalloc_snapshot` is described in [`snapshot_json`]. The Python module
//! `backend-cuda/python/tagalloc_torch` wraps all of this for PyTorch users (`enable()`,
//! `memory_stats()`, `empty_cache()`, `snapshot()`).
//!
//! The record-stream and empty-cache calls have the signatures of the allocator's optional
//! hooks, so PyTorch can call them too:
//!
//! ```python
//! import ctypes
//! lib = ctypes.CDLL("target/release/libtagalloc_cuda_pluggable.so")
//! addr = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
//! alloc._allocator.set_record_stream_fn(addr("tagalloc_record_stream"))
//! alloc._allocator.set_reset_fn(addr("tagalloc_empty_cache"))
//! ```
//!
//! One pool per device ([`tagalloc_cuda::PoolRegistry`]), created on the device's first
//! allocation, with virtual-memory growth ([`DeviceConfig::VMM`]; plain `cuMemAlloc` regions
//! on a device without virtual memory management, or with `TAGALLOC_CUDA_REGIONS=plain` in
//! the environment; another value than `plain` or `vmm` is reported in one line on stderr and
//! the default kept: [`config_from_env`]). A block belongs to the stream it was allocated on, and
//! its free is stream-ordered (see [`tagalloc_cuda::DevicePool`]).
//!
//! **The free gets only an address.** [`Allocator`] keeps, per device, a map from address to
//! the block handed out there, one hash insert per allocation and one removal per free; the
//! device pool itself keeps no such map (a Rust caller holds its blocks). The detached heap itself
//! cannot answer "which block starts here": its records are linked by neighbour and by bin, and a
//! free reaches its record in `O(1)` through the handle a Rust caller keeps; an index by address in
//! the core (a radix tree over granules, updated on every split and merge) would cost every user of
//! the heap for the sake of callers that lose the handle.
//!
//! **No wait under a lock another thread needs.** A free takes its block out of the address
//! map and lets the map's lock go before it calls the pool; the pool waits for the device (out
//! of memory with frees pending, `empty_cache`) only with its own lock released. A stall of
//! one thread stops no other thread's allocations and frees.
//!
//! **CUDA graphs.** With PyTorch's graph-pool hooks installed (`set_begin_allocate_to_pool`,
//! `set_end_allocate_to_pool_fn`, `set_release_pool`; `tagalloc_torch.enable()` does it), a
//! capture's allocations come from a private pool of its graph, whose memory serves nothing
//! else until PyTorch releases it, and every pool of the device is told a capture is under way
//! (it then makes no call that is illegal during a capture). See the `graphs` module.
//!
//! **Errors never unwind into C.** Every entry point catches panics; a failed allocation
//! returns null (PyTorch then raises its out-of-memory error), and
//! [`tagalloc_last_error`] says why: the pool's message with its figures, or, with no driver
//! or no device, what is missing.
//!
//! The generic layer ([`Allocator`]) runs over any [`Driver`](tagalloc_cuda::Driver); the exported
//! functions use it over the real driver, and the tests over the fake one.

use core::ffi::{c_char, c_int, c_void};
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

mod allocator;
mod graphs;
pub mod snapshot_json;
mod stats;

pub use allocator::Allocator;
pub use graphs::MempoolId;
pub use stats::TagallocStats;

use tagalloc_cuda::{
    CuStream, CudaDriver, DeviceConfig, DevicePtr, DriverError, PoolRegistry, Regions,
};

/// The configuration from the environment: `TAGALLOC_CUDA_REGIONS=plain` for plain regions,
/// else virtual-memory growth. A value [`config_for`] does not accept is reported in one line
/// on stderr, since a misspelt `plane` silently growing by virtual memory looks like a setting
/// that works.
pub fn config_from_env() -> DeviceConfig {
    let value = std::env::var_os("TAGALLOC_CUDA_REGIONS");
    let (config, refusal) = config_for(value.as_deref().map(|v| v.to_string_lossy()).as_deref());
    if let Some(line) = refusal {
        eprintln!("{line}");
    }
    config
}

/// The configuration a value of `TAGALLOC_CUDA_REGIONS` asks for: `plain` for plain regions,
/// `vmm`, empty or none for virtual-memory growth (the default); anything else gives the
/// default and the line that reports it (variable, value, what is accepted, the default), in
/// the malloc library's words for its own variables.
pub fn config_for(regions: Option<&str>) -> (DeviceConfig, Option<String>) {
    match regions {
        Some("plain") => (
            DeviceConfig {
                regions: Regions::PLAIN,
                ..DeviceConfig::PLAIN
            },
            None,
        ),
        None | Some("" | "vmm") => (DeviceConfig::VMM, None),
        Some(other) => (
            DeviceConfig::VMM,
            Some(format!(
                "tagalloc: TAGALLOC_CUDA_REGIONS is neither \"plain\" nor \"vmm\" but \
                 \"{other}\"; the default is used: vmm (virtual-memory growth)"
            )),
        ),
    }
}

/// The process's allocator over the real driver, or why there is none.
fn global() -> &'static Result<Allocator<CudaDriver>, DriverError> {
    static GLOBAL: OnceLock<Result<Allocator<CudaDriver>, DriverError>> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        let a = PoolRegistry::cuda(config_from_env()).map(Allocator::new)?;
        a.check_captures(CHECK_CAPTURES.load(Ordering::Relaxed));
        Ok(a)
    })
}

/// The message of the last failure in this process.
fn last_error() -> &'static Mutex<CString> {
    static LAST: OnceLock<Mutex<CString>> = OnceLock::new();
    LAST.get_or_init(|| Mutex::new(CString::default()))
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    *last_error().lock().unwrap_or_else(|e| e.into_inner()) = c;
}

/// Runs `f` with the process's allocator; any failure (no driver, an error, a panic) is
/// recorded for [`tagalloc_last_error`] and gives `fallback`.
fn with_global<R>(fallback: R, f: impl FnOnce(&Allocator<CudaDriver>) -> Result<R, String>) -> R {
    let result = catch_unwind(AssertUnwindSafe(|| match global() {
        Ok(a) => f(a),
        Err(e) => Err(format!("tagalloc: no CUDA pool: {e}")),
    }));
    match result {
        Ok(Ok(r)) => r,
        Ok(Err(msg)) => {
            set_error(&msg);
            fallback
        }
        Err(_) => {
            set_error("tagalloc: internal error (a panic was caught at the C boundary)");
            fallback
        }
    }
}

/// The stream PyTorch passed.
fn stream_of(stream: *mut c_void) -> CuStream {
    // SAFETY: PyTorch passes a live stream of the device's primary context (or null, the
    // legacy default stream), and keeps its streams for the life of the process, which is
    // as long as the pool may use the handle.
    unsafe { CuStream::from_raw(stream.cast()) }
}

/// Allocates `size` bytes on device `device` for use on `stream` (PyTorch's
/// `CUDAPluggableAllocator` malloc). Null for a size of 0, and on any failure
/// ([`tagalloc_last_error`] says why).
#[no_mangle]
pub extern "C" fn tagalloc_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    with_global(core::ptr::null_mut(), |a| {
        let ptr = a.malloc(size, device, stream_of(stream))?;
        Ok(ptr.map_or(core::ptr::null_mut(), |p| p.0 as usize as *mut c_void))
    })
}

/// Frees a block from [`tagalloc_malloc`] on the stream it was allocated on (PyTorch's
/// `CUDAPluggableAllocator` free). A null pointer is ignored; a pointer that is not a live
/// block, or a size that is not its size, is refused (the block is kept) and recorded for
/// [`tagalloc_last_error`].
#[no_mangle]
pub extern "C" fn tagalloc_free(
    ptr: *mut c_void,
    size: isize,
    device: c_int,
    _stream: *mut c_void,
) {
    if ptr.is_null() {
        return;
    }
    with_global((), |a| a.free(DevicePtr(ptr as usize as u64), size, device));
}

/// Marks the block at `ptr` as used on `stream` as well (PyTorch's `recordStream`, the
/// signature of `set_record_stream_fn`): its memory goes to another stream only after
/// `stream`'s work up to the free has finished. A failure (not a live block) is recorded for
/// [`tagalloc_last_error`].
#[no_mangle]
pub extern "C" fn tagalloc_record_stream(ptr: *mut c_void, stream: *mut c_void) {
    with_global((), |a| {
        a.record_stream(DevicePtr(ptr as usize as u64), stream_of(stream))
    });
}

/// Stops using `stream` on every device's pool (and its graph pools), after which it may be
/// destroyed: call it after the stream's last allocation, free and `record_stream`. A stream
/// the pools never saw is no error. Returns 0, or -1 ([`tagalloc_last_error`] says why: no
/// pool, or the stream captures a CUDA graph).
#[no_mangle]
pub extern "C" fn tagalloc_forget_stream(stream: *mut c_void) -> c_int {
    with_global(-1, |a| a.forget_stream(stream_of(stream)).map(|()| 0))
}

/// PyTorch's graph-pool begin hook (`set_begin_allocate_to_pool`): the capture about to begin
/// on `device` allocates from the private pool `pool` (see the crate's `graphs` module).
/// `filter` is PyTorch's C++ `std::function<bool(cudaStream_t)>`, passed by reference as the
/// Itanium C++ ABI passes a class with a destructor; it is not called (a C library cannot),
/// the same test is made from the driver (which capture a stream is in). A failure is recorded
/// for [`tagalloc_last_error`]; allocations of that capture are then refused.
#[no_mangle]
pub extern "C" fn tagalloc_begin_allocate_to_pool(
    device: c_int,
    pool: MempoolId,
    _filter: *mut c_void,
) {
    with_global((), |a| a.begin_allocate_to_pool(device, pool));
}

/// PyTorch's graph-pool end hook (`set_end_allocate_to_pool_fn`): the capture into `pool` on
/// `device` is over.
#[no_mangle]
pub extern "C" fn tagalloc_end_allocate_to_pool(device: c_int, pool: MempoolId) {
    with_global((), |a| a.end_allocate_to_pool(device, pool));
}

/// PyTorch's graph-pool release hook (`set_release_pool`): `pool` on `device` serves no more
/// graphs; its memory goes back to the driver once nothing of it is live, at the next
/// `empty_cache`.
#[no_mangle]
pub extern "C" fn tagalloc_release_pool(device: c_int, pool: MempoolId) {
    with_global((), |a| a.release_pool(device, pool));
}

/// Makes every allocation ask which CUDA graph capture its stream is in (`on` non-zero), so
/// that one on a capturing stream with no graph pool open is refused (null, and
/// [`tagalloc_last_error`] says why) rather than served from the shared pool, whose memory a
/// replay of the graph would write later: for a PyTorch without the graph-pool hooks. Off by
/// default (the hooks say when a capture is under way); one `cuStreamGetCaptureInfo` per
/// allocation when on. Returns 0 (it may come before any pool exists).
#[no_mangle]
pub extern "C" fn tagalloc_check_captures(on: c_int) -> c_int {
    CHECK_CAPTURES.store(on != 0, Ordering::Relaxed);
    if let Ok(a) = global() {
        a.check_captures(on != 0);
    }
    0
}

/// What [`tagalloc_check_captures`] asked, for the allocator made after it.
static CHECK_CAPTURES: AtomicBool = AtomicBool::new(false);

/// Gives back to the driver what every device's pool holds and does not use (PyTorch's
/// `empty_cache`, the signature of `set_reset_fn`). A failure is recorded for
/// [`tagalloc_last_error`].
#[no_mangle]
pub extern "C" fn tagalloc_empty_cache() {
    with_global((), |a| a.empty_cache(-1));
}

/// Empties the cache of `device`, or of every device's pool for -1, as
/// [`tagalloc_empty_cache`] does, but says whether it could: 0, or -1 when there is no pool
/// or the driver refused ([`tagalloc_last_error`] says why).
#[no_mangle]
pub extern "C" fn tagalloc_trim(device: c_int) -> c_int {
    with_global(-1, |a| a.empty_cache(device).map(|()| 0))
}

/// Fills `*out` with the statistics of `device`'s pool. Returns `out->status`: 0 on success,
/// -1 when there is no pool (no driver, no such device; [`tagalloc_last_error`] says which),
/// -2 for a null `out`.
///
/// # Safety
///
/// `out` is null or points to memory for one `TagallocStats`, writable.
#[no_mangle]
pub unsafe extern "C" fn tagalloc_stats(device: c_int, out: *mut TagallocStats) -> c_int {
    if out.is_null() {
        set_error("tagalloc_stats: out is null");
        return -2;
    }
    let stats = with_global(
        TagallocStats {
            status: -1,
            ..TagallocStats::default()
        },
        |a| a.stats(device),
    );
    // SAFETY: `out` is not null, and the caller promises it points to writable memory for one
    // `TagallocStats`.
    unsafe { out.write(stats) };
    stats.status
}

/// The size in bytes of the [`TagallocStats`] that [`tagalloc_stats`] writes, so that a caller
/// declaring the struct itself (Python's `ctypes`) can refuse a library of another version.
#[no_mangle]
pub extern "C" fn tagalloc_stats_size() -> usize {
    core::mem::size_of::<TagallocStats>()
}

/// Writes the pool of `device` as a JSON document (see [`snapshot_json`]) into `buf`,
/// NUL-terminated, and returns the document's length in bytes (without the NUL). The document
/// is written only when all of it and the NUL fit (`len` greater than the length); otherwise
/// nothing is written, so a caller sizes its buffer with `buf` null or `len` 0 and calls
/// again, and again if the pool grew in between. Returns `(size_t)-1` (`SIZE_MAX`) when there
/// is no pool (no driver, no such device; [`tagalloc_last_error`] says which); a pool is
/// created for a device that has none yet, as [`tagalloc_stats`] does.
///
/// # Safety
///
/// `buf` is null or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tagalloc_snapshot(device: c_int, buf: *mut c_char, len: usize) -> usize {
    let Some(json) = with_global(None, |a| {
        a.snapshot_json(device, |s| s.as_raw() as usize as u64)
            .map(Some)
    }) else {
        return usize::MAX;
    };
    // SAFETY: the caller's promise on `buf` and `len` is `copy_whole`'s.
    unsafe { copy_whole(json.as_bytes(), buf, len) }
}

/// Copies `doc` and a NUL into `buf` when both fit (`len > doc.len()`), else writes nothing;
/// returns `doc.len()`. What [`tagalloc_snapshot`] does with its document: a cut JSON document
/// is of no use, so it is whole or absent.
///
/// # Safety
///
/// `buf` is null or points to `len` writable bytes that do not overlap `doc`.
pub unsafe fn copy_whole(doc: &[u8], buf: *mut c_char, len: usize) -> usize {
    if !buf.is_null() && len > doc.len() {
        // SAFETY: `buf` points to `len` writable bytes apart from `doc` (the caller's promise)
        // and `doc.len() + 1 <= len`.
        unsafe {
            core::ptr::copy_nonoverlapping(doc.as_ptr(), buf.cast::<u8>(), doc.len());
            buf.add(doc.len()).write(0);
        }
    }
    doc.len()
}

/// Copies the message of the last failure in this process (empty if none) into `buf`, at most
/// `len - 1` bytes and a NUL; returns the message's full length in bytes (without the NUL),
/// so that a caller can see it was cut and ask again with a larger buffer. With a null `buf`
/// or `len == 0` it only returns the length.
///
/// # Safety
///
/// `buf` is null or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tagalloc_last_error(buf: *mut c_char, len: usize) -> usize {
    let msg = last_error()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let bytes = msg.as_bytes();
    if !buf.is_null() && len > 0 {
        let n = bytes.len().min(len - 1);
        // SAFETY: `buf` points to `len` writable bytes (the caller's promise) and `n + 1 <=
        // len`; the message is a separate allocation, so the ranges do not overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    bytes.len()
}
