//! talc's heap-efficiency benchmark (talc's `benches/src/heap_efficiency.rs`): how much of a
//! fixed heap an allocator can hand out before its first failure.
//!
//! Each round starts from an empty 128 MiB heap and performs random actions until one fails:
//! 5/10 allocate `generate_size(10 000)` bytes, 1/10 free a random block, 4/10 realloc a random
//! block to `1..100 000` bytes. The bytes asked for by the blocks live at the failure, over the
//! heap size, averaged over the rounds (talc: 300), is the efficiency. Everything is freed
//! between rounds, on the same allocator. glibc has no fixed heap and is left out, as in talc.
//! As in the random-actions benchmark, the random streams are seeded, the same for every
//! allocator.

use std::ffi::OsStr;
use std::path::Path;

use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::cli::{self, Mode, Opt};
use crate::plot;
use crate::random_actions::{generate_align, generate_size};
use crate::report::{self, Better, Table};
use crate::subjects::{with_subject, Arena, Bench, Peer, Setup, Space, Subject};

/// talc's `HE_MAX_ALLOC_SIZE`.
const MAX_SIZE: usize = 10_000;
/// talc's `HE_MAX_REALLOC_SIZE_MULTI`.
const REALLOC_MULTI: usize = 10;
/// A round that has not failed after this many actions is stopped (and reported): only an
/// allocator that never fails could get there.
const MAX_ACTIONS: u64 = 50_000_000;

/// How much to measure.
pub struct Options {
    /// Rounds per allocator (talc: 300).
    pub rounds: usize,
    /// Heap size (talc: 128 MiB).
    pub heap: usize,
}

/// The options `efficiency` takes.
pub const OPTIONS: &[Opt] = &[cli::runs(
    "rounds per allocator (default talc's 300; 30 in the default suite, 2 with --quick, on an 8 MiB heap)",
)];

impl Options {
    /// The defaults: talc's 300 rounds on a 128 MiB heap (30 in the default suite; with
    /// `--quick`, 2 on 8 MiB).
    pub fn new(mode: Mode) -> Self {
        Options {
            rounds: mode.pick(300, 30, 2),
            heap: if mode == Mode::Quick {
                8 << 20
            } else {
                crate::random_actions::HEAP
            },
        }
    }

    /// Sets one of [`OPTIONS`] from its value, or says why the value is refused.
    pub fn set(&mut self, name: &str, value: &OsStr) -> Result<(), String> {
        match name {
            "runs" => self.rounds = cli::count(value, 1, "rounds per allocator")?,
            _ => return Err(cli::not_taken("efficiency")),
        }
        Ok(())
    }
}

struct Rounds<'a> {
    rounds: usize,
    bar: &'a ProgressBar,
}

/// Bytes in use at the failures, summed over the rounds; rounds stopped without a failure.
type Out = (u128, usize);

impl Bench for Rounds<'_> {
    type Out = Out;
    fn run<S: Subject>(&mut self, mut s: S, _base: usize) -> Out {
        let mut v: Vec<(S::Block, usize, usize)> = Vec::with_capacity(100_000);
        let mut used = 0u128;
        let mut endless = 0;
        for round in 0..self.rounds {
            self.bar.inc(1);
            let mut rng = fastrand::Rng::with_seed(0xEFF1_C1E4 + round as u64);
            let mut actions = 0u64;
            loop {
                actions += 1;
                if actions > MAX_ACTIONS {
                    endless += 1;
                    break;
                }
                match rng.usize(0..=9) {
                    0..=4 => {
                        let size = generate_size(&mut rng, MAX_SIZE);
                        let align = generate_align(&mut rng);
                        match s.alloc(size, align) {
                            Some(b) => v.push((b, size, align)),
                            None => break,
                        }
                    }
                    5 => {
                        if !v.is_empty() {
                            let (b, size, align) = v.swap_remove(rng.usize(0..v.len()));
                            // SAFETY: a live block with its size and alignment, freed once.
                            unsafe { s.free(b, size, align) };
                        }
                    }
                    _ => {
                        if !v.is_empty() {
                            let i = rng.usize(0..v.len());
                            let new_size = rng.usize(1..MAX_SIZE * REALLOC_MULTI);
                            let (b, size, align) = v[i];
                            // SAFETY: a live block; replaced by the result on success, kept
                            // (and still live) on failure.
                            match unsafe { s.realloc(b, size, align, new_size) } {
                                Some(nb) => v[i] = (nb, new_size, align),
                                None => break,
                            }
                        }
                    }
                }
            }
            used += v.iter().map(|e| e.1 as u128).sum::<u128>();
            for (b, size, align) in v.drain(..) {
                // SAFETY: as above.
                unsafe { s.free(b, size, align) };
            }
        }
        (used, endless)
    }
}

