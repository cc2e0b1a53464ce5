//! Allocation traces: reading the `tagalloc trace v1` format.
//!
//! A trace is plain text, optionally gzip-compressed (detected from the magic bytes, not the file
//! name), one event per line:
//!
//! ```text
//! # tagalloc trace v1            <- first line, exactly this
//! # source: ...                  <- comment lines start with '#'
//! a <id> <size> [key=value ...]  <- allocate <size> bytes; <id> is new, never reused
//! f <id> [key=value ...]         <- free the allocation <id>
//! r <id> <new_size> [key=value]  <- resize <id>; contents must survive
//! ```
//!
//! Known fields are `align=<n>` (a power of two, allocations only), `t=<thread>`,
//! `s=<stream>` and `u=<stream>` (frees only: PyTorch's `record_stream`); any other
//! `key=value` field is ignored. Blank lines are skipped. Every line but a lone header ends
//! with a newline: a last line without one is refused as truncated, since a file cut inside a
//! number would otherwise replay a different size (`a 5 12` of `a 5 1234`).
//!
//! Besides the syntax, the parser checks that the trace is consistent, so that a replay can
//! trust it: an `a` never reuses an id, and `f` and `r` only name ids that are live. Every
//! problem comes back as a [`TraceError`] naming the line; nothing here panics on bad input.
//! Allocations still live at the end of a trace are simply never freed.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::{self, File};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;
use tagalloc_host::count;

/// The exact first line of every trace.
pub const HEADER: &str = "# tagalloc trace v1";

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// One allocator call recorded in a trace.
///
/// `thread` is the `t=` field (the thread that made the call) and `stream` the `s=` field (the
/// CUDA stream the request was made on); both are `None` where the trace does not say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// Allocate `size` bytes (possibly 0) under the fresh id `id`. `align` is the requested
    /// alignment, a power of two; `None` means the platform's malloc alignment.
    Alloc {
        id: u64,
        size: usize,
        align: Option<usize>,
        thread: Option<u32>,
        stream: Option<u32>,
    },
    /// Free the live allocation `id`. `used` is the `u=` field: another stream the block was
    /// used on (PyTorch's `record_stream`), whose work must finish before it is reused.
    Free {
        id: u64,
        thread: Option<u32>,
        stream: Option<u32>,
        used: Option<u32>,
    },
    /// Resize the live allocation `id` to `new_size` bytes, in place or by moving; its contents
    /// up to the smaller of the two sizes must survive.
    Realloc {
        id: u64,
        new_size: usize,
        thread: Option<u32>,
        stream: Option<u32>,
    },
}

impl Event {
    /// The id of the allocation this event is about.
    pub fn id(&self) -> u64 {
        match *self {
            Event::Alloc { id, .. } | Event::Free { id, .. } | Event::Realloc { id, .. } => id,
        }
    }

    /// The thread that made the call, if the trace records it.
    pub fn thread(&self) -> Option<u32> {
        match *self {
            Event::Alloc { thread, .. }
            | Event::Free { thread, .. }
            | Event::Realloc { thread, .. } => thread,
        }
    }

    /// The CUDA stream the call was made on, if the trace records it.
    pub fn stream(&self) -> Option<u32> {
        match *self {
            Event::Alloc { stream, .. }
            | Event::Free { stream, .. }
            | Event::Realloc { stream, .. } => stream,
        }
    }
}

/// The event as a trace line (`a 7 16 align=64 t=9`), so that an error can show exactly which
/// line of the trace it is about.
impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Event::Alloc {
                id, size, align, ..
            } => {
                write!(f, "a {id} {size}")?;
                if let Some(align) = align {
                    write!(f, " align={align}")?;
                }
            }
            Event::Free { id, used, .. } => {
                write!(f, "f {id}")?;
                if let Some(u) = used {
                    write!(f, " u={u}")?;
                }
            }
            Event::Realloc { id, new_size, .. } => write!(f, "r {id} {new_size}")?,
        }
        if let Some(t) = self.thread() {
            write!(f, " t={t}")?;
        }
        if let Some(s) = self.stream() {
            write!(f, " s={s}")?;
        }
        Ok(())
    }
}

/// A whole trace, read into memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// A short name: the file name without `.trace.gz`, `.trace` or `.gz` for [`Trace::load`],
    /// whatever the caller chose for [`Trace::parse`].
    pub name: String,
    /// The events in order.
    pub events: Vec<Event>,
}

