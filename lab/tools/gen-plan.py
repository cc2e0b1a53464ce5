#!/usr/bin/env python3
"""Large planning problems for `tagalloc-bench plan`, in MiniMalloc's CSV format.

    gen-plan.py SHAPE N [SEED] > FILE.csv

SHAPE:
  chain     buffer i lives over [i, i + 2): each overlaps the one before and after (a layer
            graph's activations handed from step to step)
  all-live  every buffer over [0, 1): one moment, N buffers live together
  random    starts uniform over [0, N), lifetimes 1 to 64 steps (a mix of short and long)

Sizes are uniform multiples of 64 from 64 B to 64 KiB, from a fixed seed (default 1), so a
file is reproduced exactly. Files this large are generated, never committed.
"""
import random
import sys


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("chain", "all-live", "random"):
        sys.exit(__doc__)
    shape, n = sys.argv[1], int(sys.argv[2])
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) == 4 else 1)
    out = sys.stdout
    out.write("id,lower,upper,size\n")
    rows = []
    for i in range(n):
        size = 64 * rng.randint(1, 1024)
        if shape == "chain":
            lo, hi = i, i + 2
        elif shape == "all-live":
            lo, hi = 0, 1
        else:
            lo = rng.randrange(n)
            hi = lo + rng.randint(1, 64)
        rows.append(f"{i},{lo},{hi},{size}\n")
        if len(rows) == 65536:
            out.write("".join(rows))
            rows.clear()
    out.write("".join(rows))


if __name__ == "__main__":
    main()
