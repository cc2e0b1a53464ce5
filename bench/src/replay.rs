//! Trace replay: every allocator runs the same recorded stream of allocations, frees and
//! reallocs (the `tagalloc trace v1` format, read by `tagalloc_tests::trace`).
//!
//! A trace is first turned into a flat list of operations on dense slots (ids mapped to
//! recycled slot numbers, sizes and alignments looked up once), so that a timed run does
//! nothing but call the allocator and index a vector. Each allocator then runs the trace once
//! untimed to measure its footprint, and `runs` more times for the timing; allocators are
//! interleaved run by run so that machine noise hits them alike, and every timed run starts
//! with none of the arena cached ([`crate::cold`]), whoever ran before it.
//!
//! Conventions, the same for every allocator: a size of 0 is asked for as 1 byte (what
//! `malloc(0)` hands out); a missing `align=` is 16, the x86-64 malloc alignment; `t=` fields
//! are ignored (the replay is single-threaded, cross-thread frees included). A failed
//! allocation is counted and its id skipped from then on; so is a failed realloc, whose old
//! block is freed so that every later call still names a live block with the right size.
//!
//! Traces of device memory (those with `s=` streams, or a peak above 4 GiB: the PyTorch trace)
//! are replayed only through the address allocators, over a virtual range: no memory is
//! touched.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tagalloc_tests::trace::{Event, Trace, TraceStats};

use crate::cli::{self, Mode, Opt};
use crate::cold::Sweep;
use crate::plot;
use crate::report::{self, Better, Table};
use crate::style;
use crate::subjects::{self, with_subject, Arena, Bench, Peer, Setup, Space, Subject};

/// What one replay run does.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Alloc,
    Free,
    Realloc,
}

/// One trace event on a dense slot. Sizes are those of the call (`old` the block's size before
/// it, for frees and reallocs), at least 1.
#[derive(Clone, Copy)]
pub struct Op {
    pub size: u32,
    pub old: u32,
    pub slot: u32,
    pub kind: Kind,
    pub align_log2: u8,
}

/// A trace ready to replay.
pub struct Prepared {
    pub name: String,
    pub stats: TraceStats,
    pub ops: Vec<Op>,
    pub slots: usize,
    pub device: bool,
    /// Bytes a bump allocator needs for the whole trace (every request, aligned).
    bump_len: usize,
    /// Events between two footprint samples.
    sample_every: usize,
    /// Live bytes at each sample point.
    live: Vec<(usize, u64)>,
    pub zero_sizes: usize,
}

/// About this many footprint samples per trace, for the charts.
const SAMPLES: usize = 500;

/// Requests without `align=` get the platform's malloc alignment.
const DEFAULT_ALIGN: usize = 16;

/// The largest `align=` replayed: the bump reference's arena holds every request with its
/// alignment as slack, so far larger ones would ask for an arena no machine has (the traces
/// in `../shared/traces` ask for at most 16).
const MAX_ALIGN: usize = 1 << 20;

/// Loads and prepares a trace, keeping its first `max_events` events if given.
pub fn load(path: &Path, max_events: Option<usize>) -> Result<Prepared, String> {
    let mut trace = Trace::load(path).map_err(|e| e.to_string())?;
    if let Some(max) = max_events {
        trace.events.truncate(max);
    }
    prepare_from(trace, &path.display().to_string())
}

/// Prepares a trace for replay; errors name the trace, the event (counted from 1) and why.
pub fn prepare(trace: Trace) -> Result<Prepared, String> {
    let origin = trace.name.clone();
    prepare_from(trace, &origin)
}

