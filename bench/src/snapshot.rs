//! `snapshot TRACE [--at EVENT|peak]`: a trace replayed through a pool up to one moment (after
//! a given number of events, or when its live bytes peak), the pool's regions and chunks taken
//! with `Pool::visit`, and the heap drawn as a picture (`heapmap`) with its figures.
//!
//! The figures are computed from the snapshot itself and checked against the pool's own
//! statistics, so the picture and the counters cannot disagree unnoticed.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::cli::{self, Opt};
use crate::heapmap::{self, Chunk, Drawn, Picture, Region};
use crate::pool::{self, Config, Growing, PoolTarget};
use crate::replay::Prepared;
use crate::report::{self, Table};
use crate::subjects::Arena;

/// When to take the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    /// After the event that first brings the live bytes to their peak.
    Peak,
    /// After this many events.
    Events(usize),
}

/// Which moment, and which pool.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub at: At,
    /// The pool's growth policy.
    pub growing: Growing,
}

/// The options `snapshot` takes (besides `--out`, which the command line handles).
pub const OPTIONS: &[Opt] = &[
    Opt {
        name: "at",
        value: Some("EVENT|peak"),
        help: "after this many events, or when live bytes peak (default: peak)",
    },
    Opt {
        name: "policy",
        value: Some("NAME"),
        help: "the pool's growth: fixed-64k, fixed-2m (default) or doubling (1 MiB to 64 MiB)",
    },
];

impl Options {
    /// The defaults: at the peak of live bytes, 2 MiB regions.
    pub fn new() -> Self {
        Options {
            at: At::Peak,
            growing: pool::GROWTHS[1],
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "at" => self.at = At::parse(cli::text(value)?)?,
            "policy" => {
                let keys: Vec<&str> = pool::GROWTHS.iter().map(|g| g.key).collect();
                self.growing = pool::growth_named(cli::text(value)?).ok_or_else(|| {
                    format!("is not a growth policy (expected {})", keys.join(", "))
                })?
            }
            _ => return Err(cli::not_taken("snapshot")),
        }
        Ok(())
    }
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

impl At {
    /// `peak` or a number of events; a refusal says why after the value given.
    pub fn parse(s: &str) -> Result<At, String> {
        if s == "peak" {
            return Ok(At::Peak);
        }
        s.replace([',', '_'], "")
            .parse()
            .map(At::Events)
            .map_err(|_| {
                "is neither `peak` nor a number of events (expected peak or e.g. 5000)".to_string()
            })
    }

    /// How many events to replay, checked against the trace's length.
    pub fn resolve(self, p: &Prepared) -> Result<usize, String> {
        match self {
            At::Peak => Ok(pool::peak_moment(&p.ops).0),
            At::Events(n) if n <= p.ops.len() => Ok(n),
            At::Events(n) => Err(format!(
                "--at {n}: {} has only {} events",
                p.name,
                report::count(p.ops.len() as u64)
            )),
        }
    }
}

/// The figures of a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    pub reserved: usize,
    pub regions: usize,
    pub in_use: usize,
    pub used_chunks: usize,
    pub free: usize,
    pub free_chunks: usize,
    pub largest_free: usize,
    /// Bytes of the regions outside any chunk (headers and end fences).
    pub overhead: usize,
    /// The bytes the trace has live at that moment (as asked for).
    pub live: u64,
}

impl Figures {
    /// `1 − largest free ÷ free`, 0 when nothing is free.
    pub fn fragmentation(&self) -> f64 {
        if self.free == 0 {
            0.0
        } else {
            1.0 - self.largest_free as f64 / self.free as f64
        }
    }

    fn of(regions: &[Region], live: u64) -> Figures {
        let mut f = Figures {
            regions: regions.len(),
            live,
            ..Figures::default()
        };
        for r in regions {
            f.reserved += r.len;
            for c in &r.chunks {
                if c.free {
                    f.free += c.bytes;
                    f.free_chunks += 1;
                    f.largest_free = f.largest_free.max(c.bytes);
                } else {
                    f.in_use += c.bytes;
                    f.used_chunks += 1;
                }
            }
        }
        f.overhead = f.reserved - f.in_use - f.free;
        f
    }
}

/// A snapshot taken and drawn.
pub struct Snapshot {
    trace: String,
    events: usize,
    at: usize,
    peak: bool,
    growing: Growing,
    figures: Figures,
    failures: u64,
    picture: Option<(PathBuf, Drawn)>,
}

