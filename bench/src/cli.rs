//! What the command line's benchmark modules share: how long a run is ([`Mode`]), how an option
//! is described ([`Opt`]), and the parsers of the values several of them take. Each module
//! owns its options: the list it takes (`OPTIONS`, with their defaults in the help), its
//! `Options::new(mode)` with those defaults, and `Options::set`, which parses one option's
//! value into them; the binary only dispatches. A refused value comes back as the reason only
//! (`is not a number of seconds (expected ...)`): the binary adds the subcommand, the option
//! and the value given, so every usage error reads the same.

use std::ffi::{OsStr, OsString};

/// How long each part runs: a named subcommand at full length, the default suite (several
/// parts, shortened), or a smoke run (`--quick`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Full,
    Suite,
    Quick,
}

impl Mode {
    /// The value for this mode among the three.
    pub fn pick<T>(self, full: T, suite: T, quick: T) -> T {
        match self {
            Mode::Full => full,
            Mode::Suite => suite,
            Mode::Quick => quick,
        }
    }
}

/// One option of a subcommand, as its help shows it.
#[derive(Clone, Copy, Debug)]
pub struct Opt {
    /// Without the leading `--`.
    pub name: &'static str,
    /// The value's placeholder (`SECONDS`); `None` for a flag.
    pub value: Option<&'static str>,
    /// What it does and its default, one paragraph (wrapped when printed).
    pub help: &'static str,
}

/// The option's value as text, or why not.
pub fn text(v: &OsStr) -> Result<&str, String> {
    v.to_str()
        .ok_or_else(|| "is not valid UTF-8 (expected text)".to_string())
}

/// A count of at least `min`.
pub fn count(v: &OsStr, min: usize, what: &str) -> Result<usize, String> {
    match text(v)?.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        Ok(_) => Err(format!("is too small (expected {what}, at least {min})")),
        Err(_) => Err(format!("is not a count (expected {what}, e.g. 3)")),
    }
}

/// A positive number of seconds, below a million.
pub fn seconds(v: &OsStr) -> Result<std::time::Duration, String> {
    match text(v)?.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e6 => Ok(std::time::Duration::from_secs_f64(s)),
        Ok(_) => Err("is not a positive number of seconds (expected e.g. 10 or 2.5)".into()),
        Err(_) => Err("is not a number of seconds (expected e.g. 10 or 2.5)".into()),
    }
}

/// Allocator keys separated by commas (checked against the known keys by the caller).
pub fn keys(v: &OsStr) -> Result<Vec<String>, String> {
    let keys: Vec<String> = text(v)?.split(',').map(str::to_string).collect();
    if keys.iter().any(String::is_empty) {
        return Err("has an empty key (expected allocator keys separated by commas)".into());
    }
    crate::subjects::Peer::check_keys(&keys)?;
    Ok(keys)
}

/// The refusal of an option the module's `set` was handed but does not take: the binary
/// hands each module only its own, so this names a mistake in the table, not in the input.
pub fn not_taken(module: &str) -> String {
    format!("is not an option of {module}")
}

/// `--runs`, with the module's own `help` (what is repeated, and how often by default).
pub const fn runs(help: &'static str) -> Opt {
    Opt {
        name: "runs",
        value: Some("N"),
        help,
    }
}

/// `text` wrapped to 96 columns, each line indented by `indent`.
pub fn wrap(text: &str, indent: usize) -> String {
    let mut s = String::new();
    let mut col = 0;
    for word in text.split_whitespace() {
        if col > 0 && col + 1 + word.len() > 96 {
            s.push('\n');
            col = 0;
        }
        if col == 0 {
            s.push_str(&" ".repeat(indent));
            col = indent;
        } else {
            s.push(' ');
            col += 1;
        }
        s.push_str(word);
        col += word.len();
    }
    s.push('\n');
    s
}

/// Prints `opts` as help lines: the option and its value in a column, the help beside it,
/// wrapped to 96 columns.
pub fn describe(opts: &[Opt]) -> String {
    let mut s = String::new();
    for o in opts {
        let head = match o.value {
            Some(v) => format!("--{} {v}", o.name),
            None => format!("--{}", o.name),
        };
        s.push_str(&columns(&head, o.help));
    }
    s
}

/// One entry of a help list: `head` in a 24-column field, `help` wrapped beside it (under it,
/// when `head` is wider).
pub fn columns(head: &str, help: &str) -> String {
    const INDENT: usize = 4;
    const FIELD: usize = 24;
    const WIDTH: usize = 96;
    let mut s = format!("{:INDENT$}{head}", "");
    let mut col = INDENT + head.len();
    if col + 2 > INDENT + FIELD {
        s.push('\n');
        col = 0;
    }
    let mut first = true;
    for word in help.split_whitespace() {
        if first || col + 1 + word.len() > WIDTH {
            if !first {
                s.push('\n');
                col = 0;
            }
            s.push_str(&" ".repeat(INDENT + FIELD - col));
            col = INDENT + FIELD;
        } else {
            s.push(' ');
            col += 1;
        }
        s.push_str(word);
        col += word.len();
        first = false;
    }
    s.push('\n');
    s
}

/// A command line taken apart, before anything is known of the subcommand: its words (the
/// subcommand and its arguments) and the options, each with its value (empty for a flag).
#[derive(Debug, Default)]
pub struct Lexed {
    pub words: Vec<OsString>,
    pub options: Vec<(&'static str, OsString)>,
    /// `-h` or `--help` was given.
    pub help: bool,
    /// The first option that is no option of any subcommand, as given.
    pub unknown: Option<String>,
}

/// Takes `args` (without the program's name) apart, every option looked up in `known` (the
/// options of every subcommand) to know whether a value follows it. A missing or unwanted
/// value is refused here, in words: `--budget needs a value (expected SECONDS)`, with the
/// words read until then (the first may name the subcommand the message is about).
pub fn lex(args: Vec<OsString>, known: &[Opt]) -> Result<Lexed, (Vec<OsString>, String)> {
    use lexopt::prelude::*;
    let mut lexed = Lexed::default();
    let mut parser = lexopt::Parser::from_args(args);
    loop {
        let arg = match parser.next() {
            Ok(Some(arg)) => arg,
            Ok(None) => return Ok(lexed),
            Err(lexopt::Error::UnexpectedValue { option, value }) => {
                return Err((
                    lexed.words,
                    format!(
                        "{option}: {:?} is not wanted (expected no value: {option} is a flag)",
                        value.to_string_lossy()
                    ),
                ))
            }
            Err(e) => return Err((lexed.words, e.to_string())),
        };
        match arg {
            Short('h') | Long("help") => lexed.help = true,
            Long(name) => match known.iter().find(|o| o.name == name) {
                Some(o) => {
                    let value = match o.value {
                        Some(placeholder) => match parser.value() {
                            Ok(v) => v,
                            Err(_) => {
                                let e =
                                    format!("--{} needs a value (expected {placeholder})", o.name);
                                return Err((lexed.words, e));
                            }
                        },
                        None => OsString::new(),
                    };
                    lexed.options.push((o.name, value));
                }
                None => {
                    let given = format!("--{name}");
                    // `--bogus=1`: the value goes with the option refused.
                    let _ = parser.optional_value();
                    lexed.unknown.get_or_insert(given);
                }
            },
            Short(c) => {
                lexed.unknown.get_or_insert(format!("-{c}"));
            }
            Value(v) => lexed.words.push(v),
        }
    }
}
