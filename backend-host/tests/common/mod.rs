//! What the tests ask the kernel about the process's memory: which pages of a range are mapped
//! and resident (`mincore`), the resident set (`/proc/self/statm`), the mapping that holds an
//! address (`/proc/self/smaps`), and the locked bytes (`VmLck`).

#![allow(dead_code)] // each test binary uses its own part

use std::fs;

/// Held by every test of a binary that maps and unmaps memory and then asks the kernel whether
/// a range is mapped, for its whole run: run side by side on the harness's threads, another
/// test's new mapping could land in a range one test has just unmapped and make it look mapped.
static KERNEL_MAPPINGS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`KERNEL_MAPPINGS`] (a test that failed while holding it leaves nothing to protect).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    KERNEL_MAPPINGS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How many pages of `addr..addr + len` are resident, or `None` if part of the range is not
/// mapped (`mincore` fails with `ENOMEM`).
pub fn resident_pages(addr: usize, len: usize) -> Option<usize> {
    let page = page_size();
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` has one byte per page of the range; `mincore` only reads the page tables.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::ENOMEM), "mincore: {e}");
        return None;
    }
    Some(vec.iter().filter(|&&b| b & 1 != 0).count())
}

/// Whether every page of the range is mapped.
pub fn mapped(addr: usize, len: usize) -> bool {
    resident_pages(addr, len).is_some()
}

/// Whether no page of the range is mapped.
pub fn unmapped(addr: usize, len: usize) -> bool {
    let page = page_size();
    (addr..addr + len)
        .step_by(page)
        .all(|p| resident_pages(p, page).is_none())
}

pub fn page_size() -> usize {
    // SAFETY: no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// The process's resident set in bytes (`/proc/self/statm`, second field, in pages).
pub fn resident_bytes() -> usize {
    let statm = fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm resident field");
    pages * page_size()
}

/// The `/proc/self/smaps` entry (header line and fields) of the mapping holding `addr`.
pub fn smaps_entry(addr: usize) -> Option<String> {
    let smaps = fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    let mut entry: Option<String> = None;
    for line in smaps.lines() {
        let header = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| {
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            });
        match (header, &mut entry) {
            (Some(_), Some(_)) => return entry,
            (Some((start, end)), None) if (start..end).contains(&addr) => {
                entry = Some(format!("{line}\n"));
            }
            (None, Some(e)) => {
                e.push_str(line);
                e.push('\n');
            }
            _ => {}
        }
    }
    entry
}

/// The mapping holding `addr` as `(start, end)`, from `/proc/self/maps`.
pub fn mapping_of(addr: usize) -> Option<(usize, usize)> {
    let maps = fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines().find_map(|line| {
        let (a, b) = line.split_whitespace().next()?.split_once('-')?;
        let (a, b) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        (a..b).contains(&addr).then_some((a, b))
    })
}

/// A field of `/proc/self/status` in kB (`VmLck`, say).
pub fn status_kb(field: &str) -> usize {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}
