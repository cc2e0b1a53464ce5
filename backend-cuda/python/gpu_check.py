#!/usr/bin/env python3
"""Real PyTorch workloads under PyTorch's allocators and tagalloc's, on a GPU: peak memory,
step time, and whether the results agree with PyTorch's default allocator.

Workloads (synthetic data, random weights: nothing is downloaded):

- ``resnet50``: torchvision's ResNet-50 training steps, batch 64, fp32, SGD.
- ``transformer``: a ``torch.nn.TransformerEncoder`` language model trained on random tokens,
  its sequence length drawn at random each step (AdamW).
- ``multistream``: four side streams taking turns; each allocates, multiplies, frees its
  temporaries on its own stream, and hands its result to the main stream with
  ``Tensor.record_stream``; a step is two turns of each stream.
- ``graph``: a small MLP's training step (forward, backward, SGD) captured once into a CUDA
  graph with ``torch.cuda.graph`` after warm-up steps on a side stream, as PyTorch's
  documentation requires; a step copies new inputs into the graph's static ones and replays
  it. Afterwards the same steps run eagerly, from the same initial weights and inputs, in the
  same process, and the losses are compared. Under tagalloc the capture goes through the
  library's graph-pool hooks (``tagalloc_torch.graphs_supported()``).

Allocators, each in a process of its own (PyTorch's allocator is chosen once per process):
``default`` (PyTorch's caching allocator), ``expandable``
(``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``), ``async``
(``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``) and ``tagalloc``
(``tagalloc_torch.enable()``, the library from ``--library``, ``TAGALLOC_CUDA_LIBRARY``, the
installed package or ``<repo>/target/release/``, in :func:`tagalloc_torch.library.find`'s order).

Figures, per workload and allocator:

- peak reserved: ``torch.cuda.max_memory_reserved()``; for tagalloc the pool's
  ``reserved_bytes.all.peak``. Also the largest reserved figure seen at a step's end (read on
  the host once the step has been issued).
- live peak: ``torch.cuda.max_memory_allocated()``; for tagalloc the pool's peak of bytes in
  blocks handed out, frees waiting for their stream included (``active_bytes.all.peak``).
- mean step time: the warm-up steps run, ``torch.cuda.synchronize()``, the clock starts, the
  remaining steps run with no synchronisation between them, one ``torch.cuda.synchronize()``,
  the clock stops: elapsed time over the steps timed. A synchronisation per step would let
  the device go idle at every step's end and hide host work that no longer overlaps the
  device's (an allocator making the host wait shows here). So no step reads a value back:
  each returns its loss (or checksum) as a device tensor, copied into a device buffer read
  once the clock has stopped.
- pool figures, tagalloc only (``tagalloc_torch.memory_stats()`` at the end of the timed
  steps, counted over the whole run): ``stream waits``, the device-side waits the pool queued
  (an allocating stream made to wait for another stream's frees), and the host time spent
  issuing them; ``host syncs``, the pool's host synchronisations, and the host time blocked in
  them.
- results: each step's loss (or, multistream, a checksum of the results) against the default
  allocator's run with the same seed: ``bitwise`` when every value is the same float,
  ``within 1e-5`` when the largest relative difference is at most that, else the difference.
  For ``graph``, first the replays' losses against the eager run's in the same process
  (``graph = eager bitwise``, ``graph = eager within 1e-5``, or the difference).
  Deterministic flags are set (cuDNN deterministic, no benchmarking,
  ``torch.use_deterministic_algorithms(True, warn_only=True)``, ``CUBLAS_WORKSPACE_CONFIG``).

Usage: ``python3 gpu_check.py [--steps N] [--library PATH] [--json OUT] [--only NAMES]``;
``--only`` takes allocator and workload names, comma-separated (``--only tagalloc,resnet50``).
Prints a markdown table. Exits 2, having run nothing, without PyTorch or a GPU.
"""

