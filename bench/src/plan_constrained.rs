//! `plan PROBLEM.json`: planning problems with constraints (aliases, groups, graphs with
//! streams, pins, spaces) solved by `tagalloc::plan::solve`, beside the baselines the field
//! uses, every plan checked twice: by `check_layout` and by executing its schedule on real
//! memory (`tagalloc_tests::plan_exec`).
//!
//! Baselines, each checked as tagalloc's plan is:
//! - **TFLite**: TensorFlow Lite's arena planner with in-place tensors: in-place and view
//!   chains merged into one tensor (`Rectangles`), then greedy by size (interval problems);
//! - **SOMAS**: MindSpore SOMAS's solver ensemble: two orders (larger first, ties by lower or
//!   by higher index) × best or smallest-offset fit × one footprint or many, the smallest kept
//!   (`tagalloc::plan::arrange`);
//! - **no in-place**: tagalloc's own planner on the problem without aliases (every view and
//!   in-place output its own buffer), with its own lower bound.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tagalloc::plan::{
    self, arrange, check_layout, greedy_by_size, Fit, Layout, Lifetimes, Method, Monitor, Objects,
    Rectangles, SolveOptions, Strategy, StrategyOrder,
};

use crate::plan::{ratio, write_plan_files};
use crate::plan_file::Loaded;
use crate::report::{self, Table};

/// How to run.
pub struct Options {
    /// Time the exact search may take per problem.
    pub budget: Duration,
    /// Where the plans go (see `plan::Options::out`).
    pub out: Option<PathBuf>,
    /// Topological orders the execution checker runs a graph problem in.
    pub orders: usize,
}

struct Deadline(Instant);

impl Monitor for Deadline {
    fn stop(&mut self) -> bool {
        Instant::now() >= self.0
    }
}

/// One problem's figures.
struct Row {
    file: String,
    kind: String,
    buffers: usize,
    bound: u64,
    arena: u64,
    optimal: bool,
    method: String,
    seconds: f64,
    tflite: Option<u64>,
    somas: u64,
    plain: u64,
    plain_bound: u64,
    executed: String,
    layout: Layout,
}

fn checked(p: &Loaded, layout: &Layout, who: &str) -> Result<u64, String> {
    check_layout(&p.problem, layout)
        .map_err(|e| format!("{}: the {who} plan is invalid: {}", p.name, p.describe(e)))?;
    Ok(layout.total())
}

fn method(m: Method) -> String {
    match m {
        Method::Search { proven: true } => "search (rectangles proven)".into(),
        Method::Search { proven: false } => "search".into(),
        Method::Placement(s) => format!("{:?}, {:?} fit", s.order, s.fit).to_lowercase(),
        Method::Improved(s) => {
            format!("local search from {:?}, {:?} fit", s.order, s.fit).to_lowercase()
        }
    }
}

/// SOMAS's ensemble: the smallest of its eight strategies.
fn somas(p: &Loaded) -> Result<u64, String> {
    let mut best = u64::MAX;
    for order in [StrategyOrder::Size, StrategyOrder::SizeLastIndex] {
        for fit in [Fit::Best, Fit::First] {
            for objects in [Objects::Single, Objects::Many] {
                let layout = arrange(
                    &p.problem,
                    Strategy {
                        order,
                        fit,
                        objects,
                    },
                )
                .map_err(|e| format!("{}: SOMAS: {}", p.name, p.describe(e)))?;
                best = best.min(checked(p, &layout, "SOMAS")?);
            }
        }
    }
    Ok(best)
}

/// The problem without its aliases: each buffer its own memory.
fn without_aliases(p: &plan::Problem) -> plan::Problem {
    let mut q = p.clone();
    for it in &mut q.items {
        it.alias = None;
    }
    q
}

