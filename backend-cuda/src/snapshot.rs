//! A picture of a [`DevicePool`](crate::DevicePool) at one moment: every region and every
//! chunk in it, with what the pool knows of each (handed out, waiting for its stream's event,
//! or free). What PyTorch's `torch.cuda.memory._snapshot()` calls segments and blocks; the C
//! ABI turns it into that shape for PyTorch's memory visualiser.

/// Where a chunk of a [`SnapshotRegion`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out and not freed.
    Allocated,
    /// Freed on its stream and waiting for the device to pass the free before other streams
    /// may use it (PyTorch's `active_pending_free`).
    Pending,
    /// Free in the heap, for every stream.
    Free,
}

/// One chunk of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotBlock<S> {
    /// Its device address.
    pub addr: usize,
    /// Its bytes (a multiple of the pool's granule).
    pub size: usize,
    /// Where it stands.
    pub state: BlockState,
    /// The bytes asked for, where the snapshot's maker knows them: the pool does not keep the
    /// blocks it hands out (their owners do), so its snapshot leaves this `None`; the C ABI
    /// fills it in from its map of the blocks it handed out.
    pub requested: Option<usize>,
    /// The stream it was allocated (or, pending, freed) on, where the snapshot's maker knows
    /// it (the pool, for a pending chunk; the C ABI, for the blocks it handed out).
    pub stream: Option<S>,
}

/// One region the pool holds from the driver, with its chunks in address order.
///
/// A picture of a [`DevicePool`](crate::DevicePool) at one moment: every region and every
/// chunk in it, with what the pool knows of each (handed out, waiting for its stream's event,
/// or free). What PyTorch's `torch.cuda.memory._snapshot()` calls segments and blocks; the C
/// ABI turns it into that shape for PyTorch's memory visualiser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRegion<S> {
    /// Its first device address.
    pub addr: usize,
    /// Its bytes (mapped bytes, for a virtual-memory region).
    pub size: usize,
    /// Its chunks, in address order; their sizes add up to `size`.
    pub blocks: Vec<SnapshotBlock<S>>,
}
