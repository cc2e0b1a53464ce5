#!/usr/bin/env python3
"""Reads callgrind and cachegrind output files for lab/tools/profile.sh.

callgrind_annotate splits a function's cost by the source file of its inlined code, so its
inclusive figures for one function are scattered over several rows; this reads the files
itself and sums by function name. Commands:

  calls CALLGRIND_OUT
      Instructions of the probe calls (examples/profile.rs): inclusive totals of
      Probe::alloc, Probe::free, Probe::realloc, and the memcpy/memmove cost inside realloc
      (calls to them from any function reachable from Probe::realloc). Prints
      `alloc A free F realloc R memcpy M`; with --funcs FILE also writes the names of every
      function reachable from a probe (the allocator's code) to FILE, one a line.
  misses CACHEGRIND_OUT FUNCS
      Sums the cachegrind self costs of the functions named in FUNCS (memcpy/memmove left
      out): prints `Ir I D1 D LL` (instructions, D1 misses, LL data misses).
  paths CALLGRIND_OUT SRC_ROOT
      Where tagalloc's instructions go inside the probes: self instructions by the source
      function they were written in (inlined code counted where it was written, found from
      the line number in SRC_ROOT's files), and inclusive instructions and calls of every
      tagalloc function that stayed a function of its own.
  instr CALLGRIND_OUT BINARY FUNC_REGEX [N]
      Where the simulated cache misses are, instruction by instruction: CALLGRIND_OUT recorded
      with `--cache-sim=yes --dump-instr=yes --compress-pos=no` from BINARY. Sums the self
      costs of every function whose name matches FUNC_REGEX, by instruction; prints each
      function's D1 read and write misses, then the N instructions (default 12) with the most
      D1 misses, with their executions and their disassembly (objdump).
"""

import re
import sys
from collections import defaultdict

PROBE = re.compile(r"<profile::Probe<S> as tagalloc_bench::subjects::Subject>::(alloc|free|realloc)$")
COPY = re.compile(r"(^|[_:])mem(cpy|move)")


def names(kind, rest, table):
    """Resolves callgrind's name compression: `(id) name` defines, `(id)` refers."""
    m = re.match(r"\((\d+)\)(?: (.*))?$", rest)
    if not m:
        return rest
    key = (kind, m.group(1))
    if m.group(2) is not None:
        table[key] = m.group(2)
    return table[key]


def records(path, header):
    """The cost lines of a callgrind file, names resolved, as `(fn, file, positions, costs,
    call)`: `positions` the line's position fields as written (as many as the file's
    `positions:` names), `costs` its event counts, `call` `(callee, count)` for the inclusive
    cost of a call and `None` for the function's own cost. Fills `header` with the file's
    `events` and `positions` lists as they are read."""
    table = {}
    fn = file = fl = callee = None
    pending = None
    npos = 1
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                costs = [int(x) for x in parts[npos:]]
                call, pending = (None, None) if pending is None else ((callee, pending), None)
                yield fn, file, parts[:npos], costs, call
                continue
            head = re.match(r"([a-z]+):\s*(.*)$", line)
            if head:
                if head.group(1) in ("events", "positions"):
                    header[head.group(1)] = head.group(2).split()
                    npos = len(header.get("positions", ["line"]))
                continue
            key, _, rest = line.partition("=")
            if key == "fl":
                fl = file = names("fl", rest, table)
            elif key in ("fi", "fe"):
                file = names("fl", rest, table)
            elif key == "fn":
                fn = names("fn", rest, table)
                file = fl
            elif key in ("cfi", "cfl"):
                names("fl", rest, table)
            elif key == "cfn":
                callee = names("fn", rest, table)
            elif key == "calls":
                pending = int(rest.split()[0])


def read_callgrind(path):
    """Self cost (Ir) by function and by (function, file, line); call arcs with their
    inclusive cost and count."""
    self_ir = defaultdict(int)
    by_line = defaultdict(int)
    arcs = defaultdict(lambda: [0, 0])  # (caller, callee) -> [calls, inclusive Ir]
    for fn, file, pos, costs, call in records(path, {}):
        ir = costs[0] if costs else 0
        if call is not None:
            arc = arcs[(fn, call[0])]
            arc[0] += call[1]
            arc[1] += ir
        else:
            self_ir[fn] += ir
            by_line[(fn, file, pos[0])] += ir
    return self_ir, by_line, arcs


