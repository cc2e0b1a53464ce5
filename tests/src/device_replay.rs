//! Trace replay through tagalloc's stream-ordered device pool
//! ([`tagalloc_cuda::DevicePool`]) on the fake CUDA driver: how much device memory it
//! reserves for a trace, with how many driver calls, at what host cost per event; the same
//! loop as [`crate::torch_replay`], so the two compare side by side.
//!
//! Streams: each distinct `s=` value gets a stream of the fake driver, `s=0` (and no `s=`)
//! being the default stream. A resize (`r`) is a free then an allocation, as for the PyTorch
//! model. A size of 0 allocates nothing (PyTorch's allocator hands out no memory for it).
//!
//! The fake device completes nothing by itself. With several streams the pool needs the
//! events it records to complete before memory moves between streams, so every `lag` events
//! the replay lets the device finish the work recorded up to the previous such point: a GPU
//! that runs between `lag` and `2 × lag` events behind the host. (With one stream nothing
//! waits for the device.)

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tagalloc_cuda::fake::{CallCounts, FakeMark, FakeStream};
use tagalloc_cuda::{
    DeviceBlock, DeviceConfig, DeviceError, DevicePool, DeviceStats, Driver, DriverError,
    FakeConfig, FakeDriver,
};

use crate::trace::{Event, FastHash, Trace};

/// What a replay measured.
#[derive(Clone, Debug)]
pub struct DeviceReplayReport {
    /// The trace's name.
    pub trace: String,
    /// Events replayed.
    pub events: usize,
    /// The trace's peak live bytes (the sum of requested sizes live at once).
    pub peak_live_bytes: u64,
    /// The pool's statistics at the end of the trace (peaks over the whole replay).
    pub stats: DeviceStats,
    /// Driver calls made during the replay (stream creation before it not included).
    pub calls: CallCounts,
    /// Wall time of the event loop: the pool, the fake driver's calls, the id map and the
    /// device's simulated progress.
    pub elapsed: Duration,
}

impl DeviceReplayReport {
    /// Peak reserved bytes ÷ peak live bytes (1.0 is no overhead; lower is better).
    pub fn reserved_over_live(&self) -> f64 {
        self.stats.pool.peak_reserved as f64 / self.peak_live_bytes.max(1) as f64
    }

    /// Host time per event in nanoseconds.
    pub fn ns_per_event(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.events.max(1) as f64
    }
}

impl fmt::Display for DeviceReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const GIB: f64 = (1u64 << 30) as f64;
        let s = &self.stats;
        write!(
            f,
            "{}: {} events, peak live {:.3} GiB, peak reserved {:.3} GiB ({:.3} × peak live); \
             {} regions obtained, {} grown, {} given back, {} shrunk; {} streams; driver \
             calls: {}; {:.1} ns/event",
            self.trace,
            self.events,
            self.peak_live_bytes as f64 / GIB,
            s.pool.peak_reserved as f64 / GIB,
            self.reserved_over_live(),
            s.pool.regions_obtained,
            s.pool.grown,
            s.pool.regions_given_back,
            s.pool.shrunk,
            s.streams,
            self.calls,
            self.ns_per_event(),
        )
    }
}

/// Why a replay stopped.
#[derive(Debug)]
pub enum DeviceReplayError {
    /// The fake driver or the pool could not be set up.
    Setup(String),
    /// Event `index` (`event`) failed in the pool.
    Event {
        /// Its position in the trace.
        index: usize,
        /// The event.
        event: Event,
        /// What the pool said.
        error: Box<DeviceError>,
    },
    /// The trace frees or resizes an id that is not live (only a hand-made trace can).
    NotLive {
        /// Its position in the trace.
        index: usize,
        /// The event.
        event: Event,
    },
    /// The pool's invariant checker failed after event `index` (`None`: after the drain).
    Check {
        /// The last event replayed before the check.
        index: Option<usize>,
        /// What failed.
        message: String,
    },
}

