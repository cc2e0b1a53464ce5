//! `plan [CSV...]`: static memory planning problems solved by `tagalloc::plan`.
//!
//! A problem is a CSV file in MiniMalloc's format (`id,lower,upper,size`, one buffer per row,
//! live over `[lower, upper)`; an optional `alignment` column), as in `../shared/plans/`
//! (see its `FORMAT.md`). For each, the tool prints the lower bound (most bytes live at one
//! moment), the arenas of the three greedy heuristics and of the exact search with its time
//! budget, whether the search proved its plan optimal, when it found that plan, and how long
//! it ran in all. Every plan is checked with `tagalloc::plan::validate` before it is reported.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tagalloc::plan::{self, Buffer, Monitor, Plan, SearchOptions};

use crate::report::{self, Table};

/// One planning problem read from a CSV file.
pub struct Problem {
    /// The file name without `.csv`.
    pub name: String,
    /// The buffers, in file order; a buffer's `id` is its row number (0-based), since the
    /// file's ids need not be numbers.
    pub buffers: Vec<Buffer>,
}

/// The shared problem collection, `../shared/plans` beside the repository, if it exists.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/plans");
    dir.is_dir().then(|| fs::canonicalize(&dir).unwrap_or(dir))
}

/// The small problems bundled with the tool (`bench/data/plans/`), for smoke runs and for
/// machines without the shared collection.
pub fn bundled_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/plans")
}

/// The `*.csv` files directly in `dir`, sorted by name.
pub fn csv_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        fs::read_dir(dir).map_err(|e| format!("cannot list problems in {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list problems in {}: {e}", dir.display()))?
            .path();
        if path.extension().is_some_and(|x| x == "csv") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads one problem. Every malformed line is an error naming the file and the line.
