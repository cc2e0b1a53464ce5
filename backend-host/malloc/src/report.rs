//! What the library says on stderr, written with `write(2)` from a buffer on the stack: the
//! heap's figures at exit (`TAGALLOC_STATS`) or on `malloc_stats()`, the first refused free,
//! and the environment's values it does not accept. None of it allocates: this runs inside
//! the allocator, or after the program has started tearing itself down. The program's `errno` is
//! left as it was.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tagalloc::{BlockError, CheckError, Error, PoolStats};
use tagalloc_host::count;

/// Room for one message; the last [`MARK`] bytes are kept for the end of line.
const CAPACITY: usize = 1024;
/// What ends a message that had to be cut, and its newline.
const MARK: &[u8] = "…\n".as_bytes();

/// One message, built on the stack; what does not fit is cut (and marked with `…`).
///
/// Invariant: `len <= CAPACITY - MARK.len()`, so the end of line always fits.
struct Buf {
    bytes: [u8; CAPACITY],
    len: usize,
    cut: bool,
}

impl Buf {
    const fn new() -> Self {
        Buf {
            bytes: [0; CAPACITY],
            len: 0,
            cut: false,
        }
    }

    /// Appends what fits of `s`; `false` if not all of it did.
    fn push(&mut self, s: &[u8]) -> bool {
        let room = CAPACITY - MARK.len() - self.len;
        let take = s.len().min(room);
        if let (Some(dst), Some(src)) =
            (self.bytes.get_mut(self.len..self.len + take), s.get(..take))
        {
            dst.copy_from_slice(src);
            self.len += take;
        }
        take == s.len()
    }

    /// The message with its end of line: a newline, or `…` and a newline if it was cut.
    fn finish(&mut self) -> &[u8] {
        let end: &[u8] = if self.cut { MARK } else { b"\n" };
        let at = self.len;
        if let Some(dst) = self.bytes.get_mut(at..at + end.len()) {
            dst.copy_from_slice(end);
            self.len += end.len();
        }
        self.bytes.get(..self.len).unwrap_or(&[])
    }
}

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.push(s.as_bytes()) {
            Ok(())
        } else {
            self.cut = true;
            Err(fmt::Error)
        }
    }
}

/// Writes `args` and a newline to stderr in one `write(2)` (cut to 1 KiB).
pub(crate) fn line(args: fmt::Arguments<'_>) {
    line_to(2, args);
}

/// [`line`] to file descriptor `fd`.
fn line_to(fd: i32, args: fmt::Arguments<'_>) {
    let mut buf = Buf::new();
    let _ = buf.write_fmt(args);
    write_fd(fd, buf.finish());
}

/// `write(2)` of all of `bytes` to `fd`, keeping the caller's `errno`.
fn write_fd(fd: i32, mut bytes: &[u8]) {
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reads of its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        match usize::try_from(n) {
            Ok(n) if n > 0 => bytes = bytes.get(n..).unwrap_or(&[]),
            // Interrupted: try again; anything else (stderr closed, say): give up silently.
            // SAFETY: as above.
            _ if n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR => {}
            _ => break,
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Bytes from outside (a variable's value, a path) as text: as they are if they are UTF-8, else
/// with every byte outside printable ASCII escaped.
struct Text<'a>(&'a [u8]);

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match core::str::from_utf8(self.0) {
            Ok(text) => f.write_str(text),
            Err(_) => write!(f, "{}", self.0.escape_ascii()),
        }
    }
}

/// Reports that the environment variable `name` holds `value`, which is not `accepted` (the
/// phrase after "is": `neither "0" nor "1"`), and that `default` is used instead.
#[cold]
pub(crate) fn malformed(name: &str, value: &[u8], accepted: &str, default: &str) {
    line(format_args!(
        "tagalloc: {name} is {accepted} but \"{}\"; the default is used: {default}",
        Text(value)
    ));
}

/// Reports the variable `name` (`TAGALLOC_...`), which nothing in the project reads, and the
/// known name nearest to it (without the prefix).
#[cold]
pub(crate) fn unknown_variable(name: &[u8], nearest: Option<&str>) {
    match nearest {
        Some(near) => line(format_args!(
            "tagalloc: unknown variable {} ignored (did you mean TAGALLOC_{near}?)",
            Text(name)
        )),
        None => line(format_args!(
            "tagalloc: unknown variable {} ignored (the variables: docs/environment.md)",
            Text(name)
        )),
    }
}

