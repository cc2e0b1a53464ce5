//! Pools: every policy, hooks, trim, retry, a fault-injecting source, and a property test
//! against the reference model. The sources here hand out ranges of one buffer (inline heaps,
//! so the heap really writes its tags) or of an untouched address space (detached heaps), and
//! keep books of what they handed out, so a leak or a double give-back is caught. Short enough
//! for Miri.

extern crate std;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::string::ToString;
use std::vec::Vec;

use core::ptr::NonNull;

use proptest::prelude::*;

use super::inline::Arena;
use crate::model::{Geometry, Model};
use crate::{
    DetachedHeap, Error, Growth, Hooks, InlineHeap, Policy, PolicyError, Pool, Record,
    RegionSource, Reserve, Scope,
};

/// A fault a source can be told to commit on its `n`-th `obtain` (counting from 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Refuse with `OutOfMemory`.
    Fail,
    /// Hand out less than asked for.
    Tiny,
    /// Hand out a base that is not granule-aligned.
    Misaligned,
    /// Hand out a range overlapping the first region handed out.
    Overlapping,
}

/// The books of a test source: ranges of an address space `0..space` handed out, by offset.
#[derive(Debug, Default)]
struct Books {
    space: usize,
    /// Offset → length of every range handed out and not given back.
    out: BTreeMap<usize, usize>,
    obtains: usize,
    give_backs: usize,
    grows: usize,
    shrinks: usize,
    releases: usize,
    faults: Vec<(usize, Fault)>,
    /// Bytes left to hand out before the source is "exhausted" (`None`: the whole space).
    budget: Option<usize>,
    page: usize,
}

impl Books {
    fn new(space: usize, page: usize) -> Self {
        Books {
            space,
            page,
            ..Default::default()
        }
    }

    /// The lowest offset where `len` bytes are free, after every range handed out.
    fn place(&self, len: usize) -> Option<usize> {
        let mut at = 0;
        for (&o, &l) in &self.out {
            if o >= at + len {
                break;
            }
            at = at.max(o + l);
        }
        (at + len <= self.space).then_some(at)
    }

    fn obtain(&mut self, min: usize) -> Result<(usize, usize), Error> {
        self.obtains += 1;
        let fault = self
            .faults
            .iter()
            .find(|f| f.0 == self.obtains)
            .map(|f| f.1);
        if fault == Some(Fault::Fail) || self.budget.is_some_and(|b| b < min) {
            return Err(Error::OutOfMemory);
        }
        if fault == Some(Fault::Overlapping) {
            if let Some((&o, &l)) = self.out.iter().next() {
                // Not recorded: the pool must refuse it and must not give it back.
                return Ok((o, l.max(min)));
            }
        }
        let at = self.place(min + self.page).ok_or(Error::OutOfMemory)?;
        let (base, len) = match fault {
            Some(Fault::Tiny) => (at, self.page),
            Some(Fault::Misaligned) => (at + 8, min),
            _ => (at, min),
        };
        self.out.insert(base, len);
        if let Some(b) = &mut self.budget {
            *b -= len;
        }
        Ok((base, len))
    }

    fn give_back(&mut self, base: usize, len: usize) {
        self.give_backs += 1;
        assert_eq!(
            self.out.remove(&base),
            Some(len),
            "give_back of {base:#x}+{len:#x}"
        );
        if let Some(b) = &mut self.budget {
            *b += len;
        }
    }

    fn grow(&mut self, base: usize, len: usize, add: usize) -> Result<usize, Error> {
        assert_eq!(
            self.out.get(&base),
            Some(&len),
            "grow of a range not handed out"
        );
        let end = base + len;
        let free = self.out.range(end..).next().map_or(self.space, |(&o, _)| o);
        if end + add > free || self.budget.is_some_and(|b| b < add) {
            return Err(Error::OutOfMemory);
        }
        self.grows += 1;
        self.out.insert(base, len + add);
        if let Some(b) = &mut self.budget {
            *b -= add;
        }
        Ok(add)
    }

    fn shrink(&mut self, base: usize, len: usize, keep: usize) -> bool {
        assert_eq!(
            self.out.get(&base),
            Some(&len),
            "shrink of a range not handed out"
        );
        assert!(keep < len && keep.is_multiple_of(self.page));
        self.shrinks += 1;
        self.out.insert(base, keep);
        if let Some(b) = &mut self.budget {
            *b += len - keep;
        }
        true
    }

    fn inside(&self, start: usize, len: usize) -> bool {
        self.out
            .range(..=start)
            .next_back()
            .is_some_and(|(&o, &l)| start + len <= o + l)
    }
}

/// Ranges of an address space nobody touches, for detached heaps.
struct Addresses {
    base: usize,
    books: Rc<RefCell<Books>>,
    grows: bool,
}

// SAFETY: detached heaps never touch their ranges; the books never hand a range out twice.
unsafe impl RegionSource for Addresses {
    type Base = usize;
    fn addr(b: usize) -> usize {
        b
    }
    fn granularity(&self) -> usize {
        self.books.borrow().page
    }
    fn obtain(&mut self, min: usize) -> Result<(usize, usize), Error> {
        let (o, l) = self.books.borrow_mut().obtain(min)?;
        Ok((self.base + o, l))
    }
    unsafe fn give_back(&mut self, base: usize, len: usize) {
        self.books.borrow_mut().give_back(base - self.base, len);
    }
    fn grow(&mut self, base: usize, len: usize, add: usize) -> Result<usize, Error> {
        if !self.grows {
            return Err(Error::OutOfMemory);
        }
        self.books.borrow_mut().grow(base - self.base, len, add)
    }
    unsafe fn shrink(&mut self, base: usize, len: usize, keep: usize) -> bool {
        self.grows && self.books.borrow_mut().shrink(base - self.base, len, keep)
    }
    fn available(&self) -> Option<usize> {
        let b = self.books.borrow();
        Some(b.budget.unwrap_or(b.space))
    }
}

