//! `device [TRACE]`: a device-allocation trace (default: the PyTorch trace torch-cs336)
//! replayed through tagalloc's stream-ordered device pool, with plain device regions and with
//! virtual-memory growth, and through the model of PyTorch's CUDA caching allocator
//! (default settings), all on the fake CUDA driver: peak reserved device memory against the
//! trace's peak live bytes, the driver calls each makes, and the host time per event. What a
//! PyTorch user reads to decide whether to switch.
//!
//! Method: the trace is first turned into operations on dense slots (ids mapped to recycled
//! slot numbers, streams to indices, a resize to a free then an allocation), so that a timed
//! run does nothing but call the allocator and index a vector, the same for all three. Each
//! run gets a fresh fake card (16 GiB, or four times the trace's peak live if more) and a fresh allocator (not timed), then replays every
//! operation (timed): the time is the allocator's bookkeeping plus the fake driver's for the
//! calls it makes, on the replay thread's CPU clock (`src/clock.rs`: time spent descheduled on
//! a shared machine left out; the wall-clock median is shown beside it). Runs are interleaved
//! (all three, then all three again), and ns/event is the median. A first, untimed run of each checks the allocator's invariants every 256 events and
//! after the trace, and every run must give the same memory and call figures. With several
//! streams the fake device completes the work recorded up to the previous checkpoint every
//! [`LAG`] events (a GPU between 64 and 128 events behind the host); PyTorch's per-stream pools
//! never wait for events, tagalloc's shared heap does.

use std::sync::Arc;

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tagalloc_cuda::fake::{Call, CallCounts, FakeConfig, FakeDriver, FakeMark, FakeStream};
use tagalloc_cuda::torch_model::{TorchAllocator, TorchConfig};
use tagalloc_cuda::{DeviceBlock, DeviceConfig, DevicePool, DevicePtr, Driver};
use tagalloc_tests::trace::{Event, Trace, TraceStats};

use crate::clock::Stopwatch;
use crate::report::{self, Better, Table};

/// Events between two steps of the simulated device (multi-stream traces only).
pub const LAG: usize = 64;

/// Events between two invariant checks in the checked run.
const CHECK_EVERY: usize = 256;

/// What a run of the subcommand does.
pub struct Options {
    pub runs: usize,
}

/// One trace operation on a dense slot.
#[derive(Clone, Copy)]
enum Op {
    Alloc {
        slot: u32,
        size: usize,
        stream: u8,
    },
    /// `used`: the stream `record_stream` named for the block before its free (`u=`).
    Free {
        slot: u32,
        used: Option<u8>,
    },
}

/// A trace ready to replay.
pub struct Prepared {
    name: String,
    stats: TraceStats,
    ops: Vec<Op>,
    slots: usize,
    streams: usize,
    /// The index of each op's trace event, for the device's progress.
    event_of: Vec<u32>,
    /// Frees that carry `u=`.
    uses: usize,
}

