#!/usr/bin/env bash
# What the malloc library's default-mode misuse detection costs real programs: this tree's
# library against the same tree with lab/tools/no-detection.patch applied (the range lookups,
# the tag checks at a free and when a cached block goes back to the heap, and the merge's marks
# left out: a build for this measurement only, which trusts every pointer it is given), in
# instructions (lab/tools/program_instructions.sh, callgrind) and, with --time, in
# `tagalloc-bench programs` (the two libraries interleaved in every round).
#
# Usage: lab/tools/detection_cost.sh [--time] [OUT_DIR]   (default target/detection-cost)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
time=false
if [ "${1:-}" = --time ]; then
    time=true
    shift
fi
out=$(realpath -m "${1:-target/detection-cost}")
mkdir -p "$out"

# The library as it is, and the one without detection, each in its own target directory.
cargo build --release -p tagalloc-malloc
cp target/release/libtagalloc_malloc.so "$out/on.so"
git worktree remove --force "$out/tree" 2> /dev/null || rm -rf "$out/tree"
git worktree add --detach "$out/tree" HEAD > /dev/null
trap 'git -C "$root" worktree remove --force "$out/tree"' EXIT
git diff HEAD | git -C "$out/tree" apply --allow-empty
git -C "$out/tree" apply "$root/lab/tools/no-detection.patch"
(cd "$out/tree" && CARGO_TARGET_DIR="$out/target" cargo build --release -p tagalloc-malloc)
cp "$out/target/release/libtagalloc_malloc.so" "$out/off.so"

echo "$(date -u '+%F %T') UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
bash lab/tools/program_instructions.sh "$out/off.so" "$out/on.so" "$out/callgrind"
if $time; then
    cargo build --release -p tagalloc-bench
    target/release/tagalloc-bench programs --no-plots --lib "$out/on.so" --baseline "$out/off.so"
fi