/// Replays `p`'s first `at` events through a pool growing by `growing` (separate regions, no
/// trim), takes the snapshot, and draws it at `svg` if given. `peak` says that `at` is the
/// moment of peak live bytes (for the title).
pub fn run(
    p: &Prepared,
    at: usize,
    peak: bool,
    growing: Growing,
    svg: Option<&Path>,
) -> Result<Snapshot, String> {
    let config = Config {
        growing,
        in_place: false,
        trim: false,
    };
    let mut arena = Arena::new(pool::arena_len(p))?;
    let mut t = PoolTarget::new(&mut arena, &config);
    let out = pool::replay(&mut t, &p.ops[..at], p.slots, &[]);
    t.check()
        .map_err(|e| format!("{}: the pool failed its check: {e}", p.name))?;
    let regions = RefCell::new(Vec::<(usize, Region)>::new());
    t.pool.visit(
        |base, len| {
            regions.borrow_mut().push((
                base,
                Region {
                    len,
                    chunks: Vec::new(),
                },
            ))
        },
        |addr, bytes, free| {
            if let Some((base, r)) = regions.borrow_mut().last_mut() {
                r.chunks.push(Chunk {
                    offset: addr - *base,
                    bytes,
                    free,
                });
            }
        },
    );
    let mut regions = regions.into_inner();
    regions.sort_by_key(|r| r.0);
    let regions: Vec<Region> = regions.into_iter().map(|r| r.1).collect();
    let live = pool::live_at(&p.ops, at);
    let figures = Figures::of(&regions, live);
    // The snapshot and the pool's counters must agree.
    let stats = t.pool.stats();
    let counted = (
        stats.reserved,
        stats.heap.in_use,
        stats.heap.free,
        stats.heap.largest_free,
        stats.heap.free_chunks,
        stats.heap.regions,
    );
    let seen = (
        figures.reserved,
        figures.in_use,
        figures.free,
        figures.largest_free,
        figures.free_chunks,
        figures.regions,
    );
    if counted != seen {
        return Err(format!(
            "{}: the snapshot disagrees with the pool's statistics (reserved, in use, free, \
             largest free, free chunks, regions): {seen:?} seen, {counted:?} counted",
            p.name
        ));
    }
    let mut s = Snapshot {
        trace: p.name.clone(),
        events: p.ops.len(),
        at,
        peak,
        growing,
        figures,
        failures: out.failures,
        picture: None,
    };
    if let Some(path) = svg {
        let title = s.title();
        let figure_lines = s.figure_lines();
        let mut notes = Vec::new();
        if s.failures > 0 {
            notes.push(format!(
                "{} failed during the replay (the arena ran out).",
                report::counted(s.failures, "request", "requests")
            ));
        }
        notes.push(format!(
            "Pool: tagalloc::Pool<InlineHeap> growing by {}, each growth a separate region \
             (page-aligned ranges of one arena, first fit), never trimmed. In use and free are \
             chunk bytes, tags included; the trace's live bytes are what it asked for.",
            growing.name
        ));
        let drawn = heapmap::draw(
            path,
            &Picture {
                title: &title,
                figures: &figure_lines,
                regions: &regions,
                notes: &notes,
            },
        )?;
        s.picture = Some((path.to_path_buf(), drawn));
    }
    Ok(s)
}

impl Snapshot {
    fn moment(&self) -> String {
        let at = report::count(self.at as u64);
        let of = report::count(self.events as u64);
        if self.peak {
            format!("at its peak of live bytes (after event {at} of {of})")
        } else {
            format!("after event {at} of {of}")
        }
    }

    fn title(&self) -> String {
        format!(
            "{}: the heap {}, in a pool of {}",
            self.trace,
            self.moment(),
            self.growing.name
        )
    }

    fn figure_lines(&self) -> Vec<String> {
        let f = &self.figures;
        let b = |n: usize| report::bytes(n as u64);
        vec![
            format!(
                "Reserved {} in {} · in use {} in {} · free {} in {} · region overhead {}",
                b(f.reserved),
                report::counted(f.regions as u64, "region", "regions"),
                b(f.in_use),
                report::counted(f.used_chunks as u64, "chunk", "chunks"),
                b(f.free),
                report::counted(f.free_chunks as u64, "chunk", "chunks"),
                b(f.overhead),
            ),
            format!(
                "Largest free chunk {} · fragmentation {:.3} (1 − largest free ÷ free; 0: all \
                 free bytes in one chunk) · the trace's live bytes {} (reserved ÷ live {})",
                b(f.largest_free),
                f.fragmentation(),
                report::bytes(f.live),
                report::ratio(f.reserved as f64, Some(f.live as f64)),
            ),
        ]
    }

