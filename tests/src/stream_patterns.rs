//! Synthetic multi-stream device traces of the patterns PyTorch users run with several CUDA
//! streams, generated in code and deterministic in a seed, for the device benchmark
//! (`tagalloc-bench device pipeline|prefetch|buckets`) and tests that must not need the shared
//! traces. [`crate::device_replay::synthetic_trace`] is the pattern-free one.
//!
//! Each is a few training steps of a transformer-like model in bf16 (2 bytes per element):
//! per layer, the tensors an eager forward and backward allocate and free (layer norm, the
//! QKV projection, attention output and its log-sum-exp, the MLP's up projection and
//! activation at four times the width, and their gradients), sizes in MB (a `[tokens, hidden]`
//! activation is 4 to 32 MiB here), the number of tokens drawn per step from the seed so that
//! sizes vary from step to step as they do with variable-length batches. A block used by a
//! stream other than the one that allocated it is freed with `u=<that stream>` on its own
//! stream (`s=`), as PyTorch's `record_stream` does (see `FORMAT.md`):
//!
//! - [`Pattern::Pipeline`]: pipeline parallelism in one process, four stages on streams 0 to
//!   3 (GPipe schedule: every microbatch's forward through the stages, then every backward in
//!   reverse). A stage allocates its output activation on its stream and hands it to the next
//!   stage, whose first layer uses it; it is then freed `s=<producer> u=<consumer>`. Backward
//!   hands gradients the other way (`s=k+1 u=k`). Activations for backward stay live on each
//!   stage until its backward.
//! - [`Pattern::Prefetch`]: parameters and activation checkpoints offloaded to the host.
//!   Compute on stream 0, copies in on stream 1, copies out on stream 2. Each layer's
//!   parameters are prefetched one layer ahead on the copy stream (allocated there) and freed
//!   after the compute stream used them (`s=1 u=0`); each layer's input, the checkpoint, is
//!   copied out on the eviction stream and then freed (`s=0 u=2`); backward brings the
//!   checkpoints back on the copy stream (`s=1 u=0`), recomputes the layer, and evicts the
//!   weight gradients it allocates on compute (`s=0 u=2`).
//! - [`Pattern::Buckets`]: data-parallel gradient reduction as DDP does it. Compute on stream
//!   0, communication on stream 1; backward allocates each layer's weight gradients on
//!   compute, packs them in reverse order into buckets of at most 25 MiB (the first of a step
//!   at most 1 MiB, DDP's defaults `bucket_cap_mb=25`, `first_bucket_cap_mb=1`), allocated on
//!   compute and all-reduced on the communication stream; the host frees a bucket once two
//!   newer ones are in flight (`s=0 u=1`), and the rest at the end of backward; then the
//!   optimizer's temporaries.

use std::collections::VecDeque;

use crate::trace::{Event, Trace};

/// The patterns, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// Four pipeline stages on four streams.
    Pipeline,
    /// Parameters prefetched on a copy stream, checkpoints and gradients evicted on a third.
    Prefetch,
    /// Gradient buckets all-reduced on a communication stream.
    Buckets,
}

impl Pattern {
    /// Every pattern, in the order the benchmark shows them.
    pub const ALL: [Pattern; 3] = [Pattern::Pipeline, Pattern::Prefetch, Pattern::Buckets];