/// Ranges of one real buffer, for inline heaps; released pages are scribbled over (as if the
/// kernel had dropped them), so a heap that kept anything there would be caught.
struct Memory {
    arena: Arena,
    /// Bytes skipped at the arena's start so that offset 0 is page-aligned.
    skip: usize,
    books: Rc<RefCell<Books>>,
}

impl Memory {
    /// A page-aligned source of `space` bytes.
    fn new(space: usize) -> (Memory, Rc<RefCell<Books>>) {
        let books = Rc::new(RefCell::new(Books::new(space, PAGE)));
        let mut arena = Arena::new(space + PAGE);
        let skip = arena.ptr().align_offset(PAGE);
        let m = Memory {
            arena,
            skip,
            books: books.clone(),
        };
        (m, books)
    }

    fn base(&mut self, offset: usize) -> NonNull<u8> {
        NonNull::new(self.arena.ptr().wrapping_add(self.skip + offset)).unwrap()
    }

    fn offset(&self, addr: usize) -> usize {
        addr - self.arena.ptr_addr() - self.skip
    }
}

// SAFETY: the ranges are parts of `arena`, which outlives the pool using them (declared
// together, dropped after it), and the books never hand a range out twice.
unsafe impl RegionSource for Memory {
    type Base = NonNull<u8>;
    fn addr(b: NonNull<u8>) -> usize {
        b.addr().get()
    }
    fn granularity(&self) -> usize {
        self.books.borrow().page
    }
    fn obtain(&mut self, min: usize) -> Result<(NonNull<u8>, usize), Error> {
        let (o, l) = self.books.borrow_mut().obtain(min)?;
        Ok((self.base(o), l))
    }
    unsafe fn give_back(&mut self, base: NonNull<u8>, len: usize) {
        let o = self.offset(base.addr().get());
        self.books.borrow_mut().give_back(o, len);
    }
    fn grow(&mut self, base: NonNull<u8>, len: usize, add: usize) -> Result<usize, Error> {
        let o = self.offset(base.addr().get());
        self.books.borrow_mut().grow(o, len, add)
    }
    unsafe fn release(&mut self, start: usize, len: usize) -> bool {
        let o = self.offset(start);
        {
            let mut books = self.books.borrow_mut();
            assert!(books.inside(o, len), "release outside a region");
            assert_eq!((o % books.page, len % books.page), (0, 0));
            books.releases += 1;
        }
        // SAFETY: the range is inside the arena (checked above) and holds nothing anyone needs
        // (the caller's contract).
        unsafe { self.base(o).as_ptr().write_bytes(0xee, len) };
        true
    }
}

/// Hooks that keep the registered ranges, as a `cuMemHostRegister` hook would, and fail the
/// test on anything unbalanced.
#[derive(Clone, Default)]
struct Registry(Rc<RefCell<RegistryState>>);

#[derive(Default, Debug)]
struct RegistryState {
    /// Base → registered length.
    live: BTreeMap<usize, usize>,
    calls: usize,
    /// Every event, for the model test: (obtained or grown, base, at, len) or given back.
    log: Vec<Event>,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Obtained(usize, usize),
    Grown(usize, usize),
    GivenBack(usize),
}

impl Hooks for Registry {
    fn obtained(&mut self, base: usize, len: usize) {
        let mut s = self.0.borrow_mut();
        s.calls += 1;
        assert!(
            s.live.insert(base, len).is_none(),
            "obtained twice: {base:#x}"
        );
        s.log.push(Event::Obtained(base, len));
    }
    fn grown(&mut self, base: usize, at: usize, len: usize) {
        let mut s = self.0.borrow_mut();
        s.calls += 1;
        let r = s.live.get_mut(&base).expect("grown region registered");
        assert_eq!(base + *r, at);
        *r += len;
        s.log.push(Event::Grown(base, len));
    }
    fn given_back(&mut self, base: usize, len: usize) {
        let mut s = self.0.borrow_mut();
        s.calls += 1;
        assert_eq!(s.live.remove(&base), Some(len), "given back once, whole");
        s.log.push(Event::GivenBack(base));
    }
    fn shrunk(&mut self, base: usize, at: usize, len: usize) {
        let mut s = self.0.borrow_mut();
        s.calls += 1;
        let r = s.live.get_mut(&base).expect("shrunk region registered");
        assert_eq!(base + *r, at + len);
        *r -= len;
    }
}

const PAGE: usize = 4096;

/// Bytes of real memory the inline tests use: Miri checks every byte, so it gets less.
const MEM: usize = if cfg!(miri) { 256 << 10 } else { 4 << 20 };

/// A detached pool under test.
type TestPool = Pool<DetachedHeap<Vec<Record>>, Addresses, Registry>;

/// A detached pool over `space` bytes of addresses, with its source's books and its hooks.
fn detached_pool(
    space: usize,
    policy: Policy,
    grows: bool,
) -> (TestPool, Rc<RefCell<Books>>, Registry) {
    let books = Rc::new(RefCell::new(Books::new(space, PAGE)));
    let hooks = Registry::default();
    let source = Addresses {
        base: 1 << 40,
        books: books.clone(),
        grows,
    };
    let heap = DetachedHeap::new(Vec::new(), 256).unwrap();
    (
        Pool::with_hooks(heap, source, policy, hooks.clone()),
        books,
        hooks,
    )
}

#[test]
fn fixed_growth_obtains_max_of_request_and_increment() {
    let (mut pool, books, hooks) =
        detached_pool(1 << 30, Policy::new().growth(Growth::Fixed(1 << 20)), false);
    let a = pool.alloc(1000, 256).unwrap();
    assert_eq!(
        books.borrow().out.values().copied().collect::<Vec<_>>(),
        [1 << 20]
    );
    // A request larger than the increment gets a region its size (rounded to pages).
    let big = pool.alloc((3 << 20) + 100, 256).unwrap();
    let lens: Vec<usize> = books.borrow().out.values().copied().collect();
    assert_eq!(lens, [1 << 20, (3 << 20) + PAGE]);
    let st = pool.stats();
    assert_eq!(
        (st.reserved, st.regions_obtained, st.hook_calls),
        ((4 << 20) + PAGE, 2, 2)
    );
    pool.check().unwrap();
    // SAFETY: detached blocks are checked; each is freed once.
    unsafe {
        pool.free(big, big.size).unwrap();
        pool.free(a, a.size).unwrap();
    }
    let t = pool.trim();
    assert_eq!((t.regions, t.bytes), (2, (4 << 20) + PAGE));
    assert!(books.borrow().out.is_empty());
    assert!(hooks.0.borrow().live.is_empty());
    assert_eq!(pool.stats().reserved, 0);
}

