//! The fake driver's device memory cannot be touched by the CPU: a read through a device
//! address kills the process with SIGSEGV, so a test that touches device memory by mistake
//! crashes instead of passing.
//!
//! A crash cannot be caught inside a test, so this test (built with `harness = false`) runs
//! itself again as a child process with `TAGALLOC_STRAY_ACCESS_CHILD` set; the child reads
//! device memory and must die of the signal, which the parent checks.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};

use tagalloc_cuda::fake::{FakeConfig, FakeDriver};
use tagalloc_cuda::Driver;

const CHILD: &str = "TAGALLOC_STRAY_ACCESS_CHILD";

fn child(what: &str) -> ExitCode {
    let driver = FakeDriver::new(FakeConfig::default()).expect("fake driver");
    let ptr = match what {
        "alloc" => driver.mem_alloc(4096).expect("mem_alloc"),
        "mapped" => {
            // Even mapped, with access granted, virtual memory is device memory.
            let g = driver.config().granularity;
            let va = driver.mem_address_reserve(g, 0).expect("reserve");
            let h = driver.mem_create(g).expect("create");
            // SAFETY: the reservation and handle are this process's.
            unsafe {
                driver.mem_map(va, g, h).expect("map");
                driver.mem_set_access(va, g).expect("access");
            }
            va
        }
        _ => return ExitCode::from(2),
    };
    eprintln!("child: reading device address {:#x} ({what})", ptr.0);
    // SAFETY: none; this is the bug the fake must turn into a crash. The read goes to a
    // PROT_NONE page, so it faults before any value is produced.
    let value = unsafe { std::ptr::read_volatile(ptr.0 as *const u8) };
    eprintln!("child: read {value} from device memory: the fake let the CPU touch it");
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    if let Ok(what) = std::env::var(CHILD) {
        return child(&what);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let (mut passed, mut failed) = (0, 0);
    for what in ["alloc", "mapped"] {
        let out = Command::new(&exe)
            .env(CHILD, what)
            .output()
            .expect("run the child");
        let signal = out.status.signal();
        if signal == Some(libc::SIGSEGV) || signal == Some(libc::SIGBUS) {
            passed += 1;
        } else {
            // Quiet when it crashes as it must; the child's words only when it did not.
            eprintln!(
                "stray CPU read of device memory ({what}) did not crash: {:?}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            failed += 1;
        }
    }
    println!("test result: {passed} passed, {failed} failed");
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
