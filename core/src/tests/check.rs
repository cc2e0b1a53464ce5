//! The step check (`check_step`): it accepts what the full check accepts (every step of the
//! model tests runs both), and it reads the lists a step filed into, as these corruptions show;
//! the compact shape's size classes are checked, by either.

use core::ptr::NonNull;

use super::inline::Arena;
use crate::{Compact, Counters, HostGranule, InlineHeap, StepMarks};

/// Two free blocks of one size, in one list, around blocks kept in use: the heap, the two
/// payloads (their first words are the chunks' `Next` and `Prev` links) and the step marks.
fn two_in_a_list(ar: &mut Arena) -> (InlineHeap, [*mut usize; 2], StepMarks) {
    let mut h = InlineHeap::new();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(ar.ptr(), ar.len()).unwrap() };
    let mut marks = StepMarks::default();
    let a = h.alloc(40, 16).unwrap();
    let _keep = h.alloc(40, 16).unwrap();
    let b = h.alloc(40, 16).unwrap();
    let _keep2 = h.alloc(40, 16).unwrap();
    for p in [a, b] {
        // SAFETY: live blocks of 40 bytes, freed once.
        unsafe { h.free(p, 40).unwrap() };
        h.check_step(&mut marks).unwrap();
    }
    h.check().unwrap();
    (h, [a.as_ptr().cast(), b.as_ptr().cast()], marks)
}

#[test]
fn a_step_check_reads_the_list_a_free_filed_into() {
    // Each link word of either chunk, cleared or pointed at the other chunk's payload.
    for (i, word) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        for bad in [0, 1] {
            let mut ar = Arena::new(1 << 12);
            let (h, p, mut marks) = two_in_a_list(&mut ar);
            // A pointer with the arena's provenance, as the heap's own links carry.
            let value = if bad == 0 {
                core::ptr::null_mut()
            } else {
                p[1 - i].cast::<u8>()
            };
            // SAFETY: a link word in the payload of a free chunk, inside the arena; links are
            // stored as pointers.
            let old = unsafe { p[i].add(word).cast::<*mut u8>().replace(value) };
            if old == value {
                continue;
            }
            assert!(
                h.check_step(&mut marks).is_err(),
                "chunk {i}, link word {word} set to {value:p}"
            );
            assert!(h.check().is_err());
        }
    }
}

#[test]
fn step_marks_follow_the_bins() {
    let mut ar = Arena::new(1 << 12);
    let (mut h, p, mut marks) = two_in_a_list(&mut ar);
    // Both chunks taken again (the list empties), then checked: the marks are cleared.
    let before = marks;
    for _ in p {
        let _ = h.alloc(40, 16).unwrap();
    }
    h.check_step(&mut marks).unwrap();
    assert_ne!(marks, before);
    assert_eq!(marks, StepMarks::default());
}

/// Two free chunks of one compact size class (70 and 76 granules, each kept apart by a live
/// block), which form its ring: the heap and their payloads.
fn two_in_a_compact_class(
    ar: &mut Arena,
) -> (InlineHeap<HostGranule, Counters, Compact>, [NonNull<u8>; 2]) {
    let mut h = InlineHeap::compact();
    // SAFETY: the arena outlives the heap and nothing else uses its memory.
    unsafe { h.add_region(ar.ptr(), ar.len()).unwrap() };
    let a = h.alloc(1100, 16).unwrap();
    let _keep_a = h.alloc(16, 16).unwrap();
    let b = h.alloc(1200, 16).unwrap();
    let _keep_b = h.alloc(16, 16).unwrap();
    // SAFETY: live blocks of these sizes, freed once.
    unsafe {
        h.free_checked(a, 1100).unwrap();
        h.free_checked(b, 1200).unwrap();
    }
    (h, [a, b])
}

/// A `Prev` link of a compact size class's ring bent back to its own chunk, which no other
/// part of the check would see, is reported: found from the class's first chunk, whose
/// successor no longer links back.
#[test]
fn check_reports_a_broken_ring_of_a_compact_size_class() {
    let mut ar = Arena::new(1 << 16);
    let (h, [a, b]) = two_in_a_compact_class(&mut ar);
    h.check().unwrap();
    // SAFETY: the free chunk's `Prev` link, the second word of its payload, in the arena.
    unsafe { b.as_ptr().cast::<*mut u8>().add(1).write(b.as_ptr()) };
    let e = h.check().unwrap_err();
    assert_eq!(e.at, a.as_ptr() as usize - 8, "{e}");
}

/// The compact shape's size classes are read by a step's check too (every class, at every
/// step): the same broken ring is reported by the step check that follows the frees.
#[test]
fn a_step_check_reads_the_compact_size_classes() {
    let mut ar = Arena::new(1 << 16);
    let (h, [_, b]) = two_in_a_compact_class(&mut ar);
    let mut marks = StepMarks::default();
    h.check_step(&mut marks).unwrap();
    // SAFETY: the free chunk's `Prev` link, the second word of its payload, in the arena.
    unsafe { b.as_ptr().cast::<*mut u8>().add(1).write(b.as_ptr()) };
    assert!(h.check_step(&mut marks).is_err());
}
