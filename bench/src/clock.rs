//! The calling thread's CPU time, beside the wall clock. On a shared machine a run's wall time
//! includes whatever time the thread spent descheduled (with a load average of 4 on 2 cores,
//! most of it); its CPU time does not, so comparisons of a few percent between runs hold up
//! better in CPU time. Cache and memory-bandwidth interference from other processes remain in
//! both.

use std::time::{Duration, Instant};

/// The CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`), or `None` where
/// the clock cannot be read.
pub fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(Duration::new(secs, nanos))
}

/// A stopwatch of both clocks.
pub struct Stopwatch {
    wall: Instant,
    cpu: Option<Duration>,
}

/// What a [`Stopwatch`] measured.
#[derive(Clone, Copy, Debug)]
pub struct Elapsed {
    pub wall: Duration,
    /// `None` where the thread's CPU clock cannot be read.
    pub cpu: Option<Duration>,
}

impl Stopwatch {
    pub fn start() -> Self {
        // CPU clock first, so that reading it is not inside the wall interval.
        let cpu = thread_cpu();
        Stopwatch {
            wall: Instant::now(),
            cpu,
        }
    }

    pub fn stop(&self) -> Elapsed {
        let wall = self.wall.elapsed();
        let cpu = match (self.cpu, thread_cpu()) {
            (Some(a), Some(b)) => b.checked_sub(a),
            _ => None,
        };
        Elapsed { wall, cpu }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work() {
        let w = Stopwatch::start();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let e = w.stop();
        let cpu = e.cpu.expect("Linux has a thread CPU clock");
        assert!(cpu > Duration::ZERO);
        // Allow for the clocks' granularity: CPU time cannot much exceed wall time.
        assert!(cpu <= e.wall + Duration::from_millis(5), "{e:?}");
    }
}
