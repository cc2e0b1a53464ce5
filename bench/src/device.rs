//! `device [TRACE]`: a device-allocation trace (default: the PyTorch trace torch-cs336)
//! replayed through tagalloc's stream-ordered device pool, with plain device regions and with
//! virtual-memory growth, and through the model of PyTorch's CUDA caching allocator
//! (default settings), all on the fake CUDA driver with its clock: peak reserved device memory
//! against the trace's peak live bytes, the driver calls each makes, the host synchronisations
//! and device-side waits among them, the run time and host stall a device-time [`Model`] gives,
//! against the same replay through an allocator that never waits, and the host time per event.
//! What a PyTorch user reads to decide whether to switch.
//!
//! Method: the trace is first turned into operations on dense slots (ids mapped to recycled
//! slot numbers, streams to indices, a resize to a free then an allocation), so that a timed
//! run does nothing but call the allocator, drive the fake's clock and index a vector, the same
//! for all. Each run gets a fresh fake card (16 GiB, or four times the trace's peak live if
//! more) with a clock ([`FakeClock::DEFAULT`]) and a fresh allocator (not timed), then replays
//! every operation (timed) as the [`Model`] says: the host's own work per event, a kernel after
//! every allocation, a short kernel on the other stream before a free with `u=`. Work completes
//! when the modelled device has done it, so events complete, and memory comes back across
//! streams, when the model says. The time is the allocator's bookkeeping plus the fake driver's
//! for the calls it makes and the replay's own (its launches and clock, measured alone through
//! the allocator that never waits), on the replay thread's CPU clock (`src/clock.rs`: time
//! spent descheduled on a shared machine left out; the wall-clock median is shown beside it).
//! Runs are interleaved (all in turn, then all again), and ns/event is the median. A first,
//! untimed run of each checks the allocator's invariants every 256 events and after the trace,
//! and every run must give the same memory, call and modelled-time figures (the model is
//! deterministic). Then the model's device speed is swept (0.5×, 1×, 2×: one checked run each)
//! to see whether the allocators' order by modelled run time and by peak reserved holds.

use std::ffi::OsStr;
use std::sync::Arc;

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tagalloc_cuda::fake::{
    Call, CallCounts, ClockReport, FakeClock, FakeConfig, FakeDriver, FakeStream,
};
use tagalloc_cuda::torch_model::{TorchAllocator, TorchConfig};
use tagalloc_cuda::{DeviceBlock, DeviceConfig, DevicePool, DevicePtr, Driver};
use tagalloc_tests::trace::{Event, Trace, TraceStats};

use crate::cli::{self, Mode, Opt};
use crate::clock::Stopwatch;
use crate::report::{self, Better, Table};

/// Events between two invariant checks in the checked run.
const CHECK_EVERY: usize = 256;

/// The device speeds of the sweep, as factors of the model's.
pub const SPEEDS: [f64; 3] = [0.5, 1.0, 2.0];

/// How the replay models time. The traces carry no timing (`FORMAT.md`: ids, sizes, streams,
/// `u=`), so the host's work between allocator calls and the device's work on each block are
/// modelled, and the fake driver's clock ([`FakeClock`]) turns them into a run: the host moves
/// on by [`Model::host_ns_per_event`] before every trace event and by each driver call's cost;
/// every allocation of `B` bytes on stream `S` is followed by a kernel on `S` of
/// `(kernel_base_ns + B / bytes_per_ns) / speed`; a free with `u=T` first launches a kernel of
/// `use_kernel_ns / speed` on `T` (that stream's use of the block). A kernel starts when the
/// host has queued it and its stream has finished what came before (and what a
/// `cuStreamWaitEvent` made it wait for); a host synchronisation moves the host clock to the
/// device's end, and that difference is the stall. The run is the host clock at the end once
/// the device has drained.
///
/// The defaults ([`Model::DEFAULT`]) stand for eager PyTorch training on an H100-class card:
///
/// - `host_ns_per_event` = 5 µs: each allocator call stands for about one eager op (an op
///   allocates its output, frees what died), and an eager op costs the host 5 to 10 µs
///   (Python, the dispatcher, `cudaLaunchKernel` at 2 to 4 µs); the lower end, so the host is
///   the faster side and runs ahead of the device, as it must for a GPU to be kept busy.
/// - `kernel_base_ns` = 5 µs: the shortest kernels (launch latency, a few waves, the tail)
///   take 3 to 10 µs of device time on an H100.
/// - `bytes_per_ns` = 1500 (1.5 TB/s): H100 SXM's HBM3 gives 3.35 TB/s at peak, about 3 TB/s
///   in practice; a kernel that produces `B` bytes touches about twice that (reads inputs of
///   the same order, writes the output), so `B` at half the bandwidth. Matrix products are
///   compute-bound and longer than this; the model then errs on the short side, which
///   understates how far the device runs behind the host, hence the stalls (the speed sweep
///   runs the device at half speed too).
/// - `use_kernel_ns` = 5 µs: the other stream's use of the block, as short as a kernel gets
///   (its real work is not in the trace; a short one keeps `u=` from inventing device time).
/// - `speed` = 1: divides every kernel's time (2: a card twice as fast).
/// - Driver calls: [`FakeClock::DEFAULT`], 1 µs of host time for an event or stream call, 20
///   µs for one that obtains, maps or gives back device memory; `cuMemFree` waits for the
///   device, as `cudaFree` does.
/// - The device's concurrency: [`FakeClock::DEFAULT`]'s one engine, a device whose streams
///   share its throughput (one kernel at full speed at a time, other streams' kernels filling
///   its idle gaps): memory-bound kernels share the card's bandwidth, and a kernel that fills
///   the GPU (a matrix product) leaves nothing to another stream. `--engines 0` runs every
///   stream at full speed at once instead, the most concurrency a device could offer, which
///   makes a device-side wait (an order between two streams) as costly as it can be. The
///   traces carry no ordering between their streams either (the recorded four-stream program
///   made each side stream wait for the main stream and the main stream for it, every turn);
///   the never-waiting bound runs them as independent.
///
/// With these, an 8 MiB activation's kernel takes 10.6 µs against the host's 10 µs for its
/// allocation and free: a training step runs close to the balance of host and device, and the
/// sweep moves it to either side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// Host nanoseconds of the program's own work before each trace event.
    pub host_ns_per_event: u64,
    /// Device nanoseconds of a kernel whatever its size.
    pub kernel_base_ns: u64,
    /// Bytes of an allocation a kernel gets through per device nanosecond.
    pub bytes_per_ns: f64,
    /// Device nanoseconds of the kernel a free's `u=` stream runs on the block.
    pub use_kernel_ns: u64,
    /// The device's speed: every kernel's time is divided by it.
    pub speed: f64,
    /// The host cost of driver calls.
    pub clock: FakeClock,
}