impl Trace {
    /// Reads the trace file at `path`, gzip-compressed or plain.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let file = File::open(path).map_err(|e| TraceError::io(e, None).at_path(path))?;
        Trace::parse(trace_name(path), file).map_err(|e| e.at_path(path))
    }

    /// Reads a trace from `reader`, gzip-compressed or plain, calling it `name`.
    pub fn parse(name: impl Into<String>, reader: impl Read) -> Result<Trace, TraceError> {
        let mut reader = reader;
        let mut magic = [0u8; GZIP_MAGIC.len()];
        let n = read_prefix(&mut reader, &mut magic).map_err(|e| TraceError::io(e, None))?;
        // Put the peeked bytes back in front of the rest.
        let reader = io::Cursor::new(magic[..n].to_vec()).chain(reader);
        let events = if magic[..n] == GZIP_MAGIC {
            let decoder = MultiGzDecoder::new(BufReader::with_capacity(1 << 16, reader));
            parse_lines(BufReader::with_capacity(1 << 16, decoder))?
        } else {
            parse_lines(BufReader::with_capacity(1 << 16, reader))?
        };
        Ok(Trace {
            name: name.into(),
            events,
        })
    }

    /// Event counts, sizes and peak live bytes of the trace.
    pub fn stats(&self) -> TraceStats {
        let mut stats = TraceStats::default();
        let mut live: HashMap<u64, usize, FastHash> = HashMap::default();
        let mut threads: HashSet<u32, FastHash> = HashSet::default();
        let mut streams: HashSet<u32, FastHash> = HashSet::default();
        let mut live_bytes: u64 = 0;
        for event in &self.events {
            stats.events += 1;
            if let Some(t) = event.thread() {
                threads.insert(t);
            }
            if let Some(s) = event.stream() {
                streams.insert(s);
            }
            match *event {
                Event::Alloc {
                    id, size, align, ..
                } => {
                    stats.allocs += 1;
                    if align.is_some() {
                        stats.aligned_allocs += 1;
                    }
                    stats.max_size = stats.max_size.max(size);
                    stats.total_alloc_bytes += size as u64;
                    if let Some(old) = live.insert(id, size) {
                        // Not possible in a parsed trace; keep the sums right anyway.
                        live_bytes -= old as u64;
                    }
                    live_bytes += size as u64;
                }
                Event::Free { id, .. } => {
                    stats.frees += 1;
                    if let Some(old) = live.remove(&id) {
                        live_bytes -= old as u64;
                    }
                }
                Event::Realloc { id, new_size, .. } => {
                    stats.reallocs += 1;
                    stats.max_size = stats.max_size.max(new_size);
                    if let Some(old) = live.insert(id, new_size) {
                        live_bytes -= old as u64;
                    }
                    live_bytes += new_size as u64;
                }
            }
            stats.peak_live_bytes = stats.peak_live_bytes.max(live_bytes);
            stats.peak_live_count = stats.peak_live_count.max(live.len());
        }
        stats.live_at_end = live.len();
        stats.live_bytes_at_end = live_bytes;
        stats.threads = threads.len();
        stats.streams = streams.len();
        stats
    }
}

/// Summary numbers of a [`Trace`], from [`Trace::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    /// All events.
    pub events: usize,
    /// `a` events.
    pub allocs: usize,
    /// `a` events with an `align=` field.
    pub aligned_allocs: usize,
    /// `f` events.
    pub frees: usize,
    /// `r` events.
    pub reallocs: usize,
    /// The largest size asked for by an `a` or `r`.
    pub max_size: usize,
    /// The sum of the sizes of all `a` events.
    pub total_alloc_bytes: u64,
    /// The most bytes live at once: the sum of the current sizes of live ids, reallocs counted
    /// at their new size.
    pub peak_live_bytes: u64,
    /// The most allocations live at once.
    pub peak_live_count: usize,
    /// Allocations still live at the end (never freed).
    pub live_at_end: usize,
    /// Their bytes.
    pub live_bytes_at_end: u64,
    /// Distinct `t=` values.
    pub threads: usize,
    /// Distinct `s=` values.
    pub streams: usize,
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} events ({} alloc, {} free, {} realloc), peak live {} bytes in {} blocks, \
             {} live at end, max size {}",
            self.events,
            self.allocs,
            self.frees,
            self.reallocs,
            self.peak_live_bytes,
            self.peak_live_count,
            self.live_at_end,
            self.max_size
        )?;
        if self.aligned_allocs > 0 {
            write!(f, ", {} aligned", self.aligned_allocs)?;
        }
        if self.threads > 0 {
            write!(f, ", {}", count(self.threads, "thread", "threads"))?;
        }
        if self.streams > 0 {
            write!(f, ", {}", count(self.streams, "stream", "streams"))?;
        }
        Ok(())
    }
}