/// [`prepare`], errors naming `origin` (the file the trace came from) rather than its name.
fn prepare_from(trace: Trace, origin: &str) -> Result<Prepared, String> {
    use std::collections::HashMap;
    let stats = trace.stats();
    let n = trace.events.len();
    let sample_every = (n / SAMPLES).max(1);
    let bad =
        |i: usize, what: &str, e: &Event| format!("{origin}: event {} (`{e}`): {what}", i + 1);
    let small = |i: usize, size: usize, e: &Event| {
        u32::try_from(size.max(1)).map_err(|_| bad(i, "size over 4 GiB, beyond this replay", e))
    };
    // id -> (slot, size, alignment exponent)
    let mut live: HashMap<u64, (u32, u32, u8)> = HashMap::with_capacity(stats.peak_live_count);
    let mut free_slots: Vec<u32> = Vec::new();
    let mut slots = 0u32;
    let mut ops = Vec::with_capacity(n);
    let mut bump_len = 1usize << 20;
    let mut live_bytes = 0u64;
    let mut samples = Vec::with_capacity(SAMPLES + 2);
    let mut zero_sizes = 0;
    for (i, e) in trace.events.iter().enumerate() {
        if i % sample_every == 0 {
            samples.push((i, live_bytes));
        }
        match *e {
            Event::Alloc {
                id, size, align, ..
            } => {
                zero_sizes += usize::from(size == 0);
                let align = align.unwrap_or(DEFAULT_ALIGN);
                if align > MAX_ALIGN {
                    let why = format!(
                        "alignment {align} is above the largest this replay gives ({MAX_ALIGN} bytes)"
                    );
                    return Err(bad(i, &why, e));
                }
                let size32 = small(i, size, e)?;
                let slot = match free_slots.pop() {
                    Some(s) => s,
                    None => {
                        slots += 1;
                        slots - 1
                    }
                };
                let a = align.trailing_zeros() as u8;
                if live.insert(id, (slot, size32, a)).is_some() {
                    return Err(bad(i, "id reused", e));
                }
                ops.push(Op {
                    size: size32,
                    old: 0,
                    slot,
                    kind: Kind::Alloc,
                    align_log2: a,
                });
                bump_len += size.max(1).next_multiple_of(16) + align.saturating_sub(16);
                live_bytes += size as u64;
            }
            Event::Free { id, .. } => {
                let (slot, old, a) = live.remove(&id).ok_or_else(|| bad(i, "id not live", e))?;
                ops.push(Op {
                    size: old,
                    old,
                    slot,
                    kind: Kind::Free,
                    align_log2: a,
                });
                free_slots.push(slot);
                live_bytes -= u64::from(old).min(live_bytes);
            }
            Event::Realloc { id, new_size, .. } => {
                zero_sizes += usize::from(new_size == 0);
                let size32 = small(i, new_size, e)?;
                let entry = live.get_mut(&id).ok_or_else(|| bad(i, "id not live", e))?;
                let (slot, old, a) = *entry;
                entry.1 = size32;
                ops.push(Op {
                    size: size32,
                    old,
                    slot,
                    kind: Kind::Realloc,
                    align_log2: a,
                });
                bump_len += new_size.max(1).next_multiple_of(16) + (1usize << a).saturating_sub(16);
                live_bytes = live_bytes - u64::from(old).min(live_bytes) + new_size as u64;
            }
        }
    }
    samples.push((n, live_bytes));
    let device = stats.streams > 0 || stats.peak_live_bytes > 4 << 30;
    Ok(Prepared {
        name: trace.name,
        stats,
        ops,
        slots: slots as usize,
        device,
        bump_len,
        sample_every,
        live: samples,
        zero_sizes,
    })
}

/// What one run of one allocator over one trace measured.
struct RunOut {
    elapsed: Duration,
    /// Events replayed (fewer than the trace when the time budget ran out).
    done: usize,
    failures: u64,
    /// Profiling runs only: the peak footprint and its course over the trace.
    peak: u64,
    samples: Vec<(usize, u64)>,
    check: Result<(), String>,
}

/// One replay; `PROFILE` adds the footprint bookkeeping, kept out of the timed runs.
struct Replay<'p, const PROFILE: bool> {
    p: &'p Prepared,
    budget: Duration,
}

