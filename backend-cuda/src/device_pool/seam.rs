//! The seam between the stream-ordering layer and the memory below it: what
//! [`StreamOrder`](super::order::StreamOrder) needs of a pool, as RMM's
//! `stream_ordered_memory_resource` needs of its free lists.

use tagalloc::{Block, DetachedHeap, Error, Pool, PoolError, Record};

use super::error::DeviceError;
use crate::driver::Driver;
use crate::source::DeviceSource;

/// The heap a device pool allocates from: detached tags in a growable table.
pub type DeviceHeap = DetachedHeap<Vec<Record>>;

/// What the stream-ordering layer asks of the memory below it. A chunk it holds is either
/// handed out or pending (freed on a stream and not yet known complete); the memory below
/// holds only chunks every stream may use.
pub(crate) trait Seam<D: Driver> {
    /// The driver, for stream and event calls.
    fn driver(&self) -> &D;
    /// A chunk of `size` bytes from what is held, without growing.
    fn take_free(&mut self, size: usize) -> Result<Block, PoolError>;
    /// A chunk of `size` bytes, growing (and trimming and retrying) if it must.
    fn take_growing(&mut self, size: usize) -> Result<Block, PoolError>;
    /// Gives back a chunk every stream is done with.
    fn give_back(&mut self, chunk: Block);
    /// Splits a live chunk after `head` bytes: the head, and the tail if any is left (the
    /// chunk unchanged, and no tail, when it cannot be split).
    fn split(&mut self, chunk: Block, head: usize) -> (Block, Option<Block>);
    /// Merges two live chunks, `second` starting where `first` ends, into one; `None` (nothing
    /// changed) when they cannot be.
    fn merge(&mut self, first: Block, second: Block) -> Option<Block>;
    /// Frees a chunk handed out while one stream uses the pool: checked (a double free or a
    /// foreign chunk is refused, nothing changed).
    fn free_checked(&mut self, chunk: Block) -> Result<(), Error>;
    /// The error for a refused request, with the source's driver error if it met one.
    fn refusal(&self, error: PoolError) -> DeviceError;
    /// Whether `chunk` is a live chunk (handed out or pending).
    fn is_live(&self, chunk: &Block) -> Result<(), Error>;
    /// Whether `addr` lies in a region held.
    fn holds(&self, addr: usize) -> bool;
    /// Bytes held from the driver.
    fn reserved(&self) -> usize;
}

/// A core [`Pool`] of device memory with its granule: the memory below a
/// [`DevicePool`](crate::DevicePool)'s stream order.
pub(crate) struct PoolSeam<D: Driver> {
    pub(crate) pool: Pool<DeviceHeap, DeviceSource<D>>,
    pub(crate) granule: usize,
}

impl<D: Driver> Seam<D> for PoolSeam<D> {
    fn driver(&self) -> &D {
        self.pool.source().driver()
    }

    fn take_free(&mut self, size: usize) -> Result<Block, PoolError> {
        self.pool.alloc_without_growing(size, self.granule)
    }

    fn take_growing(&mut self, size: usize) -> Result<Block, PoolError> {
        self.pool.alloc(size, self.granule)
    }

    fn give_back(&mut self, chunk: Block) {
        // SAFETY: detached frees are checked; the chunk is live (the caller's invariant) and
        // every stream is done with it.
        let freed = unsafe { self.pool.free(chunk, chunk.size) };
        debug_assert!(freed.is_ok(), "a chunk given back is live");
    }

    fn split(&mut self, chunk: Block, head: usize) -> (Block, Option<Block>) {
        self.pool.split(chunk, head).unwrap_or((chunk, None))
    }

    fn merge(&mut self, first: Block, second: Block) -> Option<Block> {
        self.pool.merge(first, second).ok().flatten()
    }

    fn free_checked(&mut self, chunk: Block) -> Result<(), Error> {
        // SAFETY: detached frees are always checked; the block names its chunk.
        unsafe { self.pool.free(chunk, chunk.size) }
    }

    #[cold]
    fn refusal(&self, error: PoolError) -> DeviceError {
        DeviceError::Pool {
            error,
            driver: self.pool.source().last_error(),
        }
    }

    fn is_live(&self, chunk: &Block) -> Result<(), Error> {
        self.pool.heap().usable_size(chunk).map(drop)
    }

    fn holds(&self, addr: usize) -> bool {
        self.pool.heap().region_of(addr).is_some()
    }

    fn reserved(&self) -> usize {
        self.pool.stats().reserved
    }
}