/// Why a trace could not be read: what went wrong, and where (file and 1-based line number,
/// where known).
#[derive(Debug)]
pub struct TraceError {
    path: Option<PathBuf>,
    line: Option<usize>,
    kind: TraceErrorKind,
}

/// What went wrong reading a trace.
#[derive(Debug)]
#[non_exhaustive]
pub enum TraceErrorKind {
    /// Reading failed (including a corrupt gzip stream).
    Io(io::Error),
    /// The line is not valid UTF-8.
    NotUtf8,
    /// The first line is not [`HEADER`]; holds what was there (empty for an empty input).
    BadHeader(String),
    /// The line starts with something other than `a`, `f`, `r` or `#`.
    UnknownEvent(String),
    /// A positional field is missing.
    MissingField(&'static str),
    /// A number does not parse (or does not fit its type).
    BadNumber { field: String, text: String },
    /// `align=` is not a power of two.
    BadAlign(String),
    /// `align=` on an event other than `a`.
    MisplacedAlign,
    /// `u=` on an event other than `f`.
    MisplacedUse,
    /// A token after the positional fields that is not `key=value`.
    StrayToken(String),
    /// The same known field twice on one line.
    DuplicateField(String),
    /// An `a` with an id that was used before.
    IdReused(u64),
    /// An `f` or `r` naming an id that is not live.
    NotLive(u64),
    /// The last line lacks its newline: the file was cut short, perhaps inside a number. (A
    /// header alone needs none: it is checked whole.)
    Truncated,
}

impl TraceError {
    fn io(error: io::Error, line: Option<usize>) -> TraceError {
        TraceError {
            path: None,
            line,
            kind: TraceErrorKind::Io(error),
        }
    }

    fn at_line(line: usize, kind: TraceErrorKind) -> TraceError {
        TraceError {
            path: None,
            line: Some(line),
            kind,
        }
    }

    fn at_path(mut self, path: &Path) -> TraceError {
        self.path = Some(path.to_path_buf());
        self
    }

    /// The 1-based line number the error is about, if it is about a line.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The file, for errors from [`Trace::load`].
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What went wrong.
    pub fn kind(&self) -> &TraceErrorKind {
        &self.kind
    }
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(path) = &self.path {
            write!(f, "{}: ", path.display())?;
        }
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        write!(f, "{}", self.kind)
    }
}

impl fmt::Display for TraceErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceErrorKind::Io(e) => write!(f, "read error: {e}"),
            TraceErrorKind::NotUtf8 => write!(f, "not valid UTF-8"),
            TraceErrorKind::BadHeader(found) => {
                write!(f, "expected the header `{HEADER}`, found `{found}`")
            }
            TraceErrorKind::UnknownEvent(op) => {
                write!(f, "unknown event `{op}` (expected a, f or r)")
            }
            TraceErrorKind::MissingField(field) => write!(f, "missing <{field}>"),
            TraceErrorKind::BadNumber { field, text } => {
                write!(f, "bad number `{text}` for {field}")
            }
            TraceErrorKind::BadAlign(text) => {
                write!(f, "align={text} is not a power of two")
            }
            TraceErrorKind::MisplacedAlign => write!(f, "align= is only allowed on `a` events"),
            TraceErrorKind::MisplacedUse => write!(f, "u= is only allowed on `f` events"),
            TraceErrorKind::StrayToken(token) => {
                write!(f, "unexpected `{token}` (expected key=value)")
            }
            TraceErrorKind::DuplicateField(key) => write!(f, "field `{key}` given twice"),
            TraceErrorKind::IdReused(id) => write!(f, "id {id} was already used"),
            TraceErrorKind::NotLive(id) => write!(f, "id {id} is not live"),
            TraceErrorKind::Truncated => write!(
                f,
                "truncated: the last line lacks its newline (the file was cut short?)"
            ),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            TraceErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Where the shared trace collection is looked for: `shared/traces` beside the repository
/// (`../shared/traces` from its root), whether or not it is there.
pub fn shared_traces_location() -> PathBuf {
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    fs::canonicalize(&beside)
        .unwrap_or(beside)
        .join("shared/traces")
}