fn solve(p: &Loaded, opts: &Options) -> Result<Row, String> {
    let start = Instant::now();
    let mut deadline = Deadline(start + opts.budget);
    let solved = plan::solve(&p.problem, &SolveOptions::default(), &mut deadline)
        .map_err(|e| format!("{}: {}", p.name, p.describe(e)))?;
    let seconds = start.elapsed().as_secs_f64();
    let arena = checked(p, &solved.layout, "tagalloc")?;
    let executed = tagalloc_tests::plan_exec::execute(&p.problem, &solved.layout, opts.orders)
        .map_err(|e| format!("{}: the plan failed when executed: {e}", p.name))?;
    let tflite = match Rectangles::of(&p.problem).map_err(|e| p.describe(e))? {
        Some(rects) => {
            let merged = greedy_by_size(&rects.buffers).map_err(|e| e.to_string())?;
            Some(checked(
                p,
                &rects.layout(&p.problem, &merged.offsets),
                "TFLite",
            )?)
        }
        None => None,
    };
    let plain_problem = without_aliases(&p.problem);
    let mut deadline = Deadline(Instant::now() + opts.budget);
    let plain = plan::solve(&plain_problem, &SolveOptions::default(), &mut deadline)
        .map_err(|e| format!("{}: without aliases: {e}", p.name))?;
    check_layout(&plain_problem, &plain.layout)
        .map_err(|e| format!("{}: the plan without aliases is invalid: {e}", p.name))?;
    let kind = match &p.problem.lifetimes {
        Lifetimes::Intervals(_) => "intervals".to_string(),
        Lifetimes::Graph(g) => {
            let mut s = g.streams.clone();
            s.sort_unstable();
            s.dedup();
            format!("graph, {}", report::plural(s.len(), "stream"))
        }
    };
    Ok(Row {
        file: p.file.clone(),
        kind,
        buffers: p.ids.len(),
        bound: solved.lower_bound,
        arena,
        optimal: solved.optimal,
        method: method(solved.method),
        seconds,
        tflite,
        somas: somas(p)?,
        plain: plain.layout.total(),
        plain_bound: plain.lower_bound,
        executed: format!(
            "{} ({})",
            report::plural(executed.orders, "order"),
            report::bytes(executed.bytes_checked)
        ),
        layout: solved.layout,
    })
}

/// Writes each plan as CSV: `id,offset` (and `space` with several spaces), then `# arena`
/// (see [`write_plan_files`]).
fn write_plans(problems: &[Loaded], rows: &[Row], out: &Path) -> Result<Vec<PathBuf>, String> {
    let names: Vec<&str> = problems.iter().map(|p| p.file.as_str()).collect();
    write_plan_files(&names, out, |k| {
        let (p, r) = (&problems[k], &rows[k]);
        let spaces = p.spaces.len() > 1;
        let mut text = String::from(if spaces {
            "id,space,offset\n"
        } else {
            "id,offset\n"
        });
        for (b, id) in p.ids.iter().enumerate() {
            if spaces {
                let s = &p.spaces[r.layout.spaces[b] as usize];
                text.push_str(&format!("{id},{s},{}\n", r.layout.offsets[b]));
            } else {
                text.push_str(&format!("{id},{}\n", r.layout.offsets[b]));
            }
        }
        if spaces {
            for (s, a) in p.spaces.iter().zip(&r.layout.arenas) {
                text.push_str(&format!("# arena {s} {a}\n"));
            }
        } else {
            text.push_str(&format!("# arena {}\n", r.layout.arenas[0]));
        }
        text
    })
}