import argparse
import gc
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {
    "default": None,
    "expandable": "expandable_segments:True",
    "async": "backend:cudaMallocAsync",
    "tagalloc": None,
}
WORKLOADS = ("resnet50", "transformer", "multistream", "graph")
DEFAULT_STEPS = {"resnet50": 60, "transformer": 60, "multistream": 300, "graph": 300}
WARMUP = 5
# The graph workload's eager warm-up steps on a side stream before its capture.
GRAPH_WARMUP = 3
# The pool's figures reported for tagalloc runs, under the names of memory_stats()'s keys
# without their "tagalloc." prefix.
POOL_FIGURES = ("stream_waits", "stream_wait_ns", "synchronizations", "host_sync_ns")
MARK = "GPU_CHECK_RESULT "
GB = 1e9


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, help="steps per workload (default: per workload)")
    p.add_argument("--library", help="tagalloc's pluggable library (.so)")
    p.add_argument("--json", dest="json_out", help="also write every figure to this file")
    p.add_argument("--only", default="", help="allocators and workloads to run, by name")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per run (default 1200)")
    p.add_argument("--child", nargs=2, metavar=("MODE", "WORKLOAD"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.steps is not None and a.steps <= WARMUP:
        p.error(f"--steps must be more than the {WARMUP} warm-up steps")
    names = [n for n in a.only.split(",") if n]
    unknown = [n for n in names if n not in MODES and n not in WORKLOADS]
    if unknown:
        p.error(f"--only: unknown {', '.join(unknown)}; know {', '.join([*MODES, *WORKLOADS])}")
    a.modes = [m for m in MODES if m in names] or list(MODES)
    a.workloads = [w for w in WORKLOADS if w in names] or list(WORKLOADS)
    return a


# --- the child: one workload under one allocator -------------------------------------------


def child(mode, workload, steps, library):
    tagalloc_torch = enable_tagalloc(library, workload) if mode == "tagalloc" else None
    import torch

    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)

    if tagalloc_torch is not None:

        def reserved_now():
            return tagalloc_torch.memory_stats(0)["reserved_bytes.all.current"]

    else:

        def reserved_now():
            return torch.cuda.memory_reserved(dev)

    step = WORKLOAD_FACTORIES[workload](torch, dev)
    row = {"mode": mode, "workload": workload, "steps": steps}
    row.update(run_steps(torch, dev, step, steps, reserved_now))
    row.update(memory_figures(torch, dev, tagalloc_torch))
    check = getattr(step, "check", None)
    if check is not None:
        row.update(check(row["values"]))
        if tagalloc_torch is not None:
            row["pool"]["graph_pools_after_release"] = graph_pools(tagalloc_torch)
    row["values"] = [v.hex() for v in row["values"]]
    row["torch"] = torch.__version__
    row["device"] = torch.cuda.get_device_name(dev)
    return row


def enable_tagalloc(library, workload):
    """tagalloc made PyTorch's allocator, before anything touches CUDA; the module."""
    sys.path.insert(0, HERE)
    import tagalloc_torch

    tagalloc_torch.enable(library)
    if workload == "graph" and not tagalloc_torch.graphs_supported():
        raise SystemExit(
            "gpu_check: this PyTorch's pluggable allocator has no graph-pool hooks "
            "(PyTorch 2.3 or later has them), so tagalloc cannot serve a CUDA graph's capture"
        )
    return tagalloc_torch


def run_steps(torch, dev, step, steps, reserved_now):
    """Runs the warm-up steps, synchronises, then times the remaining ones with a single
    synchronisation at the end. Each step's value stays on the device (in ``record``) until the
    clock has stopped, so that no step waits for the device."""
    record = torch.zeros(steps, device=dev)
    at_step_end = None

    def one(i):
        nonlocal at_step_end
        record[i] = step(i).detach()
        r = optional(reserved_now)
        if r is not None:
            at_step_end = r if at_step_end is None else max(at_step_end, r)

    for i in range(WARMUP):
        one(i)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for i in range(WARMUP, steps):
        one(i)
    torch.cuda.synchronize(dev)
    elapsed = time.perf_counter() - t0
    return {
        "timed_steps": steps - WARMUP,
        "elapsed_s": elapsed,
        "mean_step_s": elapsed / (steps - WARMUP),
        "reserved_at_step_end_max": at_step_end,
        "values": record.tolist(),
    }


def memory_figures(torch, dev, tagalloc_torch):
    """Peak reserved, live peak and the allocator's own counters; for tagalloc also the pool
    figures of ``POOL_FIGURES`` (None for PyTorch's allocators)."""
    if tagalloc_torch is not None:
        s = tagalloc_torch.memory_stats(0)
        return {
            "peak_reserved": s["reserved_bytes.all.peak"],
            "live_peak": s["active_bytes.all.peak"],
            "pool": {k: s["tagalloc." + k] for k in POOL_FIGURES},
            "extra": {k: v for k, v in s.items() if k.startswith(("tagalloc.", "num_"))},
        }
    # Every PyTorch backend is meant to answer these; a None says one did not.
    stats = optional(lambda: torch.cuda.memory_stats(dev)) or {}
    return {
        "peak_reserved": optional(lambda: torch.cuda.max_memory_reserved(dev)),
        "live_peak": optional(lambda: torch.cuda.max_memory_allocated(dev)),
        "pool": None,
        "extra": {"num_alloc_retries": stats.get("num_alloc_retries")},
    }


def graph_pools(tagalloc_torch):
    return tagalloc_torch.memory_stats(0)["tagalloc.graph_pools"]


def optional(f):
    """``f()``, or None when the allocator does not support it."""
    try:
        return f()
    except RuntimeError:
        return None


def resnet50(torch, dev):
    import torchvision

    model = torchvision.models.resnet50(weights=None, num_classes=1000).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)

    def step(_):
        x = torch.randn(64, 3, 224, 224, device=dev, generator=gen)
        y = torch.randint(0, 1000, (64,), device=dev, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def transformer(torch, dev):
    import random

    vocab, d_model = 32000, 1024
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(
        d_model, nhead=16, dim_feedforward=4096, dropout=0.0, batch_first=True
    )
    model = nn.ModuleDict(
        {
            "embed": nn.Embedding(vocab, d_model),
            "encoder": nn.TransformerEncoder(layer, num_layers=8, enable_nested_tensor=False),
            "head": nn.Linear(d_model, vocab),
        }
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = random.Random(2)
    gen = torch.Generator(device=dev)
    gen.manual_seed(2)

    def step(_):
        n = lengths.randint(64, 1024)
        tokens = torch.randint(0, vocab, (16, n + 1), device=dev, generator=gen)
        mask = torch.triu(torch.full((n, n), float("-inf"), device=dev), diagonal=1)
        # The mask is causal. Saying so spares TransformerEncoder comparing it on the device
        # with the causal mask it would build, and reading the answer back (a host
        # synchronisation per step); that comparison would find it causal and pass
        # is_causal=True to the layers, as this does, so the computation is the same.
        h = model["encoder"](model["embed"](tokens[:, :-1]), mask=mask, is_causal=True)
        logits = model["head"](h)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def multistream(torch, dev):
    import random

    main = torch.cuda.current_stream(dev)
    sides = [torch.cuda.Stream(dev) for _ in range(4)]
    sizes = random.Random(3)
    gen = torch.Generator(device=dev)
    gen.manual_seed(3)
    acc = torch.zeros((), device=dev)

    def turn(side):
        n = sizes.choice((1024, 1536, 2048, 3072))
        side.wait_stream(main)
        with torch.cuda.stream(side):
            a = torch.randn(n, n, device=dev, generator=gen)
            b = a @ a
            del a  # freed on the side stream
            c = torch.relu(b) / n
            del b
        main.wait_stream(side)
        c.record_stream(main)  # used on the main stream below, after its free
        return c

    def step(_):
        nonlocal acc
        for _ in range(2):
            for side in sides:
                c = turn(side)
                acc = acc + c.mean()
                del c
        return acc

    return step


def graph(torch, dev):
    """The ``graph`` workload: the step replays a captured training step; ``step.check(values)``
    reruns the same steps eagerly and compares."""
    nn = torch.nn
    batch, width, classes = 256, 2048, 1000

    def make():
        torch.manual_seed(4)  # the same initial weights for the captured model and its twin
        model = nn.Sequential(
            nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, classes),
        ).to(dev)
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def inputs(gen):
        x = torch.randn(batch, width, device=dev, generator=gen)
        return x, torch.randint(0, classes, (batch,), device=dev, generator=gen)

    def train(model, opt, x, y):
        # The caller sets the gradients to None first, so that backward allocates them anew
        # (inside a capture: from the graph's pool) rather than adding to old ones.
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    def generator():
        gen = torch.Generator(device=dev)
        gen.manual_seed(5)
        return gen

    live = capture(torch, dev, make, inputs, train, generator(), batch, width)

    def step(_):
        x, y = inputs(live["gen"])
        live["x"].copy_(x)
        live["y"].copy_(y)
        live["graph"].replay()
        return live["loss"]

    def check(values):
        live.clear()  # the graph, its model and its static tensors: the graph's pool goes
        gc.collect()
        torch.cuda.synchronize(dev)
        eager = eager_losses(torch, dev, make, inputs, train, generator(), len(values))
        return {
            "eager_values": [v.hex() for v in eager],
            "graph_vs_eager": compare(values, eager),
        }

    step.check = check
    return step


def capture(torch, dev, make, inputs, train, gen, batch, width):
    """The model, warmed up on a side stream and its training step captured into a CUDA graph,
    as PyTorch's documentation does it; the graph, its static inputs and loss, and ``gen``,
    which has drawn the warm-up steps' inputs."""
    model, opt = make()
    x = torch.zeros(batch, width, device=dev)
    y = torch.zeros(batch, dtype=torch.long, device=dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP):
            wx, wy = inputs(gen)
            x.copy_(wx)
            y.copy_(wy)
            opt.zero_grad(set_to_none=True)
            train(model, opt, x, y)
    torch.cuda.current_stream(dev).wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = train(model, opt, x, y)
    return {"graph": g, "model": model, "opt": opt, "x": x, "y": y, "loss": loss, "gen": gen}


def eager_losses(torch, dev, make, inputs, train, gen, steps):
    """The losses of ``steps`` training steps run eagerly after the warm-up ones, from the
    initial weights and the inputs the captured run had (``gen`` seeded as its was)."""
    model, opt = make()
    losses = torch.zeros(steps, device=dev)
    for i in range(GRAPH_WARMUP + steps):
        x, y = inputs(gen)
        opt.zero_grad(set_to_none=True)
        loss = train(model, opt, x, y)
        if i >= GRAPH_WARMUP:
            losses[i - GRAPH_WARMUP] = loss
    return losses.tolist()


WORKLOAD_FACTORIES = {
    "resnet50": resnet50,
    "transformer": transformer,
    "multistream": multistream,
    "graph": graph,
}


# --- the parent: one process per allocator and workload, and the table ---------------------


def preflight(args):
    """Why nothing can run (no PyTorch, no GPU, no library for tagalloc), or None."""
    try:
        import torch
    except ImportError as e:
        return f"PyTorch is not installed ({e}); install torch and torchvision on a GPU machine"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to PyTorch (torch.cuda.is_available() is False)"
    if "tagalloc" in args.modes:
        sys.path.insert(0, HERE)
        from tagalloc_torch import LibraryMissing, library

        try:
            args.library = library.find(args.library)
        except LibraryMissing as e:
            return f"{e} (or leave tagalloc out: --only default,expandable,async)"
    return None


def run_one(args, mode, workload):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if MODES[mode]:
        env["PYTORCH_CUDA_ALLOC_CONF"] = MODES[mode]
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    steps = args.steps or DEFAULT_STEPS[workload]
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, workload]
    cmd += ["--steps", str(steps)]
    if args.library:
        cmd += ["--library", args.library]
    try:
        p = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"mode": mode, "workload": workload, "error": f"timed out after {args.timeout} s"}
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"mode": mode, "workload": workload, "error": f"exit {p.returncode}: {tail}"}