impl Model {
    /// The defaults, argued in the type's documentation.
    pub const DEFAULT: Model = Model {
        host_ns_per_event: 5_000,
        kernel_base_ns: 5_000,
        bytes_per_ns: 1_500.0,
        use_kernel_ns: 5_000,
        speed: 1.0,
        clock: FakeClock::DEFAULT,
    };

    /// The same model with the device at `speed`.
    pub fn at_speed(self, speed: f64) -> Model {
        Model { speed, ..self }
    }

    /// Device nanoseconds of the kernel after an allocation of `bytes`.
    #[inline]
    fn kernel_ns(&self, bytes: usize) -> u64 {
        ((self.kernel_base_ns as f64 + bytes as f64 / self.bytes_per_ns) / self.speed).round()
            as u64
    }

    /// Device nanoseconds of the kernel of a `u=` stream.
    #[inline]
    fn use_ns(&self) -> u64 {
        (self.use_kernel_ns as f64 / self.speed).round() as u64
    }

    /// The parameters, for the JSON.
    pub fn json(&self) -> Value {
        json!({
            "timing": "modelled: the traces carry no timing",
            "host_ns_per_event": self.host_ns_per_event,
            "kernel_base_ns": self.kernel_base_ns,
            "bytes_per_ns": self.bytes_per_ns,
            "use_kernel_ns": self.use_kernel_ns,
            "speed": self.speed,
            "driver_call_ns": self.clock.call_ns,
            "driver_memory_call_ns": self.clock.memory_call_ns,
            "mem_free_synchronizes": true,
            "engines": self.clock.engines,
        })
    }

    /// The parameters, for the markdown.
    pub fn describe(&self) -> String {
        format!(
            "**Device-time model** (the traces carry no timing: these times are modelled, not \
             measured; parameters and why in `Model`'s documentation): before each trace event \
             the host spends {} of its own work; every allocation of B bytes on stream S is \
             followed by a kernel on S of ({} + B at {}) ÷ speed; a free with `u=T` first \
             launches a {} ÷ speed kernel on T; device speed {}; driver calls take the host {} \
             ({} for those that obtain, map or give back device memory), `cuMemFree` waits for \
             the device. A kernel starts once the host has queued it and its stream is done \
             (device-side waits included), on {}; a host synchronisation stalls the host until \
             the device gets there. *Modelled run*: the host clock at the end with the device \
             drained; *stall*: host time blocked in synchronisations; *never waiting*: the \
             same replay (same kernels, same host work) through an allocator that makes no \
             driver call and never waits, the lower bound.",
            micros(self.host_ns_per_event),
            micros(self.kernel_base_ns),
            bandwidth(self.bytes_per_ns),
            micros(self.use_kernel_ns),
            speed(self.speed),
            micros(self.clock.call_ns),
            micros(self.clock.memory_call_ns),
            engines(self.clock.engines),
        )
    }
}

/// What `--engines` means, in words.
fn engines(n: u32) -> String {
    match n {
        0 => "a device that runs every stream at full speed at once (no sharing: `--engines 0`, \
              the most concurrency a device could offer)"
            .into(),
        1 => "a device whose streams share its throughput (one kernel at full speed at a time, \
              other streams' kernels filling its idle gaps: kernels that fill the GPU or share \
              its memory bandwidth; `--engines 1`)"
            .into(),
        n => format!("a device running {n} kernels at once at full speed (`--engines {n}`)"),
    }
}

fn micros(ns: u64) -> String {
    format!("{} µs", ns as f64 / 1e3)
}

fn bandwidth(bytes_per_ns: f64) -> String {
    format!("{} TB/s", bytes_per_ns / 1e3)
}

fn speed(s: f64) -> String {
    format!("{s}×")
}

