//! The allocators under test, each behind one driver trait ([`Subject`]) so that every benchmark
//! is written once and monomorphised per allocator (static dispatch: a virtual call per
//! operation would blur differences of a few nanoseconds).
//!
//! Two kinds of subject:
//! - **host** allocators own real memory: they get an [`Arena`] (the same one, in turn), and a
//!   realloc that moves copies the contents. glibc alone brings its own memory.
//! - **address** allocators only hand out ranges of an address space and never touch memory
//!   (tagalloc's detached heap, offset-allocator): what device memory needs. A realloc that
//!   cannot stay in place moves the range without copying anything, so their timings are not
//!   directly comparable with the host ones.
//!
//! Three adapters make subjects, so that no call is written twice:
//! - [`Tagalloc`]: either of tagalloc's heaps through the core's own adapter
//!   (`tagalloc::model::Adapter`, the one its tests, fuzz targets and trace replay use).
//! - `Host`: any peer that speaks `GlobalAlloc`'s language (`HostPeer`: a pointer, the size
//!   and alignment it was asked for); peers with a `GlobalAlloc` implementation (glibc's malloc
//!   through `System`, talc) go through it, the others say in a few lines how they allocate
//!   and free, and those without a realloc of their own move blocks as `GlobalAlloc` does.
//! - the address peers, offset-allocator and the bump pointer over addresses, each its own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::{null_mut, NonNull};

use tagalloc::model::{self, Adapter as _, DetachedAdapter, InlineAdapter, Memory};
use tagalloc::{BinShape, DetachedHeap, Error, HostGranule, InlineHeap, Record, Tally};

use crate::bump::Bump;
use crate::report;

/// An allocator under test.
///
/// Sizes are never 0 (the benchmarks ask for at least one byte, as `malloc(0)` does) and
/// alignments are powers of two.
pub trait Subject {
    /// What an allocation is known by: a pointer, an offset, or a handle.
    type Block: Copy;

    /// Allocates `size` bytes aligned to `align`; `None` when the allocator refuses.
    fn alloc(&mut self, size: usize, align: usize) -> Option<Self::Block>;

    /// Frees a block.
    ///
    /// # Safety
    /// `block` must be live: returned by this subject's `alloc` or `realloc` with this `size`
    /// and `align`, and not freed or reallocated since.
    unsafe fn free(&mut self, block: Self::Block, size: usize, align: usize);