/// The shared trace collection, `../shared/traces` beside the repository, if it exists.
pub fn shared_traces_dir() -> Option<PathBuf> {
    let dir = shared_traces_location();
    dir.is_dir().then_some(dir)
}

/// One file of the shared collection, for the tests that replay it: its path, or a message
/// saying what is missing and where it was looked for. Those tests are built ignored where the
/// collection is absent (the `tagalloc_shared_traces` cfg set by `build.rs`), so they only get
/// here without it under `CI=true`, where the missing file must fail them.
pub fn shared_trace(file: &str) -> Result<PathBuf, String> {
    let dir = shared_traces_location();
    let path = dir.join(file);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{file} not found in {}: this test needs the shared trace collection beside the \
             repository (../shared/traces)",
            dir.display()
        ))
    }
}

/// The traces recorded for and bundled with the repository, `tests/data/`.
pub fn bundled_traces_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// The trace files (`*.trace` and `*.trace.gz`) directly in `dir`, sorted by name.
pub fn trace_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let is_trace = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".trace") || n.ends_with(".trace.gz"));
        if is_trace && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The name [`Trace::load`] gives the trace at `path`.
pub fn trace_name(path: &Path) -> String {
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for suffix in [".trace.gz", ".trace", ".gz"] {
        if let Some(stem) = file.strip_suffix(suffix) {
            if !stem.is_empty() {
                return stem.to_owned();
            }
        }
    }
    file
}

/// Reads up to `buf.len()` bytes, fewer only at the end of the input.
fn read_prefix(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Tracks the ids seen so far, to check each event against.
struct IdState {
    used: HashSet<u64, FastHash>,
    live: HashSet<u64, FastHash>,
}

fn parse_lines<R: BufRead>(mut reader: R) -> Result<Vec<Event>, TraceError> {
    let mut raw = Vec::with_capacity(128);
    let mut events = Vec::new();
    let mut ids = IdState {
        used: HashSet::default(),
        live: HashSet::default(),
    };
    let mut line_no = 0usize;
    loop {
        raw.clear();
        let n = reader
            .read_until(b'\n', &mut raw)
            .map_err(|e| TraceError::io(e, Some(line_no + 1)))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = std::str::from_utf8(&raw)
            .map_err(|_| TraceError::at_line(line_no, TraceErrorKind::NotUtf8))?;
        let text = text.trim_end_matches(['\n', '\r']);
        if line_no == 1 {
            if text.trim_end() != HEADER {
                return Err(TraceError::at_line(
                    1,
                    TraceErrorKind::BadHeader(text.to_owned()),
                ));
            }
            continue;
        }
        let trimmed = text.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            if !trimmed.is_empty() && !raw.ends_with(b"\n") {
                return Err(TraceError::at_line(line_no, TraceErrorKind::Truncated));
            }
            continue;
        }
        let event =
            parse_event(trimmed, &mut ids).map_err(|kind| TraceError::at_line(line_no, kind))?;
        // Only the end of the input leaves a line without its newline: a file cut there may
        // have lost the end of a number (`a 5 12` of `a 5 1234`), which would parse.
        if !raw.ends_with(b"\n") {
            return Err(TraceError::at_line(line_no, TraceErrorKind::Truncated));
        }
        events.push(event);
    }
    if line_no == 0 {
        return Err(TraceError::at_line(
            1,
            TraceErrorKind::BadHeader(String::new()),
        ));
    }
    Ok(events)
}

