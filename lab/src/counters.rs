//! The processor's and the kernel's event counters for this thread, through Linux's
//! `perf_event_open`, with no `perf` program: what `examples/counters.rs` reads around a run of
//! talc's random actions.
//!
//! Why: callgrind and cachegrind count instructions and simulate caches; where two allocators
//! run the same instructions with the same simulated misses and one is still slower, only the
//! hardware's counters (cycles, mispredicted branches, real misses) can say where the time
//! goes. A virtual machine may expose none: each event the kernel refuses is reported with its
//! reason, and the kernel's own software events (task clock, page faults) still count, so the
//! counting itself is checked on every Linux machine (the test below).

use std::io;

/// An event to count: its name, `perf_event_attr.type` and `.config` (Linux's
/// `include/uapi/linux/perf_event.h`).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub name: &'static str,
    kind: u32,
    config: u64,
}

const SOFTWARE: u32 = 1;
const HARDWARE: u32 = 0;
const HW_CACHE: u32 = 3;
/// `HW_CACHE` config: cache `id`, operation read (0), result miss (1) or access (0).
const fn cache(id: u64, miss: bool) -> u64 {
    id | (miss as u64) << 16
}

/// The events `examples/counters.rs` reads: two software events every Linux kernel has, then
/// the generic hardware ones (the kernel maps them to each processor's own).
pub const EVENTS: [Event; 12] = [
    ev("task-clock-ns", SOFTWARE, 1),
    ev("page-faults", SOFTWARE, 2),
    ev("cycles", HARDWARE, 0),
    ev("instructions", HARDWARE, 1),
    ev("branches", HARDWARE, 4),
    ev("branch-misses", HARDWARE, 5),
    ev("L1D-loads", HW_CACHE, cache(0, false)),
    ev("L1D-load-misses", HW_CACHE, cache(0, true)),
    ev("dTLB-load-misses", HW_CACHE, cache(3, true)),
    ev("LLC-misses", HARDWARE, 3),
    ev("stalled-frontend", HARDWARE, 7),
    ev("stalled-backend", HARDWARE, 8),
];

const fn ev(name: &'static str, kind: u32, config: u64) -> Event {
    Event { name, kind, config }
}

/// `struct perf_event_attr` up to its flags, padded to the size of its version 7 (128 bytes);
/// the kernel reads the fields it knows and requires the rest zero.
#[repr(C)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    rest: [u64; 10],
}

const ATTR_SIZE: u32 = 128;
const _: () = assert!(std::mem::size_of::<Attr>() == ATTR_SIZE as usize);
/// `flags`: disabled (bit 0) until enabled, user space only: exclude_kernel (5), exclude_hv (6).
const FLAGS: u64 = 1 | 1 << 5 | 1 << 6;
/// `read_format`: the time the counter was enabled and running, to scale a count the kernel
/// multiplexed with others.
const READ_FORMAT: u64 = 1 | 2;
const IOC_ENABLE: u64 = 0x2400;
const IOC_DISABLE: u64 = 0x2401;
const IOC_RESET: u64 = 0x2403;

/// The event counters of the calling thread, one file descriptor per event the kernel accepted.
///
/// Invariant: every `Some` holds an open perf event descriptor owned by this value (closed on
/// drop).
pub struct EventCounters {
    events: Vec<Event>,
    fds: Vec<Option<i32>>,
}

impl EventCounters {
    /// Opens `events`, disabled; each refused one is `None`, with the kernel's reason in the
    /// list returned beside.
    pub fn open(events: &[Event]) -> (EventCounters, Vec<(Event, io::Error)>) {
        let mut refused = Vec::new();
        let fds = events
            .iter()
            .map(|&e| {
                let attr = Attr {
                    kind: e.kind,
                    size: ATTR_SIZE,
                    config: e.config,
                    sample_period: 0,
                    sample_type: 0,
                    read_format: READ_FORMAT,
                    flags: FLAGS,
                    rest: [0; 10],
                };
                // SAFETY: `attr` is a fully initialised `perf_event_attr` of the size it
                // declares, alive for the call; pid 0 and cpu -1 count this thread on any
                // processor, with no group and no flags.
                let fd = unsafe {
                    libc::syscall(
                        libc::SYS_perf_event_open,
                        &attr as *const Attr,
                        0,
                        -1,
                        -1,
                        0,
                    )
                };
                match i32::try_from(fd) {
                    Ok(fd) if fd >= 0 => Some(fd),
                    _ => {
                        refused.push((e, io::Error::last_os_error()));
                        None
                    }
                }
            })
            .collect();
        (
            EventCounters {
                events: events.to_vec(),
                fds,
            },
            refused,
        )
    }

    fn ioctl_all(&self, request: u64) {
        for &fd in self.fds.iter().flatten() {
            // SAFETY: `fd` is an open perf event (the type's invariant); these requests take
            // no argument and change only the counter.
            unsafe { libc::ioctl(fd, request as _, 0) };
        }
    }

    /// Zeroes every counter and starts them.
    pub fn start(&self) {
        self.ioctl_all(IOC_RESET);
        self.ioctl_all(IOC_ENABLE);
    }

    /// Stops every counter.
    pub fn stop(&self) {
        self.ioctl_all(IOC_DISABLE);
    }

    /// The counts since the last start, each scaled by the share of the time it ran (the
    /// kernel multiplexes more events than the processor has counters); `None` for a refused
    /// event or one that never ran.
    pub fn read(&self) -> Vec<(Event, Option<f64>)> {
        self.events
            .iter()
            .zip(&self.fds)
            .map(|(&e, fd)| {
                let value = fd.and_then(|fd| {
                    let mut v = [0u64; 3];
                    // SAFETY: `fd` is open (the invariant); the buffer holds the 24 bytes
                    // READ_FORMAT makes the kernel write.
                    let n = unsafe { libc::read(fd, v.as_mut_ptr().cast(), 24) };
                    (n == 24 && v[2] > 0).then(|| v[0] as f64 * v[1] as f64 / v[2] as f64)
                });
                (e, value)
            })
            .collect()
    }
}

impl Drop for EventCounters {
    fn drop(&mut self) {
        for &fd in self.fds.iter().flatten() {
            // SAFETY: `fd` is open and owned by this value (the invariant), closed once.
            unsafe { libc::close(fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Some work that takes a few milliseconds of processor time.
    fn work() {
        let mut x = 1u64;
        for _ in 0..5_000_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }

    /// The kernel's task clock counts the work between start and stop (no more than the wall
    /// time it took), and nothing after it: the open, the ioctls and the read all work, on any
    /// Linux machine.
    #[test]
    fn the_task_clock_counts_the_work_between_start_and_stop() {
        let (c, refused) = EventCounters::open(&EVENTS[..2]);
        assert!(refused.is_empty(), "software events refused: {refused:?}");
        let wall = std::time::Instant::now();
        c.start();
        work();
        c.stop();
        let wall = wall.elapsed().as_nanos() as f64;
        let ns = c.read()[0].1.expect("the task clock ran");
        assert!(
            ns > 0.0 && ns <= wall,
            "task clock {ns} ns in {wall} ns of wall time"
        );
        work();
        assert_eq!(c.read()[0].1, Some(ns), "counted while stopped");
    }

    /// A refused event is reported with the kernel's reason, and reads as `None`.
    #[test]
    fn a_refused_event_reads_as_none() {
        let bogus = Event {
            name: "bogus",
            kind: SOFTWARE,
            config: 1 << 40,
        };
        let (c, refused) = EventCounters::open(&[bogus]);
        assert_eq!(refused.len(), 1);
        assert_eq!(c.read()[0].1, None);
    }
}
