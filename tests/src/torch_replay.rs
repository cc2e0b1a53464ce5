//! Trace replay through the model of PyTorch's CUDA caching allocator
//! ([`tagalloc_cuda::torch_model::TorchAllocator`]) on the fake CUDA driver: how much device
//! memory PyTorch's policy would reserve for a trace, with how many driver calls, at what host
//! cost per event. The `torch_model` example and the tests share this loop.
//!
//! Streams: each distinct `s=` value of the trace gets a stream of the fake driver, `s=0` (and
//! no `s=` at all) being the default stream. A resize (`r`), which PyTorch's allocator has no
//! call for, is replayed as a free followed by an allocation of the new size. Allocations the
//! trace leaves live are left live; [`TorchReplay::drain`] frees them afterwards.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tagalloc_cuda::fake::{CallCounts, FakeStream};
use tagalloc_cuda::torch_model::{TorchAllocator, TorchConfig, TorchError, TorchStats};
use tagalloc_cuda::{DevicePtr, Driver, DriverError, FakeConfig, FakeDriver};

use crate::trace::{Event, FastHash, Trace};

/// What a replay measured.
#[derive(Clone, Debug)]
pub struct TorchReplayReport {
    /// The trace's name.
    pub trace: String,
    /// Events replayed.
    pub events: usize,
    /// The trace's peak live bytes (the sum of requested sizes live at once).
    pub peak_live_bytes: u64,
    /// The model's statistics at the end of the trace (peaks over the whole replay).
    pub stats: TorchStats,
    /// Driver calls made during the replay (stream creation before it not included).
    pub calls: CallCounts,
    /// Wall time of the event loop: the model, the fake driver's calls and the id map.
    pub elapsed: Duration,
}

impl TorchReplayReport {
    /// Peak reserved bytes ÷ peak live bytes: what the policy costs in device memory (1.0 is
    /// no overhead; lower is better).
    pub fn reserved_over_live(&self) -> f64 {
        self.stats.reserved_bytes.peak as f64 / self.peak_live_bytes.max(1) as f64
    }

    /// Host time per event in nanoseconds.
    pub fn ns_per_event(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.events.max(1) as f64
    }
}

impl fmt::Display for TorchReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const GIB: f64 = (1u64 << 30) as f64;
        let s = &self.stats;
        write!(
            f,
            "{}: {} events, peak live {:.3} GiB, peak reserved {:.3} GiB ({:.3} × peak live), \
             peak allocated {:.3} GiB; {} segments obtained, {} released, {} retries, {} \
             synchronisations of all streams; driver calls: {}; {:.1} ns/event",
            self.trace,
            self.events,
            self.peak_live_bytes as f64 / GIB,
            s.reserved_bytes.peak as f64 / GIB,
            self.reserved_over_live(),
            s.allocated_bytes.peak as f64 / GIB,
            s.num_device_alloc,
            s.num_device_free,
            s.num_alloc_retries,
            s.num_sync_all_streams,
            self.calls,
            self.ns_per_event(),
        )
    }
}

/// Why a replay stopped.
#[derive(Debug)]
pub enum TorchReplayError {
    /// The fake driver could not be set up.
    Setup(DriverError),
    /// Event `index` (`event`) failed in the model.
    Event {
        /// Its position in the trace.
        index: usize,
        /// The event.
        event: Event,
        /// What the model said.
        error: TorchError,
    },
    /// The trace frees or resizes an id that is not live (only a hand-made trace can).
    NotLive {
        /// Its position in the trace.
        index: usize,
        /// The event.
        event: Event,
    },
    /// The model's invariant checker failed after event `index` (`None`: after the drain).
    Check {
        /// The last event replayed before the check.
        index: Option<usize>,
        /// What failed.
        message: String,
    },
}

impl fmt::Display for TorchReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TorchReplayError::Setup(e) => write!(f, "fake driver: {e}"),
            TorchReplayError::Event {
                index,
                event,
                error,
            } => write!(f, "event {index} ({event}): {error}"),
            TorchReplayError::NotLive { index, event } => {
                write!(f, "event {index} ({event}): id not live")
            }
            TorchReplayError::Check {
                index: Some(i),
                message,
            } => write!(f, "invariant broken after event {i}: {message}"),
            TorchReplayError::Check {
                index: None,
                message,
            } => write!(f, "invariant broken after the drain: {message}"),
        }
    }
}

impl std::error::Error for TorchReplayError {}

/// A trace replay through the PyTorch model on a fake driver it owns.
pub struct TorchReplay<'t> {
    trace: &'t Trace,
    driver: Arc<FakeDriver>,
    model: TorchAllocator<Arc<FakeDriver>>,
    streams: HashMap<u32, FakeStream, FastHash>,
    live: HashMap<u64, Option<DevicePtr>, FastHash>,
    check_every: usize,
}