fn parse_event(line: &str, ids: &mut IdState) -> Result<Event, TraceErrorKind> {
    let mut tokens = line.split_ascii_whitespace();
    let op = tokens.next().unwrap_or("");
    let event = match op {
        "a" => {
            let id = number(tokens.next(), "id")?;
            let size = number(tokens.next(), "size")?;
            let fields = Fields::parse(tokens)?;
            if fields.used.is_some() {
                return Err(TraceErrorKind::MisplacedUse);
            }
            if !ids.used.insert(id) {
                return Err(TraceErrorKind::IdReused(id));
            }
            ids.live.insert(id);
            Event::Alloc {
                id,
                size,
                align: fields.align,
                thread: fields.thread,
                stream: fields.stream,
            }
        }
        "f" => {
            let id = number(tokens.next(), "id")?;
            let fields = Fields::parse(tokens)?;
            if fields.align.is_some() {
                return Err(TraceErrorKind::MisplacedAlign);
            }
            if !ids.live.remove(&id) {
                return Err(TraceErrorKind::NotLive(id));
            }
            Event::Free {
                id,
                thread: fields.thread,
                stream: fields.stream,
                used: fields.used,
            }
        }
        "r" => {
            let id = number(tokens.next(), "id")?;
            let new_size = number(tokens.next(), "new_size")?;
            let fields = Fields::parse(tokens)?;
            if fields.align.is_some() {
                return Err(TraceErrorKind::MisplacedAlign);
            }
            if fields.used.is_some() {
                return Err(TraceErrorKind::MisplacedUse);
            }
            if !ids.live.contains(&id) {
                return Err(TraceErrorKind::NotLive(id));
            }
            Event::Realloc {
                id,
                new_size,
                thread: fields.thread,
                stream: fields.stream,
            }
        }
        other => return Err(TraceErrorKind::UnknownEvent(other.to_owned())),
    };
    Ok(event)
}

fn number<T: std::str::FromStr>(
    token: Option<&str>,
    field: &'static str,
) -> Result<T, TraceErrorKind> {
    let text = token.ok_or(TraceErrorKind::MissingField(field))?;
    parse_number(text, field)
}

fn parse_number<T: std::str::FromStr>(text: &str, field: &str) -> Result<T, TraceErrorKind> {
    // `FromStr` for integers accepts a leading '+'; the format does not.
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(value) = text.parse() {
            return Ok(value);
        }
    }
    Err(TraceErrorKind::BadNumber {
        field: field.to_owned(),
        text: text.to_owned(),
    })
}

/// The optional `key=value` fields of one line.
#[derive(Default)]
struct Fields {
    align: Option<usize>,
    thread: Option<u32>,
    stream: Option<u32>,
    used: Option<u32>,
}

impl Fields {
    fn parse<'a>(tokens: impl Iterator<Item = &'a str>) -> Result<Fields, TraceErrorKind> {
        let mut fields = Fields::default();
        for token in tokens {
            let Some((key, value)) = token.split_once('=') else {
                return Err(TraceErrorKind::StrayToken(token.to_owned()));
            };
            match key {
                "align" => {
                    let align: usize = parse_number(value, "align")?;
                    if !align.is_power_of_two() {
                        return Err(TraceErrorKind::BadAlign(value.to_owned()));
                    }
                    set_once(&mut fields.align, align, key)?;
                }
                "t" => set_once(&mut fields.thread, parse_number(value, "t")?, key)?,
                "s" => set_once(&mut fields.stream, parse_number(value, "s")?, key)?,
                "u" => set_once(&mut fields.used, parse_number(value, "u")?, key)?,
                "" => return Err(TraceErrorKind::StrayToken(token.to_owned())),
                _ => {} // unknown fields are ignored
            }
        }
        Ok(fields)
    }
}

fn set_once<T>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), TraceErrorKind> {
    if slot.replace(value).is_some() {
        return Err(TraceErrorKind::DuplicateField(key.to_owned()));
    }
    Ok(())
}

/// A fast hash for integer keys (ids, threads), where the standard SipHash is needlessly slow.
/// Trace ids are not chosen by an adversary, so HashDoS resistance buys nothing here; the replay
/// uses it too, so its timings measure the heap rather than the hashing.
pub(crate) type FastHash = BuildHasherDefault<IdHasher>;

