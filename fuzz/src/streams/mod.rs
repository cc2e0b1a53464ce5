//! The `stream_order` target: a stream-ordered [`DevicePool`] over the fake CUDA driver
//! (`tagalloc_cuda::fake`), driven by operation sequences on several streams, with the fake's
//! timeline as the oracle.
//!
//! The set-up ([`Setup`]) picks a small card (16 to 64 MiB, so that the pool runs out), plain
//! or virtual-memory regions, the growth, limit, bypass and trim policy, the granule, the
//! batching of frees, whether the fake has a clock (work completes as the host clock passes its
//! end) or not (work completes when the harness says), and how long kernels take. The
//! operations ([`StreamOp`]) allocate on a stream, free, use a block on one of its streams,
//! `record_stream`, queue device work and move the host clock (or complete work by hand),
//! create streams, forget and destroy them, begin and end graph captures (telling the pool),
//! `process_events`, `trim`, and misuse the pool with stale blocks.
//!
//! What must hold (each failure panics with the step and the details):
//!
//! - **Stream order**: when the pool hands memory to stream S, every earlier use of any of its
//!   bytes (the kernel the harness launched after each allocation, and the ones it launched on
//!   the block's streams since) is ordered before S's later work: the fake's
//!   `ordered_after(S, use)` (see [`ledger`]). Live blocks never overlap, and lie in mapped
//!   device memory.
//! - **The pool's invariants**: `DevicePool::check` every [`CHECK_EVERY`] steps
//!   (`TAGALLOC_FUZZ_FULL_EVERY` overrides it) and at the end; its statistics agree with the
//!   harness (captures, streams).
//! - **Errors only where legitimate**: running out of memory only when the pool holds nearly
//!   the whole card or its limit (with the driver's error, if any, an out-of-memory one);
//!   [`DeviceError::Capturing`] only while a capture is under way; [`DeviceError::Block`] only
//!   for the stale blocks the harness sends on purpose, which must be refused and change
//!   nothing. No driver error, ever: a pool that names a destroyed stream, or makes a call
//!   that is illegal during a capture, gets one from the fake.
//! - **Captures**: no capture is invalidated by the pool (checked after every step while one
//!   is under way, and `end_capture` must say `Ok(true)`).
//! - **The end**: every capture ended, every block freed, `trim` and `check` clean, nothing
//!   pending, no device memory left with the fake, and after the pool is dropped, no event.

pub mod ledger;
pub mod ops;

use tagalloc::{Growth, Policy};
use tagalloc_cuda::code;
use tagalloc_cuda::fake::{
    Call, CallCounts, FakeClock, FakeConfig, FakeDriver, FakeMark, FakePoint, FakeStream,
};
use tagalloc_cuda::{
    Capture, DeviceBlock, DeviceConfig, DeviceCounters, DeviceError, DevicePool, DeviceStats,
    Driver, DriverError, Regions,
};

use crate::trace::untraced;
use ledger::Ledger;
pub use ops::{Setup, Size, StreamInput, StreamOp};

const MIB: usize = 1 << 20;

/// The fake's address space: room for the card's allocations and a virtual-memory reservation
/// (of the card's size) per region, as a real device's terabytes of addresses have (it costs
/// addresses only: the fake maps it `PROT_NONE`, `MAP_NORESERVE`).
const ADDRESS_SPACE: usize = 64 << 30;

/// The most streams alive at once (the default stream included).
const MAX_STREAMS: usize = 8;

/// Stale blocks remembered for misuse.
const GRAVEYARD: usize = 32;

/// Steps between two runs of `DevicePool::check` (and at the end of every input).
pub const CHECK_EVERY: u32 = 1;

/// Whether every step is printed with what the pool and the fake did
/// (`TAGALLOC_FUZZ_TRACE=1`, read once): for reading a failing input.
fn tracing() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| crate::settings::switch("TAGALLOC_FUZZ_TRACE"))
}

