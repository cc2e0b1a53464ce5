//! [`LinkedBlocks`]: cached blocks of one class still linked as in the cache they came from,
//! moved whole between a cache and the pool's transfer.

use core::ptr::NonNull;

use crate::error::CheckError;
use crate::share::cache::link::{decode, link_fault, link_mask, link_sound, OnDamage};

/// Blocks of one class linked through their first words as a cache links them (each link
/// encoded with its own address and the mask of `key`, the last one null: see
/// [`crate::ThreadCache`]'s safe linking), each with `key`, the caches' key, in its second
/// word; `len` of them, at least one. `on_damage` is the handler of the cache it came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkedBlocks {
    pub(crate) head: NonNull<u8>,
    pub(crate) len: u32,
    pub(crate) key: usize,
    pub(crate) on_damage: OnDamage,
}

impl LinkedBlocks {
    /// Calls `each` on every block of the batch, in order, with its key cleared (a block
    /// leaving every cache, for the heap). A damaged link or key stops the walk there: it is
    /// reported to `on_damage`, and the blocks from there on are dropped, never followed.
    ///
    /// # Safety
    /// The batch is as its type says (but for what the program wrote over its blocks after
    /// freeing them), and owned by the caller, which gives it up.
    pub(crate) unsafe fn drain(self, mut each: impl FnMut(NonNull<u8>)) {
        let mask = link_mask(self.key);
        let mut next = Some(self.head);
        for i in 1..=self.len {
            let Some(p) = next else { break };
            // SAFETY: the caller's promise: `p` is a block of the batch, at least 24 bytes,
            // 8-aligned, owned; its link and key are read and checked before the block is
            // given away.
            let (link, k) = unsafe { (decode(p, mask), p.cast::<usize>().add(1).read()) };
            if !link_sound(link, i == self.len, k, self.key) {
                let what = link_fault(link, i == self.len, k, self.key);
                (self.on_damage)(CheckError::new(what, p.as_ptr() as usize));
                return;
            }
            // SAFETY: as above.
            unsafe { p.cast::<usize>().add(1).write(0) };
            next = NonNull::new(link);
            each(p);
        }
    }
}
