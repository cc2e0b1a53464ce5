//! A fake CUDA driver for tests and benchmarks on machines with no GPU.
//!
//! - **Device memory the CPU cannot touch.** Device allocations and address reservations are
//!   ranges of one `PROT_NONE` anonymous mapping: any CPU read or write through a
//!   device address crashes the process (`tests/stray_access.rs` shows it does).
//! - **Real bookkeeping.** Every allocation, reservation, physical allocation, mapping, pinned
//!   or registered host range, stream and event is tracked, and misuse gets the error the real
//!   driver gives: a double free, unmapping what is not mapped, overlapping maps, sizes off the
//!   granularity, stale handles; exceeding the configured device memory is
//!   `CUDA_ERROR_OUT_OF_MEMORY`, as on a real card.
//! - **Pinned host memory is real**, readable and writable host memory.
//! - **Time stands still until the test moves it**: recorded events complete
//!   when the test calls [`FakeDriver::complete`] (or completes a stream, everything up to a
//!   [`FakeMark`], or everything), or when a synchronising call would have waited for them.
//! - **Every call is counted** by kind ([`FakeDriver::calls`]), so a benchmark can report its
//!   driver calls, and **failures can be injected** ([`FakeDriver::fail_nth`],
//!   [`FakeDriver::set_external_usage`]).
//!
//! The fake is `Sync`: it keeps its state behind a mutex, so a pool can run over `&FakeDriver`
//! or `Arc<FakeDriver>` while the test drives the timeline.

mod calls;
mod engines;
mod space;
mod timeline;

use std::alloc::{self, Layout};
use std::collections::{BTreeMap, HashMap};
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

pub use calls::{Call, CallCounts};
pub use timeline::{ClockReport, FakeClock, FakeMark, FakePoint};

use crate::driver::{Capture, DevicePtr, Driver, Granularity, MemInfo, PinFlags};
use crate::error::{code, DriverError};
use calls::Injection;
use space::DeviceSpace;
use timeline::{Refused, Timeline};

/// What a [`FakeDriver`] pretends to be. The defaults are a 16 GiB card with 2 MiB pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FakeConfig {
    /// The ordinal of the device the driver serves.
    pub device: u32,
    /// How many devices the driver reports (`device` must be below it).
    pub device_count: u32,
    /// The device's memory: plain allocations and physical allocations together may not
    /// exceed it (less whatever [`FakeDriver::set_external_usage`] says other processes hold).
    pub total_memory: usize,
    /// The inaccessible address space device addresses are carved from. Plain allocations and
    /// reservations share it; reservations may exceed `total_memory`, as on a real card.
    pub address_space: usize,
    /// The minimum virtual-memory granularity (a power of two, at least 4 KiB).
    pub granularity: usize,
    /// The recommended granularity (a multiple of `granularity`).
    pub recommended_granularity: usize,
    /// Pinned host memory [`Driver::host_alloc`] may hand out in total.
    pub host_memory_limit: usize,
    /// Whether [`Driver::mem_free`] completes all recorded work, as `cudaFree` waits for the
    /// device before it returns.
    pub free_synchronizes: bool,
    /// `None`: work completes when the test says (or a synchronising call would have waited
    /// for it). `Some`: a host clock and a device clock per stream decide (see
    /// [`FakeClock`] and [`FakeDriver::launch`]).
    pub clock: Option<FakeClock>,
}

impl Default for FakeConfig {
    fn default() -> FakeConfig {
        FakeConfig {
            device: 0,
            device_count: 1,
            total_memory: 16 << 30,
            address_space: 256 << 30,
            granularity: 2 << 20,
            recommended_granularity: 2 << 20,
            host_memory_limit: 16 << 30,
            free_synchronizes: true,
            clock: None,
        }
    }
}

/// The alignment of, and rounding applied to, plain device allocations: 256 bytes, the least
/// the real driver documents, so code that assumes more fails here.
pub const FAKE_ALLOC_ALIGN: u64 = 256;

/// A stream of the fake driver (0 is the default stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FakeStream(u64);

/// An event of the fake driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FakeEvent(u64);

