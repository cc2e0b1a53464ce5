#!/usr/bin/env python3
"""Converts a glibc mtrace log into a `tagalloc trace v1` file (see tests/data/README.md).

mtrace lines, after an `@ <caller> ` prefix:
  + ADDR SIZE    malloc/calloc/memalign, or realloc(NULL, SIZE)
  - ADDR         free, or realloc(ADDR, 0)
  < ADDR         realloc: the old block ...
  > ADDR SIZE    ... and the block it became (same or new address)
  ! ADDR SIZE    a realloc that failed (the old block stays live)

Every allocation gets a fresh id, never reused, and keeps it through reallocs. Frees and reallocs
of addresses the log never saw allocated (memory from before tracing started) are skipped; a
realloc of such an address becomes a fresh allocation. If an address is allocated again while
still live (its free was not logged), the old id is freed first.

Usage: mtrace2trace.py LOG [--source TEXT] > OUT.trace   (statistics go to stderr)
"""

import argparse
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", help="the mtrace log (MALLOC_TRACE file)")
    parser.add_argument("--source", action="append", default=[],
                        help="text for a '# source:' comment line (repeatable)")
    args = parser.parse_args()

    out = sys.stdout
    out.write("# tagalloc trace v1\n")
    for source in args.source:
        out.write("# source: %s\n" % " ".join(source.split()))

    live = {}  # address -> id
    next_id = 0
    pending = None  # (address, id or None) from a `<` line, waiting for its `>`
    counts = {"a": 0, "f": 0, "r": 0, "skipped": 0, "implicit free": 0, "other": 0}

    def alloc(addr, size):
        nonlocal next_id
        old = live.get(addr)
        if old is not None:
            out.write("f %d\n" % old)
            counts["f"] += 1
            counts["implicit free"] += 1
        ident = next_id
        next_id += 1
        live[addr] = ident
        out.write("a %d %d\n" % (ident, size))
        counts["a"] += 1

    with open(args.log, "r", encoding="utf-8", errors="replace") as log:
        for line in log:
            # The `@ <caller> ` prefix is absent when glibc cannot tell the caller, so the
            # operation is found from the right.
            tokens = line.split()
            if len(tokens) < 2 or tokens[0] == "=":
                counts["other"] += 1  # `= Start`, `= End`, blank or truncated lines
                continue
            try:
                if len(tokens) >= 3 and tokens[-3] in ("+", ">", "!"):
                    op, addr, size = tokens[-3], int(tokens[-2], 16), int(tokens[-1], 16)
                elif tokens[-2] in ("-", "<"):
                    op, addr, size = tokens[-2], int(tokens[-1], 16), None
                else:
                    raise ValueError(line)
            except ValueError:
                # Unparsable, or a null address `(nil)` from a failed allocation.
                counts["other"] += 1
                continue

            if op != ">" and pending is not None:
                # A `<` without its `>`: the old block is untouched.
                if pending[1] is not None:
                    live[pending[0]] = pending[1]
                pending = None
                counts["skipped"] += 1

            if op == "+":
                alloc(addr, size)
            elif op == "-":
                ident = live.pop(addr, None)
                if ident is None:
                    counts["skipped"] += 1
                else:
                    out.write("f %d\n" % ident)
                    counts["f"] += 1
            elif op == "<":
                pending = (addr, live.pop(addr, None))
            elif op == ">":
                ident = pending[1] if pending is not None else None
                if pending is None:
                    counts["skipped"] += 1
                pending = None
                if ident is None:
                    # Realloc of a block allocated before tracing: a fresh allocation.
                    alloc(addr, size)
                    continue
                old = live.get(addr)
                if old is not None:
                    out.write("f %d\n" % old)
                    counts["f"] += 1
                    counts["implicit free"] += 1
                live[addr] = ident
                out.write("r %d %d\n" % (ident, size))
                counts["r"] += 1
            # `!`: failed realloc, nothing changes.

    if pending is not None and pending[1] is not None:
        live[pending[0]] = pending[1]

    print("mtrace2trace: %d alloc, %d free, %d realloc; %d live at end; "
          "%d skipped, %d implicit frees, %d other lines"
          % (counts["a"], counts["f"], counts["r"], len(live), counts["skipped"],
             counts["implicit free"], counts["other"]), file=sys.stderr)


if __name__ == "__main__":
    main()