    /// The name the benchmark's command line takes.
    pub const fn name(self) -> &'static str {
        match self {
            Pattern::Pipeline => "pipeline",
            Pattern::Prefetch => "prefetch",
            Pattern::Buckets => "buckets",
        }
    }

    /// The pattern called `name` ([`Pattern::name`]).
    pub fn named(name: &str) -> Option<Pattern> {
        Pattern::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The name of the generated trace: `synthetic-` and the pattern's name.
    pub fn trace_name(self) -> String {
        format!("synthetic-{}", self.name())
    }

    /// One line on what the trace is.
    pub const fn describe(self) -> &'static str {
        match self {
            Pattern::Pipeline => {
                "a 4-stage pipeline (GPipe, 4 microbatches, 2 layers of hidden 2048 per stage), \
                 one stream per stage; activations handed to the next stage and gradients to \
                 the previous one, freed with `u=` the consumer"
            }
            Pattern::Prefetch => {
                "12 layers of hidden 2048 with parameters prefetched on a copy stream (1) and \
                 freed after use on compute (0) with `u=0`, checkpoints and weight gradients \
                 evicted on a third stream (2), freed with `u=2`"
            }
            Pattern::Buckets => {
                "12 layers of hidden 1024 on compute (0), weight gradients packed into DDP's \
                 buckets (at most 25 MiB, the first 1 MiB) all-reduced on a communication \
                 stream (1) and freed with `u=1`"
            }
        }
    }

    /// Training steps that make a trace of a few thousand events.
    pub const fn default_steps(self) -> usize {
        match self {
            Pattern::Pipeline => 3,
            Pattern::Prefetch => 3,
            Pattern::Buckets => 5,
        }
    }

    /// The trace of `steps` training steps (at least one), deterministic in `seed`.
    pub fn trace(self, steps: usize, seed: u64) -> Trace {
        let mut g = Gen::new(seed);
        for _ in 0..steps.max(1) {
            match self {
                Pattern::Pipeline => pipeline_step(&mut g),
                Pattern::Prefetch => prefetch_step(&mut g),
                Pattern::Buckets => buckets_step(&mut g),
            }
        }
        Trace {
            name: self.trace_name(),
            events: g.events,
        }
    }
}

/// A live tensor of the trace: its id and the stream it was allocated on.
#[derive(Clone, Copy, Debug)]
struct Tensor {
    id: u64,
    stream: u32,
}

/// The trace being written, and its random numbers.
struct Gen {
    rng: u64,
    next_id: u64,
    events: Vec<Event>,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            // Spread small seeds apart; never zero (xorshift's fixed point).
            rng: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            next_id: 0,
            events: Vec::new(),
        }
    }

    /// xorshift64*, as `synthetic_trace` draws.
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Tokens for a step: a multiple of 128 from `lo` to `hi`.
    fn tokens(&mut self, lo: usize, hi: usize) -> usize {
        let steps = (hi - lo) / 128 + 1;
        lo + 128 * (self.next() % steps as u64) as usize
    }

    fn alloc(&mut self, size: usize, stream: u32) -> Tensor {
        let id = self.next_id;
        self.next_id += 1;
        self.events.push(Event::Alloc {
            id,
            size,
            align: None,
            thread: None,
            stream: Some(stream),
        });
        Tensor { id, stream }
    }

    /// Frees `t` on its own stream, used by no other.
    fn free(&mut self, t: Tensor) {
        self.events.push(Event::Free {
            id: t.id,
            thread: None,
            stream: Some(t.stream),
            used: None,
        });
    }

    /// Frees `t` on its own stream after stream `used` used it too (`record_stream`).
    fn free_used(&mut self, t: Tensor, used: u32) {
        self.events.push(Event::Free {
            id: t.id,
            thread: None,
            stream: Some(t.stream),
            used: (used != t.stream).then_some(used),
        });
    }
}

/// bf16.
const ELEMENT: usize = 2;

/// A layer's dimensions for one (micro)batch.
#[derive(Clone, Copy)]
struct Shape {
    tokens: usize,
    hidden: usize,
}

impl Shape {
    /// A `[tokens, hidden]` activation.
    fn act(self) -> usize {
        self.tokens * self.hidden * ELEMENT
    }

    /// Attention's log-sum-exp, fp32 per token and head of 128.
    fn lse(self) -> usize {
        self.tokens * (self.hidden / 128) * 4
    }

    /// The layer's weight matrices (QKV, output projection, MLP up and down), in the order
    /// the forward uses them.
    fn weights(self) -> [usize; 4] {
        let h2 = self.hidden * self.hidden * ELEMENT;
        [3 * h2, h2, 4 * h2, 4 * h2]
    }
}

/// The activations a layer's forward keeps for its backward.
struct Saved {
    ln: Tensor,
    qkv: Tensor,
    lse: Tensor,
    attn: Tensor,
    ln2: Tensor,
    up: Tensor,
    gelu: Tensor,
}