impl<const PROFILE: bool> Bench for Replay<'_, PROFILE> {
    type Out = RunOut;

    fn run<S: Subject>(&mut self, mut s: S, base: usize) -> RunOut {
        let p = self.p;
        let mut slots: Vec<Option<S::Block>> = vec![None; p.slots];
        // Profiling: the highest end handed out (arena allocators), or the bytes of the live
        // chunks in the allocator's own accounting (glibc), and the peak of either.
        let mut high = 0usize;
        let mut own: Option<usize> = None;
        let mut peak = 0usize;
        let mut samples = Vec::new();
        let mut failures = 0u64;
        let mut done = p.ops.len();
        let start = Instant::now();
        let deadline = start + self.budget;
        for (i, op) in p.ops.iter().enumerate() {
            if i % 4096 == 0 && i > 0 && Instant::now() > deadline {
                done = i;
                break;
            }
            if PROFILE && i % p.sample_every == 0 {
                samples.push((i, own.unwrap_or(high) as u64));
            }
            let (size, align) = (op.size as usize, 1usize << op.align_log2);
            let slot = &mut slots[op.slot as usize];
            match op.kind {
                Kind::Alloc => match s.alloc(size, align) {
                    Some(b) => {
                        if PROFILE {
                            track(&s, &b, base, size, &mut high, &mut own, &mut peak);
                        }
                        *slot = Some(b);
                    }
                    None => failures += 1,
                },
                Kind::Free => {
                    if let Some(b) = slot.take() {
                        if PROFILE {
                            untrack(&s, &b, &mut own);
                        }
                        // SAFETY: the slot holds a live block of this subject, allocated with
                        // this size and alignment (the trace's bookkeeping in `prepare`).
                        unsafe { s.free(b, size, align) };
                    }
                }
                Kind::Realloc => {
                    if let Some(b) = slot.take() {
                        let old = op.old as usize;
                        if PROFILE {
                            untrack(&s, &b, &mut own);
                        }
                        // SAFETY: as for a free; the old block is dropped from the slot and
                        // only the returned one (or, on failure, the freed old one) is used.
                        match unsafe { s.realloc(b, old, align, size) } {
                            Some(nb) => {
                                if PROFILE {
                                    track(&s, &nb, base, size, &mut high, &mut own, &mut peak);
                                }
                                *slot = Some(nb);
                            }
                            None => {
                                failures += 1;
                                // SAFETY: a refused realloc leaves the old block live.
                                unsafe { s.free(b, old, align) };
                            }
                        }
                    }
                }
            }
        }
        let elapsed = start.elapsed();
        if PROFILE {
            samples.push((done, own.unwrap_or(high) as u64));
        }
        let check = s.check();
        if s.needs_cleanup() {
            // The sizes of the blocks still live: replay the bookkeeping up to `done`.
            let mut sizes = vec![(0usize, 0usize); p.slots];
            for op in &p.ops[..done] {
                sizes[op.slot as usize] = (op.size as usize, 1 << op.align_log2);
            }
            for (b, (size, align)) in slots.iter_mut().zip(sizes) {
                if let Some(b) = b.take() {
                    // SAFETY: a live block of this subject with its last size and alignment.
                    unsafe { s.free(b, size, align) };
                }
            }
        }
        RunOut {
            elapsed,
            done,
            failures,
            peak: peak as u64,
            samples,
            check,
        }
    }
}

/// Replays all of `p` once on `s`, untimed and without the footprint bookkeeping: nothing but
/// the allocator's calls and the slot vector, for a profiler to count (`lab/examples/profile.rs`).
/// Returns the failed calls and the allocator's own consistency check.
pub fn replay_once<S: Subject>(p: &Prepared, s: S, base: usize) -> (u64, Result<(), String>) {
    // No deadline: a run this long outlasts any profiler.
    let budget = Duration::from_secs(u64::from(u32::MAX));
    let out = Replay::<false> { p, budget }.run(s, base);
    (out.failures, out.check)
}

/// Profiling: a block of `size` bytes was handed out.
fn track<S: Subject>(
    s: &S,
    b: &S::Block,
    base: usize,
    size: usize,
    high: &mut usize,
    own: &mut Option<usize>,
    peak: &mut usize,
) {
    let now = match s.chunk_bytes(b) {
        Some(c) => {
            let o = own.get_or_insert(0);
            *o += c;
            *o
        }
        None => {
            *high = (*high).max(s.addr(b).wrapping_sub(base) + size);
            *high
        }
    };
    *peak = (*peak).max(now);
}

/// Profiling: a block is about to be freed (or moved).
fn untrack<S: Subject>(s: &S, b: &S::Block, own: &mut Option<usize>) {
    if let (Some(c), Some(o)) = (s.chunk_bytes(b), own.as_mut()) {
        *o = o.saturating_sub(c);
    }
}

