//! Decides, when the tests are built, whether those that convert real ONNX models
//! (`tests/plan_models.rs`, through `tools/onnx2plan`) can run: it sets the `tagalloc_onnx`
//! cfg when `python3` imports the `onnx` package (`pip install -r
//! tools/onnx2plan/requirements.txt`), or when `CI=true`, where `.ci/run` installs it, so a
//! missing package fails those tests there instead of leaving them ignored. Elsewhere they
//! are built with `#[ignore = "needs python3 with onnx ..."]`, listed as ignored with that
//! reason, never passed as no-ops.

use std::env;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tagalloc_onnx)");
    println!("cargo::rerun-if-env-changed=CI");
    // After installing onnx: `touch bench/build.rs` to run those tests.
    println!("cargo::rerun-if-changed=build.rs");
    let ci = env::var("CI").is_ok_and(|v| v == "true");
    let onnx = Command::new("python3")
        .args(["-c", "import onnx"])
        .output()
        .is_ok_and(|o| o.status.success());
    if onnx || ci {
        println!("cargo::rustc-cfg=tagalloc_onnx");
    }
}
