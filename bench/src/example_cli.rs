//! The examples' command lines (`examples/profile.rs`, `examples/counters.rs`): their numeric
//! options and their exit, written once.

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
}
