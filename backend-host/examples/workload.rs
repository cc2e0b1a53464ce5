//! A `std` program on the host pool: the one-line `#[global_allocator]`, then a word-count
//! pipeline (strings built by producer threads, sent over channels to counting threads, whose
//! `HashMap`s are sent on and merged into a `BTreeMap`, with `Vec`s sorted along the way), then
//! everything dropped, `trim()`, and the pool's statistics with the process's resident memory
//! (`/proc/self/statm`) before and after the trim.
//!
//! `cargo run --release -p tagalloc-host --example workload`

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

#[global_allocator]
static A: tagalloc_host::HostAllocator = tagalloc_host::HostAllocator::new();

const PRODUCERS: usize = 4;
const COUNTERS: usize = 3;
const DOCS_PER_PRODUCER: usize = 300;
const WORDS_PER_DOC: usize = 10_000;

/// The process's resident memory in MiB (`/proc/self/statm`, second field, in pages).
fn resident_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .unwrap_or(f64::NAN);
    // SAFETY: `sysconf` has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
    pages * page / (1 << 20) as f64
}

/// A deterministic word for `(doc, i)`: a few thousand distinct words, Zipf-like in frequency.
fn word(doc: usize, i: usize) -> String {
    let x = (doc.wrapping_mul(2654435761) ^ i.wrapping_mul(40503)) % 10_000 + 1;
    let rank = 10_000 / x; // small ranks are frequent
    format!("w{rank}{}", ["", "s", "ed", "ing"][x % 4])
}

fn main() {
    if let Some(a) = std::env::args().nth(1) {
        let usage = "usage: workload\nA word-count pipeline on HostAllocator, then trim(): the \
                     pool's statistics and the process's resident memory before and after.";
        if a == "--help" || a == "-h" {
            println!("{usage}");
            return;
        }
        eprintln!("workload: takes no arguments ({a})\n{usage}");
        std::process::exit(2);
    }
    let t0 = Instant::now();
    // Producers build documents (long strings) and hand them to the counters.
    let (doc_tx, doc_rx) = mpsc::sync_channel::<String>(64);
    let doc_rx = std::sync::Arc::new(std::sync::Mutex::new(doc_rx));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let tx = doc_tx.clone();
            thread::spawn(move || {
                for d in 0..DOCS_PER_PRODUCER {
                    let doc_id = p * DOCS_PER_PRODUCER + d;
                    let mut text = String::new();
                    for i in 0..WORDS_PER_DOC {
                        text.push_str(&word(doc_id, i));
                        text.push(' ');
                    }
                    tx.send(text).expect("counters alive");
                }
            })
        })
        .collect();
    drop(doc_tx);
    // Counters receive documents, count their words in a HashMap each, and send the maps on.
    let (count_tx, count_rx) = mpsc::channel::<HashMap<String, u64>>();
    let counters: Vec<_> = (0..COUNTERS)
        .map(|_| {
            let rx = doc_rx.clone();
            let tx = count_tx.clone();
            thread::spawn(move || loop {
                let doc = match rx.lock().expect("not poisoned").recv() {
                    Ok(doc) => doc,
                    Err(_) => break,
                };
                let mut counts: HashMap<String, u64> = HashMap::new();
                for w in doc.split_whitespace() {
                    *counts.entry(w.to_owned()).or_default() += 1;
                }
                tx.send(counts).expect("merger alive");
            })
        })
        .collect();
    drop(count_tx);
    // The merger keeps every per-document map until the end (memory to give back later), and
    // merges them into one ordered index.
    let mut kept: Vec<HashMap<String, u64>> = Vec::new();
    let mut index: BTreeMap<String, u64> = BTreeMap::new();
    for counts in count_rx {
        for (w, n) in &counts {
            *index.entry(w.clone()).or_default() += n;
        }
        kept.push(counts);
    }
    for h in producers.into_iter().chain(counters) {
        h.join().expect("worker");
    }
    let mut top: Vec<(&String, &u64)> = index.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let total: u64 = index.values().sum();
    assert_eq!(
        total,
        (PRODUCERS * DOCS_PER_PRODUCER * WORDS_PER_DOC) as u64
    );
    assert_eq!(kept.len(), PRODUCERS * DOCS_PER_PRODUCER);
    println!(
        "{} documents, {total} words, {} distinct; most frequent: {:?}; {:.2?}",
        kept.len(),
        index.len(),
        &top[..3],
        t0.elapsed()
    );

    let peak_rss = resident_mib();
    let st = A.stats().expect("stats");
    println!(
        "with everything live: resident {peak_rss:.1} MiB; pool reserved {:.1} MiB, in use {:.1} \
         MiB, {} live blocks in {} regions",
        st.reserved as f64 / (1 << 20) as f64,
        st.heap.in_use as f64 / (1 << 20) as f64,
        st.heap.live,
        st.heap.regions
    );
    drop(top);
    drop(kept);
    drop(index);

    let before = resident_mib();
    let t = A.trim().expect("trim");
    let after = resident_mib();
    let st = A.stats().expect("stats");
    println!("after dropping it all: resident {before:.1} MiB before trim, {after:.1} MiB after");
    println!(
        "trim: {} regions given back, {:.1} MiB unmapped (regions and free ends), {:.1} MiB of \
         pages released",
        t.regions,
        t.bytes as f64 / (1 << 20) as f64,
        t.released as f64 / (1 << 20) as f64
    );
    println!(
        "pool: reserved {:.1} MiB (peak {:.1} MiB), in use {:.1} KiB (peak {:.1} MiB), \
         {} allocations, {} frees, {} regions obtained, {} given back, {} grown in place, {} cut, \
         {} bypassed, {} queued frees",
        st.reserved as f64 / (1 << 20) as f64,
        st.peak_reserved as f64 / (1 << 20) as f64,
        st.heap.in_use as f64 / 1024.0,
        st.heap.peak_in_use as f64 / (1 << 20) as f64,
        st.heap.allocs,
        st.heap.frees,
        st.regions_obtained,
        st.regions_given_back,
        st.grown,
        st.shrunk,
        st.bypassed,
        A.pool().queued_frees(),
    );
}