/// Solves every problem; returns the markdown section and the JSON array.
pub fn run(
    problems: &[Loaded],
    opts: &Options,
    bar: &ProgressBar,
) -> Result<(String, Value), String> {
    let mut rows = Vec::new();
    for p in problems {
        bar.set_message(format!("plan {}", p.file));
        rows.push(solve(p, opts)?);
        bar.inc(1);
    }
    let mut md = format!(
        "## Static planning with constraints\n\nEach problem's total arena (all spaces) by \
         tagalloc's planner and by the baselines, beside the lower bound valid for its kind \
         (the most bytes live at one moment of one sequential order, aliases counted once: \
         `tagalloc::plan::problem_lower_bound`). ÷ columns: arena over that bound, lower is \
         better, 1.0000 is optimal. TFLite: in-place chains merged, then greedy by size \
         (interval problems only). SOMAS: the smallest of its 8 strategies. No in-place: \
         tagalloc's planner with every alias its own buffer, and that problem's bound. \
         Every plan passed `check_layout`; tagalloc's also ran on real memory \
         (executed: topological orders, bytes verified). Search budget {:.1} s a problem; \
         time: tagalloc's solve alone, reading the file excluded.\n\n",
        opts.budget.as_secs_f64()
    );
    let mut t = Table::new(&[
        ("problem", false),
        ("lifetimes", false),
        ("buffers", true),
        ("lower bound", true),
        ("tagalloc", true),
        ("÷ bound", true),
        ("proven optimal", false),
        ("by", false),
        ("TFLite", true),
        ("SOMAS", true),
        ("no in-place", true),
        ("its bound", true),
        ("tagalloc ÷ no in-place (lower is better)", true),
        ("one stream", true),
        ("time (s)", true),
        ("executed", false),
    ]);
    for r in &rows {
        // The same model planned on one stream, when it is in the run (NAME.json beside
        // NAME.sK.json).
        let base = r.file.rsplit_once(".s").map(|(b, _)| b);
        let one = rows
            .iter()
            .find(|o| Some(o.file.as_str()) == base && o.kind == "intervals")
            .map_or("—".into(), |o| report::count(o.arena));
        t.row(vec![
            r.file.clone(),
            r.kind.clone(),
            report::count(r.buffers as u64),
            report::count(r.bound),
            report::count(r.arena),
            ratio(r.arena, r.bound),
            if r.optimal { "yes" } else { "no" }.into(),
            r.method.clone(),
            r.tflite.map_or("—".into(), report::count),
            report::count(r.somas),
            report::count(r.plain),
            report::count(r.plain_bound),
            ratio(r.arena, r.plain),
            one,
            format!("{:.3}", r.seconds),
            r.executed.clone(),
        ]);
    }
    md.push_str(&t.render());
    if let Some(out) = &opts.out {
        let written = write_plans(problems, &rows, out)?;
        md.push_str(&format!(
            "\nPlans: {}.\n",
            written
                .iter()
                .map(|p| format!("`{}`", p.display()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let json = rows
        .iter()
        .map(|r| {
            json!({
                "problem": r.file,
                "lifetimes": r.kind,
                "buffers": r.buffers,
                "lower_bound": r.bound,
                "arena": r.arena,
                "optimal": r.optimal,
                "method": r.method,
                "seconds": r.seconds,
                "tflite": r.tflite,
                "somas": r.somas,
                "no_in_place": r.plain,
                "no_in_place_bound": r.plain_bound,
            })
        })
        .collect();
    Ok((md, Value::Array(json)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan_file;

    #[test]
    fn a_problem_with_spaces_is_planned_checked_and_written_with_its_spaces() {
        let text = r#"{
            "format": "tagalloc-plan-problem/1",
            "spaces": [{"name": "sram", "capacity": 96}, {"name": "dram"}],
            "buffers": [
                {"id": "a", "size": 64, "align": 32, "lower": 0, "upper": 3},
                {"id": "b", "size": 64, "lower": 1, "upper": 2},
                {"id": "v", "size": 32, "lower": 1, "upper": 3, "alias": {"of": "a", "offset": 32, "view": true}},
                {"id": "c", "size": 16, "lower": 2, "upper": 4, "spaces": ["dram"]},
                {"id": "d", "size": 8, "lower": 0, "upper": 4, "offset": 88}
            ],
            "groups": [{"members": ["b", "c"], "gap": 8}]
        }"#;
        let mut p = plan_file::parse("spaces", text).unwrap();
        p.file = "spaces".into();
        let opts = Options {
            budget: Duration::from_millis(200),
            out: Some(
                std::env::temp_dir().join(format!("tagalloc-spaces-{}.csv", std::process::id())),
            ),
            orders: 2,
        };
        let (md, json) = run(std::slice::from_ref(&p), &opts, &ProgressBar::hidden()).unwrap();
        assert!(md.contains("| spaces | intervals |"), "{md}");
        let out = opts.out.unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("id,space,offset"));
        let rows: Vec<&str> = lines.collect();
        // The group went to dram (c may only go there), d stayed pinned in sram.
        assert!(rows.iter().any(|r| r.starts_with("b,dram,")), "{text}");
        assert!(rows.contains(&"d,sram,88"), "{text}");
        assert!(
            rows.iter().any(|r| r.starts_with("# arena sram ")),
            "{text}"
        );
        assert_eq!(json[0]["buffers"], 5);
    }
}
