//! Decides, when the tests are built, whether those that replay the shared trace collection
//! (`../shared/traces` beside the repository, licensed traces that are never copied into it)
//! can run. It sets the `tagalloc_shared_traces` cfg when the collection is there, or when
//! `CI=true`: CI always has it, so there a missing collection must fail those tests rather
//! than leave them ignored. Without it, elsewhere, the tests are built with
//! `#[ignore = "needs ../shared/traces ..."]` and `cargo test` lists them as ignored, with that
//! reason, instead of passing them as no-ops.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tagalloc_shared_traces)");
    println!("cargo::rerun-if-env-changed=CI");
    let manifest = env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let dir = manifest.map(|m| m.join("../../shared/traces"));
    let present = dir.as_ref().is_some_and(|d| d.is_dir());
    match &dir {
        // Re-decide when the collection changes or goes away.
        Some(dir) if present => println!("cargo::rerun-if-changed={}", dir.display()),
        // Cargo treats a path that does not exist as changed, which would rebuild this crate
        // (and the bench) on every command; so the decision stands until this script changes:
        // after adding the collection, `touch tests/build.rs` (or `cargo clean -p
        // tagalloc-tests`) to run those tests.
        _ => println!("cargo::rerun-if-changed=build.rs"),
    }
    let ci = env::var("CI").is_ok_and(|v| v == "true");
    if present || ci {
        println!("cargo::rustc-cfg=tagalloc_shared_traces");
    }
}
