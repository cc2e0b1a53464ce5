//! `plan-trace [TRACE...]`: how far is tagalloc's dynamic heap from the offline optimum?
//!
//! An allocation trace (read by `tagalloc_tests::trace`) becomes a planning problem: each
//! allocation is a buffer live from its event to the event that frees it (event indices are
//! the clock), a realloc ends the old buffer and starts one of the new size at the same event
//! (free, then alloc), and what the trace never frees lives to its end. The planner
//! (`tagalloc::plan::search`, with the time budget) places those buffers knowing the whole
//! future; the same events run through tagalloc's detached heap (`DetachedHeap`, exact best
//! fit, no memory touched), whose footprint is the highest address it handed out. Both see
//! sizes rounded up to the heap's granule, so the gap between them is placement alone.
//!
//! Only the first `--events` events of each trace are used (50,000 by default): the greedy
//! planners are quadratic in the buffers.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tagalloc::plan::{self, Buffer, SearchOptions};
use tagalloc::DetachedHeap;
use tagalloc_tests::trace::{Event, Trace};

use crate::cli::{self, Mode, Opt};
use crate::report::{self, Table};

/// How to run.
pub struct Options {
    /// Time the exact search may take per trace.
    pub budget: Duration,
    /// Events used from the start of each trace.
    pub events: usize,
}

/// The options `plan-trace` takes.
pub const OPTIONS: &[Opt] = &[
    Opt {
        name: "budget",
        value: Some("SECONDS"),
        help: "time for the exact search on each trace (default 10; 0.2 with --quick)",
    },
    Opt {
        name: "events",
        value: Some("N"),
        help: "events used from the start of each trace (default 50000; 5000 with --quick)",
    },
];

impl Options {
    /// The defaults: 10 s of search on each trace's first 50,000 events (0.2 s and 5,000
    /// with `--quick`).
    pub fn new(mode: Mode) -> Self {
        Options {
            budget: Duration::from_secs_f64(mode.pick(10.0, 10.0, 0.2)),
            events: mode.pick(50_000, 50_000, 5_000),
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "budget" => self.budget = cli::seconds(value)?,
            "events" => self.events = cli::count(value, 1, "events per trace")?,
            _ => return Err(cli::not_taken("plan-trace")),
        }
        Ok(())
    }
}

/// A trace cut to its first events, as buffers, and the heap's granule for it.
pub struct Problem {
    name: String,
    events: usize,
    granule: u64,
    buffers: Vec<Buffer>,
    trace: Trace,
}

/// Requests without `align=` get the platform's malloc alignment.
const DEFAULT_ALIGN: u64 = 16;

/// Loads a trace and derives its buffers.
pub fn load(path: &Path, max_events: usize) -> Result<Problem, String> {
    let mut trace = Trace::load(path).map_err(|e| e.to_string())?;
    trace.events.truncate(max_events);
    let stats = trace.stats();
    // Device traces (streams, or more live than a host heap holds) get the device granule.
    let device = stats.streams > 0 || stats.peak_live_bytes > 4 << 30;
    let granule = if device {
        tagalloc::DEVICE_GRANULE as u64
    } else {
        tagalloc::HOST_GRANULE as u64
    };
    let round = |size: usize| (size.max(1) as u64).div_ceil(granule) * granule;
    let align_of = |a: Option<usize>| {
        let a = a.map_or(DEFAULT_ALIGN, |a| a as u64);
        if a > granule {
            a
        } else {
            1
        }
    };
    let mut live: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    let mut buffers: Vec<Buffer> = Vec::new();
    let end = trace.events.len() as u64;
    for (t, e) in trace.events.iter().enumerate() {
        let t = t as u64;
        match *e {
            Event::Alloc {
                id, size, align, ..
            } => {
                live.insert(id, buffers.len());
                buffers.push(
                    Buffer::new(buffers.len() as u64, round(size), t, end)
                        .with_align(align_of(align)),
                );
            }
            Event::Free { id, .. } => {
                if let Some(i) = live.remove(&id) {
                    buffers[i].end = t;
                }
            }
            Event::Realloc { id, new_size, .. } => {
                if let Some(i) = live.remove(&id) {
                    buffers[i].end = t;
                    let align = buffers[i].align;
                    live.insert(id, buffers.len());
                    buffers.push(
                        Buffer::new(buffers.len() as u64, round(new_size), t, end)
                            .with_align(align),
                    );
                }
            }
        }
    }
    // An allocation freed at its own event (impossible in a parsed trace) or a realloc right
    // after its allocation would have an empty lifetime; give it one step.
    for b in &mut buffers {
        if b.end <= b.start {
            b.end = b.start + 1;
        }
    }
    Ok(Problem {
        name: trace.name.clone(),
        events: trace.events.len(),
        granule,
        buffers,
        trace,
    })
}