impl fmt::Display for DeviceReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceReplayError::Setup(e) => write!(f, "setup: {e}"),
            DeviceReplayError::Event {
                index,
                event,
                error,
            } => write!(f, "event {index} ({event}): {error}"),
            DeviceReplayError::NotLive { index, event } => {
                write!(f, "event {index} ({event}): id not live")
            }
            DeviceReplayError::Check {
                index: Some(i),
                message,
            } => write!(f, "invariant broken after event {i}: {message}"),
            DeviceReplayError::Check {
                index: None,
                message,
            } => write!(f, "invariant broken after the drain: {message}"),
        }
    }
}

impl std::error::Error for DeviceReplayError {}

fn setup(e: DriverError) -> DeviceReplayError {
    DeviceReplayError::Setup(e.to_string())
}

/// How far the simulated device runs behind the host, in events, unless told otherwise.
pub const DEFAULT_LAG: usize = 64;

/// A trace replay through the device pool on a fake driver it owns.
pub struct DeviceReplay<'t> {
    trace: &'t Trace,
    driver: Arc<FakeDriver>,
    pool: DevicePool<Arc<FakeDriver>>,
    streams: HashMap<u32, FakeStream, FastHash>,
    live: HashMap<u64, Option<DeviceBlock<FakeStream>>, FastHash>,
    check_every: usize,
    lag: usize,
    mark: Option<FakeMark>,
}

impl<'t> DeviceReplay<'t> {
    /// A replay of `trace` through a pool configured by `config`, on a fake driver configured
    /// by `fake`, checking the pool's invariants every `check_every` events (0: never, for
    /// timing), the device catching up every `lag` events (0: never by itself).
    pub fn new(
        trace: &'t Trace,
        config: DeviceConfig,
        fake: FakeConfig,
        check_every: usize,
        lag: usize,
    ) -> Result<DeviceReplay<'t>, DeviceReplayError> {
        let driver = Arc::new(FakeDriver::new(fake).map_err(setup)?);
        let pool = DevicePool::new(Arc::clone(&driver), config)
            .map_err(|e| DeviceReplayError::Setup(e.to_string()))?;
        let mut streams = HashMap::default();
        for event in &trace.events {
            if let Some(s) = event.stream().filter(|&s| s != 0) {
                if let std::collections::hash_map::Entry::Vacant(v) = streams.entry(s) {
                    v.insert(driver.stream_create().map_err(setup)?);
                }
            }
        }
        Ok(DeviceReplay {
            trace,
            driver,
            pool,
            streams,
            live: HashMap::default(),
            check_every,
            lag,
            mark: None,
        })
    }

    /// The fake driver (for its call counts and outstanding resources).
    pub fn driver(&self) -> &FakeDriver {
        &self.driver
    }

    /// The pool.
    pub fn pool(&mut self) -> &mut DevicePool<Arc<FakeDriver>> {
        &mut self.pool
    }

    fn stream(&self, event: &Event) -> FakeStream {
        match event.stream() {
            Some(s) if s != 0 => self.streams[&s],
            _ => self.driver.default_stream(),
        }
    }

    /// Replays every event once and reports.
    pub fn run(&mut self) -> Result<DeviceReplayReport, DeviceReplayError> {
        let trace = self.trace;
        let calls_before = self.driver.calls();
        let start = Instant::now();
        for (index, event) in trace.events.iter().enumerate() {
            self.step(index, event)?;
            if self.lag > 0 && (index + 1) % self.lag == 0 {
                if let Some(mark) = self.mark {
                    self.driver.complete_until(mark);
                }
                self.mark = Some(self.driver.mark());
            }
            if self.check_every > 0 && (index + 1) % self.check_every == 0 {
                self.pool
                    .check()
                    .map_err(|message| DeviceReplayError::Check {
                        index: Some(index),
                        message,
                    })?;
            }
        }
        let elapsed = start.elapsed();
        let calls = self.driver.calls().since(&calls_before);
        self.pool
            .check()
            .map_err(|message| DeviceReplayError::Check {
                index: trace.events.len().checked_sub(1),
                message,
            })?;
        Ok(DeviceReplayReport {
            trace: trace.name.clone(),
            events: trace.events.len(),
            peak_live_bytes: trace.stats().peak_live_bytes,
            stats: self.pool.stats(),
            calls,
            elapsed,
        })
    }

    fn alloc(
        &mut self,
        size: usize,
        stream: FakeStream,
    ) -> Result<Option<DeviceBlock<FakeStream>>, DeviceError> {
        if size == 0 {
            return Ok(None);
        }
        self.pool.alloc(size, stream).map(Some)
    }

    fn step(&mut self, index: usize, event: &Event) -> Result<(), DeviceReplayError> {
        let stream = self.stream(event);
        let fail = |error| DeviceReplayError::Event {
            index,
            event: *event,
            error: Box::new(error),
        };
        let not_live = || DeviceReplayError::NotLive {
            index,
            event: *event,
        };
        match *event {
            Event::Alloc { id, size, .. } => {
                let b = self.alloc(size, stream).map_err(fail)?;
                self.live.insert(id, b);
            }
            Event::Free { id, .. } => {
                if let Some(b) = self.live.remove(&id).ok_or_else(not_live)? {
                    self.pool.free(b).map_err(fail)?;
                }
            }
            Event::Realloc { id, new_size, .. } => {
                if let Some(b) = self.live.remove(&id).ok_or_else(not_live)? {
                    self.pool.free(b).map_err(fail)?;
                }
                let b = self.alloc(new_size, stream).map_err(fail)?;
                self.live.insert(id, b);
            }
        }
        Ok(())
    }

    /// Frees every allocation still live, lets the device finish, empties the cache and
    /// checks the pool; returns how many allocations were freed. Afterwards the pool holds no
    /// device memory (a virtual-memory pool keeps its address range for the next region).
    pub fn drain(&mut self) -> Result<usize, DeviceReplayError> {
        let live: Vec<DeviceBlock<FakeStream>> = self.live.drain().filter_map(|(_, b)| b).collect();
        let n = live.len();
        let drained = |message: String| DeviceReplayError::Check {
            index: None,
            message,
        };
        for b in live {
            self.pool.free(b).map_err(|e| drained(e.to_string()))?;
        }
        self.driver.complete_all();
        self.pool.trim().map_err(|e| drained(e.to_string()))?;
        self.pool.check().map_err(drained)?;
        Ok(n)
    }
}