/// Frees (and reallocs) refused: a double free, or a pointer this allocator did not hand out.
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Whether the first refusal has been reported.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// How many frees and reallocs were refused so far.
pub(crate) fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// A `call` of `ptr` that was not obeyed: refused ([`refusal`]) or, for damaged tags,
/// reported and the process aborted ([`corruption`]).
#[cold]
#[inline(never)]
pub(crate) fn bad_pointer(call: &str, ptr: *mut u8, why: BlockError) {
    match why {
        BlockError::Refused(e) => refusal(call, ptr, e),
        BlockError::Corrupted(c) => corruption(call, ptr, c),
    }
}

/// Whether a double free or a foreign pointer aborts (`TAGALLOC_ON_MISUSE`); so from the first
/// call, before the environment is read.
static ABORT_ON_MISUSE: AtomicBool = AtomicBool::new(true);

/// `TAGALLOC_ON_MISUSE=continue`: a detected double free or foreign pointer is refused and
/// counted (the first reported) instead of aborting the process.
pub(crate) fn continue_on_misuse() {
    ABORT_ON_MISUSE.store(false, Ordering::Relaxed);
}

/// Counts a refused `call` of `ptr`. A double free or a foreign pointer is reported and the
/// process aborts, as glibc does, unless `TAGALLOC_ON_MISUSE=continue` asked to go on: then
/// the first refusal is reported on stderr. Each message says its cause once (glibc's own
/// words for it would say it again).
#[cold]
#[inline(never)]
pub(crate) fn refusal(call: &str, ptr: *mut u8, why: Error) {
    REFUSED.fetch_add(1, Ordering::Relaxed);
    let misuse = matches!(why, Error::DoubleFree | Error::ForeignPointer);
    let what = match why {
        Error::DoubleFree => "a double free: the block was freed already",
        Error::ForeignPointer => "an invalid pointer: not a block this allocator handed out",
        _ => "refused by the heap",
    };
    if misuse && ABORT_ON_MISUSE.load(Ordering::Relaxed) {
        line(format_args!(
            "tagalloc: {call}({ptr:p}): {what}; aborting (TAGALLOC_ON_MISUSE=continue refuses \
             such calls and goes on)"
        ));
        // SAFETY: `abort` has no preconditions; it does not return.
        unsafe { libc::abort() }
    }
    if REPORTED.swap(true, Ordering::Relaxed) {
        return;
    }
    if misuse {
        line(format_args!(
            "tagalloc: {call}({ptr:p}) refused: {what}; nothing was freed. Further refusals are \
             counted, not reported (TAGALLOC_STATS=1 prints the count at exit)."
        ));
    } else {
        line(format_args!(
            "tagalloc: {call}({ptr:p}) refused: {why}; nothing was freed. Further refusals are \
             counted, not reported (TAGALLOC_STATS=1 prints the count at exit)."
        ));
    }
}

/// Reports damaged heap tags found by a `call` of `ptr` and aborts, as glibc does for memory
/// its caller corrupted: going on would hand out or merge memory the tags misdescribe.
#[cold]
#[inline(never)]
pub(crate) fn corruption(call: &str, ptr: *mut u8, c: CheckError) -> ! {
    line(format_args!(
        "tagalloc: {call}({ptr:p}): heap corruption at {:#x}: {} (a write past a block's end, \
         or into a freed block?); aborting",
        c.at, c.what
    ));
    // SAFETY: `abort` has no preconditions; it does not return.
    unsafe { libc::abort() }
}

/// Bytes as a figure with a binary unit, one decimal.
struct Bytes(usize);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut v = self.0 as f64 / 1024.0;
        let mut unit = "KiB";
        for u in UNITS.iter().skip(1) {
            if v < 1024.0 {
                break;
            }
            v /= 1024.0;
            unit = u;
        }
        write!(f, "{v:.1} {unit}")
    }
}

/// Where the statistics go.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum To {
    /// Standard error (`malloc_stats`, as glibc's).
    Stderr,
    /// The exit report's place (`TAGALLOC_STATS`): the file it names, else standard error
    /// while it is open, else [`FALLBACK`].
    Exit,
}

/// The exit report's file when standard error is closed, `%p` standing for the pid.
pub(crate) const FALLBACK: &[u8] = b"/tmp/tagalloc-stats-%p.txt";

/// A file path of at most [`PATH_MAX`] bytes, written once while the library starts (one
/// thread, before any report) and read by the reports after.
struct StatsPath(core::cell::UnsafeCell<([u8; PATH_MAX], usize)>);

const PATH_MAX: usize = 256;

// SAFETY: written only by `set_stats_path`, which the library's start calls on one thread
// before it marks itself started (a release store that every later report's start check
// acquires), and read only by reports made after that.
unsafe impl Sync for StatsPath {}

