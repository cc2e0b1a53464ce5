//! Every example of this package answers `--help` with its usage and success, and refuses an
//! unknown option with exit status 2. Cargo builds a package's examples before its tests run,
//! next to the test binaries (`target/<profile>/examples/`), when the
//! package's tests run unfiltered (`cargo test -p PKG`); a run filtered with `--test` builds no
//! example and may find an old one.

use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    dir.join("examples").join(name)
}

#[test]
fn examples_answer_help_and_refuse_unknown_options() {
    for name in ["replay", "threaded_timing", "torch_model"] {
        let path = example(name);
        let help = Command::new(&path)
            .arg("--help")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(help.status.success(), "{name} --help: {:?}", help.status);
        assert!(
            text.starts_with(&format!("usage: {name}")),
            "{name}: {text}"
        );
        let bad = Command::new(&path)
            .arg("--no-such-option")
            .output()
            .unwrap();
        assert_eq!(bad.status.code(), Some(2), "{name} --no-such-option");
    }
}
