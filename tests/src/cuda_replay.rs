//! The one replay loop for device traces: a trace through a stream-ordered allocator on the
//! fake CUDA driver, measuring how much device memory it reserves, with how many driver calls,
//! at what host cost per event. [`crate::device_replay`] runs it through tagalloc's device
//! pool and [`crate::torch_replay`] through the model of PyTorch's caching allocator; both are
//! a [`StreamAllocator`] implementation and a constructor, so the two figures come from the
//! same loop and compare side by side.
//!
//! Streams: each distinct `s=` value of the trace gets a stream of the fake driver, `s=0` (and
//! no `s=` at all) being the default stream. A resize (`r`), which neither allocator has a call
//! for, is replayed as a free followed by an allocation of the new size. A size of 0 allocates
//! nothing. Allocations the trace leaves live are left live; [`Replay::drain`] frees them
//! afterwards.
//!
//! The fake device completes nothing by itself. Every `lag` events (0: never) the replay lets
//! it finish the work recorded up to the previous such point: a GPU that runs between `lag`
//! and `2 × lag` events behind the host.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tagalloc_cuda::fake::{CallCounts, FakeConfig, FakeDriver, FakeMark, FakeStream};
use tagalloc_cuda::Driver;

use crate::trace::{Event, FastHash, Trace};

/// What the replay needs of an allocator: the calls a trace's events become, its invariant
/// checker, and its statistics. Static dispatch: the loop is monomorphised for each
/// allocator, so the timed work is the allocator's calls and nothing in between.
pub trait StreamAllocator {
    /// What an allocation hands back, to be given to [`StreamAllocator::free`].
    type Block;
    /// Why a call failed.
    type Error: fmt::Display + fmt::Debug;
    /// The allocator's statistics, for the report.
    type Stats: ReplayStats;

    /// Allocates `size` bytes for `stream`; `None` for a size of 0 (no memory handed out, as
    /// in PyTorch's allocator).
    fn alloc(
        &mut self,
        size: usize,
        stream: FakeStream,
    ) -> Result<Option<Self::Block>, Self::Error>;

    /// Frees what [`StreamAllocator::alloc`] handed out.
    fn free(&mut self, block: Self::Block) -> Result<(), Self::Error>;

    /// Marks `block` as used on `stream` too (PyTorch's `record_stream`), before its free.
    fn record_stream(&mut self, block: &Self::Block, stream: FakeStream)
        -> Result<(), Self::Error>;

    /// Checks the allocator's invariants.
    fn check(&self) -> Result<(), String>;

    /// The statistics now (peaks over the allocator's life).
    fn stats(&self) -> Self::Stats;

    /// Once nothing is live: gives every byte of device memory back to `driver`, whatever
    /// waiting on the device that takes included.
    fn release_all(&mut self, driver: &FakeDriver) -> Result<(), Self::Error>;
}

/// The part of a report that differs between allocators: their statistics.
pub trait ReplayStats: Clone + fmt::Debug {
    /// Peak reserved device bytes over the replay.
    fn peak_reserved(&self) -> u64;

