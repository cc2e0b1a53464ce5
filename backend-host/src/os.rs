//! What the source asks the operating system besides mappings: the page sizes, the memory
//! available, the page-locking limit, and the last error number.
//!
//! Nothing here allocates: these run inside the global allocator, under its lock, where an
//! allocation would call back into the pool. Files are read with `open`/`read` into a buffer on
//! the stack.

use core::sync::atomic::{AtomicUsize, Ordering};

/// The page size, read once (`sysconf(_SC_PAGESIZE)`; 4096 if that fails).
pub(crate) fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let cached = PAGE.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: `sysconf` has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = match usize::try_from(page) {
        Ok(p) if p.is_power_of_two() => p,
        _ => 4096,
    };
    PAGE.store(page, Ordering::Relaxed);
    page
}

/// The default huge-page size (`Hugepagesize` in `/proc/meminfo`; 2 MiB where it cannot be
/// read), read once. Both `MAP_HUGETLB` and transparent huge pages use it on x86-64.
pub(crate) fn huge_page_size() -> usize {
    static HUGE: AtomicUsize = AtomicUsize::new(0);
    let cached = HUGE.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    let huge = meminfo_bytes(b"Hugepagesize:")
        .filter(|h| h.is_power_of_two() && *h >= page_size())
        .unwrap_or(2 << 20);
    HUGE.store(huge, Ordering::Relaxed);
    huge
}

/// The memory the kernel says can be allocated without swapping (`MemAvailable` in
/// `/proc/meminfo`), or else the free memory `sysinfo` reports.
pub(crate) fn mem_available() -> Option<usize> {
    meminfo_bytes(b"MemAvailable:").or_else(|| {
        // SAFETY: `sysinfo` is plain data, for which all zeros is a valid value.
        let mut info: libc::sysinfo = unsafe { core::mem::zeroed() };
        // SAFETY: `info` is a valid, writable `sysinfo`.
        if unsafe { libc::sysinfo(&mut info) } != 0 {
            return None;
        }
        usize::try_from(info.freeram)
            .ok()?
            .checked_mul(info.mem_unit as usize)
    })
}

/// The soft `RLIMIT_MEMLOCK` in bytes (`None`: unlimited, or it cannot be read).
pub(crate) fn memlock_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable `rlimit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // `rlim_t` is 32 bits on some targets
    Some(lim.rlim_cur as u64)
}

/// Milliseconds of the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`: read from the vDSO,
/// without a system call, to the kernel's tick, a few milliseconds); 0 if it cannot be read.
pub(crate) fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let ms = u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000;
    secs.saturating_mul(1000).saturating_add(ms)
}

/// The calling thread's last error number.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The value of the `/proc/meminfo` line starting with `key` (a figure in kB), in bytes.
fn meminfo_bytes(key: &[u8]) -> Option<usize> {
    let mut buf = [0u8; 8192];
    let text = read_small_file(c"/proc/meminfo", &mut buf)?;
    text.split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(key))
        .and_then(parse_kb)
}

/// `"   2048 kB"` as bytes.
fn parse_kb(field: &[u8]) -> Option<usize> {
    let digits = field.trim_ascii_start();
    let end = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let mut kb = 0usize;
    for &d in &digits[..end] {
        kb = kb.checked_mul(10)?.checked_add(usize::from(d - b'0'))?;
    }
    let unit = digits[end..].trim_ascii();
    match unit {
        b"kB" => kb.checked_mul(1024),
        b"" => Some(kb),
        _ => None,
    }
}

/// Reads a small file (under `buf.len()` bytes, as `/proc` files are) into `buf`, without
/// allocating.
fn read_small_file<'b>(path: &core::ffi::CStr, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut len = 0;
    let ok = loop {
        let rest = &mut buf[len..];
        if rest.is_empty() {
            break true; // full: use what fits
        }
        // SAFETY: `rest` is valid for writes of `rest.len()` bytes; `fd` is open.
        let n = unsafe { libc::read(fd, rest.as_mut_ptr().cast(), rest.len()) };
        match n {
            0 => break true,
            n if n > 0 => len += n as usize,
            _ if errno() == libc::EINTR => {}
            _ => break false,
        }
    };
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    ok.then_some(&buf[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kb_fields_parse_and_bad_ones_do_not() {
        assert_eq!(parse_kb(b"    2048 kB"), Some(2 << 20));
        assert_eq!(parse_kb(b" 7"), Some(7));
        assert_eq!(parse_kb(b" kB"), None);
        assert_eq!(parse_kb(b" 12 MB"), None);
        assert_eq!(parse_kb(b" 99999999999999999999999 kB"), None);
    }

    #[test]
    fn the_system_figures_are_sane() {
        let page = page_size();
        assert!(page.is_power_of_two() && page >= 4096, "{page}");
        let huge = huge_page_size();
        assert!(huge.is_power_of_two() && huge > page, "{huge}");
        let avail = mem_available().expect("MemAvailable or sysinfo");
        assert!(avail > 1 << 20, "{avail}");
    }
}