    /// Resizes a block to `new_size`, in place or by moving (host memory: copying the
    /// contents). `None` when the allocator refuses; the old block is still live then.
    ///
    /// # Safety
    /// As for [`Subject::free`]; on success the old block must not be used again unless it
    /// was returned.
    unsafe fn realloc(
        &mut self,
        block: Self::Block,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> Option<Self::Block>;

    /// The first byte of `block` in the subject's address space.
    fn addr(&self, block: &Self::Block) -> usize;

    /// For an allocator that is not confined to an arena (glibc): the bytes `block` takes in
    /// the allocator's own accounting. `None` for arena allocators, whose footprint the driver
    /// reads from the addresses they hand out.
    fn chunk_bytes(&self, _block: &Self::Block) -> Option<usize> {
        None
    }

    /// Whether blocks still live at the end of a run must be freed one by one (true where the
    /// memory is not simply dropped with the arena).
    fn needs_cleanup(&self) -> bool {
        false
    }

    /// Runs the allocator's own consistency check where it has one, and reports anything the
    /// adapter saw go wrong (a refused free, say).
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Memory for the host arena allocators: one page-aligned block from the system, written once
/// up front so that no allocator's timings include the page faults of first touch.
pub struct Arena {
    ptr: NonNull<u8>,
    layout: Layout,
}

// An arena is never empty (`new` gives at least 64 KiB), so an `is_empty` would only ever say
// false.
#[allow(clippy::len_without_is_empty)]
impl Arena {
    /// `len` bytes (rounded up to pages), every page touched.
    pub fn new(len: usize) -> Result<Arena, String> {
        let len = len.max(1 << 16).next_multiple_of(PAGE);
        let layout = Layout::from_size_align(len, PAGE)
            .map_err(|_| format!("an arena of {len} bytes is too large"))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { System.alloc(layout) }).ok_or_else(|| {
            format!(
                "cannot get {} of memory for the arena",
                crate::report::bytes(len as u64)
            )
        })?;
        for off in (0..len).step_by(PAGE) {
            // SAFETY: `off < len`, inside the block just allocated.
            unsafe { ptr.as_ptr().add(off).write_volatile(0) };
        }
        Ok(Arena { ptr, layout })
    }

    /// Bytes in the arena.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// The arena's first byte (page-aligned), for a region source that hands out parts of it.
    pub fn base(&mut self) -> NonNull<u8> {
        self.ptr
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { System.dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

const PAGE: usize = 4096;

/// Where a subject's blocks come from.
pub enum Space<'a> {
    /// Real memory, borrowed for as long as the subject lives.
    Host(&'a mut Arena),
    /// Addresses `base..base + len` that are never dereferenced.
    Addresses { base: usize, len: usize },
}

impl<'a> Space<'a> {
    /// The space `peer` runs in: the shared host arena for a host allocator, else `len`
    /// never-touched addresses at [`VIRTUAL_BASE`].
    pub fn for_peer(peer: Peer, arena: &'a mut Arena, len: usize) -> Self {
        if peer.is_host() {
            Space::Host(arena)
        } else {
            Space::Addresses {
                base: VIRTUAL_BASE,
                len,
            }
        }
    }

    /// The first address of the space, from which footprints are measured.
    pub fn base(&self) -> usize {
        match self {
            Space::Host(a) => a.ptr.addr().get(),
            Space::Addresses { base, .. } => *base,
        }
    }
}

/// A base for address spaces: far from anything, aligned beyond any request.
pub const VIRTUAL_BASE: usize = 1 << 44;

/// The allocators this tool knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// tagalloc's heap with its tags inside the memory ([`InlineHeap`]).
    Inline,
    /// The same heap without statistics ([`InlineHeap::without_stats`]): same addresses, no
    /// counters updated.
    InlineWithoutStats,
    /// The same heap with the bins of small machines ([`InlineHeap::compact`]): same
    /// addresses, lists only up to 64 granules.
    InlineCompact,
    /// tagalloc's heap with detached tags ([`DetachedHeap`], growable table), granule in bytes.
    Detached(usize),
    /// glibc's malloc through `std::alloc::System`.
    Glibc,
    /// talc 5 over a `Manual` source, given the arena with `claim`.
    Talc,
    /// rlsf's TLSF, as its own global allocator configures it.
    Rlsf,
    /// dlmalloc's Rust port, fed the arena as its only system memory.
    Dlmalloc,
    /// linked_list_allocator's first-fit `Heap`.
    LinkedList,
    /// buddy_system_allocator's `Heap`.
    Buddy,
    /// offset-allocator (Sebastian Aaltonen's OffsetAllocator), unit in bytes.
    Offset(usize),
    /// The bump pointer over real memory (copies on a moving realloc).
    Bump,
    /// The bump pointer over addresses only.
    BumpAddresses,
}

impl Peer {
    /// The names the lab's examples (`lab/examples/profile.rs`, `counters.rs`) take on their
    /// command lines, with the allocators they name.
    pub const EXAMPLE_NAMES: [(&'static str, Peer); 6] = [
        ("tagalloc", Peer::Inline),
        ("tagalloc-nostats", Peer::InlineWithoutStats),
        ("tagalloc-compact", Peer::InlineCompact),
        ("talc", Peer::Talc),
        ("dlmalloc", Peer::Dlmalloc),
        ("rlsf", Peer::Rlsf),
    ];

    /// The allocator a lab example's command line names (see [`Peer::EXAMPLE_NAMES`]).
    pub fn by_example_name(name: &str) -> Option<Peer> {
        Peer::EXAMPLE_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, p)| p)
    }

    /// talc's name in every table and chart: it says when talc keeps its own counters (the
    /// bench's `talc-counters` feature), so that no table of that build reads as talc as it
    /// ships.
    pub const TALC_NAME: &'static str = if cfg!(feature = "talc-counters") {
        "talc, with its counters"
    } else {
        "talc"
    };

    /// The host allocators, tagalloc's first (every ratio is taken against it).
    pub const HOST: [Peer; 10] = [
        Peer::Inline,
        Peer::InlineWithoutStats,
        Peer::InlineCompact,
        Peer::Talc,
        Peer::Rlsf,
        Peer::Dlmalloc,
        Peer::LinkedList,
        Peer::Buddy,
        Peer::Glibc,
        Peer::Bump,
    ];

    /// The address allocators at the host granule.
    pub const ADDRESSES: [Peer; 2] = [Peer::Detached(16), Peer::Offset(16)];

    /// The allocators for the device-memory trace.
    pub const DEVICE: [Peer; 5] = [
        Peer::Detached(256),
        Peer::Detached(512),
        Peer::Offset(256),
        Peer::Offset(512),
        Peer::BumpAddresses,
    ];

    /// The name shown in tables and plots.
    pub fn name(self) -> String {
        match self {
            Peer::Inline => "tagalloc inline".into(),
            Peer::InlineWithoutStats => "tagalloc inline, no statistics".into(),
            Peer::InlineCompact => "tagalloc inline, compact bins".into(),
            Peer::Detached(g) => format!("tagalloc detached ({g} B)"),
            Peer::Glibc => "glibc malloc".into(),
            Peer::Talc => Peer::TALC_NAME.into(),
            Peer::Rlsf => "rlsf".into(),
            Peer::Dlmalloc => "dlmalloc".into(),
            Peer::LinkedList => "linked_list_allocator".into(),
            Peer::Buddy => "buddy_system_allocator".into(),
            Peer::Offset(u) => format!("offset-allocator ({u} B units)"),
            Peer::Bump => "bump (reference)".into(),
            Peer::BumpAddresses => "bump (reference, addresses)".into(),
        }
    }

    /// A short name without spaces, for the command line (`--only talc,dlmalloc`).
    pub fn key(self) -> String {
        match self {
            Peer::Inline => "tagalloc_inline".into(),
            Peer::InlineWithoutStats => "tagalloc_inline_nostats".into(),
            Peer::InlineCompact => "tagalloc_inline_compact".into(),
            Peer::Detached(g) => format!("tagalloc_detached_{g}"),
            Peer::Glibc => "glibc".into(),
            Peer::Talc => "talc".into(),
            Peer::Rlsf => "rlsf".into(),
            Peer::Dlmalloc => "dlmalloc".into(),
            Peer::LinkedList => "linked_list_allocator".into(),
            Peer::Buddy => "buddy_system_allocator".into(),
            Peer::Offset(u) => format!("offset_allocator_{u}"),
            Peer::Bump => "bump".into(),
            Peer::BumpAddresses => "bump_addresses".into(),
        }
    }

    /// Every peer any benchmark runs.
    fn all() -> impl Iterator<Item = Peer> {
        Peer::HOST
            .into_iter()
            .chain(Peer::ADDRESSES)
            .chain(Peer::DEVICE)
    }

    /// `Ok` if every key names a peer ([`Peer::key`]), else what is wrong, with the keys
    /// there are.
    pub fn check_keys(keys: &[String]) -> Result<(), String> {
        match keys.iter().find(|k| !Peer::all().any(|p| p.key() == **k)) {
            None => Ok(()),
            Some(k) => {
                let known: Vec<String> = Peer::all().map(Peer::key).collect();
                Err(format!(
                    "names an unknown allocator `{k}` (expected some of {})",
                    known.join(", ")
                ))
            }
        }
    }

    /// The peers of `among` that `keys` name, in `among`'s order, and `baseline` whatever they
    /// name (every ratio is taken against it; the lists the benchmarks pass start with it);
    /// no keys: all of `among`.
    pub fn selected(among: &[Peer], keys: &[String], baseline: Peer) -> Vec<Peer> {
        among
            .iter()
            .copied()
            .filter(|&p| p == baseline || keys.is_empty() || keys.contains(&p.key()))
            .collect()
    }

    /// Whether the peer hands out real memory (and so needs an arena) rather than addresses.
    pub fn is_host(self) -> bool {
        !matches!(
            self,
            Peer::Detached(_) | Peer::Offset(_) | Peer::BumpAddresses
        )
    }

    /// Whether the peer is confined to the space it is given (all but glibc).
    pub fn has_arena(self) -> bool {
        self != Peer::Glibc
    }
}

/// How to build a subject beyond its space.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// Let the bump allocator wrap around (speed benchmarks only; see `bump::Bump`).
    pub wrap: bool,
    /// offset-allocator's node count: it refuses requests beyond this many chunks.
    pub max_allocs: u32,
}