#[test]
fn growing_in_place_adds_only_what_the_free_end_lacks() {
    let policy = Policy::new().growth(Growth::Fixed(1 << 20));
    let (mut pool, _, _) = detached_pool(1 << 30, policy, true);
    // One 1 MiB region, 3/4 of it in use: a quarter free at its end.
    let a = pool.alloc(3 << 18, 256).unwrap();
    assert_eq!(pool.stats().reserved, 1 << 20);
    // 2 MiB more: the free quarter and 7/4 MiB added, rounded to pages (not 2 MiB added).
    let b = pool.alloc(2 << 20, 256).unwrap();
    let st = pool.stats();
    assert_eq!(
        (st.regions_obtained, st.heap.regions),
        (1, 1),
        "grown in place"
    );
    assert_eq!(
        st.reserved,
        (1 << 20) + (7usize << 18).next_multiple_of(PAGE)
    );
    pool.check().unwrap();
    // SAFETY: detached blocks are checked; each is freed once.
    unsafe {
        pool.free(b, b.size).unwrap();
        pool.free(a, a.size).unwrap();
    }
    pool.check().unwrap();
}

#[test]
fn alloc_without_growing_never_grows_the_pool() {
    let policy = Policy::new()
        .growth(Growth::Fixed(1 << 20))
        .bypass_above(2 << 20);
    let (mut pool, books, _hooks) = detached_pool(1 << 30, policy, false);
    let e = pool.alloc_without_growing(1000, 256).unwrap_err();
    assert_eq!((e.error, e.reserved), (Error::OutOfMemory, 0));
    assert_eq!(books.borrow().obtains, 0, "nothing obtained");
    let a = pool.alloc(1000, 256).unwrap();
    // SAFETY: detached blocks are checked; freed once.
    unsafe { pool.free(a, a.size).unwrap() };
    // The free chunks serve it now, with no call to the source.
    let b = pool.alloc_without_growing(1000, 256).unwrap();
    assert_eq!(b.addr, a.addr);
    // Larger than what is free: refused, not grown.
    assert_eq!(
        pool.alloc_without_growing(1 << 20, 256).unwrap_err().error,
        Error::OutOfMemory
    );
    // A bypassing request never takes a shared chunk.
    // SAFETY: as above.
    unsafe { pool.free(b, b.size).unwrap() };
    assert_eq!(
        pool.alloc_without_growing(3 << 20, 256).unwrap_err().error,
        Error::OutOfMemory
    );
    assert_eq!(
        pool.alloc_without_growing(0, 256).unwrap_err().error,
        Error::ZeroSize
    );
    assert_eq!(books.borrow().obtains, 1);
    pool.check().unwrap();
}

#[test]
fn doubling_growth_doubles_up_to_its_cap() {
    let policy = Policy::new().growth(Growth::Doubling {
        initial: 64 << 10,
        cap: 256 << 10,
    });
    let (mut pool, books, _) = detached_pool(1 << 30, policy, false);
    let mut blocks = Vec::new();
    for _ in 0..6 {
        blocks.push(pool.alloc(60 << 10, 256).unwrap());
    }
    let lens: Vec<usize> = books.borrow().out.values().copied().collect();
    // 64 KiB holds one 60 KiB block; 128 KiB two; 256 KiB four: six blocks need three regions.
    assert_eq!(lens, [64 << 10, 128 << 10, 256 << 10]);
    let lens_after = {
        blocks.push(pool.alloc(200 << 10, 256).unwrap());
        books.borrow().out.values().copied().collect::<Vec<_>>()
    };
    assert_eq!(
        lens_after,
        [64 << 10, 128 << 10, 256 << 10, 256 << 10],
        "capped"
    );
    pool.check().unwrap();
}

#[test]
fn reservation_up_front_by_bytes_and_by_fraction() {
    let (mut pool, books, _) = detached_pool(
        1 << 30,
        Policy::new().reserve(Reserve::Bytes(10 << 20)),
        false,
    );
    pool.reserve_now().unwrap();
    assert_eq!(
        books.borrow().out.values().copied().collect::<Vec<_>>(),
        [10 << 20]
    );
    let _a = pool.alloc(9 << 20, 256).unwrap();
    assert_eq!(books.borrow().obtains, 1, "served from the reservation");

    let (mut pool, books, _) = detached_pool(
        64 << 20,
        Policy::new().reserve(Reserve::Fraction(0.5)),
        false,
    );
    // The reservation also happens by itself on the first miss.
    let _b = pool.alloc(100, 256).unwrap();
    assert_eq!(
        books.borrow().out.values().copied().collect::<Vec<_>>(),
        [32 << 20]
    );
}

/// Checked at compile time: `Policy::check` runs in a constant without panicking.
const ABSURD: Policy = Policy::new().reserve(Reserve::Fraction(1e300));
const _: () = assert!(matches!(ABSURD.check(), Err(PolicyError::ReserveFraction)));
const _: () = assert!(Policy::new()
    .reserve(Reserve::Fraction(1.0))
    .check()
    .is_ok());

