//! The harness's settings from the environment (`TAGALLOC_FUZZ_FULL_EVERY`,
//! `TAGALLOC_FUZZ_TRACE`; the table of every variable: `docs/environment.md`). A value the
//! harness does not accept is reported in one line on stderr, naming the variable, the value,
//! what is accepted and the default used, as the libraries do, instead of being ignored: a
//! mistyped setting would otherwise fuzz for hours under the wrong checks.

/// A count of steps greater than zero, or `default` when the variable is unset or empty.
pub fn steps(name: &str, default: u32) -> u32 {
    match parse_steps(
        std::env::var_os(name)
            .as_deref()
            .map(|v| v.to_string_lossy())
            .as_deref(),
    ) {
        Ok(n) => n.unwrap_or(default),
        Err(()) => {
            refused(
                name,
                "a whole number of steps greater than 0",
                &default.to_string(),
            );
            default
        }
    }
}

/// A switch: `1` on; `0`, empty or unset off.
pub fn switch(name: &str) -> bool {
    match parse_switch(
        std::env::var_os(name)
            .as_deref()
            .map(|v| v.to_string_lossy())
            .as_deref(),
    ) {
        Ok(on) => on,
        Err(()) => {
            refused(name, "\"0\" or \"1\"", "0 (off)");
            false
        }
    }
}

/// `Ok(None)`: unset or empty; `Err`: not a count greater than zero.
fn parse_steps(value: Option<&str>) -> Result<Option<u32>, ()> {
    match value {
        None | Some("") => Ok(None),
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(()),
        },
    }
}

/// `Err`: neither `0`, `1`, empty nor unset.
fn parse_switch(value: Option<&str>) -> Result<bool, ()> {
    match value {
        None | Some("" | "0") => Ok(false),
        Some("1") => Ok(true),
        Some(_) => Err(()),
    }
}

/// The one line for a value not accepted.
fn refused(name: &str, accepted: &str, default: &str) {
    let value = std::env::var_os(name).unwrap_or_default();
    eprintln!(
        "tagalloc-fuzz: {name} is not {accepted} but {:?}; the default is used: {default}",
        value.to_string_lossy()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_of_steps_is_a_whole_number_above_zero() {
        assert_eq!(parse_steps(None), Ok(None));
        assert_eq!(parse_steps(Some("")), Ok(None));
        assert_eq!(parse_steps(Some("8")), Ok(Some(8)));
        for bad in ["0", "-1", "abc", "1.5", "99999999999"] {
            assert_eq!(parse_steps(Some(bad)), Err(()), "{bad}");
        }
    }

    #[test]
    fn a_switch_is_0_or_1() {
        assert_eq!(parse_switch(None), Ok(false));
        assert_eq!(parse_switch(Some("0")), Ok(false));
        assert_eq!(parse_switch(Some("1")), Ok(true));
        assert_eq!(parse_switch(Some("yes")), Err(()));
    }
}
