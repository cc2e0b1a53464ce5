//! `pool`: traces replayed through a [`Pool`] of [`InlineHeap`] growing from an
//! `ArenaSource` under several policies, for what each policy costs in memory (peak reserved
//! against the trace's peak live bytes, what is left reserved at the end, regions obtained,
//! given back, grown, and what trimming gives back) and in time (ns per event against the bare
//! heap).
//!
//! The time comparison is made fair by construction: the bare heap (one region, the whole
//! arena, given up front) and every pool run over the same pre-touched arena, through the same
//! replay loop ([`replay`], one function monomorphised per target), which does the same work
//! per event for both: a trim check against a precomputed schedule (empty, so never taken,
//! except for the pools that trim), and the call. Runs are interleaved round by round, in an
//! order rotated each round, and the bare heap runs twice per round (A and B): the ratio of B
//! to A is what noise alone does to a ratio in that run.

use std::ffi::OsStr;
use std::fmt::Write as _;

use indicatif::ProgressBar;
use serde_json::{json, Value};
use std::ptr::NonNull;

use tagalloc::model::InlineAdapter;
use tagalloc::{Growth, InlineHeap, Policy, Pool, PoolStats, Reserve};

use crate::arena_source::ArenaSource;
use crate::cli::{self, Mode, Opt};
use crate::clock::{Elapsed, Stopwatch};
use crate::replay::{Kind, Op, Prepared};
use crate::report::{self, Better, Table};
use crate::subjects::{self, Arena, Subject};

/// The traces `pool` replays by default, from the shared collection.
pub const DEFAULT_TRACES: [&str; 3] = ["python-json", "sqlite", "android-systemui"];

/// A pool with trimming trims every this many events: a few times on every trace, the
/// Android one included, whose live bytes never halve (a trim walks every chunk of the heap, so
/// one every few thousand events would cost more than the replay itself)...
pub const TRIM_EVERY: usize = 1 << 18;
/// ...and whenever the live bytes fall to half their highest value since the last trim, once
/// that high is at least this many bytes (a phase of the program has ended).
pub const TRIM_DROP_MIN: u64 = 1 << 20;
/// When trimming, the pages of free chunks of at least this many bytes are released, and free
/// region ends of at least this many bytes given back ([`Policy::release_above`]).
pub const RELEASE_ABOVE: usize = 64 << 10;

/// A growth policy measured, by the name `--policy` takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Growing {
    /// The name on the command line.
    pub key: &'static str,
    /// The name in tables and pictures.
    pub name: &'static str,
    pub growth: Growth,
}

/// The growth policies measured: fixed increments of 64 KiB and 2 MiB, and doubling from 1 MiB
/// to 64 MiB (TensorFlow's `allow_growth`).
pub const GROWTHS: [Growing; 3] = [
    Growing {
        key: "fixed-64k",
        name: "64 KiB regions",
        growth: Growth::Fixed(64 << 10),
    },
    Growing {
        key: "fixed-2m",
        name: "2 MiB regions",
        growth: Growth::Fixed(2 << 20),
    },
    Growing {
        key: "doubling",
        name: "doubling 1 → 64 MiB",
        growth: Growth::Doubling {
            initial: 1 << 20,
            cap: 64 << 20,
        },
    },
];

/// The growth policy called `key` on the command line.
pub fn growth_named(key: &str) -> Option<Growing> {
    GROWTHS.iter().copied().find(|g| g.key == key)
}

/// One pool configuration: a growth policy, whether the source grows regions in place, and
/// whether the pool is trimmed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    pub growing: Growing,
    /// The source extends a region in place when the space after it is free (as a reserved
    /// virtual range does); otherwise every growth is a new region (as `mmap` gives).
    pub in_place: bool,
    pub trim: bool,
}

