//! tagalloc's default `GlobalHeap` over a static array (`with_arena`), as `docs/usage.md` shows it:
//! the static holds the array's address.
#![no_std]
#![no_main]

use tagalloc::GlobalHeap;
use tagalloc_embedded::entry;

static mut ARENA: [u8; 4096] = [0; 4096];

#[global_allocator]
static HEAP: GlobalHeap = GlobalHeap::with_arena(&raw mut ARENA);

entry!({});
