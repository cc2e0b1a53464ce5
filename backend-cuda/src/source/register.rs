//! [`RegisterHook`]: core [`Hooks`] that register every region of a host pool with CUDA.

use core::ptr::NonNull;
use std::collections::BTreeMap;

use tagalloc::Hooks;

use crate::driver::{Driver, PinFlags};
use crate::error::DriverError;

/// Registers host memory with CUDA as a pool obtains it (`cuMemHostRegister`), so that any
/// inline pool (over `mmap`ed memory, an arena, huge pages) serves page-locked memory the
/// device reaches, and unregisters it (`cuMemHostUnregister`) before the pool gives it back.
///
/// Each range the pool obtains or grows by is registered on its own (one registration per
/// hook call: exactly once per region and once per growth); giving a region back unregisters
/// all of its pieces, and cutting a region's tail unregisters the pieces inside the tail (a
/// piece the cut splits is unregistered and its kept head registered again).
///
/// A failed registration leaves the memory pageable, which is still correct (copies from it
/// are synchronous, not wrong); it is counted in [`RegisterHook::failures`] with the last
/// error.
///
/// Order: the core calls `given_back` and `shrunk` after the source has taken the memory
/// back (`tagalloc-host`'s tests fix that order), so a range is unregistered just after it
/// was unmapped, not before. That is sound with the CUDA driver as this crate uses it (see
/// [`Driver::host_register`]): the pool gives a range back only after its last use, so no
/// device work touches it in between, and the driver keeps its pin on the pages until the
/// unregistration that follows at once, inside the same pool call. A hook point before the
/// give-back (TensorFlow calls its free visitors before it frees) would remove the gap; the
/// core has none today.
#[derive(Debug)]
pub struct RegisterHook<D: Driver> {
    driver: D,
    flags: PinFlags,
    /// Start → length of every registered piece.
    pieces: BTreeMap<usize, usize>,
    registrations: u64,
    unregistrations: u64,
    failures: u64,
    last: Option<DriverError>,
}

impl<D: Driver> RegisterHook<D> {
    /// Hooks that register with `flags`.
    pub fn new(driver: D, flags: PinFlags) -> RegisterHook<D> {
        RegisterHook {
            driver,
            flags,
            pieces: BTreeMap::new(),
            registrations: 0,
            unregistrations: 0,
            failures: 0,
            last: None,
        }
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// Ranges registered now.
    pub fn registered(&self) -> usize {
        self.pieces.len()
    }

    /// Bytes registered now.
    pub fn registered_bytes(&self) -> usize {
        self.pieces.values().sum()
    }

    /// Successful `cuMemHostRegister` calls so far.
    pub fn registrations(&self) -> u64 {
        self.registrations
    }

    /// Successful `cuMemHostUnregister` calls so far.
    pub fn unregistrations(&self) -> u64 {
        self.unregistrations
    }

    /// Driver calls that failed, and the last failure.
    pub fn failures(&self) -> (u64, Option<DriverError>) {
        (self.failures, self.last)
    }

    fn register(&mut self, start: usize, len: usize) {
        let Some(ptr) = NonNull::new(start as *mut u8) else {
            return;
        };
        if len == 0 {
            return;
        }
        // SAFETY: the pool just handed this range to its heap: it is mapped host memory that
        // stays mapped until the pool gives it back after its last use, and the hook
        // unregisters it in the same pool call (`given_back`, `shrunk`), before the range can
        // be obtained and registered again: what `host_register` asks.
        match unsafe { self.driver.host_register(ptr, len, self.flags) } {
            Ok(()) => {
                self.pieces.insert(start, len);
                self.registrations += 1;
            }
            Err(e) => self.fail(e),
        }
    }

    fn unregister(&mut self, start: usize) {
        if self.pieces.remove(&start).is_none() {
            return;
        }
        let Some(ptr) = NonNull::new(start as *mut u8) else {
            return;
        };
        // SAFETY: the registration is this hook's; the pool is done with the range (it is
        // being given back or cut off after its last use).
        match unsafe { self.driver.host_unregister(ptr) } {
            Ok(()) => self.unregistrations += 1,
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: DriverError) {
        self.failures += 1;
        self.last = Some(e);
    }

    /// Unregisters every piece inside `start..end`, and re-registers the head of a piece that
    /// starts before `start` and reaches into it.
    fn unregister_range(&mut self, start: usize, end: usize) {
        let straddling = self
            .pieces
            .range(..start)
            .next_back()
            .filter(|(&s, &l)| s + l > start)
            .map(|(&s, _)| s);
        let inside: Vec<usize> = self.pieces.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            self.unregister(s);
        }
        if let Some(s) = straddling {
            self.unregister(s);
            self.register(s, start - s);
        }
    }
}

impl<D: Driver> Hooks for RegisterHook<D> {
    fn obtained(&mut self, base: usize, len: usize) {
        self.register(base, len);
    }

    fn grown(&mut self, _base: usize, at: usize, len: usize) {
        self.register(at, len);
    }

    fn given_back(&mut self, base: usize, len: usize) {
        self.unregister_range(base, base + len);
    }

    fn shrunk(&mut self, _base: usize, at: usize, len: usize) {
        self.unregister_range(at, at + len);
    }
}

impl<D: Driver> Drop for RegisterHook<D> {
    /// Unregisters what is still registered (a pool dropped with regions it could not give
    /// back): pageable again, the memory stays its owner's.
    fn drop(&mut self) {
        let starts: Vec<usize> = self.pieces.keys().copied().collect();
        for s in starts {
            self.unregister(s);
        }
    }
}