impl Config {
    /// The pool's policy: the growth, and with trimming, page release and free-end cutting
    /// above [`RELEASE_ABOVE`]. No reservation, no limit, no bypass.
    pub fn policy(&self) -> Policy {
        let p = Policy::new().growth(self.growing.growth);
        if self.trim {
            p.release_above(RELEASE_ABOVE)
        } else {
            p
        }
    }

    fn source_name(&self) -> &'static str {
        if self.in_place {
            "grows in place"
        } else {
            "separate regions"
        }
    }

    fn trim_name(&self) -> &'static str {
        if self.trim {
            "trimmed"
        } else {
            "—"
        }
    }
}

/// Rows measured per trace: the bare heap twice, the pool over the whole arena, and every
/// configuration.
pub const ROWS: usize = 3 + 2 * GROWTHS.len() * 2;

/// Every configuration, in table order: separate regions first (what `mmap` gives), then
/// growth in place; for each growth policy, without and with trimming.
fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    for in_place in [false, true] {
        for growing in GROWTHS {
            for trim in [false, true] {
                out.push(Config {
                    growing,
                    in_place,
                    trim,
                });
            }
        }
    }
    out
}

/// What the replay loop drives: the bare heap (tagalloc's inline heap through the benchmarks'
/// [`Subject`]) or a pool.
pub trait Target: Subject<Block = NonNull<u8>> {
    /// Trims, adding what was given back to `totals` (the bare heap never trims).
    fn trim(&mut self, _totals: &mut TrimTotals) {}
}

/// What the trims of one run gave back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrimTotals {
    /// `Pool::trim` calls.
    pub calls: usize,
    /// Bytes of whole regions and free region ends given back to the source.
    pub given_back: u64,
    /// Bytes of pages released inside regions that stayed, by every trim (a page still free
    /// at the next trim is released, and counted, again).
    pub released: u64,
    /// Bytes of pages released by the last trim: reserved but no longer resident after it.
    pub last_released: u64,
}

/// The bare heap: one region, the whole arena, given up front.
pub type Bare<'a> = subjects::Tagalloc<InlineAdapter<&'a mut Arena>>;

impl Target for Bare<'_> {}

/// A pool over an arena source.
pub struct PoolTarget<'a> {
    pub pool: Pool<InlineHeap, ArenaSource<'a>>,
    refused: u64,
}

impl<'a> PoolTarget<'a> {
    pub fn new(arena: &'a mut Arena, config: &Config) -> Self {
        let source = ArenaSource::new(arena, config.in_place);
        PoolTarget {
            pool: Pool::new(InlineHeap::new(), source, config.policy()),
            refused: 0,
        }
    }

    /// A pool that reserves the whole arena up front, as one region: the bare heap's region
    /// exactly, so that the two differ by the pool's layer alone.
    pub fn whole_arena(arena: &'a mut Arena) -> Result<Self, String> {
        let len = arena.len();
        let source = ArenaSource::new(arena, false);
        let policy = Policy::new().reserve(Reserve::Bytes(len));
        let mut pool = Pool::new(InlineHeap::new(), source, policy);
        pool.reserve_now()
            .map_err(|e| format!("reserving the whole arena: {e}"))?;
        Ok(PoolTarget { pool, refused: 0 })
    }

    /// The pool's and the source's invariants, and the frees refused.
    pub fn check(&self) -> Result<(), String> {
        self.pool.check().map_err(|e| e.to_string())?;
        let errors = self.pool.source().errors();
        if errors > 0 {
            return Err(format!(
                "{errors} source calls did not match the source's books"
            ));
        }
        let (counted, seen) = (self.pool.stats().released, self.pool.source().released());
        if counted != seen {
            return Err(format!(
                "the pool counts {counted} bytes released, the source {seen}"
            ));
        }
        refused(self.refused)
    }
}