def reachable(arcs, roots):
    """Functions reachable from `roots` through call arcs, memcpy/memmove not followed."""
    out = defaultdict(set)
    for caller, callee in arcs:
        out[caller].add(callee)
    seen = set(roots)
    todo = list(roots)
    while todo:
        for callee in out[todo.pop()]:
            if callee not in seen and not COPY.search(callee):
                seen.add(callee)
                todo.append(callee)
    return seen


def inclusive(self_ir, arcs, fn):
    return self_ir[fn] + sum(c[1] for (a, b), c in arcs.items() if a == fn and b != fn)


def probes(self_ir):
    found = {}
    for fn in self_ir:
        m = PROBE.search(fn)
        if m:
            found[m.group(1)] = fn
    return found


def calls(path, funcs_out=None):
    self_ir, _, arcs = read_callgrind(path)
    p = probes(self_ir)
    total = {k: inclusive(self_ir, arcs, fn) for k, fn in p.items()}
    inside = reachable(arcs, [p["realloc"]]) if "realloc" in p else set()
    copy = sum(c[1] for (a, b), c in arcs.items() if a in inside and COPY.search(b))
    print(
        "alloc %d free %d realloc %d memcpy %d"
        % (total.get("alloc", 0), total.get("free", 0), total.get("realloc", 0), copy)
    )
    if funcs_out:
        with open(funcs_out, "w") as f:
            for fn in sorted(reachable(arcs, list(p.values()))):
                f.write(fn + "\n")


def misses(path, funcs_path):
    with open(funcs_path) as f:
        wanted = {l.rstrip("\n") for l in f if l.strip()}
    events = None
    fn = None
    sums = defaultdict(int)
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("fn="):
                fn = line[3:]
            elif line and line[0].isdigit() and fn in wanted and not COPY.search(fn):
                for name, v in zip(events, line.split()[1:]):
                    sums[name] += int(v)
    d1 = sums["D1mr"] + sums["D1mw"]
    ll = sums["DLmr"] + sums["DLmw"]
    print("Ir %d I %d D1 %d LL %d" % (sums["Ir"], sums["I1mr"], d1, ll))


def source_functions(root, file):
    """Line number -> the name of the `fn` that the line belongs to (the last one declared at
    or above it), for a Rust file under `root`."""
    path = file if file.startswith("/") else root + "/" + file
    try:
        text = open(path).read().splitlines()
    except OSError:
        return None
    owner = {}
    current = "(module)"
    decl = re.compile(r"^\s*(?:pub(?:\([\w:]+\))? )?(?:const )?(?:unsafe )?fn (\w+)")
    for i, l in enumerate(text, 1):
        m = decl.match(l)
        if m:
            current = m.group(1)
        owner[i] = current
    return owner


def outside(file):
    """A row name for code from outside tagalloc's core: the probe and the bench adapter, or
    the standard library file it was inlined from."""
    if "profile.rs" in file or "bench/src" in file or "lab/src" in file:
        return "(probe, bench adapter)"
    if "/library/" in file:
        return "(std) " + file.split("/library/")[1]
    return "(other) " + file.rsplit("/", 1)[-1]


