//! Formatting of results: markdown tables and the numbers in them. Kept apart from the
//! benchmarks so that every table reads the same way.

use std::fmt::Write;

/// A markdown table, built row by row.
pub struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns; `true` right-aligns a column (numbers).
    pub fn new(columns: &[(&str, bool)]) -> Self {
        Table {
            header: columns.iter().map(|c| c.0.to_string()).collect(),
            right: columns.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are left empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as markdown, one line per row.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            out.push('|');
            for i in 0..self.header.len() {
                let _ = write!(out, " {} |", cells.get(i).map_or("", String::as_str));
            }
            out.push('\n');
        };
        line(&mut out, &self.header);
        let rule: Vec<String> = self
            .right
            .iter()
            .map(|&r| if r { "---:" } else { "---" }.to_string())
            .collect();
        line(&mut out, &rule);
        for row in &self.rows {
            line(&mut out, row);
        }
        out
    }
}

/// Appends footnotes (if any) below a table, one per line.
pub fn push_notes(md: &mut String, notes: &[String]) {
    if !notes.is_empty() {
        md.push('\n');
        md.push_str(&notes.join("\n"));
        md.push('\n');
    }
}

/// Bytes in binary units, three significant digits.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else if v >= 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// An integer with thin groups of three digits, for counts that run into millions.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// [`count`] and the noun it counts, in the number it agrees with: `1 region`,
/// `1,024 regions`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), tagalloc_host::noun(n, one, many))
}

/// `x / base`, or a dash when there is no base to compare with. Every ratio column divides the
/// row's allocator by the reference (never the other way round), and its header says which
/// way is better: see [`ratio_header`].
pub fn ratio(x: f64, base: Option<f64>) -> String {
    match base {
        Some(b) if b > 0.0 && x.is_finite() => format!("{:.2}", x / b),
        _ => "—".into(),
    }
}

/// Which way a measure is better, for the headers of ratio columns.
#[derive(Clone, Copy)]
pub enum Better {
    Lower,
    Higher,
}

/// The header of a column of `allocator ÷ reference` ratios: "÷ REFERENCE (lower is better)".
pub fn ratio_header(reference: &str, better: Better) -> String {
    let way = match better {
        Better::Lower => "lower",
        Better::Higher => "higher",
    };
    format!("÷ {reference} ({way} is better)")
}

/// `n` and a noun, in the plural unless `n` is 1: "1 run", "3 runs".
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Nanoseconds with a sensible number of digits (a dash when nothing was measured).
pub fn nanos(ns: f64) -> String {
    if !ns.is_finite() {
        "—".into()
    } else if ns >= 1000.0 {
        format!("{ns:.0}")
    } else {
        format!("{ns:.1}")
    }
}

/// The median (upper median for an even count); NaN for no values.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(60 << 20), "60.0 MiB");
        assert_eq!(count(1234567), "1,234,567");
        assert_eq!(count(12), "12");
        assert_eq!(plural(1, "run"), "1 run");
        assert_eq!(plural(3, "run"), "3 runs");
        assert_eq!(ratio(3.0, Some(2.0)), "1.50");
        assert_eq!(
            ratio_header("tagalloc inline", Better::Lower),
            "÷ tagalloc inline (lower is better)"
        );
        assert_eq!(ratio(3.0, None), "—");
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn table_renders_markdown() {
        let mut t = Table::new(&[("a", false), ("b", true)]);
        t.row(vec!["x".into(), "1".into()]);
        t.row(vec!["y".into()]);
        assert_eq!(
            t.render(),
            "| a | b |\n| --- | ---: |\n| x | 1 |\n| y |  |\n"
        );
    }
}