impl Subject for PoolTarget<'_> {
    type Block = NonNull<u8>;
    #[inline]
    fn alloc(&mut self, size: usize, align: usize) -> Option<NonNull<u8>> {
        self.pool.alloc(size, align).ok()
    }
    #[inline]
    unsafe fn free(&mut self, block: NonNull<u8>, size: usize, _align: usize) {
        // SAFETY: forwarded caller contract.
        if unsafe { self.pool.free(block, size) }.is_err() {
            self.refused += 1;
        }
    }
    #[inline]
    unsafe fn realloc(
        &mut self,
        block: NonNull<u8>,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> Option<NonNull<u8>> {
        // SAFETY: forwarded caller contract.
        unsafe { self.pool.realloc(block, old_size, align, new_size) }.ok()
    }
    fn addr(&self, block: &NonNull<u8>) -> usize {
        block.addr().get()
    }
    fn check(&self) -> Result<(), String> {
        PoolTarget::check(self)
    }
}

impl Target for PoolTarget<'_> {
    fn trim(&mut self, totals: &mut TrimTotals) {
        let t = self.pool.trim();
        totals.calls += 1;
        totals.given_back += t.bytes as u64;
        totals.released += t.released as u64;
        totals.last_released = t.released as u64;
    }
}

fn refused(n: u64) -> Result<(), String> {
    if n == 0 {
        Ok(())
    } else {
        Err(format!("{} refused", report::counted(n, "free", "frees")))
    }
}

/// What one replay did.
pub struct Outcome {
    pub elapsed: Elapsed,
    pub failures: u64,
    pub trims: TrimTotals,
}

/// Replays `ops` through `t`, trimming before each event whose index is in `trims` (sorted).
/// The loop is the same for every target; only the timed part is inside the clock. Blocks
/// still live at the end are left in the target (its memory is the arena's).
#[inline(never)]
pub fn replay<T: Target>(t: &mut T, ops: &[Op], slots: usize, trims: &[usize]) -> Outcome {
    let mut slots: Vec<Option<T::Block>> = vec![None; slots];
    let mut totals = TrimTotals::default();
    let mut failures = 0u64;
    let mut k = 0;
    let mut next = trims.first().copied().unwrap_or(usize::MAX);
    let clock = Stopwatch::start();
    for (i, op) in ops.iter().enumerate() {
        if i == next {
            t.trim(&mut totals);
            k += 1;
            next = trims.get(k).copied().unwrap_or(usize::MAX);
        }
        let (size, align) = (op.size as usize, 1usize << op.align_log2);
        let slot = &mut slots[op.slot as usize];
        match op.kind {
            Kind::Alloc => match t.alloc(size, align) {
                Some(b) => *slot = Some(b),
                None => failures += 1,
            },
            Kind::Free => {
                if let Some(b) = slot.take() {
                    // SAFETY: the slot holds a live block of this target, allocated with this
                    // size and alignment (the trace's bookkeeping in `replay::prepare`).
                    unsafe { t.free(b, size, align) };
                }
            }
            Kind::Realloc => {
                if let Some(b) = slot.take() {
                    let old = op.old as usize;
                    // SAFETY: as for a free; only the returned block (or, on failure, the
                    // old one, freed at once) is used afterwards.
                    match unsafe { t.realloc(b, old, align, size) } {
                        Some(nb) => *slot = Some(nb),
                        None => {
                            failures += 1;
                            // SAFETY: a refused realloc leaves the old block live.
                            unsafe { t.free(b, old, align) };
                        }
                    }
                }
            }
        }
    }
    Outcome {
        elapsed: clock.stop(),
        failures,
        trims: totals,
    }
}

/// The live bytes after each event, as the replay asks for them (a size of 0 as 1 byte).
fn live_after(ops: &[Op]) -> impl Iterator<Item = u64> + '_ {
    let mut live = 0u64;
    ops.iter().map(move |op| {
        match op.kind {
            Kind::Alloc => live += u64::from(op.size),
            Kind::Free => live -= u64::from(op.size).min(live),
            Kind::Realloc => live = live - u64::from(op.old).min(live) + u64::from(op.size),
        }
        live
    })
}