/// A physical allocation of the fake driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FakePhysical(u64);

/// What is live in a [`FakeDriver`]: all zeros when everything obtained was given back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Outstanding {
    /// Plain device allocations.
    pub allocations: usize,
    /// Address reservations.
    pub reservations: usize,
    /// Physical allocations not yet released, or released but still mapped.
    pub physical: usize,
    /// Mappings.
    pub mappings: usize,
    /// Pinned host allocations.
    pub host_allocations: usize,
    /// Host registrations.
    pub registrations: usize,
    /// Created streams not destroyed.
    pub streams: usize,
    /// Events not destroyed.
    pub events: usize,
    /// Device memory held, in bytes (plain allocations rounded to 256 bytes, physical
    /// allocations whole).
    pub device_bytes: usize,
}

#[derive(Debug)]
struct Reservation {
    size: u64,
    /// Mapping start → mapping.
    mappings: BTreeMap<u64, Mapping>,
}

#[derive(Clone, Copy, Debug)]
struct Mapping {
    size: u64,
    physical: u64,
    accessible: bool,
}

#[derive(Clone, Copy, Debug)]
struct Physical {
    size: u64,
    released: bool,
    mappings: u32,
}

/// Invariants: `used` is the sum of `allocs`' sizes and of the sizes of `physical` entries
/// (each of which is unreleased or mapped); a mapping's `physical` is in `physical`, and a
/// physical entry's `mappings` counts the mappings naming it; `host_used` is the sum of
/// `host`'s sizes.
#[derive(Debug)]
struct State {
    space: DeviceSpace,
    used: u64,
    external: u64,
    allocs: BTreeMap<u64, u64>,
    reservations: BTreeMap<u64, Reservation>,
    physical: HashMap<u64, Physical>,
    next_physical: u64,
    host: HashMap<usize, Layout>,
    host_used: usize,
    registered: BTreeMap<usize, usize>,
    timeline: Timeline,
    calls: CallCounts,
    injections: Vec<Injection>,
}

impl State {
    /// Counts a call, and fails it if a failure was injected for it.
    fn enter(&mut self, call: Call) -> Result<(), DriverError> {
        let n = self.calls.bump(call);
        self.timeline.host_call(call.changes_memory());
        if let Some(i) = self
            .injections
            .iter()
            .position(|inj| inj.call == call && inj.at == n)
        {
            let inj = self.injections.swap_remove(i);
            return Err(DriverError::cuda(call.entry_point(), inj.code));
        }
        Ok(())
    }

    fn available(&self, total: usize) -> u64 {
        (total as u64).saturating_sub(self.used + self.external)
    }

    /// The reservation holding all of `ptr..ptr + size`.
    fn reservation_of(&mut self, ptr: u64, size: u64) -> Option<&mut Reservation> {
        let (&start, res) = self.reservations.range_mut(..=ptr).next_back()?;
        let end = ptr.checked_add(size)?;
        (end <= start + res.size).then_some(res)
    }

    fn drop_mapping_of(&mut self, physical: u64) {
        if let Some(p) = self.physical.get_mut(&physical) {
            p.mappings -= 1;
            if p.released && p.mappings == 0 {
                self.used -= p.size;
                self.physical.remove(&physical);
            }
        }
    }
}

/// Starts of the mappings that cover `ptr..ptr + size` without a gap, the first one starting
/// at or before `ptr`; `exact` asks that the range start and end on mapping boundaries.
fn covering(res: &Reservation, ptr: u64, size: u64, exact: bool) -> Option<Vec<u64>> {
    let end = ptr.checked_add(size)?;
    let (&first, m) = res.mappings.range(..=ptr).next_back()?;
    if first + m.size <= ptr || (exact && first != ptr) {
        return None;
    }
    let mut starts = vec![first];
    let mut reached = first + m.size;
    while reached < end {
        let next = res.mappings.get(&reached)?;
        starts.push(reached);
        reached += next.size;
    }
    (!exact || reached == end).then_some(starts)
}