/// A benchmark, run once per subject: [`with_subject`] builds the subject and calls it, so the
/// benchmark is compiled once for each allocator type.
pub trait Bench {
    /// What one run reports.
    type Out;
    /// Runs on `subject`, whose addresses start at `base`.
    fn run<S: Subject>(&mut self, subject: S, base: usize) -> Self::Out;
}

/// Builds `peer` over `space` and runs `bench` on it.
pub fn with_subject<B: Bench>(
    peer: Peer,
    space: Space<'_>,
    setup: Setup,
    bench: &mut B,
) -> Result<B::Out, String> {
    let base = space.base();
    let mismatch = || format!("{} cannot run over this kind of space", peer.name());
    Ok(match (peer, space) {
        (Peer::Glibc, _) => bench.run(Host::without_arena(System), 0),
        (Peer::Inline, Space::Host(a)) => bench.run(tagalloc_inline(a, InlineHeap::new())?, base),
        (Peer::InlineWithoutStats, Space::Host(a)) => {
            bench.run(tagalloc_inline(a, InlineHeap::without_stats())?, base)
        }
        (Peer::InlineCompact, Space::Host(a)) => {
            bench.run(tagalloc_inline(a, InlineHeap::compact())?, base)
        }
        (Peer::Talc, Space::Host(a)) => bench.run(talc(a)?, base),
        (Peer::Rlsf, Space::Host(a)) => bench.run(rlsf(a), base),
        (Peer::Dlmalloc, Space::Host(a)) => bench.run(dlmalloc(a), base),
        (Peer::LinkedList, Space::Host(a)) => bench.run(linked_list(a), base),
        (Peer::Buddy, Space::Host(a)) => bench.run(buddy(a), base),
        (Peer::Bump, Space::Host(a)) => bench.run(host_bump(a, setup.wrap), base),
        (Peer::Detached(g), Space::Addresses { base, len }) => {
            bench.run(Tagalloc::detached(g, base, len)?, base)
        }
        (Peer::Offset(u), Space::Addresses { base, len }) => {
            bench.run(Offset::new(u, base, len, setup.max_allocs)?, base)
        }
        (Peer::BumpAddresses, Space::Addresses { base, len }) => {
            bench.run(AddressBump(Bump::new(base, len, setup.wrap)), base)
        }
        _ => return Err(mismatch()),
    })
}

