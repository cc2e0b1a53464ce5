//! rlsf's `Tlsf` with the parameters of its README (`u16, u16, 12, 16`), behind a spin lock
//! (rlsf's own global allocator, `GlobalTlsf`, is for hosted targets only).
#![no_std]
#![no_main]

use core::alloc::{GlobalAlloc, Layout};
use core::mem::MaybeUninit;
use core::ptr::{null_mut, NonNull};

use rlsf::Tlsf;
use spinning_top::Spinlock;
use tagalloc_embedded::entry;

static mut ARENA: [MaybeUninit<u8>; 4096] = [MaybeUninit::uninit(); 4096];

struct Locked(Spinlock<Tlsf<'static, u16, u16, 12, 16>>);

// SAFETY: blocks come from `Tlsf`, which hands out fresh, aligned, non-overlapping blocks; the
// lock serialises every call.
unsafe impl GlobalAlloc for Locked {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0
            .lock()
            .allocate(layout)
            .map_or(null_mut(), NonNull::as_ptr)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: `GlobalAlloc`'s contract: `ptr` came from `alloc` with `layout`.
            unsafe { self.0.lock().deallocate(p, layout.align()) }
        }
    }
}

#[global_allocator]
static HEAP: Locked = Locked(Spinlock::new(Tlsf::new()));

entry!({
    // SAFETY: the array is handed over once, before any allocation, and used by nothing else,
    // so this is the only reference to it.
    let arena = unsafe { core::slice::from_raw_parts_mut((&raw mut ARENA).cast(), 4096) };
    HEAP.0.lock().insert_free_block(arena);
});
