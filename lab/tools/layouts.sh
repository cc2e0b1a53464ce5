#!/usr/bin/env bash
# How much of a speed ratio between allocators is code layout: links the bench N times, each
# time with lld placing every function (and every other input section) in an order shuffled by
# a different seed, and runs talc's random actions (or replays of traces) for tagalloc's inline
# heap and the named peers in each binary, in turn.
#
# Why: where the linker puts a hot loop (its split across cache lines and fetch blocks, which
# branches share a predictor slot) moves a program's speed by several percent with no change
# to its code (Mytkowicz, Diwan, Hauswirth and Sweeney, "Producing wrong data without doing
# anything obviously wrong!", ASPLOS 2009; Curtsinger and Berger's Stabilizer, ASPLOS 2013,
# which re-randomizes layout for the same reason). One binary is one draw of layout, for
# tagalloc and for each peer: a change to tagalloc's code moves talc's code too, and talc's own
# score has moved by up to 5 % between two such builds. Over many shuffled layouts the spread of
# each ratio shows how much of it is layout, and its median is a figure no single layout
# decides.
#
# Usage: lab/tools/layouts.sh [--layouts N] [--runs T] [--sizes S] [--replay TRACE[,...]]
#                               [--out DIR] [ALLOCATOR...]
#   --layouts N   shuffled layouts (default 8; seeds 1..N), after the usual, unshuffled one
#   --runs T      in each layout, random-actions trials per size and allocator (default 7,
#                 talc's), or with --replay timed runs of each trace (default 9)
#   --sizes S     random actions at these maximum sizes only (as random-actions --sizes
#                 takes them; default talc's five)
#   --replay T,.. replay these traces (names in ../shared/traces, or paths from the
#                 repository's root; budget 1 s a run) instead of running random actions
#   --out DIR     where each layout's JSON goes (default target/layouts/runs)
#   ALLOCATOR     peers by key, as `tagalloc-bench --only` takes them (default: talc)
#
# Output: a markdown table on stdout, one row per layout. Random actions: each peer's score ÷
# tagalloc's at each maximum size (above 1: the peer made more calls), and
# every allocator's own score in millions of calls per 200 ms. Replay: each peer's ns/event ÷
# tagalloc's per trace (above 1: tagalloc took less time), and every allocator's ns/event.
# Then the median, lowest and highest over the shuffled layouts. Builds go to target/layouts
# (its own directory: the shuffling linker is set through RUSTFLAGS, which would otherwise
# rebuild the usual target); each layout is a relink only. Random actions take about
# N × (2 + 1.4 × T × (peers + 1)) seconds after the first build.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
layouts=8
runs=
replay=
sizes=
out=target/layouts/runs
peers=()
while [ $# -gt 0 ]; do
    case $1 in
        --layouts) layouts=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --replay) replay=$2; shift 2 ;;
        --sizes) sizes=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -*) sed -n '2,/^set/p' "$0" | sed 's/^# \{0,1\}//;$d' >&2; exit 2 ;;
        *) peers+=("$1"); shift ;;
    esac
done
[ ${#peers[@]} -eq 0 ] && peers=(talc)
if [ -z "$runs" ]; then
    if [ -n "$replay" ]; then runs=9; else runs=7; fi
fi
only=$(IFS=,; echo "${peers[*]}")
# A trace is NAME.trace.gz in ../shared/traces, else a path as given.
traces=()
if [ -n "$replay" ]; then
    IFS=, read -ra names <<<"$replay"
    for t in "${names[@]}"; do
        if [ -f "../shared/traces/$t.trace.gz" ]; then
            traces+=("../shared/traces/$t.trace.gz")
        elif [ -f "$t" ]; then
            traces+=("$t")
        else
            echo "layouts.sh: no trace $t (neither ../shared/traces/$t.trace.gz nor a file)" >&2
            exit 2
        fi
    done
fi
case $layouts in '' | *[!0-9]*) echo "layouts.sh: --layouts takes a number" >&2; exit 2 ;; esac
if [ -n "$replay" ] && [ -n "$sizes" ]; then
    echo "layouts.sh: --sizes is for random actions, not with --replay" >&2
    exit 2
fi
case $runs in '' | *[!0-9]* | 0) echo "layouts.sh: --runs takes a positive number" >&2; exit 2 ;; esac
mkdir -p "$out"

export CARGO_TARGET_DIR="$root/target/layouts"
export RUSTFLAGS="-C linker=$root/lab/tools/shuffle-link"
bin="$CARGO_TARGET_DIR/release/tagalloc-bench"

# relink_bench: the bench linked again with its sections shuffled by a seed.
. "$root/lab/tools/relink.sh"

for seed in $(seq 0 "$layouts"); do
    relink_bench "$seed"
    echo "layouts.sh: layout $seed of $layouts, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    if [ -n "$replay" ]; then
        "$bin" replay "${traces[@]}" --only "$only" --runs "$runs" --budget 1 --json \
            --no-plots >"$out/layout-$seed.json"
    else
        "$bin" random-actions --only "$only" ${sizes:+--sizes "$sizes"} --runs "$runs" --json --no-plots \
            >"$out/layout-$seed.json"
    fi
done

python3 - "$out" "$layouts" <<'EOF'
import json, statistics, sys

out, n = sys.argv[1], int(sys.argv[2])
# Per layout: column (a size or a trace) -> allocator key -> figure.
layouts = []
for seed in range(n + 1):
    doc = json.load(open(f"{out}/layout-{seed}.json"))
    cols = {}
    if "random_actions" in doc:
        ra = doc["random_actions"]
        unit, better = "M calls", "the peer made more calls"
        for j, size in enumerate(ra["max_sizes"]):
            cols[f"{size} B"] = {r["key"]: r["scores_per_200ms"][j] / 1e6 for r in ra["results"]}
    else:
        unit, better = "ns/event", "tagalloc took less time"
        for t in doc["replay"]:
            cols[t["trace"]] = {r["key"]: r["ns_per_event"] for r in t["results"]}
    layouts.append(cols)
names = list(layouts[0])
print(f"Machine: {json.load(open(f'{out}/layout-0.json'))['machine']['processor']}.\n")
keys = list(layouts[0][names[0]])
base, peers = keys[0], keys[1:]
assert base == "tagalloc_inline", keys


def ratio(cols, p, c):
    return cols[c][p] / cols[c][base]


head = ["layout"] + [f"{p} ÷ tagalloc, {c}" for p in peers for c in names]
head += [f"{k}, {c} ({unit})" for k in keys for c in names]
print(f"Ratios above 1: {better}.\n")
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for seed, cols in enumerate(layouts):
    cells = ["usual" if seed == 0 else f"shuffled, seed {seed}"]
    cells += [f"{ratio(cols, p, c):.2f}" for p in peers for c in names]
    cells += [f"{cols[c][k]:.2f}" for k in keys for c in names]
    print("| " + " | ".join(cells) + " |")
if n > 0:
    shuffled = layouts[1:]
    for label, f in (("median", statistics.median), ("lowest", min), ("highest", max)):
        cells = [f"{label} of {n} shuffled"]
        cells += [f"{f([ratio(l, p, c) for l in shuffled]):.2f}" for p in peers for c in names]
        cells += [f"{f([l[c][k] for l in shuffled]):.2f}" for k in keys for c in names]
        print("| " + " | ".join(cells) + " |")
EOF