/// Runs the benchmark; returns the markdown section and the JSON record.
pub fn run(
    opts: &Options,
    plots: Option<&Path>,
    bar: &ProgressBar,
) -> Result<(String, Value), String> {
    let peers: Vec<Peer> = Peer::HOST
        .iter()
        .chain(&Peer::ADDRESSES)
        .copied()
        .filter(|p| p.has_arena())
        .collect();
    let mut arena = Arena::new(opts.heap)?;
    let heap = arena.len();
    let setup = Setup {
        wrap: false,
        max_allocs: 1 << 20,
    };
    let mut results: Vec<Result<(f64, usize), String>> = Vec::new();
    for &peer in &peers {
        bar.set_message(format!("efficiency: {}", peer.name()));
        let space = Space::for_peer(peer, &mut arena, heap);
        let mut rounds = Rounds {
            rounds: opts.rounds,
            bar,
        };
        results.push(
            with_subject(peer, space, setup, &mut rounds).map(|(used, endless)| {
                let total = heap as f64 * opts.rounds.max(1) as f64;
                (used as f64 / total * 100.0, endless)
            }),
        );
    }
    let base = results.first().and_then(|r| r.as_ref().ok()).map(|r| r.0);
    let ratio = report::ratio_header("tagalloc inline", Better::Higher);
    let mut t = Table::new(&[
        ("allocator", false),
        ("memory", false),
        ("heap in use at first failure (higher is better)", true),
        (&ratio, true),
    ]);
    let mut notes = Vec::new();
    for (peer, r) in peers.iter().zip(&results) {
        let kind = if peer.is_host() { "host" } else { "addresses" }.to_string();
        match r {
            Ok((pct, endless)) => {
                t.row(vec![
                    peer.name(),
                    kind,
                    format!("{pct:.2} %"),
                    report::ratio(*pct, base),
                ]);
                if *endless > 0 {
                    notes.push(format!(
                        "- {}: {endless} rounds never failed and were stopped after {} actions",
                        peer.name(),
                        report::count(MAX_ACTIONS)
                    ));
                }
            }
            Err(e) => t.row(vec![peer.name(), kind, format!("error: {e}")]),
        }
    }
    let mut md = format!(
        "## Heap efficiency (talc's method)\n\nAverage share of a {} heap handed out (bytes \
         asked for) at the first failed allocation or realloc, over {} rounds; higher is \
         better. The bump reference frees nothing until the heap is empty. glibc has no fixed \
         heap and is not measured. offset-allocator is given {} nodes.\n\n{}",
        report::bytes(heap as u64),
        opts.rounds,
        report::count(u64::from(setup.max_allocs)),
        t.render()
    );
    report::push_notes(&mut md, &notes);
    if let Some(dir) = plots {
        let bars: Vec<plot::Bar> = peers
            .iter()
            .zip(&results)
            .map(|(p, r)| plot::Bar {
                name: p.name(),
                label: p.name(),
                value: r.as_ref().map_or(f64::NAN, |r| r.0),
            })
            .collect();
        let title = format!(
            "Heap efficiency (talc's method): share of a {} heap handed out at the first failed \
             allocation or realloc (higher is better)",
            report::bytes(heap as u64)
        );
        let chart = plot::Bars {
            title: &title,
            x_desc: &format!(
                "% of the heap in use at the first failure (mean of {} rounds)",
                opts.rounds
            ),
            unit: " %",
            notes: &[
                "glibc has no fixed heap and is not measured. The bump reference frees nothing \
                 until the heap is empty."
                    .into(),
            ],
        };
        plot::bars(&dir.join("efficiency.svg"), &chart, &bars)?;
    }
    let json = json!({
        "rounds": opts.rounds,
        "heap_bytes": heap,
        "results": peers.iter().zip(&results).map(|(p, r)| json!({
            "allocator": p.name(),
            "memory": if p.is_host() { "host" } else { "addresses" },
            "percent_in_use": r.as_ref().ok().map(|r| r.0),
            "error": r.as_ref().err(),
            "rounds_without_failure": r.as_ref().ok().map(|r| r.1),
        })).collect::<Vec<_>>(),
    });
    Ok((md, json))
}