/// The live bytes after the first `events` events.
pub fn live_at(ops: &[Op], events: usize) -> u64 {
    live_after(&ops[..events.min(ops.len())])
        .last()
        .unwrap_or(0)
}

/// The moment of peak live bytes: the number of events up to and including the first event
/// that reached it, and the bytes.
pub fn peak_moment(ops: &[Op]) -> (usize, u64) {
    let mut best = (0, 0);
    for (i, live) in live_after(ops).enumerate() {
        if live > best.1 {
            best = (i + 1, live);
        }
    }
    best
}

/// The events before which a trimming pool trims: every [`TRIM_EVERY`] events, and after an
/// event that leaves the live bytes at or below half their highest value since the last trim
/// (that high at least [`TRIM_DROP_MIN`]). Computed from the trace alone, so it is the same
/// for every policy.
pub fn trim_schedule(ops: &[Op]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut high = 0u64;
    for (i, live) in live_after(ops).enumerate() {
        high = high.max(live);
        let at = i + 1;
        let periodic = at % TRIM_EVERY == 0;
        let dropped = high >= TRIM_DROP_MIN && live * 2 <= high;
        if (periodic || dropped) && at < ops.len() {
            out.push(at);
            high = live;
        }
    }
    out
}

/// The arena for a trace's pools: room for the worst policy's regions (4 × peak live + 256
/// MiB; a source that runs out makes the pool's requests fail, and the failures are reported).
pub(crate) fn arena_len(p: &Prepared) -> usize {
    let peak = usize::try_from(p.stats.peak_live_bytes).unwrap_or(usize::MAX / 8);
    peak.saturating_mul(4)
        .saturating_add(256 << 20)
        .next_multiple_of(1 << 20)
}

/// How to measure.
pub struct Options {
    /// Timed runs per configuration (after one untimed run that also gives the figures).
    pub runs: usize,
}

/// The options `pool` takes.
pub const OPTIONS: &[Opt] = &[cli::runs(
    "timed runs per configuration and trace after the untimed one, the median reported (default 7; 1 with --quick)",
)];

impl Options {
    /// The defaults: 7 timed runs (1 with `--quick`).
    pub fn new(mode: Mode) -> Self {
        Options {
            runs: mode.pick(7, 3, 1),
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "runs" => self.runs = cli::count(value, 1, "timed runs per configuration")?,
            _ => return Err(cli::not_taken("pool")),
        }
        Ok(())
    }
}

/// One row: the bare heap (A or B), the pool holding the whole arena, or a pool configuration.
#[derive(Clone, Copy, PartialEq)]
enum Row {
    Bare(char),
    Whole,
    Pool(Config),
}

impl Row {
    fn name(&self) -> String {
        match self {
            Row::Bare(c) => format!("bare InlineHeap ({c})"),
            Row::Whole => "pool, whole arena reserved up front".into(),
            Row::Pool(c) if c.trim => format!("{}, {}, trimmed", c.growing.name, c.source_name()),
            Row::Pool(c) => format!("{}, {}", c.growing.name, c.source_name()),
        }
    }
}

/// What was measured for one row.
struct RowResult {
    row: Row,
    /// Thread CPU time per event of each timed run.
    ns: Vec<f64>,
    /// Wall time per event of each timed run.
    wall_ns: Vec<f64>,
    /// The untimed run's pool figures (none for the bare heap).
    stats: Option<PoolStats>,
    trims: TrimTotals,
    high_water: usize,
    failures: u64,
    check: Result<(), String>,
}

/// The pool measurements of one trace.
pub struct TraceResult {
    name: String,
    events: usize,
    peak_live: u64,
    peak_live_count: usize,
    trims: usize,
    arena: usize,
    runs: usize,
    rows: Vec<RowResult>,
}

