//! Misuse of the library by a C program (`tests/c/misuse.c`), one case per run, in both modes
//! (default, and `TAGALLOC_CHECKED=1`), with `TAGALLOC_ON_MISUSE=continue` (a double free or
//! an invalid pointer aborts by default: `tests/api.rs`): each must be refused or reported with its
//! own cause, and none may end in a bare signal. A refused free leaves the program's blocks and the
//! figures (`mallinfo2`) as they were and is reported once on stderr; damaged tags are
//! reported with their address and the process aborts (SIGABRT), as glibc does.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use common::{compile_c, library, scratch, Program, Run};

/// The misuse program, compiled once per test binary.
fn program() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = scratch("misuse");
        compile_c("tests/c/misuse.c", &dir, &["-Wno-use-after-free"])
    })
    .clone()
}

/// Runs `case` on the library, checked or not.
fn run(case: &str, checked: bool) -> Run {
    let exe = program();
    let dir = exe.parent().expect("a directory").to_path_buf();
    let dir: &'static std::path::Path = Box::leak(dir.into_boxed_path());
    let exe: &'static str = Box::leak(exe.to_str().expect("a UTF-8 path").into());
    let mut p = Program::new(exe, &[case], dir);
    p.limit = Duration::from_secs(60);
    // The refusals are what is tested: the program must go on past them.
    let env: &[(&str, &str)] = if checked {
        &[
            ("TAGALLOC_CHECKED", "1"),
            ("TAGALLOC_ON_MISUSE", "continue"),
        ]
    } else {
        &[("TAGALLOC_ON_MISUSE", "continue")]
    };
    p.run(Some(&library()), env)
}

/// The library's reports of a run (not its statistics).
fn reports(r: &Run) -> Vec<&String> {
    r.tagalloc_lines
        .iter()
        .filter(|l| l.contains(") refused: ") || l.contains("): heap corruption at "))
        .collect()
}

/// `case` runs to its end in both modes, every check passing, with one report whose cause
/// contains `cause` (and not `not`), and `refused` frees counted.
fn refused(case: &str, cause: &str, not: &str, refused: u32) {
    refused_in(case, cause, not, refused, &[false, true]);
}

/// [`refused`] in the modes `checked` lists (`true`: `TAGALLOC_CHECKED=1`); the runs.
fn refused_in(case: &str, cause: &str, not: &str, refused: u32, checked: &[bool]) -> Vec<Run> {
    let mut runs = Vec::new();
    for &checked in checked {
        let r = run(case, checked);
        let out = r.stdout_text();
        let what = format!(
            "{case} (checked: {checked}): {:?}\n{out}{}",
            r.status,
            r.stderr_text()
        );
        assert!(r.status.success(), "{what}");
        assert!(
            out.ends_with(&format!("{case}: done, 0 failed\n")),
            "{what}"
        );
        let rep = reports(&r);
        assert_eq!(rep.len(), 1, "{what}{:?}", r.tagalloc_lines);
        assert!(rep[0].starts_with("tagalloc: "), "{}", rep[0]);
        assert!(
            rep[0].contains(cause) && !rep[0].contains(not),
            "{}",
            rep[0]
        );
        let stats = r.tagalloc_lines.join("\n");
        assert!(
            stats.contains(&format!(
                ", {refused} refused {};",
                if refused == 1 { "free" } else { "frees" }
            )),
            "{what}{stats}"
        );
        runs.push(r);
    }
    runs
}

/// `case` aborts in both modes after reporting heap corruption at an address.
fn corrupted(case: &str) {
    corrupted_in(case, "", &[false, true]);
}

/// [`corrupted`] in the modes `checked` lists, the report naming `cause`.
fn corrupted_in(case: &str, cause: &str, checked: &[bool]) {
    for &checked in checked {
        let r = run(case, checked);
        let what = format!(
            "{case} (checked: {checked}): {:?}\n{}{:?}",
            r.status,
            r.stderr_text(),
            r.tagalloc_lines
        );
        assert_eq!(r.status.signal(), Some(libc_sigabrt()), "{what}");
        let rep = reports(&r);
        assert_eq!(rep.len(), 1, "{what}");
        assert!(
            rep[0].starts_with("tagalloc: free(0x")
                && rep[0].contains("): heap corruption at 0x")
                && rep[0].contains("aborting")
                && rep[0].contains(cause),
            "{}",
            rep[0]
        );
    }
}

/// SIGABRT's number on Linux.
fn libc_sigabrt() -> i32 {
    6
}

macro_rules! needs_cc {
    ($($item:item)*) => {$(
        #[cfg_attr(
            not(tagalloc_has_cc),
            ignore = "needs cc on PATH when the tests were built (CI installs it)"
        )]
        $item
    )*};
}

