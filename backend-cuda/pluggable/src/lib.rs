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
//! the environment). A block belongs to the stream it was allocated on, and its free is
//! stream-ordered (see [`tagalloc_cuda::DevicePool`]).
//!
//! **The free gets only an address.** [`Allocator`] keeps, per device, a map from address to
//! the block handed out there, one hash insert per allocation and one removal per free; the
//! device pool itself keeps no such map (a Rust caller holds its blocks). The detached heap itself cannot answer "which block
//! starts here": its records are linked by neighbour and by bin, and a free reaches its
//! record in `O(1)` through the handle a Rust caller keeps; an index by address in the core
//! (a radix tree over granules, updated on every split and merge) would cost every user of
//! the heap for the sake of callers that lose the handle.
//!
//! **Errors never unwind into C.** Every entry point catches panics; a failed allocation
//! returns null (PyTorch then raises its out-of-memory error), and
//! [`tagalloc_last_error`] says why: the pool's message with its figures, or, with no driver
//! or no device, what is missing.
//!
//! The generic layer ([`Allocator`]) runs over any [`Driver`]; the exported functions use it
//! over the real driver, and the tests over the fake one.

use core::ffi::{c_char, c_int, c_void};
use std::collections::HashMap;
use std::ffi::CString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, OnceLock};

pub mod snapshot_json;

use tagalloc_cuda::{
    AddrHash, BlockState, CuStream, CudaDriver, DeviceBlock, DeviceConfig, DeviceError, DevicePtr,
    Driver, DriverError, PoolRegistry, Regions,
};

/// What [`tagalloc_stats`] fills in: bytes, counts, and whether the pool works.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TagallocStats {
    /// 0: the figures below are the device's pool's; otherwise no pool could be had (see
    /// [`tagalloc_last_error`]): -1 no driver, no device, or a bad ordinal; -2 a null `out`.
    pub status: i32,
    /// Bytes in blocks handed out (rounded to the 256-byte granule), pending frees included.
    pub in_use: u64,
    /// The most bytes in use at once.
    pub peak_in_use: u64,
    /// Bytes held from the driver.
    pub reserved: u64,
    /// The most bytes held at once.
    pub peak_reserved: u64,
    /// Bytes freed on one stream that other streams wait for (their events).
    pub pending: u64,
    /// Allocations and frees so far.
    pub allocations: u64,
    /// Frees so far (stream-ordered frees counted when they reach the heap).
    pub frees: u64,
    /// Regions held from the driver (1 with virtual-memory growth).
    pub regions: u64,
    // Appended later: new fields only ever go at the end, so existing offsets stay put.
    /// Chunks handed out now, pending frees included.
    pub live_blocks: u64,
    /// Blocks pending (freed on their stream, waiting for their events).
    pub pending_blocks: u64,
    /// Allocations that ran out while frees were pending, waited for the device, and tried
    /// again (the device pool's `exhaustion_retries`).
    pub exhaustion_retries: u64,
    /// Allocations that failed, gave back every wholly free region, and tried again (the core
    /// pool's `retries`). One request can count here and in `exhaustion_retries`.
    pub pool_retries: u64,
    /// Regions obtained from the driver.
    pub regions_obtained: u64,
    /// Regions given back whole.
    pub regions_given_back: u64,
    /// Times a region grew in place (with virtual-memory growth: one more mapping).
    pub grown: u64,
    /// Times a region's free end was given back (unmapped).
    pub shrunk: u64,
    /// Host synchronisations (switching to several streams, running out of memory).
    pub synchronizations: u64,
    /// Events recorded.
    pub events_recorded: u64,
    /// Events queried.
    pub event_queries: u64,
    /// Waits for a stream instead of growing, when pending frees held more than their share
    /// of the pool.
    pub stream_waits: u64,
}

/// The blocks handed out on one device, by address.
type Blocks<S> = HashMap<usize, DeviceBlock<S>, AddrHash>;

/// The allocator over driver `D`: a registry of pools, one per device, and for each device the
/// blocks handed out there, by address, since a C caller frees by address.
///
/// Invariant: every block in `blocks[d]` was allocated from device `d`'s pool and is not
/// freed. Lock order: a device's map, then its pool (never the other way round).
pub struct Allocator<D: Driver> {
    registry: PoolRegistry<D>,
    blocks: Box<[Mutex<Blocks<D::Stream>>]>,
}

impl<D: Driver> Allocator<D> {
    /// An allocator over `registry`.
    pub fn new(registry: PoolRegistry<D>) -> Allocator<D> {
        let blocks = (0..registry.device_count())
            .map(|_| Mutex::new(Blocks::default()))
            .collect();
        Allocator { registry, blocks }
    }

    fn device(&self, device: c_int) -> Result<u32, String> {
        u32::try_from(device).map_err(|_| format!("bad device ordinal {device}"))
    }

