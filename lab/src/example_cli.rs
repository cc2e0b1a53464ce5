//! The examples' command lines (`examples/profile.rs`, `examples/counters.rs`,
//! `examples/call_times.rs`): their numeric options, the random-actions examples' arguments and
//! run, and their exit, written once.

use tagalloc_bench::random_actions::{self, Actions};
use tagalloc_bench::subjects::{with_subject, Arena, Bench, Peer, Setup, Space, Subject};

/// An example's exit: success, or its error on standard error after the example's name, and
/// failure.
pub fn exit(name: &str, result: Result<(), String>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Whether the arguments ask for help (`-h`, `--help`); if so the usage is printed on
/// standard output, and the example ends with success.
pub fn wants_help(args: &[String], usage: &str) -> bool {
    let asked = args.iter().any(|a| a == "-h" || a == "--help");
    if asked {
        println!("{usage}");
    }
    asked
}

/// An example's options after its positional arguments: `--name N` pairs, each name one of
/// `known` and each value a number; the pairs in order, or an error that ends with `usage`.
pub fn options<'a>(
    args: &'a [String],
    known: &[&str],
    usage: &str,
) -> Result<Vec<(&'a str, usize)>, String> {
    args.chunks(2)
        .map(|pair| {
            let name = pair[0].as_str();
            if !known.contains(&name) {
                return Err(format!("unknown option {name} ({usage})"));
            }
            let n = pair
                .get(1)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name}: a number, please ({usage})"))?;
            Ok((name, n))
        })
        .collect()
}

/// The command line of the examples that run talc's random actions per allocator and size
/// (`counters`, `call_times`): `ALLOCATOR[,...] MAX[,...] [--actions N] [--rounds R]`.
#[derive(Debug, PartialEq)]
pub struct ActionsArgs<'a> {
    /// The allocators, by the names the examples take ([`Peer::EXAMPLE_NAMES`]).
    pub peers: Vec<(&'a str, Peer)>,
    /// talc's maximum sizes in bytes, each above 16.
    pub sizes: Vec<usize>,
    /// Actions per run, at least 1.
    pub actions: usize,
    /// Rounds (every size and allocator once each), at least 1.
    pub rounds: usize,
}

impl<'a> ActionsArgs<'a> {
    /// Every size with every allocator, sizes first: the rows of the examples' tables.
    pub fn cells(&self) -> impl Iterator<Item = (usize, &'a str, Peer)> + '_ {
        self.sizes
            .iter()
            .flat_map(move |&max| self.peers.iter().map(move |&(name, p)| (max, name, p)))
    }

    /// Every run in order: each round runs every size with every allocator ([`Self::cells`]).
    pub fn runs(&self) -> impl Iterator<Item = (usize, &'a str, Peer)> + '_ {
        (0..self.rounds).flat_map(move |_| self.cells())
    }
}

/// Reads [`ActionsArgs`] from `args` (the arguments after the program's name), with
/// `actions` actions per run and 3 rounds unless they say otherwise; an error ends with
/// `usage`.
pub fn actions_args<'a>(
    args: &'a [String],
    usage: &str,
    actions: usize,
) -> Result<ActionsArgs<'a>, String> {
    let (Some(who), Some(sizes)) = (args.first(), args.get(1)) else {
        return Err(usage.into());
    };
    let mut parsed = ActionsArgs {
        peers: Vec::new(),
        sizes: Vec::new(),
        actions,
        rounds: 3,
    };
    for (name, n) in options(&args[2..], &["--actions", "--rounds"], usage)? {
        match name {
            "--actions" => parsed.actions = n,
            _ => parsed.rounds = n,
        }
    }
    if parsed.actions == 0 || parsed.rounds == 0 {
        return Err(format!("--actions and --rounds: at least 1 ({usage})"));
    }
    parsed.peers = who
        .split(',')
        .map(|w| {
            Peer::by_example_name(w)
                .map(|p| (w, p))
                .ok_or_else(|| format!("{w}: not an allocator ({usage})"))
        })
        .collect::<Result<_, String>>()?;
    parsed.sizes = sizes
        .split(',')
        .map(|s| s.parse().ok().filter(|&m: &usize| m > 16))
        .collect::<Option<_>>()
        .ok_or("MAX: sizes above 16 bytes, please")?;
    Ok(parsed)
}

