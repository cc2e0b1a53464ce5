#!/usr/bin/env bash
# Where the heap's time goes: instructions per call (callgrind) and data-cache misses per call
# (cachegrind) of tagalloc's inline heap, talc and dlmalloc on the same workloads, then
# tagalloc's instructions split by the path they took on one workload.
#
# Instruction counts and simulated misses do not depend on the machine's load, so unlike the
# timed benchmarks this can run on a busy machine; it takes about twelve minutes on two cores.
#
# Usage: lab/tools/profile.sh [--allocators "tagalloc talc dlmalloc"] [--workloads "..."]
# (allocators: tagalloc, tagalloc-nostats (the inline heap without statistics), talc,
# dlmalloc, rlsf)
#                               [--paths WORKLOAD] [--out DIR]
# Workloads: random-MAX, path-exact, path-tree, path-trie, path-aligned, path-end, or a trace name (see
# lab/examples/profile.rs). Default: talc's random actions at 200, 3000 and 30000 bytes, the
# five path workloads, and the traces android-systemui, python-json and sqlite from
# ../shared/traces (the bundled perl-words and python-dicts where that is absent).
#
# Output: a markdown table on stdout, one row per workload and allocator:
#   alloc, free, realloc: instructions per call, inclusive (everything the call ran);
#     realloc without the copy (memcpy/memmove called from inside realloc), which is
#     reported on its own per realloc ("copy");
#   D1, LL: data-cache misses (reads and writes) per call of any kind, in the allocator's
#     own functions only (those callgrind saw reachable from the calls; the copy left out),
#     with the caches fixed below so that figures compare across machines.
# Then the path breakdown of tagalloc on --paths (default random-3000). The raw files stay in
# DIR (default target/profile) for callgrind_annotate and cg_annotate.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
allocators="tagalloc talc dlmalloc"
if [ -d ../shared/traces ]; then
    traces="android-systemui python-json sqlite"
else
    traces="perl-words python-dicts"
fi
workloads="random-200 random-3000 random-30000 path-exact path-tree path-trie path-aligned path-end $traces"
paths=random-3000
out=target/profile
while [ $# -gt 0 ]; do
    case $1 in
        --allocators) allocators=$2; shift 2 ;;
        --workloads) workloads=$2; shift 2 ;;
        --paths) paths=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) sed -n '2,/^set/p' "$0" | sed 's/^# \{0,1\}//;$d' >&2; exit 2 ;;
    esac
done
mkdir -p "$out"

# Release build with line tables (the workspace's release profile has `debug = 1`).
cargo build --release -p tagalloc-lab --example profile >&2
bin=target/release/examples/profile
costs="python3 lab/tools/costs.py"
# A typical desktop core's caches, the same on every machine: 32 KiB 8-way L1s and an 8 MiB
# 16-way last level (cachegrind would otherwise model the host's L3, which on a server can
# hold a whole workload).
caches="--I1=32768,8,64 --D1=32768,8,64 --LL=8388608,16,64"

per() { # numerator denominator -> one decimal, "-" for no calls
    awk -v n="$1" -v d="$2" 'BEGIN { if (d > 0) printf "%.1f", n / d; else printf "-" }'
}
per2() { # the same with two decimals
    awk -v n="$1" -v d="$2" 'BEGIN { if (d > 0) printf "%.2f", n / d; else printf "-" }'
}

echo "| workload | allocator | calls (alloc / free / realloc) | alloc | free | realloc | copy | D1 | LL |"
echo "|---|---|---|--:|--:|--:|--:|--:|--:|"
for w in $workloads; do
    for a in $allocators; do
        base="$out/$a.$w"
        # callgrind and cachegrind side by side: one process each.
        valgrind --tool=callgrind --compress-pos=no --callgrind-out-file="$base.callgrind" \
            "$bin" "$a" "$w" >"$base.calls" 2>"$base.callgrind.log" &
        callgrind=$!
        valgrind --tool=cachegrind --cache-sim=yes $caches --cachegrind-out-file="$base.cachegrind" \
            "$bin" "$a" "$w" >/dev/null 2>"$base.cachegrind.log" &
        cachegrind=$!
        status=0
        wait "$callgrind" || status=$?
        wait "$cachegrind" || status=$?
        if [ "$status" != 0 ]; then
            # The profile example says why it failed (a refused call, a broken invariant).
            echo "profile.sh: $a on $w failed (exit $status):" >&2
            grep -v '^==[0-9]*==' "$base.callgrind.log" | tail -n 5 >&2
            echo "(valgrind's logs: $base.callgrind.log, $base.cachegrind.log)" >&2
            exit 1
        fi
        read -r _ _ _ na _ nf _ nr _ failed <"$base.calls"
        read -r _ ia _ if _ ir _ im < <($costs calls "$base.callgrind" --funcs "$base.funcs")
        read -r _ _ _ _ _ d1 _ ll < <($costs misses "$base.cachegrind" "$base.funcs")
        n=$((na + nf + nr))
        note=""
        [ "$failed" != 0 ] && note=" ($failed failed)"
        echo "| $w | $a | $na / $nf / $nr$note | $(per "$ia" "$na") | $(per "$if" "$nf") |" \
            "$(per $((ir - im)) "$nr") | $(per "$im" "$nr") | $(per2 "$d1" "$n") | $(per2 "$ll" "$n") |"
    done
done

if [[ " $allocators " == *" tagalloc "* ]] && [ -n "$paths" ]; then
    if [ ! -f "$out/tagalloc.$paths.callgrind" ]; then
        valgrind --tool=callgrind --compress-pos=no --callgrind-out-file="$out/tagalloc.$paths.callgrind" \
            "$bin" tagalloc "$paths" >/dev/null 2>&1
    fi
    echo
    echo "tagalloc on $paths, by path:"
    echo
    echo '```'
    $costs paths "$out/tagalloc.$paths.callgrind" "$root"
    echo '```'
fi