fn layout(size: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(size, align).ok()
}

// SAFETY: the arena's bytes are valid for its length for as long as it lives, and a subject
// over it holds it borrowed mutably, so nothing else uses them meanwhile.
unsafe impl Memory for Arena {
    fn ranges(&mut self) -> impl Iterator<Item = (NonNull<u8>, usize)> {
        std::iter::once((self.ptr, self.len()))
    }
}

/// One of tagalloc's heaps, through the adapter the core's tests, the fuzz targets and the
/// trace replay drive it with ([`tagalloc::model::Adapter`]): the heap's own calls, nothing
/// added on their way. A refused free or resize is counted and reported by `check`.
pub struct Tagalloc<A> {
    heap: A,
    refused: u64,
}

/// tagalloc's inline heap `heap` (with or without statistics, of either bin shape) over the
/// whole arena, as one region.
pub fn tagalloc_inline<K: Tally, B: BinShape>(
    arena: &mut Arena,
    heap: InlineHeap<HostGranule, K, B>,
) -> Result<Tagalloc<InlineAdapter<&mut Arena, HostGranule, K, B>>, String> {
    let (base, len) = (arena.ptr.addr().get(), arena.len());
    let mut heap = InlineAdapter::new(heap, arena);
    heap.add_region(base, len)
        .map_err(|e| format!("tagalloc inline: add_region: {e}"))?;
    Ok(Tagalloc { heap, refused: 0 })
}

impl Tagalloc<DetachedAdapter<Vec<Record>>> {
    /// The detached heap over `base..base + len`, its record table growing on the heap.
    fn detached(granule: usize, base: usize, len: usize) -> Result<Self, String> {
        let err = |e: Error| format!("tagalloc detached: {e}");
        let mut heap = DetachedAdapter::new(DetachedHeap::growable(granule).map_err(err)?);
        heap.add_region(base, len).map_err(err)?;
        Ok(Tagalloc { heap, refused: 0 })
    }
}

impl<A: model::Adapter> Subject for Tagalloc<A> {
    type Block = A::H;
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> Option<A::H> {
        self.heap.alloc(size, align).ok()
    }
    #[inline]
    unsafe fn free(&mut self, block: A::H, size: usize, _align: usize) {
        // SAFETY: `block` is a live block of this heap of `size` bytes (caller contract).
        if unsafe { self.heap.free(block, size) }.is_err() {
            self.refused += 1;
        }
    }
    #[inline]
    unsafe fn realloc(
        &mut self,
        block: A::H,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> Option<A::H> {
        // SAFETY: as for `free`; the caller uses only the returned block afterwards.
        match unsafe { self.heap.realloc(block, size, align, new_size) } {
            Ok(b) => Some(b),
            Err(e) => {
                self.refused += u64::from(e != Error::OutOfMemory);
                None
            }
        }
    }
    fn addr(&self, block: &A::H) -> usize {
        A::addr(block)
    }
    fn check(&self) -> Result<(), String> {
        self.heap.check().map_err(|e| e.to_string())?;
        match self.refused {
            0 => Ok(()),
            n => Err(format!("{} refused", report::counted(n, "free", "frees"))),
        }
    }
}

/// A peer that hands out real memory, in `GlobalAlloc`'s terms (a pointer, null for a refusal)
/// by `&mut self`: [`Host`] makes a [`Subject`] of it.
trait HostPeer {
    /// `size` bytes aligned to `align` (as for [`Subject::alloc`]), or null.
    fn alloc(&mut self, size: usize, align: usize) -> *mut u8;

    /// Frees a block.
    ///
    /// # Safety
    /// As for [`Subject::free`].
    unsafe fn free(&mut self, ptr: *mut u8, size: usize, align: usize);

