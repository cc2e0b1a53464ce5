//! What the fake driver counts and can be told to fail: every [`Driver`](crate::Driver) method
//! is one kind of [`Call`].

use core::fmt;

/// One kind of driver call: one method of [`Driver`](crate::Driver), named by its CUDA entry
/// point in [`Call::entry_point`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // each variant is the `Driver` method of the same name
pub enum Call {
    DeviceCount,
    MakeCurrent,
    MemGetInfo,
    CtxSynchronize,
    MemAlloc,
    MemFree,
    AllocationGranularity,
    MemAddressReserve,
    MemAddressFree,
    MemCreate,
    MemRelease,
    MemMap,
    MemSetAccess,
    MemUnmap,
    HostAlloc,
    HostFree,
    HostRegister,
    HostUnregister,
    StreamCreate,
    StreamDestroy,
    StreamSynchronize,
    StreamWaitEvent,
    StreamGetCaptureInfo,
    EventCreate,
    EventDestroy,
    EventRecord,
    EventQuery,
    EventSynchronize,
}

impl Call {
    /// Every kind, in declaration order.
    pub const ALL: [Call; 28] = [
        Call::DeviceCount,
        Call::MakeCurrent,
        Call::MemGetInfo,
        Call::CtxSynchronize,
        Call::MemAlloc,
        Call::MemFree,
        Call::AllocationGranularity,
        Call::MemAddressReserve,
        Call::MemAddressFree,
        Call::MemCreate,
        Call::MemRelease,
        Call::MemMap,
        Call::MemSetAccess,
        Call::MemUnmap,
        Call::HostAlloc,
        Call::HostFree,
        Call::HostRegister,
        Call::HostUnregister,
        Call::StreamCreate,
        Call::StreamDestroy,
        Call::StreamSynchronize,
        Call::StreamWaitEvent,
        Call::StreamGetCaptureInfo,
        Call::EventCreate,
        Call::EventDestroy,
        Call::EventRecord,
        Call::EventQuery,
        Call::EventSynchronize,
    ];

    /// The CUDA driver entry point the call stands for, as errors name it.
    pub const fn entry_point(self) -> &'static str {
        match self {
            Call::DeviceCount => "cuDeviceGetCount",
            Call::MakeCurrent => "cuCtxSetCurrent",
            Call::MemGetInfo => "cuMemGetInfo",
            Call::CtxSynchronize => "cuCtxSynchronize",
            Call::MemAlloc => "cuMemAlloc",
            Call::MemFree => "cuMemFree",
            Call::AllocationGranularity => "cuMemGetAllocationGranularity",
            Call::MemAddressReserve => "cuMemAddressReserve",
            Call::MemAddressFree => "cuMemAddressFree",
            Call::MemCreate => "cuMemCreate",
            Call::MemRelease => "cuMemRelease",
            Call::MemMap => "cuMemMap",
            Call::MemSetAccess => "cuMemSetAccess",
            Call::MemUnmap => "cuMemUnmap",
            Call::HostAlloc => "cuMemHostAlloc",
            Call::HostFree => "cuMemFreeHost",
            Call::HostRegister => "cuMemHostRegister",
            Call::HostUnregister => "cuMemHostUnregister",
            Call::StreamCreate => "cuStreamCreate",
            Call::StreamDestroy => "cuStreamDestroy",
            Call::StreamSynchronize => "cuStreamSynchronize",
            Call::StreamWaitEvent => "cuStreamWaitEvent",
            Call::StreamGetCaptureInfo => "cuStreamGetCaptureInfo",
            Call::EventCreate => "cuEventCreate",
            Call::EventDestroy => "cuEventDestroy",
            Call::EventRecord => "cuEventRecord",
            Call::EventQuery => "cuEventQuery",
            Call::EventSynchronize => "cuEventSynchronize",
        }
    }

    /// Whether the call makes the host wait for the device.
    pub const fn is_synchronization(self) -> bool {
        matches!(
            self,
            Call::CtxSynchronize | Call::StreamSynchronize | Call::EventSynchronize
        )
    }

    /// Whether the call obtains, maps or gives back device memory (the slow kind, for the
    /// fake's clock).
    pub const fn changes_memory(self) -> bool {
        matches!(
            self,
            Call::MemAlloc
                | Call::MemFree
                | Call::MemAddressReserve
                | Call::MemAddressFree
                | Call::MemCreate
                | Call::MemRelease
                | Call::MemMap
                | Call::MemSetAccess
                | Call::MemUnmap
        )
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// How many calls of each kind a [`FakeDriver`](super::FakeDriver) has received, failed ones
/// included, since it was created or its counts were last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallCounts {
    counts: [u64; Call::ALL.len()],
}

