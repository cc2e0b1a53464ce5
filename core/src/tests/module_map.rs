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
            let mut files = Vec::new();
            sources(&path, &mut files);
            for file in files {
                let module = file.file_stem().unwrap().to_str().unwrap();
                let parent = file.parent().unwrap();
                let rel = parent.strip_prefix(&src).unwrap().to_str().unwrap();
                if parent != path {
                    // A folder inside a layer: named too (`problem`, `cache/`).
                    let folder = parent.file_name().unwrap().to_str().unwrap();
                    if !map.contains(&format!("`{folder}`"))
                        && !map.contains(&format!("`{folder}/`"))
                    {
                        missing.push(rel.to_string());
                    }
                }
                if module != "mod" && !map.contains(&format!("`{module}`")) {
                    missing.push(format!("{rel}/{module}"));
                }
            }
        } else if name != "lib" && !map.contains(&format!("`{name}`")) {
            missing.push(name);
        }
    }
    missing.sort();
    assert!(missing.is_empty(), "lib.rs's module map misses {missing:?}");
}

/// The layers the module map promises, in order: each bullet of the map is one layer, named by
/// the top-level modules (`error`, a file of `src/`; `algo/`, a folder) written in backticks
/// before the bullet's first colon. Every module of `src/` gets the index of its bullet.
fn layers(map: &str, src: &Path) -> Vec<(String, usize)> {
    let mut bullets: Vec<String> = Vec::new();
    for line in map.lines() {
        let text = line.trim_start_matches("//!");
        if let Some(rest) = text.strip_prefix(" - ") {
            bullets.push(rest.to_string());
        } else if text.starts_with("   ") && !bullets.is_empty() {
            let last = bullets.last_mut().unwrap();
            last.push(' ');
            last.push_str(text.trim());
        } else if !text.trim().is_empty() && !bullets.is_empty() {
            break;
        }
    }
    let mut order = Vec::new();
    for (i, bullet) in bullets.iter().enumerate() {
        let head = bullet.split(':').next().unwrap();
        for token in head.split('`').skip(1).step_by(2) {
            let module = match token.strip_suffix('/') {
                Some(dir) if !dir.contains('/') && src.join(dir).is_dir() => dir,
                None if !token.contains('/') && src.join(format!("{token}.rs")).is_file() => token,
                _ => continue,
            };
            order.push((module.to_string(), i));
        }
    }
    order
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of the layers (every `.rs` file of `src/` but the crate root and the tests, which
/// name everything and which nothing names), sorted, each with its path relative to `src/` and
/// its module path (`share/cache/mod.rs`: `["share", "cache"]`).
fn layer_files(src: &Path) -> Vec<(std::path::PathBuf, std::path::PathBuf, Vec<String>)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let rel = file.strip_prefix(src).unwrap().to_path_buf();
            let mut here: Vec<String> = rel
                .iter()
                .map(|s| s.to_str().unwrap().trim_end_matches(".rs").to_string())
                .collect();
            if here.last().is_some_and(|s| s == "mod") {
                here.pop();
            }
            if here == ["lib"] || here.first().is_some_and(|s| s == "tests") {
                return None;
            }
            Some((file, rel, here))
        })
        .collect()
}

