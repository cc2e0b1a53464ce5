//! The threaded replay's wall time with three allocators side by side: the shared host pool
//! (`mmap` regions, `HostAllocator`'s policy) behind the core's spin lock, the same pool behind
//! `tagalloc_host::FutexLock` (waiters sleep), and the system allocator (glibc's malloc).
//!
//! ```text
//! cargo run --release -p tagalloc-tests --example threaded_timing                # android-systemui, 5 rounds
//! cargo run --release -p tagalloc-tests --example threaded_timing -- TRACE ROUNDS
//! ```
//!
//! Each round replays the trace once through each allocator, in a rotating order, so that a
//! busy moment of the machine falls on all of them alike; the median over the rounds is
//! reported with the minimum and maximum. The time is the replay's wall time from the start
//! barrier to the last thread joined (one OS thread per recorded thread); beside it, the CPU
//! time the process used over the same replay (user + system, all threads: what spinning
//! waiters burn, and less disturbed than wall time by other work on a shared machine), with
//! every block's
//! contents written and verified by the replay (the same work for every allocator) and no
//! invariant checks while the threads run; each replay is then checked as the tests check it
//! (contents, and for the pools their invariants and statistics).

use std::env;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tagalloc::{InlineHeap, Pool, SharedPool, SpinLock};
use tagalloc_host::{FutexLock, HostAllocator, HostPool, MmapSource};
use tagalloc_tests::threaded::{
    replay_threaded, Plan, SystemAlloc, ThreadedAlloc, ThreadedOptions,
};
use tagalloc_tests::trace::{shared_trace, Trace};

const NAMES: [&str; 3] = ["pool + spin lock", "pool + futex lock", "glibc malloc"];

fn pool<L: tagalloc::RawLock>() -> HostPool<L> {
    SharedPool::new(Pool::new(
        InlineHeap::new(),
        MmapSource::new(),
        HostAllocator::POLICY,
    ))
}

/// The process's CPU time so far (user + system, every thread, finished ones included).
fn cpu_time() -> Duration {
    // SAFETY: `rusage` is plain data, all zeros a valid value; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One replay through allocator `which`: its wall time, and the CPU time over the whole call
/// (the replay, and the checks and frees after it, which are the same for every allocator).
fn run(which: usize, trace: &Trace, plan: &Plan) -> Result<(Duration, Duration), String> {
    let cpu0 = cpu_time();
    let wall = run_one(which, trace, plan)?;
    Ok((wall, cpu_time() - cpu0))
}

fn run_one(which: usize, trace: &Trace, plan: &Plan) -> Result<Duration, String> {
    let options = ThreadedOptions {
        check_period: None,
        ..ThreadedOptions::default()
    };
    fn go(
        a: &impl ThreadedAlloc,
        trace: &Trace,
        plan: &Plan,
        o: &ThreadedOptions,
    ) -> Result<Duration, String> {
        replay_threaded(a, trace, plan, o).map(|r| r.replay)
    }
    match which {
        0 => go(&pool::<SpinLock>(), trace, plan, &options),
        1 => go(&pool::<FutexLock>(), trace, plan, &options),
        _ => go(&SystemAlloc, trace, plan, &options),
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

const USAGE: &str = "usage: threaded_timing [TRACE [ROUNDS]]\n\
    Replays a multi-threaded trace (default ../shared/traces/android-systemui.trace.gz), one \
    thread per recorded thread,\nthrough tagalloc's shared heap, the host pool and glibc, \
    ROUNDS rounds (default 5), and prints the medians.";

fn main() -> ExitCode {
    if env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if let Some(a) = env::args().skip(1).find(|a| a.starts_with('-')) {
        eprintln!("threaded_timing: unknown option {a}\n{USAGE}");
        return ExitCode::from(2);
    }
    let mut args = env::args().skip(1);
    let path = match args.next() {
        Some(p) => PathBuf::from(p),
        None => match shared_trace("android-systemui.trace.gz") {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let rounds: usize = match args.next().map(|r| r.parse()) {
        None => 5,
        Some(Ok(r)) if r > 0 => r,
        Some(_) => {
            eprintln!("{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    let trace = match Trace::load(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let plan = Plan::new(&trace.events, usize::MAX);
    println!(
        "{}: {} events, {} threads; {rounds} rounds on {} CPUs",
        trace.name,
        plan.events,
        plan.threads.len(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut times: [Vec<Duration>; 3] = Default::default();
    let mut cpus: [Vec<Duration>; 3] = Default::default();
    for round in 0..rounds {
        for k in 0..3 {
            let which = (round + k) % 3;
            match run(which, &trace, &plan) {
                Ok((t, cpu)) => {
                    println!(
                        "round {round}: {:<18} wall {t:.2?}, CPU {cpu:.2?}",
                        NAMES[which]
                    );
                    times[which].push(t);
                    cpus[which].push(cpu);
                }
                Err(e) => {
                    eprintln!("{}: {e}", NAMES[which]);
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    let glibc = median(&mut times[2].clone());
    let glibc_cpu = median(&mut cpus[2].clone());
    println!(
        "\n| allocator | median wall time (s) | min–max (s) | wall ÷ glibc's | median CPU time \
         (s) | CPU ÷ glibc's |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for ((name, t), c) in NAMES.iter().zip(&mut times).zip(&mut cpus) {
        let (m, mc) = (median(t), median(c));
        println!(
            "| {name} | {:.2} | {:.2}–{:.2} | {:.2} | {:.2} | {:.2} |",
            m.as_secs_f64(),
            t[0].as_secs_f64(),
            t[t.len() - 1].as_secs_f64(),
            m.as_secs_f64() / glibc.as_secs_f64(),
            mc.as_secs_f64(),
            mc.as_secs_f64() / glibc_cpu.as_secs_f64(),
        );
    }
    println!("(every column: lower is better; ratios are the allocator's median ÷ glibc's)");
    ExitCode::SUCCESS
}