static STATS_PATH: StatsPath = StatsPath(core::cell::UnsafeCell::new(([0; PATH_MAX], 0)));

/// Keeps `TAGALLOC_STATS`'s file, if it names one (a longer path than [`PATH_MAX`] is
/// ignored, with a line on stderr).
pub(crate) fn set_stats_path(path: Option<&[u8]>) {
    let Some(path) = path else { return };
    if path.len() >= PATH_MAX {
        line(format_args!(
            "tagalloc: TAGALLOC_STATS is a path of {} bytes, more than {}; the statistics go \
             to stderr",
            path.len(),
            PATH_MAX - 1
        ));
        return;
    }
    // SAFETY: see `StatsPath`: the one write, before any read.
    let (buf, len) = unsafe { &mut *STATS_PATH.0.get() };
    if let Some(dst) = buf.get_mut(..path.len()) {
        dst.copy_from_slice(path);
        *len = path.len();
    }
}

/// `pattern` with `%p` replaced by `pid`, NUL-terminated (`PATH_MAX` bytes and a pid fit).
fn report_path(pattern: &[u8], pid: u32) -> Buf {
    let mut path = Buf::new();
    let mut rest = pattern;
    while let Some(i) = rest.windows(2).position(|w| w == b"%p") {
        let _ = path.push(rest.get(..i).unwrap_or(&[]));
        let _ = write!(path, "{pid}");
        rest = rest.get(i + 2..).unwrap_or(&[]);
    }
    let _ = path.push(rest);
    let _ = path.push(b"\0");
    path
}

/// The path [`report_path`] built, without its NUL.
fn path_text(path: &Buf) -> Text<'_> {
    Text(path.bytes.get(..path.len.saturating_sub(1)).unwrap_or(&[]))
}

/// Opens `path` (from [`report_path`]) to append to; the descriptor, or the `errno` why not.
fn open_report(path: &Buf) -> Result<i32, i32> {
    if path.len > PATH_MAX + 16 {
        return Err(libc::ENAMETOOLONG);
    }
    // SAFETY: `path` is NUL-terminated (`report_path` pushed it) and valid for reads.
    let fd = unsafe {
        libc::open(
            path.bytes.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd >= 0 {
        Ok(fd)
    } else {
        // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
        Err(unsafe { *libc::__errno_location() })
    }
}

/// `strerror`'s text for `errno`, on the stack.
struct ErrnoText {
    text: [u8; 128],
}

impl ErrnoText {
    fn new(errno: i32) -> ErrnoText {
        let mut e = ErrnoText { text: [0; 128] };
        // SAFETY: the buffer is valid for writes of its length; the XSI `strerror_r` (what the
        // `libc` crate binds on glibc) writes a NUL-terminated message within it.
        unsafe { libc::strerror_r(errno, e.text.as_mut_ptr().cast(), e.text.len() - 1) };
        e
    }
}

impl fmt::Display for ErrnoText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = self.text.iter().position(|&b| b == 0).unwrap_or(0);
        Text(self.text.get(..end).unwrap_or(&[])).fmt(f)
    }
}

/// The descriptor the statistics go to, and whether it was opened here (to close). A file
/// `TAGALLOC_STATS` names that cannot be opened is reported on stderr, and [`FALLBACK`] used.
fn destination(to: To, pid: u32) -> (i32, bool) {
    if to == To::Stderr {
        return (2, false);
    }
    // SAFETY: see `StatsPath`: read after the one write.
    let (buf, len) = unsafe { &*STATS_PATH.0.get() };
    if let Some(pattern) = buf.get(..*len).filter(|p| !p.is_empty()) {
        let path = report_path(pattern, pid);
        let errno = match open_report(&path) {
            Ok(fd) => return (fd, true),
            Err(errno) => errno,
        };
        let fallback = report_path(FALLBACK, pid);
        let fd = open_report(&fallback);
        line(format_args!(
            "tagalloc: cannot write the statistics to {}: {}; {} {}",
            path_text(&path),
            ErrnoText::new(errno),
            if fd.is_ok() { "they go to" } else { "nor to" },
            path_text(&fallback)
        ));
        return (fd.unwrap_or(-1), true);
    }
    // SAFETY: `fcntl(F_GETFD)` on any descriptor number only asks whether it is open.
    if unsafe { libc::fcntl(2, libc::F_GETFD) } != -1 {
        return (2, false);
    }
    (open_report(&report_path(FALLBACK, pid)).unwrap_or(-1), true)
}

