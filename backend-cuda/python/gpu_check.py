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

Allocators, each in a process of its own (PyTorch's allocator is chosen once per process):
``default`` (PyTorch's caching allocator), ``expandable``
(``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``), ``async``
(``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``) and ``tagalloc``
(``tagalloc_torch.enable()``, the library from ``--library``, ``TAGALLOC_CUDA_LIBRARY`` or
``<repo>/target/release/``).

Figures, per workload and allocator:

- peak reserved: ``torch.cuda.max_memory_reserved()``; for tagalloc the pool's
  ``reserved_bytes.all.peak``. Also the largest reserved figure seen at a step's end.
- live peak: ``torch.cuda.max_memory_allocated()``; for tagalloc the pool's peak of bytes in
  blocks handed out, frees waiting for their stream included (``active_bytes.all.peak``).
- median step time, after the warm-up steps, each step ended by ``torch.cuda.synchronize()``.
- results: each step's loss (or, multistream, a checksum of the results) against the default
  allocator's run with the same seed: ``bitwise`` when every value is the same float,
  ``within 1e-5`` when the largest relative difference is at most that, else the difference.
  Deterministic flags are set (cuDNN deterministic, no benchmarking,
  ``torch.use_deterministic_algorithms(True, warn_only=True)``, ``CUBLAS_WORKSPACE_CONFIG``).

Usage: ``python3 gpu_check.py [--steps N] [--library PATH] [--json OUT] [--only NAMES]``;
``--only`` takes allocator and workload names, comma-separated (``--only tagalloc,resnet50``).
Prints a markdown table. Exits 2, having run nothing, without PyTorch or a GPU.
"""

import argparse
import json
import os
import statistics
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
WORKLOADS = ("resnet50", "transformer", "multistream")
DEFAULT_STEPS = {"resnet50": 60, "transformer": 60, "multistream": 300}
WARMUP = 5
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
    if mode == "tagalloc":
        sys.path.insert(0, HERE)
        import tagalloc_torch

        tagalloc_torch.enable(library)  # before anything touches CUDA
    import torch

    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)

    if mode == "tagalloc":

        def reserved_now():
            return tagalloc_torch.memory_stats(0)["reserved_bytes.all.current"]

    else:

        def reserved_now():
            return torch.cuda.memory_reserved(dev)

    step = {"resnet50": resnet50, "transformer": transformer, "multistream": multistream}[
        workload
    ](torch, dev)
    times, values, at_step_end = [], [], None
    for i in range(steps):
        t0 = time.perf_counter()
        v = step(i)
        torch.cuda.synchronize(dev)
        t = time.perf_counter() - t0
        values.append(float(v))
        r = optional(reserved_now)
        if r is not None:
            at_step_end = r if at_step_end is None else max(at_step_end, r)
        if i >= WARMUP:
            times.append(t)

    if mode == "tagalloc":
        s = tagalloc_torch.memory_stats(0)
        peak_reserved, live_peak = s["reserved_bytes.all.peak"], s["active_bytes.all.peak"]
        extra = {k: v for k, v in s.items() if k.startswith("tagalloc.") or k.startswith("num_")}
    else:
        # Every PyTorch backend is meant to answer these; a None says one did not.
        stats = optional(lambda: torch.cuda.memory_stats(dev)) or {}
        peak_reserved = optional(lambda: torch.cuda.max_memory_reserved(dev))
        live_peak = optional(lambda: torch.cuda.max_memory_allocated(dev))
        extra = {"num_alloc_retries": stats.get("num_alloc_retries")}
    return {
        "mode": mode,
        "workload": workload,
        "steps": steps,
        "peak_reserved": peak_reserved,
        "reserved_at_step_end_max": at_step_end,
        "live_peak": live_peak,
        "median_step_s": statistics.median(times),
        "values": [v.hex() for v in values],
        "extra": extra,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev),
    }


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
        return loss.item()

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
        h = model["encoder"](model["embed"](tokens[:, :-1]), mask=mask)
        logits = model["head"](h)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

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
        return acc.item()

    return step


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


def agreement(row, reference):
    if "error" in row:
        return "—"
    if reference is None or "error" in reference:
        return "n/a (default not run)"
    if row is reference:
        return "reference"
    a = [float.fromhex(v) for v in row["values"]]
    b = [float.fromhex(v) for v in reference["values"]]
    if a == b:
        return "bitwise"
    worst = max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))
    return "within 1e-5" if worst <= 1e-5 else f"differs (max rel. diff {worst:.2e})"


def gb(n):
    return "n/a" if n is None else f"{n / GB:.2f}"


def table(rows):
    out = [
        "| workload | allocator | peak reserved (GB) | max reserved at step ends (GB) "
        "| live peak (GB) | median step (ms) | results vs default |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        if "error" in r:
            dashes = " — |" * 4
            out.append(f"| {r['workload']} | {r['mode']} |{dashes} error: {r['error']} |")
            continue
        out.append(
            f"| {r['workload']} | {r['mode']} | {gb(r['peak_reserved'])} "
            f"| {gb(r['reserved_at_step_end_max'])} | {gb(r['live_peak'])} "
            f"| {r['median_step_s'] * 1e3:.1f} | {r['agreement']} |"
        )
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
        "their stream; GB = 10^9 bytes\n"
    )
    print(table(rows))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