/// The highest address (plus size, minus the base) tagalloc's detached heap hands out
/// while replaying the events, sizes rounded to the granule as for the planner.
fn dynamic_footprint(p: &Problem) -> Result<u64, String> {
    let granule = p.granule as usize;
    let mut heap = DetachedHeap::growable(granule).map_err(|e| e.to_string())?;
    let base = 1usize << 32;
    // Room for every request at once: the heap can never run out.
    let len = p
        .buffers
        .iter()
        .map(|b| b.size as usize + b.align as usize)
        .sum::<usize>()
        .next_multiple_of(granule)
        + granule;
    heap.add_region(base, len).map_err(|e| e.to_string())?;
    let round = |size: usize| size.max(1).next_multiple_of(granule);
    let mut live = std::collections::HashMap::new();
    let mut top = 0usize;
    let fail = |e: tagalloc::Error, ev: &Event| format!("{}: `{ev}`: {e}", p.name);
    for ev in &p.trace.events {
        match *ev {
            Event::Alloc {
                id, size, align, ..
            } => {
                let a = align.unwrap_or(DEFAULT_ALIGN as usize);
                let block = heap.alloc(round(size), a).map_err(|e| fail(e, ev))?;
                top = top.max(block.addr + block.size - base);
                live.insert(id, (block, a));
            }
            Event::Free { id, .. } => {
                if let Some((block, _)) = live.remove(&id) {
                    heap.free(block).map_err(|e| fail(e, ev))?;
                }
            }
            Event::Realloc { id, new_size, .. } => {
                if let Some((block, a)) = live.remove(&id) {
                    let block = match heap.resize_in_place(block, round(new_size)) {
                        Ok(b) => b,
                        Err(_) => {
                            let moved = heap.alloc(round(new_size), a).map_err(|e| fail(e, ev))?;
                            heap.free(block).map_err(|e| fail(e, ev))?;
                            moved
                        }
                    };
                    top = top.max(block.addr + block.size - base);
                    live.insert(id, (block, a));
                }
            }
        }
    }
    Ok(top as u64)
}

/// One trace's figures.
struct Row {
    name: String,
    events: usize,
    buffers: usize,
    granule: u64,
    lower_bound: u64,
    arena: u64,
    optimal: bool,
    dynamic: u64,
    seconds: f64,
}

fn solve(p: &Problem, opts: &Options) -> Result<Row, String> {
    let err = |e: plan::PlanError| format!("{}: {e}", p.name);
    let lower_bound = plan::lower_bound(&p.buffers).map_err(err)?;
    let start = Instant::now();
    let deadline = start + opts.budget;
    let found = plan::search(&p.buffers, &SearchOptions::default(), &mut || {
        Instant::now() >= deadline
    })
    .map_err(err)?;
    let seconds = start.elapsed().as_secs_f64();
    plan::validate(&p.buffers, &found.plan)
        .map_err(|e| format!("{}: the planner's plan is invalid: {e}", p.name))?;
    Ok(Row {
        name: p.name.clone(),
        events: p.events,
        buffers: p.buffers.len(),
        granule: p.granule,
        lower_bound,
        arena: found.plan.arena,
        optimal: found.optimal,
        dynamic: dynamic_footprint(p)?,
        seconds,
    })
}

/// Plans every trace; returns the markdown section and the JSON array.
pub fn run(
    problems: &[Problem],
    opts: &Options,
    bar: &ProgressBar,
) -> Result<(String, Value), String> {
    let mut rows = Vec::new();
    for p in problems {
        bar.set_message(format!("plan-trace {}", p.name));
        rows.push(solve(p, opts)?);
        bar.inc(1);
    }
    let mut md = format!(
        "## Dynamic heap against the offline plan\n\nThe first {} events of each trace as a \
         planning problem (event indices as time; a realloc frees and allocates at the same \
         event; sizes rounded up to the granule), planned with the whole future known \
         (search budget {:.1} s), and replayed through tagalloc's detached heap (exact \
         best fit; a realloc that cannot grow in place moves, both blocks live for that \
         event). Footprint ÷ plan: how much more address space the dynamic heap needed than \
         the plan; lower is better, 1.00 is as good as knowing the future.\n\n",
        report::count(opts.events as u64),
        opts.budget.as_secs_f64()
    );
    let mut t = Table::new(&[
        ("trace", false),
        ("events", true),
        ("buffers", true),
        ("granule", true),
        ("most live, bytes (bound)", true),
        ("planned arena, bytes", true),
        ("proven optimal", false),
        ("tagalloc footprint, bytes", true),
        ("footprint ÷ plan (lower is better)", true),
        ("plan time (s)", true),
    ]);
    for r in &rows {
        t.row(vec![
            r.name.clone(),
            report::count(r.events as u64),
            report::count(r.buffers as u64),
            format!("{} B", r.granule),
            report::count(r.lower_bound),
            report::count(r.arena),
            if r.optimal { "yes" } else { "no" }.into(),
            report::count(r.dynamic),
            if r.arena == 0 {
                "—".into()
            } else {
                format!("{:.4}", r.dynamic as f64 / r.arena as f64)
            },
            format!("{:.3}", r.seconds),
        ]);
    }
    md.push_str(&t.render());
    let json = rows
        .iter()
        .map(|r| {
            json!({
                "trace": r.name,
                "events": r.events,
                "buffers": r.buffers,
                "granule": r.granule,
                "lower_bound": r.lower_bound,
                "arena": r.arena,
                "optimal": r.optimal,
                "dynamic_footprint": r.dynamic,
                "seconds": r.seconds,
            })
        })
        .collect();
    Ok((md, Value::Array(json)))
}