/// Measures every configuration on one prepared trace.
pub fn run(p: &Prepared, opts: &Options, bar: &ProgressBar) -> Result<TraceResult, String> {
    let mut arena = Arena::new(arena_len(p))?;
    let schedule = trim_schedule(&p.ops);
    let mut rows: Vec<RowResult> = [Row::Bare('A'), Row::Bare('B'), Row::Whole]
        .into_iter()
        .chain(configs().into_iter().map(Row::Pool))
        .map(|row| RowResult {
            row,
            ns: Vec::new(),
            wall_ns: Vec::new(),
            stats: None,
            trims: TrimTotals::default(),
            high_water: 0,
            failures: 0,
            check: Ok(()),
        })
        .collect();
    let n = rows.len();
    for round in 0..=opts.runs {
        for k in 0..n {
            // Rotated order: no row always runs first, or right after the same neighbour.
            let r = &mut rows[(k + round) % n];
            bar.set_message(format!("pool {}: {}", p.name, r.row.name()));
            bar.inc(1);
            let (out, check) = match r.row {
                Row::Bare(_) => {
                    let mut t = subjects::tagalloc_inline(&mut arena, InlineHeap::new())?;
                    let out = replay(&mut t, &p.ops, p.slots, &[]);
                    (out, t.check())
                }
                Row::Whole => {
                    let mut t = PoolTarget::whole_arena(&mut arena)?;
                    let out = replay(&mut t, &p.ops, p.slots, &[]);
                    (out, t.check())
                }
                Row::Pool(c) => {
                    let mut t = PoolTarget::new(&mut arena, &c);
                    let trims = if c.trim { &schedule[..] } else { &[] };
                    let out = replay(&mut t, &p.ops, p.slots, trims);
                    if round == 0 {
                        r.stats = Some(t.pool.stats());
                        r.high_water = t.pool.source().high_water();
                    }
                    (out, t.check())
                }
            };
            if check.is_err() {
                r.check = check;
            }
            if round == 0 {
                r.failures = out.failures;
                r.trims = out.trims;
            } else if !p.ops.is_empty() {
                let per_event = |d: std::time::Duration| d.as_nanos() as f64 / p.ops.len() as f64;
                r.wall_ns.push(per_event(out.elapsed.wall));
                if let Some(cpu) = out.elapsed.cpu {
                    r.ns.push(per_event(cpu));
                }
            }
        }
    }
    Ok(TraceResult {
        name: p.name.clone(),
        events: p.ops.len(),
        peak_live: p.stats.peak_live_bytes,
        peak_live_count: p.stats.peak_live_count,
        trims: schedule.len(),
        arena: arena.len(),
        runs: opts.runs,
        rows,
    })
}

/// How the pools are built and measured, said once above the tables.
pub fn method_note(runs: usize) -> String {
    format!(
        "Each trace is replayed through a `tagalloc::Pool<InlineHeap, _>` whose source hands out \
         page-aligned regions of one pre-touched arena, first fit (4 × peak live + 256 MiB; \
         nothing is mapped or faulted during a run). Growth policies: fixed 64 KiB or 2 MiB \
         regions, or doubling from 1 MiB to 64 MiB; no reservation, limit or bypass. The source \
         either makes every growth a new region (\"separate regions\", as `mmap` does) or \
         extends the last region in place when the space after it is free (\"grows in place\", \
         as a reserved virtual range does). A trimmed pool calls `Pool::trim` every {} events \
         and after any event that leaves the live bytes at or below half their highest value \
         since the last trim (that high at least 1 MiB), with `release_above` {}: trim gives \
         back wholly free regions and free region ends of at least that size, and releases the \
         pages of free chunks of at least that size (counted by the source, not `madvise`d, so \
         that no run pays for page faults). Realloc is `Pool::realloc` (the heap's own, in place \
         when it can). The figures come from one untimed run.\n\n\
         Time: the same replay loop for every row, over the same arena: the bare heap (one \
         region, the whole arena, given up front) and each pool; {} timed run(s) per row, \
         interleaved round by round in an order rotated each round. ns/event is the replay \
         thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the time the thread \
         was descheduled on this shared machine; the wall-clock median is shown beside it. The \
         bare heap runs twice per round (A and B): B ÷ A is what noise alone does to a ratio.",
        report::count(TRIM_EVERY as u64),
        report::bytes(RELEASE_ABOVE as u64),
        runs
    )
}