def compare(a, b):
    """How the floats of ``a`` agree with those of ``b``: ``bitwise`` when every one is the
    same float, ``within 1e-5`` when the largest relative difference is at most that, else how
    far off."""
    if a == b:
        return "bitwise"
    if len(a) != len(b):
        return f"differs ({len(a)} values against {len(b)})"
    worst = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))
    return "within 1e-5" if worst <= 1e-5 else f"differs (max rel. diff {worst:.2e})"


def agreement(row, reference):
    """The results column: ``row``'s values against the default allocator's run
    (``reference``); for the graph workload, first its replays against its eager run."""
    if "error" in row:
        return "—"
    if reference is None or "error" in reference:
        vs_default = "n/a (default not run)"
    elif row is reference:
        vs_default = "reference"
    else:
        a = [float.fromhex(v) for v in row["values"]]
        vs_default = compare(a, [float.fromhex(v) for v in reference["values"]])
    if "graph_vs_eager" in row:
        return f"graph = eager {row['graph_vs_eager']}; {vs_default}"
    return vs_default


def gb(n):
    return "n/a" if n is None else f"{n / GB:.2f}"


def ms(seconds):
    """Milliseconds, with three decimals below one (a graph replay can take less)."""
    v = seconds * 1e3
    return f"{v:.1f}" if v >= 1 else f"{v:.3f}"


