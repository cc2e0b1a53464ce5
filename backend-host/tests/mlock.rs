//! Page-locked regions and `RLIMIT_MEMLOCK`. The limit is lowered in a child process (this test
//! binary run again for one ignored test, with an environment variable), never in the test
//! process itself. A process with `CAP_IPC_LOCK` (root, say) is not bound by the limit, so the
//! child drops that capability first.

mod common;

use std::process::Command;

use common::status_kb;
use tagalloc::{Error, InlineHeap, Policy, Pool, RegionSource};
use tagalloc_host::{Call, MmapOptions};

const CHILD_ENV: &str = "TAGALLOC_HOST_MLOCK_CHILD";
const LIMIT: u64 = 256 << 10;
const KIB: usize = 1 << 10;

#[test]
fn locked_regions_past_rlimit_memlock_are_refused_naming_the_limit() {
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "child_with_a_low_memlock_limit",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child test did not run:\n{stdout}"
    );
    assert!(
        stdout.contains("RLIMIT_MEMLOCK is 262144 bytes"),
        "{stdout}"
    );
}

/// Clears `CAP_IPC_LOCK` from the effective and permitted sets, if the process has it.
fn drop_cap_ipc_lock() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_IPC_LOCK: u32 = 14;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes two `Data` (version 3) and may write `header.version`.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    assert_eq!(r, 0, "capget: {}", std::io::Error::last_os_error());
    data[0].effective &= !(1 << CAP_IPC_LOCK);
    data[0].permitted &= !(1 << CAP_IPC_LOCK);
    // SAFETY: capset reads the header and two `Data`.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
}

#[test]
#[ignore = "runs in a child process started by locked_regions_past_rlimit_memlock_are_refused_naming_the_limit"]
fn child_with_a_low_memlock_limit() {
    assert_eq!(
        std::env::var(CHILD_ENV).as_deref(),
        Ok("1"),
        "only in the child: it lowers RLIMIT_MEMLOCK for the whole process"
    );
    drop_cap_ipc_lock();
    let lim = libc::rlimit {
        rlim_cur: LIMIT as libc::rlim_t,
        rlim_max: LIMIT as libc::rlim_t,
    };
    // SAFETY: a valid `rlimit`.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) }, 0);
    assert_eq!(status_kb("VmLck"), 0);

    // Past the limit: refused, with the call, the bytes and the limit.
    let mut src = MmapOptions::new().locked(true).source();
    assert_eq!(src.obtain(1 << 20), Err(Error::OutOfMemory));
    let e = src.last_error().expect("recorded");
    assert_eq!(
        (e.call, e.bytes, e.memlock_limit),
        (Call::Lock, 1 << 20, Some(LIMIT))
    );
    let msg = e.to_string();
    println!("refused: {msg}");
    assert!(msg.contains("mlock of 1048576 bytes failed"), "{msg}");
    assert!(msg.contains("RLIMIT_MEMLOCK is 262144 bytes"), "{msg}");
    assert_eq!(src.mapped(), 0, "the refused mapping was unmapped");

    // Within it: locked (VmLck counts it) and resident.
    let (base, len) = src.obtain(64 * KIB).unwrap();
    assert_eq!(status_kb("VmLck"), 64);
    assert_eq!(
        common::resident_pages(base.addr().get(), len),
        Some(len / common::page_size())
    );
    // Growing past the limit is refused as a locking error too, and changes nothing.
    assert_eq!(src.grow(base, len, 1 << 20), Err(Error::OutOfMemory));
    let e = src.last_error().expect("recorded");
    assert_eq!((e.call, e.bytes), (Call::Lock, 1 << 20), "{e}");
    assert_eq!(status_kb("VmLck"), 64);
    // Locked pages are never released.
    // SAFETY: the range is ours and unused.
    assert!(!unsafe { src.release(base.addr().get(), len) });
    // SAFETY: the region is not used after this.
    unsafe { src.give_back(base, len) };
    assert_eq!(status_kb("VmLck"), 0);

    // Through a pool: the pool's error says out of memory, the source says why.
    let mut pool = Pool::new(
        InlineHeap::new(),
        MmapOptions::new().locked(true).source(),
        Policy::new(),
    );
    let small = pool
        .alloc(1000, 16)
        .expect("a 1 MiB region would pass the limit, so the pool tries the smallest that fits");
    let e = pool.alloc(600 * KIB, 16).unwrap_err();
    assert_eq!(e.error, Error::OutOfMemory);
    let why = pool.source().last_error().expect("recorded");
    assert_eq!(why.call, Call::Lock);
    println!("pool: {e}; source: {why}");
    // SAFETY: a live block, freed once.
    unsafe { pool.free(small, 1000).unwrap() };
    pool.trim();
    assert_eq!(status_kb("VmLck"), 0);
}
