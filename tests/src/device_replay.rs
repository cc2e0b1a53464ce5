//! Trace replay through tagalloc's stream-ordered device pool
//! ([`tagalloc_cuda::DevicePool`]) on the fake CUDA driver: the loop of
//! [`crate::cuda_replay`] (streams, resizes and zero sizes are described there), the same one
//! [`crate::torch_replay`] runs, so the two compare side by side. This module adapts the pool
//! to it and holds a synthetic multi-stream trace.
//!
//! With several streams, memory moves between streams either once the events the pool records
//! have completed or by a device-side wait; the replay's `lag` decides how far the fake device
//! runs behind (every `lag` events it finishes the work recorded up to the previous such
//! point), so how much goes each way. (With one stream nothing waits for the device.) The
//! clocked replay, where the lag comes out of a model of the device, is `tagalloc-bench
//! device`.

use std::fmt;
use std::sync::Arc;

use tagalloc_cuda::fake::{FakeConfig, FakeDriver, FakeStream};
use tagalloc_cuda::{DeviceBlock, DeviceConfig, DeviceError, DevicePool, DeviceStats};
use tagalloc_host::count;

use crate::cuda_replay::{Replay, ReplayError, ReplayReport, ReplayStats, StreamAllocator};
use crate::trace::{Event, Trace};

/// What a replay through the device pool measured.
pub type DeviceReplayReport = ReplayReport<DeviceStats>;

/// Why a replay through the device pool stopped. The pool's error is boxed: it is large, and
/// it would make every `Result` of the replay as large.
pub type DeviceReplayError = ReplayError<Box<DeviceError>>;

/// A trace replay through the device pool on a fake driver it owns.
pub type DeviceReplay<'t> = Replay<'t, DevicePool<Arc<FakeDriver>>>;

/// How far the simulated device runs behind the host, in events, unless told otherwise.
pub const DEFAULT_LAG: usize = 64;

impl ReplayStats for DeviceStats {
    fn peak_reserved(&self) -> u64 {
        self.pool.peak_reserved as u64
    }

    fn fmt_figures(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "; {} obtained, {} grown, {} given back, {} shrunk; {}",
            count(self.pool.regions_obtained, "region", "regions"),
            self.pool.grown,
            self.pool.regions_given_back,
            self.pool.shrunk,
            count(self.streams, "stream", "streams"),
        )
    }
}

/// The pool as the replay drives it: a size of 0 is not asked of it, and draining lets the
/// device finish so that every pending block can be trimmed.
impl StreamAllocator for DevicePool<Arc<FakeDriver>> {
    type Block = DeviceBlock<FakeStream>;
    type Error = Box<DeviceError>;
    type Stats = DeviceStats;

    #[inline]
    fn alloc(
        &mut self,
        size: usize,
        stream: FakeStream,
    ) -> Result<Option<Self::Block>, Self::Error> {
        if size == 0 {
            return Ok(None);
        }
        DevicePool::alloc(self, size, stream)
            .map(Some)
            .map_err(Box::new)
    }

    #[inline]
    fn free(&mut self, block: Self::Block) -> Result<(), Self::Error> {
        DevicePool::free(self, block).map_err(Box::new)
    }

    fn record_stream(
        &mut self,
        block: &Self::Block,
        stream: FakeStream,
    ) -> Result<(), Self::Error> {
        DevicePool::record_stream(self, block, stream).map_err(Box::new)
    }

    fn check(&self) -> Result<(), String> {
        DevicePool::check(self)
    }

    fn stats(&self) -> DeviceStats {
        DevicePool::stats(self)
    }

    /// A virtual-memory pool keeps its address range for the next region; it holds no
    /// device memory afterwards.
    fn release_all(&mut self, driver: &FakeDriver) -> Result<(), Self::Error> {
        driver.complete_all();
        self.trim().map(|_| ()).map_err(Box::new)
    }
}

impl<'t> DeviceReplay<'t> {
    /// A replay of `trace` through a pool configured by `config`, on a fake driver configured
    /// by `fake`, checking the pool's invariants every `check_every` events (0: never, for
    /// timing), the device catching up every `lag` events (0: never by itself; with one
    /// stream nothing waits for the device).
    pub fn new(
        trace: &'t Trace,
        config: DeviceConfig,
        fake: FakeConfig,
        check_every: usize,
        lag: usize,
    ) -> Result<DeviceReplay<'t>, DeviceReplayError> {
        Replay::with_allocator(trace, fake, check_every, lag, |driver| {
            DevicePool::new(driver, config).map_err(|e| e.to_string())
        })
    }

    /// The pool.
    pub fn pool(&mut self) -> &mut DevicePool<Arc<FakeDriver>> {
        self.allocator()
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
                used: None,
            });
        }
    }
    Trace {
        name: format!("synthetic-{streams}-streams"),
        events: out,
    }
}
