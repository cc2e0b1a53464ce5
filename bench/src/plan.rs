//! `plan [CSV...]`: static memory planning problems solved by `tagalloc::plan`.
//!
//! A problem is a CSV file in MiniMalloc's format (`id,lower,upper,size`, one buffer per row,
//! live over `[lower, upper)`; an optional `alignment` column), as in `../shared/plans/`
//! (see its `FORMAT.md`). For each, the tool prints the lower bound (most bytes live at one
//! moment), the arenas of the three greedy heuristics and of the exact search with its time
//! budget, whether the search proved its plan optimal, when it found that plan, and how long
//! it ran in all. Every plan is checked with `tagalloc::plan::validate` before it is reported.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::{json, Value};
use tagalloc::plan::{self, Buffer, Monitor, Plan, SearchOptions};

use crate::cli::{self, Mode, Opt};
use crate::report::{self, Table};

/// One planning problem read from a CSV file.
pub struct Problem {
    /// The file name without `.csv`.
    pub name: String,
    /// The buffers, in file order; a buffer's `id` is its row number (0-based), since the
    /// file's ids need not be numbers (they are checked: distinct, not empty, not negative).
    pub buffers: Vec<Buffer>,
    /// The file's id of each buffer (its `id` column; the row number, from 0, without one).
    pub ids: Vec<String>,
    /// The `offset` column's pins, when it has any (such a problem goes to the constrained
    /// planner: see [`Input`]).
    pub pinned: Option<Vec<Option<u64>>>,
    /// How long reading and checking the file took: spent from the problem's time budget.
    pub loaded_in: Duration,
}

/// A problem file as read: a plain interval problem (the exact search and the greedy
/// heuristics, as MiniMalloc's benchmark), or one with constraints (`*.json`, or a CSV with
/// pinned offsets), for `tagalloc::plan::solve` and its baselines.
pub enum Input {
    /// A CSV of intervals.
    Intervals(Problem),
    /// A JSON problem, or a CSV with pins.
    Constrained(crate::plan_file::Loaded),
}

