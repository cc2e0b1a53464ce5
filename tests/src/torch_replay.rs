//! Trace replay through the model of PyTorch's CUDA caching allocator
//! ([`tagalloc_cuda::torch_model::TorchAllocator`]) on the fake CUDA driver: the loop of
//! [`crate::cuda_replay`] (streams, resizes and zero sizes are described there), the same one
//! [`crate::device_replay`] runs, so the two compare side by side. The `torch_model` example
//! and the tests share it. The device never catches up by itself here (a lag of 0): the
//! model's per-stream pools never wait for events.

use std::fmt;
use std::sync::Arc;

use tagalloc_cuda::fake::{FakeConfig, FakeDriver, FakeStream};
use tagalloc_cuda::torch_model::{TorchAllocator, TorchConfig, TorchError, TorchStats};
use tagalloc_cuda::DevicePtr;

use crate::cuda_replay::{Replay, ReplayError, ReplayReport, ReplayStats, StreamAllocator, GIB};
use crate::trace::Trace;

/// What a replay through the model measured.
pub type TorchReplayReport = ReplayReport<TorchStats>;

/// Why a replay through the model stopped.
pub type TorchReplayError = ReplayError<TorchError>;

/// A trace replay through the PyTorch model on a fake driver it owns.
pub type TorchReplay<'t> = Replay<'t, TorchAllocator<Arc<FakeDriver>>>;

impl ReplayStats for TorchStats {
    fn peak_reserved(&self) -> u64 {
        self.reserved_bytes.peak
    }

    fn fmt_figures(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            ", peak allocated {:.3} GiB; {} segments obtained, {} released, {} retries, {} \
             synchronisations of all streams",
            self.allocated_bytes.peak as f64 / GIB,
            self.num_device_alloc,
            self.num_device_free,
            self.num_alloc_retries,
            self.num_sync_all_streams,
        )
    }
}

/// The model as the replay drives it: its own calls, one for one (it hands out nothing for a
/// size of 0 itself).
impl StreamAllocator for TorchAllocator<Arc<FakeDriver>> {
    type Block = DevicePtr;
    type Error = TorchError;
    type Stats = TorchStats;

    #[inline]
    fn alloc(&mut self, size: usize, stream: FakeStream) -> Result<Option<DevicePtr>, TorchError> {
        self.malloc(size, stream)
    }

    #[inline]
    fn free(&mut self, block: DevicePtr) -> Result<(), TorchError> {
        TorchAllocator::free(self, block)
    }

    fn record_stream(&mut self, block: &DevicePtr, stream: FakeStream) -> Result<(), TorchError> {
        // SAFETY: the replay's streams live as long as its driver, so past every free.
        unsafe { TorchAllocator::record_stream(self, *block, stream) }
    }

    fn check(&self) -> Result<(), String> {
        TorchAllocator::check(self)
    }

    fn stats(&self) -> TorchStats {
        TorchAllocator::stats(self)
    }

    fn release_all(&mut self, _driver: &FakeDriver) -> Result<(), TorchError> {
        self.empty_cache()
    }
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
        Replay::with_allocator(trace, fake, check_every, 0, |driver| {
            TorchAllocator::new(driver, config).map_err(|e| e.to_string())
        })
    }

    /// The model.
    pub fn model(&mut self) -> &mut TorchAllocator<Arc<FakeDriver>> {
        self.allocator()
    }
}