/// Turns a trace into operations on dense slots. Errors: more than 255 streams.
pub fn prepare(trace: &Trace) -> Result<Prepared, String> {
    use std::collections::HashMap;
    let mut slot_of: HashMap<u64, u32> = HashMap::new();
    let mut free_slots: Vec<u32> = Vec::new();
    let mut slots = 0u32;
    let mut stream_of: HashMap<u32, u8> = HashMap::new();
    let mut ops = Vec::with_capacity(trace.events.len());
    let mut event_of = Vec::with_capacity(trace.events.len());
    let stream_index = |s: Option<u32>, map: &mut HashMap<u32, u8>| {
        let s = s.unwrap_or(0);
        if s == 0 {
            return Ok(0);
        }
        let n = map.len() + 1;
        match map.get(&s) {
            Some(&i) => Ok(i),
            None if n < 256 => {
                map.insert(s, n as u8);
                Ok(n as u8)
            }
            None => Err(format!("{}: more than 255 streams", trace.name)),
        }
    };
    let mut take = |free_slots: &mut Vec<u32>| {
        free_slots.pop().unwrap_or_else(|| {
            slots += 1;
            slots - 1
        })
    };
    for (i, e) in trace.events.iter().enumerate() {
        let stream = stream_index(e.stream(), &mut stream_of)?;
        match *e {
            Event::Alloc { id, size, .. } => {
                let slot = take(&mut free_slots);
                slot_of.insert(id, slot);
                ops.push(Op::Alloc { slot, size, stream });
                event_of.push(i as u32);
            }
            Event::Free { id, used, .. } => {
                let slot = slot_of
                    .remove(&id)
                    .ok_or(format!("{}: free of {id}", trace.name))?;
                let used = match used {
                    Some(u) => Some(stream_index(Some(u), &mut stream_of)?),
                    None => None,
                };
                ops.push(Op::Free { slot, used });
                event_of.push(i as u32);
                free_slots.push(slot);
            }
            Event::Realloc { id, new_size, .. } => {
                let slot = *slot_of
                    .get(&id)
                    .ok_or(format!("{}: resize of {id}", trace.name))?;
                ops.push(Op::Free { slot, used: None });
                ops.push(Op::Alloc {
                    slot,
                    size: new_size,
                    stream,
                });
                event_of.extend([i as u32, i as u32]);
            }
        }
    }
    let uses = ops
        .iter()
        .filter(|o| matches!(o, Op::Free { used: Some(_), .. }))
        .count();
    Ok(Prepared {
        name: trace.name.clone(),
        stats: trace.stats(),
        ops,
        slots: slots as usize,
        streams: stream_of.len() + 1,
        event_of,
        uses,
    })
}

/// An allocator under test, over a fake driver, on the trace's streams (by index).
trait Subject {
    type Handle: Copy;
    fn alloc(&mut self, size: usize, stream: u8) -> Result<Option<Self::Handle>, String>;
    fn free(&mut self, h: Self::Handle) -> Result<(), String>;
    /// PyTorch's `record_stream`: `h` is used on `stream` too.
    fn record_stream(&mut self, h: &Self::Handle, stream: u8) -> Result<(), String>;
    fn check(&self) -> Result<(), String>;
    /// Peak reserved bytes, and a line of the allocator's own figures.
    fn figures(&self) -> (u64, String);
}

struct Tagalloc {
    pool: DevicePool<Arc<FakeDriver>>,
    streams: Vec<FakeStream>,
}

impl Subject for Tagalloc {
    type Handle = DeviceBlock<FakeStream>;

    #[inline]
    fn alloc(&mut self, size: usize, stream: u8) -> Result<Option<Self::Handle>, String> {
        if size == 0 {
            return Ok(None);
        }
        let s = self.streams[stream as usize];
        self.pool
            .alloc(size, s)
            .map(Some)
            .map_err(|e| e.to_string())
    }

    #[inline]
    fn free(&mut self, h: Self::Handle) -> Result<(), String> {
        self.pool.free(h).map_err(|e| e.to_string())
    }

    fn record_stream(&mut self, h: &Self::Handle, stream: u8) -> Result<(), String> {
        let s = self.streams[stream as usize];
        self.pool.record_stream(h, s).map_err(|e| e.to_string())
    }

    fn check(&self) -> Result<(), String> {
        self.pool.check()
    }

    fn figures(&self) -> (u64, String) {
        let s = self.pool.stats();
        (
            s.pool.peak_reserved as u64,
            format!(
                "{} region(s) obtained, {} growths; {} events recorded, {} blocks reused on \
                 their stream, {} waits for a stream instead of growing, {} other \
                 synchronisations; peak pending {}",
                s.pool.regions_obtained,
                s.pool.grown,
                s.counters.events_recorded,
                s.counters.reused_pending,
                s.counters.stream_waits,
                s.counters.synchronizations,
                report::bytes(s.peak_pending_bytes as u64)
            ),
        )
    }
}

struct Torch {
    model: TorchAllocator<Arc<FakeDriver>>,
    streams: Vec<FakeStream>,
}

impl Subject for Torch {
    type Handle = DevicePtr;

    #[inline]
    fn alloc(&mut self, size: usize, stream: u8) -> Result<Option<Self::Handle>, String> {
        let s = self.streams[stream as usize];
        self.model.malloc(size, s).map_err(|e| e.to_string())
    }

    #[inline]
    fn free(&mut self, h: Self::Handle) -> Result<(), String> {
        self.model.free(h).map_err(|e| e.to_string())
    }

