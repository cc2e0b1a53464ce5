//! [`DeviceConfig`]: how a [`DevicePool`](crate::DevicePool) is set up.

use tagalloc::{Growth, Policy};

use crate::source::{Regions, DEVICE_GRANULE};

/// How a [`DevicePool`](crate::DevicePool) is set up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceConfig {
    /// Where regions come from.
    pub regions: Regions,
    /// Growth, reservation, limit, bypass and trimming ([`Policy::release_above`] must be set
    /// for a trim to unmap free tail chunks of a [`Regions::Vmm`] pool).
    pub policy: Policy,
    /// The heap's granule: sizes are rounded up to it and blocks aligned to it (a power of two;
    /// 256 is what `cuMemAlloc` guarantees).
    pub granule: usize,
    /// The most frees one event covers: a stream's open batch is fenced when it reaches this.
    pub batch: usize,
    /// The most pool calls (allocations and frees, on any stream) an open batch waits before
    /// it is fenced, and between two polls of every stream's oldest fenced batch: the sooner
    /// an event is recorded and seen complete, the sooner the memory serves every stream
    /// without a wait; the later, the fewer driver calls.
    pub batch_age: u64,
    /// The share of the reserved bytes that pending blocks (freed on a stream, not yet known
    /// complete) may hold before a miss takes one of them by a device-side wait rather than
    /// grow the pool. A wait orders the allocating stream after the freeing stream's work, so
    /// it costs concurrency while the device lags; growing costs memory. 0 waits whenever a
    /// pending block fits, 1 grows while it can. The pool never grows past its limit or the
    /// device for this: out of memory, it waits on the device (and then the host) first.
    pub max_pending: f64,
}

impl DeviceConfig {
    /// The default [`DeviceConfig::batch`].
    pub const BATCH: usize = 64;
    /// The default [`DeviceConfig::batch_age`].
    pub const BATCH_AGE: u64 = 128;
    /// The default [`DeviceConfig::max_pending`]: wait on the device whenever a pending block
    /// fits (with the device's throughput shared by its streams, as kernels that fill it or
    /// share its memory bandwidth do, the wait costs no run time; figures and the model in
    /// `docs/device-pool.md`).
    pub const MAX_PENDING: f64 = 0.0;

    /// Plain device allocations ([`Regions::PLAIN`]), regions doubling from 64 MiB to 1 GiB
    /// (a request larger than that gets a region its size): few driver calls for a large
    /// workload, little held for a small one; a region wholly free after a trim goes back.
    pub const PLAIN: DeviceConfig = DeviceConfig {
        regions: Regions::PLAIN,
        policy: Policy::new().growth(Growth::Doubling {
            initial: 64 << 20,
            cap: 1 << 30,
        }),
        granule: DEVICE_GRANULE,
        batch: DeviceConfig::BATCH,
        batch_age: DeviceConfig::BATCH_AGE,
        max_pending: DeviceConfig::MAX_PENDING,
    };

    /// Virtual-memory growth ([`Regions::VMM`]): one region grown by 64 MiB chunks, trimmed by
    /// whole free tail chunks.
    pub const VMM: DeviceConfig = DeviceConfig {
        regions: Regions::VMM,
        policy: Policy::new()
            .growth(Growth::Fixed(64 << 20))
            .release_above(64 << 20),
        granule: DEVICE_GRANULE,
        batch: DeviceConfig::BATCH,
        batch_age: DeviceConfig::BATCH_AGE,
        max_pending: DeviceConfig::MAX_PENDING,
    };
}