impl CallCounts {
    /// Calls of kind `call`.
    pub fn get(&self, call: Call) -> u64 {
        self.counts[call.index()]
    }

    /// Calls of every kind together.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Calls that made the host wait for the device (context, stream and event
    /// synchronisations).
    pub fn synchronizations(&self) -> u64 {
        Call::ALL
            .iter()
            .filter(|c| c.is_synchronization())
            .map(|&c| self.get(c))
            .sum()
    }

    /// Device memory obtained: plain allocations and physical allocations for mapping.
    pub fn allocations(&self) -> u64 {
        self.get(Call::MemAlloc) + self.get(Call::MemCreate)
    }

    /// Device memory given back: plain frees and physical releases.
    pub fn frees(&self) -> u64 {
        self.get(Call::MemFree) + self.get(Call::MemRelease)
    }

    /// Each kind with its count, in declaration order, zeros included.
    pub fn iter(&self) -> impl Iterator<Item = (Call, u64)> + '_ {
        Call::ALL.iter().map(move |&c| (c, self.get(c)))
    }

    /// The calls made since `earlier`, a snapshot of the same counters taken before.
    pub fn since(&self, earlier: &CallCounts) -> CallCounts {
        let mut counts = self.counts;
        for (c, e) in counts.iter_mut().zip(earlier.counts) {
            *c = c.saturating_sub(e);
        }
        CallCounts { counts }
    }

    pub(crate) fn bump(&mut self, call: Call) -> u64 {
        let c = &mut self.counts[call.index()];
        *c += 1;
        *c
    }
}

/// The kinds that were called, with their counts (`cuMemAlloc 3, cuMemFree 3`), or `none`.
impl fmt::Display for CallCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (call, n) in self.iter().filter(|&(_, n)| n > 0) {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{} {n}", call.entry_point())?;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// A failure to inject: the call of kind `call` whose running count reaches `at` fails with
/// `code`, doing nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Injection {
    pub(crate) call: Call,
    pub(crate) at: u64,
    pub(crate) code: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_kind_once_in_order() {
        for (i, call) in Call::ALL.iter().enumerate() {
            assert_eq!(call.index(), i);
        }
    }

    #[test]
    fn counts_add_up() {
        let mut c = CallCounts::default();
        assert_eq!(c.to_string(), "none");
        c.bump(Call::MemAlloc);
        c.bump(Call::MemAlloc);
        c.bump(Call::MemCreate);
        c.bump(Call::StreamSynchronize);
        c.bump(Call::EventSynchronize);
        c.bump(Call::MemRelease);
        let before = c;
        c.bump(Call::MemFree);
        assert_eq!(c.allocations(), 3);
        assert_eq!(c.frees(), 2);
        assert_eq!(c.synchronizations(), 2);
        assert_eq!(c.total(), 7);
        assert_eq!(c.since(&before).total(), 1);
        assert_eq!(c.since(&before).get(Call::MemFree), 1);
        assert_eq!(
            c.to_string(),
            "cuMemAlloc 2, cuMemFree 1, cuMemCreate 1, cuMemRelease 1, cuStreamSynchronize 1, \
             cuEventSynchronize 1"
        );
    }
}