    /// The map of the blocks handed out on `device` (a valid ordinal: its pool exists). A
    /// panic while it was held leaves no half-made change: carry on.
    fn blocks(&self, device: u32) -> MutexGuard<'_, Blocks<D::Stream>> {
        self.blocks[device as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `size` bytes on `device`, on `stream`; `None` for a size of 0 (nothing to allocate).
    pub fn malloc(
        &self,
        size: isize,
        device: c_int,
        stream: D::Stream,
    ) -> Result<Option<DevicePtr>, String> {
        let size = usize::try_from(size).map_err(|_| format!("bad size {size}"))?;
        if size == 0 {
            return Ok(None);
        }
        let device = self.device(device)?;
        let pool = self.registry.get(device).map_err(message)?;
        let block = pool.alloc(size, stream).map_err(message)?;
        self.blocks(device).insert(block.ptr().0 as usize, block);
        Ok(Some(block.ptr()))
    }

    /// Frees the block at `ptr` on its stream. `size` (when not negative) must be the size
    /// it was allocated with: a mismatch is refused, the block kept.
    pub fn free(&self, ptr: DevicePtr, size: isize, device: c_int) -> Result<(), String> {
        let device = self.device(device)?;
        let pool = self.registry.get(device).map_err(message)?;
        let mut blocks = self.blocks(device);
        let block = *blocks.get(&(ptr.0 as usize)).ok_or_else(|| unknown(ptr))?;
        if size >= 0 && size as usize != block.size() {
            return Err(format!(
                "free of {:#x} with size {size}; it was allocated with {}",
                ptr.0,
                block.size()
            ));
        }
        blocks.remove(&(ptr.0 as usize));
        pool.free(block).map_err(message)
    }

    /// Verifies every invariant: each created pool's (see `DevicePool::check`), and that
    /// every block in the maps is live in its device's pool at its address.
    pub fn check(&self) -> Result<(), String> {
        for pool in self.registry.created() {
            let blocks = self.blocks(pool.device());
            pool.with(|p| {
                p.check()?;
                for (&at, b) in blocks.iter() {
                    if b.ptr().0 as usize != at || !p.chunk_is_live(b) {
                        return Err(format!("address map entry {at:#x} is not a live block"));
                    }
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Marks the block at `ptr` (on whichever device holds it) as used on `stream` too.
    pub fn record_stream(&self, ptr: DevicePtr, stream: D::Stream) -> Result<(), String> {
        for pool in self.registry.created() {
            let blocks = self.blocks(pool.device());
            if let Some(block) = blocks.get(&(ptr.0 as usize)) {
                return pool.record_stream(block, stream).map_err(message);
            }
        }
        Err(unknown(ptr))
    }

    /// Empties the cache of `device`, or of every device created so far for -1.
    pub fn empty_cache(&self, device: c_int) -> Result<(), String> {
        let pools = if device == -1 {
            self.registry.created()
        } else {
            vec![self.registry.get(self.device(device)?).map_err(message)?]
        };
        for pool in pools {
            pool.trim().map_err(message)?;
        }
        Ok(())
    }

    /// The statistics of `device`'s pool.
    pub fn stats(&self, device: c_int) -> Result<TagallocStats, String> {
        let pool = self.registry.get(self.device(device)?).map_err(message)?;
        let s = pool.stats();
        Ok(TagallocStats {
            status: 0,
            in_use: s.pool.heap.in_use as u64,
            peak_in_use: s.pool.heap.peak_in_use as u64,
            reserved: s.pool.reserved as u64,
            peak_reserved: s.pool.peak_reserved as u64,
            pending: s.pending_bytes as u64,
            allocations: s.pool.heap.allocs,
            frees: s.pool.heap.frees,
            regions: s.pool.heap.regions as u64,
            live_blocks: s.pool.heap.live as u64,
            pending_blocks: s.pending_blocks as u64,
            exhaustion_retries: s.counters.exhaustion_retries,
            pool_retries: s.pool.retries,
            regions_obtained: s.pool.regions_obtained,
            regions_given_back: s.pool.regions_given_back,
            grown: s.pool.grown,
            shrunk: s.pool.shrunk,
            synchronizations: s.counters.synchronizations,
            events_recorded: s.counters.events_recorded,
            event_queries: s.counters.event_queries,
            stream_waits: s.counters.stream_waits,
        })
    }

    /// The pool of `device` as JSON in the shape of PyTorch's snapshot segments (see
    /// [`snapshot_json`]); `stream_number` gives the integer written for a stream.
    pub fn snapshot_json(
        &self,
        device: c_int,
        stream_number: impl Fn(D::Stream) -> u64,
    ) -> Result<String, String> {
        let ordinal = self.device(device)?;
        let pool = self.registry.get(ordinal).map_err(message)?;
        let blocks = self.blocks(ordinal);
        let mut regions = pool.lock().snapshot();
        for b in regions.iter_mut().flat_map(|r| &mut r.blocks) {
            if let (BlockState::Allocated, Some(h)) = (b.state, blocks.get(&b.addr)) {
                b.requested = Some(h.size());
                b.stream = Some(h.stream());
            }
        }
        drop(blocks);
        Ok(snapshot_json::snapshot_json(
            ordinal,
            &regions,
            stream_number,
        ))
    }
}

fn message(e: DeviceError) -> String {
    e.to_string()
}

/// The message for an address that is not a live block this allocator handed out.
fn unknown(ptr: DevicePtr) -> String {
    format!("device pool: {:#x} is not a live block", ptr.0)
}

/// The configuration from the environment: `TAGALLOC_CUDA_REGIONS=plain` for plain regions,
/// else virtual-memory growth.
pub fn config_from_env() -> DeviceConfig {
    match std::env::var("TAGALLOC_CUDA_REGIONS").as_deref() {
        Ok("plain") => DeviceConfig {
            regions: Regions::PLAIN,
            ..DeviceConfig::PLAIN
        },
        _ => DeviceConfig::VMM,
    }
}

/// The process's allocator over the real driver, or why there is none.
fn global() -> &'static Result<Allocator<CudaDriver>, DriverError> {
    static GLOBAL: OnceLock<Result<Allocator<CudaDriver>, DriverError>> = OnceLock::new();
    GLOBAL.get_or_init(|| PoolRegistry::cuda(config_from_env()).map(Allocator::new))
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