/// Reads one problem file of either format (by its extension: `.json`, else CSV).
pub fn load_any(path: &Path) -> Result<Input, String> {
    if path.extension().is_some_and(|x| x == "json") {
        return crate::plan_file::load(path).map(Input::Constrained);
    }
    let p = load(path)?;
    let Some(pinned) = &p.pinned else {
        return Ok(Input::Intervals(p));
    };
    let rows: Vec<_> = p
        .buffers
        .iter()
        .zip(pinned)
        .map(|(b, &o)| (b.size, b.start, b.end, b.align, o))
        .collect();
    let mut loaded = crate::plan_file::from_csv(&p.name, p.ids.clone(), &rows)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    loaded.loaded_in = p.loaded_in;
    Ok(Input::Constrained(loaded))
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

/// The `*.csv` and `*.json` files directly in `dir`, sorted by name.
pub fn csv_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        fs::read_dir(dir).map_err(|e| format!("cannot list problems in {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list problems in {}: {e}", dir.display()))?
            .path();
        if path.extension().is_some_and(|x| x == "csv" || x == "json") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads one problem. Every malformed line is an error naming the file and the line.
pub fn load(path: &Path) -> Result<Problem, String> {
    let start = Instant::now();
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("problem")
        .to_string();
    let mut problem = parse(&name, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    problem.loaded_in = start.elapsed();
    Ok(problem)
}

/// The input format, as errors and `--help` state it.
pub const FORMAT: &str = "expected comma-separated values with a header line naming the \
    columns id (optional), lower (or start), upper (or end), size, alignment (optional, \
    or align) and offset (optional: a pinned offset, empty for none), one buffer a line: it \
    is live from lower to upper (exclusive) and takes size bytes aligned to alignment; or a \
    .json problem (docs/plan-format.md)";

/// Parses a problem from CSV text. Refused, naming the line: a header without the columns
/// `lower` (or `start`), `upper` (or `end`) and `size` (naming exactly those it lacks), with a
/// column named twice (an alias counts: `lower` and `start` both), or with a column no role
/// takes (the nearest known name suggested); a row with the wrong number of fields, a field
/// that is not a number, an empty lifetime, an alignment that is not a power of two; an `id`
/// that is empty, negative or repeats an earlier row's; and whatever the planner refuses
/// (`tagalloc::plan::lower_bound`'s checks), its buffer named by its line. `O(n)` but for the
/// planner's check, `O(n log n)`.
pub fn parse(name: &str, text: &str) -> Result<Problem, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines.next().ok_or("empty file: no header line")?;
    if !header.contains(',') {
        if let Some(sep) = ['\t', ';', ' '].into_iter().find(|&c| header.contains(c)) {
            return Err(format!(
                "line 1: the columns are separated by {}: {FORMAT}",
                match sep {
                    '\t' => "tabs",
                    ';' => "semicolons",
                    _ => "spaces",
                }
            ));
        }
    }
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    // Each column a role may have, and the role's names.
    const ROLES: [&[&str]; 6] = [
        &["id"],
        &["lower", "start"],
        &["upper", "end"],
        &["size"],
        &["alignment", "align"],
        &["offset"],
    ];
    let mut role_of = [None::<usize>; ROLES.len()];
    // A column no role takes (a misspelt `alignmnet`) would be ignored: refused instead.
    let mut unknown = None;
    for (col, name) in columns.iter().enumerate() {
        if let Some(earlier) = columns[..col].iter().find(|c| *c == name) {
            return Err(format!("line 1: column `{earlier}` named twice"));
        }
        if let Some(r) = ROLES.iter().position(|names| names.contains(name)) {
            if let Some(other) = role_of[r] {
                return Err(format!(
                    "line 1: columns `{}` and `{name}` both give the {}",
                    columns[other], ROLES[r][0]
                ));
            }
            role_of[r] = Some(col);
        } else if unknown.is_none() {
            unknown = Some(*name);
        }
    }
    let [id, lower, upper, size, align, offset] = role_of;
    let mut pinned = Vec::new();
    let (Some(lower), Some(upper), Some(size)) = (lower, upper, size) else {
        // Exactly the required roles missing, by their first names.
        let missing: Vec<&str> = [(lower, "lower"), (upper, "upper"), (size, "size")]
            .into_iter()
            .filter(|(col, _)| col.is_none())
            .map(|(_, name)| name)
            .collect();
        let missing = match missing.as_slice() {
            [one] => format!("the column {one}"),
            [first, second] => format!("the columns {first} and {second}"),
            _ => "the columns lower, upper and size".to_string(),
        };
        return Err(format!(
            "line 1: header `{header}` lacks {missing}: {FORMAT}"
        ));
    };
    if let Some(name) = unknown {
        let known = ROLES.iter().flat_map(|names| names.iter().copied());
        let hint = tagalloc_host::nearest(name, known)
            .map(|near| format!(" (did you mean `{near}`?)"))
            .unwrap_or_default();
        return Err(format!("line 1: unknown column `{name}`{hint}: {FORMAT}"));
    }
    let mut buffers = Vec::new();
    // The line of each buffer, for the planner's errors, and of each id seen.
    let mut line_of = Vec::new();
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut names = Vec::new();
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
            cells[col].parse::<u64>().map_err(|_| {
                format!(
                    "line {}: {what} `{}` is not a number (0 to 2^64 - 1)",
                    i + 1,
                    cells[col]
                )
            })
        };
        if let Some(col) = id {
            // Names (MiniMalloc's files say `b1`) or numbers; not empty, not negative, and
            // naming one buffer only.
            let name = cells[col];
            if name.is_empty()
                || name
                    .strip_prefix('-')
                    .is_some_and(|d| d.parse::<u64>().is_ok())
            {
                return Err(format!("line {}: id `{name}` is empty or negative", i + 1));
            }
            if let Some(first) = ids.insert(name, i + 1) {
                return Err(format!(
                    "line {}: id {name} already names the buffer on line {first}",
                    i + 1
                ));
            }
            names.push(name.to_string());
        } else {
            names.push(buffers.len().to_string());
        }
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
        if let Some(col) = offset {
            // MiniMalloc's column: an empty cell leaves the buffer free.
            pinned.push(if cells[col].is_empty() {
                None
            } else {
                Some(num(col, "offset")?)
            });
        }
        buffers.push(b);
        line_of.push(i + 1);
    }
    // The planner's own input checks (total size within u64 and the like).
    plan::lower_bound(&buffers).map_err(|e| match e {
        plan::PlanError::AlignTooLarge { index } => format!("line {}: {e}", line_of[index]),
        e => e.to_string(),
    })?;
    Ok(Problem {
        name: name.to_string(),
        buffers,
        ids: names,
        pinned: pinned.iter().any(Option::is_some).then_some(pinned),
        loaded_in: Duration::ZERO,
    })
}

