//! The step check (`check_step`): it accepts what the full check accepts (every step of the
//! model tests runs both), and it reads the lists a step filed into, as these corruptions show.

use super::inline::Arena;
use crate::{InlineHeap, StepMarks};

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