/// How to replay.
pub struct Options {
    /// Timed runs per allocator (after one untimed profiling run).
    pub runs: usize,
    /// A run stops after this long (and says so), so that an O(n) allocator cannot stall the
    /// whole tool on a large trace.
    pub budget: Duration,
    /// Where SVG charts go, if anywhere.
    pub plots: Option<PathBuf>,
    /// The allocators to run, by [`Peer::key`] (checked by the caller); empty: all. The
    /// baseline (tagalloc's inline heap, or its detached heap for a device trace) always runs.
    pub only: Vec<String>,
}

/// The options `replay` takes.
pub const OPTIONS: &[Opt] = &[
    cli::runs("timed runs per allocator and trace after the untimed one, the median reported (default 5; 3 in the default suite, 1 with --quick)"),
    Opt {
        name: "budget",
        value: Some("SECONDS"),
        help: "stop one allocator's run on one trace after this long, marked † (default 10; 1.5 in the default suite, 1 with --quick)",
    },
    Opt {
        name: "only",
        value: Some("KEY[,KEY...]"),
        help: "only these allocators (keys such as talc, dlmalloc, rlsf, tagalloc_inline_nostats; a wrong one is refused with the list), and tagalloc's heap every ratio is taken against (default: all)",
    },
];

impl Options {
    /// The defaults: 5 timed runs, each stopped after 10 s (3 and 1.5 s in the default suite,
    /// 1 and 1 s with `--quick`), every allocator, no charts.
    pub fn new(mode: Mode) -> Self {
        Options {
            runs: mode.pick(5, 3, 1),
            budget: Duration::from_secs_f64(mode.pick(10.0, 1.5, 1.0)),
            plots: None,
            only: Vec::new(),
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "runs" => self.runs = cli::count(value, 1, "timed runs per allocator")?,
            "budget" => self.budget = cli::seconds(value)?,
            "only" => self.only = cli::keys(value)?,
            _ => return Err(cli::not_taken("replay")),
        }
        Ok(())
    }
}

/// One allocator's figures for one trace.
struct PeerResult {
    peer: Peer,
    error: Option<String>,
    ns: Vec<f64>,
    done: usize,
    failures: u64,
    peak: u64,
    samples: Vec<(usize, u64)>,
    check: Result<(), String>,
}

/// The replay of one trace through every allocator that fits it.
pub struct TraceResult {
    prepared_name: String,
    stats: TraceStats,
    events: usize,
    device: bool,
    arena: usize,
    zero_sizes: usize,
    results: Vec<PeerResult>,
    live: Vec<(usize, u64)>,
}

/// The address space given to address allocators on host traces, and to every allocator on
/// device traces: four times the peak live bytes plus 64 MiB, so that failures are rare and
/// any that remain say something about fragmentation.
pub fn arena_len(p: &Prepared) -> usize {
    let peak = usize::try_from(p.stats.peak_live_bytes).unwrap_or(usize::MAX / 8);
    peak.saturating_mul(4)
        .saturating_add(64 << 20)
        .next_multiple_of(1 << 20)
}

/// The allocators a prepared trace is replayed through: the address allocators for a device
/// trace, the host and address allocators otherwise; only those `only` names ([`Peer::key`];
/// empty: all) and the baseline.
pub fn peers(p: &Prepared, only: &[String]) -> Vec<Peer> {
    if p.device {
        Peer::selected(&Peer::DEVICE, only, Peer::Detached(256))
    } else {
        let all: Vec<Peer> = Peer::HOST.iter().chain(&Peer::ADDRESSES).copied().collect();
        Peer::selected(&all, only, Peer::Inline)
    }
}

