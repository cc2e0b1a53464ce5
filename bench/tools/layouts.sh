#!/usr/bin/env bash
# How much of a speed ratio between allocators is code layout: links the bench N times, each
# time with lld placing every function (and every other input section) in an order shuffled by
# a different seed, and runs talc's random actions for tagalloc's inline heap and the named
# peers in each binary, in turn.
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
# Usage: bench/tools/layouts.sh [--layouts N] [--runs T] [--out DIR] [ALLOCATOR...]
#   --layouts N   shuffled layouts (default 8; seeds 1..N), after the usual, unshuffled one
#   --runs T      random-actions trials per size and allocator in each (default 7, talc's)
#   --out DIR     where each layout's JSON goes (default target/layouts/runs)
#   ALLOCATOR     peers by key, as `tagalloc-bench random-actions` takes them (default: talc)
#
# Output: a markdown table on stdout, one row per layout: each peer's score ÷ tagalloc's at
# 200 / 1000 / 3000 / 10000 / 30000 B (above 1: the peer made more calls), and every
# allocator's own score in millions of calls per 200 ms; then the median, lowest and highest over the shuffled
# layouts. Builds go to target/layouts (its own directory: the shuffling linker is set through
# RUSTFLAGS, which would otherwise rebuild the usual target); each layout is a relink only.
# About N × (2 + 1.4 × T × peers) seconds after the first build.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
layouts=8
runs=7
out=target/layouts/runs
peers=()
while [ $# -gt 0 ]; do
    case $1 in
        --layouts) layouts=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -*) sed -n '2,/^set/p' "$0" | sed 's/^# \{0,1\}//;$d' >&2; exit 2 ;;
        *) peers+=("$1"); shift ;;
    esac
done
[ ${#peers[@]} -eq 0 ] && peers=(talc)
case $layouts in '' | *[!0-9]*) echo "layouts.sh: --layouts takes a number" >&2; exit 2 ;; esac
case $runs in '' | *[!0-9]* | 0) echo "layouts.sh: --runs takes a positive number" >&2; exit 2 ;; esac
mkdir -p "$out"

export CARGO_TARGET_DIR="$root/target/layouts"
export RUSTFLAGS="-C linker=$root/bench/tools/shuffle-link"
bin="$CARGO_TARGET_DIR/release/tagalloc-bench"

# Links the bench with sections shuffled by seed $1 (0: not shuffled). Only the binary is
# removed, so cargo links it again from the same compiled crates.
link() {
    rm -f "$bin"
    for f in "$CARGO_TARGET_DIR"/release/deps/tagalloc_bench-*; do
        case $f in *.d | *.rlib | *.rmeta) ;; *) [ -f "$f" ] && rm -f "$f" ;; esac
    done
    if [ "$1" = 0 ]; then
        env -u TAGALLOC_LAYOUT_SEED cargo build --release -p tagalloc-bench >&2
    else
        TAGALLOC_LAYOUT_SEED=$1 cargo build --release -p tagalloc-bench >&2
    fi
}

for seed in $(seq 0 "$layouts"); do
    link "$seed"
    echo "layouts.sh: layout $seed of $layouts, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    "$bin" random-actions "${peers[@]}" --runs "$runs" --json --no-plots >"$out/layout-$seed.json"
done

python3 - "$out" "$layouts" <<'EOF'
import json, statistics, sys

out, n = sys.argv[1], int(sys.argv[2])
rows = []
for seed in range(n + 1):
    ra = json.load(open(f"{out}/layout-{seed}.json"))["random_actions"]
    res = ra["results"]
    base = res[0]["scores_per_200ms"]
    assert res[0]["key"] == "tagalloc_inline"
    rows.append((seed, base, {r["key"]: r["scores_per_200ms"] for r in res[1:]}))
sizes = ra["max_sizes"]
peers = list(rows[0][2])
head = ["layout"] + [f"{p} ÷ tagalloc, {s} B" for p in peers for s in sizes] + [
    f"{a}, {s} B (M calls)" for a in ["tagalloc"] + peers for s in sizes]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
ratios = {p: [[] for _ in sizes] for p in peers}
def fmt(seed, base, scores):
    cells = [("usual" if seed == 0 else f"shuffled, seed {seed}")]
    for p in peers:
        for j, _ in enumerate(sizes):
            r = scores[p][j] / base[j]
            cells.append(f"{r:.2f}")
            if seed > 0:
                ratios[p][j].append(r)
    cells += [f"{b / 1e6:.2f}" for b in base]
    cells += [f"{scores[p][j] / 1e6:.2f}" for p in peers for j in range(len(sizes))]
    return "| " + " | ".join(cells) + " |"
for seed, base, scores in rows:
    print(fmt(seed, base, scores))
if n > 0:
    for name, f in (("median", statistics.median), ("lowest", min), ("highest", max)):
        cells = [f"{name} of {n} shuffled"]
        for p in peers:
            cells += [f"{f(ratios[p][j]):.2f}" for j in range(len(sizes))]
        own = [f([r[1][j] for r in rows[1:]]) / 1e6 for j in range(len(sizes))]
        own += [f([r[2][p][j] for r in rows[1:]]) / 1e6 for p in peers for j in range(len(sizes))]
        cells += [f"{o:.2f}" for o in own]
        print("| " + " | ".join(cells) + " |")
EOF