#[test]
fn a_policy_no_pool_can_follow_is_refused_naming_the_field_and_obtains_nothing() {
    let cases = [
        (
            Reserve::Fraction(f64::NAN),
            Growth::Fixed(1 << 20),
            PolicyError::ReserveFraction,
        ),
        (
            Reserve::Fraction(-1.0),
            Growth::Fixed(1 << 20),
            PolicyError::ReserveFraction,
        ),
        (
            Reserve::Fraction(1e300),
            Growth::Fixed(1 << 20),
            PolicyError::ReserveFraction,
        ),
        (
            Reserve::Fraction(f64::INFINITY),
            Growth::Fixed(1 << 20),
            PolicyError::ReserveFraction,
        ),
        (
            Reserve::Bytes(usize::MAX),
            Growth::Fixed(1 << 20),
            PolicyError::ReserveBytes,
        ),
        (
            Reserve::Nothing,
            Growth::Fixed(usize::MAX),
            PolicyError::GrowthSize,
        ),
        (
            Reserve::Nothing,
            Growth::Doubling {
                initial: 1 << 20,
                cap: usize::MAX,
            },
            PolicyError::GrowthSize,
        ),
    ];
    for (reserve, growth, want) in cases {
        let policy = Policy::new().reserve(reserve).growth(growth);
        assert_eq!(policy.check(), Err(want), "{policy:?}");
        let (mut pool, books, hooks) = detached_pool(64 << 20, policy, false);
        let e = pool.alloc(100, 256).unwrap_err();
        assert_eq!(e.error, Error::BadPolicy(want), "{policy:?}");
        assert_eq!(e.requested, 100);
        let text = e.to_string();
        assert!(text.contains(&std::format!("`{}`", want.field())), "{text}");
        assert!(!text.contains("overflows"), "{text}");
        assert_eq!(
            pool.reserve_now().unwrap_err().error,
            Error::BadPolicy(want),
            "refused again, not skipped"
        );
        assert_eq!(books.borrow().obtains, 0, "{policy:?} obtained memory");
        assert_eq!(hooks.0.borrow().calls, 0);
        assert_eq!(pool.stats().reserved, 0);
        pool.check().unwrap();
    }
}

#[test]
fn a_fraction_of_zero_reserves_nothing() {
    let (mut pool, books, _) = detached_pool(
        64 << 20,
        Policy::new().reserve(Reserve::Fraction(0.0)),
        false,
    );
    pool.reserve_now().unwrap();
    assert_eq!(books.borrow().obtains, 0);
    let _a = pool.alloc(100, 256).unwrap();
    assert_eq!(books.borrow().obtains, 1, "grown on demand instead");
}

#[test]
fn the_limit_refuses_with_the_figures_and_trim_retry_makes_room() {
    let policy = Policy::new().growth(Growth::Fixed(1 << 20)).limit(3 << 20);
    let (mut pool, books, _) = detached_pool(1 << 30, policy, false);
    let a = pool.alloc(1 << 20, 256).unwrap();
    let b = pool.alloc(1 << 20, 256).unwrap();
    let _c = pool.alloc(1000, 256).unwrap();
    assert_eq!(pool.stats().reserved, 3 << 20);
    let e = pool.alloc(2 << 20, 256).unwrap_err();
    assert_eq!(e.error, Error::LimitExceeded);
    assert_eq!(
        (e.requested, e.reserved, e.limit),
        (2 << 20, 3 << 20, Some(3 << 20))
    );
    assert_eq!(e.in_use, (2 << 20) + 1024);
    // With two regions wholly free, the same request trims them and succeeds.
    // SAFETY: detached blocks are checked; each is freed once.
    unsafe {
        pool.free(a, a.size).unwrap();
        pool.free(b, b.size).unwrap();
    }
    let d = pool.alloc(2 << 20, 256).unwrap();
    let st = pool.stats();
    assert_eq!(
        (st.retries, st.regions_given_back, st.reserved),
        (1, 2, 3 << 20)
    );
    assert_eq!(books.borrow().out.len(), 2);
    pool.check().unwrap();
    let _ = d;
}

#[test]
fn bypassed_requests_get_their_own_region_and_give_it_back_on_free() {
    let policy = Policy::new()
        .growth(Growth::Fixed(1 << 20))
        .bypass_above(4 << 20);
    let (mut pool, books, hooks) = detached_pool(1 << 30, policy, false);
    let small = pool.alloc(1000, 256).unwrap();
    let big = pool.alloc(8 << 20, 256).unwrap();
    assert_eq!(
        books.borrow().out.values().copied().collect::<Vec<_>>(),
        [1 << 20, 8 << 20]
    );
    assert_eq!(pool.stats().bypassed, 1);
    // SAFETY: detached blocks are checked; freed once.
    unsafe { pool.free(big, big.size).unwrap() };
    assert_eq!(
        books.borrow().out.values().copied().collect::<Vec<_>>(),
        [1 << 20]
    );
    assert_eq!(hooks.0.borrow().live.len(), 1);
    assert_eq!(pool.stats().regions_given_back, 1);
    pool.check().unwrap();
    let _ = small;
}

#[test]
fn a_growable_source_keeps_one_region_and_trim_gives_its_free_end_back() {
    let policy = Policy::new()
        .growth(Growth::Fixed(2 << 20))
        .release_above(PAGE);
    let (mut pool, books, hooks) = detached_pool(1 << 30, policy, true);
    let blocks: Vec<_> = (0..5).map(|_| pool.alloc(1 << 20, 256).unwrap()).collect();
    let st = pool.stats();
    assert_eq!(
        (st.regions_obtained, st.heap.regions),
        (1, 1),
        "grown in place"
    );
    assert!(st.grown >= 1);
    assert_eq!(books.borrow().out.len(), 1);
    // Free the last three: the region's free end goes back, the region stays.
    for b in &blocks[2..] {
        // SAFETY: detached blocks are checked; each is freed once.
        unsafe { pool.free(*b, b.size).unwrap() };
    }
    let t = pool.trim();
    assert_eq!(t.regions, 0);
    assert!(t.bytes >= 3 << 20, "{t:?}");
    let len = *books.borrow().out.values().next().unwrap();
    assert!(
        len <= (2 << 20) + PAGE,
        "region cut to what is in use: {len:#x}"
    );
    assert_eq!(hooks.0.borrow().live.values().copied().sum::<usize>(), len);
    assert_eq!(pool.stats().reserved, len);
    pool.check().unwrap();
    // It grows again in place when needed.
    let again = pool.alloc(2 << 20, 256).unwrap();
    assert_eq!(pool.stats().heap.regions, 1);
    pool.check().unwrap();
    let _ = again;
}