/// The program's name (`/proc/self/comm`, at most 15 bytes), read without allocating.
struct Program {
    name: [u8; 16],
    len: usize,
}

impl Program {
    fn read() -> Program {
        let mut p = Program {
            name: [0; 16],
            len: 0,
        };
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe {
            libc::open(
                c"/proc/self/comm".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: `name` is valid for writes of its length.
            let n = unsafe { libc::read(fd, p.name.as_mut_ptr().cast(), p.name.len()) };
            p.len = usize::try_from(n).unwrap_or(0);
            // SAFETY: the descriptor opened above, closed once.
            unsafe { libc::close(fd) };
        }
        while p.len > 0 && p.name.get(p.len - 1) == Some(&b'\n') {
            p.len -= 1;
        }
        p
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match core::str::from_utf8(self.name.get(..self.len).unwrap_or(&[])) {
            Ok(name) if !name.is_empty() => f.write_str(name),
            _ => f.write_str("?"),
        }
    }
}

/// Writes the heap's figures (`figures`, or why there are none), one line each prefixed
/// `tagalloc: PROGRAM[PID] WHEN:`, where `to` says.
pub(crate) fn stats(when: &str, to: To, figures: Option<PoolStats>) {
    let pid = std::process::id();
    let program = Program::read();
    let (fd, opened) = destination(to, pid);
    if fd < 0 {
        return;
    }
    report_to(fd, when, &program, pid, figures);
    if opened {
        // SAFETY: the descriptor `destination` opened, closed once.
        unsafe { libc::close(fd) };
    }
}

fn report_to(fd: i32, when: &str, program: &Program, pid: u32, figures: Option<PoolStats>) {
    let line = |args: fmt::Arguments<'_>| line_to(fd, args);
    let Some(s) = figures else {
        line(format_args!(
            "tagalloc: {program}[{pid}] {when}: no statistics (the pool's lock is held by this \
             thread)"
        ));
        return;
    };
    let h = &s.heap;
    line(format_args!(
        "tagalloc: {program}[{pid}] {when}: reserved {} (peak {}) in {}, {} more kept for \
         reuse; in use {} (peak {}) in {}",
        Bytes(s.reserved),
        Bytes(s.peak_reserved),
        count(h.regions, "region", "regions"),
        Bytes(s.cached),
        Bytes(h.in_use),
        Bytes(h.peak_in_use),
        count(h.live, "block", "blocks"),
    ));
    line(format_args!(
        "tagalloc: {program}[{pid}] {when}: free {} in {}, largest {}: fragmentation {:.1} % \
         (1 - largest free / free)",
        Bytes(h.free),
        count(h.free_chunks, "chunk", "chunks"),
        Bytes(h.largest_free),
        h.fragmentation() * 100.0,
    ));
    line(format_args!(
        "tagalloc: {program}[{pid}] {when}: {}, {}, {}, {}; regions obtained {}, given back {}, \
         grown in place {}; {} bypassed",
        count(h.allocs, "allocation", "allocations"),
        count(h.frees, "free", "frees"),
        count(h.reallocs_in_place, "realloc in place", "reallocs in place"),
        count(refused(), "refused free", "refused frees"),
        s.regions_obtained,
        s.regions_given_back,
        s.grown,
        count(s.bypassed, "request", "requests"),
    ));
    let c = &s.cache;
    let hit_rate = c.hits as f64 / (c.hits + c.misses).max(1) as f64;
    line(format_args!(
        "tagalloc: {program}[{pid}] {when}: thread caches hold {} in {} (counted in use); {}, \
         {} ({:.1} % hits), {}, {} flushed (as of each cache's last exchange)",
        Bytes(c.bytes),
        count(c.blocks, "block", "blocks"),
        count(c.hits, "hit", "hits"),
        count(c.misses, "miss", "misses"),
        hit_rate * 100.0,
        count(c.spills, "spill", "spills"),
        c.flushes,
    ));
}

/// Writes `args` to a C stream (`malloc_info`); whether all of it was written. The text is
/// built on the stack first (cut to 1 KiB).
pub(crate) fn to_stream(stream: *mut libc::FILE, args: fmt::Arguments<'_>) -> bool {
    let mut buf = Buf::new();
    let whole = buf.write_fmt(args).is_ok();
    let text = buf.bytes.get(..buf.len).unwrap_or(&[]);
    // SAFETY: `text` is valid for reads of its length; the caller of `malloc_info` promised a
    // valid stream.
    let n = unsafe { libc::fwrite(text.as_ptr().cast(), 1, text.len(), stream) };
    whole && n == text.len()
}