def pool_cells(pool):
    """The pool's figures as table cells: stream waits, the host milliseconds issuing them,
    host synchronisations, the host milliseconds blocked in them; n/a without a pool."""
    if pool is None:
        return ["n/a"] * 4
    return [
        str(pool["stream_waits"]),
        ms(pool["stream_wait_ns"] / 1e9),
        str(pool["synchronizations"]),
        ms(pool["host_sync_ns"] / 1e9),
    ]


COLUMNS = (
    ("workload", "---"),
    ("allocator", "---"),
    ("peak reserved (GB)", "---:"),
    ("max reserved at step ends (GB)", "---:"),
    ("live peak (GB)", "---:"),
    ("mean step (ms)", "---:"),
    ("stream waits", "---:"),
    ("issuing them (ms)", "---:"),
    ("host syncs", "---:"),
    ("blocked in them (ms)", "---:"),
    ("results vs default", "---"),
)


def table(rows):
    out = [
        "| " + " | ".join(name for name, _ in COLUMNS) + " |",
        "| " + " | ".join(align for _, align in COLUMNS) + " |",
    ]
    for r in rows:
        if "error" in r:
            dashes = " — |" * (len(COLUMNS) - 3)
            out.append(f"| {r['workload']} | {r['mode']} |{dashes} error: {r['error']} |")
            continue
        cells = [
            r["workload"],
            r["mode"],
            gb(r["peak_reserved"]),
            gb(r["reserved_at_step_end_max"]),
            gb(r["live_peak"]),
            ms(r["mean_step_s"]),
            *pool_cells(r.get("pool")),
            r["agreement"],
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv):
    args = parse_args(argv)
    if args.child:
        mode, workload = args.child
        print(MARK + json.dumps(child(mode, workload, args.steps, args.library)), flush=True)
        return 0
    why = preflight(args)
    if why:
        print(f"gpu_check: {why}; nothing was run.", file=sys.stderr)
        return 2
    rows = []
    for workload in args.workloads:
        done = {}
        for mode in args.modes:
            print(f"gpu_check: {workload} under {mode} ...", file=sys.stderr, flush=True)
            done[mode] = run_one(args, mode, workload)
        for mode in args.modes:
            done[mode]["agreement"] = agreement(done[mode], done.get("default"))
            rows.append(done[mode])
    first = next((r for r in rows if "error" not in r), {})
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {first.get('device', '?')}, "
        f"PyTorch {first.get('torch', '?')}; live peak for tagalloc includes frees waiting for "
        "their stream; mean step: the steps after the warm-up run back to back, one "
        "synchronisation at the end; stream waits (device-side waits the pool queued, and the "
        "host time issuing them) and host syncs (the pool's host synchronisations, and the "
        "time blocked in them): tagalloc only; GB = 10^9 bytes\n"
    )
    print(table(rows))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
