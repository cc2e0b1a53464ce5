//! The size of each heap's own state on the machine that runs this (`cargo run -p tagalloc
//! --example sizes`): what a `static` of each costs, beside the memory it manages. The figures
//! for a 32-bit microcontroller come from `.ci/embedded`, which builds for one.

use core::mem::size_of;

use tagalloc::{
    Compact, Counters, DetachedHeap, GlobalHeap, HostGranule, InlineHeap, Record, SpinLock,
};

fn main() {
    let rows: [(&str, usize); 5] = [
        ("InlineHeap", size_of::<InlineHeap>()),
        ("GlobalHeap", size_of::<GlobalHeap>()),
        (
            "DetachedHeap<&mut [Record]>",
            size_of::<DetachedHeap<&mut [Record]>>(),
        ),
        (
            "InlineHeap<HostGranule, Counters, Compact>",
            size_of::<InlineHeap<HostGranule, Counters, Compact>>(),
        ),
        (
            "GlobalHeap<SpinLock, 4, HostGranule, Counters, Compact>",
            size_of::<GlobalHeap<SpinLock, 4, HostGranule, Counters, Compact>>(),
        ),
    ];
    for (name, bytes) in rows {
        println!("{name}: {bytes} bytes");
    }
}