needs_cc! {
    /// `free(a); free(b); free(b)`: `b` merged into its free predecessor `a`; the refused free
    /// and realloc of `b` are counted (`malloc_usable_size` answers 0 and counts nothing).
    #[test]
    fn a_double_free_after_a_merge_with_the_predecessor_is_refused() {
        refused("merged", "a double free", "invalid pointer", 2);
    }

    /// `free(b); free(a); free(b)`: `b` absorbed as `a`'s free successor.
    #[test]
    fn a_double_free_after_a_merge_with_the_successor_is_refused() {
        refused("merged-next", "a double free", "invalid pointer", 2);
    }

    /// A large block (a mapping of its own, given back by its first free, its mapping kept
    /// for reuse), freed twice.
    #[test]
    fn a_double_free_of_a_large_block_is_refused() {
        refused("large", "a double free", "invalid pointer", 1);
    }

    /// A block freed twice while the first free left it in the thread's cache (one of 64
    /// bytes, one of 3000 in a class above 1 KiB), then resized: both refused.
    #[test]
    fn a_double_free_of_a_cached_block_is_refused() {
        for case in ["cached-small", "cached-3000"] {
            refused(case, "a double free", "invalid pointer", 2);
        }
    }

    /// A small block freed twice, the second time after `malloc_trim` gave its memory back:
    /// the thread's last proof of a free was in that region, which a cached free must not trust
    /// once the ranges changed.
    #[test]
    fn a_double_free_of_a_block_trimmed_away_is_refused() {
        refused("trimmed", "a double free", "invalid pointer", 1);
    }

    /// Pointers into the middle of a block, with zeros, 0xff bytes or text before them.
    #[test]
    fn a_pointer_into_a_block_is_refused_as_invalid_not_a_double_free() {
        for case in ["middle-zero", "middle-garbage", "middle-text"] {
            refused(case, "an invalid pointer", "double free", 3);
        }
    }

    /// A stack address and addresses of a mapping of the program's own, full of garbage.
    #[test]
    fn stack_and_mmap_pointers_are_refused_as_invalid() {
        refused("foreign", "an invalid pointer", "double free", 3);
    }

    /// One byte past a block's usable size, onto the next chunk's tag ('x', and the NUL of an
    /// off-by-one `strcpy`), then frees: heap corruption reported, then an abort.
    #[test]
    fn a_write_past_a_block_is_reported_as_corruption_then_aborts() {
        corrupted("past-end-x");
        corrupted("past-end-nul");
    }

    /// Each report says its cause once: not again in glibc's words, and heap corruption not
    /// in glibc's words for an invalid pointer, another cause.
    #[test]
    fn each_report_says_its_cause_once() {
        for (case, cause) in [("large", "double free"), ("foreign", "invalid pointer")] {
            let r = run(case, false);
            let rep = reports(&r);
            assert_eq!(rep.len(), 1, "{case}: {:?}", r.tagalloc_lines);
            assert_eq!(rep[0].matches(cause).count(), 1, "{}", rep[0]);
        }
        let r = run("past-end-x", false);
        let rep = reports(&r);
        assert_eq!(rep.len(), 1, "{:?}", r.tagalloc_lines);
        assert!(
            rep[0].matches("corruption").count() == 1 && !rep[0].contains("invalid pointer"),
            "{}",
            rep[0]
        );
    }

    /// Misuse on a heap of 100,000 blocks (every third freed): a double free (reported), its
    /// realloc, a pointer into the middle of a live block and one into the middle of a freed
    /// block, all refused; then everything freed as usual.
    #[test]
    fn misuse_on_a_heap_of_many_blocks_is_refused() {
        refused("many", "a double free", "invalid pointer", 4);
    }

    /// Pointers into a live block and into a free chunk after bytes forged to read as a sound
    /// in-use tag: checked mode refuses both as invalid (the default proof obeys the first).
    #[test]
    fn checked_mode_refuses_pointers_after_forged_tags() {
        refused_in("forged", "an invalid pointer", "double free", 2, &[true]);
    }

    /// A large block's mapping grown in place by realloc, the heap grown, emptied, trimmed and
    /// grown again, then a double free, a pointer into a live block and one into the large
    /// block: refused; every other block freed as usual (the checked records follow the regions
    /// as they grow, are cut and go back).
    #[test]
    fn misuse_after_regions_grew_and_were_trimmed_is_refused() {
        for r in refused_in(
            "regrown",
            "a double free",
            "invalid pointer",
            3,
            &[false, true],
        ) {
            // Where the large block found room to grow in place, it did.
            if r.stdout_text().contains("ok   the large block lies in the hole") {
                let stats = r.tagalloc_lines.join("\n");
                assert!(!stats.contains("grown in place 0;"), "{stats}");
            }
        }
    }

    /// A block moved by realloc: its old pointer freed, resized and queried, refused as a
    /// double free.
    #[test]
    fn the_old_pointer_of_a_moved_block_is_refused_as_a_double_free() {
        refused("realloc-moved", "a double free", "invalid pointer", 2);
    }

    /// Blocks of every aligned allocation function are proven, resized and freed as any block;
    /// a double free of one is refused.
    #[test]
    fn aligned_blocks_are_proven_and_their_double_free_refused() {
        refused("aligned", "a double free", "invalid pointer", 1);
    }

    /// A write past a block's end that grows the next block's size over its own neighbour
    /// exactly (the tags stay consistent): checked mode reports it at that block's free (the
    /// default mode does not see it).
    #[test]
    fn checked_mode_reports_a_size_grown_over_a_live_block() {
        corrupted_in("grown-over", "covers another live block", &[true]);
    }
}