    /// The allocator's own figures, as they stand in [`ReplayReport`]'s line between the
    /// reserved ratio and the driver calls, their leading separator included.
    fn fmt_figures(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// What a replay measured; `S` is the allocator's statistics.
#[derive(Clone, Debug)]
pub struct ReplayReport<S> {
    /// The trace's name.
    pub trace: String,
    /// Events replayed.
    pub events: usize,
    /// The trace's peak live bytes (the sum of requested sizes live at once).
    pub peak_live_bytes: u64,
    /// The allocator's statistics at the end of the trace (peaks over the whole replay).
    pub stats: S,
    /// Driver calls made during the replay (stream creation before it not included).
    pub calls: CallCounts,
    /// Wall time of the event loop: the allocator, the fake driver's calls, the id map and
    /// the device's simulated progress.
    pub elapsed: Duration,
}

impl<S: ReplayStats> ReplayReport<S> {
    /// Peak reserved bytes ÷ peak live bytes: what the allocator costs in device memory (1.0
    /// is no overhead; lower is better).
    pub fn reserved_over_live(&self) -> f64 {
        self.stats.peak_reserved() as f64 / self.peak_live_bytes.max(1) as f64
    }

    /// Host time per event in nanoseconds.
    pub fn ns_per_event(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.events.max(1) as f64
    }
}

/// Bytes in a GiB, for the reports' figures.
pub(crate) const GIB: f64 = (1u64 << 30) as f64;

impl<S: ReplayStats> fmt::Display for ReplayReport<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} events, peak live {:.3} GiB, peak reserved {:.3} GiB ({:.3} × peak live)",
            self.trace,
            self.events,
            self.peak_live_bytes as f64 / GIB,
            self.stats.peak_reserved() as f64 / GIB,
            self.reserved_over_live(),
        )?;
        self.stats.fmt_figures(f)?;
        write!(
            f,
            "; driver calls: {}; {:.1} ns/event",
            self.calls,
            self.ns_per_event()
        )
    }
}

/// Why a replay stopped; `E` is the allocator's error.
#[derive(Debug)]
pub enum ReplayError<E> {
    /// The fake driver, its streams or the allocator could not be set up.
    Setup(String),
    /// Event `index` (`event`) failed in the allocator.
    Event {
        /// Its position in the trace.
        index: usize,
        /// The event.
        event: Event,
        /// What the allocator said.
        error: E,
    },
    /// The trace frees or resizes an id that is not live (only a hand-made trace can).
    NotLive {
        /// Its position in the trace.
        index: usize,
        /// The event.
        event: Event,
    },
    /// The allocator's invariant checker failed after event `index` (`None`: after the
    /// drain).
    Check {
        /// The last event replayed before the check.
        index: Option<usize>,
        /// What failed.
        message: String,
    },
}

impl<E: fmt::Display> fmt::Display for ReplayError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Setup(e) => write!(f, "setup: {e}"),
            ReplayError::Event {
                index,
                event,
                error,
            } => write!(f, "event {index} ({event}): {error}"),
            ReplayError::NotLive { index, event } => {
                write!(f, "event {index} ({event}): id not live")
            }
            ReplayError::Check {
                index: Some(i),
                message,
            } => write!(f, "invariant broken after event {i}: {message}"),
            ReplayError::Check {
                index: None,
                message,
            } => write!(f, "invariant broken after the drain: {message}"),
        }
    }
}

impl<E: fmt::Display + fmt::Debug> std::error::Error for ReplayError<E> {}

/// A trace replay through allocator `A` on a fake driver it owns.
pub struct Replay<'t, A: StreamAllocator> {
    trace: &'t Trace,
    driver: Arc<FakeDriver>,
    allocator: A,
    streams: HashMap<u32, FakeStream, FastHash>,
    live: HashMap<u64, Option<A::Block>, FastHash>,
    check_every: usize,
    lag: usize,
    mark: Option<FakeMark>,
}