/// Modelled nanoseconds as milliseconds.
fn ms(ns: u64) -> String {
    let v = ns as f64 / 1e6;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

/// What a run of the subcommand does.
pub struct Options {
    pub runs: usize,
    /// The model at speed 1 (the sweep scales it).
    pub model: Model,
    /// Every multi-stream trace replayed, and a summary of them all.
    pub all_multistream: bool,
}

/// The options `device` takes.
pub const OPTIONS: &[Opt] = &[
    cli::runs("interleaved runs, the median of host ns per event reported (default 15; 1 with --quick)"),
    Opt {
        name: "engines",
        value: Some("N"),
        help: "the modelled device runs N kernels at once at full speed (default 1: its streams share its throughput; 0: every stream at full speed at once, no sharing)",
    },
    Opt {
        name: "all-multistream",
        value: None,
        help: "replay every multi-stream trace (the shared torch-multistream and the generated pipeline, prefetch and buckets; with --quick the generated synthetic-3-streams and short patterns) and print a summary table of them all; takes no TRACE",
    },
];

impl Options {
    /// The defaults: 15 runs (1 with `--quick`) of [`Model::DEFAULT`], the trace named.
    pub fn new(mode: Mode) -> Self {
        Options {
            runs: mode.pick(15, 15, 1),
            model: Model::DEFAULT,
            all_multistream: false,
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "runs" => self.runs = cli::count(value, 1, "runs")?,
            "engines" => {
                self.model.clock.engines = cli::text(value)?.parse().map_err(|_| {
                    "is not a count of kernels run at once (expected e.g. 1, or 0: no limit)"
                        .to_string()
                })?
            }
            "all-multistream" => self.all_multistream = true,
            _ => return Err(cli::not_taken("device")),
        }
        Ok(())
    }

    /// Steps of the progress bar for `traces` traces.
    pub fn steps(&self, traces: usize) -> u64 {
        let per_speed = Which::ALL.len() + 1;
        (traces * (per_speed * (self.runs + 1) + per_speed * (SPEEDS.len() - 1))) as u64
    }
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
    /// The index of each op's trace event: the host's own work comes once per event.
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

    /// The pool's own counters, less its waits and synchronisations: the driver's call counts
    /// give those (the counters' meaning follows the pool's design).
    fn figures(&self) -> (u64, String) {
        let s = self.pool.stats();
        (
            s.pool.peak_reserved as u64,
            format!(
                "{} obtained, {}; {} events recorded, {} pending blocks \
                 reused, {} of them freed on another stream; peak pending {}",
                report::counted(s.pool.regions_obtained, "region", "regions"),
                report::counted(s.pool.grown, "growth", "growths"),
                s.counters.events_recorded,
                s.counters.reused_pending,
                s.counters.reused_across,
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

/// The lower bound: distinct addresses from a counter, nothing reused, no driver call, no
/// wait. What the replay costs without an allocator, in host time and in modelled time.
#[derive(Default)]
struct NeverWaiting {
    next: u64,
    live: u64,
    peak: u64,
}

impl Subject for NeverWaiting {
    /// The address and the size.
    type Handle = (u64, usize);

    #[inline]
    fn alloc(&mut self, size: usize, _stream: u8) -> Result<Option<Self::Handle>, String> {
        let at = self.next;
        self.next += (size as u64).next_multiple_of(256);
        self.live += size as u64;
        self.peak = self.peak.max(self.live);
        Ok(Some((at, size)))
    }

    #[inline]
    fn free(&mut self, h: Self::Handle) -> Result<(), String> {
        self.live -= h.1 as u64;
        Ok(())
    }

    fn record_stream(&mut self, _h: &Self::Handle, _stream: u8) -> Result<(), String> {
        Ok(())
    }

    fn check(&self) -> Result<(), String> {
        Ok(())
    }

    fn figures(&self) -> (u64, String) {
        (
            self.peak,
            format!(
                "distinct addresses, {} of them, nothing reused",
                report::bytes(self.next)
            ),
        )
    }
}

/// The allocators compared, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    /// A short name, for orderings.
    fn short(self) -> &'static str {
        match self {
            Which::Plain => "tagalloc plain",
            Which::Vmm => "tagalloc VMM",
            Which::Torch => "PyTorch model",
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

/// A subject of a run: one of the allocators, or the lower bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subj {
    Alloc(Which),
    NeverWaiting,
}

/// The modelled times of a run, in nanoseconds from the replay's start (setup left out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Modelled {
    /// The host clock at the end, once the device has drained.
    run_ns: u64,
    /// Host time blocked in synchronisations.
    stall_ns: u64,
    /// The host clock at the end, before the device drained: the host's own work, its driver
    /// calls and its stalls.
    host_ns: u64,
}

impl Modelled {
    fn between(start: ClockReport, end: ClockReport) -> Modelled {
        Modelled {
            run_ns: end.drained_ns - start.host_ns,
            stall_ns: end.stall_ns - start.stall_ns,
            host_ns: end.host_ns - start.host_ns,
        }
    }

    fn run_s(&self) -> f64 {
        self.run_ns as f64 / 1e9
    }

    fn stall_s(&self) -> f64 {
        self.stall_ns as f64 / 1e9
    }

    fn stall_share(&self) -> f64 {
        self.stall_ns as f64 / self.run_ns.max(1) as f64
    }
}

/// What one run measured.
#[derive(Clone)]
struct Run {
    /// The replay thread's CPU time per event (wall time where the CPU clock cannot be read).
    ns: f64,
    /// Wall time per event.
    wall_ns: f64,
    peak_reserved: u64,
    calls: CallCounts,
    modelled: Modelled,
    notes: String,
}

impl Run {
    /// Stream, event and context synchronisations: the host waited for the device.
    fn host_synchronizations(&self) -> u64 {
        self.calls.get(Call::StreamSynchronize)
            + self.calls.get(Call::EventSynchronize)
            + self.calls.get(Call::CtxSynchronize)
    }

    /// `cuStreamWaitEvent`: a stream waited for another on the device.
    fn device_waits(&self) -> u64 {
        self.calls.get(Call::StreamWaitEvent)
    }

    /// Whether two runs gave the same figures (all but the times measured).
    fn same_figures(&self, other: &Run) -> bool {
        self.peak_reserved == other.peak_reserved
            && self.calls == other.calls
            && self.modelled == other.modelled
    }
}

fn streams(driver: &FakeDriver, n: usize) -> Result<Vec<FakeStream>, String> {
    let mut v = vec![driver.default_stream()];
    for _ in 1..n {
        v.push(driver.stream_create().map_err(|e| e.to_string())?);
    }
    Ok(v)
}

/// Replays `p` through `subject` once, as `model` says, the kernels on `streams`; `check`
/// checks invariants along the way.
fn replay<S: Subject>(
    p: &Prepared,
    subject: &mut S,
    driver: &FakeDriver,
    streams: &[FakeStream],
    model: &Model,
    check: bool,
) -> Result<Run, String> {
    let mut slots: Vec<Option<S::Handle>> = vec![None; p.slots];
    let launch = |stream: u8, ns: u64, i: usize| {
        driver
            .launch(streams[stream as usize], ns)
            .map(drop)
            .map_err(|e| format!("{}: op {i}: {e}", p.name))
    };
    let use_ns = model.use_ns();
    let mut last_event = u32::MAX;
    let calls_before = driver.calls();
    let clock_before = driver.clock_report();
    let clock = Stopwatch::start();
    for (i, op) in p.ops.iter().enumerate() {
        // The program's own work before each event (a resize is two operations of one).
        let event = p.event_of[i];
        if event != last_event {
            last_event = event;
            driver.advance_host(model.host_ns_per_event);
        }
        match *op {
            Op::Alloc { slot, size, stream } => {
                let h = subject
                    .alloc(size, stream)
                    .map_err(|e| format!("{}: op {i}: {e}", p.name))?;
                slots[slot as usize] = h;
                launch(stream, model.kernel_ns(size), i)?;
            }
            Op::Free { slot, used } => {
                // The other stream's use runs whatever the allocator returned for the block
                // (nothing for a size of 0), so that every allocator sees the same device work.
                if let Some(u) = used {
                    launch(u, use_ns, i)?;
                }
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
        if check && (i + 1) % CHECK_EVERY == 0 {
            subject
                .check()
                .map_err(|e| format!("{}: after op {i}: {e}", p.name))?;
        }
    }
    let elapsed = clock.stop();
    let modelled = Modelled::between(clock_before, driver.clock_report());
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
        modelled,
        notes,
    })
}

/// The fake card a trace replays on: the default 16 GiB card, or, for a trace whose peak
/// live bytes need more, one with four times its peak (rounded up to a GiB), so a trace
/// recorded on an 80 GB card replays as it ran; with the model's clock.
fn card(p: &Prepared, model: &Model) -> FakeConfig {
    let default = FakeConfig::default();
    let need = (p.stats.peak_live_bytes as usize)
        .saturating_mul(4)
        .next_multiple_of(1 << 30);
    let total_memory = default.total_memory.max(need);
    FakeConfig {
        total_memory,
        address_space: default.address_space.max(total_memory.saturating_mul(4)),
        clock: Some(model.clock),
        ..default
    }
}

/// One run of `subj` on a fresh fake card.
fn run_one(subj: Subj, p: &Prepared, model: &Model, check: bool) -> Result<Run, String> {
    let driver = Arc::new(FakeDriver::new(card(p, model)).map_err(|e| e.to_string())?);
    let s = streams(&driver, p.streams)?;
    let config = match subj {
        Subj::NeverWaiting => {
            let mut t = NeverWaiting::default();
            return replay(p, &mut t, &driver, &s, model, check);
        }
        Subj::Alloc(Which::Plain) => DeviceConfig::PLAIN,
        Subj::Alloc(Which::Vmm) => DeviceConfig::VMM,
        Subj::Alloc(Which::Torch) => {
            let model_alloc = TorchAllocator::new(Arc::clone(&driver), TorchConfig::default())
                .map_err(|e| e.to_string())?;
            let mut t = Torch {
                model: model_alloc,
                streams: s.clone(),
            };
            return replay(p, &mut t, &driver, &s, model, check);
        }
    };
    let pool = DevicePool::new(Arc::clone(&driver), config).map_err(|e| e.to_string())?;
    let mut t = Tagalloc {
        pool,
        streams: s.clone(),
    };
    replay(p, &mut t, &driver, &s, model, check)
}

/// The results of one subject at the model's speed.
struct Result_ {
    subj: Subj,
    check: Run,
    ns: Vec<f64>,
    wall_ns: Vec<f64>,
}

/// One speed of the sweep: each allocator's checked run, and the lower bound's.
struct SpeedPoint {
    speed: f64,
    never: Modelled,
    runs: Vec<(Which, Run)>,
}

/// Allocators in order of a figure, lowest first; equal figures share a group.
fn order(runs: &[(Which, Run)], key: impl Fn(&Run) -> u64) -> Vec<Vec<Which>> {
    let mut v: Vec<(u64, Which)> = runs.iter().map(|(w, r)| (key(r), *w)).collect();
    v.sort_by_key(|&(k, w)| (k, Which::ALL.iter().position(|&x| x == w)));
    let mut groups: Vec<(u64, Vec<Which>)> = Vec::new();
    for (k, w) in v {
        match groups.last_mut() {
            Some((last, g)) if *last == k => g.push(w),
            _ => groups.push((k, vec![w])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// An order as text, each allocator with the figure it was ordered by (`shown`).
fn order_text(groups: &[Vec<Which>], shown: impl Fn(Which) -> String) -> String {
    groups
        .iter()
        .map(|g| {
            g.iter()
                .map(|&w| format!("{} ({})", w.short(), shown(w)))
                .collect::<Vec<_>>()
                .join(" = ")
        })
        .collect::<Vec<_>>()
        .join(" < ")
}

fn order_json(groups: &[Vec<Which>]) -> Value {
    json!(groups
        .iter()
        .map(|g| g.iter().map(|w| w.name()).collect::<Vec<_>>())
        .collect::<Vec<_>>())
}

/// Everything measured on one trace.
pub struct Measured {
    p: Prepared,
    model: Model,
    runs: usize,
    results: Vec<Result_>,
    never: Result_,
    sweep: Vec<SpeedPoint>,
}

impl Measured {
    fn result(&self, which: Which) -> Option<&Result_> {
        self.results.iter().find(|r| r.subj == Subj::Alloc(which))
    }

    /// Whether the order by run time, and by peak reserved, is the same at every speed.
    fn same_orders(&self) -> (bool, bool) {
        let by_run: Vec<_> = self
            .sweep
            .iter()
            .map(|s| order(&s.runs, |r| r.modelled.run_ns))
            .collect();
        let by_peak: Vec<_> = self
            .sweep
            .iter()
            .map(|s| order(&s.runs, |r| r.peak_reserved))
            .collect();
        (
            by_run.windows(2).all(|w| w[0] == w[1]),
            by_peak.windows(2).all(|w| w[0] == w[1]),
        )
    }
}

/// Replays the trace through every allocator and the lower bound, `runs` timed runs each,
/// interleaved, then once each at the other speeds of the sweep.
pub fn measure(trace: &Trace, opts: &Options, bar: &ProgressBar) -> Result<Measured, String> {
    let p = prepare(trace)?;
    let model = opts.model;
    let subjects: Vec<Subj> = Which::ALL
        .iter()
        .map(|&w| Subj::Alloc(w))
        .chain([Subj::NeverWaiting])
        .collect();
    let mut results: Vec<Result_> = Vec::new();
    for &subj in &subjects {
        let check = run_one(subj, &p, &model, true)?;
        results.push(Result_ {
            subj,
            check,
            ns: Vec::new(),
            wall_ns: Vec::new(),
        });
        bar.inc(1);
    }
    for _ in 0..opts.runs {
        for r in &mut results {
            let run = run_one(r.subj, &p, &model, false)?;
            if !run.same_figures(&r.check) {
                return Err(format!(
                    "{}: {} gave different memory, driver-call or modelled-time figures from \
                     run to run",
                    p.name,
                    r.subj.name()
                ));
            }
            r.ns.push(run.ns);
            r.wall_ns.push(run.wall_ns);
            bar.inc(1);
        }
    }
    let never = results.pop().expect("the lower bound ran");
    let mut sweep = Vec::new();
    for s in SPEEDS {
        let point = if s == model.speed {
            SpeedPoint {
                speed: s,
                never: never.check.modelled,
                runs: results
                    .iter()
                    .map(|r| match r.subj {
                        Subj::Alloc(w) => (w, r.check.clone()),
                        Subj::NeverWaiting => unreachable!("popped"),
                    })
                    .collect(),
            }
        } else {
            let m = model.at_speed(s);
            let mut runs = Vec::new();
            for w in Which::ALL {
                runs.push((w, run_one(Subj::Alloc(w), &p, &m, true)?));
                bar.inc(1);
            }
            let n = run_one(Subj::NeverWaiting, &p, &m, true)?;
            bar.inc(1);
            SpeedPoint {
                speed: s,
                never: n.modelled,
                runs,
            }
        };
        sweep.push(point);
    }
    Ok(Measured {
        p,
        model,
        runs: opts.runs,
        results,
        never,
        sweep,
    })
}

/// Replays one trace: its markdown section and JSON.
pub fn run(trace: &Trace, opts: &Options, bar: &ProgressBar) -> Result<(String, Value), String> {
    let m = measure(trace, opts, bar)?;
    let mut md = String::from("## Device pool against PyTorch's caching allocator\n\n");
    md.push_str(&m.model.describe());
    md.push_str("\n\n");
    md.push_str(&section(&m));
    Ok((md, trace_json(&m)))
}

/// Replays every trace and adds a summary table of them all (`--all-multistream`).
pub fn run_all(
    traces: &[&Trace],
    opts: &Options,
    bar: &ProgressBar,
) -> Result<(String, Value), String> {
    let mut all = Vec::new();
    for t in traces {
        all.push(measure(t, opts, bar)?);
    }
    let mut md = format!(
        "## Device pool against PyTorch's caching allocator: {} multi-stream traces\n\n{}\n\n",
        all.len(),
        opts.model.describe()
    );
    for m in &all {
        md.push_str(&section(m));
        md.push('\n');
    }
    md.push_str(&summary(&all));
    let j = json!({
        "model": opts.model.json(),
        "speeds": SPEEDS,
        "traces": all.iter().map(trace_json).collect::<Vec<_>>(),
        "summary": summary_json(&all),
    });
    Ok((md, j))
}

impl Subj {
    fn name(self) -> &'static str {
        match self {
            Subj::Alloc(w) => w.name(),
            Subj::NeverWaiting => "never waiting (lower bound)",
        }
    }
}

fn pct(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

/// The figures of `run` as a share or ratio, for tables.
fn over(x: u64, base: u64) -> f64 {
    x as f64 / base.max(1) as f64
}

/// One trace's markdown: what it is, the table at the model's speed, the sweep.
fn section(m: &Measured) -> String {
    let p = &m.p;
    let live = p.stats.peak_live_bytes;
    let runs = m.runs;
    let torch = m.result(Which::Torch);
    let torch_ns = torch.map(|r| report::median(&r.ns));
    let torch_mem = torch.map(|r| r.check.peak_reserved as f64);
    let torch_calls = torch.map(|r| r.check.calls.total() as f64);
    let torch_run = torch.map(|r| r.check.modelled.run_ns as f64);
    let never = m.never.check.modelled;
    let mut out = format!(
        "### {}\n\n{} events ({} alloc, {} free, {} realloc) on {}, peak live {} in {} blocks. \
         Every allocator on a fresh {} fake CUDA card with the model's clock (device speed \
         {}); ns/event: median of {} (all in turn) of the replay thread's CPU time (the wall \
         time beside it): the allocator's host bookkeeping, the fake driver's for its calls, \
         and the replay's own, {} CPU ns/event (kernel launches and the fake's clock, measured \
         through the allocator that never waits).{} Never waiting, the modelled run takes {}.\n\n",
        p.name,
        report::count(p.stats.events as u64),
        report::count(p.stats.allocs as u64),
        report::count(p.stats.frees as u64),
        report::count(p.stats.reallocs as u64),
        report::plural(p.streams, "stream"),
        report::bytes(live),
        report::count(p.stats.peak_live_count as u64),
        report::bytes(card(p, &m.model).total_memory as u64),
        speed(m.model.speed),
        report::plural(runs, "run"),
        report::nanos(report::median(&m.never.ns)),
        if p.uses > 0 {
            format!(
                " {} frees carry `u=` (`record_stream` to another stream), replayed as a \
                 kernel on that stream, then `record_stream`, then the free.",
                report::count(p.uses as u64)
            )
        } else {
            String::new()
        },
        ms(never.run_ns),
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
        ("host synchronisations", true),
        ("device waits", true),
        ("all driver calls", true),
        (&report::ratio_header("PyTorch model", Better::Lower), true),
        ("modelled run", true),
        ("modelled stall, % of run (lower is better)", true),
        (&report::ratio_header("never waiting", Better::Lower), true),
        (&report::ratio_header("PyTorch model", Better::Lower), true),
        (
            &format!("CPU ns/event, median of {runs} (lower is better)"),
            true,
        ),
        (&report::ratio_header("PyTorch model", Better::Lower), true),
        ("wall ns/event, median", true),
    ]);
    let mut notes = Vec::new();
    for r in &m.results {
        let Subj::Alloc(which) = r.subj else {
            continue;
        };
        let run = &r.check;
        let c = &run.calls;
        let ns = report::median(&r.ns);
        t.row(vec![
            which.name().into(),
            report::bytes(run.peak_reserved),
            format!("{:.3}", over(run.peak_reserved, live)),
            report::ratio(run.peak_reserved as f64, torch_mem),
            report::count(c.allocations()),
            report::count(c.frees()),
            report::count(c.get(Call::MemMap)),
            report::count(c.get(Call::MemUnmap)),
            report::count(c.get(Call::EventRecord)),
            report::count(c.get(Call::EventQuery)),
            report::count(run.host_synchronizations()),
            report::count(run.device_waits()),
            report::count(c.total()),
            report::ratio(c.total() as f64, torch_calls),
            ms(run.modelled.run_ns),
            pct(run.modelled.stall_share()),
            format!("{:.3}", over(run.modelled.run_ns, never.run_ns)),
            report::ratio(run.modelled.run_ns as f64, torch_run),
            report::nanos(ns),
            report::ratio(ns, torch_ns),
            report::nanos(report::median(&r.wall_ns)),
        ]);
        notes.push(format!(
            "- {}: {}. {}; driver calls: {}.",
            which.name(),
            which.setup(),
            run.notes,
            c
        ));
    }
    out.push_str(&t.render());
    notes.push(
        "- allocations: `cuMemAlloc` + `cuMemCreate`; frees: `cuMemFree` + `cuMemRelease`; \
         maps: `cuMemMap`; unmaps: `cuMemUnmap`; host synchronisations: `cuStreamSynchronize`, \
         `cuEventSynchronize` and `cuCtxSynchronize` calls (the wait inside `cuMemFree` is in \
         the stall, not in this count); device waits: `cuStreamWaitEvent` calls. \"all driver \
         calls\" counts every kind (events, access rights, reservations, memory queries too)."
            .into(),
    );
    report::push_notes(&mut out, &notes);
    out.push('\n');
    out.push_str(&sweep_section(m));
    out
}

/// The speed sweep: a compact table and whether the orders hold.
fn sweep_section(m: &Measured) -> String {
    let live = m.p.stats.peak_live_bytes;
    let mut cols: Vec<(String, bool)> = vec![("allocator".into(), false)];
    for s in &m.sweep {
        let x = speed(s.speed);
        cols.push((format!("{x}: run ÷ never waiting (lower is better)"), true));
        cols.push((format!("{x}: stall, % of run (lower is better)"), true));
        cols.push((
            format!("{x}: peak reserved ÷ peak live (lower is better)"),
            true,
        ));
    }
    let cols_ref: Vec<(&str, bool)> = cols.iter().map(|(c, r)| (c.as_str(), *r)).collect();
    let mut t = Table::new(&cols_ref);
    for w in Which::ALL {
        let mut row = vec![w.name().to_string()];
        for s in &m.sweep {
            match s.runs.iter().find(|(x, _)| *x == w) {
                Some((_, r)) => row.extend([
                    format!("{:.3}", over(r.modelled.run_ns, s.never.run_ns)),
                    pct(r.modelled.stall_share()),
                    format!("{:.3}", over(r.peak_reserved, live)),
                ]),
                None => row.extend(["—".into(), "—".into(), "—".into()]),
            }
        }
        t.row(row);
    }
    let mut out = format!(
        "**Device speed sweep** on {}: the model's kernels divided by the speed, one checked \
         run each; never waiting, the run takes {}.\n\n",
        m.p.name,
        m.sweep
            .iter()
            .map(|s| format!("{} at {}", ms(s.never.run_ns), speed(s.speed)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str(&t.render());
    out.push('\n');
    out.push_str(&verdict(m));
    out.push('\n');
    out
}

/// Whether the orders by modelled run time and by peak reserved are the same at every speed,
/// in a sentence for each, every allocator with its run ÷ never waiting, or its peak reserved
/// ÷ peak live.
fn verdict(m: &Measured) -> String {
    let (same_run, same_peak) = m.same_orders();
    let live = m.p.stats.peak_live_bytes;
    let line = |what: &str, same: bool, by_run: bool| {
        let orders: Vec<String> = m
            .sweep
            .iter()
            .map(|s| {
                let figure = |w: Which| -> String {
                    let r = &s
                        .runs
                        .iter()
                        .find(|(x, _)| *x == w)
                        .expect("every allocator")
                        .1;
                    if by_run {
                        format!("{:.3}", over(r.modelled.run_ns, s.never.run_ns))
                    } else {
                        format!("{:.3}", over(r.peak_reserved, live))
                    }
                };
                let groups = if by_run {
                    order(&s.runs, |r| r.modelled.run_ns)
                } else {
                    order(&s.runs, |r| r.peak_reserved)
                };
                format!("{}: {}", speed(s.speed), order_text(&groups, figure))
            })
            .collect();
        format!(
            "- By {what}, lowest first: **{}**: {}.",
            if same {
                "the same at every speed"
            } else {
                "not the same at every speed"
            },
            orders.join("; ")
        )
    };
    format!(
        "{}\n{}\n",
        line("modelled run time (run ÷ never waiting)", same_run, true),
        line("peak reserved (÷ peak live)", same_peak, false)
    )
}

fn trace_json(m: &Measured) -> Value {
    let p = &m.p;
    let live = p.stats.peak_live_bytes;
    let never = m.never.check.modelled;
    let torch_calls = m.result(Which::Torch).map(|r| r.check.calls.total());
    let (same_run, same_peak) = m.same_orders();
    let never_ns = report::median(&m.never.ns);
    json!({
        "trace": p.name,
        "events": p.stats.events,
        "streams": p.streams,
        "frees_with_u": p.uses,
        "peak_live_bytes": live,
        "model": m.model.json(),
        "modelled_run_s_never_waiting": never.run_s(),
        "replay_cpu_ns_per_event": if never_ns.is_finite() { Some(never_ns) } else { None },
        "results": m.results.iter().filter_map(|r| {
            let Subj::Alloc(which) = r.subj else { return None };
            let run = &r.check;
            let c = &run.calls;
            let ns = report::median(&r.ns);
            Some(json!({
                "allocator": which.name(),
                "setup": which.setup(),
                "peak_reserved_bytes": run.peak_reserved,
                "reserved_over_live": over(run.peak_reserved, live),
                "allocations": c.allocations(),
                "frees": c.frees(),
                "maps": c.get(Call::MemMap),
                "unmaps": c.get(Call::MemUnmap),
                "synchronizations": c.synchronizations(),
                "host_synchronizations": run.host_synchronizations(),
                "device_waits": run.device_waits(),
                "driver_calls": c.total(),
                "driver_calls_over_torch": torch_calls.map(|t| over(c.total(), t)),
                "driver_calls_by_kind": c.iter().filter(|&(_, n)| n > 0)
                    .map(|(k, n)| (k.entry_point().to_string(), json!(n)))
                    .collect::<serde_json::Map<_, _>>(),
                "modelled_run_s": run.modelled.run_s(),
                "modelled_host_stall_s": run.modelled.stall_s(),
                "modelled_host_s": run.modelled.host_ns as f64 / 1e9,
                "modelled_stall_share": run.modelled.stall_share(),
                "modelled_run_over_never_waiting": over(run.modelled.run_ns, never.run_ns),
                "cpu_ns_per_event": if ns.is_finite() { Some(ns) } else { None },
                "cpu_ns_per_event_runs": r.ns,
                "wall_ns_per_event_runs": r.wall_ns,
                "notes": run.notes,
            }))
        }).collect::<Vec<_>>(),
        "speed_sweep": {
            "points": m.sweep.iter().map(|s| json!({
                "speed": s.speed,
                "modelled_run_s_never_waiting": s.never.run_s(),
                "results": s.runs.iter().map(|(w, r)| json!({
                    "allocator": w.name(),
                    "modelled_run_s": r.modelled.run_s(),
                    "modelled_host_stall_s": r.modelled.stall_s(),
                    "modelled_run_over_never_waiting": over(r.modelled.run_ns, s.never.run_ns),
                    "peak_reserved_bytes": r.peak_reserved,
                    "reserved_over_live": over(r.peak_reserved, live),
                    "host_synchronizations": r.host_synchronizations(),
                    "device_waits": r.device_waits(),
                    "driver_calls": r.calls.total(),
                })).collect::<Vec<_>>(),
                "order_by_modelled_run": order_json(&order(&s.runs, |r| r.modelled.run_ns)),
                "order_by_peak_reserved": order_json(&order(&s.runs, |r| r.peak_reserved)),
            })).collect::<Vec<_>>(),
            "same_order_by_modelled_run": same_run,
            "same_order_by_peak_reserved": same_peak,
        },
    })
}

/// The summary of several traces: one row per trace and allocator.
fn summary(all: &[Measured]) -> String {
    let mut t = Table::new(&[
        ("trace", false),
        ("allocator", false),
        ("host synchronisations", true),
        ("device waits", true),
        ("modelled stall, % of run (lower is better)", true),
        ("run ÷ never waiting (lower is better)", true),
        ("peak reserved ÷ peak live (lower is better)", true),
        ("driver calls ÷ PyTorch model's (lower is better)", true),
    ]);
    let mut verdicts = Vec::new();
    for m in all {
        let torch_calls = m.result(Which::Torch).map(|r| r.check.calls.total() as f64);
        for r in &m.results {
            let Subj::Alloc(which) = r.subj else {
                continue;
            };
            let run = &r.check;
            t.row(vec![
                m.p.name.clone(),
                which.name().into(),
                report::count(run.host_synchronizations()),
                report::count(run.device_waits()),
                pct(run.modelled.stall_share()),
                format!(
                    "{:.3}",
                    over(run.modelled.run_ns, m.never.check.modelled.run_ns)
                ),
                format!("{:.3}", over(run.peak_reserved, m.p.stats.peak_live_bytes)),
                report::ratio(run.calls.total() as f64, torch_calls),
            ]);
        }
        verdicts.push(format!("{}:\n{}", m.p.name, verdict(m)));
    }
    let speeds: Vec<String> = SPEEDS.iter().map(|&s| speed(s)).collect();
    format!(
        "### Summary: every multi-stream trace at device speed {}\n\n{}\nOrders of the \
         allocators at device speeds {}:\n\n{}",
        all.first()
            .map_or_else(|| speed(1.0), |m| speed(m.model.speed)),
        t.render(),
        speeds.join(", "),
        verdicts.join("\n")
    )
}

fn summary_json(all: &[Measured]) -> Value {
    let rows: Vec<Value> = all
        .iter()
        .flat_map(|m| {
            let torch_calls = m.result(Which::Torch).map(|r| r.check.calls.total());
            let (same_run, same_peak) = m.same_orders();
            m.results.iter().filter_map(move |r| {
                let Subj::Alloc(which) = r.subj else {
                    return None;
                };
                let run = &r.check;
                Some(json!({
                    "trace": m.p.name,
                    "allocator": which.name(),
                    "host_synchronizations": run.host_synchronizations(),
                    "device_waits": run.device_waits(),
                    "modelled_stall_share": run.modelled.stall_share(),
                    "modelled_run_over_never_waiting":
                        over(run.modelled.run_ns, m.never.check.modelled.run_ns),
                    "reserved_over_live": over(run.peak_reserved, m.p.stats.peak_live_bytes),
                    "driver_calls_over_torch": torch_calls.map(|t| over(run.calls.total(), t)),
                    "same_order_by_modelled_run": same_run,
                    "same_order_by_peak_reserved": same_peak,
                }))
            })
        })
        .collect();
    json!(rows)
}