    fn record_stream(&mut self, h: &Self::Handle, stream: u8) -> Result<(), String> {
        let s = self.streams[stream as usize];
        // SAFETY: the run's streams live as long as its driver, so past every free.
        unsafe { self.model.record_stream(*h, s) }.map_err(|e| e.to_string())
    }

    fn check(&self) -> Result<(), String> {
        self.model.check()
    }

    fn figures(&self) -> (u64, String) {
        let s = self.model.stats();
        (
            s.reserved_bytes.peak,
            format!(
                "{} segments obtained, {} released, {} retries",
                s.num_device_alloc, s.num_device_free, s.num_alloc_retries
            ),
        )
    }
}

/// The allocators compared, in table order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Plain,
    Vmm,
    Torch,
}

impl Which {
    const ALL: [Which; 3] = [Which::Plain, Which::Vmm, Which::Torch];

    fn name(self) -> &'static str {
        match self {
            Which::Plain => "tagalloc device, plain regions",
            Which::Vmm => "tagalloc device, VMM growth",
            Which::Torch => "PyTorch caching allocator (model)",
        }
    }

    fn setup(self) -> String {
        match self {
            Which::Plain => {
                "`DeviceConfig::PLAIN`: `cuMemAlloc` regions doubling from 64 MiB to 1 GiB".into()
            }
            Which::Vmm => "`DeviceConfig::VMM`: one region, 64 MiB chunks mapped at its end".into(),
            Which::Torch => {
                "`TorchConfig::default()` (2 MiB / 20 MiB segments, no `max_split_size`)".into()
            }
        }
    }
}

/// What one run measured.
struct Run {
    /// The replay thread's CPU time per event (wall time where the CPU clock cannot be read).
    ns: f64,
    /// Wall time per event.
    wall_ns: f64,
    peak_reserved: u64,
    calls: CallCounts,
    notes: String,
}

fn streams(driver: &FakeDriver, n: usize) -> Result<Vec<FakeStream>, String> {
    let mut v = vec![driver.default_stream()];
    for _ in 1..n {
        v.push(driver.stream_create().map_err(|e| e.to_string())?);
    }
    Ok(v)
}

/// Replays `p` through `subject` once; `check` checks invariants along the way.
fn replay<S: Subject>(
    p: &Prepared,
    subject: &mut S,
    driver: &FakeDriver,
    check: bool,
) -> Result<Run, String> {
    let mut slots: Vec<Option<S::Handle>> = vec![None; p.slots];
    let multi = p.streams > 1;
    let mut mark: Option<FakeMark> = None;
    let mut next_step = LAG;
    let calls_before = driver.calls();
    let clock = Stopwatch::start();
    for (i, op) in p.ops.iter().enumerate() {
        match *op {
            Op::Alloc { slot, size, stream } => {
                let h = subject
                    .alloc(size, stream)
                    .map_err(|e| format!("{}: op {i}: {e}", p.name))?;
                slots[slot as usize] = h;
            }
            Op::Free { slot, used } => {
                if let Some(h) = slots[slot as usize].take() {
                    if let Some(u) = used {
                        subject
                            .record_stream(&h, u)
                            .map_err(|e| format!("{}: op {i}: {e}", p.name))?;
                    }
                    subject
                        .free(h)
                        .map_err(|e| format!("{}: op {i}: {e}", p.name))?;
                }
            }
        }
        if multi && p.event_of[i] as usize >= next_step {
            next_step += LAG;
            if let Some(m) = mark {
                driver.complete_until(m);
            }
            mark = Some(driver.mark());
        }
        if check && (i + 1) % CHECK_EVERY == 0 {
            subject
                .check()
                .map_err(|e| format!("{}: after op {i}: {e}", p.name))?;
        }
    }
    let elapsed = clock.stop();
    let calls = driver.calls().since(&calls_before);
    if check {
        subject
            .check()
            .map_err(|e| format!("{}: at the end: {e}", p.name))?;
    }
    let (peak_reserved, notes) = subject.figures();
    let per_event = |d: std::time::Duration| d.as_nanos() as f64 / p.stats.events.max(1) as f64;
    Ok(Run {
        ns: per_event(elapsed.cpu.unwrap_or(elapsed.wall)),
        wall_ns: per_event(elapsed.wall),
        peak_reserved,
        calls,
        notes,
    })
}