pub fn load(path: &Path) -> Result<Problem, String> {
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("problem")
        .to_string();
    parse(&name, &text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses a problem from CSV text.
pub fn parse(name: &str, text: &str) -> Result<Problem, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or("empty file: no header line")?;
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    let find = |want: &[&str]| columns.iter().position(|c| want.contains(c));
    let (lower, upper, size) = match (
        find(&["lower", "start"]),
        find(&["upper", "end"]),
        find(&["size"]),
    ) {
        (Some(l), Some(u), Some(s)) => (l, u, s),
        _ => {
            return Err(format!(
                "line 1: header `{header}` lacks the columns lower, upper and size"
            ))
        }
    };
    let align = find(&["alignment", "align"]);
    let mut buffers = Vec::new();
    for (i, line) in lines {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != columns.len() {
            return Err(format!(
                "line {}: {} fields where the header has {}",
                i + 1,
                cells.len(),
                columns.len()
            ));
        }
        let num = |col: usize, what: &str| -> Result<u64, String> {
            cells[col]
                .parse::<u64>()
                .map_err(|_| format!("line {}: {what} `{}` is not a number", i + 1, cells[col]))
        };
        let (start, end, bytes) = (
            num(lower, "lower")?,
            num(upper, "upper")?,
            num(size, "size")?,
        );
        if start >= end {
            return Err(format!("line {}: empty lifetime [{start}, {end})", i + 1));
        }
        let mut b = Buffer::new(buffers.len() as u64, bytes, start, end);
        if let Some(col) = align {
            let a = num(col, "alignment")?.max(1);
            if !a.is_power_of_two() {
                return Err(format!(
                    "line {}: alignment {a} is not a power of two",
                    i + 1
                ));
            }
            b = b.with_align(a);
        }
        buffers.push(b);
    }
    // The planner's own input checks (total size within u64 and the like).
    plan::lower_bound(&buffers).map_err(|e| e.to_string())?;
    Ok(Problem {
        name: name.to_string(),
        buffers,
    })
}

/// How to run.
pub struct Options {
    /// Time the exact search may take per problem.
    pub budget: Duration,
}

/// Stops the search at a deadline and notes when each better plan turned up, and when the
/// arena first fit `target`.
struct Watch {
    start: Instant,
    deadline: Instant,
    best_at: Duration,
    target: Option<u64>,
    target_at: Option<Duration>,
}

impl Monitor for Watch {
    fn stop(&mut self) -> bool {
        Instant::now() >= self.deadline
    }

    fn improved(&mut self, arena: u64, _lower_bound: u64) {
        self.best_at = self.start.elapsed();
        if self.target_at.is_none() && self.target.is_some_and(|t| arena <= t) {
            self.target_at = Some(self.best_at);
        }
    }
}

/// One problem's figures.
struct Row {
    name: String,
    buffers: usize,
    lower_bound: u64,
    proven_bound: u64,
    by_size: u64,
    by_breadth: u64,
    by_peak: u64,
    arena: u64,
    optimal: bool,
    best_at: f64,
    seconds: f64,
    nodes: u64,
    target: Option<(u64, Option<f64>)>,
}

fn checked(p: &Problem, plan: &Plan, solver: &str) -> Result<u64, String> {
    plan::validate(&p.buffers, plan)
        .map_err(|e| format!("{}: the {solver} plan is invalid: {e}", p.name))?;
    Ok(plan.arena)
}

fn solve(p: &Problem, opts: &Options) -> Result<Row, String> {
    let err = |e: plan::PlanError| format!("{}: {e}", p.name);
    let lower_bound = plan::lower_bound(&p.buffers).map_err(err)?;
    let by_size = checked(
        p,
        &plan::greedy_by_size(&p.buffers).map_err(err)?,
        "greedy-by-size",
    )?;
    let by_breadth = checked(
        p,
        &plan::greedy_by_breadth(&p.buffers).map_err(err)?,
        "greedy-by-breadth",
    )?;
    let by_peak = checked(
        p,
        &plan::greedy_by_peak(&p.buffers).map_err(err)?,
        "greedy-by-peak",
    )?;
    // MiniMalloc's benchmark files are named NAME.CAPACITY.csv: the capacity it was asked to
    // fit. Only reported (when the arena first fit it); the search is never told.
    let target = p
        .name
        .rsplit_once('.')
        .and_then(|(_, c)| c.parse::<u64>().ok());
    let start = Instant::now();
    let mut watch = Watch {
        start,
        deadline: start + opts.budget,
        best_at: Duration::ZERO,
        target,
        target_at: None,
    };
    let found = plan::search(&p.buffers, &SearchOptions::default(), &mut watch).map_err(err)?;
    let seconds = start.elapsed().as_secs_f64();
    let arena = checked(p, &found.plan, "search")?;
    if found.lower_bound < lower_bound || found.optimal != (arena == found.lower_bound) {
        return Err(format!(
            "{}: inconsistent result (bound {} < {lower_bound}, or optimal flag wrong)",
            p.name, found.lower_bound
        ));
    }
    Ok(Row {
        name: p.name.clone(),
        buffers: p.buffers.len(),
        lower_bound,
        proven_bound: found.lower_bound,
        by_size,
        by_breadth,
        by_peak,
        arena,
        optimal: found.optimal,
        best_at: watch.best_at.as_secs_f64(),
        seconds,
        nodes: found.nodes,
        target: target.map(|t| (t, watch.target_at.map(|d| d.as_secs_f64()))),
    })
}

/// Solves every problem; returns the markdown section and the JSON array.
pub fn run(
    problems: &[Problem],
    opts: &Options,
    bar: &ProgressBar,
) -> Result<(String, Value), String> {
    let mut rows = Vec::new();
    for p in problems {
        bar.set_message(format!("plan {}", p.name));
        rows.push(solve(p, opts)?);
        bar.inc(1);
    }
    let mut md = format!(
        "## Static planning\n\nOne arena per problem, buffers live together never overlapping. \
         Arena ÷ bound: the search's arena over the lower bound (most bytes live at one \
         moment); lower is better, 1.0000 is optimal. The search starts from the best \
         greedy plan and runs until it proves its plan optimal or its budget of {:.1} s is \
         spent; \"found at\" is when it found the plan it returned, \"time\" its whole run. \
         Files named NAME.CAPACITY.csv (MiniMalloc's benchmarks) give the capacity MiniMalloc \
         was asked to fit; the last column says when the arena first fit it (the search is not \
         told it).\n\n",
        opts.budget.as_secs_f64()
    );
    let mut t = Table::new(&[
        ("problem", false),
        ("buffers", true),
        ("lower bound", true),
        ("greedy by size", true),
        ("greedy by breadth", true),
        ("greedy by peak", true),
        ("search arena", true),
        ("arena ÷ bound (lower is better)", true),
        ("proven optimal", false),
        ("found at (s)", true),
        ("time (s)", true),
        ("nodes", true),
        ("fit the capacity in its name at (s)", true),
    ]);
    let mut notes = Vec::new();
    for r in &rows {
        t.row(vec![
            r.name.clone(),
            report::count(r.buffers as u64),
            report::count(r.lower_bound),
            report::count(r.by_size),
            report::count(r.by_breadth),
            report::count(r.by_peak),
            report::count(r.arena),
            ratio(r.arena, r.lower_bound),
            if r.optimal { "yes" } else { "no" }.into(),
            format!("{:.3}", r.best_at),
            format!("{:.3}", r.seconds),
            report::count(r.nodes),
            match r.target {
                None => "—".into(),
                Some((_, Some(at))) => format!("{at:.3}"),
                Some((t, None)) => format!("not within {}", report::count(t)),
            },
        ]);
        if r.proven_bound > r.lower_bound {
            notes.push(format!(
                "{}: the search proved that no arena below {} exists (bound raised from {}).",
                r.name,
                report::count(r.proven_bound),
                report::count(r.lower_bound)
            ));
        }
    }
    md.push_str(&t.render());
    report::push_notes(&mut md, &notes);
    let json = rows
        .iter()
        .map(|r| {
            json!({
                "problem": r.name,
                "buffers": r.buffers,
                "lower_bound": r.lower_bound,
                "arena": r.arena,
                "optimal": r.optimal,
                "seconds": r.seconds,
            })
        })
        .collect();
    Ok((md, Value::Array(json)))
}

/// `arena / bound` to four decimals (a dash for an empty problem).
fn ratio(arena: u64, bound: u64) -> String {
    if bound == 0 {
        "—".into()
    } else {
        format!("{:.4}", arena as f64 / bound as f64)
    }
}