/// Steps between two prunings of the ledger's completed uses.
const PRUNE_EVERY: usize = 32;

/// [`CHECK_EVERY`], or its override from `TAGALLOC_FUZZ_FULL_EVERY` (read once).
fn check_every() -> u32 {
    static EVERY: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| crate::settings::steps("TAGALLOC_FUZZ_FULL_EVERY", CHECK_EVERY))
}

/// What the set-up decodes to: the fake's configuration, the pool's, and the device's speed.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The fake card.
    pub fake: FakeConfig,
    /// The pool.
    pub pool: DeviceConfig,
    /// Nanoseconds per unit of a kernel's (and the host's) time in the operations.
    pub scale: u64,
    /// The bytes a region is rounded to (plain) or grown by (virtual memory).
    pub unit: usize,
    /// Streams created before the first operation.
    pub streams: usize,
}

impl Plan {
    /// The plan `setup` describes.
    pub fn new(setup: &Setup) -> Plan {
        let card = setup.card_bytes();
        let r = setup.regions;
        // Virtual memory: a granularity of 64 KiB, chunks of 64 KiB to 2 MiB. Plain: regions
        // rounded to 256 bytes up to 2 MiB.
        let vmm = r & 1 == 1;
        let granularity = 64 << 10;
        let (regions, unit) = if vmm {
            let chunk = granularity << ((r >> 1) % 6);
            (Regions::Vmm { chunk, reserve: 0 }, chunk)
        } else {
            let round = [256, 4096, 64 << 10, 2 * MIB][(r >> 1) as usize % 4];
            (Regions::Plain { round }, round)
        };
        let g = setup.growth;
        let growth = if g & 1 == 0 {
            Growth::Fixed(MIB << ((g >> 1) % 4))
        } else {
            Growth::Doubling {
                initial: MIB << ((g >> 1) % 3),
                cap: 16 * MIB,
            }
        };
        let p = setup.policy;
        let mut policy = Policy::new().growth(growth);
        match p & 3 {
            1 => policy = policy.limit(card / 2),
            2 => policy = policy.limit(card - 4 * MIB),
            3 => policy = policy.limit(card + 8 * MIB),
            _ => {}
        }
        match (p >> 2) & 3 {
            2 => policy = policy.bypass_above(MIB),
            3 => policy = policy.bypass_above(4 * MIB),
            _ => {}
        }
        match (p >> 4) & 3 {
            2 => policy = policy.trim_above(256 << 10),
            3 => policy = policy.trim_above(2 * MIB),
            _ => {}
        }
        if vmm && p & 0x40 != 0 {
            policy = policy.release_above(unit);
        }
        let granule = 256 << (setup.granule % 2);
        let batch = match setup.batch {
            224.. => DeviceConfig::BATCH,
            b => 1 + b as usize % 8,
        };
        let batch_age = match setup.batch_age {
            224.. => DeviceConfig::BATCH_AGE,
            a => 1 + u64::from(a % 16),
        };
        let clock = (setup.clock >= 128).then(|| FakeClock {
            call_ns: u64::from(setup.clock & 7) * 250,
            memory_call_ns: u64::from((setup.clock >> 3) & 7) * 5_000,
            // Whatever else a clock has (and may gain) as the default has it.
            ..FakeClock::DEFAULT
        });
        Plan {
            fake: FakeConfig {
                total_memory: card,
                address_space: ADDRESS_SPACE,
                granularity,
                recommended_granularity: granularity,
                clock,
                ..FakeConfig::default()
            },
            // Whatever else a configuration has (and may gain) as `PLAIN` has it.
            pool: DeviceConfig {
                regions,
                policy,
                granule,
                batch,
                batch_age,
                ..DeviceConfig::PLAIN
            },
            scale: 1 << (setup.speed % 16),
            unit,
            streams: setup.streams as usize % 4,
        }
    }
}