/// With `trim_above`, the free of a large block gives back a region it leaves wholly free at
/// once; a smaller free, and the same frees without the setting, give nothing back; and a
/// region's free end is not cut at a free (only by `trim`).
#[test]
fn a_large_free_trims_the_regions_with_trim_above() {
    for with in [false, true] {
        let mut policy = Policy::new().growth(Growth::Fixed(1 << 20));
        if with {
            policy = policy.trim_above(256 << 10);
        }
        // Regions that cannot grow: `lone` gets one of its own.
        let (mut pool, books, hooks) = detached_pool(1 << 30, policy, false);
        let small = pool.alloc(600 << 10, 256).unwrap();
        let lone = pool.alloc(900 << 10, 256).unwrap();
        assert_eq!(pool.stats().heap.regions, 2);
        let reserved = pool.stats().reserved;
        let tiny = pool.alloc(1000, 256).unwrap();
        // SAFETY: detached blocks are checked; each is freed once.
        unsafe { pool.free(tiny, tiny.size).unwrap() };
        assert_eq!(
            pool.stats().reserved,
            reserved,
            "a small free gives nothing back"
        );
        // SAFETY: as above.
        unsafe { pool.free(lone, lone.size).unwrap() };
        let st = pool.stats();
        assert_eq!(
            st.regions_given_back,
            u64::from(with),
            "the wholly free region"
        );
        assert_eq!(st.reserved < reserved, with);
        assert_eq!(
            books.borrow().out.values().copied().sum::<usize>(),
            st.reserved
        );
        assert_eq!(
            hooks.0.borrow().live.values().copied().sum::<usize>(),
            st.reserved
        );
        pool.check().unwrap();
        // SAFETY: as above.
        unsafe { pool.free(small, small.size).unwrap() };
        pool.trim();
        assert!(books.borrow().out.is_empty());

        // A region that grows in place: a large block at its end, freed, leaves its end.
        let (mut pool, books, hooks2) = detached_pool(1 << 30, policy, true);
        let head = pool.alloc(4096, 256).unwrap();
        let tail = pool.alloc(3 << 20, 256).unwrap();
        assert_eq!(pool.stats().heap.regions, 1);
        let reserved = pool.stats().reserved;
        // SAFETY: as above.
        unsafe { pool.free(tail, tail.size).unwrap() };
        let st = pool.stats();
        assert_eq!(
            (st.shrunk, st.reserved),
            (0, reserved),
            "the free end stays"
        );
        assert_eq!(
            hooks2.0.borrow().live.values().copied().sum::<usize>(),
            st.reserved
        );
        assert_eq!(
            books.borrow().out.values().copied().sum::<usize>(),
            st.reserved
        );
        pool.check().unwrap();
        // SAFETY: as above.
        unsafe { pool.free(head, head.size).unwrap() };
        pool.trim();
        assert!(books.borrow().out.is_empty());
    }
}

#[test]
fn trim_releases_the_pages_of_large_free_chunks_and_the_heap_stays_sound() {
    let (source, books) = Memory::new(MEM);
    let policy = Policy::new()
        .growth(Growth::Fixed(MEM / 4))
        .release_above(MEM / 64);
    let mut pool = Pool::new(InlineHeap::new(), source, policy);
    let a = pool.alloc(100, 16).unwrap();
    let big = pool.alloc(MEM / 8, 16).unwrap();
    let b = pool.alloc(100, 16).unwrap();
    // SAFETY: live blocks of this pool, freed once.
    unsafe { pool.free(big, MEM / 8).unwrap() };
    let t = pool.trim();
    assert!(t.released >= MEM / 8 - 2 * PAGE, "{t:?}");
    assert_eq!(t.regions, 0);
    // Released pages were scribbled over: the heap kept nothing there.
    pool.check().unwrap();
    let again = pool.alloc(MEM / 10, 16).unwrap();
    // SAFETY: a live block of that size.
    unsafe { again.as_ptr().write_bytes(1, MEM / 10) };
    pool.check().unwrap();
    // SAFETY: live blocks, freed once.
    unsafe {
        pool.free(again, MEM / 10).unwrap();
        pool.free(a, 100).unwrap();
        pool.free(b, 100).unwrap();
    }
    assert_eq!(pool.trim().regions, 1);
    assert!(books.borrow().out.is_empty());
}

#[test]
fn scopes_count_what_went_through_them() {
    let (mut pool, _, _) = detached_pool(1 << 30, Policy::new(), false);
    let s = Scope::new();
    let a = pool.alloc_in(&s, 5000, 256).unwrap();
    let b = pool.alloc_in(&s, 7000, 256).unwrap();
    let _outside = pool.alloc(100_000, 256).unwrap();
    // SAFETY: detached blocks are checked; freed once.
    unsafe { pool.free_in(&s, a, a.size).unwrap() };
    assert_eq!((s.in_use(), s.peak(), s.allocated()), (7000, 12000, 12000));
    assert_eq!((s.allocs(), s.frees()), (2, 1));
    let _ = b;
}

/// A source that commits each fault on some call: every request then succeeds or fails with an
/// error, the heap stays sound, and every region handed out is either in the heap or back.
#[test]
fn a_faulty_source_never_corrupts_the_pool() {
    for (n, fault) in [
        (1, Fault::Fail),
        (2, Fault::Tiny),
        (2, Fault::Misaligned),
        (2, Fault::Overlapping),
        (3, Fault::Fail),
    ] {
        let (mut pool, books, hooks) = detached_pool(
            64 << 20,
            Policy::new().growth(Growth::Fixed(1 << 20)),
            false,
        );
        books.borrow_mut().faults.push((n, fault));
        let mut live = Vec::new();
        for i in 0..8 {
            match pool.alloc((700 << 10) + i * 1000, 256) {
                Ok(b) => live.push(b),
                Err(e) => assert!(
                    matches!(
                        e.error,
                        Error::OutOfMemory
                            | Error::RegionTooSmall
                            | Error::RegionMisaligned
                            | Error::RegionOverlap
                    ),
                    "{fault:?}: {e}"
                ),
            }
            pool.check().unwrap();
        }
        assert!(live.len() >= 6, "{fault:?}: only {} served", live.len());
        // Every region the books show handed out is one the pool holds (an overlapping one
        // was never recorded by the books).
        let mut held = Vec::new();
        pool.visit(|b, l| held.push((b - (1 << 40), l)), |_, _, _| {});
        held.sort_unstable();
        let out: Vec<_> = books.borrow().out.iter().map(|(&o, &l)| (o, l)).collect();
        assert_eq!(held, out, "{fault:?}");
        for b in live {
            // SAFETY: detached blocks are checked; freed once.
            unsafe { pool.free(b, b.size).unwrap() };
        }
        pool.trim();
        assert!(books.borrow().out.is_empty(), "{fault:?}: a region leaked");
        assert!(hooks.0.borrow().live.is_empty());
    }
}

