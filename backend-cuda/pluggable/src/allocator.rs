//! [`Allocator`]: the allocator layer under the exported functions, over any [`Driver`]: a
//! registry of pools (one per device), each device's map of the blocks handed out by address
//! (a C caller frees by address), and each device's CUDA graph pools.

use core::ffi::c_int;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tagalloc_cuda::{
    AddrHash, BlockState, Capture, DeviceBlock, DeviceError, DevicePtr, Driver, PoolRegistry,
    SharedDevicePool,
};

use crate::graphs::{GraphPool, Graphs, MempoolId};
use crate::snapshot_json;
use crate::stats::TagallocStats;

/// A block handed out, and the graph pool it came from (`None`: the device's pool).
#[derive(Clone, Copy, Debug)]
struct Held<S> {
    block: DeviceBlock<S>,
    graph: Option<MempoolId>,
}

/// The blocks handed out on one device, by address.
type Blocks<S> = HashMap<usize, Held<S>, AddrHash>;

/// A graph pool by its id, as an allocation takes it.
type Owner<D> = (MempoolId, Arc<SharedDevicePool<D>>);

/// What the allocator keeps per device.
struct Device<D: Driver> {
    blocks: Mutex<Blocks<D::Stream>>,
    graphs: Mutex<Graphs<D>>,
    /// Captures under way on the device (begin hooks not yet ended): changed with `graphs`
    /// locked, read by every allocation without a lock.
    captures: AtomicU32,
}

/// The allocator over driver `D`: a registry of pools, one per device, and for each device the
/// blocks handed out there, by address, and its graph pools.
///
/// Invariant: every block in a device's map was allocated from that device's pool (or the
/// graph pool it names) and is not freed; a graph pool's `live` counts its blocks in the map.
/// Lock order: a device's graphs, then its map, then a pool's lock (only the checker and the
/// snapshot nest them); a pool never takes either, and no call made under them waits for the
/// device (a pool waits only with its own lock released, see `SharedDevicePool`).
pub struct Allocator<D: Driver> {
    registry: PoolRegistry<D>,
    devices: Box<[Device<D>]>,
    /// Whether every allocation asks which capture its stream is in, not only while the
    /// graph-pool hooks say a capture is under way: for a caller without those hooks, so that
    /// an allocation on a capturing stream is refused rather than served from the shared pool.
    check_captures: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while it was held leaves no half-made change: carry on.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn message(e: DeviceError) -> String {
    e.to_string()
}

/// The message for an address that is not a live block this allocator handed out.
fn unknown(ptr: DevicePtr) -> String {
    format!("device pool: {:#x} is not a live block", ptr.0)
}

impl<D: Driver + Clone> Allocator<D> {
    /// An allocator over `registry`.
    pub fn new(registry: PoolRegistry<D>) -> Allocator<D> {
        let devices = (0..registry.device_count())
            .map(|_| Device {
                blocks: Mutex::new(Blocks::default()),
                graphs: Mutex::new(Graphs::default()),
                captures: AtomicU32::new(0),
            })
            .collect();
        Allocator {
            registry,
            devices,
            check_captures: AtomicBool::new(false),
        }
    }

    /// Makes every allocation ask which capture its stream is in (`on`), or only while the
    /// graph-pool hooks say a capture is under way (the default): for a caller that cannot
    /// install the hooks (PyTorch before 2.3). Costs one `cuStreamGetCaptureInfo` per
    /// allocation when on.
    pub fn check_captures(&self, on: bool) {
        self.check_captures.store(on, Ordering::Relaxed);
    }

    /// `device` as the ordinal of a device the registry has (else the registry's message).
    fn ordinal(&self, device: c_int) -> Result<u32, String> {
        let d = u32::try_from(device).map_err(|_| format!("bad device ordinal {device}"))?;
        if d as usize >= self.devices.len() {
            self.pool(d)?;
        }
        Ok(d)
    }

    fn pool(&self, device: u32) -> Result<Arc<SharedDevicePool<D>>, String> {
        self.registry.get(device).map_err(message)
    }