/// What a run did, for the seeds' test to show that they reach every path: the outcomes the
/// harness saw, and the pool's counters before the final trim.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally {
    /// Allocations served.
    pub allocs: u64,
    /// Allocations refused for want of memory.
    pub exhausted: u64,
    /// Calls refused with `DeviceError::Capturing`.
    pub capturing: u64,
    /// Stale blocks refused.
    pub stale_refused: u64,
    /// Streams forgotten and destroyed.
    pub forgotten: u64,
    /// Captures begun and ended.
    pub captures: u64,
    /// `record_stream` calls.
    pub recorded: u64,
    /// Freed uses the oracle checked a handout against.
    pub checked_uses: u64,
    /// The pool's counters before the final trim.
    pub pool: DeviceCounters,
}

/// A stream the harness holds.
#[derive(Clone, Copy, Debug)]
struct Lane {
    stream: FakeStream,
    /// Made by `stream_create` (not the default stream): may be captured, forgotten, destroyed.
    created: bool,
    capturing: bool,
}

/// A live block as the harness knows it.
#[derive(Clone, Debug)]
struct Live {
    block: DeviceBlock<FakeStream>,
    /// Its own stream first, then those `record_stream` named.
    streams: Vec<FakeStream>,
    /// Its last use on each stream that used it.
    uses: Vec<(FakeStream, FakePoint)>,
}

impl Live {
    fn range(&self) -> (u64, u64) {
        let start = self.block.ptr().0;
        (start, start + self.block.size() as u64)
    }

    /// Notes a use on `stream` at `p` (the latest there).
    fn used(&mut self, stream: FakeStream, p: FakePoint) {
        match self.uses.iter_mut().find(|(s, _)| *s == stream) {
            Some(u) => u.1 = p,
            None => self.uses.push((stream, p)),
        }
    }
}

/// One run: the fake, the pool over it, the harness's account, the oracle.
struct Run<'g> {
    gpu: &'g FakeDriver,
    pool: DevicePool<&'g FakeDriver>,
    plan: Plan,
    lanes: Vec<Lane>,
    /// Streams destroyed (for the end's account).
    destroyed: usize,
    live: Vec<Live>,
    grave: Vec<DeviceBlock<FakeStream>>,
    ledger: Ledger,
    /// A stream made and destroyed at once: no work, no waits, so the fake says it is ordered
    /// after exactly the work that has completed.
    probe: FakeStream,
    captures: u32,
    mark: Option<FakeMark>,
    step: usize,
    tally: Tally,
}

impl<'g> Run<'g> {
    fn new(gpu: &'g FakeDriver, plan: Plan) -> Run<'g> {
        let pool = DevicePool::new(gpu, plan.pool)
            .unwrap_or_else(|e| panic!("the pool refused the set-up {:?}: {e}", plan.pool));
        let probe = gpu.stream_create().expect("stream_create");
        // SAFETY: the harness made the stream and never queues anything on it; only
        // `ordered_after` reads it, which destroyed streams answer.
        unsafe { gpu.stream_destroy(probe) }.expect("stream_destroy");
        let mut lanes = vec![Lane {
            stream: gpu.default_stream(),
            created: false,
            capturing: false,
        }];
        for _ in 0..plan.streams {
            lanes.push(Lane {
                stream: gpu.stream_create().expect("stream_create"),
                created: true,
                capturing: false,
            });
        }
        Run {
            gpu,
            pool,
            plan,
            lanes,
            destroyed: 0,
            live: Vec::new(),
            grave: Vec::new(),
            ledger: Ledger::new(),
            probe,
            captures: 0,
            mark: None,
            step: 0,
            tally: Tally::default(),
        }
    }

    fn lane(&self, pick: u8) -> usize {
        pick as usize % self.lanes.len()
    }

    /// Kernel nanoseconds for an input byte.
    fn ns(&self, n: u8) -> u64 {
        u64::from(n) * self.plan.scale
    }

    /// Queues a kernel of `ns` on `stream`; its point.
    fn launch(&self, stream: FakeStream, ns: u64) -> FakePoint {
        self.gpu
            .launch(stream, ns)
            .unwrap_or_else(|e| panic!("step {}: launch on {stream:?}: {e}", self.step))
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "step {}: {what}\n  pool: {:?}\n  stats: {:?}\n  driver holds: {:?}\n  calls: {:?}",
            self.step,
            self.pool,
            self.pool.stats(),
            self.gpu.outstanding(),
            self.gpu.calls()
        )
    }

