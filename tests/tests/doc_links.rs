//! The documents point at what is there: every relative link of the READMEs and of `docs/*.md`
//! names a file of the repository, every `#anchor` into a markdown file names one of its
//! headings (as GitHub spells a heading's anchor), and the design document is cited by its
//! place in the repository, `docs/design.md`, never under a name no file has.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// The READMEs and every markdown file under `docs/`.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs: Vec<PathBuf> = [
        "README.md",
        "backend-cuda/README.md",
        "backend-cuda/python/README.md",
        "backend-host/README.md",
        "bench/README.md",
        "bench/data/plans/README.md",
        "fuzz/README.md",
        "lab/README.md",
        "tests/data/README.md",
        "tools/onnx2plan/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let mut under: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    under.sort();
    docs.extend(under);
    docs
}

/// The targets of a document's inline links, `[text](target)`, outside code spans and blocks.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans are dropped first: `a[i](j)` in code is not a link.
        let mut plain = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            out.push((n + 1, target.to_string()));
            rest = &rest[end..];
        }
    }
    out
}

/// A heading's anchor as GitHub makes it: lower case, letters, digits, `-` and `_` kept,
/// spaces made `-`, everything else dropped; a repeated anchor gets `-1`, `-2`, ….
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let mut slug = String::new();
        for c in title.chars().flat_map(char::to_lowercase) {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                slug.push(c);
            } else if c == ' ' {
                slug.push('-');
            }
        }
        let mut name = slug.clone();
        let mut k = 1;
        while seen.contains(&name) {
            name = format!("{slug}-{k}");
            k += 1;
        }
        seen.insert(name);
    }
    seen
}

#[test]
fn every_relative_link_of_the_documents_names_a_file_and_a_heading() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = fs::read_to_string(&doc).expect("a document");
        let dir = doc.parent().expect("a folder");
        for (line, target) in link_targets(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                doc.clone()
            } else {
                dir.join(path)
            };
            let place = format!("{}:{line}: {target}", doc.display());
            if !file.exists() {
                broken.push(format!("{place} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor {
                if file.extension().is_some_and(|e| e == "md") {
                    let target_text = fs::read_to_string(&file).expect("a linked document");
                    if !anchors(&target_text).contains(anchor) {
                        broken.push(format!("{place} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every text file of the repository outside build outputs and hidden folders.
fn repository_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a folder") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') && name != ".ci" || name == "target" || name == "__pycache__" {
            continue;
        }
        if path.is_dir() {
            repository_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn the_design_document_is_cited_where_it_is() {
    let root = root();
    assert!(
        root.join("docs/design.md").is_file(),
        "docs/design.md is missing"
    );
    // Spelt in two pieces so that this file does not cite the old name itself.
    let old = concat!("DESIGN", ".md");
    let mut files = Vec::new();
    repository_files(&root, &mut files);
    let mut cites = Vec::new();
    for file in files {
        let Ok(text) = fs::read_to_string(&file) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            if line.contains(old) {
                cites.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        cites.is_empty(),
        "cite docs/design.md instead of {old}:\n{}",
        cites.join("\n")
    );
}