    /// Resizes a block, or returns null and leaves it live. Unless the peer has a realloc of
    /// its own, the block moves the way `GlobalAlloc::realloc` moves it by default: allocate,
    /// copy, free.
    ///
    /// # Safety
    /// As for [`Subject::realloc`].
    unsafe fn realloc(&mut self, ptr: *mut u8, size: usize, align: usize, new: usize) -> *mut u8 {
        let moved = self.alloc(new, align);
        if !moved.is_null() {
            // SAFETY: both blocks are live and distinct, each at least `min(size, new)` long.
            unsafe { std::ptr::copy_nonoverlapping(ptr, moved, size.min(new)) };
            // SAFETY: `ptr` is live with this layout (caller contract) and not used again.
            unsafe { self.free(ptr, size, align) };
        }
        moved
    }

    /// As [`Subject::chunk_bytes`].
    fn chunk_bytes(&self, _block: NonNull<u8>) -> Option<usize> {
        None
    }

    /// As [`Subject::needs_cleanup`].
    fn needs_cleanup(&self) -> bool {
        false
    }
}

/// A host peer as a [`Subject`], holding the arena it was built over borrowed for as long as
/// it lives (glibc, which brings its own memory, holds none).
struct Host<'a, P> {
    peer: P,
    _arena: PhantomData<&'a mut Arena>,
}

impl<'a, P: HostPeer> Host<'a, P> {
    /// `peer`, built over `arena`, which stays borrowed while the subject lives.
    fn over(_arena: &'a mut Arena, peer: P) -> Self {
        Host {
            peer,
            _arena: PhantomData,
        }
    }

    /// A peer that uses no arena.
    fn without_arena(peer: P) -> Self {
        Host {
            peer,
            _arena: PhantomData,
        }
    }
}

impl<P: HostPeer> Subject for Host<'_, P> {
    type Block = NonNull<u8>;
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> Option<NonNull<u8>> {
        NonNull::new(self.peer.alloc(size, align))
    }
    #[inline]
    unsafe fn free(&mut self, block: NonNull<u8>, size: usize, align: usize) {
        // SAFETY: forwarded caller contract.
        unsafe { self.peer.free(block.as_ptr(), size, align) }
    }
    #[inline]
    unsafe fn realloc(
        &mut self,
        block: NonNull<u8>,
        size: usize,
        align: usize,
        new_size: usize,
    ) -> Option<NonNull<u8>> {
        // SAFETY: forwarded caller contract.
        NonNull::new(unsafe { self.peer.realloc(block.as_ptr(), size, align, new_size) })
    }
    fn addr(&self, block: &NonNull<u8>) -> usize {
        block.addr().get()
    }
    fn chunk_bytes(&self, block: &NonNull<u8>) -> Option<usize> {
        self.peer.chunk_bytes(*block)
    }
    fn needs_cleanup(&self) -> bool {
        self.peer.needs_cleanup()
    }
}

/// A peer used through its own `GlobalAlloc` implementation: glibc's malloc (through the
/// standard library's `System`) and talc's `TalcCell`.
trait GlobalPeer: GlobalAlloc {
    /// As [`Subject::chunk_bytes`].
    fn own_chunk_bytes(&self, _block: NonNull<u8>) -> Option<usize> {
        None
    }
    /// As [`Subject::needs_cleanup`].
    const NEEDS_CLEANUP: bool = false;
}

impl<A: GlobalPeer> HostPeer for A {
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> *mut u8 {
        match layout(size, align) {
            // SAFETY: the layout's size is non-zero (the trait's promise).
            Some(l) => unsafe { GlobalAlloc::alloc(self, l) },
            None => null_mut(),
        }
    }
    #[inline]
    unsafe fn free(&mut self, ptr: *mut u8, size: usize, align: usize) {
        if let Some(l) = layout(size, align) {
            // SAFETY: `ptr` came from this allocator with this layout (caller contract).
            unsafe { self.dealloc(ptr, l) }
        }
    }
    #[inline]
    unsafe fn realloc(&mut self, ptr: *mut u8, size: usize, align: usize, new: usize) -> *mut u8 {
        match (layout(size, align), layout(new, align)) {
            // SAFETY: as for `free`; the new layout is valid and non-zero.
            (Some(l), Some(_)) => unsafe { GlobalAlloc::realloc(self, ptr, l, new) },
            _ => null_mut(),
        }
    }
    fn chunk_bytes(&self, block: NonNull<u8>) -> Option<usize> {
        self.own_chunk_bytes(block)
    }
    fn needs_cleanup(&self) -> bool {
        A::NEEDS_CLEANUP
    }
}

/// glibc's malloc: not confined to the arena, so its footprint is read from its own
/// accounting, and what a run leaves live is freed one by one.
impl GlobalPeer for System {
    fn own_chunk_bytes(&self, block: NonNull<u8>) -> Option<usize> {
        glibc_chunk_bytes(block)
    }
    const NEEDS_CLEANUP: bool = true;
}