impl TraceResult {
    fn bare_ns(&self) -> Option<&[f64]> {
        self.rows
            .iter()
            .find(|r| r.row == Row::Bare('A'))
            .map(|r| &r.ns[..])
    }

    /// Each round's time ÷ the bare heap A's time in the same round.
    fn paired(&self, r: &RowResult) -> Vec<f64> {
        match self.bare_ns() {
            Some(base) => {
                r.ns.iter()
                    .zip(base)
                    .filter(|(_, b)| **b > 0.0)
                    .map(|(x, b)| x / b)
                    .collect()
            }
            None => Vec::new(),
        }
    }

    /// The markdown section for this trace: the footprint table, then the time table.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "### {}\n\n{} events, peak live {} in {} blocks; arena {}; a trimmed pool trims {} \
             times.\n\n",
            self.name,
            report::count(self.events as u64),
            report::bytes(self.peak_live),
            report::count(self.peak_live_count as u64),
            report::bytes(self.arena as u64),
            report::count(self.trims as u64),
        );
        let over = format!(
            "peak reserved {}",
            report::ratio_header("peak live", Better::Lower)
        );
        let mut t = Table::new(&[
            ("pool policy", false),
            ("source", false),
            ("trim", false),
            ("peak reserved", true),
            (&over, true),
            ("final reserved", true),
            ("regions obtained / given back", true),
            ("grown in place", true),
            ("ends cut", true),
            ("given back by trim", true),
            ("released by trim: all / last", true),
            ("failures", true),
        ]);
        let mut notes = Vec::new();
        for r in &self.rows {
            let (Row::Pool(c), Some(s)) = (r.row, r.stats) else {
                continue;
            };
            let ratio = if self.peak_live > 0 {
                format!("{:.2}", s.peak_reserved as f64 / self.peak_live as f64)
            } else {
                "—".into()
            };
            let trimmed = |cell: String| if c.trim { cell } else { "—".into() };
            t.row(vec![
                c.growing.name.into(),
                c.source_name().into(),
                c.trim_name().into(),
                report::bytes(s.peak_reserved as u64),
                ratio,
                report::bytes(s.reserved as u64),
                format!(
                    "{} / {}",
                    report::count(s.regions_obtained),
                    report::count(s.regions_given_back)
                ),
                report::count(s.grown),
                report::count(s.shrunk),
                trimmed(report::bytes(r.trims.given_back)),
                trimmed(format!(
                    "{} / {}",
                    report::bytes(r.trims.released),
                    report::bytes(r.trims.last_released)
                )),
                report::count(r.failures),
            ]);
            if let Err(e) = &r.check {
                notes.push(format!("- {}: check failed: {e}", r.row.name()));
            }
            if r.failures > 0 {
                notes.push(format!(
                    "- {}: {} failed (the arena's address space ran out: it reached {} of {})",
                    r.row.name(),
                    report::counted(r.failures, "request", "requests"),
                    report::bytes(r.high_water as u64),
                    report::bytes(self.arena as u64)
                ));
            }
        }
        out.push_str(&t.render());
        notes.push(
            "- Regions obtained: new regions (a growth in place counts under grown in place); \
             given back: whole regions returned (only trim returns any here); ends cut: free \
             region ends given back by trim; given back by trim: the bytes of those regions and \
             ends, over all trims; released by trim: pages inside free chunks of regions that \
             stay (still reserved, no longer resident), over all trims (a page still free at the \
             next trim is released and counted again) and by the last trim alone."
                .into(),
        );
        report::push_notes(&mut out, &notes);

        let ns_header = format!(
            "CPU ns/event, median of {} (lower is better)",
            report::plural(self.runs, "run")
        );
        let ratio_header = format!("median {}", report::ratio_header("bare A", Better::Lower));
        let mut t = Table::new(&[
            ("heap", false),
            (&ns_header, true),
            ("min–max", true),
            (&ratio_header, true),
            ("per round ÷ bare A, min–max", true),
            ("wall ns/event, median", true),
        ]);
        let base = self.bare_ns().map(report::median);
        let mut notes = Vec::new();
        for r in &self.rows {
            let ns = report::median(&r.ns);
            let (lo, hi) = min_max(&r.ns);
            let paired = self.paired(r);
            let (plo, phi) = min_max(&paired);
            t.row(vec![
                r.row.name(),
                report::nanos(ns),
                format!("{}–{}", report::nanos(lo), report::nanos(hi)),
                report::ratio(ns, base),
                if paired.is_empty() {
                    "—".into()
                } else {
                    format!("{plo:.2}–{phi:.2}")
                },
                report::nanos(report::median(&r.wall_ns)),
            ]);
            if let (Row::Bare(_) | Row::Whole, Err(e)) = (r.row, &r.check) {
                notes.push(format!("- {}: check failed: {e}", r.row.name()));
            }
            if r.ns.len() < r.wall_ns.len() {
                notes.push(format!(
                    "- {}: the thread CPU clock could not be read in some runs",
                    r.row.name()
                ));
            }
        }
        out.push('\n');
        out.push_str(&t.render());
        notes.push(
            "- Bare A and B: the same bare heap run twice per round; B ÷ A shows the noise. The \
             pool with the whole arena reserved up front has the bare heap's one region at the \
             same address, so the heap inside does exactly what the bare heap does: its ratio is \
             the pool layer's own cost. The growth rows add what growing does (misses, and a \
             different layout of regions under the heap, so different placements); the trimmed \
             rows add the trims, each of which walks every region and every chunk."
                .into(),
        );
        report::push_notes(&mut out, &notes);
        out
    }

    /// The JSON record for this trace.
    pub fn json(&self) -> Value {
        let base = self.bare_ns().map(report::median);
        json!({
            "trace": self.name,
            "events": self.events,
            "peak_live_bytes": self.peak_live,
            "peak_live_blocks": self.peak_live_count,
            "arena_bytes": self.arena,
            "trims_scheduled": self.trims,
            "rows": self.rows.iter().map(|r| {
                let ns = report::median(&r.ns);
                let wall = report::median(&r.wall_ns);
                let mut v = json!({
                    "name": r.row.name(),
                    "cpu_ns_per_event": ns.is_finite().then_some(ns),
                    "cpu_ns_per_event_runs": r.ns,
                    "wall_ns_per_event": wall.is_finite().then_some(wall),
                    "wall_ns_per_event_runs": r.wall_ns,
                    "ratio_to_bare_a": base.filter(|b| *b > 0.0 && ns.is_finite()).map(|b| ns / b),
                    "per_round_ratios_to_bare_a": self.paired(r),
                    "failures": r.failures,
                    "check": r.check.as_ref().err(),
                });
                if let (Row::Pool(c), Some(s)) = (r.row, r.stats) {
                    v["policy"] = json!(c.growing.key);
                    v["source"] = json!(if c.in_place { "in_place" } else { "separate" });
                    v["trim"] = json!(c.trim);
                    v["peak_reserved_bytes"] = json!(s.peak_reserved);
                    v["peak_reserved_over_peak_live"] = json!(
                        (self.peak_live > 0).then(|| s.peak_reserved as f64 / self.peak_live as f64)
                    );
                    v["final_reserved_bytes"] = json!(s.reserved);
                    v["regions_obtained"] = json!(s.regions_obtained);
                    v["regions_given_back"] = json!(s.regions_given_back);
                    v["grown"] = json!(s.grown);
                    v["ends_cut"] = json!(s.shrunk);
                    v["trim_calls"] = json!(r.trims.calls);
                    v["trim_given_back_bytes"] = json!(r.trims.given_back);
                    v["trim_released_bytes_all_trims"] = json!(r.trims.released);
                    v["trim_released_bytes_last_trim"] = json!(r.trims.last_released);
                    v["arena_high_water_bytes"] = json!(r.high_water);
                } else if r.row == Row::Whole {
                    v["policy"] = json!("whole_arena_reserved");
                } else {
                    v["policy"] = json!("bare");
                }
                v
            }).collect::<Vec<_>>(),
        })
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

/// The header of the `pool` section.
pub fn heading(runs: usize) -> String {
    let mut s = String::from("## Pools: policy against footprint and time\n\n");
    let _ = writeln!(s, "{}", method_note(runs));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagalloc_tests::trace::Trace;

    fn prepared(text: &str) -> Prepared {
        crate::replay::prepare(Trace::parse("t", text.as_bytes()).unwrap()).unwrap()
    }

    /// A trace that grows to about 3 MiB in 3,000 blocks, frees it all, and grows again.
    fn phases() -> String {
        let mut text = String::from("# tagalloc trace v1\n");
        for round in 0..2u64 {
            for i in 0..3000u64 {
                let id = round * 10_000 + i;
                text.push_str(&format!("a {id} {}\n", 200 + (i * 7919) % 1800));
                if i % 5 == 0 {
                    text.push_str(&format!("r {id} {}\n", 100 + (i * 31) % 4000));
                }
            }
            for i in 0..3000u64 {
                text.push_str(&format!("f {}\n", round * 10_000 + i));
            }
        }
        text
    }

    #[test]
    fn trims_when_live_bytes_halve() {
        let p = prepared(&phases());
        let s = trim_schedule(&p.ops);
        // Once per phase's end: the live bytes halve once on the way down (the high resets
        // at each trim, so further halvings trim again, down to the 1 MiB floor).
        assert!(!s.is_empty());
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        // No zero-size requests here, so the replay's live bytes are the trace's.
        let (at, peak) = peak_moment(&p.ops);
        assert_eq!(peak, p.stats.peak_live_bytes);
        assert_eq!(live_at(&p.ops, at), peak);
        assert!(live_at(&p.ops, at - 1) < peak);
        assert!(s.iter().all(|&i| i < p.ops.len()));
    }

    #[test]
    fn every_configuration_replays_cleanly() {
        let p = prepared(&phases());
        let r = run(&p, &Options { runs: 1 }, &ProgressBar::hidden()).unwrap();
        for row in &r.rows {
            assert!(row.check.is_ok(), "{}: {:?}", row.row.name(), row.check);
            assert_eq!(row.failures, 0, "{}", row.row.name());
            assert_eq!(row.ns.len(), 1);
            if let Row::Pool(c) = row.row {
                let s = row.stats.unwrap();
                assert!(s.peak_reserved as u64 >= r.peak_live, "{}", row.row.name());
                if c.trim {
                    assert!(row.trims.calls > 0);
                    // The trace ends with everything of the first phase freed and trimmed
                    // before the second: something went back or was released.
                    assert!(
                        row.trims.given_back + row.trims.released > 0,
                        "{}",
                        row.row.name()
                    );
                } else {
                    assert_eq!(s.regions_given_back, 0, "{}", row.row.name());
                    assert_eq!(row.trims, TrimTotals::default());
                }
                if !c.in_place {
                    assert_eq!(s.grown, 0, "{}", row.row.name());
                }
            }
        }
        let md = r.markdown();
        assert!(
            md.contains("| 64 KiB regions | separate regions | — |"),
            "{md}"
        );
        assert!(md.contains("| bare InlineHeap (B) |"), "{md}");
    }
}