    fn step(&mut self, op: &StreamOp) {
        match *op {
            StreamOp::Alloc { stream, size, ns } => self.alloc(stream, size.bytes(), ns),
            StreamOp::Free { pick } => self.free(pick),
            StreamOp::Use { pick, which, ns } => {
                if self.live.is_empty() {
                    return;
                }
                let i = pick as usize % self.live.len();
                let s = self.live[i].streams[which as usize % self.live[i].streams.len()];
                let p = self.launch(s, self.ns(ns));
                self.live[i].used(s, p);
            }
            StreamOp::RecordStream { pick, stream, ns } => self.record_stream(pick, stream, ns),
            StreamOp::Work { stream, ns, host } => {
                let s = self.lanes[self.lane(stream)].stream;
                self.launch(s, self.ns(ns));
                self.gpu.advance_host(self.ns(host));
            }
            StreamOp::Complete { how, stream } => self.complete(how, stream),
            StreamOp::CreateStream => {
                if self.lanes.len() < MAX_STREAMS {
                    let stream = self.gpu.stream_create().expect("stream_create");
                    self.lanes.push(Lane {
                        stream,
                        created: true,
                        capturing: false,
                    });
                }
            }
            StreamOp::ForgetStream { stream } => self.forget(stream),
            StreamOp::BeginCapture { stream } => self.begin_capture(stream),
            StreamOp::EndCapture { stream } => self.end_capture(stream),
            StreamOp::ProcessEvents => {
                if let Err(e) = self.pool.process_events() {
                    self.fail(format_args!("process_events: {e}"));
                }
            }
            StreamOp::Trim => match self.pool.trim() {
                Ok(_) => {}
                Err(DeviceError::Capturing(_)) if self.captures > 0 => self.tally.capturing += 1,
                Err(e) => self.fail(format_args!("trim: {e}")),
            },
            StreamOp::StaleFree { pick } => self.stale(pick, None),
            StreamOp::StaleRecord { pick, stream } => {
                let s = self.lanes[self.lane(stream)].stream;
                self.stale(pick, Some(s));
            }
        }
    }

    fn alloc(&mut self, pick: u8, size: usize, ns: u8) {
        let stream = self.lanes[self.lane(pick)].stream;
        match self.pool.alloc(size, stream) {
            Ok(block) => {
                untraced(|| self.handed_out(&block, stream, size));
                self.tally.allocs += 1;
                let p = self.launch(stream, self.ns(ns));
                self.live.push(Live {
                    block,
                    streams: vec![stream],
                    uses: vec![(stream, p)],
                });
            }
            Err(e) => untraced(|| self.alloc_refused(e, size, stream)),
        }
    }

    /// The oracle for a block just handed out.
    fn handed_out(&mut self, block: &DeviceBlock<FakeStream>, stream: FakeStream, size: usize) {
        let start = block.ptr().0;
        let end = start + size as u64;
        if block.size() != size || block.stream() != stream {
            self.fail(format_args!(
                "asked {size} bytes on {stream:?}, got {} on {:?}",
                block.size(),
                block.stream()
            ));
        }
        if !start.is_multiple_of(self.plan.pool.granule as u64) {
            self.fail(format_args!(
                "block {start:#x} is not aligned to the granule"
            ));
        }
        if !self.gpu.is_accessible(block.ptr(), size) {
            self.fail(format_args!(
                "block {start:#x}..{end:#x} is not in mapped device memory"
            ));
        }
        match self
            .ledger
            .hand_out(self.gpu, stream, start, end, self.step)
        {
            Ok(n) => self.tally.checked_uses += n as u64,
            Err(e) => self.fail(e),
        }
    }