/// The code of a line: its comment cut off and its string literals emptied (a doc link to a
/// higher layer is a reader's pointer, not a use). `in_string` carries a literal across lines.
fn code_of(line: &str, in_string: &mut bool) -> String {
    let mut code = String::new();
    let mut chars = line.chars().peekable();
    while let Some(ch) = chars.next() {
        if *in_string {
            match ch {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    *in_string = false;
                    code.push('"');
                }
                _ => {}
            }
            continue;
        }
        match ch {
            '"' => {
                *in_string = true;
                code.push('"');
            }
            '/' if chars.peek() == Some(&'/') => break,
            '\'' => {
                // A char literal ('"' or '\''), or a lifetime: kept out of the string scan.
                code.push(ch);
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with("\\") && rest.len() >= 3 {
                    for _ in 0..3 {
                        chars.next();
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
            }
            _ => code.push(ch),
        }
    }
    code
}

/// The absolute module paths a file's code names, each with its line: `crate::a::b`
/// (`$crate::` too, and each path of a `crate::{a::…, b}` group), and `super::` paths resolved
/// from the file's own module path `here`.
fn paths_named(text: &str, here: &[String]) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let mut in_string = false;
    // The code with line numbers, so that a group spread over lines is still read whole.
    let mut code = String::new();
    let mut line_of: Vec<usize> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let c = code_of(line, &mut in_string);
        for _ in 0..=c.len() {
            line_of.push(n + 1);
        }
        code.push_str(&c);
        code.push('\n');
    }
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let preceded = i > 0 && {
            let b = bytes[i - 1];
            b.is_ascii_alphanumeric() || b == b'_' || b == b':'
        };
        let (root, after): (Vec<String>, usize) = if rest.starts_with("crate::") && !preceded {
            (Vec::new(), 7)
        } else if rest.starts_with("super::") && !preceded {
            let mut up = 0;
            let mut at = 0;
            while code[i + at..].starts_with("super::") {
                up += 1;
                at += 7;
            }
            if up > here.len() {
                panic!("{here:?}: `super::` climbs past the crate root");
            }
            (here[..here.len() - up].to_vec(), at)
        } else {
            i += 1;
            continue;
        };
        let line = line_of[i];
        let tail = &code[i + after..];
        if let Some(group) = tail.strip_prefix('{') {
            // Each path of the group, to the matching brace (nested groups: their first names).
            let mut depth = 1;
            let mut start = true;
            let mut at = 0;
            while at < group.len() && depth > 0 {
                let c = group.as_bytes()[at];
                match c {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    b',' if depth == 1 => start = true,
                    c if c.is_ascii_whitespace() => {}
                    _ if start && depth == 1 => {
                        let name = ident(&group[at..]);
                        if !name.is_empty() && name != "self" {
                            let mut path = root.clone();
                            path.push(name.clone());
                            let more = &group[at + name.len()..];
                            if let Some(more) = more.strip_prefix("::") {
                                path.push(ident(more));
                            }
                            found.push((line, path));
                        }
                        start = false;
                    }
                    _ => {}
                }
                at += 1;
            }
        } else {
            let mut path = root.clone();
            let mut t = tail;
            loop {
                let name = ident(t);
                if name.is_empty() {
                    break;
                }
                t = &t[name.len()..];
                path.push(name);
                match t.strip_prefix("::") {
                    Some(next) => t = next,
                    None => break,
                }
            }
            if !path.is_empty() {
                found.push((line, path));
            }
        }
        i += after;
    }
    found
}

/// Which top-level module a crate-root name re-exported by `lib.rs` (`pub use a::b::Name;`,
/// `pub use a::{X, Y};`) comes from, so that `crate::Name` is read as the layer it names.
fn root_exports(lib: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in lib.lines() {
        let Some(path) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path = path.trim_end_matches(';');
        let module = path.split("::").next().unwrap().to_string();
        let names = match path.rsplit_once("::{") {
            Some((_, names)) => names.trim_end_matches('}').to_string(),
            None => path.rsplit("::").next().unwrap().to_string(),
        };
        for name in names.split(',') {
            out.push((name.trim().to_string(), module.clone()));
        }
    }
    out
}

#[test]
#[cfg_attr(miri, ignore = "reads the source tree, which Miri's isolation forbids")]
fn no_module_uses_a_layer_listed_after_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap();
    let order = layers(module_map(&lib), &src);
    let exports = root_exports(&lib);
    let layer = |module: &str| order.iter().find(|(m, _)| m == module).map(|(_, i)| *i);
    let shown = |module: &str| -> String {
        if src.join(module).is_dir() {
            format!("{module}/")
        } else {
            module.to_string()
        }
    };
    let mut faults: Vec<String> = Vec::new();
    // The crate root re-exports every layer, and the tests sit above them all: both left out.
    for (file, rel, here) in &layer_files(&src) {
        let Some(own) = layer(&here[0]) else {
            faults.push(format!(
                "{}: `{}` has no layer in lib.rs's module map",
                rel.display(),
                shown(&here[0])
            ));
            continue;
        };
        let text = fs::read_to_string(file).unwrap();
        for (line, path) in paths_named(&text, here) {
            let Some(first) = path.first() else { continue };
            let module = match layer(first) {
                Some(_) => first.clone(),
                None => match exports.iter().find(|(name, _)| name == first) {
                    Some((_, module)) => module.clone(),
                    None => continue,
                },
            };
            let Some(theirs) = layer(&module) else {
                continue;
            };
            if theirs > own {
                faults.push(format!(
                    "{}:{line}: `{}` reaches `{}`, a layer listed after `{}` in lib.rs's \
                     module map",
                    rel.display(),
                    path.join("::"),
                    shown(&module),
                    shown(&here[0])
                ));
            }
        }
    }
    assert!(
        faults.is_empty(),
        "lower layers use higher ones:\n{}",
        faults.join("\n")
    );
}

/// The file of the module a path names: its longest prefix that is a file (`a/b.rs`) or a folder
/// (`a/b/mod.rs`) of `src/`, as a path relative to it.
fn file_of(src: &Path, path: &[String]) -> Option<String> {
    (1..=path.len()).rev().find_map(|n| {
        let dir = path[..n].join("/");
        [format!("{dir}.rs"), format!("{dir}/mod.rs")]
            .into_iter()
            .find(|f| src.join(f).is_file())
    })
}