/// Untimed random actions the examples run on a fresh heap before they measure, so that it
/// holds a realistic set of blocks (freed again after them).
pub const WARMUP: usize = 100_000;

/// Runs the [`WARMUP`] actions of talc's random actions at `max` bytes on `s` with the warm-up
/// seed of the examples' first seed ([`random_actions::FIRST_SEED`]), then frees every block
/// they left live.
pub fn warm_up<S: Subject>(s: &mut S, max: usize) {
    let mut warm = Actions::new(max, random_actions::warmup_seed(random_actions::FIRST_SEED));
    for _ in 0..WARMUP {
        warm.step(s);
    }
    warm.free_all(s);
}

/// Runs `bench` once on `peer` (a host allocator, [`Peer::EXAMPLE_NAMES`]) over a fresh arena
/// of `len` bytes. The setup's bump and offset-allocator settings do not reach those peers.
pub fn run_on_fresh_arena<B>(peer: Peer, len: usize, bench: &mut B) -> Result<(), String>
where
    B: Bench<Out = Result<(), String>>,
{
    let mut arena = Arena::new(len)?;
    let setup = Setup {
        wrap: false,
        max_allocs: 1 << 20,
    };
    with_subject(peer, Space::Host(&mut arena), setup, bench)?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_are_pairs_of_a_known_name_and_a_number() {
        let known = ["--actions", "--rounds"];
        let args = strings(&["--rounds", "2", "--actions", "10"]);
        assert_eq!(
            options(&args, &known, "U"),
            Ok(vec![("--rounds", 2), ("--actions", 10)])
        );
        for (bad, why) in [
            (&["--runs", "2"][..], "unknown option --runs (U)"),
            (&["--rounds"][..], "--rounds: a number, please (U)"),
            (&["--rounds", "two"][..], "--rounds: a number, please (U)"),
            (&["--rounds", "-1"][..], "--rounds: a number, please (U)"),
        ] {
            assert_eq!(options(&strings(bad), &known, "U"), Err(why.into()));
        }
    }

    #[test]
    fn actions_args_take_allocators_sizes_and_counts() {
        let args = strings(&["talc,tagalloc", "200,30000", "--rounds", "5"]);
        assert_eq!(
            actions_args(&args, "U", 7),
            Ok(ActionsArgs {
                peers: vec![("talc", Peer::Talc), ("tagalloc", Peer::Inline)],
                sizes: vec![200, 30000],
                actions: 7,
                rounds: 5,
            })
        );
        let parsed = actions_args(&args, "U", 7).unwrap();
        assert_eq!(parsed.runs().count(), 5 * 2 * 2);
        assert_eq!(
            parsed.cells().map(|(m, n, _)| (m, n)).collect::<Vec<_>>(),
            [
                (200, "talc"),
                (200, "tagalloc"),
                (30000, "talc"),
                (30000, "tagalloc")
            ]
        );
        for (bad, why) in [
            (&["talc"][..], "U"),
            (&["glibc", "200"][..], "glibc: not an allocator (U)"),
            (&["talc", "16"][..], "MAX: sizes above 16 bytes, please"),
            (&["talc", "200,x"][..], "MAX: sizes above 16 bytes, please"),
            (
                &["talc", "200", "--actions", "0"][..],
                "--actions and --rounds: at least 1 (U)",
            ),
            (
                &["talc", "200", "--runs", "2"][..],
                "unknown option --runs (U)",
            ),
        ] {
            assert_eq!(actions_args(&strings(bad), "U", 7), Err(why.into()));
        }
    }
}
