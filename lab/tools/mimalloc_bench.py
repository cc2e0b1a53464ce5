#!/usr/bin/env python3
"""The tables of lab/tools/mimalloc_bench.sh, from its raw CSV files.

runs.csv (round,program,allocator,status,figure,kind,elapsed_s,user_s,sys_s,maxrss_kib):
per program, the median figure (elapsed seconds, or bench.sh's relative time for the
programs that report a rate) of each allocator divided by glibc's, and tagalloc's (both modes)
divided by the best of glibc and the peers; the median peak RSS divided by glibc's; a
geometric-mean row. A cell is the median of the rounds that succeeded; a round that failed
marks it (`2/3`: two of three rounds succeeded) and a cell with no success names the failure.

security.csv (test,allocator,class,exit): counts of each class per allocator, and the late
crashes by name.

Usage: mimalloc_bench.py [--runs runs.csv] [--security security.csv]
"""

import argparse
import csv
import math
import statistics
from collections import OrderedDict, defaultdict

ORDER = ["glibc", "tagalloc", "tagalloc-checked", "jemalloc", "mimalloc", "tcmalloc"]
PEERS = ["glibc", "jemalloc", "mimalloc", "tcmalloc"]
SHORT = {"glibc": "glibc", "jemalloc": "je", "mimalloc": "mi", "tcmalloc": "tc"}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fmt(v, digits=2):
    return "-" if v is None else f"{v:.{digits}f}"


class Cell:
    """One program under one allocator over the rounds."""

    def __init__(self):
        self.figures, self.rss, self.failures = [], [], []

    def add(self, row):
        if row["status"] == "ok":
            self.figures.append(float(row["figure"]))
            if row["maxrss_kib"] not in ("", "-"):
                self.rss.append(float(row["maxrss_kib"]))
        else:
            self.failures.append(row["status"])

    def median(self, what):
        values = self.figures if what == "time" else self.rss
        return statistics.median(values) if values else None

    def mark(self):
        """'' if every round succeeded, else the success count or the failure."""
        if not self.failures:
            return ""
        if not self.figures:
            return sorted(set(self.failures))[0]
        return f" ({len(self.figures)}/{len(self.figures) + len(self.failures)})"


def runs_tables(path):
    rows = read(path)
    programs = list(OrderedDict.fromkeys(r["program"] for r in rows))
    present = {r["allocator"] for r in rows}
    allocs = [a for a in ORDER if a in present]
    cells = defaultdict(Cell)
    kinds = {}
    for r in rows:
        cells[(r["program"], r["allocator"])].add(r)
        if r["kind"] not in ("", "-"):
            kinds[r["program"]] = r["kind"]
    rounds = len({r["round"] for r in rows})
    others = [a for a in allocs if a != "glibc"]
    ours = [a for a in allocs if a.startswith("tagalloc")]
    peers = [a for a in PEERS if a in present]

    for what, title in [("time", "time"), ("rss", "peak RSS")]:
        print(f"### {title} ÷ glibc (median of {rounds} round(s); smaller is better)\n")
        head = ["program", f"glibc {'s' if what == 'time' else 'MiB'}"] + others
        if what == "time":
            head += [f"{a} ÷ best" for a in ours]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        ratios = defaultdict(list)
        for p in programs:
            base_cell = cells[(p, "glibc")]
            base = base_cell.median(what)
            shown = base if what == "time" or base is None else base / 1024
            unit = " (rate)" if what == "time" and kinds.get(p) == "rate" else ""
            line = [p + unit, fmt(shown) + base_cell.mark()]
            for a in others:
                c = cells[(p, a)]
                v = c.median(what)
                if v is not None and base:
                    ratios[a].append(v / base)
                    line.append(fmt(v / base) + c.mark())
                else:
                    line.append(c.mark() or "-")
            if what == "time":
                best = None
                for a in peers:
                    v = cells[(p, a)].median("time")
                    if v is not None and (best is None or v < best[1]):
                        best = (a, v)
                for a in ours:
                    v = cells[(p, a)].median("time")
                    if v is not None and best:
                        ratios[a + " ÷ best"].append(v / best[1])
                        line.append(f"{v / best[1]:.2f} ({SHORT[best[0]]})")
                    else:
                        line.append("-")
            print("| " + " | ".join(line) + " |")
        line = ["geometric mean", ""]
        for a in others + ([f"{a} ÷ best" for a in ours] if what == "time" else []):
            g = geomean(ratios[a])
            n = len(ratios[a])
            line.append(fmt(g) + ("" if n == len(programs) else f" (of {n})"))
        print("| " + " | ".join(line) + " |")
        print()
    if any(k == "rate" for k in kinds.values()):
        print(
            "(rate): the program reports a rate; its figure is bench.sh's relative time, "
            "proportional to 1/rate. best: the fastest of "
            + ", ".join(peers)
            + " on that program.\n"
        )


def security_tables(path):
    rows = read(path)
    present = {r["allocator"] for r in rows}
    allocs = [a for a in ORDER if a in present]
    classes = ["caught", "not-caught", "late-report", "late-crash", "late-timeout", "timeout"]
    count = defaultdict(int)
    late = defaultdict(list)
    tests = set()
    for r in rows:
        count[(r["allocator"], r["class"])] += 1
        tests.add(r["test"])
        if r["class"] in ("late-crash", "late-report"):
            late[r["allocator"]].append(f"{r['test']} ({r['class']}, {describe(r['exit'])})")
    print(f"### security tests ({len(tests)} programs)\n")
    print("| allocator | " + " | ".join(classes) + " |")
    print("|" + "---|" * (len(classes) + 1))
    for a in allocs:
        print(f"| {a} | " + " | ".join(str(count[(a, c)]) for c in classes) + " |")
    print()
    for a in allocs:
        if late[a]:
            print(f"late under {a}: " + ", ".join(sorted(late[a])))
    print()


def describe(rc):
    rc = int(rc)
    return f"signal {rc - 128}" if rc > 128 else f"exit {rc}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs")
    ap.add_argument("--security")
    args = ap.parse_args()
    if args.runs:
        runs_tables(args.runs)
    if args.security:
        security_tables(args.security)


if __name__ == "__main__":
    main()
