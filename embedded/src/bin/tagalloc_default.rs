//! tagalloc's default `GlobalHeap`, empty until the program gives it memory.
#![no_std]
#![no_main]

use tagalloc::GlobalHeap;
use tagalloc_embedded::entry;

static mut ARENA: [u8; 4096] = [0; 4096];

#[global_allocator]
static HEAP: GlobalHeap = GlobalHeap::new();

entry!({
    // SAFETY: the array is handed over once and used by nothing else.
    let _ = unsafe { HEAP.add_region((&raw mut ARENA).cast(), 4096) };
});