/// Replays one prepared trace through its allocators.
pub fn run(p: &Prepared, opts: &Options, bar: &ProgressBar) -> Result<TraceResult, String> {
    let peers = peers(p, &opts.only);
    let len = arena_len(p);
    let (mut arena, mut bump_arena) = if p.device {
        (None, None)
    } else {
        (Some(Arena::new(len)?), Some(Arena::new(p.bump_len)?))
    };
    let len = arena.as_ref().map_or(len, Arena::len);
    let setup = Setup {
        wrap: false,
        max_allocs: u32::try_from(p.stats.peak_live_count.saturating_mul(2) + 1024)
            .unwrap_or(u32::MAX),
    };
    let mut results: Vec<PeerResult> = peers
        .iter()
        .map(|&peer| PeerResult {
            peer,
            error: None,
            ns: Vec::new(),
            done: p.ops.len(),
            failures: 0,
            peak: 0,
            samples: Vec::new(),
            check: Ok(()),
        })
        .collect();
    let sweep = Sweep::new();
    for round in 0..=opts.runs {
        for r in results.iter_mut() {
            bar.set_message(format!("replay {}: {}", p.name, r.peer.name()));
            bar.inc(1);
            if r.error.is_some() {
                continue;
            }
            let space = match r.peer {
                Peer::Bump => bump_arena.as_mut().map(Space::Host),
                Peer::BumpAddresses => Some(Space::Addresses {
                    base: subjects::VIRTUAL_BASE,
                    len: p.bump_len,
                }),
                peer if peer.is_host() => arena.as_mut().map(Space::Host),
                _ => Some(Space::Addresses {
                    base: subjects::VIRTUAL_BASE,
                    len,
                }),
            };
            let Some(space) = space else {
                r.error = Some("no arena".into());
                continue;
            };
            let out = if round == 0 {
                let mut b = Replay::<true> {
                    p,
                    budget: opts.budget,
                };
                with_subject(r.peer, space, setup, &mut b)
            } else {
                let mut b = Replay::<false> {
                    p,
                    budget: opts.budget,
                };
                sweep.run();
                with_subject(r.peer, space, setup, &mut b)
            };
            match out {
                Err(e) => r.error = Some(e),
                Ok(out) => {
                    r.done = r.done.min(out.done);
                    if out.check.is_err() {
                        r.check = out.check;
                    }
                    if round == 0 {
                        r.failures = out.failures;
                        r.peak = out.peak;
                        r.samples = out.samples;
                    } else if out.done > 0 {
                        r.ns.push(out.elapsed.as_nanos() as f64 / out.done as f64);
                    }
                }
            }
        }
    }
    let result = TraceResult {
        prepared_name: p.name.clone(),
        stats: p.stats,
        events: p.ops.len(),
        device: p.device,
        arena: len,
        zero_sizes: p.zero_sizes,
        results,
        live: p.live.clone(),
    };
    if let Some(dir) = &opts.plots {
        result.plot(dir, opts.runs)?;
    }
    Ok(result)
}

/// What the footprint column means, said once for all traces.
pub const FOOTPRINT_NOTE: &str = "Footprint: the highest address handed out + its size − the \
    arena base. ¹ glibc has no arena, and its heap already holds this process's own freed \
    memory, so what it takes from the system cannot be isolated; shown instead is the peak of \
    the bytes of the live blocks' chunks (`malloc_usable_size` + the 8-byte header each, at \
    every event), a lower bound of its footprint (free fragments and unused top not counted).";

impl TraceResult {
    /// The row every ratio is taken against: tagalloc inline for host traces, the detached
    /// heap at 256 B granules for device traces.
    fn baseline(&self) -> Option<f64> {
        let base = if self.device {
            Peer::Detached(256)
        } else {
            Peer::Inline
        };
        self.results
            .iter()
            .find(|r| r.peer == base && r.error.is_none())
            .map(|r| report::median(&r.ns))
    }