    /// The markdown section.
    pub fn markdown(&self) -> String {
        let f = &self.figures;
        let mut out = format!("## Heap snapshot\n\n{}.\n\n", self.title());
        let mut t = Table::new(&[("figure", false), ("value", true)]);
        let b = |n: usize| report::bytes(n as u64);
        for (name, value) in [
            ("events replayed", report::count(self.at as u64)),
            ("reserved", b(f.reserved)),
            ("regions", report::count(f.regions as u64)),
            ("in use (chunk bytes)", b(f.in_use)),
            ("chunks in use", report::count(f.used_chunks as u64)),
            ("free", b(f.free)),
            ("free chunks", report::count(f.free_chunks as u64)),
            ("largest free chunk", b(f.largest_free)),
            (
                "fragmentation (1 − largest free ÷ free)",
                format!("{:.3}", f.fragmentation()),
            ),
            ("region overhead", b(f.overhead)),
            ("the trace's live bytes", report::bytes(f.live)),
            ("failed requests", report::count(self.failures)),
        ] {
            t.row(vec![name.into(), value]);
        }
        out.push_str(&t.render());
        if let Some((path, d)) = &self.picture {
            out.push_str(&format!(
                "\nPicture: {} ({} regions drawn{}; {} chunks drawn alone, {} merged into \
                 pixel columns).\n",
                path.display(),
                d.rows,
                if d.omitted > 0 {
                    format!(", {} summed up", d.omitted)
                } else {
                    String::new()
                },
                report::count(d.alone),
                report::count(d.merged),
            ));
        }
        out
    }

    /// The JSON record.
    pub fn json(&self) -> Value {
        let f = &self.figures;
        json!({
            "trace": self.trace,
            "events": self.events,
            "at": self.at,
            "at_peak": self.peak,
            "policy": self.growing.key,
            "reserved_bytes": f.reserved,
            "regions": f.regions,
            "in_use_bytes": f.in_use,
            "used_chunks": f.used_chunks,
            "free_bytes": f.free,
            "free_chunks": f.free_chunks,
            "largest_free_bytes": f.largest_free,
            "fragmentation": f.fragmentation(),
            "overhead_bytes": f.overhead,
            "live_bytes": f.live,
            "failures": self.failures,
            "picture": self.picture.as_ref().map(|(p, d)| json!({
                "path": p.display().to_string(),
                "rows": d.rows,
                "omitted_regions": d.omitted,
                "chunks_alone": d.alone,
                "chunks_merged": d.merged,
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tagalloc_tests::trace::Trace;

    #[test]
    fn at_parses_peak_and_counts() {
        assert_eq!(At::parse("peak"), Ok(At::Peak));
        assert_eq!(At::parse("1,000"), Ok(At::Events(1000)));
        assert!(At::parse("soon").is_err());
    }

    #[test]
    fn snapshot_figures_match_the_pool() {
        let mut text = String::from("# tagalloc trace v1\n");
        for i in 0..4000u64 {
            text.push_str(&format!("a {i} {}\n", 16 + (i * 7919) % 3000));
            if i % 3 == 0 {
                text.push_str(&format!("f {i}\n"));
            }
        }
        let p = crate::replay::prepare(Trace::parse("t", text.as_bytes()).unwrap()).unwrap();
        let at = At::Peak.resolve(&p).unwrap();
        assert_eq!(at, p.ops.len() - 1, "the last allocation is the peak");
        assert!(At::Events(p.ops.len() + 1).resolve(&p).is_err());
        let dir = std::env::temp_dir().join(format!("tagalloc-snapshot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("t.svg");
        let s = run(&p, at, true, pool::GROWTHS[0], Some(&svg)).unwrap();
        let f = s.figures;
        assert!(f.regions > 1, "64 KiB regions: several");
        assert_eq!(f.live, pool::live_at(&p.ops, at));
        assert!(f.in_use as u64 >= f.live);
        assert!(f.largest_free <= f.free);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg") && text.contains("fragmentation"));
        assert!(s.markdown().contains("| reserved |"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
