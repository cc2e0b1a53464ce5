//! Every example of this package answers `--help` with its usage and success. Cargo builds a
//! package's examples before its tests run, next to the test binaries
//! (`target/<profile>/examples/`), when the package's tests run unfiltered (`cargo test -p
//! tagalloc-lab`); a run filtered with `--test` builds no example and may find an old one.

use std::process::Command;

#[test]
fn examples_answer_help() {
    let exe = std::env::current_exe().expect("the test binary");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    for name in ["profile", "counters", "call_times"] {
        let path = dir.join("examples").join(name);
        let help = Command::new(&path)
            .arg("--help")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(help.status.success(), "{name}: {:?}", help.status);
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(
            text.starts_with(&format!("usage: {name}")),
            "{name}: {text}"
        );
    }
}