    /// `size` bytes on `device`, on `stream`; `None` for a size of 0 (nothing to allocate). On
    /// a stream that captures a CUDA graph, from that capture's graph pool.
    pub fn malloc(
        &self,
        size: isize,
        device: c_int,
        stream: D::Stream,
    ) -> Result<Option<DevicePtr>, String> {
        let size = usize::try_from(size).map_err(|_| format!("bad size {size}"))?;
        if size == 0 {
            return Ok(None);
        }
        let d = self.ordinal(device)?;
        let pool = self.pool(d)?;
        let dev = &self.devices[d as usize];
        let asks =
            self.check_captures.load(Ordering::Relaxed) || dev.captures.load(Ordering::Acquire) > 0;
        let graph = if asks {
            self.graph_pool_for(d, &pool, stream)?
        } else {
            None
        };
        let held = match graph {
            None => Held {
                block: pool.alloc(size, stream).map_err(message)?,
                graph: None,
            },
            Some((id, gp)) => {
                let block = gp.alloc(size, stream).map_err(message)?;
                let mut graphs = lock(&dev.graphs);
                if let Some(p) = graphs.find(id) {
                    p.live += 1;
                }
                Held {
                    block,
                    graph: Some(id),
                }
            }
        };
        lock(&dev.blocks).insert(held.block.ptr().0 as usize, held);
        Ok(Some(held.block.ptr()))
    }

    /// The graph pool an allocation on `stream` goes to while captures are under way on
    /// device `d`: `None` when the stream does not capture.
    #[cold]
    fn graph_pool_for(
        &self,
        d: u32,
        pool: &SharedDevicePool<D>,
        stream: D::Stream,
    ) -> Result<Option<Owner<D>>, String> {
        // SAFETY: the stream is the caller's, live while it allocates on it.
        let capture = unsafe { pool.driver().stream_capture(stream) }
            .map_err(|e| format!("tagalloc: {e}"))?;
        let id = match capture {
            Capture::None => return Ok(None),
            Capture::Active(id) => id,
            Capture::Invalidated => {
                return Err(
                    "tagalloc: an allocation on a stream whose CUDA graph capture was \
                     invalidated"
                        .into(),
                )
            }
        };
        let mut graphs = lock(&self.devices[d as usize].graphs);
        let gp = graphs.for_capture(id, d)?;
        Ok(Some((gp.id, Arc::clone(&gp.pool))))
    }

    /// Frees the block at `ptr` on its stream. `size` (when not negative) must be the size
    /// it was allocated with: a mismatch is refused, the block kept. The map's lock is not
    /// held while the pool frees.
    pub fn free(&self, ptr: DevicePtr, size: isize, device: c_int) -> Result<(), String> {
        let d = self.ordinal(device)?;
        let dev = &self.devices[d as usize];
        let held = {
            let mut blocks = lock(&dev.blocks);
            let held = *blocks.get(&(ptr.0 as usize)).ok_or_else(|| unknown(ptr))?;
            if size >= 0 && size as usize != held.block.size() {
                return Err(format!(
                    "free of {:#x} with size {size}; it was allocated with {}",
                    ptr.0,
                    held.block.size()
                ));
            }
            blocks.remove(&(ptr.0 as usize));
            held
        };
        let freed = match held.graph {
            None => self.pool(d)?.free(held.block),
            Some(id) => {
                let gp = lock(&dev.graphs).find(id).map(|p| Arc::clone(&p.pool));
                let gp = gp.ok_or_else(|| unknown(ptr))?;
                let freed = gp.free(held.block);
                if freed.is_ok() {
                    lock(&dev.graphs).freed(id);
                }
                freed
            }
        };
        if let Err(e) = freed {
            // Refused: the block stays the caller's, as it was.
            lock(&dev.blocks).insert(ptr.0 as usize, held);
            return Err(message(e));
        }
        Ok(())
    }

