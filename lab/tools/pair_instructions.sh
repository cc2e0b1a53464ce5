#!/usr/bin/env bash
# Instructions per malloc+free pair of lab/tools/pairs.c (callgrind, which the machine's load
# does not move) on two builds of the preload library: each is run for N and 2N pairs, and the
# difference divided by N, so start-up and exit cancel out. Prints a markdown table.
#
# Usage: lab/tools/pair_instructions.sh BASE.so NEW.so [N]   (N default 1000000)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ $# -ge 2 ] || { echo "usage: $0 BASE.so NEW.so [N]" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "$0: valgrind is not installed" >&2; exit 1; }
base=$(realpath "$1")
new=$(realpath "$2")
n=${3:-1000000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cc -O2 -o "$dir/pairs" lab/tools/pairs.c

# Instructions of `pairs COUNT` with LIB preloaded: callgrind's total.
count() {
    LD_PRELOAD=$1 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
        "$dir/pairs" "$2" 2>&1 > /dev/null | grep -o 'Collected : [0-9]*' | grep -o '[0-9]*$'
}

per_pair() {
    local one two
    one=$(count "$1" "$n")
    two=$(count "$1" $((2 * n)))
    awk -v a="$one" -v b="$two" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / n }'
}

a=$(per_pair "$base")
b=$(per_pair "$new")
echo "| pairs.c, instructions per malloc+free pair | $(basename "$base") | $(basename "$new") | ratio |"
echo "| --- | ---: | ---: | ---: |"
awk -v a="$a" -v b="$b" 'BEGIN { printf "| %d pairs more | %.1f | %.1f | %.3f |\n", '"$n"', a, b, b / a }'
