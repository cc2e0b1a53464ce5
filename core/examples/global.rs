//! tagalloc as the program's global allocator, over a static array: the one line a `no_std`
//! program (or any program) needs, shown here in a hosted binary so it can print.
//!
//! Run: `cargo run -p tagalloc --example global`

use std::collections::BTreeMap;

use tagalloc::GlobalHeap;

static mut ARENA: [u8; 8 << 20] = [0; 8 << 20];

#[global_allocator]
static HEAP: GlobalHeap = GlobalHeap::with_arena(&raw mut ARENA);

fn main() {
    if let Some(a) = std::env::args().nth(1) {
        let usage = "usage: global\nOrdinary collections over a GlobalHeap in a static array, \
                     then the heap's statistics.";
        if a == "--help" || a == "-h" {
            println!("{usage}");
            return;
        }
        eprintln!("global: takes no arguments ({a})\n{usage}");
        std::process::exit(2);
    }
    // Ordinary collections now live in `ARENA`.
    let mut words: BTreeMap<String, usize> = BTreeMap::new();
    let text = "the quick brown fox jumps over the lazy dog and the dog sleeps";
    for round in 0..200 {
        for w in text.split(' ') {
            *words.entry(format!("{w}{}", round % 17)).or_default() += 1;
        }
    }
    let mut v: Vec<u64> = Vec::new();
    for i in 0..100_000 {
        v.push(i * i);
    }
    let total: u64 = v.iter().sum();
    drop(v);

    let s = HEAP.stats().expect("not called from inside with_heap");
    println!("{} distinct words, sum of squares {total}", words.len());
    println!(
        "heap: {} B in use in {} chunks (peak {} B) of {} B managed; {} free chunks, largest {} B, fragmentation {:.3}",
        s.in_use,
        s.live,
        s.peak_in_use,
        s.managed,
        s.free_chunks,
        s.largest_free,
        s.fragmentation()
    );
    match HEAP
        .with_heap(|h| h.check())
        .expect("not called from inside with_heap")
    {
        Ok(()) => println!("check(): every invariant holds"),
        Err(e) => {
            println!("check(): {e}");
            std::process::exit(1);
        }
    }
}