#[test]
#[cfg_attr(miri, ignore = "reads the source tree, which Miri's isolation forbids")]
fn no_file_uses_itself_through_others() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Each file with the files it names (the crate root and the tests left out: they name
    // everything and nothing names them).
    let mut uses: Vec<(String, Vec<String>)> = Vec::new();
    for (file, rel, here) in &layer_files(&src) {
        let name = rel.to_str().unwrap().to_string();
        let text = fs::read_to_string(file).unwrap();
        let mut named: Vec<String> = paths_named(&text, here)
            .into_iter()
            .filter_map(|(_, path)| file_of(&src, &path))
            .filter(|f| *f != name && f != "lib.rs")
            .collect();
        named.sort();
        named.dedup();
        uses.push((name, named));
    }
    // A depth-first walk that reports the first cycle it closes.
    fn walk(
        at: usize,
        uses: &[(String, Vec<String>)],
        state: &mut Vec<u8>,
        stack: &mut Vec<usize>,
    ) -> Option<Vec<String>> {
        state[at] = 1;
        stack.push(at);
        for next in &uses[at].1 {
            let Some(j) = uses.iter().position(|(f, _)| f == next) else {
                continue;
            };
            if state[j] == 1 {
                let from = stack.iter().position(|&k| k == j).unwrap();
                let mut cycle: Vec<String> =
                    stack[from..].iter().map(|&k| uses[k].0.clone()).collect();
                cycle.push(uses[j].0.clone());
                return Some(cycle);
            }
            if state[j] == 0 {
                if let Some(cycle) = walk(j, uses, state, stack) {
                    return Some(cycle);
                }
            }
        }
        stack.pop();
        state[at] = 2;
        None
    }
    let mut state = std::vec![0u8; uses.len()];
    for i in 0..uses.len() {
        if state[i] == 0 {
            if let Some(cycle) = walk(i, &uses, &mut state, &mut Vec::new()) {
                panic!("an import cycle: {}", cycle.join(" → "));
            }
        }
    }
}

/// The type names a file's code defines (`struct`, `enum`, `union`, `type`), and the self types
/// of its inherent `impl` blocks (`impl<…> Name<…> {`, not `impl Trait for Name`), each with
/// its line.
fn types_defined_and_extended(text: &str) -> (Vec<String>, Vec<(usize, String)>) {
    let mut in_string = false;
    let lines: Vec<String> = text.lines().map(|l| code_of(l, &mut in_string)).collect();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut defined = Vec::new();
    let mut extended = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        for pair in words.windows(2) {
            if matches!(pair[0], "struct" | "enum" | "union" | "type") {
                let name = ident(pair[1]);
                if !name.is_empty() {
                    defined.push(name);
                }
            }
        }
        let trimmed = line.trim_start();
        let Some(rest) = trimmed
            .strip_prefix("impl")
            .or_else(|| trimmed.strip_prefix("unsafe impl"))
        else {
            continue;
        };
        if !(rest.starts_with('<') || rest.starts_with(' ')) {
            continue;
        }
        // The header, to its `{` (it may take several lines).
        let mut header = String::from(rest);
        let mut m = n + 1;
        while !header.contains('{') && m < lines.len() {
            header.push(' ');
            header.push_str(&lines[m]);
            m += 1;
        }
        let header = header
            .split('{')
            .next()
            .unwrap()
            .split(" where")
            .next()
            .unwrap();
        // The impl's own generics skipped.
        let mut rest = header;
        if rest.starts_with('<') {
            let mut depth = 0;
            let mut end = 0;
            for (i, c) in rest.char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &rest[end..];
        }
        if rest.split_whitespace().any(|w| w == "for") {
            continue;
        }
        let path = rest.trim().split('<').next().unwrap();
        let name = ident(path.rsplit("::").next().unwrap());
        if !name.is_empty() {
            extended.push((n + 1, name));
        }
    }
    (defined, extended)
}

#[test]
#[cfg_attr(miri, ignore = "reads the source tree, which Miri's isolation forbids")]
fn each_layer_keeps_the_methods_of_its_own_types() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Per file: its layer (first folder or file of `src/`), its types and its inherent impls.
    let mut found = Vec::new();
    for (file, rel, here) in &layer_files(&src) {
        let layer = here[0].clone();
        let (defined, extended) = types_defined_and_extended(&fs::read_to_string(file).unwrap());
        found.push((rel.display().to_string(), layer, defined, extended));
    }
    let mut faults: Vec<String> = Vec::new();
    for (file, layer, _, extended) in &found {
        for (line, name) in extended {
            let homes: Vec<&String> = found
                .iter()
                .filter(|(_, _, defined, _)| defined.contains(name))
                .map(|(_, home, _, _)| home)
                .collect();
            if !homes.is_empty() && !homes.contains(&layer) {
                faults.push(format!(
                    "{file}:{line}: methods of `{name}`, a type of `{}`, written in `{layer}`",
                    homes[0]
                ));
            }
        }
    }
    assert!(
        faults.is_empty(),
        "a layer adds methods to another's type:\n{}",
        faults.join("\n")
    );
}