/// One layer's forward on `s` from `input` (which the caller frees): its output, and what it
/// keeps for backward (`keep`), else everything but the output is freed as it dies.
fn forward_layer(g: &mut Gen, s: u32, sh: Shape, keep: bool) -> (Tensor, Option<Saved>) {
    let a = sh.act();
    let ln = g.alloc(a, s);
    let qkv = g.alloc(3 * a, s);
    let attn = g.alloc(a, s);
    let lse = g.alloc(sh.lse(), s);
    let proj = g.alloc(a, s);
    if !keep {
        g.free(qkv);
        g.free(lse);
        g.free(attn);
        g.free(ln);
    }
    let res = g.alloc(a, s);
    g.free(proj);
    let ln2 = g.alloc(a, s);
    let up = g.alloc(4 * a, s);
    let gelu = g.alloc(4 * a, s);
    if !keep {
        g.free(up);
        g.free(ln2);
    }
    let down = g.alloc(a, s);
    if !keep {
        g.free(gelu);
    }
    let out = g.alloc(a, s);
    g.free(down);
    g.free(res);
    let saved = keep.then_some(Saved {
        ln,
        qkv,
        lse,
        attn,
        ln2,
        up,
        gelu,
    });
    (out, saved)
}

/// One layer's backward on `s` from the gradient of its output (which the caller frees):
/// the gradient of its input. Frees what the forward saved as it is used.
fn backward_layer(g: &mut Gen, s: u32, sh: Shape, saved: Saved) -> Tensor {
    let a = sh.act();
    let g_gelu = g.alloc(4 * a, s);
    g.free(saved.gelu);
    let g_up = g.alloc(4 * a, s);
    g.free(saved.up);
    g.free(g_gelu);
    let g_ln2 = g.alloc(a, s);
    g.free(g_up);
    g.free(saved.ln2);
    let g_res = g.alloc(a, s);
    g.free(g_ln2);
    let g_attn = g.alloc(a, s);
    g.free(saved.attn);
    let g_qkv = g.alloc(3 * a, s);
    g.free(saved.lse);
    g.free(saved.qkv);
    g.free(g_attn);
    let g_ln = g.alloc(a, s);
    g.free(g_qkv);
    g.free(saved.ln);
    let g_in = g.alloc(a, s);
    g.free(g_ln);
    g.free(g_res);
    g_in
}

/// Pipeline: stages, microbatches per step, layers per stage.
const STAGES: usize = 4;
const MICROBATCHES: usize = 4;
const STAGE_LAYERS: usize = 2;

/// One step of the 4-stage pipeline (stage `k` on stream `k`).
fn pipeline_step(g: &mut Gen) {
    let sh = Shape {
        tokens: g.tokens(1024, 2048),
        hidden: 2048,
    };
    // recv[k][m]: stage k's input for microbatch m (allocated by stage k - 1).
    let mut recv: Vec<Vec<Option<Tensor>>> = vec![vec![None; MICROBATCHES]; STAGES];
    let mut stash: Vec<Vec<Vec<Saved>>> = (0..STAGES)
        .map(|_| (0..MICROBATCHES).map(|_| Vec::new()).collect())
        .collect();
    let mut losses: Vec<Option<Tensor>> = vec![None; MICROBATCHES];
    // Forward: at tick t stage k runs microbatch t - k.
    for t in 0..MICROBATCHES + STAGES - 1 {
        for k in 0..STAGES {
            let Some(m) = t.checked_sub(k).filter(|&m| m < MICROBATCHES) else {
                continue;
            };
            let s = k as u32;
            let input = match recv[k][m].take() {
                Some(x) => x,
                None => g.alloc(sh.act(), s), // stage 0: the embedding's output
            };
            let mut x = input;
            for layer in 0..STAGE_LAYERS {
                let (out, saved) = forward_layer(g, s, sh, true);
                // The layer has used its input: the stage's input was the previous stage's.
                if layer == 0 {
                    g.free_used(x, s);
                } else {
                    g.free(x);
                }
                stash[k][m].extend(saved);
                x = out;
            }
            if k + 1 < STAGES {
                recv[k + 1][m] = Some(x);
            } else {
                let loss = g.alloc(512, s);
                g.free(x);
                losses[m] = Some(loss);
            }
        }
    }
    // Backward, last stage first: at tick t stage k runs microbatch t - (STAGES - 1 - k).
    let mut grads: Vec<Vec<Option<Tensor>>> = vec![vec![None; MICROBATCHES]; STAGES];
    for t in 0..MICROBATCHES + STAGES - 1 {
        for k in (0..STAGES).rev() {
            let Some(m) = t.checked_sub(STAGES - 1 - k).filter(|&m| m < MICROBATCHES) else {
                continue;
            };
            let s = k as u32;
            let mut gcur = match grads[k][m].take() {
                Some(x) => x,
                None => {
                    if let Some(loss) = losses[m].take() {
                        g.free(loss);
                    }
                    g.alloc(sh.act(), s)
                }
            };
            while let Some(saved) = stash[k][m].pop() {
                let g_in = backward_layer(g, s, sh, saved);
                g.free_used(gcur, s); // the next stage's gradient, or this stage's own
                gcur = g_in;
            }
            if k > 0 {
                grads[k - 1][m] = Some(gcur);
            } else {
                g.free(gcur); // the embedding's gradient
            }
        }
    }
}