    /// Marks the block at `ptr` (on whichever device holds it) as used on `stream` too.
    pub fn record_stream(&self, ptr: DevicePtr, stream: D::Stream) -> Result<(), String> {
        for pool in self.registry.created() {
            let dev = &self.devices[pool.device() as usize];
            let Some(held) = lock(&dev.blocks).get(&(ptr.0 as usize)).copied() else {
                continue;
            };
            let owner = match held.graph {
                None => pool,
                Some(id) => lock(&dev.graphs)
                    .find(id)
                    .map(|p| Arc::clone(&p.pool))
                    .ok_or_else(|| unknown(ptr))?,
            };
            return owner.record_stream(&held.block, stream).map_err(message);
        }
        Err(unknown(ptr))
    }

    /// Stops using `stream` on every device (see `DevicePool::forget_stream`).
    pub fn forget_stream(&self, stream: D::Stream) -> Result<(), String> {
        for pool in self.registry.created() {
            pool.forget_stream(stream).map_err(message)?;
            let graph_pools: Vec<_> = lock(&self.devices[pool.device() as usize].graphs)
                .pools
                .iter()
                .map(|p| Arc::clone(&p.pool))
                .collect();
            for gp in graph_pools {
                gp.forget_stream(stream).map_err(message)?;
            }
        }
        Ok(())
    }

    /// PyTorch's begin hook: allocations of the capture about to start on `device` go to the
    /// graph pool `id` (made now, or reopened for a pool shared by several graphs). Every pool
    /// of the device is told a capture is under way.
    pub fn begin_allocate_to_pool(&self, device: c_int, id: MempoolId) -> Result<(), String> {
        let d = self.ordinal(device)?;
        let main = self.pool(d)?;
        let dev = &self.devices[d as usize];
        let mut graphs = lock(&dev.graphs);
        graphs.released.retain(|&r| r != id);
        let fresh = match graphs.find(id) {
            Some(p) => {
                p.open = true;
                p.capture = None;
                None
            }
            None => {
                let pool = Arc::new(self.registry.new_pool(d).map_err(message)?);
                // A replay of the graph writes the chunks its capture freed: none goes back
                // until the pool is retired.
                pool.keep_regions();
                Some(pool)
            }
        };
        let captures = dev.captures.fetch_add(1, Ordering::AcqRel) + 1;
        if let Some(pool) = fresh {
            // A new pool is told of every capture under way, this one included.
            for _ in 0..captures - 1 {
                pool.capture_begun();
            }
            graphs.pools.push(GraphPool {
                id,
                pool,
                capture: None,
                open: true,
                live: 0,
            });
        }
        let all: Vec<_> = graphs.pools.iter().map(|p| Arc::clone(&p.pool)).collect();
        drop(graphs);
        main.capture_begun();
        for p in all {
            p.capture_begun();
        }
        Ok(())
    }

    /// PyTorch's end hook: the capture into pool `id` on `device` is over (its allocations go
    /// to the device's pool again).
    pub fn end_allocate_to_pool(&self, device: c_int, id: MempoolId) -> Result<(), String> {
        let d = self.ordinal(device)?;
        let main = self.pool(d)?;
        let mut graphs = lock(&self.devices[d as usize].graphs);
        let p = graphs
            .pools
            .iter_mut()
            .find(|p| p.id == id && p.open)
            .ok_or_else(|| format!("tagalloc: no graph pool {id:?} open on device {d}"))?;
        p.open = false;
        p.capture = None;
        self.devices[d as usize]
            .captures
            .fetch_sub(1, Ordering::AcqRel);
        let all: Vec<_> = graphs.pools.iter().map(|p| Arc::clone(&p.pool)).collect();
        drop(graphs);
        main.capture_ended().map_err(message)?;
        for p in all {
            p.capture_ended().map_err(message)?;
        }
        Ok(())
    }

