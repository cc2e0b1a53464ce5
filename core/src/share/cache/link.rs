//! Safe linking: how a cached block's link is stored (masked with its own address and the
//! caches' key) and checked before it is followed, and what a damaged one does (see the
//! cache's module docs, "Safe linking").

use core::ptr::NonNull;

use crate::error::CheckError;
use crate::inline::granule::HOST_GEOMETRY;

/// What a cache does with a damaged link or key (see the module docs), after dropping the
/// class's list: the malloc library reports the block's address and aborts, as glibc does on a
/// bad tcache link ("malloc(): unaligned tcache chunk detected"). The default does nothing more.
pub type OnDamage = fn(CheckError);

/// The default [`OnDamage`]: the list is dropped, nothing else.
pub(crate) fn ignore_damage(_: CheckError) {}

/// The address bits a decoded link must have clear: the granule's (a payload is granule-aligned)
/// and those from 2^57 up (x86-64's five-level paging and AArch64's 52-bit addresses stay below).
pub(crate) const BAD_LINK_BITS: usize =
    (HOST_GEOMETRY.granule() - 1) | ((!((1u64 << 57) - 1)) as usize);

/// What a link is XORed with besides its own address: derived from the caches' `key`, so that a
/// program that knows where a block lies still cannot forge its link without the secret.
#[inline]
pub(crate) const fn link_mask(key: usize) -> usize {
    key.rotate_left(29)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize)
}

/// A cached block's link as stored in its first word: `next` (or null) XORed with `at`'s
/// address shifted right by 12 and with `mask` (see the module docs). The stored pointer keeps
/// `next`'s provenance.
#[inline]
pub(crate) fn encode(at: NonNull<u8>, next: Option<NonNull<u8>>, mask: usize) -> *mut u8 {
    let salt = (at.as_ptr() as usize >> 12) ^ mask;
    match next {
        Some(n) => n.as_ptr().map_addr(|a| a ^ salt),
        None => core::ptr::without_provenance_mut(salt),
    }
}

/// The link stored in the first word of the cached block `at`, decoded (its address not yet
/// checked).
///
/// # Safety
/// `at` is a cached block (at least 16 bytes, 8-aligned) the caller may read.
#[inline]
pub(crate) unsafe fn decode(at: NonNull<u8>, mask: usize) -> *mut u8 {
    let salt = (at.as_ptr() as usize >> 12) ^ mask;
    // SAFETY: the caller's promise.
    unsafe { at.cast::<*mut u8>().read() }.map_addr(|a| a ^ salt)
}

/// What a link that decodes to no block's address says.
pub(crate) const LINK_OVERWRITTEN: &str =
    "a cached block's link was overwritten (a write after free?)";

/// Whether the link of a cached block, decoded as `next`, can be followed, when `last` says
/// whether the block ends its list and `key` is its second word.
#[inline(always)]
pub(crate) fn link_sound(next: *mut u8, last: bool, key: usize, expected: usize) -> bool {
    key == expected && next.addr() & BAD_LINK_BITS == 0 && next.is_null() == last
}

/// What is wrong with a link [`link_sound`] refused, in words.
#[cold]
pub(crate) fn link_fault(next: *mut u8, last: bool, key: usize, expected: usize) -> &'static str {
    if key != expected {
        "a cached block's key was overwritten (a write after free?)"
    } else if next.addr() & BAD_LINK_BITS != 0 {
        LINK_OVERWRITTEN
    } else if next.is_null() != last {
        "a cached block's link disagrees with its list's length (a write after free?)"
    } else {
        "a cached block's link is sound"
    }
}