/// Offloading: the streams.
const COMPUTE: u32 = 0;
const COPY: u32 = 1;
const EVICT: u32 = 2;
const OFFLOAD_LAYERS: usize = 12;

/// One step with parameters prefetched on the copy stream and checkpoints and weight gradients
/// evicted on the eviction stream.
fn prefetch_step(g: &mut Gen) {
    let sh = Shape {
        tokens: g.tokens(2048, 4096),
        hidden: 2048,
    };
    let params = |g: &mut Gen| sh.weights().map(|w| g.alloc(w, COPY));
    // Forward: layer l's parameters were prefetched while layer l - 1 ran.
    let mut x = g.alloc(sh.act(), COMPUTE);
    let mut next = params(g);
    for l in 0..OFFLOAD_LAYERS {
        let p = next;
        if l + 1 < OFFLOAD_LAYERS {
            next = params(g);
        }
        let (out, _) = forward_layer(g, COMPUTE, sh, false);
        for w in p {
            g.free_used(w, COMPUTE);
        }
        // The layer's input is its checkpoint: copied out, then freed.
        g.free_used(x, EVICT);
        x = out;
    }
    let loss = g.alloc(512, COMPUTE);
    g.free(x);
    g.free(loss);
    // Backward, last layer first: parameters and the checkpoint come back on the copy stream
    // one layer ahead; the layer is recomputed, then differentiated.
    let mut grad = g.alloc(sh.act(), COMPUTE);
    let fetch = |g: &mut Gen| (params(g), g.alloc(sh.act(), COPY));
    let mut next = fetch(g);
    for l in (0..OFFLOAD_LAYERS).rev() {
        let (p, ckpt) = next;
        if l > 0 {
            next = fetch(g);
        }
        let (out, saved) = forward_layer(g, COMPUTE, sh, true);
        g.free(out);
        g.free_used(ckpt, COMPUTE);
        let saved = saved.expect("kept");
        let g_in = backward_layer(g, COMPUTE, sh, saved);
        g.free(grad);
        grad = g_in;
        let wgrads = sh.weights().map(|w| g.alloc(w, COMPUTE));
        for w in p {
            g.free_used(w, COMPUTE);
        }
        for w in wgrads {
            g.free_used(w, EVICT);
        }
    }
    g.free(grad);
}

/// Data parallelism: the communication stream, layers, DDP's bucket caps, and how many
/// reductions the host leaves in flight before it frees the oldest bucket.
const COMM: u32 = 1;
const DDP_LAYERS: usize = 12;
const BUCKET_CAP: usize = 25 << 20;
const FIRST_BUCKET_CAP: usize = 1 << 20;
const IN_FLIGHT: usize = 2;

/// Packs the waiting gradients into a bucket, all-reduced on `COMM`, and frees the
/// oldest bucket once more than `IN_FLIGHT` are being reduced.
fn flush(
    g: &mut Gen,
    filling: &mut Vec<Tensor>,
    fill: &mut usize,
    in_flight: &mut VecDeque<Tensor>,
) {
    if filling.is_empty() {
        return;
    }
    let bucket = g.alloc(*fill, COMPUTE); // the gradients copied in
    for w in filling.drain(..) {
        g.free(w);
    }
    *fill = 0;
    in_flight.push_back(bucket);
    while in_flight.len() > IN_FLIGHT {
        let done = in_flight.pop_front().expect("non-empty");
        g.free_used(done, COMM);
    }
}