    /// Whether a refused allocation was refused for a reason that holds.
    fn alloc_refused(&mut self, e: DeviceError, size: usize, stream: FakeStream) {
        match e {
            DeviceError::Capturing(_) if self.captures > 0 => self.tally.capturing += 1,
            DeviceError::Pool { error, driver } if error.is_exhaustion() => {
                if let Some(d) = driver {
                    if !is_out_of_memory(&d) {
                        self.fail(format_args!(
                            "alloc({size}, {stream:?}): {e}: a driver error other than out of \
                             memory"
                        ));
                    }
                }
                // Loosely: the pool holds nearly all the card or its limit (a region for the
                // request, rounded, would not fit).
                let card = self.plan.fake.total_memory;
                let room = self.plan.pool.policy.limit.map_or(card, |l| l.min(card));
                let slack = 2 * self.plan.unit + self.plan.pool.granule;
                if error.reserved + size + slack <= room {
                    self.fail(format_args!(
                        "alloc({size}, {stream:?}) ran out with {} of {room} bytes held: {e}",
                        error.reserved
                    ));
                }
                self.tally.exhausted += 1;
            }
            e => self.fail(format_args!("alloc({size}, {stream:?}): {e}")),
        }
    }

    fn free(&mut self, pick: u8) {
        if self.live.is_empty() {
            return;
        }
        let l = self.live.swap_remove(pick as usize % self.live.len());
        let (start, end) = l.range();
        if let Err(e) = self.pool.free(l.block) {
            self.fail(format_args!("free of live block {start:#x}..{end:#x}: {e}"));
        }
        let uses = l.uses.iter().map(|&(_, p)| p).collect();
        self.ledger.free(start, end, uses, self.step);
        if self.grave.len() == GRAVEYARD {
            self.grave.swap_remove(self.step % GRAVEYARD);
        }
        self.grave.push(l.block);
    }

    fn record_stream(&mut self, pick: u8, stream: u8, ns: u8) {
        if self.live.is_empty() {
            return;
        }
        let i = pick as usize % self.live.len();
        let s = self.lanes[self.lane(stream)].stream;
        if let Err(e) = self.pool.record_stream(&self.live[i].block, s) {
            self.fail(format_args!("record_stream of a live block to {s:?}: {e}"));
        }
        self.tally.recorded += 1;
        let p = self.launch(s, self.ns(ns));
        let l = &mut self.live[i];
        if !l.streams.contains(&s) {
            l.streams.push(s);
        }
        l.used(s, p);
    }

    fn complete(&mut self, how: u8, stream: u8) {
        if self.plan.fake.clock.is_some() {
            // With a clock, time completes work: move the host on.
            self.gpu
                .advance_host(self.ns(how) * 16 + u64::from(stream) * self.plan.scale);
            return;
        }
        match how % 4 {
            0 => {
                let s = self.lanes[self.lane(stream)].stream;
                self.gpu.complete_stream(s).expect("complete_stream");
            }
            1 => {
                if let Some(m) = self.mark {
                    self.gpu.complete_until(m);
                }
            }
            2 => self.gpu.complete_all(),
            _ => self.mark = Some(self.gpu.mark()),
        }
    }

    /// The first lane from `pick` on that `ok` accepts.
    fn find_lane(&self, pick: u8, ok: impl Fn(&Lane) -> bool) -> Option<usize> {
        let n = self.lanes.len();
        (0..n)
            .map(|k| (pick as usize + k) % n)
            .find(|&i| ok(&self.lanes[i]))
    }