/// The fake card a trace replays on: the default 16 GiB card, or, for a trace whose peak
/// live bytes need more, one with four times its peak (rounded up to a GiB), so a trace
/// recorded on an 80 GB card replays as it ran.
fn card(p: &Prepared) -> FakeConfig {
    let default = FakeConfig::default();
    let need = (p.stats.peak_live_bytes as usize)
        .saturating_mul(4)
        .next_multiple_of(1 << 30);
    let total_memory = default.total_memory.max(need);
    FakeConfig {
        total_memory,
        address_space: default.address_space.max(total_memory.saturating_mul(4)),
        ..default
    }
}

/// One run of allocator `which` on a fresh fake card.
fn run_one(which: Which, p: &Prepared, check: bool) -> Result<Run, String> {
    let driver = Arc::new(FakeDriver::new(card(p)).map_err(|e| e.to_string())?);
    let s = streams(&driver, p.streams)?;
    let config = match which {
        Which::Plain => DeviceConfig::PLAIN,
        Which::Vmm => DeviceConfig::VMM,
        Which::Torch => {
            let model = TorchAllocator::new(Arc::clone(&driver), TorchConfig::default())
                .map_err(|e| e.to_string())?;
            let mut t = Torch { model, streams: s };
            return replay(p, &mut t, &driver, check);
        }
    };
    let pool = DevicePool::new(Arc::clone(&driver), config).map_err(|e| e.to_string())?;
    let mut t = Tagalloc { pool, streams: s };
    replay(p, &mut t, &driver, check)
}

/// The results of one allocator.
struct Result_ {
    which: Which,
    check: Run,
    ns: Vec<f64>,
    wall_ns: Vec<f64>,
}

/// Replays the trace through all three, `runs` timed runs each, interleaved; the markdown
/// section and its JSON.
pub fn run(trace: &Trace, opts: &Options, bar: &ProgressBar) -> Result<(String, Value), String> {
    let p = prepare(trace)?;
    let mut results: Vec<Result_> = Vec::new();
    for which in Which::ALL {
        let check = run_one(which, &p, true)?;
        results.push(Result_ {
            which,
            check,
            ns: Vec::new(),
            wall_ns: Vec::new(),
        });
        bar.inc(1);
    }
    for _ in 0..opts.runs {
        for r in &mut results {
            let run = run_one(r.which, &p, false)?;
            if run.peak_reserved != r.check.peak_reserved || run.calls != r.check.calls {
                return Err(format!(
                    "{}: {} gave different memory or driver-call figures from run to run",
                    p.name,
                    r.which.name()
                ));
            }
            r.ns.push(run.ns);
            r.wall_ns.push(run.wall_ns);
            bar.inc(1);
        }
    }
    Ok((markdown(&p, &results, opts.runs), json(&p, &results)))
}