impl<'t> TorchReplay<'t> {
    /// A replay of `trace` through a model configured by `config`, on a fake driver configured
    /// by `fake`, checking the model's invariants every `check_every` events (0: never, for
    /// timing).
    pub fn new(
        trace: &'t Trace,
        config: TorchConfig,
        fake: FakeConfig,
        check_every: usize,
    ) -> Result<TorchReplay<'t>, TorchReplayError> {
        let driver = Arc::new(FakeDriver::new(fake).map_err(TorchReplayError::Setup)?);
        let model =
            TorchAllocator::new(Arc::clone(&driver), config).map_err(|error| match error {
                TorchError::Driver(e) => TorchReplayError::Setup(e),
                other => TorchReplayError::Check {
                    index: None,
                    message: other.to_string(),
                },
            })?;
        let mut replay = TorchReplay {
            trace,
            driver,
            model,
            streams: HashMap::default(),
            live: HashMap::default(),
            check_every,
        };
        for event in &trace.events {
            if let Some(s) = event.stream().filter(|&s| s != 0) {
                if !replay.streams.contains_key(&s) {
                    let stream = replay
                        .driver
                        .stream_create()
                        .map_err(TorchReplayError::Setup)?;
                    replay.streams.insert(s, stream);
                }
            }
        }
        Ok(replay)
    }

    /// The fake driver (for its call counts and outstanding resources).
    pub fn driver(&self) -> &FakeDriver {
        &self.driver
    }

    /// The model.
    pub fn model(&mut self) -> &mut TorchAllocator<Arc<FakeDriver>> {
        &mut self.model
    }

    fn stream(&self, event: &Event) -> FakeStream {
        match event.stream() {
            Some(s) if s != 0 => self.streams[&s],
            _ => self.driver.default_stream(),
        }
    }

    /// Replays every event once and reports.
    pub fn run(&mut self) -> Result<TorchReplayReport, TorchReplayError> {
        let trace = self.trace;
        let calls_before = self.driver.calls();
        let start = Instant::now();
        for (index, event) in trace.events.iter().enumerate() {
            self.step(index, event)?;
            if self.check_every > 0 && (index + 1) % self.check_every == 0 {
                self.model()
                    .check()
                    .map_err(|message| TorchReplayError::Check {
                        index: Some(index),
                        message,
                    })?;
            }
        }
        let elapsed = start.elapsed();
        let calls = self.driver.calls().since(&calls_before);
        self.model()
            .check()
            .map_err(|message| TorchReplayError::Check {
                index: trace.events.len().checked_sub(1),
                message,
            })?;
        Ok(TorchReplayReport {
            trace: trace.name.clone(),
            events: trace.events.len(),
            peak_live_bytes: trace.stats().peak_live_bytes,
            stats: self.model().stats(),
            calls,
            elapsed,
        })
    }

    fn step(&mut self, index: usize, event: &Event) -> Result<(), TorchReplayError> {
        let stream = self.stream(event);
        let fail = |error| TorchReplayError::Event {
            index,
            event: *event,
            error,
        };
        match *event {
            Event::Alloc { id, size, .. } => {
                let ptr = self.model().malloc(size, stream).map_err(fail)?;
                self.live.insert(id, ptr);
            }
            Event::Free { id, .. } => {
                let ptr = self.live.remove(&id).ok_or(TorchReplayError::NotLive {
                    index,
                    event: *event,
                })?;
                if let Some(ptr) = ptr {
                    self.model().free(ptr).map_err(fail)?;
                }
            }
            Event::Realloc { id, new_size, .. } => {
                let ptr = self.live.remove(&id).ok_or(TorchReplayError::NotLive {
                    index,
                    event: *event,
                })?;
                if let Some(ptr) = ptr {
                    self.model().free(ptr).map_err(fail)?;
                }
                let ptr = self.model().malloc(new_size, stream).map_err(fail)?;
                self.live.insert(id, ptr);
            }
        }
        Ok(())
    }

    /// Frees every allocation still live, empties the cache and checks the model; returns how
    /// many allocations were freed. Afterwards the model holds no device memory.
    pub fn drain(&mut self) -> Result<usize, TorchReplayError> {
        let live: Vec<DevicePtr> = self.live.drain().filter_map(|(_, p)| p).collect();
        let n = live.len();
        let drained = |error| TorchReplayError::Check {
            index: None,
            message: error,
        };
        for ptr in live {
            self.model()
                .free(ptr)
                .map_err(|e: TorchError| drained(e.to_string()))?;
        }
        self.model()
            .empty_cache()
            .map_err(|e| drained(e.to_string()))?;
        self.model().check().map_err(drained)?;
        Ok(n)
    }
}