/// A misaligned region from an inline source is refused before a byte of it is written.
#[test]
fn a_misaligned_region_is_refused_without_a_write() {
    let (mut source, books) = Memory::new(MEM);
    // The pool asks twice for a region (its increment, then just what the request needs):
    // both come misaligned.
    books
        .borrow_mut()
        .faults
        .extend([(1, Fault::Misaligned), (2, Fault::Misaligned)]);
    let first = source.base(0);
    // SAFETY: the arena is ours; fill it with a pattern the heap must not change.
    unsafe { first.as_ptr().write_bytes(0x77, MEM) };
    let policy = Policy::new().growth(Growth::Fixed(MEM / 4));
    let mut pool = Pool::new(InlineHeap::new(), source, policy);
    let e = pool.alloc(100, 16).unwrap_err();
    assert_eq!(e.error, Error::RegionMisaligned);
    // SAFETY: reading the arena back.
    let bytes = unsafe { core::slice::from_raw_parts(first.as_ptr(), MEM) };
    assert!(
        bytes.iter().all(|&b| b == 0x77),
        "the refused region was written"
    );
    assert!(
        books.borrow().out.is_empty(),
        "the refused region was given back"
    );
    // The next try works.
    assert!(pool.alloc(100, 16).is_ok());
}

/// One step of the model test.
#[derive(Clone, Debug)]
enum Step {
    Alloc(usize, usize),
    Free(usize),
    Trim,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        6 => (1usize..40_000, 0u32..12).prop_map(|(s, a)| Step::Alloc(s, 1 << a)),
        4 => any::<usize>().prop_map(Step::Free),
        1 => Just(Step::Trim),
    ];
    proptest::collection::vec(step, 1..if cfg!(miri) { 20 } else { 150 })
}

/// Replays the hook events since `from` into the model.
fn apply_events(model: &mut Model, hooks: &Registry, from: &mut usize) {
    let s = hooks.0.borrow();
    for e in &s.log[*from..] {
        match *e {
            Event::Obtained(b, l) => model.add_region(b, l).unwrap(),
            Event::Grown(b, l) => model.extend_region(b, l).unwrap(),
            Event::GivenBack(b) => {
                model.remove_region(b).unwrap();
            }
        }
    }
    *from = s.log.len();
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 64 },
        // No failure files: Miri cannot look up the working directory, and a failure prints
        // its minimal input anyway.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// A pool with a random policy and a random (sometimes growable) source, driven by random
    /// requests: every address is the reference model's prediction for the regions the pool
    /// obtained at that moment, and the pool's books balance.
    #[test]
    fn a_pool_places_every_block_where_the_model_says(
        ops in steps(),
        increment in prop_oneof![Just(64usize << 10), Just(256 << 10), Just(1 << 20)],
        limit in prop_oneof![Just(None), Just(Some(2usize << 20)), Just(Some(8 << 20))],
        bypass in prop_oneof![Just(None), Just(Some(20_000usize))],
        grows in any::<bool>(),
    ) {
        let mut policy = Policy::new().growth(Growth::Fixed(increment));
        policy.limit = limit;
        policy.bypass_above = bypass;
        let (mut pool, books, hooks) = detached_pool(1 << 30, policy, grows);
        let mut model = Model::new(Geometry::detached(256).unwrap());
        let mut seen = 0;
        let mut live: Vec<crate::Block> = Vec::new();
        // Blocks in regions of their own, each holding one of the pool's 32 bypass slots.
        let mut own_region: Vec<usize> = Vec::new();
        for op in ops {
            match op {
                Step::Alloc(size, align) => {
                    let before = hooks.0.borrow().log.len();
                    let bypassed = pool.stats().bypassed;
                    let got = pool.alloc(size, align);
                    // A request above the bypass threshold, with a slot free, asks the heap for
                    // the whole of the region it obtained (at the granule's alignment).
                    let obtained = hooks.0.borrow().log[before..].iter().rev().find_map(|e| {
                        match *e {
                            Event::Obtained(_, len) => Some(len),
                            _ => None,
                        }
                    });
                    let asked = match (bypass, obtained) {
                        (Some(t), Some(len)) if size > t && align <= 256 && own_region.len() < 32 => {
                            model.geometry().whole_region_request(len).filter(|&w| w >= size).unwrap_or(size)
                        }
                        _ => size,
                    };
                    // The regions the pool obtained or gave back on the way, then the request.
                    apply_events(&mut model, &hooks, &mut seen);
                    match got {
                        Ok(b) => {
                            let want = model.alloc(asked, align);
                            prop_assert_eq!(want, Ok(b.addr), "alloc {} aligned {}", size, align);
                            if pool.stats().bypassed > bypassed {
                                own_region.push(b.addr);
                            }
                            live.push(b);
                        }
                        Err(e) => {
                            prop_assert!(e.is_exhaustion(), "{}", e);
                            prop_assert!(model.alloc(asked, align).is_err());
                        }
                    }
                }
                Step::Free(i) if !live.is_empty() => {
                    let b = live.swap_remove(i % live.len());
                    own_region.retain(|&a| a != b.addr);
                    // SAFETY: detached blocks are checked; each is freed once.
                    unsafe { pool.free(b, b.size).unwrap() };
                    model.free(b.addr);
                    apply_events(&mut model, &hooks, &mut seen);
                }
                Step::Free(_) => {}
                Step::Trim => {
                    pool.trim();
                    apply_events(&mut model, &hooks, &mut seen);
                }
            }
            pool.check().unwrap();
            let reserved: usize = books.borrow().out.values().sum();
            prop_assert_eq!(pool.stats().reserved, reserved);
            if let Some(l) = limit {
                prop_assert!(reserved <= l);
            }
        }
        for b in live {
            // SAFETY: detached blocks are checked; each is freed once.
            unsafe { pool.free(b, b.size).unwrap() };
        }
        pool.trim();
        prop_assert!(books.borrow().out.is_empty());
        prop_assert!(hooks.0.borrow().live.is_empty());
    }
}