def paths(path, root):
    self_ir, by_line, arcs = read_callgrind(path)
    p = probes(self_ir)
    kinds = {fn: k for k, fn in p.items()}
    # Which probes reach each function, so that shared functions can be told apart.
    reach = {k: reachable(arcs, [fn]) for k, fn in p.items()}
    owners = {}
    rows = defaultdict(int)
    for (fn, file, line), ir in by_line.items():
        in_kinds = [k for k, r in reach.items() if fn in r]
        if not in_kinds or COPY.search(fn):
            continue
        if file not in owners:
            owners[file] = source_functions(root, file) if file and "core/src" in file else None
        src = owners[file]
        where = (
            "%s:%s" % (file.split("core/src/")[1], src.get(int(line), "(no line)"))
            if src
            else outside(file or "")
        )
        rows[("/".join(sorted(in_kinds)), where)] += ir
    n = {k: sum(c[0] for (a, b), c in arcs.items() if b == fn) for k, fn in p.items()}
    print("calls: " + ", ".join("%s %d" % (k, n[k]) for k in ("alloc", "free", "realloc") if k in n))
    print()
    # Per call of each kind, by file: a function reached from several kinds is charged to each
    # in proportion to nothing better known, so it is shown apart ("shared").
    by_file = defaultdict(int)
    for (k, where), ir in rows.items():
        f = where.split(":")[0] if not where.startswith("(") else where.split(")")[0] + ")"
        by_file[(k if "/" not in k else "shared", f)] += ir
    files = sorted({f for _, f in by_file}, key=lambda f: -sum(v for (_, g), v in by_file.items() if g == f))
    kinds = [k for k in ("alloc", "free", "realloc") if k in n] + ["shared"]
    print("Instructions per call by source file (shared: code reached from more than one kind,")
    print("per call of any kind):")
    print("%-24s" % "file" + "".join("%10s" % k for k in kinds))
    every = sum(n.values())
    for f in files:
        cells = [by_file[(k, f)] / (n[k] if k != "shared" else every) for k in kinds]
        print("%-24s" % f + "".join("%10.1f" % c for c in cells))
    print()
    print("Self instructions by the source function they were written in (inlined code included):")
    print("%-22s %-44s %14s" % ("reached from", "source function", "instructions"))
    total = sum(rows.values())
    shown = sorted(rows.items(), key=lambda x: -x[1])[:30]
    for (k, where), ir in shown:
        print("%-22s %-44s %14d %5.1f%%" % (k, where, ir, 100 * ir / total))
    rest = total - sum(ir for _, ir in shown)
    print("%-22s %-44s %14d %5.1f%%" % ("", "(the rest)", rest, 100 * rest / total))
    print()
    print("Functions of tagalloc's core that stayed functions (inclusive, without memcpy):")
    print("%-60s %10s %14s %10s" % ("function", "calls", "instructions", "per call"))
    seen = set().union(*reach.values()) if reach else set()
    for fn in sorted(seen, key=lambda f: -inclusive(self_ir, arcs, f)):
        if fn in kinds or not re.match(r"^<?tagalloc::", fn):
            continue
        c = sum(v[0] for (a, b), v in arcs.items() if b == fn)
        i = inclusive(self_ir, arcs, fn) - sum(v[1] for (a, b), v in arcs.items() if a == fn and COPY.search(b))
        print("%-60s %10d %14d %10.1f" % (fn[:60], c, i, i / c if c else 0))


def instr(path, binary, pattern, n=12):
    import subprocess

    pat = re.compile(pattern)
    header = {}
    by_fn = defaultdict(lambda: [0, 0])
    by_addr = defaultdict(lambda: [0, 0, 0])  # Ir, D1mr, D1mw
    for fn, _, pos, costs, call in records(path, header):
        if header.get("positions", [None])[0] != "instr":
            sys.exit("instr: the file has no instruction positions (record with --dump-instr=yes)")
        if not pos[0].startswith("0x"):
            sys.exit("instr: compressed positions (record with --compress-pos=no)")
        if call is not None or fn is None or not pat.search(fn):
            continue
        cost = dict(zip(header["events"], costs))
        d1r, d1w = cost.get("D1mr", 0), cost.get("D1mw", 0)
        a = by_addr[int(pos[0], 16)]
        a[0] += cost.get("Ir", 0)
        a[1] += d1r
        a[2] += d1w
        by_fn[fn][0] += d1r
        by_fn[fn][1] += d1w
    events = header.get("events", [])
    if "D1mr" not in events:
        sys.exit("instr: no cache events in the file (record with --cache-sim=yes)")
    print("%10s %10s  function" % ("D1 reads", "D1 writes"))
    for f_, (r, w) in sorted(by_fn.items(), key=lambda kv: -sum(kv[1])):
        print("%10d %10d  %s" % (r, w, f_[:100]))
    print()
    print("%-10s %10s %10s %10s  instruction" % ("address", "executed", "D1 reads", "D1 writes"))
    for addr, (ir, r, w) in sorted(by_addr.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))[:n]:
        dis = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", "-C", binary,
             "--start-address=%#x" % addr, "--stop-address=%#x" % (addr + 16)],
            capture_output=True, text=True,
        ).stdout.splitlines()
        mine = [d for d in dis if d.strip().startswith("%x:" % addr)]
        text = mine[0].split(":", 1)[1].strip() if mine else "?"
        print("%-10s %10d %10d %10d  %s" % (hex(addr), ir, r, w, text))


def main():
    args = sys.argv[1:]
    if args[:1] == ["calls"]:
        out = args[args.index("--funcs") + 1] if "--funcs" in args else None
        calls(args[1], out)
    elif args[:1] == ["misses"]:
        misses(args[1], args[2])
    elif args[:1] == ["paths"]:
        paths(args[1], args[2])
    elif args[:1] == ["instr"] and len(args) in (4, 5):
        instr(args[1], args[2], args[3], int(args[4]) if len(args) == 5 else 12)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