    /// PyTorch's release hook: graph pool `id` of `device` will serve no more graphs; its
    /// memory goes back once nothing of it is live (at the next `empty_cache`).
    pub fn release_pool(&self, device: c_int, id: MempoolId) -> Result<(), String> {
        let d = self.ordinal(device)?;
        let mut graphs = lock(&self.devices[d as usize].graphs);
        if graphs.find(id).is_none() {
            return Err(format!("tagalloc: no graph pool {id:?} on device {d}"));
        }
        if !graphs.released.contains(&id) {
            graphs.released.push(id);
        }
        graphs.retire_released();
        Ok(())
    }

    /// Verifies every invariant: each created pool's (see `DevicePool::check`), each graph
    /// pool's, and that every block in the maps is live in its pool at its address.
    pub fn check(&self) -> Result<(), String> {
        for main in self.registry.created() {
            let dev = &self.devices[main.device() as usize];
            let graphs = lock(&dev.graphs);
            let blocks = lock(&dev.blocks);
            let pool_of = |graph: Option<MempoolId>| match graph {
                None => Some(&main),
                Some(id) => graphs.pools.iter().find(|p| p.id == id).map(|p| &p.pool),
            };
            for p in [&main]
                .into_iter()
                .chain(graphs.pools.iter().map(|p| &p.pool))
            {
                p.with(|p| p.check())?;
            }
            for (&at, held) in blocks.iter() {
                let live =
                    pool_of(held.graph).is_some_and(|p| p.with(|p| p.chunk_is_live(&held.block)));
                if held.block.ptr().0 as usize != at || !live {
                    return Err(format!("address map entry {at:#x} is not a live block"));
                }
            }
            for p in &graphs.pools {
                let held = blocks.values().filter(|h| h.graph == Some(p.id)).count();
                if held != p.live {
                    return Err(format!(
                        "graph pool {:?} counts {} live, the map {held}",
                        p.id, p.live
                    ));
                }
            }
        }
        Ok(())
    }

    /// Empties the cache of `device`, or of every device created so far for -1: each device
    /// pool gives back what it holds and does not use, and the memory of graph pools released
    /// with nothing live goes back after a synchronisation. Live graph pools keep theirs: a
    /// graph may be replayed on it.
    pub fn empty_cache(&self, device: c_int) -> Result<(), String> {
        let pools = if device == -1 {
            self.registry.created()
        } else {
            vec![self.pool(self.ordinal(device)?)?]
        };
        for pool in pools {
            pool.trim().map_err(message)?;
            let retired =
                std::mem::take(&mut lock(&self.devices[pool.device() as usize].graphs).retired);
            for gp in retired {
                // A replay launched before the graph was released may still run on it.
                gp.driver()
                    .ctx_synchronize()
                    .map_err(|e| format!("tagalloc: {e}"))?;
                drop(gp); // its pool gives its regions back
            }
        }
        Ok(())
    }

    /// The statistics of `device`'s pool, with the count of its graph pools.
    pub fn stats(&self, device: c_int) -> Result<TagallocStats, String> {
        let d = self.ordinal(device)?;
        let s = self.pool(d)?.stats();
        let graphs = lock(&self.devices[d as usize].graphs).pools.len();
        Ok(TagallocStats::from_pool(&s, graphs))
    }

    /// The pool of `device` as JSON in the shape of PyTorch's snapshot segments (see
    /// [`snapshot_json`]); `stream_number` gives the integer written for a stream.
    pub fn snapshot_json(
        &self,
        device: c_int,
        stream_number: impl Fn(D::Stream) -> u64,
    ) -> Result<String, String> {
        let ordinal = self.ordinal(device)?;
        let pool = self.pool(ordinal)?;
        let mut regions = pool.lock().snapshot();
        let blocks = lock(&self.devices[ordinal as usize].blocks);
        for b in regions.iter_mut().flat_map(|r| &mut r.blocks) {
            if let (BlockState::Allocated, Some(h)) = (b.state, blocks.get(&b.addr)) {
                b.requested = Some(h.block.size());
                b.stream = Some(h.block.stream());
            }
        }
        drop(blocks);
        Ok(snapshot_json::snapshot_json(
            ordinal,
            &regions,
            stream_number,
        ))
    }
}
