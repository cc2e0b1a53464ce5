//! Thread-local storage and the dynamic loader. The library reads a thread-local (to know
//! which thread holds the pool's lock), and in a shared library that is a call to
//! `__tls_get_addr`, which may itself allocate: when a program loads and unloads libraries
//! with thread-local storage, glibc allocates and frees their TLS blocks and resizes each
//! thread's table of them with `malloc`. glibc 2.36 (this project's Debian) serves the TLS of
//! a library loaded at start-up, as a preloaded one is, without allocating, and later versions
//! say so explicitly for interposed allocators; this test holds it to that: threads that
//! `dlopen` and `dlclose` such a library while allocating must neither hang nor crash.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{compile_c, scratch, source, Program};

/// Builds the library with thread-local storage the programs `dlopen` (`tests/c/tls_module.c`)
/// in `dir`; its path.
fn tls_module(dir: &Path) -> String {
    let module = dir.join("libtls_module.so");
    let cc = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&module)
        .arg(source("tests/c/tls_module.c"))
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    module.to_str().expect("a UTF-8 path").to_string()
}

#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn dlopen_and_dlclose_of_tls_libraries_while_allocating() {
    let dir = scratch("tls");
    let module = tls_module(&dir);
    let exe = compile_c("tests/c/dlopen_tls.c", &dir, &[]);
    let mut p = Program::new(exe.to_str().expect("a UTF-8 path"), &[&module, "300"], &dir);
    p.limit = Duration::from_secs(120);
    let (_, ours) = common::same_output(&p, 1000);
    assert_eq!(
        ours.stdout_text(),
        "4 threads x 300 dlopen/dlclose rounds done\n"
    );
}

/// Many threads, half never joined, set up their caches while `pthread_setspecific` allocates
/// (the program makes 40 keys first), dlopen a TLS library, free each other's blocks and exit:
/// the output matches glibc's, and once they are gone and the main thread has trimmed, no
/// block is left in any cache (every exiting thread's cache went back to the pool).
#[cfg_attr(
    not(tagalloc_has_cc),
    ignore = "needs cc on PATH when the tests were built (CI installs it)"
)]
#[test]
fn exiting_threads_give_their_caches_back_even_unjoined() {
    let dir = scratch("tls-threads");
    let module = tls_module(&dir);
    let exe = compile_c("tests/c/tls_threads.c", &dir, &[]);
    let mut p = Program::new(exe.to_str().expect("a UTF-8 path"), &[&module, "32"], &dir);
    p.limit = Duration::from_secs(120);
    let (_, ours) = common::same_output(&p, 1000);
    assert_eq!(ours.stdout_text(), "32 threads done\n");
    let caches = ours
        .tagalloc_lines
        .iter()
        .find(|l| l.contains("at exit: thread caches hold"))
        .unwrap_or_else(|| panic!("no cache figures in {:?}", ours.tagalloc_lines));
    assert!(
        caches.contains("hold 0 B in 0 blocks"),
        "blocks left in caches: {caches}"
    );
}