/// The bytes of glibc's chunk for `block`: its usable size plus the 8-byte size header.
///
/// Not what glibc holds from the system: its heap already holds this process's own freed
/// memory (the trace parser's, say), which it reuses, so that cannot be attributed to a replay.
/// The chunks of the live blocks can, exactly, at every event.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_chunk_bytes(block: NonNull<u8>) -> Option<usize> {
    // SAFETY: `block` is a live allocation of glibc's malloc (the glibc subject's blocks come
    // from `System`, which is glibc's malloc here).
    Some(unsafe { libc::malloc_usable_size(block.as_ptr().cast()) } + 8)
}

/// Not glibc: no figure.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_chunk_bytes(_block: NonNull<u8>) -> Option<usize> {
    None
}

/// talc 5 as its docs suggest for single-threaded arena use: allocation through its
/// `GlobalAlloc` implementation (talc's own in-place realloc included).
impl GlobalPeer for talc::TalcCell<talc::source::Manual> {}

/// talc 5 over a `TalcCell` with the `Manual` source (which never asks for more memory), the
/// arena given with `claim`.
fn talc(arena: &mut Arena) -> Result<Host<'_, talc::TalcCell<talc::source::Manual>>, String> {
    let talc = talc::TalcCell::new(talc::source::Manual);
    // SAFETY: the arena is borrowed mutably for as long as the subject lives (`Host::over`);
    // nothing else touches it meanwhile. `Manual` allows manual heap management.
    unsafe { talc.claim(arena.ptr.as_ptr(), arena.len()) }
        .ok_or("talc: claim refused the arena")?;
    Ok(Host::over(arena, talc))
}

/// rlsf's TLSF with the parameters of its own global allocator (`FLLEN = SLLEN = usize::BITS`).
type Tlsf<'a> = rlsf::Tlsf<'a, usize, usize, { usize::BITS as usize }, { usize::BITS as usize }>;

/// rlsf's TLSF with the arena as its one pool.
fn rlsf(arena: &mut Arena) -> Host<'_, Tlsf<'_>> {
    let mut tlsf = Tlsf::new();
    let pool = NonNull::slice_from_raw_parts(arena.ptr, arena.len());
    // SAFETY: the pool is the arena, borrowed mutably for as long as the subject lives (the
    // pool lifetime of `Tlsf`); nothing else touches it meanwhile.
    unsafe { tlsf.insert_free_block_ptr(pool) };
    Host::over(arena, tlsf)
}

/// A block as a `GlobalAlloc` pointer, null for `None` (what rlsf, linked_list_allocator and
/// buddy_system_allocator return on a refusal, as does a layout that cannot be made).
fn nullable(block: Option<NonNull<u8>>) -> *mut u8 {
    block.map_or(null_mut(), NonNull::as_ptr)
}

impl HostPeer for Tlsf<'_> {
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> *mut u8 {
        nullable(layout(size, align).and_then(|l| self.allocate(l)))
    }
    #[inline]
    unsafe fn free(&mut self, ptr: *mut u8, _size: usize, align: usize) {
        if let Some(block) = NonNull::new(ptr) {
            // SAFETY: `block` came from this pool with alignment `align` (caller contract).
            unsafe { self.deallocate(block, align) }
        }
    }
    #[inline]
    unsafe fn realloc(&mut self, ptr: *mut u8, _size: usize, align: usize, new: usize) -> *mut u8 {
        let (Some(block), Some(l)) = (NonNull::new(ptr), layout(new, align)) else {
            return null_mut();
        };
        // SAFETY: `block` came from this pool with the same alignment (caller contract).
        nullable(unsafe { self.reallocate(block, l) })
    }
}

/// dlmalloc's system interface, answering its first request with the whole arena and every
/// later one with nothing: dlmalloc then works inside a fixed arena, as talc's benchmarks run
/// it.
struct ArenaSource {
    ptr: NonNull<u8>,
    len: usize,
    given: Cell<bool>,
}

// SAFETY: the source only passes on a pointer to the arena, which the subject owns exclusively
// for its life; moving that to another thread is as sound as moving the arena borrow.
unsafe impl Send for ArenaSource {}

/// dlmalloc's flag for memory it must never release or merge ("extern segment").
const DL_EXTERN: u32 = 1;

// SAFETY: `alloc` hands out the arena once, valid for its length while the subject lives; the
// other calls never hand out or release anything.
unsafe impl dlmalloc::Allocator for ArenaSource {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        if self.given.get() || size > self.len {
            return (std::ptr::null_mut(), 0, 0);
        }
        self.given.set(true);
        (self.ptr.as_ptr(), self.len, DL_EXTERN)
    }
    fn remap(&self, _: *mut u8, _: usize, _: usize, _: bool) -> *mut u8 {
        std::ptr::null_mut()
    }
    fn free_part(&self, _: *mut u8, _: usize, _: usize) -> bool {
        false
    }
    fn free(&self, _: *mut u8, _: usize) -> bool {
        false
    }
    fn can_release_part(&self, _: u32) -> bool {
        false
    }
    fn allocates_zeros(&self) -> bool {
        false
    }
    fn page_size(&self) -> usize {
        PAGE
    }
}