    fn forget(&mut self, pick: u8) {
        let live = &self.live;
        let Some(i) = self.find_lane(pick, |l| {
            l.created && !l.capturing && !live.iter().any(|b| b.streams.contains(&l.stream))
        }) else {
            return;
        };
        let stream = self.lanes[i].stream;
        match self.pool.forget_stream(stream) {
            Ok(()) => {
                // SAFETY: the harness made the stream, and neither it nor the pool (which
                // forgot it) names it again.
                if let Err(e) = unsafe { self.gpu.stream_destroy(stream) } {
                    self.fail(format_args!("stream_destroy({stream:?}): {e}"));
                }
                self.lanes.swap_remove(i);
                self.destroyed += 1;
                self.tally.forgotten += 1;
            }
            Err(DeviceError::Capturing(_)) if self.captures > 0 => self.tally.capturing += 1,
            Err(e) => self.fail(format_args!("forget_stream({stream:?}): {e}")),
        }
    }

    fn begin_capture(&mut self, pick: u8) {
        let Some(i) = self.find_lane(pick, |l| l.created && !l.capturing) else {
            return;
        };
        let stream = self.lanes[i].stream;
        self.pool.capture_begun();
        if let Err(e) = self.gpu.begin_capture(stream) {
            self.fail(format_args!("begin_capture({stream:?}): {e}"));
        }
        self.lanes[i].capturing = true;
        self.captures += 1;
    }

    fn end_capture(&mut self, pick: u8) {
        let Some(i) = self.find_lane(pick, |l| l.capturing) else {
            return;
        };
        let stream = self.lanes[i].stream;
        match self.gpu.end_capture(stream) {
            Ok(true) => {}
            Ok(false) => self.fail(format_args!(
                "the capture on {stream:?} was invalidated by an illegal call"
            )),
            Err(e) => self.fail(format_args!("end_capture({stream:?}): {e}")),
        }
        self.lanes[i].capturing = false;
        self.captures -= 1;
        self.tally.captures += 1;
        if let Err(e) = self.pool.capture_ended() {
            self.fail(format_args!("capture_ended after {stream:?}'s: {e}"));
        }
    }

    /// Misuse: a stale copy of a freed block, freed again or named to `record_stream`, must be
    /// refused as a bad block and change nothing.
    fn stale(&mut self, pick: u8, record: Option<FakeStream>) {
        if self.grave.is_empty() {
            return;
        }
        let b = self.grave[pick as usize % self.grave.len()];
        let before = untraced(|| self.pool.stats());
        let got = match record {
            None => self.pool.free(b),
            Some(s) => self.pool.record_stream(&b, s),
        };
        untraced(|| {
            let what = match record {
                None => "free".to_string(),
                Some(s) => format!("record_stream to {s:?}"),
            };
            match got {
                Err(DeviceError::Block(_)) => self.tally.stale_refused += 1,
                Ok(()) => self.fail(format_args!(
                    "a stale {what} of {:#x} (size {}, freed before) was accepted",
                    b.ptr().0,
                    b.size()
                )),
                Err(e) => self.fail(format_args!("a stale {what}: {e}, not a bad block")),
            }
            let after = self.pool.stats();
            if !same_but_refusals(&before, &after) {
                self.fail(format_args!(
                    "a refused stale {what} changed the pool: {before:?} → {after:?}"
                ));
            }
        });
    }

    /// Prints step `op`, the pool's state after it and the driver calls it made (since
    /// `before`).
    fn trace(&self, op: &StreamOp, before: CallCounts) {
        let after = self.gpu.calls();
        let calls: Vec<String> = Call::ALL
            .iter()
            .filter(|&&c| after.get(c) > before.get(c))
            .map(|&c| format!("{}×{}", c.entry_point(), after.get(c) - before.get(c)))
            .collect();
        let st = self.pool.stats();
        eprintln!(
            "{:3} {op:?}\n    live {}, pending {} ({} B), reserved {}, streams {}, captures {}, \
             {:?}\n    calls: {}",
            self.step,
            self.live.len(),
            st.pending_blocks,
            st.pending_bytes,
            st.pool.reserved,
            st.streams,
            st.captures,
            st.counters,
            calls.join(" ")
        );
    }