/// One data-parallel step: forward, backward with bucketed all-reduces, optimizer.
fn buckets_step(g: &mut Gen) {
    let sh = Shape {
        tokens: g.tokens(4096, 8192),
        hidden: 1024,
    };
    let mut x = g.alloc(sh.act(), COMPUTE);
    let mut stash = Vec::with_capacity(DDP_LAYERS);
    for _ in 0..DDP_LAYERS {
        let (out, saved) = forward_layer(g, COMPUTE, sh, true);
        g.free(x);
        stash.push(saved.expect("kept"));
        x = out;
    }
    let loss = g.alloc(512, COMPUTE);
    g.free(x);
    g.free(loss);
    let mut grad = g.alloc(sh.act(), COMPUTE);
    // Gradients waiting to fill a bucket, their bytes, and buckets being reduced.
    let mut filling: Vec<Tensor> = Vec::new();
    let mut fill = 0usize;
    let mut first = true;
    let mut in_flight: VecDeque<Tensor> = VecDeque::new();
    while let Some(saved) = stash.pop() {
        let g_in = backward_layer(g, COMPUTE, sh, saved);
        g.free(grad);
        grad = g_in;
        for w in sh.weights().into_iter().rev() {
            let cap = if first { FIRST_BUCKET_CAP } else { BUCKET_CAP };
            if !filling.is_empty() && fill + w > cap {
                flush(g, &mut filling, &mut fill, &mut in_flight);
                first = false;
            }
            filling.push(g.alloc(w, COMPUTE));
            fill += w;
        }
    }
    flush(g, &mut filling, &mut fill, &mut in_flight);
    g.free(grad);
    for b in in_flight {
        g.free_used(b, COMM);
    }
    // The optimizer: a temporary per weight and layer.
    for _ in 0..DDP_LAYERS {
        for w in sh.weights() {
            let t = g.alloc(w, COMPUTE);
            g.free(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    /// What a trace's frees and allocations look like, checked against the format's rules.
    struct Shape {
        allocs_on: HashSet<u32>,
        /// (stream of the free, `u=`) pairs with their counts.
        uses: HashMap<(u32, u32), usize>,
        max_size: usize,
        events: usize,
    }

    /// Checks that ids are fresh, every free is of a live id on the stream that allocated
    /// it, and there are no resizes; returns the trace's shape.
    fn check(t: &Trace) -> Shape {
        let mut live: HashMap<u64, u32> = HashMap::new();
        let mut seen: HashSet<u64> = HashSet::new();
        let mut s = Shape {
            allocs_on: HashSet::new(),
            uses: HashMap::new(),
            max_size: 0,
            events: t.events.len(),
        };
        for e in &t.events {
            match *e {
                Event::Alloc {
                    id, size, stream, ..
                } => {
                    assert!(seen.insert(id), "{}: id {id} allocated twice", t.name);
                    let stream = stream.expect("every allocation names its stream");
                    live.insert(id, stream);
                    s.allocs_on.insert(stream);
                    s.max_size = s.max_size.max(size);
                }
                Event::Free {
                    id, stream, used, ..
                } => {
                    let own = live
                        .remove(&id)
                        .unwrap_or_else(|| panic!("{}: free of {id}, not live", t.name));
                    assert_eq!(stream, Some(own), "{}: {e} not on its stream", t.name);
                    if let Some(u) = used {
                        assert_ne!(u, own, "{}: {e}: u= names its own stream", t.name);
                        *s.uses.entry((own, u)).or_default() += 1;
                    }
                }
                Event::Realloc { .. } => panic!("{}: a resize", t.name),
            }
        }
        assert!(live.is_empty(), "{}: {} left live", t.name, live.len());
        s
    }

    #[test]
    fn pipeline_hands_activations_forward_and_gradients_back() {
        for steps in [1, 2] {
            let t = Pattern::Pipeline.trace(steps, 3);
            let s = check(&t);
            assert_eq!(s.allocs_on, (0..4).collect());
            // Every handoff: forward k -> k+1 and backward k+1 -> k, one per microbatch.
            let handoffs = MICROBATCHES * steps;
            for k in 0..3u32 {
                assert_eq!(s.uses.get(&(k, k + 1)), Some(&handoffs), "{:?}", s.uses);
                assert_eq!(s.uses.get(&(k + 1, k)), Some(&handoffs), "{:?}", s.uses);
            }
            assert_eq!(s.uses.len(), 6, "only neighbouring stages: {:?}", s.uses);
        }
    }

    #[test]
    fn prefetch_uses_a_copy_and_an_eviction_stream() {
        let t = Pattern::Prefetch.trace(1, 5);
        let s = check(&t);
        assert_eq!(s.allocs_on, [COMPUTE, COPY].into());
        let keys: HashSet<_> = s.uses.keys().copied().collect();
        assert_eq!(keys, [(COPY, COMPUTE), (COMPUTE, EVICT)].into());
        // Parameters twice per layer (forward, backward) and a checkpoint per layer back in.
        assert_eq!(s.uses[&(COPY, COMPUTE)], OFFLOAD_LAYERS * 9);
        // A checkpoint per layer out, four weight gradients per layer out.
        assert_eq!(s.uses[&(COMPUTE, EVICT)], OFFLOAD_LAYERS * 5);
    }

    #[test]
    fn buckets_are_reduced_on_the_communication_stream() {
        let t = Pattern::Buckets.trace(2, 9);
        let s = check(&t);
        assert_eq!(s.allocs_on, [COMPUTE].into());
        let keys: HashSet<_> = s.uses.keys().copied().collect();
        assert_eq!(keys, [(COMPUTE, COMM)].into());
        // Every bucket within its cap, and some of them close to 25 MiB.
        let mut live: HashMap<u64, usize> = HashMap::new();
        let mut buckets = Vec::new();
        for e in &t.events {
            match *e {
                Event::Alloc { id, size, .. } => {
                    live.insert(id, size);
                }
                Event::Free { id, used, .. } => {
                    let size = live.remove(&id).expect("live");
                    if used.is_some() {
                        buckets.push(size);
                    }
                }
                Event::Realloc { .. } => unreachable!(),
            }
        }
        assert_eq!(buckets.len(), s.uses[&(COMPUTE, COMM)]);
        assert!(buckets.iter().all(|&b| b <= BUCKET_CAP), "{buckets:?}");
        assert!(buckets.iter().any(|&b| b > 20 << 20), "{buckets:?}");
    }

    #[test]
    fn default_traces_are_a_few_thousand_events_of_mb_sized_tensors() {
        for p in Pattern::ALL {
            let t = p.trace(p.default_steps(), 1);
            let s = check(&t);
            assert!(
                (2_000..=6_000).contains(&s.events),
                "{}: {} events",
                t.name,
                s.events
            );
            assert!(s.max_size >= 16 << 20, "{}: {}", t.name, s.max_size);
            let stats = t.stats();
            assert!(
                stats.peak_live_bytes >= 256 << 20 && stats.peak_live_bytes <= 16 << 30,
                "{}: peak live {}",
                t.name,
                stats.peak_live_bytes
            );
            assert_eq!(t.name, p.trace_name());
            assert_eq!(Pattern::named(p.name()), Some(p));
        }
        assert_eq!(Pattern::named("nope"), None);
    }

    #[test]
    fn deterministic_in_the_seed() {
        for p in Pattern::ALL {
            assert_eq!(p.trace(2, 42).events, p.trace(2, 42).events);
            let sizes = |t: Trace| -> Vec<usize> {
                t.events
                    .iter()
                    .filter_map(|e| match *e {
                        Event::Alloc { size, .. } => Some(size),
                        _ => None,
                    })
                    .collect()
            };
            // Other seeds draw other token counts (one of a few seeds may repeat one).
            let base = sizes(p.trace(2, 42));
            assert!(
                (1..5).any(|s| sizes(p.trace(2, s)) != base),
                "{}: the seed changes nothing",
                p.name()
            );
        }
    }
}