    fn baseline_name(&self) -> &'static str {
        if self.device {
            "tagalloc detached (256 B)"
        } else {
            "tagalloc inline"
        }
    }

    /// The markdown section for this trace.
    pub fn markdown(&self, runs: usize) -> String {
        let s = &self.stats;
        let mut out =
            format!(
            "### {}\n\n{} events ({} alloc, {} free, {} realloc), peak live {} in {} blocks{}. \
             Arena (address range for address allocators): {} = 4 × peak live + 64 MiB.\n\n",
            self.prepared_name,
            report::count(self.events as u64),
            report::count(s.allocs as u64),
            report::count(s.frees as u64),
            report::count(s.reallocs as u64),
            report::bytes(s.peak_live_bytes),
            report::count(s.peak_live_count as u64),
            if self.zero_sizes > 0 {
                let plural = if self.zero_sizes == 1 { "" } else { "s" };
                format!(", {} zero-size request{plural} (asked as 1 B)", self.zero_sizes)
            } else {
                String::new()
            },
            report::bytes(self.arena as u64),
        );
        if self.device {
            out.push_str(
                "Device-memory trace: replayed over a virtual address range by the address \
                 allocators only; the host allocators would need the memory itself.\n\n",
            );
        }
        let base = self.baseline();
        let ns = format!("ns/event, median of {runs} (lower is better)");
        let ratio = report::ratio_header(self.baseline_name(), Better::Lower);
        let over = format!(
            "footprint {}",
            report::ratio_header("peak live", Better::Lower)
        );
        let mut t = Table::new(&[
            ("allocator", false),
            ("memory", false),
            (&ns, true),
            (&ratio, true),
            ("peak footprint", true),
            (&over, true),
            ("failures", true),
        ]);
        let mut notes = Vec::new();
        let mut cut = false;
        for r in &self.results {
            let mut name = r.peer.name();
            if let Some(e) = &r.error {
                t.row(vec![name, String::new(), format!("error: {e}")]);
                continue;
            }
            if r.done < self.events {
                name.push_str(" †");
                cut = true;
            }
            let ns = report::median(&r.ns);
            let foot = if r.peer.has_arena() {
                report::bytes(r.peak)
            } else {
                format!("≥ {} ¹", report::bytes(r.peak))
            };
            let over = if s.peak_live_bytes > 0 && r.done == self.events {
                format!("{:.2}", r.peak as f64 / s.peak_live_bytes as f64)
            } else {
                "—".into()
            };
            t.row(vec![
                name,
                if r.peer.is_host() {
                    "host"
                } else {
                    "addresses"
                }
                .into(),
                report::nanos(ns),
                report::ratio(ns, base),
                foot,
                over,
                if r.peer.has_arena() {
                    report::count(r.failures)
                } else {
                    format!("{} (no fixed arena)", r.failures)
                },
            ]);
            if let Err(e) = &r.check {
                notes.push(format!(
                    "- {}: check after the replay failed: {e}",
                    r.peer.name()
                ));
            }
        }
        out.push_str(&t.render());
        if cut {
            notes.push(
                "- † stopped by the per-run time budget before the end of the trace; its figures \
                 cover the events replayed (so no ratio to the whole trace's peak)."
                    .into(),
            );
            for r in self.results.iter().filter(|r| r.done < self.events) {
                notes.push(format!(
                    "  {}: {} of {} events ({:.1} %)",
                    r.peer.name(),
                    report::count(r.done as u64),
                    report::count(self.events as u64),
                    r.done as f64 * 100.0 / self.events.max(1) as f64
                ));
            }
        }
        report::push_notes(&mut out, &notes);
        out
    }

    /// The JSON record for this trace.
    pub fn json(&self) -> Value {
        let base = self.baseline();
        let s = &self.stats;
        json!({
            "trace": self.prepared_name,
            "events": self.events,
            "allocs": s.allocs,
            "frees": s.frees,
            "reallocs": s.reallocs,
            "peak_live_bytes": s.peak_live_bytes,
            "peak_live_blocks": s.peak_live_count,
            "device": self.device,
            "arena_bytes": self.arena,
            "results": self.results.iter().map(|r| {
                let ns = report::median(&r.ns);
                json!({
                    "allocator": r.peer.name(),
                    "key": r.peer.key(),
                    "memory": if r.peer.is_host() { "host" } else { "addresses" },
                    "error": r.error,
                    "ns_per_event": if ns.is_finite() { Some(ns) } else { None },
                    "ns_per_event_runs": r.ns,
                    "ratio_to_baseline": base.filter(|b| *b > 0.0 && ns.is_finite()).map(|b| ns / b),
                    "peak_footprint_bytes": r.peak,
                    "footprint_measure": if r.peer.has_arena() { "highest address handed out + size - arena base" } else { "peak bytes of the live blocks' chunks, malloc_usable_size + 8 each (a lower bound)" },
                    "failures": r.failures,
                    "events_replayed": r.done,
                    "check": r.check.as_ref().err(),
                })
            }).collect::<Vec<_>>(),
        })
    }

    /// The footprint over the trace and the time per event, as charts.
    fn plot(&self, dir: &Path, runs: usize) -> Result<(), String> {
        const MIB: f64 = (1 << 20) as f64;
        let name = &self.prepared_name;
        let ok: Vec<&PeerResult> = self.results.iter().filter(|r| r.error.is_none()).collect();
        let live = self.stats.peak_live_bytes as f64;
        let cut_short = |r: &PeerResult| r.done < self.events;
        let share = |r: &PeerResult| r.done as f64 * 100.0 / self.events.max(1) as f64;

        // Footprint: events on x in thousands or millions, MiB on y.
        let (scale, x_desc) = if self.events >= 2_000_000 {
            (1e6, "trace event (millions of events from the start)")
        } else if self.events >= 2_000 {
            (1e3, "trace event (thousands of events from the start)")
        } else {
            (1.0, "trace event (events from the start)")
        };
        let points = |samples: &[(usize, u64)]| -> Vec<(f64, f64)> {
            samples
                .iter()
                .map(|&(i, b)| (i as f64 / scale, b as f64 / MIB))
                .collect()
        };
        let mut series = vec![plot::Series {
            name: style::LIVE.into(),
            points: points(&self.live),
            value: Some("1.00".into()),
        }];
        for r in &ok {
            let value = if cut_short(r) {
                "†".to_string()
            } else if live <= 0.0 {
                "—".to_string()
            } else if r.peer.has_arena() {
                format!("{:.2}", r.peak as f64 / live)
            } else {
                format!("≥ {:.2}", r.peak as f64 / live)
            };
            series.push(plot::Series {
                name: r.peer.name(),
                points: points(&r.samples),
                value: Some(value),
            });
        }
        // Stop the y axis above the footprints within 2 × the peak live bytes, so that an
        // allocator spread over its whole arena (or the bump reference) does not flatten the
        // rest; those leave through the top and are named below the chart.
        let limit = 2.0 * live;
        let within = ok
            .iter()
            .map(|r| r.peak as f64)
            .filter(|&p| p <= limit)
            .fold(live, f64::max);
        let above: Vec<&&PeerResult> = ok.iter().filter(|r| r.peak as f64 > limit).collect();
        let y_max = (!above.is_empty() && live > 0.0).then_some(within * 1.1 / MIB);
        let mut notes = Vec::new();
        if let Some(top) = y_max {
            let off: Vec<String> = above
                .iter()
                .map(|r| {
                    format!(
                        "{}, peak {}{}",
                        r.peer.name(),
                        report::bytes(r.peak),
                        if cut_short(r) {
                            String::new()
                        } else {
                            format!(" ({:.1} × peak live)", r.peak as f64 / live)
                        }
                    )
                })
                .collect();
            notes.push(format!(
                "↑ The y axis stops at {} MiB, above every footprint within 2 × peak live. \
                 Beyond it: {}.",
                plot::number(top),
                off.join(", ")
            ));
        }
        notes.push(if self.device {
            "Footprint: the highest offset handed out + its size, in an address range; nothing \
             is touched."
                .to_string()
        } else {
            "Footprint: the highest address handed out + its size − the arena base; glibc malloc \
             (no arena): the bytes of its live chunks, a lower bound (≥)."
                .to_string()
        });
        let stopped: Vec<String> = ok
            .iter()
            .filter(|r| cut_short(r))
            .map(|r| format!("{} after {:.1} %", r.peer.name(), share(r)))
            .collect();
        if !stopped.is_empty() {
            notes.push(format!(
                "† Stopped by the per-run time budget before the end of the trace (its line ends \
                 there): {}.",
                stopped.join(", ")
            ));
        }
        let title = format!(
            "{name} replay: memory footprint over the trace (lower is better; black: the \
             trace's live bytes, the floor)"
        );
        let chart = plot::Lines {
            title: &title,
            x_desc,
            y_desc: "footprint (MiB)",
            log_x_ticks: None,
            y_max,
            value_header: "peak ÷ peak live",
            notes: &notes,
        };
        plot::lines(
            &dir.join(format!("replay-{name}-footprint.svg")),
            &chart,
            &series,
        )?;

        // Time per event.
        let bars: Vec<plot::Bar> = ok
            .iter()
            .map(|r| plot::Bar {
                name: r.peer.name(),
                label: if cut_short(r) {
                    format!("{} †", r.peer.name())
                } else {
                    r.peer.name()
                },
                value: report::median(&r.ns),
            })
            .collect();
        let mut notes = Vec::new();
        if !stopped.is_empty() {
            notes.push(format!(
                "† Stopped by the per-run time budget, so timed over the start of the trace \
                 only: {}.",
                stopped.join(", ")
            ));
        }
        notes.push(if self.device {
            "Device-memory trace: only the address allocators, over an address range; no \
             memory is touched."
                .to_string()
        } else {
            "tagalloc detached and offset-allocator hand out address ranges and touch no \
             memory (a moving realloc copies nothing): compare them with each other."
                .to_string()
        });
        let title = format!("{name} replay: time per event (lower is better)");
        let chart = plot::Bars {
            title: &title,
            x_desc: &format!("ns per event (median of {})", report::plural(runs, "run")),
            unit: " ns",
            notes: &notes,
        };
        plot::bars(&dir.join(format!("replay-{name}-ns.svg")), &chart, &bars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(text: &str) -> Prepared {
        prepare(Trace::parse("t", text.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn errors_name_the_event_and_the_cause() {
        let cases = [
            (
                format!("# tagalloc trace v1\na 0 16\na 1 8 align={}\n", 1u64 << 63),
                "event 2 (`a 1 8 align=9223372036854775808`): alignment 9223372036854775808 is above",
            ),
            (
                "# tagalloc trace v1\na 0 8\na 1 4294967296\n".to_string(),
                "event 2 (`a 1 4294967296`): size over 4 GiB",
            ),
        ];
        for (text, want) in cases {
            let err = prepare(Trace::parse("t", text.as_bytes()).unwrap())
                .err()
                .expect("refused");
            assert!(err.starts_with("t: ") && err.contains(want), "{err}");
        }
    }

    #[test]
    fn slots_are_recycled_and_sizes_tracked() {
        let p = trace("# tagalloc trace v1\na 7 0\na 9 32 align=64\nf 7\na 11 5\nr 9 100\nf 9\n");
        assert_eq!(p.slots, 2);
        assert_eq!(p.zero_sizes, 1);
        let k: Vec<_> = p
            .ops
            .iter()
            .map(|o| (o.slot, o.size, o.old, o.align_log2))
            .collect();
        assert_eq!(
            k,
            [
                (0, 1, 0, 4),
                (1, 32, 0, 6),
                (0, 1, 1, 4),
                (0, 5, 0, 4),
                (1, 100, 32, 6),
                (1, 100, 100, 6)
            ]
        );
        assert!(!p.device);
    }

    #[test]
    fn replays_through_every_host_allocator() {
        let mut text = String::from("# tagalloc trace v1\n");
        for i in 0..2000u64 {
            text.push_str(&format!("a {i} {}\n", 1 + (i * 37) % 700));
            if i % 3 == 0 {
                text.push_str(&format!("r {i} {}\n", 1 + (i * 91) % 2000));
            }
            if i % 2 == 1 {
                text.push_str(&format!("f {}\n", i - 1));
            }
        }
        let p = trace(&text);
        let opts = Options {
            runs: 1,
            budget: Duration::from_secs(60),
            plots: None,
            only: Vec::new(),
        };
        let r = run(&p, &opts, &ProgressBar::hidden()).unwrap();
        for pr in &r.results {
            assert!(pr.error.is_none(), "{:?}: {:?}", pr.peer, pr.error);
            assert_eq!(pr.failures, 0, "{:?}", pr.peer);
            assert!(pr.check.is_ok(), "{:?}: {:?}", pr.peer, pr.check);
            assert_eq!(pr.done, p.ops.len());
            if pr.peer.has_arena() {
                assert!(pr.peak >= 1, "{:?}", pr.peer);
            }
        }
        assert!(r.markdown(1).contains("| tagalloc inline | host |"));
    }
}
