//! What the library says on stderr, written with `write(2)` from a buffer on the stack: the
//! heap's figures at exit (`TAGALLOC_STATS`) or on `malloc_stats()`, and the first refused
//! free. None of it allocates: this runs inside the allocator, or after the program has
//! started tearing itself down. The program's `errno` is left as it was.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tagalloc::Error;

use crate::pool;

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
    let mut buf = Buf::new();
    let _ = buf.write_fmt(args);
    write_stderr(buf.finish());
}

/// `write(2)` of all of `bytes` to stderr, keeping the caller's `errno`.
fn write_stderr(mut bytes: &[u8]) {
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reads of its length.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
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

/// Frees (and reallocs) refused: a double free, or, in checked mode, a pointer this allocator
/// did not hand out.
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Whether the first refusal has been reported.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// How many frees and reallocs were refused so far.
pub(crate) fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Counts a refused `call` of `ptr`, and reports the first one on stderr.
#[cold]
#[inline(never)]
pub(crate) fn refusal(call: &str, ptr: *mut u8, why: Error) {
    REFUSED.fetch_add(1, Ordering::Relaxed);
    if REPORTED.swap(true, Ordering::Relaxed) {
        return;
    }
    let what = match why {
        Error::DoubleFree => "a double free",
        Error::ForeignPointer => "not a block this allocator handed out",
        _ => "refused by the heap",
    };
    line(format_args!(
        "tagalloc: {call}({ptr:p}) refused: {what} ({why}); nothing was freed. Further refusals \
         are counted, not reported (TAGALLOC_STATS=1 prints the count at exit)."
    ));
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

/// Writes the heap's figures to stderr, one line each prefixed `tagalloc:`.
pub(crate) fn stats(when: &str) {
    let pid = std::process::id();
    let Some(s) = pool::stats() else {
        line(format_args!(
            "tagalloc: [{pid}] {when}: no statistics (the pool's lock is held by this thread)"
        ));
        return;
    };
    let h = &s.heap;
    line(format_args!(
        "tagalloc: [{pid}] {when}: reserved {} (peak {}) in {} regions; in use {} (peak {}) in \
         {} blocks",
        Bytes(s.reserved),
        Bytes(s.peak_reserved),
        h.regions,
        Bytes(h.in_use),
        Bytes(h.peak_in_use),
        h.live,
    ));
    line(format_args!(
        "tagalloc: [{pid}] {when}: free {} in {} chunks, largest {}: fragmentation {:.1} % \
         (1 - largest free / free)",
        Bytes(h.free),
        h.free_chunks,
        Bytes(h.largest_free),
        h.fragmentation() * 100.0,
    ));
    line(format_args!(
        "tagalloc: [{pid}] {when}: {} allocations, {} frees, {} reallocs in place, {} refused \
         frees; regions obtained {}, given back {}, grown in place {}; {} requests bypassed",
        h.allocs,
        h.frees,
        h.reallocs_in_place,
        refused(),
        s.regions_obtained,
        s.regions_given_back,
        s.grown,
        s.bypassed,
    ));
    let c = &s.cache;
    let hit_rate = c.hits as f64 / (c.hits + c.misses).max(1) as f64;
    line(format_args!(
        "tagalloc: [{pid}] {when}: thread caches hold {} in {} blocks (counted in use); {} hits, \
         {} misses ({:.1} % hits), {} spills, {} flushed (as of each cache's last exchange)",
        Bytes(c.bytes),
        c.blocks,
        c.hits,
        c.misses,
        hit_rate * 100.0,
        c.spills,
        c.flushes,
    ));
}

/// The exit handler registered when `TAGALLOC_STATS` is set.
pub(crate) extern "C" fn at_exit() {
    stats("at exit");
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
