//! Fork safety: a multi-threaded program forks while its threads allocate (`tests/c/
//! fork_threads.c`), and every child must be able to allocate at once. Without the library's
//! `pthread_atfork` handlers a child inherits the pool's lock held by a thread that does not
//! exist in it and hangs on its first `malloc` (the program then reports it as hung: seen
//! with the handlers' registration taken out, the first or second child of a run hung).

mod common;

use std::time::Duration;

use common::{compile_c, scratch, Program};

#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn children_of_a_threaded_parent_can_allocate() {
    let dir = scratch("fork");
    let exe = compile_c("tests/c/fork_threads.c", &dir, &[]);
    let mut p = Program::new(exe.to_str().expect("a UTF-8 path"), &["40", "4"], &dir);
    p.limit = Duration::from_secs(240);
    let (_, ours) = common::same_output(&p, 1000);
    assert_eq!(
        ours.stdout_text(),
        "children: 40 ok, 0 failed, 0 hung\nthreads: 4 joined\n"
    );
    // The parent and each child report at exit (the children leave through `_exit`, so only
    // the parent does).
    assert!(ours.processes_reported() >= 1);
}