/// The inline heap behind a pool: blocks really are memory, and hold their bytes.
#[test]
fn an_inline_pool_serves_real_memory_across_regions() {
    let (source, books) = Memory::new(2 * MEM);
    let mut pool = Pool::new(
        InlineHeap::new(),
        source,
        Policy::new().growth(Growth::Fixed(MEM / 16)),
    );
    let n = if cfg!(miri) { 40 } else { 400 };
    let mut live = Vec::new();
    for i in 0..n {
        let size = 1 + (i * 7919) % (MEM / 128);
        let p = pool.alloc(size, 16).unwrap();
        // SAFETY: a live block of `size` bytes.
        unsafe { p.as_ptr().write_bytes(i as u8, size) };
        live.push((p, size, i as u8));
        if i % 3 == 0 {
            let (q, s, t) = live.swap_remove(i % live.len());
            // SAFETY: reading and then freeing a live block, once.
            unsafe {
                assert!(core::slice::from_raw_parts(q.as_ptr(), s)
                    .iter()
                    .all(|&x| x == t));
                pool.free(q, s).unwrap();
            }
        }
    }
    pool.check().unwrap();
    let st = pool.stats();
    assert!(st.regions_obtained + st.grown > 1, "{st:?}");
    for (q, s, t) in live {
        // SAFETY: as above.
        unsafe {
            assert!(core::slice::from_raw_parts(q.as_ptr(), s)
                .iter()
                .all(|&x| x == t));
            pool.free(q, s).unwrap();
        }
    }
    pool.trim();
    assert!(books.borrow().out.is_empty());
}

/// A source with nothing to give, and nothing that keeps it on one thread.
struct Empty;

// SAFETY: it never hands out a region.
unsafe impl RegionSource for Empty {
    type Base = NonNull<u8>;
    fn addr(b: NonNull<u8>) -> usize {
        b.addr().get()
    }
    fn granularity(&self) -> usize {
        PAGE
    }
    fn obtain(&mut self, _: usize) -> Result<(NonNull<u8>, usize), Error> {
        Err(Error::OutOfMemory)
    }
    unsafe fn give_back(&mut self, _: NonNull<u8>, _: usize) {}
}

/// A shared inline pool over a `Send` source is `Sync`, as a `#[global_allocator]` static must
/// be (an inline pool used to keep its top region's base as a pointer, which made it neither
/// `Send` nor, shared, `Sync`), and it serves `GlobalAlloc` from a `static`.
#[test]
fn a_shared_inline_pool_can_be_a_static_global_allocator() {
    use crate::SharedPool;
    use core::alloc::{GlobalAlloc, Layout};

    fn sync<T: Sync>(_: &T) {}
    static POOL: SharedPool<InlineHeap, Empty> =
        SharedPool::new(Pool::new(InlineHeap::new(), Empty, Policy::new()));
    sync(&POOL);
    let layout = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: a non-zero size.
    let p = unsafe { GlobalAlloc::alloc(&POOL, layout) };
    assert!(p.is_null(), "the source has nothing: null, not a panic");
    let e = POOL.alloc(64, 8).unwrap_err();
    assert_eq!((e.error, e.reserved), (Error::OutOfMemory, 0));
}

/// A shared inline pool is an `allocator_api2` `Allocator` as a `GlobalHeap` is (both through
/// `SharedAlloc`): a collection grows the pool and shrinks, a zero size
/// never reaches the heap, and everything goes back.
#[cfg(feature = "allocator-api2")]
#[test]
fn a_shared_inline_pool_is_an_allocator() {
    use crate::SharedPool;
    use allocator_api2::alloc::{Allocator, Layout as ApiLayout};
    use allocator_api2::vec::Vec as AVec;

    let (source, _books) = Memory::new(MEM);
    let pool: SharedPool<InlineHeap, Memory> = SharedPool::new(Pool::new(
        InlineHeap::new(),
        source,
        Policy::new().growth(Growth::Fixed(MEM / 8)),
    ));
    {
        let mut v: AVec<u64, &SharedPool<InlineHeap, Memory>> = AVec::new_in(&pool);
        for i in 0..(MEM / 8 / 8) as u64 {
            v.push(i);
        }
        let s = pool.stats().unwrap();
        assert!(
            s.reserved > MEM / 8 && s.grown + s.regions_obtained > 1,
            "the pool grew"
        );
        v.truncate(10);
        v.shrink_to_fit();
        assert_eq!(v.iter().sum::<u64>(), 45);
    }
    let zero = ApiLayout::from_size_align(0, 64).unwrap();
    let d = pool.allocate(zero).unwrap();
    assert_eq!(d.cast::<u8>().as_ptr() as usize % 64, 0);
    // SAFETY: a zero-sized block from this allocator.
    unsafe { pool.deallocate(d.cast(), zero) };
    let st = pool.stats().unwrap().heap;
    assert_eq!((st.live, st.in_use, st.refused_frees), (0, 0, 0));
    pool.with_pool(|p| p.check()).unwrap().unwrap();
}