fn markdown(p: &Prepared, results: &[Result_], runs: usize) -> String {
    let live = p.stats.peak_live_bytes;
    let torch = results.iter().find(|r| r.which == Which::Torch);
    let torch_ns = torch.map(|r| report::median(&r.ns));
    let torch_mem = torch.map(|r| r.check.peak_reserved as f64);
    let torch_calls = torch.map(|r| r.check.calls.total() as f64);
    let mut out = format!(
        "## Device pool against PyTorch's caching allocator\n\n### {}\n\n{} events ({} \
         alloc, {} free, {} realloc) on {}, peak live {} in {} blocks. Every allocator on a \
         fresh {} fake CUDA card; ns/event: median of {} (all three in turn) of the \
         replay thread's CPU time (the wall time beside it), the allocator's host \
         bookkeeping plus the fake driver's for its calls.{}{}\n\n",
        p.name,
        report::count(p.stats.events as u64),
        report::count(p.stats.allocs as u64),
        report::count(p.stats.frees as u64),
        report::count(p.stats.reallocs as u64),
        report::plural(p.streams, "stream"),
        report::bytes(live),
        report::count(p.stats.peak_live_count as u64),
        report::bytes(card(p).total_memory as u64),
        report::plural(runs, "run"),
        if p.streams > 1 {
            format!(
                " Several streams: the fake device completes the work recorded up to the \
                 previous checkpoint every {LAG} events."
            )
        } else {
            String::new()
        },
        if p.uses > 0 {
            format!(
                " {} frees carry `u=` (`record_stream` to another stream), replayed as \
                 `record_stream` before the free.",
                report::count(p.uses as u64)
            )
        } else {
            String::new()
        }
    );
    let mut t = Table::new(&[
        ("allocator", false),
        ("peak reserved", true),
        ("÷ peak live (lower is better)", true),
        (&report::ratio_header("PyTorch model", Better::Lower), true),
        ("allocations", true),
        ("frees", true),
        ("maps", true),
        ("unmaps", true),
        ("event records", true),
        ("event queries", true),
        ("synchronisations", true),
        ("all driver calls", true),
        (&report::ratio_header("PyTorch model", Better::Lower), true),
        (
            &format!("CPU ns/event, median of {runs} (lower is better)"),
            true,
        ),
        (&report::ratio_header("PyTorch model", Better::Lower), true),
        ("wall ns/event, median", true),
    ]);
    let mut notes = Vec::new();
    for r in results {
        let c = &r.check.calls;
        let ns = report::median(&r.ns);
        t.row(vec![
            r.which.name().into(),
            report::bytes(r.check.peak_reserved),
            format!("{:.3}", r.check.peak_reserved as f64 / live.max(1) as f64),
            report::ratio(r.check.peak_reserved as f64, torch_mem),
            report::count(c.allocations()),
            report::count(c.frees()),
            report::count(c.get(Call::MemMap)),
            report::count(c.get(Call::MemUnmap)),
            report::count(c.get(Call::EventRecord)),
            report::count(c.get(Call::EventQuery)),
            report::count(c.synchronizations()),
            report::count(c.total()),
            report::ratio(c.total() as f64, torch_calls),
            report::nanos(ns),
            report::ratio(ns, torch_ns),
            report::nanos(report::median(&r.wall_ns)),
        ]);
        notes.push(format!(
            "- {}: {}. {}; driver calls: {}.",
            r.which.name(),
            r.which.setup(),
            r.check.notes,
            r.check.calls
        ));
    }
    out.push_str(&t.render());
    notes.push(
        "- allocations: `cuMemAlloc` + `cuMemCreate`; frees: `cuMemFree` + `cuMemRelease`; \
         maps: `cuMemMap`; unmaps: `cuMemUnmap`; synchronisations: context, stream and event \
         synchronisations. \"all driver calls\" counts every kind (events, access rights, \
         reservations, memory queries too)."
            .into(),
    );
    report::push_notes(&mut out, &notes);
    out
}

fn json(p: &Prepared, results: &[Result_]) -> Value {
    let live = p.stats.peak_live_bytes;
    json!({
        "trace": p.name,
        "events": p.stats.events,
        "streams": p.streams,
        "peak_live_bytes": live,
        "lag_events": if p.streams > 1 { Some(LAG) } else { None },
        "results": results.iter().map(|r| {
            let c = &r.check.calls;
            let ns = report::median(&r.ns);
            json!({
                "allocator": r.which.name(),
                "setup": r.which.setup(),
                "peak_reserved_bytes": r.check.peak_reserved,
                "reserved_over_live": r.check.peak_reserved as f64 / live.max(1) as f64,
                "allocations": c.allocations(),
                "frees": c.frees(),
                "maps": c.get(Call::MemMap),
                "unmaps": c.get(Call::MemUnmap),
                "synchronizations": c.synchronizations(),
                "driver_calls": c.total(),
                "driver_calls_by_kind": c.iter().filter(|&(_, n)| n > 0)
                    .map(|(k, n)| (k.entry_point().to_string(), json!(n)))
                    .collect::<serde_json::Map<_, _>>(),
                "cpu_ns_per_event": if ns.is_finite() { Some(ns) } else { None },
                "cpu_ns_per_event_runs": r.ns,
                "wall_ns_per_event_runs": r.wall_ns,
                "notes": r.check.notes,
            })
        }).collect::<Vec<_>>(),
    })
}
