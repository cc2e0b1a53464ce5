#!/usr/bin/env bash
# Whether a change to the heap makes tagalloc faster: talc's random actions run by this tree's
# bench with the library of this tree ("new") and of a git revision ("base"), each linked in
# several shuffled layouts, the two builds in turn many times; the answer is every ratio of
# tagalloc's score to a peer's, per build, and the paired ratio new ÷ base.
#
# Why: a change of a few instructions moves tagalloc's speed by about 1 %, less than the
# machine's drift between two runs (several %) and than code layout moves a ratio (3 to 5 points,
# lab/tools/layouts.sh). So each figure is taken against a peer in the same binary and the
# same seconds (the drift cancels), over shuffled layouts of both builds (no one layout
# decides), with the builds alternating run by run (what drift is left reaches both alike).
#
# Usage: lab/tools/ab.sh [--layouts K] [--rounds R] [--runs T] [--sizes S] [--out DIR]
#                          REV [PEER]
#   REV          the base: a commit, branch or tag; "new" is this working tree, uncommitted
#                changes included
#   PEER         the allocator every ratio is taken against, by key (default talc)
#   --layouts K  shuffled layouts of each build, after the usual one (default 2)
#   --rounds R   runs of every binary (default 3)
#   --runs T     random-actions trials per run and size (default 3)
#   --sizes S    maximum sizes, as random-actions --sizes takes them (default talc's five)
#   --out DIR    builds and JSON (default target/ab)
#
# Both builds use this tree's bench/ (copied over the base's), so only the library and what it
# reaches differ; a base whose library the bench cannot build against fails to build, and says
# so. The base is checked out as a git worktree in DIR/tree; each build has its own target
# directory in DIR. Output: a markdown table on stdout, one row per size.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
layouts=2
rounds=3
runs=3
sizes=
out=target/ab
args=()
usage() { sed -n '2,/^set/p' "$0" | sed 's/^# \{0,1\}//;$d' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --layouts) layouts=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --sizes) sizes=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -*) usage ;;
        *) args+=("$1"); shift ;;
    esac
done
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] || usage
rev=$(git rev-parse --verify --quiet "${args[0]}^{commit}") || {
    echo "ab.sh: no commit ${args[0]}" >&2
    exit 2
}
peer=${args[1]:-talc}
for n in "$layouts:--layouts" "$rounds:--rounds" "$runs:--runs"; do
    case ${n%%:*} in
        '' | *[!0-9]*) echo "ab.sh: ${n#*:} takes a number" >&2; exit 2 ;;
    esac
done
[ "$rounds" -ge 1 ] && [ "$runs" -ge 1 ] || { echo "ab.sh: --rounds and --runs start at 1" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
size_args=()
[ -n "$sizes" ] && size_args=(--sizes "$sizes")

# The base tree: REV, with this tree's bench.
tree="$out/tree"
if [ -e "$tree" ]; then
    git worktree remove --force "$tree"
fi
git worktree add --detach --force "$tree" "$rev" >&2
rm -rf "$tree/bench"
cp -r "$root/bench" "$tree/bench"

. "$root/lab/tools/relink.sh"
export RUSTFLAGS="-C linker=$root/lab/tools/shuffle-link"
mkdir -p "$out/bin" "$out/json"
for build in base new; do
    src=$root
    [ $build = base ] && src=$tree
    export CARGO_TARGET_DIR="$out/target-$build"
    for seed in $(seq 0 "$layouts"); do
        (cd "$src" && relink_bench "$seed") || {
            echo "ab.sh: the $build build failed (for base: does this bench build against $rev's library?)" >&2
            exit 1
        }
        cp "$CARGO_TARGET_DIR/release/tagalloc-bench" "$out/bin/$build-$seed"
    done
done
git worktree remove --force "$tree"

# A check that the bench takes the arguments, before the long part.
"$out/bin/new-0" random-actions --only "$peer" "${size_args[@]}" --runs 1 --quick --json \
    --no-plots >/dev/null

for r in $(seq 1 "$rounds"); do
    echo "ab.sh: round $r of $rounds, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    for seed in $(seq 0 "$layouts"); do
        # The builds' order alternates, so neither always runs first.
        order="base new"
        [ $(((r + seed) % 2)) = 1 ] && order="new base"
        for build in $order; do
            "$out/bin/$build-$seed" random-actions --only "$peer" "${size_args[@]}" \
                --runs "$runs" --json --no-plots >"$out/json/$build-$r-$seed.json"
        done
    done
done

python3 - "$out/json" "$rounds" "$layouts" "$peer" "$rev" <<'EOF'
import json, statistics, sys

d, rounds, layouts, peer, rev = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
# (build, round, seed) -> size -> tagalloc's score ÷ the peer's
ratios = {}
for build in ("base", "new"):
    for r in range(1, rounds + 1):
        for s in range(layouts + 1):
            ra = json.load(open(f"{d}/{build}-{r}-{s}.json"))["random_actions"]
            scores = {x["key"]: x["scores_per_200ms"] for x in ra["results"]}
            ratios[build, r, s] = {
                m: scores["tagalloc_inline"][j] / scores[peer][j]
                for j, m in enumerate(ra["max_sizes"])
            }
sizes = list(ratios["base", 1, 0])
machine = json.load(open(f"{d}/new-1-0.json"))["machine"]["processor"]

pairs = [(r, s) for r in range(1, rounds + 1) for s in range(layouts + 1)]


def spread(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}–{max(xs):.3f})"


print(f"tagalloc's score ÷ {peer}'s (above 1: tagalloc made more calls), median (lowest–highest)")
print(f"over {len(pairs)} runs of each build ({rounds} rounds × {layouts + 1} layouts); base is")
print(f"{rev[:12]}, new this tree; new ÷ base is taken run by run (the same round and layout")
print("seed, one after the other) and is above 1 where new is faster.")
print(f"Machine: {machine}.\n")
print(f"| max size | base | new | new ÷ base | runs where new is ahead |")
print("|---|---|---|---|---|")
for m in sizes:
    base = [ratios["base", r, s][m] for r, s in pairs]
    new = [ratios["new", r, s][m] for r, s in pairs]
    paired = [n / b for n, b in zip(new, base)]
    ahead = sum(p > 1 for p in paired)
    print(f"| {m} B | {spread(base)} | {spread(new)} | {spread(paired)} | {ahead} of {len(pairs)} |")
EOF