/// A made-up device trace of `events` events on `streams` streams (`s=0` to `s=streams-1`),
/// deterministic in `seed`: tensors of 512 B to 64 MiB (mostly small, a few large, as in a
/// training step), freed in a random order on the stream that allocated them, about `live`
/// of them live at once. For smoke runs and tests that must not need the shared traces.
pub fn synthetic_trace(events: usize, streams: u32, live: usize, seed: u64) -> Trace {
    let mut x = seed.max(1);
    let mut next = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut out = Vec::with_capacity(events);
    let mut held: Vec<(u64, u32)> = Vec::new();
    let mut id = 0u64;
    while out.len() < events {
        let alloc = held.is_empty() || (held.len() < live * 2 && next() % 2 == 0);
        if alloc {
            let size = match next() % 100 {
                0..=59 => 512 + (next() % (64 << 10)) as usize,
                60..=94 => (1 << 20) + (next() % (4 << 20)) as usize,
                _ => (8 << 20) + (next() % (56 << 20)) as usize,
            };
            let stream = (next() % u64::from(streams.max(1))) as u32;
            out.push(Event::Alloc {
                id,
                size,
                align: None,
                thread: None,
                stream: Some(stream),
            });
            held.push((id, stream));
            id += 1;
        } else {
            let (gone, stream) = held.swap_remove((next() % held.len() as u64) as usize);
            out.push(Event::Free {
                id: gone,
                thread: None,
                stream: Some(stream),
            });
        }
    }
    Trace {
        name: format!("synthetic-{streams}-streams"),
        events: out,
    }
}