/// What a test runs when the host synchronises (see [`FakeDriver::on_synchronize`]).
pub type SyncHook = std::sync::Arc<dyn Fn() + Send + Sync>;

/// The fake driver. See the [module documentation](self).
pub struct FakeDriver {
    config: FakeConfig,
    state: Mutex<State>,
    sync_hook: Mutex<Option<SyncHook>>,
}

impl std::fmt::Debug for FakeDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeDriver")
            .field("config", &self.config)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl FakeDriver {
    /// A fake device as `config` describes. Parameters that make no sense (a granularity that
    /// is not a power of two of at least 4 KiB, a recommended granularity that is not a
    /// multiple of it, an address space that is not, `device >= device_count`) are
    /// `CUDA_ERROR_INVALID_VALUE` from `cuInit`; an address space the system will not map is
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    pub fn new(config: FakeConfig) -> Result<FakeDriver, DriverError> {
        let g = config.granularity;
        let valid = g.is_power_of_two()
            && g >= 4096
            && config.recommended_granularity >= g
            && config.recommended_granularity.is_multiple_of(g)
            && config.address_space >= g
            && config.address_space.is_multiple_of(g)
            && config.device < config.device_count;
        if !valid {
            return Err(DriverError::cuda("cuInit", code::INVALID_VALUE));
        }
        let space = DeviceSpace::new(config.address_space, g)
            .ok_or(DriverError::cuda("cuInit", code::OUT_OF_MEMORY))?;
        Ok(FakeDriver {
            config,
            state: Mutex::new(State {
                space,
                used: 0,
                external: 0,
                allocs: BTreeMap::new(),
                reservations: BTreeMap::new(),
                physical: HashMap::new(),
                next_physical: 1,
                host: HashMap::new(),
                host_used: 0,
                registered: BTreeMap::new(),
                timeline: Timeline::new(config.clock),
                calls: CallCounts::default(),
                injections: Vec::new(),
            }),
            sync_hook: Mutex::new(None),
        })
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &FakeConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held (a failed assertion in a test thread) cannot leave the
        // state half-changed in a way later calls rely on; carry on rather than panic again.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    // --- what the test sees -------------------------------------------------------------------

    /// Calls received so far, by kind.
    pub fn calls(&self) -> CallCounts {
        self.lock().calls
    }

    /// Sets every call count back to zero, and forgets injected failures not yet triggered
    /// (they were counted from the old counts).
    pub fn reset_calls(&self) {
        let mut st = self.lock();
        st.calls = CallCounts::default();
        st.injections.clear();
    }

    /// Makes the `n`-th call of kind `call` from now (1 is the next one) fail with `code`,
    /// doing nothing else; e.g. `fail_nth(Call::MemAlloc, 3, code::OUT_OF_MEMORY)`. `n == 0`
    /// injects nothing.
    pub fn fail_nth(&self, call: Call, n: u64, code: u32) {
        if n == 0 {
            return;
        }
        let mut st = self.lock();
        let at = st.calls.get(call) + n;
        st.injections.push(Injection { call, at, code });
    }

    /// Forgets every injected failure not yet triggered.
    pub fn clear_failures(&self) {
        self.lock().injections.clear();
    }

    /// Pretends other processes hold `bytes` of the device: free memory reported by
    /// [`Driver::mem_get_info`] drops by as much, and allocations fail that much sooner.
    pub fn set_external_usage(&self, bytes: usize) {
        self.lock().external = bytes as u64;
    }

    /// What is live: allocations, reservations, mappings, handles, and device bytes held.
    pub fn outstanding(&self) -> Outstanding {
        let st = self.lock();
        Outstanding {
            allocations: st.allocs.len(),
            reservations: st.reservations.len(),
            physical: st.physical.len(),
            mappings: st.reservations.values().map(|r| r.mappings.len()).sum(),
            host_allocations: st.host.len(),
            registrations: st.registered.len(),
            streams: st.timeline.live_streams(),
            events: st.timeline.live_events(),
            device_bytes: st.used as usize,
        }
    }

    /// Runs `hook` at the start of every host synchronisation (`cuCtxSynchronize`,
    /// `cuStreamSynchronize`, `cuEventSynchronize`), on the calling thread, before the driver
    /// does anything: a test makes a synchronisation take as long as it likes (blocking until
    /// it has seen what other threads do meanwhile). `None` removes it.
    pub fn on_synchronize(&self, hook: Option<SyncHook>) {
        *self.sync_hook.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// Runs the synchronisation hook, if any, with no lock of the driver held.
    fn synchronizing(&self) {
        let hook = self
            .sync_hook
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(h) = hook {
            h();
        }
    }

    /// Whether `ptr` lies in the fake device's address space.
    pub fn is_device_address(&self, ptr: DevicePtr) -> bool {
        self.lock().space.contains(ptr.0)
    }

    /// The fake device's whole address space: its first address and its size.
    pub fn address_space(&self) -> (DevicePtr, usize) {
        let st = self.lock();
        (DevicePtr(st.space.base()), st.space.len() as usize)
    }

    /// Whether every byte of `ptr..ptr + bytes` is mapped with access granted, i.e. a kernel
    /// could use it.
    pub fn is_accessible(&self, ptr: DevicePtr, bytes: usize) -> bool {
        let mut st = self.lock();
        let size = bytes as u64;
        if let Some(res) = st.reservation_of(ptr.0, size) {
            return covering(res, ptr.0, size, false)
                .is_some_and(|starts| starts.iter().all(|s| res.mappings[s].accessible));
        }
        st.allocs
            .range(..=ptr.0)
            .next_back()
            .is_some_and(|(&start, &len)| ptr.0 + size <= start + len)
    }

    /// Completes the work `event` recorded, and everything before it on its stream.
    /// `CUDA_ERROR_INVALID_HANDLE` for an event that does not exist.
    pub fn complete(&self, event: FakeEvent) -> Result<(), DriverError> {
        self.lock()
            .timeline
            .complete(event.0)
            .map_err(refused("complete"))
    }

    /// Completes everything recorded on `stream` (destroyed or not).
    pub fn complete_stream(&self, stream: FakeStream) -> Result<(), DriverError> {
        self.lock()
            .timeline
            .complete_stream(stream.0)
            .map_err(refused("complete_stream"))
    }

    /// A point in time: everything recorded so far.
    pub fn mark(&self) -> FakeMark {
        self.lock().timeline.mark()
    }

    /// Completes everything recorded up to `mark`, on every stream.
    pub fn complete_until(&self, mark: FakeMark) {
        self.lock().timeline.complete_until(mark);
    }

    /// Completes everything recorded so far.
    pub fn complete_all(&self) {
        self.lock().timeline.complete_all();
    }

    /// Events recorded whose work has not completed.
    pub fn pending_events(&self) -> usize {
        self.lock().timeline.pending_events()
    }

    // --- the device's work and the clock ------------------------------------------------------

    /// Queues work on `stream` that takes `ns` nanoseconds of device time (a kernel using the
    /// memory just allocated, say), and returns its point. With a clock it starts once the host
    /// has queued it and the stream is done with what came before; without one it completes
    /// when the test says. `CUDA_ERROR_INVALID_HANDLE` for a destroyed or unknown stream.
    pub fn launch(&self, stream: FakeStream, ns: u64) -> Result<FakePoint, DriverError> {
        self.lock()
            .timeline
            .launch(stream.0, ns)
            .map_err(refused("launch"))
    }

    /// The point of everything queued on `stream` so far (a block's last use, at its free).
    pub fn point(&self, stream: FakeStream) -> Result<FakePoint, DriverError> {
        self.lock()
            .timeline
            .point(stream.0)
            .map_err(refused("point"))
    }

    /// Whether work queued on `stream` from now on runs after `point`'s work: on the same
    /// stream, completed, or waited for on the device (directly, or through other streams'
    /// waits). The oracle of stream-ordered reuse: a block may be handed to `stream` only if
    /// this holds for every earlier use of its memory.
    pub fn ordered_after(&self, stream: FakeStream, point: FakePoint) -> bool {
        self.lock().timeline.ordered_after(stream.0, point)
    }

    /// Moves the host clock on by `ns` (the program's own work between driver calls).
    pub fn advance_host(&self, ns: u64) {
        self.lock().timeline.advance_host(ns);
    }

    /// The clock's figures: host time, host time stalled in synchronisations, and when the
    /// device will have drained. All zero without a clock.
    pub fn clock_report(&self) -> ClockReport {
        self.lock().timeline.report()
    }

    // --- graph capture -------------------------------------------------------------------------

    /// Starts capturing `stream` into a graph (`cuStreamBeginCapture`, global mode): until
    /// [`FakeDriver::end_capture`], synchronisations and event queries fail on every thread
    /// (and invalidate the capture), work queued on the stream takes no device time, and an
    /// event recorded on it belongs to the graph. Returns the capture's id. The default
    /// stream, or a stream capturing already, is `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
    pub fn begin_capture(&self, stream: FakeStream) -> Result<u64, DriverError> {
        self.lock()
            .timeline
            .begin_capture(stream.0)
            .map_err(refused("cuStreamBeginCapture"))
    }

    /// Ends `stream`'s capture (`cuStreamEndCapture`): `Ok(true)`, or `Ok(false)` when an
    /// illegal call invalidated it (the real driver then fails with
    /// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`).
    pub fn end_capture(&self, stream: FakeStream) -> Result<bool, DriverError> {
        self.lock()
            .timeline
            .end_capture(stream.0)
            .map_err(refused("cuStreamEndCapture"))
    }
}

/// The driver's error for a refused timeline operation of `call`.
fn refused(call: &'static str) -> impl Fn(Refused) -> DriverError {
    move |r| {
        let code = match r {
            Refused::BadHandle => code::INVALID_HANDLE,
            Refused::Capturing => code::STREAM_CAPTURE_UNSUPPORTED,
            Refused::Isolation => code::STREAM_CAPTURE_ISOLATION,
            Refused::CapturedEvent => code::CAPTURED_EVENT,
        };
        DriverError::cuda(call, code)
    }
}

fn granular(x: u64, g: u64) -> bool {
    x != 0 && x.is_multiple_of(g)
}

fn invalid(call: Call) -> DriverError {
    DriverError::cuda(call.entry_point(), code::INVALID_VALUE)
}

fn bad_handle(call: Call) -> impl Fn(Refused) -> DriverError {
    refused(call.entry_point())
}

fn out_of_memory(call: Call) -> DriverError {
    DriverError::cuda(call.entry_point(), code::OUT_OF_MEMORY)
}

impl Driver for FakeDriver {
    type Stream = FakeStream;
    type Event = FakeEvent;
    type Physical = FakePhysical;

    fn device_count(&self) -> Result<u32, DriverError> {
        self.lock().enter(Call::DeviceCount)?;
        Ok(self.config.device_count)
    }

    fn device(&self) -> u32 {
        self.config.device
    }

    fn make_current(&self) -> Result<(), DriverError> {
        self.lock().enter(Call::MakeCurrent)
    }

    fn mem_get_info(&self) -> Result<MemInfo, DriverError> {
        let mut st = self.lock();
        st.enter(Call::MemGetInfo)?;
        Ok(MemInfo {
            free: st.available(self.config.total_memory) as usize,
            total: self.config.total_memory,
        })
    }

    fn ctx_synchronize(&self) -> Result<(), DriverError> {
        const C: Call = Call::CtxSynchronize;
        self.synchronizing();
        let mut st = self.lock();
        st.enter(C)?;
        st.timeline.synchronize_all().map_err(bad_handle(C))
    }

    fn mem_alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError> {
        const C: Call = Call::MemAlloc;
        let mut st = self.lock();
        st.enter(C)?;
        let size = (bytes as u64)
            .checked_next_multiple_of(FAKE_ALLOC_ALIGN)
            .filter(|&s| s > 0)
            .ok_or(invalid(C))?;
        if size > st.available(self.config.total_memory) {
            return Err(out_of_memory(C));
        }
        let ptr = st
            .space
            .take(size, FAKE_ALLOC_ALIGN)
            .ok_or(out_of_memory(C))?;
        st.allocs.insert(ptr, size);
        st.used += size;
        Ok(DevicePtr(ptr))
    }

    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<(), DriverError> {
        const C: Call = Call::MemFree;
        let mut st = self.lock();
        st.enter(C)?;
        if !st.allocs.contains_key(&ptr.0) {
            return Err(invalid(C));
        }
        if self.config.free_synchronizes {
            // `cudaFree` waits for the device: illegal while a graph is captured.
            st.timeline.synchronize_all().map_err(bad_handle(C))?;
        }
        let size = st.allocs.remove(&ptr.0).ok_or(invalid(C))?;
        st.space.give(ptr.0, size);
        st.used -= size;
        Ok(())
    }

    fn allocation_granularity(&self, which: Granularity) -> Result<usize, DriverError> {
        self.lock().enter(Call::AllocationGranularity)?;
        Ok(match which {
            Granularity::Minimum => self.config.granularity,
            Granularity::Recommended => self.config.recommended_granularity,
        })
    }

    fn mem_address_reserve(&self, bytes: usize, align: usize) -> Result<DevicePtr, DriverError> {
        const C: Call = Call::MemAddressReserve;
        let g = self.config.granularity as u64;
        let mut st = self.lock();
        st.enter(C)?;
        if !granular(bytes as u64, g) || !(align == 0 || align.is_power_of_two()) {
            return Err(invalid(C));
        }
        let align = (align as u64).max(g);
        let ptr = st.space.take(bytes as u64, align).ok_or(out_of_memory(C))?;
        st.reservations.insert(
            ptr,
            Reservation {
                size: bytes as u64,
                mappings: BTreeMap::new(),
            },
        );
        Ok(DevicePtr(ptr))
    }

    unsafe fn mem_address_free(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        const C: Call = Call::MemAddressFree;
        let mut st = self.lock();
        st.enter(C)?;
        match st.reservations.get(&ptr.0) {
            Some(r) if r.size == bytes as u64 && r.mappings.is_empty() => {}
            _ => return Err(invalid(C)),
        }
        st.reservations.remove(&ptr.0);
        st.space.give(ptr.0, bytes as u64);
        Ok(())
    }

    fn mem_create(&self, bytes: usize) -> Result<FakePhysical, DriverError> {
        const C: Call = Call::MemCreate;
        let mut st = self.lock();
        st.enter(C)?;
        let size = bytes as u64;
        if !granular(size, self.config.granularity as u64) {
            return Err(invalid(C));
        }
        if size > st.available(self.config.total_memory) {
            return Err(out_of_memory(C));
        }
        let id = st.next_physical;
        st.next_physical += 1;
        st.physical.insert(
            id,
            Physical {
                size,
                released: false,
                mappings: 0,
            },
        );
        st.used += size;
        Ok(FakePhysical(id))
    }

    unsafe fn mem_release(&self, handle: FakePhysical) -> Result<(), DriverError> {
        const C: Call = Call::MemRelease;
        let mut st = self.lock();
        st.enter(C)?;
        let p = match st.physical.get_mut(&handle.0) {
            Some(p) if !p.released => p,
            _ => return Err(invalid(C)),
        };
        p.released = true;
        if p.mappings == 0 {
            let size = p.size;
            st.physical.remove(&handle.0);
            st.used -= size;
        }
        Ok(())
    }

    unsafe fn mem_map(
        &self,
        ptr: DevicePtr,
        bytes: usize,
        handle: FakePhysical,
    ) -> Result<(), DriverError> {
        const C: Call = Call::MemMap;
        let g = self.config.granularity as u64;
        let mut st = self.lock();
        st.enter(C)?;
        let size = bytes as u64;
        let physical_size = match st.physical.get(&handle.0) {
            Some(p) if !p.released => p.size,
            _ => return Err(invalid(C)),
        };
        if !granular(size, g) || !ptr.0.is_multiple_of(g) || size > physical_size {
            return Err(invalid(C));
        }
        let res = st.reservation_of(ptr.0, size).ok_or(invalid(C))?;
        let end = ptr.0 + size;
        let overlaps_before = res
            .mappings
            .range(..=ptr.0)
            .next_back()
            .is_some_and(|(&s, m)| s + m.size > ptr.0);
        let overlaps_after = res.mappings.range(ptr.0..end).next().is_some();
        if overlaps_before || overlaps_after {
            return Err(invalid(C));
        }
        res.mappings.insert(
            ptr.0,
            Mapping {
                size,
                physical: handle.0,
                accessible: false,
            },
        );
        if let Some(p) = st.physical.get_mut(&handle.0) {
            p.mappings += 1;
        }
        Ok(())
    }

    unsafe fn mem_set_access(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        const C: Call = Call::MemSetAccess;
        let g = self.config.granularity as u64;
        let mut st = self.lock();
        st.enter(C)?;
        let size = bytes as u64;
        if !granular(size, g) || !ptr.0.is_multiple_of(g) {
            return Err(invalid(C));
        }
        let res = st.reservation_of(ptr.0, size).ok_or(invalid(C))?;
        let starts = covering(res, ptr.0, size, false).ok_or(invalid(C))?;
        for s in starts {
            if let Some(m) = res.mappings.get_mut(&s) {
                m.accessible = true;
            }
        }
        Ok(())
    }

    unsafe fn mem_unmap(&self, ptr: DevicePtr, bytes: usize) -> Result<(), DriverError> {
        const C: Call = Call::MemUnmap;
        let mut st = self.lock();
        st.enter(C)?;
        let size = bytes as u64;
        let res = st.reservation_of(ptr.0, size).ok_or(invalid(C))?;
        let starts = covering(res, ptr.0, size, true).ok_or(invalid(C))?;
        let physical: Vec<u64> = starts
            .iter()
            .filter_map(|s| res.mappings.remove(s))
            .map(|m| m.physical)
            .collect();
        for p in physical {
            st.drop_mapping_of(p);
        }
        Ok(())
    }

    fn host_alloc(&self, bytes: usize, _flags: PinFlags) -> Result<NonNull<u8>, DriverError> {
        const C: Call = Call::HostAlloc;
        let mut st = self.lock();
        st.enter(C)?;
        if bytes == 0 {
            return Err(invalid(C));
        }
        let layout = Layout::from_size_align(bytes, 4096).map_err(|_| out_of_memory(C))?;
        if bytes > self.config.host_memory_limit.saturating_sub(st.host_used) {
            return Err(out_of_memory(C));
        }
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc::alloc_zeroed(layout) }).ok_or(out_of_memory(C))?;
        st.host.insert(ptr.as_ptr() as usize, layout);
        st.host_used += bytes;
        Ok(ptr)
    }

    unsafe fn host_free(&self, ptr: NonNull<u8>) -> Result<(), DriverError> {
        const C: Call = Call::HostFree;
        let mut st = self.lock();
        st.enter(C)?;
        let layout = st.host.remove(&(ptr.as_ptr() as usize)).ok_or(invalid(C))?;
        st.host_used -= layout.size();
        // SAFETY: `ptr` was allocated by `host_alloc` with this layout (it was in `host`), is
        // freed once (removed from `host`), and the caller uses it no more.
        unsafe { alloc::dealloc(ptr.as_ptr(), layout) };
        Ok(())
    }

    unsafe fn host_register(
        &self,
        ptr: NonNull<u8>,
        bytes: usize,
        _flags: PinFlags,
    ) -> Result<(), DriverError> {
        const C: Call = Call::HostRegister;
        let mut st = self.lock();
        st.enter(C)?;
        let start = ptr.as_ptr() as usize;
        let end = start.checked_add(bytes).filter(|_| bytes > 0);
        let end = end.ok_or(invalid(C))?;
        let overlaps = st
            .registered
            .range(..end)
            .next_back()
            .is_some_and(|(&s, &len)| s + len > start);
        if overlaps {
            return Err(DriverError::cuda(
                C.entry_point(),
                code::HOST_MEMORY_ALREADY_REGISTERED,
            ));
        }
        st.registered.insert(start, bytes);
        Ok(())
    }

    unsafe fn host_unregister(&self, ptr: NonNull<u8>) -> Result<(), DriverError> {
        const C: Call = Call::HostUnregister;
        let mut st = self.lock();
        st.enter(C)?;
        st.registered
            .remove(&(ptr.as_ptr() as usize))
            .map(drop)
            .ok_or(DriverError::cuda(
                C.entry_point(),
                code::HOST_MEMORY_NOT_REGISTERED,
            ))
    }

    fn default_stream(&self) -> FakeStream {
        FakeStream(0)
    }

    fn stream_create(&self) -> Result<FakeStream, DriverError> {
        let mut st = self.lock();
        st.enter(Call::StreamCreate)?;
        Ok(FakeStream(st.timeline.create_stream()))
    }

    unsafe fn stream_destroy(&self, stream: FakeStream) -> Result<(), DriverError> {
        const C: Call = Call::StreamDestroy;
        let mut st = self.lock();
        st.enter(C)?;
        st.timeline.destroy_stream(stream.0).map_err(bad_handle(C))
    }

    unsafe fn stream_synchronize(&self, stream: FakeStream) -> Result<(), DriverError> {
        const C: Call = Call::StreamSynchronize;
        self.synchronizing();
        let mut st = self.lock();
        st.enter(C)?;
        st.timeline
            .synchronize_stream(stream.0)
            .map_err(bad_handle(C))
    }

    unsafe fn stream_wait_event(
        &self,
        stream: FakeStream,
        event: FakeEvent,
    ) -> Result<(), DriverError> {
        const C: Call = Call::StreamWaitEvent;
        let mut st = self.lock();
        st.enter(C)?;
        st.timeline
            .wait_event(stream.0, event.0)
            .map_err(bad_handle(C))
    }

    unsafe fn stream_capture(&self, stream: FakeStream) -> Result<Capture, DriverError> {
        const C: Call = Call::StreamGetCaptureInfo;
        let mut st = self.lock();
        st.enter(C)?;
        Ok(
            match st.timeline.capture(stream.0).map_err(bad_handle(C))? {
                None => Capture::None,
                Some((id, false)) => Capture::Active(id),
                Some((_, true)) => Capture::Invalidated,
            },
        )
    }

    fn event_create(&self) -> Result<FakeEvent, DriverError> {
        let mut st = self.lock();
        st.enter(Call::EventCreate)?;
        Ok(FakeEvent(st.timeline.create_event()))
    }

    unsafe fn event_destroy(&self, event: FakeEvent) -> Result<(), DriverError> {
        const C: Call = Call::EventDestroy;
        let mut st = self.lock();
        st.enter(C)?;
        st.timeline.destroy_event(event.0).map_err(bad_handle(C))
    }

    unsafe fn event_record(&self, event: FakeEvent, stream: FakeStream) -> Result<(), DriverError> {
        const C: Call = Call::EventRecord;
        let mut st = self.lock();
        st.enter(C)?;
        st.timeline.record(event.0, stream.0).map_err(bad_handle(C))
    }

    unsafe fn event_query(&self, event: FakeEvent) -> Result<bool, DriverError> {
        const C: Call = Call::EventQuery;
        let mut st = self.lock();
        st.enter(C)?;
        st.timeline.query(event.0).map_err(bad_handle(C))
    }

    unsafe fn event_synchronize(&self, event: FakeEvent) -> Result<(), DriverError> {
        const C: Call = Call::EventSynchronize;
        self.synchronizing();
        let mut st = self.lock();
        st.enter(C)?;
        st.timeline
            .synchronize_event(event.0)
            .map_err(bad_handle(C))
    }
}

impl Drop for FakeDriver {
    fn drop(&mut self) {
        // Pinned host memory is real memory: give back what the user did not.
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (addr, layout) in st.host.drain() {
            // SAFETY: every entry of `host` is a live allocation of `host_alloc` with its layout;
            // the driver is going away, and pinned memory does not outlive its driver.
            unsafe { alloc::dealloc(addr as *mut u8, layout) };
        }
    }
}

#[cfg(test)]
mod tests;
