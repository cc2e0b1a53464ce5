//! Huge pages: a region is backed by `MAP_HUGETLB` pages where the system has reserved some,
//! and otherwise mapped aligned to the huge-page size with `madvise(MADV_HUGEPAGE)`; the source
//! reports which, and `/proc/self/smaps` must agree with the report.

mod common;

use common::{mapped, smaps_entry, unmapped};
use tagalloc::RegionSource;
use tagalloc_host::MmapOptions;

/// The `Name:  N kB` field of an smaps entry, in kB.
fn field_kb(entry: &str, name: &str) -> usize {
    entry
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in\n{entry}"))
}

#[test]
fn huge_pages_are_used_or_the_fallback_is_taken_and_reported() {
    let mut src = MmapOptions::new().huge_pages(true).source();
    let huge = src.granularity();
    assert!(huge.is_power_of_two() && huge >= 2 << 20, "{huge}");
    let (base, len) = src.obtain(3 * huge - 4096).unwrap();
    let addr = base.addr().get();
    assert_eq!(len, 3 * huge);
    assert_eq!(addr % huge, 0, "aligned to the huge-page size");
    // SAFETY: the region is ours; touch every byte.
    unsafe { base.as_ptr().write_bytes(0x42, len) };
    let report = src.huge_pages();
    let entry = smaps_entry(addr).expect("the region is in smaps");
    let vm_flags = entry
        .lines()
        .find_map(|l| l.strip_prefix("VmFlags:"))
        .expect("VmFlags");
    match (report.hugetlb, report.transparent) {
        (1, 0) => {
            assert_eq!(field_kb(&entry, "KernelPageSize"), huge >> 10, "{entry}");
            println!("MAP_HUGETLB used: {report:?}");
        }
        (0, 1) => {
            assert!(report.hugetlb_errno.is_some(), "{report:?}");
            if report.advice_refused == 0 {
                assert!(
                    vm_flags.split_whitespace().any(|f| f == "hg"),
                    "MADV_HUGEPAGE should show as `hg`: {vm_flags}"
                );
            }
            println!(
                "MAP_HUGETLB refused ({}), fallback taken: {report:?}; AnonHugePages of the \
                 region after touching it: {} kB of {} kB",
                std::io::Error::from_raw_os_error(report.hugetlb_errno.unwrap_or(0)),
                field_kb(&entry, "AnonHugePages"),
                len >> 10
            );
        }
        _ => panic!("one region, one report: {report:?}"),
    }
    // Shrinking and giving back work at huge-page granularity.
    // SAFETY: the tail is not used after this.
    assert!(unsafe { src.shrink(base, len, huge) });
    assert!(unmapped(addr + huge, 2 * huge));
    assert!(mapped(addr, huge));
    // SAFETY: the region is not used after this.
    unsafe { src.give_back(base, huge) };
    assert!(unmapped(addr, huge));
    assert_eq!(src.mapped(), 0);
}