    /// The checks after every step.
    fn after_step(&mut self) {
        untraced(|| {
            if (self.step as u32 + 1).is_multiple_of(check_every()) {
                if let Err(e) = self.pool.check() {
                    self.fail(format_args!("check: {e}"));
                }
            }
            if self.pool.stats().captures != self.captures {
                self.fail("the pool counts other captures than it was told of");
            }
            if self.captures > 0 {
                for l in self.lanes.iter().filter(|l| l.capturing) {
                    // SAFETY: the stream is live (the harness destroys no capturing stream).
                    match unsafe { self.gpu.stream_capture(l.stream) } {
                        Ok(Capture::Active(_)) => {}
                        other => self.fail(format_args!(
                            "{:?}'s capture is {other:?}: invalidated by an illegal call",
                            l.stream
                        )),
                    }
                }
            }
            if (self.step + 1).is_multiple_of(PRUNE_EVERY) {
                let (gpu, probe) = (self.gpu, self.probe);
                self.ledger
                    .forget_completed(|p| gpu.ordered_after(probe, p));
            }
        });
    }

    /// Ends every capture, frees every block, trims, and checks that nothing is left.
    fn finish(mut self) -> Tally {
        while let Some(i) = self.lanes.iter().position(|l| l.capturing) {
            self.end_capture(i as u8);
        }
        while !self.live.is_empty() {
            self.free(0);
        }
        self.tally.pool = self.pool.stats().counters;
        self.step += 1;
        if let Err(e) = self.pool.trim() {
            self.fail(format_args!("the final trim: {e}"));
        }
        untraced(|| {
            if let Err(e) = self.pool.check() {
                self.fail(format_args!("the final check: {e}"));
            }
            let stats = self.pool.stats();
            if stats.pending_blocks != 0 || stats.pool.heap.live != 0 {
                self.fail("blocks left in the pool after freeing all and trimming");
            }
            let out = self.gpu.outstanding();
            if (
                out.device_bytes,
                out.allocations,
                out.physical,
                out.mappings,
            ) != (0, 0, 0, 0)
            {
                self.fail(format_args!(
                    "device memory left with the driver after the final trim: {out:?}"
                ));
            }
        });
        let Run {
            gpu,
            pool,
            lanes,
            tally,
            ..
        } = self;
        drop(pool);
        for l in lanes.iter().filter(|l| l.created) {
            // SAFETY: the harness made the stream; the pool is gone.
            unsafe { gpu.stream_destroy(l.stream) }.expect("stream_destroy");
        }
        let out = gpu.outstanding();
        assert_eq!(
            (out.events, out.streams),
            (0, 0),
            "events or streams left after the pool was dropped: {out:?}"
        );
        tally
    }
}

/// Whether a driver error is the device running out of memory.
fn is_out_of_memory(e: &DriverError) -> bool {
    matches!(e, DriverError::Cuda { code: c, .. } if *c == code::OUT_OF_MEMORY)
}

/// Whether two statistics agree but for the heap's count of refused frees.
fn same_but_refusals(a: &DeviceStats, b: &DeviceStats) -> bool {
    let mut b = *b;
    b.pool.heap.refused_frees = a.pool.heap.refused_frees;
    *a == b
}

/// `stream_order`: runs `input` and checks everything listed in the module docs; what it did.
pub fn run(input: &StreamInput) -> Tally {
    let plan = Plan::new(&input.setup);
    let gpu = FakeDriver::new(plan.fake).expect("the fake driver");
    let mut run = Run::new(&gpu, plan);
    for op in &input.ops {
        let calls = tracing().then(|| gpu.calls());
        run.step(op);
        if let Some(before) = calls {
            run.trace(op, before);
        }
        run.after_step();
        run.step += 1;
    }
    run.finish()
}