/// A bypassed block's region is rounded up to whole pages; what the block does not use must
/// not become a free chunk that other blocks can take, or the region outlives the block: the
/// small blocks allocated afterwards would land in that tail (best fit: it is the smallest free
/// chunk), and the freed block's region could then never be given back. With a growing buffer
/// reallocated past the threshold again and again (a string built up by a C program), every
/// step left such a region behind: a perl script on the preload library held 2 GiB of them
/// for 74 MiB at peak in use. So the block takes its whole region.
#[test]
fn a_bypassed_region_holds_nothing_else_and_goes_back_with_its_block() {
    let (source, books) = Memory::new(2 * MEM);
    let threshold = MEM / 32;
    let policy = Policy::new()
        .growth(Growth::Fixed(MEM / 8))
        .bypass_above(threshold);
    let mut pool = Pool::new(InlineHeap::new(), source, policy);
    let keep = pool.alloc(100, 16).unwrap();
    let mut small = Vec::new();
    for step in 1..6 {
        // A size that leaves most of a page over when its region is rounded up.
        let size = threshold + step * PAGE + 100;
        let big = pool.alloc(size, 16).unwrap();
        // SAFETY: a live block of `size` bytes.
        unsafe { big.as_ptr().write_bytes(step as u8, size) };
        assert!(pool.stats().bypassed >= step as u64);
        for _ in 0..8 {
            small.push(pool.alloc(200, 16).unwrap());
        }
        // SAFETY: the live bypassed block, freed once with the size it was asked with.
        unsafe { pool.free(big, size).unwrap() };
        pool.check().unwrap();
        // Only the shared region is left: the block's went back with it.
        assert_eq!(
            books.borrow().out.len(),
            1,
            "step {step}: {:?}",
            pool.stats()
        );
    }
    assert_eq!(pool.stats().regions_given_back, 5);
    for p in small {
        // SAFETY: live blocks of 200 bytes, freed once.
        unsafe { pool.free(p, 200).unwrap() };
    }
    // SAFETY: the live block of 100 bytes, freed once.
    unsafe { pool.free(keep, 100).unwrap() };
    pool.trim();
    assert!(books.borrow().out.is_empty());
}

/// A bypassed block reallocated a little larger again and again (a buffer built up past the
/// threshold) grows with its region where the source extends it in place, instead of being
/// copied into a new region at every step; shrinking to half its size or more keeps it where
/// it is; shrinking below the threshold moves it into the shared regions and its region goes.
#[test]
fn a_bypassed_block_grows_with_its_region_and_keeps_its_place() {
    let (source, books) = Memory::new(2 * MEM);
    let threshold = MEM / 32;
    let policy = Policy::new()
        .growth(Growth::Fixed(MEM / 8))
        .bypass_above(threshold);
    let mut pool = Pool::new(InlineHeap::new(), source, policy);
    let keep = pool.alloc(100, 16).unwrap();
    let mut size = threshold + 100;
    let p = pool.alloc(size, 16).unwrap();
    let byte = |i: usize| (i % 251) as u8;
    // SAFETY: a live block of `size` bytes.
    unsafe { (0..size).for_each(|i| p.as_ptr().add(i).write(byte(i))) };
    let (steps, step) = if cfg!(miri) { (4, 3000) } else { (40, 700) };
    for _ in 0..steps {
        let new = size + step;
        // SAFETY: the live block, resized from its size.
        let q = unsafe { pool.realloc(p, size, 16, new) }.unwrap();
        assert_eq!(q, p, "moved at {size} bytes");
        // SAFETY: a live block of `new` bytes.
        unsafe { (size..new).for_each(|i| p.as_ptr().add(i).write(byte(i))) };
        size = new;
        pool.check().unwrap();
    }
    let st = pool.stats();
    assert_eq!((st.regions_obtained, st.bypassed), (2, 1), "{st:?}");
    assert!(st.grown > 0, "{st:?}");
    let smaller = threshold + (size - threshold) / 2;
    // SAFETY: `p` is the live block of `size` bytes; shrunk but still above the threshold, it
    // is kept in place.
    let q = unsafe { pool.realloc(p, size, 16, smaller) }.unwrap();
    assert_eq!(q, p);
    size = smaller;
    // SAFETY: the live block, shrunk below the threshold: moved.
    let r = unsafe { pool.realloc(p, size, 16, threshold / 2) }.unwrap();
    assert_ne!(r, p);
    // SAFETY: a live block of `threshold / 2` bytes.
    let kept = unsafe { core::slice::from_raw_parts(r.as_ptr(), threshold / 2) };
    assert!(kept.iter().enumerate().all(|(i, &b)| b == byte(i)));
    assert_eq!(books.borrow().out.len(), 1);
    // SAFETY: live blocks, freed once each with their sizes.
    unsafe {
        pool.free(r, threshold / 2).unwrap();
        pool.free(keep, 100).unwrap();
    }
    pool.check().unwrap();
    pool.trim();
    assert!(books.borrow().out.is_empty());
}

/// While the pool holds its regions nothing goes back to the source: no trim, no retry's trim,
/// no bypassed region at its free; once the hold ends, a trim gives back what is free.
#[test]
fn a_held_pool_gives_nothing_back_until_the_hold_ends() {
    let policy = Policy::new()
        .growth(Growth::Fixed(1 << 20))
        .bypass_above(4 << 20)
        .limit(12 << 20);
    let (mut pool, books, _) = detached_pool(1 << 30, policy, false);
    let a = pool.alloc(1 << 20, 256).unwrap();
    let big = pool.alloc(8 << 20, 256).unwrap();
    pool.hold_regions(true);
    // SAFETY: detached blocks are checked; each is freed once.
    unsafe {
        pool.free(a, a.size).unwrap();
        pool.free(big, big.size).unwrap();
    }
    assert_eq!(books.borrow().out.len(), 2, "the bypassed region stays");
    assert_eq!(pool.trim(), crate::Trimmed::default());
    // A region of its own over the limit: no trim to make room, so no retry.
    let e = pool.alloc(5 << 20, 256).unwrap_err();
    assert_eq!(e.error, Error::LimitExceeded);
    assert_eq!(pool.stats().retries, 0);
    assert_eq!(books.borrow().give_backs, 0);
    pool.check().unwrap();
    pool.hold_regions(false);
    let t = pool.trim();
    assert_eq!(t.regions, 2);
    assert!(t.gave_back());
    assert_eq!(books.borrow().out.len(), 0);
    pool.check().unwrap();
}
