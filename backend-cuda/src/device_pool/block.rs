//! [`DeviceBlock`]: what a [`DevicePool`](crate::DevicePool) hands out.

use tagalloc::Block;

use crate::driver::DevicePtr;

/// A block of device memory from a [`DevicePool`](crate::DevicePool): its address, the size
/// asked for, and the stream it belongs to. Give it back to
/// [`DevicePool::free`](crate::DevicePool::free) as received; a copy freed twice, or a block
/// of another pool, is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceBlock<S> {
    pub(crate) ptr: DevicePtr,
    pub(crate) size: usize,
    pub(crate) stream: S,
    /// The heap's block for the chunk (with the size the chunk was allocated or split for).
    pub(crate) chunk: Block,
    /// 0, or the tag of this life of a chunk taken back from a pending list.
    pub(crate) tag: u32,
}

impl<S: Copy> DeviceBlock<S> {
    /// A block for `chunk`, asked as `size` bytes on `stream`, with `tag` (0 for a chunk
    /// fresh from the heap).
    pub(crate) fn new(chunk: Block, size: usize, stream: S, tag: u32) -> DeviceBlock<S> {
        DeviceBlock {
            ptr: DevicePtr(chunk.addr as u64),
            size,
            stream,
            chunk,
            tag,
        }
    }

    /// The device address (never dereference it on the host).
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The bytes asked for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The stream it was allocated on.
    pub fn stream(&self) -> S {
        self.stream
    }
}