#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // A multiply-xorshift finaliser spreads sequential ids over the table.
        let x = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 ^= u64::from(n);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    fn parse(text: &str) -> Result<Trace, TraceError> {
        Trace::parse("test", text.as_bytes())
    }

    fn gzip(text: &str) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(text.as_bytes()).unwrap();
        encoder.finish().unwrap()
    }

    /// Parses `body` after a valid header and returns the error's line and kind.
    fn bad(body: &str) -> (Option<usize>, TraceErrorKind) {
        let text = format!("{HEADER}\n{body}");
        let err = parse(&text).expect_err("should not parse");
        (err.line(), err.kind)
    }

    const GOOD: &str = "# tagalloc trace v1\n\
                        # source: hand-written\n\
                        a 0 32\n\
                        a 1 0 align=64 t=3\n\
                        \n\
                        r 0 100 s=2\n\
                        # a comment in the middle\n\
                        f 1 t=4 extra=ignored\n\
                        a 7 16 s=1 future=field t=9\n\
                        f 0\n";

    fn good_events() -> Vec<Event> {
        vec![
            Event::Alloc {
                id: 0,
                size: 32,
                align: None,
                thread: None,
                stream: None,
            },
            Event::Alloc {
                id: 1,
                size: 0,
                align: Some(64),
                thread: Some(3),
                stream: None,
            },
            Event::Realloc {
                id: 0,
                new_size: 100,
                thread: None,
                stream: Some(2),
            },
            Event::Free {
                id: 1,
                thread: Some(4),
                stream: None,
                used: None,
            },
            Event::Alloc {
                id: 7,
                size: 16,
                align: None,
                thread: Some(9),
                stream: Some(1),
            },
            Event::Free {
                id: 0,
                thread: None,
                stream: None,
                used: None,
            },
        ]
    }

    #[test]
    fn parses_plain_text() {
        let trace = parse(GOOD).unwrap();
        assert_eq!(trace.name, "test");
        assert_eq!(trace.events, good_events());
    }

    #[test]
    fn parses_gzip_by_magic() {
        let trace = Trace::parse("gz", &gzip(GOOD)[..]).unwrap();
        assert_eq!(trace.events, good_events());
    }

    #[test]
    fn parses_crlf_and_header_only() {
        let trace = parse(&GOOD.replace('\n', "\r\n")).unwrap();
        assert_eq!(trace.events, good_events());
        assert!(parse("# tagalloc trace v1").unwrap().events.is_empty());
        assert!(parse("# tagalloc trace v1\n").unwrap().events.is_empty());
    }

    #[test]
    fn event_accessors() {
        let events = good_events();
        assert_eq!(events[1].id(), 1);
        assert_eq!(events[1].thread(), Some(3));
        assert_eq!(events[2].stream(), Some(2));
        assert_eq!(events[5].thread(), None);
    }

    #[test]
    fn events_display_as_trace_lines() {
        let lines: Vec<String> = good_events().iter().map(Event::to_string).collect();
        assert_eq!(
            lines,
            [
                "a 0 32",
                "a 1 0 align=64 t=3",
                "r 0 100 s=2",
                "f 1 t=4",
                "a 7 16 t=9 s=1",
                "f 0"
            ]
        );
        // Each line parses back to the same event.
        let text = format!("{HEADER}\n{}\n", lines.join("\n"));
        assert_eq!(parse(&text).unwrap().events, good_events());
    }

    #[test]
    fn stats_count_events_and_peak() {
        let stats = parse(GOOD).unwrap().stats();
        assert_eq!(stats.events, 6);
        assert_eq!(stats.allocs, 3);
        assert_eq!(stats.aligned_allocs, 1);
        assert_eq!(stats.frees, 2);
        assert_eq!(stats.reallocs, 1);
        assert_eq!(stats.max_size, 100);
        assert_eq!(stats.total_alloc_bytes, 48);
        // 32, 32+0, 100+0, 100, 100+16, 16
        assert_eq!(stats.peak_live_bytes, 116);
        assert_eq!(stats.peak_live_count, 2);
        assert_eq!(stats.live_at_end, 1);
        assert_eq!(stats.live_bytes_at_end, 16);
        assert_eq!(stats.threads, 3);
        assert_eq!(stats.streams, 2);
        assert!(stats
            .to_string()
            .starts_with("6 events (3 alloc, 2 free, 1 realloc)"));
    }

    #[test]
    fn realloc_shrink_lowers_live_bytes() {
        let trace = parse(&format!("{HEADER}\na 0 1000\nr 0 10\na 1 500\n")).unwrap();
        let stats = trace.stats();
        assert_eq!(stats.peak_live_bytes, 1000);
        assert_eq!(stats.live_bytes_at_end, 510);
    }

    #[test]
    fn bad_header() {
        for text in [
            "",
            "a 0 1\n",
            "# tagalloc trace v2\na 0 1\n",
            "\n# tagalloc trace v1\n",
        ] {
            let err = parse(text).expect_err(text);
            assert_eq!(err.line(), Some(1), "{text:?}");
            assert!(
                matches!(err.kind(), TraceErrorKind::BadHeader(_)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_free_carries_the_stream_record_stream_named() {
        let t = parse(&format!("{HEADER}\na 0 16 s=1\nf 0 s=1 u=0\n")).unwrap();
        assert_eq!(
            t.events[1],
            Event::Free {
                id: 0,
                thread: None,
                stream: Some(1),
                used: Some(0),
            }
        );
        assert_eq!(t.events[1].to_string(), "f 0 u=0 s=1");
    }

    #[test]
    fn bad_lines_name_their_line() {
        // The header is line 1, so the first body line is line 2.
        let cases: &[(&str, usize)] = &[
            ("x 0 1\n", 2),
            ("a\n", 2),
            ("a 0\n", 2),
            ("# c\nf\n", 3),
            ("a 0 1\nr 0\n", 3),
            ("a -1 5\n", 2),
            ("a 0 +5\n", 2),
            ("a 0 12x\n", 2),
            ("a 0 99999999999999999999999\n", 2),
            ("a 0 1 t=-1\n", 2),
            ("a 0 1 s=4294967296\n", 2),
            ("a 0 1 align=3\n", 2),
            ("a 0 1 align=0\n", 2),
            ("a 0 1 align=\n", 2),
            ("a 0 1\nf 0 align=16\n", 3),
            ("a 0 1 2\n", 2),
            ("a 0 1 =5\n", 2),
            ("a 0 1 t=1 t=2\n", 2),
            ("a 0 1\na 0 2\n", 3),
            ("a 0 1\nf 0\na 0 2\n", 4),
            ("f 3\n", 2),
            ("a 0 1\nf 0\nf 0\n", 4),
            ("a 0 1\nf 0\nr 0 5\n", 4),
        ];
        for &(body, line) in cases {
            let (got, kind) = bad(body);
            assert_eq!(got, Some(line), "{body:?}: {kind}");
        }
    }

    #[test]
    fn a_last_line_without_its_newline_is_truncated() {
        for body in ["a 0 12", "a 0 1\nf 0", "a 0 1\r", "a 0 1\n# cut comm"] {
            let (line, kind) = bad(body);
            assert!(
                matches!(kind, TraceErrorKind::Truncated),
                "{body:?}: {kind}"
            );
            assert_eq!(line, Some(body.matches('\n').count() + 2), "{body:?}");
            let packed = Trace::parse("gz", &gzip(&format!("{HEADER}\n{body}"))[..]);
            assert!(
                matches!(packed.unwrap_err().kind(), TraceErrorKind::Truncated),
                "gzip: {body:?}"
            );
        }
        // A bad line is refused for what is wrong with it, cut or not.
        assert!(matches!(bad("x 0 1").1, TraceErrorKind::UnknownEvent(_)));
        // Blank space after the last newline loses nothing.
        assert!(parse(&format!("{HEADER}\na 0 1\n  ")).is_ok());
        let dir = std::env::temp_dir().join(format!("tagalloc-cut-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cut.trace");
        fs::write(&path, format!("{HEADER}\na 0 1\na 1 12")).unwrap();
        let shown = Trace::load(&path).unwrap_err().to_string();
        fs::remove_dir_all(&dir).unwrap();
        assert!(
            shown.contains("cut.trace: line 3: truncated: the last line lacks its newline"),
            "{shown}"
        );
    }

    #[test]
    fn bad_line_kinds() {
        assert!(matches!(bad("x 0 1\n").1, TraceErrorKind::UnknownEvent(op) if op == "x"));
        assert!(matches!(
            bad("a 0\n").1,
            TraceErrorKind::MissingField("size")
        ));
        assert!(matches!(bad("f\n").1, TraceErrorKind::MissingField("id")));
        assert!(matches!(
            bad("a 0 1\nr 0\n").1,
            TraceErrorKind::MissingField("new_size")
        ));
        assert!(matches!(
            bad("a zero 1\n").1,
            TraceErrorKind::BadNumber { field, text } if field == "id" && text == "zero"
        ));
        assert!(matches!(
            bad("a 0 1 align=48\n").1,
            TraceErrorKind::BadAlign(_)
        ));
        assert!(matches!(
            bad("a 0 1\nr 0 2 align=8\n").1,
            TraceErrorKind::MisplacedAlign
        ));
        assert!(matches!(bad("a 0 1 u=2\n").1, TraceErrorKind::MisplacedUse));
        assert!(matches!(
            bad("a 0 1\nr 0 2 u=2\n").1,
            TraceErrorKind::MisplacedUse
        ));
        assert!(matches!(
            bad("a 0 1\nf 0 u=1 u=2\n").1,
            TraceErrorKind::DuplicateField(k) if k == "u"
        ));
        assert!(matches!(bad("a 0 1 junk\n").1, TraceErrorKind::StrayToken(t) if t == "junk"));
        assert!(matches!(
            bad("a 0 1 s=1 s=1\n").1,
            TraceErrorKind::DuplicateField(k) if k == "s"
        ));
        assert!(matches!(
            bad("a 5 1\nf 5\na 5 1\n").1,
            TraceErrorKind::IdReused(5)
        ));
        assert!(matches!(bad("f 9\n").1, TraceErrorKind::NotLive(9)));
        assert!(matches!(bad("r 9 1\n").1, TraceErrorKind::NotLive(9)));
    }

    #[test]
    fn not_utf8_is_an_error() {
        let mut bytes = format!("{HEADER}\na 0 1\n").into_bytes();
        bytes.extend_from_slice(b"a 1 \xff\n");
        let err = Trace::parse("bin", &bytes[..]).unwrap_err();
        assert_eq!(err.line(), Some(3));
        assert!(matches!(err.kind(), TraceErrorKind::NotUtf8));
    }

    #[test]
    fn corrupt_gzip_is_an_error() {
        let mut bytes = gzip(GOOD);
        let len = bytes.len();
        bytes.truncate(len / 2);
        let err = Trace::parse("cut", &bytes[..]).unwrap_err();
        assert!(matches!(err.kind(), TraceErrorKind::Io(_)), "{err}");

        let mut bytes = gzip(GOOD);
        for b in &mut bytes[12..] {
            *b ^= 0x5a;
        }
        assert!(Trace::parse("garbled", &bytes[..]).is_err());
    }

    #[test]
    fn error_display_names_path_and_line() {
        let dir = std::env::temp_dir().join(format!("tagalloc-trace-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("broken.trace.gz");
        fs::write(&path, gzip(&format!("{HEADER}\na 0 1\nq\n"))).unwrap();
        let err = Trace::load(&path).unwrap_err();
        let shown = err.to_string();
        assert!(shown.contains("broken.trace.gz"), "{shown}");
        assert!(shown.contains("line 3"), "{shown}");
        assert_eq!(err.path(), Some(path.as_path()));

        // Plain text under a .gz name, and gzip under a plain name: content decides.
        let plain = dir.join("plain.trace.gz");
        fs::write(&plain, GOOD).unwrap();
        let trace = Trace::load(&plain).unwrap();
        assert_eq!(trace.name, "plain");
        assert_eq!(trace.events, good_events());
        let packed = dir.join("packed.trace");
        fs::write(&packed, gzip(GOOD)).unwrap();
        let trace = Trace::load(&packed).unwrap();
        assert_eq!(trace.name, "packed");
        assert_eq!(trace.events, good_events());

        let listed = trace_files(&dir).unwrap();
        assert_eq!(listed, vec![path.clone(), packed.clone(), plain.clone()]);

        let missing = Trace::load(&dir.join("missing.trace")).unwrap_err();
        assert!(matches!(missing.kind(), TraceErrorKind::Io(_)));
        assert_eq!(missing.line(), None);

        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn trace_names() {
        assert_eq!(trace_name(Path::new("a/b/sqlite.trace.gz")), "sqlite");
        assert_eq!(trace_name(Path::new("x.trace")), "x");
        assert_eq!(trace_name(Path::new("y.gz")), "y");
        assert_eq!(trace_name(Path::new("z.txt")), "z.txt");
        assert_eq!(trace_name(Path::new(".trace")), ".trace");
    }

    #[test]
    fn bundled_traces_parse() {
        let dir = bundled_traces_dir();
        let files = trace_files(&dir).unwrap();
        assert!(!files.is_empty(), "no traces in {}", dir.display());
        for path in files {
            let trace = Trace::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!trace.events.is_empty(), "{}", path.display());
            println!("{}: {}", trace.name, trace.stats());
        }
    }

    #[test]
    #[cfg_attr(
        not(tagalloc_shared_traces),
        ignore = "needs ../shared/traces beside the repository (absent when this was built)"
    )]
    fn shared_traces_parse() {
        let dir = shared_traces_location();
        let files = trace_files(&dir).unwrap_or_else(|e| {
            panic!(
                "cannot list the shared trace collection {}: {e}",
                dir.display()
            )
        });
        assert!(!files.is_empty(), "{} holds no traces", dir.display());
        for path in files {
            let trace = Trace::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!trace.events.is_empty(), "{}", path.display());
            println!("{}: {}", trace.name, trace.stats());
        }
    }
}