/// dlmalloc's Rust port, fed the arena as its only system memory.
fn dlmalloc(arena: &mut Arena) -> Host<'_, dlmalloc::Dlmalloc<ArenaSource>> {
    let dl = dlmalloc::Dlmalloc::new_with_allocator(ArenaSource {
        ptr: arena.ptr,
        len: arena.len(),
        given: Cell::new(false),
    });
    Host::over(arena, dl)
}

impl HostPeer for dlmalloc::Dlmalloc<ArenaSource> {
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> *mut u8 {
        // SAFETY: size non-zero, align a power of two (the trait's promise).
        unsafe { self.malloc(size, align) }
    }
    #[inline]
    unsafe fn free(&mut self, ptr: *mut u8, size: usize, align: usize) {
        // SAFETY: `ptr` came from this allocator with this size and alignment (caller
        // contract).
        unsafe { dlmalloc::Dlmalloc::free(self, ptr, size, align) }
    }
    #[inline]
    unsafe fn realloc(&mut self, ptr: *mut u8, size: usize, align: usize, new: usize) -> *mut u8 {
        // SAFETY: as for `free`; `new` is non-zero.
        unsafe { dlmalloc::Dlmalloc::realloc(self, ptr, size, align, new) }
    }
}

/// linked_list_allocator's `Heap` (first fit over an address-ordered hole list) over the
/// arena; a realloc moves the block.
fn linked_list(arena: &mut Arena) -> Host<'_, linked_list_allocator::Heap> {
    let mut heap = linked_list_allocator::Heap::empty();
    // SAFETY: the arena is valid and borrowed mutably for as long as the subject lives (the
    // crate asks for 'static only because its heaps usually are global).
    unsafe { heap.init(arena.ptr.as_ptr(), arena.len()) };
    Host::over(arena, heap)
}

impl HostPeer for linked_list_allocator::Heap {
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> *mut u8 {
        nullable(layout(size, align).and_then(|l| self.allocate_first_fit(l).ok()))
    }
    #[inline]
    unsafe fn free(&mut self, ptr: *mut u8, size: usize, align: usize) {
        if let (Some(block), Some(l)) = (NonNull::new(ptr), layout(size, align)) {
            // SAFETY: `block` came from this heap with this layout (caller contract).
            unsafe { self.deallocate(block, l) }
        }
    }
}

/// buddy_system_allocator's `Heap`; 32 orders cover blocks up to 2 GiB.
type Buddy = buddy_system_allocator::Heap<32>;

/// buddy_system_allocator's `Heap` over the arena; a realloc moves the block.
fn buddy(arena: &mut Arena) -> Host<'_, Buddy> {
    let mut heap = Buddy::new();
    // SAFETY: the arena is valid and borrowed mutably for as long as the subject lives; nothing
    // else touches it meanwhile.
    unsafe { heap.init(arena.ptr.addr().get(), arena.len()) };
    Host::over(arena, heap)
}

impl HostPeer for Buddy {
    fn alloc(&mut self, size: usize, align: usize) -> *mut u8 {
        nullable(layout(size, align).and_then(|l| Buddy::alloc(self, l).ok()))
    }
    unsafe fn free(&mut self, ptr: *mut u8, size: usize, align: usize) {
        if let (Some(block), Some(l)) = (NonNull::new(ptr), layout(size, align)) {
            // SAFETY: `block` came from this heap with this layout (caller contract).
            unsafe { self.dealloc(block, l) }
        }
    }
}

/// offset-allocator over an address range counted in `unit`-byte units (its offsets are
/// `u32`). It has no alignment parameter: a request aligned beyond the unit takes enough extra
/// units to align inside, the usual way to use it.
struct Offset {
    alloc: offset_allocator::Allocator<u32>,
    base: usize,
    shift: u32,
}

#[derive(Clone, Copy)]
struct OffsetBlock {
    alloc: offset_allocator::Allocation<u32>,
    addr: usize,
}

impl Offset {
    fn new(unit: usize, base: usize, len: usize, max_allocs: u32) -> Result<Self, String> {
        if !unit.is_power_of_two() || !base.is_multiple_of(unit) {
            return Err(format!("offset-allocator: bad unit {unit}"));
        }
        let units = u32::try_from(len / unit)
            .map_err(|_| format!("offset-allocator: {len} bytes is over 2^32 units of {unit}"))?;
        // `with_max_allocs` asserts this; check it first so that it cannot panic.
        let max_allocs = max_allocs.clamp(2, u32::MAX - 3);
        Ok(Offset {
            alloc: offset_allocator::Allocator::with_max_allocs(units, max_allocs),
            base,
            shift: unit.trailing_zeros(),
        })
    }
}