impl<'t, A: StreamAllocator> Replay<'t, A> {
    /// A replay of `trace` on a fake driver configured by `fake`, through the allocator `make`
    /// builds over it, checking the allocator's invariants every `check_every` events (0:
    /// never, for timing), the device catching up every `lag` events (0: never by itself).
    /// The trace's streams are created here, before the replay, so that their driver calls
    /// are not counted.
    pub fn with_allocator(
        trace: &'t Trace,
        fake: FakeConfig,
        check_every: usize,
        lag: usize,
        make: impl FnOnce(Arc<FakeDriver>) -> Result<A, String>,
    ) -> Result<Self, ReplayError<A::Error>> {
        let setup = |e: tagalloc_cuda::DriverError| ReplayError::Setup(e.to_string());
        let driver = Arc::new(FakeDriver::new(fake).map_err(setup)?);
        let allocator = make(Arc::clone(&driver)).map_err(ReplayError::Setup)?;
        let mut streams = HashMap::default();
        for event in &trace.events {
            let used = match *event {
                Event::Free { used, .. } => used,
                _ => None,
            };
            for s in [event.stream(), used]
                .into_iter()
                .flatten()
                .filter(|&s| s != 0)
            {
                if let Entry::Vacant(v) = streams.entry(s) {
                    v.insert(driver.stream_create().map_err(setup)?);
                }
            }
        }
        Ok(Replay {
            trace,
            driver,
            allocator,
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

    /// The allocator.
    pub fn allocator(&mut self) -> &mut A {
        &mut self.allocator
    }

    fn stream(&self, event: &Event) -> FakeStream {
        self.stream_of(event.stream())
    }

    /// The fake stream of a trace's stream number (none, or 0: the default stream).
    fn stream_of(&self, s: Option<u32>) -> FakeStream {
        match s {
            Some(s) if s != 0 => self.streams[&s],
            _ => self.driver.default_stream(),
        }
    }

    /// Replays every event once and reports.
    pub fn run(&mut self) -> Result<ReplayReport<A::Stats>, ReplayError<A::Error>> {
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
                self.allocator
                    .check()
                    .map_err(|message| ReplayError::Check {
                        index: Some(index),
                        message,
                    })?;
            }
        }
        let elapsed = start.elapsed();
        let calls = self.driver.calls().since(&calls_before);
        self.allocator
            .check()
            .map_err(|message| ReplayError::Check {
                index: trace.events.len().checked_sub(1),
                message,
            })?;
        Ok(ReplayReport {
            trace: trace.name.clone(),
            events: trace.events.len(),
            peak_live_bytes: trace.stats().peak_live_bytes,
            stats: self.allocator.stats(),
            calls,
            elapsed,
        })
    }

    fn step(&mut self, index: usize, event: &Event) -> Result<(), ReplayError<A::Error>> {
        let stream = self.stream(event);
        let fail = |error| ReplayError::Event {
            index,
            event: *event,
            error,
        };
        let not_live = || ReplayError::NotLive {
            index,
            event: *event,
        };
        match *event {
            Event::Alloc { id, size, .. } => {
                let b = self.allocator.alloc(size, stream).map_err(fail)?;
                self.live.insert(id, b);
            }
            Event::Free { id, used, .. } => {
                if let Some(b) = self.live.remove(&id).ok_or_else(not_live)? {
                    if used.is_some() {
                        let u = self.stream_of(used);
                        self.allocator.record_stream(&b, u).map_err(fail)?;
                    }
                    self.allocator.free(b).map_err(fail)?;
                }
            }
            Event::Realloc { id, new_size, .. } => {
                if let Some(b) = self.live.remove(&id).ok_or_else(not_live)? {
                    self.allocator.free(b).map_err(fail)?;
                }
                let b = self.allocator.alloc(new_size, stream).map_err(fail)?;
                self.live.insert(id, b);
            }
        }
        Ok(())
    }

    /// Frees every allocation still live, has the allocator give all its device memory back
    /// ([`StreamAllocator::release_all`]) and checks it; returns how many allocations were
    /// freed.
    pub fn drain(&mut self) -> Result<usize, ReplayError<A::Error>> {
        let live: Vec<A::Block> = self.live.drain().filter_map(|(_, b)| b).collect();
        let n = live.len();
        let drained = |message: String| ReplayError::Check {
            index: None,
            message,
        };
        for b in live {
            self.allocator.free(b).map_err(|e| drained(e.to_string()))?;
        }
        self.allocator
            .release_all(&self.driver)
            .map_err(|e| drained(e.to_string()))?;
        self.allocator.check().map_err(drained)?;
        Ok(n)
    }
}
