//! The private pools of CUDA graphs: what PyTorch's graph-pool hooks of its
//! `CUDAPluggableAllocator` (`set_begin_allocate_to_pool`, `set_end_allocate_to_pool_fn`,
//! `set_release_pool`) ask of an allocator.
//!
//! A graph replays the kernels it captured on the addresses it captured, whenever it is
//! launched, so memory a capture allocated must never serve anything else while the graph may
//! be replayed, not even once the capture freed it (a later kernel of the same capture used
//! it). PyTorch keeps such memory in a private pool per graph (or per pool id shared by several
//! graphs, replayed in capture order), released when the graph is destroyed. Here each is a
//! [`SharedDevicePool`] of its own: allocations on a stream that captures go to the pool of its
//! capture, frees of its blocks go back to it, and its memory returns to the driver only after
//! PyTorch released it, nothing of it is live, and an `empty_cache` synchronised the device.
//!
//! Which pool a capture's allocation belongs to: PyTorch calls the begin hook before it starts
//! the capture, with a filter (a C++ `std::function` this library cannot call) that compares
//! a stream's capture id with the graph's. The same is done here from the driver: an allocation
//! on a stream in capture `c` goes to the open pool bound to `c`, or, the first time, binds the
//! one open pool not yet bound. Two captures begun on one device before either allocated would
//! be ambiguous: refused with a message rather than guessed.

use std::sync::Arc;

use tagalloc_cuda::{Driver, SharedDevicePool};

/// PyTorch's `MempoolId_t` (`std::pair<CaptureId_t, CaptureId_t>`, two `unsigned long long`):
/// passed by value, like a C struct of two 64-bit integers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MempoolId {
    /// The first of the pair (non-zero for pools a user made).
    pub first: u64,
    /// The second (a graph's own pool: a fresh number).
    pub second: u64,
}

/// One graph's private pool.
pub(crate) struct GraphPool<D: Driver> {
    pub(crate) id: MempoolId,
    pub(crate) pool: Arc<SharedDevicePool<D>>,
    /// The capture it serves, from its first allocation on.
    pub(crate) capture: Option<u64>,
    /// Between the begin and the end hook: allocations of its capture come here.
    pub(crate) open: bool,
    /// Blocks of it handed out and not freed.
    pub(crate) live: usize,
}

/// The graph pools of one device.
///
/// Invariant: every pool in `pools` is told of every capture under way on the device (the
/// device's `captures`, changed only with this locked), as its main pool is.
pub(crate) struct Graphs<D: Driver> {
    pub(crate) pools: Vec<GraphPool<D>>,
    /// Pools PyTorch released while blocks of them were live, by id: dropped at their last
    /// free.
    pub(crate) released: Vec<MempoolId>,
    /// Released pools with nothing live: their memory goes back at the next `empty_cache`,
    /// after a synchronisation (a replay may still be running).
    pub(crate) retired: Vec<Arc<SharedDevicePool<D>>>,
}

impl<D: Driver> Default for Graphs<D> {
    fn default() -> Self {
        Graphs {
            pools: Vec::new(),
            released: Vec::new(),
            retired: Vec::new(),
        }
    }
}

impl<D: Driver> Graphs<D> {
    /// The pool with `id`, if any.
    pub(crate) fn find(&mut self, id: MempoolId) -> Option<&mut GraphPool<D>> {
        self.pools.iter_mut().find(|p| p.id == id)
    }

    /// The pool for an allocation in capture `capture`: the open pool bound to it, else the
    /// one open pool not yet bound (bound now). Errors say why there is none.
    pub(crate) fn for_capture(
        &mut self,
        capture: u64,
        device: u32,
    ) -> Result<&mut GraphPool<D>, String> {
        if let Some(i) = self
            .pools
            .iter()
            .position(|p| p.open && p.capture == Some(capture))
        {
            return Ok(&mut self.pools[i]);
        }
        let unbound: Vec<usize> = (0..self.pools.len())
            .filter(|&i| self.pools[i].open && self.pools[i].capture.is_none())
            .collect();
        match unbound[..] {
            [i] => {
                self.pools[i].capture = Some(capture);
                Ok(&mut self.pools[i])
            }
            [] => Err(format!(
                "tagalloc: an allocation on a stream being captured into a CUDA graph (capture \
                 {capture}) on device {device}, but no graph pool is open for it: memory a graph \
                 uses must stay out of the shared pool (PyTorch opens one through the allocator's \
                 graph-pool hooks; tagalloc_torch.enable() installs them)"
            )),
            _ => Err(format!(
                "tagalloc: {} CUDA graph captures began on device {device} and none has \
                 allocated yet, so which private pool capture {capture}'s allocation belongs \
                 to is ambiguous; refused rather than guessed",
                unbound.len()
            )),
        }
    }

    /// Counts a block of pool `id` freed; once a released pool has nothing live, it is
    /// retired.
    pub(crate) fn freed(&mut self, id: MempoolId) {
        if let Some(p) = self.find(id) {
            p.live -= 1;
        }
        self.retire_released();
    }

    /// Retires the released pools with nothing live.
    pub(crate) fn retire_released(&mut self) {
        let mut i = 0;
        while i < self.pools.len() {
            let p = &self.pools[i];
            if p.live == 0 && self.released.contains(&p.id) {
                let p = self.pools.swap_remove(i);
                self.released.retain(|&r| r != p.id);
                self.retired.push(p.pool);
            } else {
                i += 1;
            }
        }
    }
}
