//! One thread-local word in the initial-exec TLS model: where the calling thread's cache slot
//! is, read in two moves, for the per-thread caches' fast path.
//!
//! **Why.** Rust's thread-locals in a shared library use the general-dynamic model: every
//! access calls `__tls_get_addr`, a large share of the malloc library's `malloc`+`free`
//! pair (figures: `docs/measurements.md`, "the initial-exec word, the range hint"). Stable Rust
//! cannot choose a TLS model, so on x86-64 Linux, with the `initial-exec-tls` feature, this word is
//! defined in assembly in `.tbss` and read as compilers read an initial-exec variable: its offset
//! from the thread pointer from the GOT (`@GOTTPOFF`, filled once by the loader), then the word at
//! `fs:` that offset. Elsewhere (other targets, Miri, the feature off) [`get`] is always null and
//! [`set`] does nothing, so callers keep their general path.
//!
//! **Why a feature.** An initial-exec variable lives in the static TLS block, which is sized
//! when a thread starts: fine for an executable and a preloaded library (the malloc library
//! enables the feature), but a library `dlopen`ed later takes the room from glibc's small
//! surplus (`glibc.rtld.optional_static_tls`, 512 bytes by default), and its `dlopen` fails
//! when that is gone. A library built on `tagalloc-host` that may be `dlopen`ed keeps it off.
//!
//! **What it holds.** Null, or a pointer its thread stored with [`set`]; every thread starts
//! with null (`.tbss` is zero in each new thread's block, and glibc zeroes it in every running
//! thread when a library with static TLS is loaded). Only its own thread reads or writes it,
//! and a forked child's thread has a copy at the same address.

#[cfg(all(
    feature = "initial-exec-tls",
    target_arch = "x86_64",
    target_os = "linux",
    not(miri)
))]
mod imp {
    // The word: 8 zero bytes of `.tbss`, a TLS object visible to the whole linked object but
    // not exported from it (hidden), so no other object can interpose it.
    core::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 3",
        ".globl tagalloc_host_cache_slot",
        ".hidden tagalloc_host_cache_slot",
        ".type tagalloc_host_cache_slot, @tls_object",
        ".size tagalloc_host_cache_slot, 8",
        "tagalloc_host_cache_slot:",
        ".zero 8",
        ".popsection",
    );

    /// The calling thread's word.
    #[inline(always)]
    pub(super) fn get() -> *const () {
        let p: *const ();
        // The GOT entry `@GOTTPOFF` names holds the word's offset from the thread pointer (a
        // relocation the loader resolves before any code runs, or the linker replaces by the
        // constant in an executable); `fs:` is the thread pointer on x86-64 Linux.
        // SAFETY: so the second move reads the calling thread's own 8-byte-aligned word of its
        // static TLS block, which exists for the thread's whole life. It only reads memory.
        unsafe {
            core::arch::asm!(
                "mov {p}, qword ptr [rip + tagalloc_host_cache_slot@GOTTPOFF]",
                "mov {p}, qword ptr fs:[{p}]",
                p = out(reg) p,
                options(nostack, preserves_flags, readonly),
            );
        }
        p
    }

    /// Stores `p` in the calling thread's word.
    #[inline]
    pub(super) fn set(p: *const ()) {
        // SAFETY: as in `get`: the address is the calling thread's own word, which no other
        // thread reads or writes.
        unsafe {
            core::arch::asm!(
                "mov {o}, qword ptr [rip + tagalloc_host_cache_slot@GOTTPOFF]",
                "mov qword ptr fs:[{o}], {p}",
                o = out(reg) _,
                p = in(reg) p,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(all(
    feature = "initial-exec-tls",
    target_arch = "x86_64",
    target_os = "linux",
    not(miri)
)))]
mod imp {
    /// Always null: no initial-exec word here.
    #[inline(always)]
    pub(super) fn get() -> *const () {
        core::ptr::null()
    }

    /// Does nothing.
    #[inline(always)]
    pub(super) fn set(_: *const ()) {}
}

/// The calling thread's word: null, or what it last stored with [`set`] (always null where
/// the word does not exist).
#[inline(always)]
pub(crate) fn get() -> *const () {
    imp::get()
}

/// Stores `p` in the calling thread's word (nothing where the word does not exist).
#[inline]
pub(crate) fn set(p: *const ()) {
    imp::set(p);
}

/// Whether this build has the word (else [`get`] is always null).
#[cfg(test)]
pub(crate) const PRESENT: bool = cfg!(all(
    feature = "initial-exec-tls",
    target_arch = "x86_64",
    target_os = "linux",
    not(miri)
));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_has_its_own_word_starting_null() {
        // Addresses as integers: the word is only compared here, never followed (no cache is
        // used on these threads).
        let mine = 0x1000usize;
        set(mine as *const ());
        let other = std::thread::spawn(|| {
            let first = get() as usize;
            set(0x2000usize as *const ());
            (first, get() as usize)
        })
        .join()
        .unwrap();
        if PRESENT {
            assert_eq!(other, (0, 0x2000));
            assert_eq!(get() as usize, mine);
        } else {
            assert_eq!(other, (0, 0));
            assert!(get().is_null());
        }
        set(core::ptr::null());
    }
}
