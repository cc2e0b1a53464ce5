//! The module map in the crate's documentation (`lib.rs`, "# Modules") names every module of
//! `src/` and every layer folder, so that it stays complete as files are added or moved.

use std::format;
use std::fs;
use std::path::Path;
use std::string::{String, ToString};
use std::vec::Vec;

/// The module map: the crate documentation from its "# Modules" heading to the example after it.
fn module_map(lib: &str) -> &str {
    let start = lib.find("//! # Modules").expect("lib.rs has a module map");
    let map = &lib[start..];
    &map[..map
        .find("//! ```")
        .expect("the module map ends before the crate example")]
}

#[test]
#[cfg_attr(miri, ignore = "reads the source tree, which Miri's isolation forbids")]
fn the_module_map_names_every_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap();
    let map = module_map(&lib);
    let mut missing: Vec<String> = Vec::new();
    for entry in fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if path.is_dir() {
            if name == "tests" {
                continue;
            }
            if !map.contains(&format!("`{name}/`")) {
                missing.push(format!("{name}/"));
            }
            for file in fs::read_dir(&path).unwrap() {
                let file = file.unwrap().path();
                let module = file.file_stem().unwrap().to_str().unwrap();
                if module != "mod" && !map.contains(&format!("`{module}`")) {
                    missing.push(format!("{name}/{module}"));
                }
            }
        } else if name != "lib" && !map.contains(&format!("`{name}`")) {
            missing.push(name);
        }
    }
    missing.sort();
    assert!(missing.is_empty(), "lib.rs's module map misses {missing:?}");
}