impl Subject for Offset {
    type Block = OffsetBlock;
    fn alloc(&mut self, size: usize, align: usize) -> Option<OffsetBlock> {
        let unit = 1usize << self.shift;
        let pad = align.saturating_sub(unit);
        let units = u32::try_from(size.checked_add(pad)?.div_ceil(unit)).ok()?;
        let alloc = self.alloc.allocate(units)?;
        let at = self.base + ((alloc.offset as usize) << self.shift);
        Some(OffsetBlock {
            alloc,
            addr: at.next_multiple_of(align.max(unit)),
        })
    }
    unsafe fn free(&mut self, block: OffsetBlock, _size: usize, _align: usize) {
        self.alloc.free(block.alloc);
    }
    unsafe fn realloc(
        &mut self,
        block: OffsetBlock,
        _size: usize,
        align: usize,
        new_size: usize,
    ) -> Option<OffsetBlock> {
        // No resize in its API: a new range, then the old one back (no memory to copy).
        let moved = self.alloc(new_size, align)?;
        self.alloc.free(block.alloc);
        Some(moved)
    }
    fn addr(&self, block: &OffsetBlock) -> usize {
        block.addr
    }
}

/// The bump reference over real memory: a moving realloc copies, as a real one must.
struct HostBump {
    bump: Bump,
    ptr: NonNull<u8>,
}

/// The bump reference over the arena.
fn host_bump(arena: &mut Arena, wrap: bool) -> Host<'_, HostBump> {
    let bump = HostBump {
        bump: Bump::new(arena.ptr.addr().get(), arena.len(), wrap),
        ptr: arena.ptr,
    };
    Host::over(arena, bump)
}

impl HostPeer for HostBump {
    fn alloc(&mut self, size: usize, align: usize) -> *mut u8 {
        match self.bump.alloc(size, align) {
            // SAFETY: the bump range is the arena, so `off + size <= len` stays inside it.
            Some(off) => unsafe { self.ptr.as_ptr().add(off) },
            None => null_mut(),
        }
    }
    unsafe fn free(&mut self, _ptr: *mut u8, _size: usize, _align: usize) {
        self.bump.free();
    }
    unsafe fn realloc(&mut self, ptr: *mut u8, size: usize, align: usize, new: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this arena (caller contract), so both are in one allocation.
        let off = unsafe { ptr.offset_from(self.ptr.as_ptr()) } as usize;
        if self.bump.resize_last(off, new) {
            return ptr;
        }
        let moved = self.alloc(new, align);
        if !moved.is_null() {
            // SAFETY: both ranges lie inside the arena. They may overlap when the bump pointer
            // wrapped, hence `copy` (memmove) rather than `copy_nonoverlapping`.
            unsafe { std::ptr::copy(ptr, moved, size.min(new)) };
            self.bump.free();
        }
        moved
    }
}

/// The bump reference over addresses only.
struct AddressBump(Bump);

impl Subject for AddressBump {
    type Block = usize;
    fn alloc(&mut self, size: usize, align: usize) -> Option<usize> {
        self.0.alloc(size, align)
    }
    unsafe fn free(&mut self, _block: usize, _size: usize, _align: usize) {
        self.0.free();
    }
    unsafe fn realloc(
        &mut self,
        block: usize,
        _size: usize,
        align: usize,
        new_size: usize,
    ) -> Option<usize> {
        if self.0.resize_last(block, new_size) {
            return Some(block);
        }
        let moved = self.0.alloc(new_size, align)?;
        self.0.free();
        Some(moved)
    }
    fn addr(&self, block: &usize) -> usize {
        self.0.base() + block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_name_names_its_allocator_once() {
        for (i, (name, peer)) in Peer::EXAMPLE_NAMES.into_iter().enumerate() {
            assert_eq!(Peer::by_example_name(name), Some(peer));
            assert!(Peer::EXAMPLE_NAMES[..i]
                .iter()
                .all(|&(n, p)| n != name && p != peer));
        }
        assert_eq!(Peer::by_example_name("glibc"), None);
    }

    /// A talc row says when talc keeps its counters (the `talc-counters` build), so that no
    /// table of that build reads as talc as it ships.
    #[test]
    fn the_talc_row_says_whether_talc_counts() {
        let name = Peer::Talc.name();
        assert_eq!(name.contains("counters"), cfg!(feature = "talc-counters"));
        assert_eq!(Peer::Talc.key(), "talc");
    }
}
