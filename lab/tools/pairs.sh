#!/usr/bin/env bash
# The malloc+free pair of lab/tools/pairs.c with glibc, jemalloc, mimalloc, tcmalloc and the
# tagalloc library preloaded, in turn, ROUNDS rounds (default 3); prints each run, then the
# median per allocator. Usage: bash lab/tools/pairs.sh [LIB.so] [ROUNDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
lib=${1:-target/release/libtagalloc_malloc.so}
rounds=${2:-3}
exe=$(mktemp -d)/pairs
cc -O2 -o "$exe" lab/tools/pairs.c
d=/usr/lib/x86_64-linux-gnu
declare -A pre=([glibc]="" [jemalloc]=$d/libjemalloc.so.2 [mimalloc]=$d/libmimalloc.so.2
    [tcmalloc]=$d/libtcmalloc_minimal.so.4 [tagalloc]=$lib)
echo "$(date -u '+%F %T') UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A runs
for r in $(seq "$rounds"); do
    for a in glibc jemalloc mimalloc tcmalloc tagalloc; do
        p=${pre[$a]}
        if [ -n "$p" ] && [ ! -e "$p" ]; then continue; fi
        ns=$(LD_PRELOAD=$p "$exe" | cut -d' ' -f1)
        echo "round $r $a $ns"
        runs[$a]="${runs[$a]:-} $ns"
    done
done
for a in glibc jemalloc mimalloc tcmalloc tagalloc; do
    [ -n "${runs[$a]:-}" ] || continue
    echo "$a median: $(echo ${runs[$a]} | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]} ') ns"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
