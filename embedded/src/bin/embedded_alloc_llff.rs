//! embedded-alloc's linked-list heap (`LlffHeap`), as its README shows it.
#![no_std]
#![no_main]

use embedded_alloc::LlffHeap as Heap;
use tagalloc_embedded::entry;

static mut ARENA: [u8; 4096] = [0; 4096];

#[global_allocator]
static HEAP: Heap = Heap::empty();

entry!({
    // SAFETY: called once, before any allocation; the array is used by nothing else.
    unsafe { HEAP.init((&raw mut ARENA) as usize, 4096) }
});
