//! tagalloc's `GlobalHeap` with the bins of small machines (`Compact`) and a queue of 4 frees,
//! empty until the program gives it memory.
#![no_std]
#![no_main]

use tagalloc::{Compact, Counters, GlobalHeap, HostGranule, SpinLock};
use tagalloc_embedded::entry;

static mut ARENA: [u8; 4096] = [0; 4096];

#[global_allocator]
static HEAP: GlobalHeap<SpinLock, 4, HostGranule, Counters, Compact> = GlobalHeap::with_lock();

entry!({
    // SAFETY: the array is handed over once and used by nothing else.
    let _ = unsafe { HEAP.add_region((&raw mut ARENA).cast(), 4096) };
});