/// How to run.
pub struct Options {
    /// Time the exact search may take per problem.
    pub budget: Duration,
    /// Where the plans go: a `.csv` file (one problem), or a directory (`NAME.plan.csv` for
    /// each); `None`: only the figures.
    pub out: Option<PathBuf>,
}

/// The options `plan` takes (besides `--out`, which the command line checks).
pub const OPTIONS: &[Opt] = &[Opt {
    name: "budget",
    value: Some("SECONDS"),
    help: "time for the exact search on each problem (default 10; 0.2 with --quick)",
}];

impl Options {
    /// The defaults: 10 s of search per problem (0.2 s with `--quick`), no plan files.
    pub fn new(mode: Mode) -> Self {
        Options {
            budget: Duration::from_secs_f64(mode.pick(10.0, 10.0, 0.2)),
            out: None,
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "budget" => self.budget = cli::seconds(value)?,
            _ => return Err(cli::not_taken("plan")),
        }
        Ok(())
    }
}

/// Writes plan files: the text of plan `k` (`text(k)`) for the problem named `names[k]`, to
/// `out` if it names a `.csv` file (one problem only), else to `out/NAME.plan.csv`. Returns
/// the files written.
pub(crate) fn write_plan_files(
    names: &[&str],
    out: &Path,
    text: impl Fn(usize) -> String,
) -> Result<Vec<PathBuf>, String> {
    let to_file = out.extension().is_some_and(|e| e == "csv");
    if to_file && names.len() != 1 {
        return Err(format!(
            "--out {} is one file, for one problem; {} were planned (name a directory)",
            out.display(),
            names.len()
        ));
    }
    let mut written = Vec::new();
    for (k, name) in names.iter().enumerate() {
        let path = if to_file {
            out.to_path_buf()
        } else {
            fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
            out.join(format!("{name}.plan.csv"))
        };
        fs::write(&path, text(k)).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Writes each problem's plan as CSV (`id,offset`, a line a buffer in file order, then the
/// arena as a comment; see [`write_plan_files`]).
fn write_plans(problems: &[Problem], rows: &[Row], out: &Path) -> Result<Vec<PathBuf>, String> {
    let names: Vec<&str> = problems.iter().map(|p| p.name.as_str()).collect();
    write_plan_files(&names, out, |k| {
        let (p, r) = (&problems[k], &rows[k]);
        let mut text = String::with_capacity(16 * p.ids.len() + 32);
        text.push_str("id,offset\n");
        for (id, offset) in p.ids.iter().zip(&r.offsets) {
            text.push_str(id);
            text.push(',');
            text.push_str(&offset.to_string());
            text.push('\n');
        }
        text.push_str(&format!("# arena {}\n", r.arena));
        text
    })
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
    /// Reading, searching and checking every plan.
    whole: f64,
    nodes: u64,
    /// Buffers each greedy plan stacked (work cap or budget) instead of fitting into gaps.
    stacked: [usize; 3],
    /// The search's plan: each buffer's offset, in file order.
    offsets: Vec<u64>,
    target: Option<(u64, Option<f64>)>,
}

fn checked(p: &Problem, plan: &Plan, solver: &str) -> Result<u64, String> {
    plan::validate(&p.buffers, plan)
        .map_err(|e| format!("{}: the {solver} plan is invalid: {e}", p.name))?;
    Ok(plan.arena)
}

fn solve(p: &Problem, opts: &Options) -> Result<Row, String> {
    let start = Instant::now();
    let err = |e: plan::PlanError| format!("{}: {e}", p.name);
    let lower_bound = plan::lower_bound(&p.buffers).map_err(err)?;
    // What follows the search's last look at the clock is a sort and a sweep each, as the
    // bound's computation is: stacking what is left of up to three heuristics, checking
    // four plans and one more for margin; that much of the budget is kept for it.
    let checks = start.elapsed() * 8;
    // MiniMalloc's benchmark files are named NAME.CAPACITY.csv: the capacity it was asked to
    // fit. Only reported (when the arena first fit it); the search is never told.
    let target = p
        .name
        .rsplit_once('.')
        .and_then(|(_, c)| c.parse::<u64>().ok());
    // The budget is the whole run's: reading the file spent some of it.
    let mut watch = Watch {
        start,
        deadline: start + opts.budget.saturating_sub(p.loaded_in + checks),
        best_at: Duration::ZERO,
        target,
        target_at: None,
    };
    let found = plan::search(&p.buffers, &SearchOptions::default(), &mut watch).map_err(err)?;
    let seconds = start.elapsed().as_secs_f64();
    let arena = checked(p, &found.plan, "search")?;
    let [by_size, by_breadth, by_peak] = &found.greedy;
    let by_size = checked(p, by_size, "greedy-by-size")?;
    let by_breadth = checked(p, by_breadth, "greedy-by-breadth")?;
    let by_peak = checked(p, by_peak, "greedy-by-peak")?;
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
        whole: (p.loaded_in + start.elapsed()).as_secs_f64(),
        nodes: found.nodes,
        stacked: found.greedy_stacked,
        offsets: found.plan.offsets,
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
         greedy plan and runs until it proves its plan optimal or its budget of {:.1} s (for the \
         whole run, reading the file included) is spent; the greedy columns are the plans it \
         started from, placed within that budget; \"found at\" is when it found the plan it \
         returned, \"time\" the search's whole call, \"whole run\" that with reading the file \
         and checking every plan. \
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
        ("whole run (s)", true),
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
            format!("{:.3}", r.whole),
            report::count(r.nodes),
            match r.target {
                None => "—".into(),
                Some((_, Some(at))) => format!("{at:.3}"),
                Some((t, None)) => format!("not within {}", report::count(t)),
            },
        ]);
        for (name, &n) in ["greedy by size", "greedy by breadth", "greedy by peak"]
            .iter()
            .zip(&r.stacked)
        {
            if n > 0 {
                notes.push(format!(
                    "{}: {name} stacked {} buffers on top of their conflicts instead of \
                     fitting them into gaps (its work cap or the budget ran out).",
                    r.name,
                    report::count(n as u64)
                ));
            }
        }
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
    if let Some(out) = &opts.out {
        let written = write_plans(problems, &rows, out)?;
        md.push_str(&format!(
            "\nPlans (each buffer's id and offset): {}.\n",
            written
                .iter()
                .map(|p| format!("`{}`", p.display()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let json = rows
        .iter()
        .zip(problems)
        .map(|(r, p)| {
            json!({
                "problem": r.name,
                "buffers": r.buffers,
                "lower_bound": r.lower_bound,
                "arena": r.arena,
                "optimal": r.optimal,
                "seconds": r.seconds,
                "ids": p.ids,
                "offsets": r.offsets,
            })
        })
        .collect();
    Ok((md, Value::Array(json)))
}

/// `arena / bound` to four decimals (a dash for an empty problem).
pub(crate) fn ratio(arena: u64, bound: u64) -> String {
    if bound == 0 {
        "—".into()
    } else {
        format!("{:.4}", arena as f64 / bound as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each malformed problem is refused naming the line and the cause.
    #[test]
    fn plans_are_written_with_the_files_ids() {
        let p = parse("three", "id,lower,upper,size\nx,0,2,8\ny,1,3,16\nz,2,4,8\n").unwrap();
        assert_eq!(p.ids, ["x", "y", "z"]);
        let unnamed = parse("u", "lower,upper,size\n0,2,8\n1,3,8\n").unwrap();
        assert_eq!(unnamed.ids, ["0", "1"]);
        let problems = [p];
        let opts = Options {
            budget: Duration::from_millis(200),
            out: None,
        };
        let rows = vec![solve(&problems[0], &opts).unwrap()];
        let dir = std::env::temp_dir().join(format!("tagalloc-plan-out-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        // A directory: NAME.plan.csv in it.
        let written = write_plans(&problems, &rows, &dir).unwrap();
        assert_eq!(written, [dir.join("three.plan.csv")]);
        let text = fs::read_to_string(&written[0]).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("id,offset"));
        let offsets: Vec<(String, u64)> = lines
            .by_ref()
            .take(3)
            .map(|l| {
                let (id, off) = l.split_once(',').unwrap();
                (id.to_string(), off.parse().unwrap())
            })
            .collect();
        assert_eq!(
            offsets
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["x", "y", "z"]
        );
        let plan = Plan::new(&problems[0].buffers, offsets.iter().map(|o| o.1).collect()).unwrap();
        plan::validate(&problems[0].buffers, &plan).unwrap();
        assert_eq!(
            lines.next(),
            Some(format!("# arena {}", plan.arena).as_str())
        );
        // A .csv file: one problem only.
        let file = dir.join("one.csv");
        assert_eq!(
            write_plans(&problems, &rows, &file).unwrap(),
            std::slice::from_ref(&file)
        );
        let two = [parse("a", "lower,upper,size\n0,2,8\n").unwrap(), unnamed];
        let rows2: Vec<Row> = two.iter().map(|p| solve(p, &opts).unwrap()).collect();
        let e = write_plans(&two, &rows2, &file).unwrap_err();
        assert!(e.contains("one file, for one problem"), "{e}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_offset_column_pins_and_sends_the_problem_to_the_constrained_planner() {
        let dir = std::env::temp_dir().join(format!("tagalloc-offset-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (free, pinned) = (dir.join("free.csv"), dir.join("pinned.csv"));
        fs::write(&free, "id,lower,upper,size,offset\na,0,2,8,\nb,1,3,8,\n").unwrap();
        fs::write(
            &pinned,
            "id,lower,upper,size,offset\na,0,2,8,\nb,1,3,8,16\n",
        )
        .unwrap();
        assert!(matches!(load_any(&free), Ok(Input::Intervals(_))));
        let Ok(Input::Constrained(p)) = load_any(&pinned) else {
            panic!("a pinned CSV is a constrained problem")
        };
        assert_eq!(p.problem.items[1].pinned, Some(16));
        assert_eq!(p.ids, ["a", "b"]);
        fs::write(
            &pinned,
            "id,lower,upper,size,offset\na,0,2,8,0\nb,1,3,8,4\n",
        )
        .unwrap();
        let Err(e) = load_any(&pinned) else {
            panic!("overlapping pins accepted")
        };
        assert!(
            e.contains("`a` and `b`: pinned where they share bytes"),
            "{e}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refusals_name_the_line_and_the_cause() {
        let big = 1u64 << 63;
        let cases = [
            (
                "id,lower,upper,size\n0,0,2,8\n1,1,3,8\n0,2,4,8\n",
                "line 4: id 0 already names the buffer on line 2",
            ),
            (
                "id,lower,upper,size\n0,0,2,8\n-1,1,3,8\n",
                "line 3: id `-1` is empty or negative",
            ),
            (
                "id,lower,upper,size\nb1,0,2,8\nb2,1,3,8\nb1,2,4,8\n",
                "line 4: id b1 already names the buffer on line 2",
            ),
            (
                "id,lower,upper,size\n,0,2,8\n",
                "line 2: id `` is empty or negative",
            ),
            ("id,lower,upper,size\nb1,0,2,8\nb2,1,3,8\n", ""),
            (
                "id,lower,upper,size,size\n0,0,2,8,8\n",
                "line 1: column `size` named twice",
            ),
            (
                "id,lower,start,upper,size\n0,0,0,2,8\n",
                "line 1: columns `lower` and `start` both give the lower",
            ),
            ("lower,upper,size\n0,2,8\n", ""),
            (
                &format!(
                    "id,lower,upper,size,alignment\n0,0,2,8,1\n1,0,2,8,{big}\n2,1,3,8,{big}\n"
                ),
                "line 3: buffer 1: alignment too large to be met",
            ),
            (
                "id\tlower\tupper\tsize\n0\t0\t2\t8\n",
                "line 1: the columns are separated by tabs: expected comma-separated values",
            ),
            ("id;lower;upper;size\n0;0;2;8\n", "separated by semicolons"),
            (
                "id,from,to,bytes\n0,0,2,8\n",
                "lacks the columns lower, upper and size: expected",
            ),
            (
                "id,lower,upper,size,alignmnet\n0,0,2,8,64\n",
                "line 1: unknown column `alignmnet`",
            ),
            (
                "id,lower,upper,size,alignmnet\n0,0,2,8,64\n",
                "line 1: unknown column `alignmnet` (did you mean `alignment`?): expected",
            ),
            (
                "id,lower,upper,size,colour\n0,0,2,8,red\n",
                "line 1: unknown column `colour`: expected",
            ),
            (
                "id,lower,upper,bytes\n0,0,2,8\n",
                "line 1: header `id,lower,upper,bytes` lacks the column size: expected",
            ),
            ("id,start,size\n0,0,8\n", "lacks the column upper: expected"),
            (
                "id,size\n0,8\n",
                "lacks the columns lower and upper: expected",
            ),
            ("id,lower,upper,size,offset\n0,0,2,8,\n1,1,3,8,16\n", ""),
            (
                "id,lower,upper,size,offset\n0,0,2,8,x\n",
                "line 2: offset `x` is not a number",
            ),
        ];
        for (text, want) in cases {
            match parse("t", text) {
                Ok(p) => assert!(
                    want.is_empty(),
                    "accepted {text:?}: {} buffers",
                    p.buffers.len()
                ),
                Err(e) => assert!(!want.is_empty() && e.contains(want), "{text:?}: {e}"),
            }
        }
    }
}
