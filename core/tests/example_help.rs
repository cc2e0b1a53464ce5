//! The `global` example answers `--help` with its usage and success, and refuses an argument
//! with exit status 2. Cargo builds a package's examples before its tests run, next to the
//! test binaries (`target/<profile>/examples/`), when the
//! package's tests run unfiltered (`cargo test -p PKG`); a run filtered with `--test` builds no
//! example and may find an old one.

use std::process::Command;

#[test]
#[cfg_attr(miri, ignore = "Miri runs no other process")]
fn the_example_answers_help() {
    let exe = std::env::current_exe().expect("the test binary");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let path = dir.join("examples").join("global");
    let help = Command::new(&path)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(help.status.success(), "{:?}", help.status);
    assert!(String::from_utf8_lossy(&help.stdout).starts_with("usage: global"));
    let bad = Command::new(&path)
        .arg("--no-such-option")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
