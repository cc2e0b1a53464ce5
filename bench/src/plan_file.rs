//! Planning problems with constraints, read from the JSON format of `docs/plan-format.md`
//! (or from a CSV with MiniMalloc's `offset` column), and their refusals named by id.
//!
//! The document is read with serde into types that deny unknown keys, so a misspelt key is
//! an error naming it, never a silently different problem; names are then resolved to
//! indices, and `tagalloc::plan`'s own checks run, their indices mapped back to ids.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tagalloc::plan::{self, Alias, Graph, Group, Item, Lifetimes, ProblemError, Space, Uses};

/// The format's name and version, the document's `format`.
pub const FORMAT_NAME: &str = "tagalloc-plan-problem/1";

/// A problem read from a file, with the names its refusals and plans use.
pub struct Loaded {
    /// The problem's name (its `name`, else the file's stem).
    pub name: String,
    /// The file's stem (`NAME` of `NAME.json`): what reports and plan files are named by.
    pub file: String,
    /// The problem, indices for names.
    pub problem: plan::Problem,
    /// Each buffer's id.
    pub ids: Vec<String>,
    /// Each node's id (graph problems).
    pub nodes: Vec<String>,
    /// Each space's name.
    pub spaces: Vec<String>,
    /// Reading and checking it.
    pub loaded_in: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    format: String,
    name: Option<String>,
    spaces: Option<Vec<DocSpace>>,
    nodes: Option<Vec<DocNode>>,
    edges: Option<Vec<(String, String)>>,
    buffers: Vec<DocBuffer>,
    groups: Option<Vec<DocGroup>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocSpace {
    name: String,
    capacity: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocNode {
    id: String,
    #[serde(default)]
    stream: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocBuffer {
    id: String,
    size: u64,
    align: Option<u64>,
    lower: Option<u64>,
    upper: Option<u64>,
    // `null` and absent both mean a graph input.
    #[serde(default)]
    producer: Option<String>,
    consumers: Option<Vec<String>>,
    output: Option<bool>,
    offset: Option<u64>,
    spaces: Option<Vec<String>>,
    alias: Option<DocAlias>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocAlias {
    of: String,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    view: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocGroup {
    members: Vec<String>,
    #[serde(default)]
    gap: u64,
}

/// Reads and checks one JSON problem file. Errors name the file and the buffer, node or
/// group at fault.
pub fn load(path: &Path) -> Result<Loaded, String> {
    let start = Instant::now();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("problem")
        .to_string();
    let mut loaded = parse(&stem, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    loaded.file = stem;
    loaded.loaded_in = start.elapsed();
    Ok(loaded)
}

/// Parses a JSON problem (`stem` names it when it has no `name`), resolves every name, and
/// runs the planner's checks (`tagalloc::plan::problem_lower_bound`), refusals named by id.
pub fn parse(stem: &str, text: &str) -> Result<Loaded, String> {
    let doc: Doc = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if doc.format != FORMAT_NAME {
        return Err(format!(
            "format `{}` is not `{FORMAT_NAME}` (see docs/plan-format.md)",
            doc.format
        ));
    }
    let spaces: Vec<String> = match &doc.spaces {
        Some(s) => s.iter().map(|s| s.name.clone()).collect(),
        None => vec!["main".into()],
    };
    let space_of = index(&spaces, "space")?;
    let ids: Vec<String> = doc.buffers.iter().map(|b| b.id.clone()).collect();
    let buffer_of = index(&ids, "buffer")?;
    let nodes: Vec<String> = doc
        .nodes
        .as_ref()
        .map_or_else(Vec::new, |n| n.iter().map(|n| n.id.clone()).collect());
    let node_of = index(&nodes, "node")?;
    let graph = doc.nodes.is_some();
    if !graph && doc.edges.is_some() {
        return Err("`edges` given without `nodes`".into());
    }
    let mut items = Vec::with_capacity(ids.len());
    let mut intervals = Vec::new();
    let mut uses = Vec::new();
    for b in &doc.buffers {
        let at = |what: &str| format!("buffer `{}`: {what}", b.id);
        if graph {
            if b.lower.is_some() || b.upper.is_some() {
                return Err(at(
                    "`lower`/`upper` in a graph problem (give `producer` and `consumers`)",
                ));
            }
            let producer = match &b.producer {
                Some(p) => Some(
                    *node_of
                        .get(p.as_str())
                        .ok_or_else(|| at(&format!("unknown producer node `{p}`")))?,
                ),
                None => None,
            };
            let mut consumers = Vec::new();
            for c in b.consumers.iter().flatten() {
                let c = *node_of
                    .get(c.as_str())
                    .ok_or_else(|| at(&format!("unknown consumer node `{c}`")))?;
                if !consumers.contains(&c) {
                    consumers.push(c);
                }
            }
            uses.push(Uses {
                producer,
                consumers,
                output: b.output.unwrap_or(false),
            });
        } else {
            if b.producer.is_some() || b.consumers.is_some() || b.output.is_some() {
                return Err(at(
                    "`producer`/`consumers`/`output` without `nodes` (give `lower` and `upper`)",
                ));
            }
            let (Some(lo), Some(hi)) = (b.lower, b.upper) else {
                return Err(at("needs `lower` and `upper`"));
            };
            if lo >= hi {
                return Err(at(&format!("empty lifetime [{lo}, {hi})")));
            }
            intervals.push((lo, hi));
        }
        let align = b.align.unwrap_or(1);
        if !align.is_power_of_two() {
            return Err(at(&format!("align {align} is not a power of two")));
        }
        let allowed = match &b.spaces {
            Some(list) => {
                let mut v = Vec::new();
                for s in list {
                    v.push(
                        *space_of
                            .get(s.as_str())
                            .ok_or_else(|| at(&format!("unknown space `{s}`")))?
                            as u32,
                    );
                }
                Some(v)
            }
            None => None,
        };
        let alias = match &b.alias {
            Some(a) => Some(Alias {
                of: *buffer_of
                    .get(a.of.as_str())
                    .ok_or_else(|| at(&format!("alias of unknown buffer `{}`", a.of)))?,
                offset: a.offset,
                view: a.view,
            }),
            None => None,
        };
        items.push(Item {
            size: b.size,
            align,
            pinned: b.offset,
            spaces: allowed,
            alias,
        });
    }
    let mut edges = Vec::new();
    for (k, (a, b)) in doc.edges.iter().flatten().enumerate() {
        let node = |x: &String| {
            node_of
                .get(x.as_str())
                .copied()
                .ok_or_else(|| format!("edge {k}: unknown node `{x}`"))
        };
        edges.push((node(a)?, node(b)?));
    }
    let mut groups = Vec::new();
    for (g, group) in doc.groups.iter().flatten().enumerate() {
        let mut members = Vec::new();
        for m in &group.members {
            members.push(
                *buffer_of
                    .get(m.as_str())
                    .ok_or_else(|| format!("group {g}: unknown member `{m}`"))?,
            );
        }
        groups.push(Group {
            members,
            gap: group.gap,
        });
    }
    let lifetimes = if graph {
        Lifetimes::Graph(Graph {
            streams: doc.nodes.iter().flatten().map(|n| n.stream).collect(),
            edges,
            uses,
        })
    } else {
        Lifetimes::Intervals(intervals)
    };
    let problem = plan::Problem {
        items,
        lifetimes,
        groups,
        spaces: match &doc.spaces {
            Some(s) => s
                .iter()
                .map(|s| Space {
                    capacity: s.capacity,
                })
                .collect(),
            None => vec![Space::default()],
        },
    };
    let loaded = Loaded {
        name: doc.name.unwrap_or_else(|| stem.to_string()),
        file: stem.to_string(),
        problem,
        ids,
        nodes,
        spaces,
        loaded_in: Duration::ZERO,
    };
    plan::problem_lower_bound(&loaded.problem).map_err(|e| loaded.describe(e))?;
    Ok(loaded)
}

/// Each name's index; a name given twice is refused.
fn index<'a>(names: &'a [String], what: &str) -> Result<HashMap<&'a str, usize>, String> {
    let mut map = HashMap::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() {
            return Err(format!("{what} {i}: empty id"));
        }
        if map.insert(n.as_str(), i).is_some() {
            return Err(format!("{what} `{n}` named twice"));
        }
    }
    Ok(map)
}

impl Loaded {
    /// A refusal or a broken layout, told with ids instead of indices.
    pub fn describe(&self, e: ProblemError) -> String {
        let b = |i: usize| format!("`{}`", self.ids.get(i).map_or("?", String::as_str));
        let node = |i: usize| format!("`{}`", self.nodes.get(i).map_or("?", String::as_str));
        use ProblemError::*;
        match e {
            EmptyLifetime { buffer } => format!("buffer {}: empty lifetime", b(buffer)),
            BadAlign { buffer } => format!("buffer {}: alignment not a power of two", b(buffer)),
            OutOfRange { buffer } => format!("buffer {}: names something that does not exist", b(buffer)),
            EdgeOutOfRange { edge } => format!("edge {edge}: names a node that does not exist"),
            GraphCycle { node: n } => format!("node {}: on a dependency cycle (data edges, `edges` and stream order)", node(n)),
            AliasCycle { buffer } => format!("buffer {}: on an alias cycle", b(buffer)),
            AliasTooLarge { buffer } => format!("buffer {}: alias ends past the end of its target", b(buffer)),
            AliasMisaligned { buffer } => format!("buffer {}: alias offset (from its tree's root) not a multiple of its align", b(buffer)),
            AliasPlacedApart { buffer } => format!("buffer {}: an alias cannot have its own `offset` or `spaces`", b(buffer)),
            AliasUnsafe { reader, writer } => format!(
                "buffer {} overwrites the bytes of buffer {} while they are still read (or the two writes are not ordered)",
                b(writer),
                b(reader)
            ),
            PinnedMisaligned { buffer } => format!("buffer {}: pinned offset breaks its alignment (or its group's)", b(buffer)),
            PinnedOverlap { first, second } => format!("buffers {} and {}: pinned where they share bytes while live", b(first), b(second)),
            InTwoGroups { buffer } => format!("buffer {}: in two contiguous groups, or twice in one", b(buffer)),
            FixedTwice { buffer } => format!(
                "buffer {}: its offset is fixed twice (an alias of another group member, its alias tree in another group, or pins that disagree)",
                b(buffer)
            ),
            GroupOverlap { first, second } => format!(
                "buffers {} and {}: their contiguous group lays them out sharing bytes while live",
                b(first),
                b(second)
            ),
            NoCommonSpace { buffer } => format!("buffer {}: no space is allowed to all of its alias tree and group", b(buffer)),
            NoRoom { buffer } => format!("buffer {}: no allowed space has room for it", b(buffer)),
            WrongSpace { buffer } => format!("buffer {}: placed in a space it may not use", b(buffer)),
            Misplaced { buffer } => format!("buffer {}: offset breaks its alignment, pin, alias or group", b(buffer)),
            Overlap { first, second } => format!("buffers {} and {} conflict and share bytes", b(first), b(second)),
            ArenaMismatch { space } => format!(
                "space `{}`: arena is not the end of its highest buffer, or passes its capacity",
                self.spaces.get(space).map_or("?", String::as_str)
            ),
            other => other.to_string(),
        }
    }
}

/// The interval problem of a CSV with an `offset` column: pinned buffers where the cell is
/// not empty. `rows` are `(size, start, end, align, offset)`.
pub fn from_csv(
    name: &str,
    ids: Vec<String>,
    rows: &[(u64, u64, u64, u64, Option<u64>)],
) -> Result<Loaded, String> {
    let problem = plan::Problem {
        items: rows
            .iter()
            .map(|&(size, _, _, align, offset)| Item {
                pinned: offset,
                ..Item::new(size).with_align(align)
            })
            .collect(),
        lifetimes: Lifetimes::Intervals(rows.iter().map(|&(_, s, e, _, _)| (s, e)).collect()),
        ..plan::Problem::default()
    };
    let loaded = Loaded {
        name: name.to_string(),
        file: name.to_string(),
        problem,
        ids,
        nodes: Vec::new(),
        spaces: vec!["main".into()],
        loaded_in: Duration::ZERO,
    };
    plan::problem_lower_bound(&loaded.problem).map_err(|e| loaded.describe(e))?;
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(buffers: &str, extra: &str) -> String {
        format!(r#"{{"format": "{FORMAT_NAME}", "buffers": [{buffers}]{extra}}}"#)
    }

    #[test]
    fn a_misspelt_key_is_refused_by_name() {
        let e = parse(
            "p",
            &doc(
                r#"{"id": "a", "size": 8, "alignmnet": 64, "lower": 0, "upper": 1}"#,
                "",
            ),
        )
        .err()
        .unwrap();
        assert!(e.contains("alignmnet"), "{e}");
        let e = parse(
            "p",
            &doc(
                r#"{"id": "a", "size": 8, "lower": 0, "upper": 1}"#,
                r#", "spacess": []"#,
            ),
        )
        .err()
        .unwrap();
        assert!(e.contains("spacess"), "{e}");
        let e = parse("p", &doc(r#"{"id": "a", "size": 8, "lower": 0, "upper": 1, "alias": {"of": "a", "ofset": 0}}"#, "")).err().unwrap();
        assert!(e.contains("ofset"), "{e}");
    }

    #[test]
    fn refusals_name_the_buffer_node_or_group() {
        let cases = [
            (
                doc(
                    r#"{"id": "a", "size": 8, "lower": 0, "upper": 2, "alias": {"of": "b"}}, {"id": "b", "size": 8, "lower": 0, "upper": 2, "alias": {"of": "a"}}"#,
                    "",
                ),
                "alias cycle",
            ),
            (
                doc(
                    r#"{"id": "a", "size": 8, "lower": 0, "upper": 2}, {"id": "big", "size": 16, "lower": 1, "upper": 2, "alias": {"of": "a", "view": true}}"#,
                    "",
                ),
                "`big`: alias ends past",
            ),
            (
                doc(
                    r#"{"id": "a", "size": 8, "align": 8, "lower": 0, "upper": 2, "offset": 4}"#,
                    "",
                ),
                "`a`: pinned offset breaks",
            ),
            (
                doc(
                    r#"{"id": "a", "size": 8, "lower": 0, "upper": 2}, {"id": "b", "size": 8, "lower": 0, "upper": 2}"#,
                    r#", "groups": [{"members": ["a", "b"]}, {"members": ["b"]}]"#,
                ),
                "`b`: in two contiguous groups",
            ),
            (
                doc(
                    r#"{"id": "a", "size": 8, "lower": 0, "upper": 3}, {"id": "y", "size": 8, "lower": 1, "upper": 4, "alias": {"of": "a"}}"#,
                    "",
                ),
                "`y` overwrites the bytes of buffer `a`",
            ),
            (
                doc(
                    r#"{"id": "a", "size": 8, "producer": "n1", "consumers": ["n0"]}"#,
                    r#", "nodes": [{"id": "n0"}, {"id": "n1", "stream": 0}]"#,
                ),
                "node `n0`: on a dependency cycle",
            ),
            (
                doc(
                    r#"{"id": "a", "size": 8, "lower": 0, "upper": 2}, {"id": "a", "size": 8, "lower": 0, "upper": 2}"#,
                    "",
                ),
                "buffer `a` named twice",
            ),
            (
                doc(r#"{"id": "a", "size": 8, "lower": 2, "upper": 2}"#, ""),
                "`a`: empty lifetime",
            ),
            (
                doc(
                    r#"{"id": "a", "size": 8, "lower": 0, "upper": 2, "spaces": ["fast"]}"#,
                    "",
                ),
                "unknown space `fast`",
            ),
            (
                doc(
                    r#"{"id": "a", "size": 8, "lower": 0, "upper": 2}"#,
                    r#", "nodes": []"#,
                ),
                "`a`: `lower`/`upper` in a graph problem",
            ),
        ];
        for (text, expected) in cases {
            let e = parse("p", &text)
                .err()
                .unwrap_or_else(|| panic!("accepted: {text}"));
            assert!(e.contains(expected), "{e}\n expected {expected}");
        }
    }

    #[test]
    fn a_graph_problem_reads_into_the_planner_types() {
        let text = doc(
            r#"{"id": "x", "size": 64, "consumers": ["conv"]},
               {"id": "y", "size": 256, "producer": "conv", "consumers": ["relu"]},
               {"id": "z", "size": 256, "producer": "relu", "consumers": [], "output": true, "alias": {"of": "y"}}"#,
            r#", "nodes": [{"id": "conv"}, {"id": "relu", "stream": 0}], "edges": [["conv", "relu"]]"#,
        );
        let l = parse("p", &text).unwrap();
        let Lifetimes::Graph(g) = &l.problem.lifetimes else {
            panic!("not a graph")
        };
        assert_eq!(
            g.uses[1],
            Uses {
                producer: Some(0),
                consumers: vec![1],
                output: false
            }
        );
        assert_eq!(g.edges, vec![(0, 1)]);
        assert_eq!(
            l.problem.items[2].alias,
            Some(Alias {
                of: 1,
                offset: 0,
                view: false
            })
        );
        let s = plan::solve(&l.problem, &plan::SolveOptions::default(), &mut || false).unwrap();
        plan::check_layout(&l.problem, &s.layout).unwrap();
        assert_eq!(s.layout.arenas, vec![64 + 256]);
    }
}
