#!/usr/bin/env bash
# Where a real program's time goes under each allocator: the program's own code, the allocator,
# the C library and the kernel, from `perf record`'s samples of the CPU clock (no hardware
# counters needed), with glibc, jemalloc, mimalloc, tcmalloc and the tagalloc library preloaded
# in turn, ROUNDS rounds interleaved. It separates what an allocator costs in its own functions
# from what its layout costs the program (the program's code running slower over the blocks it
# was given). Prints one line per run, in milliseconds of samples.
#
# Usage: lab/tools/program_split.sh [--lib LIB.so] [--rounds N] PROGRAM...
#   PROGRAM runs in backend-host/malloc/programs with PYTHONMALLOC=malloc PYTHONHASHSEED=0, e.g.
#   lab/tools/program_split.sh python3 json_roundtrip.py 15000
#   lab/tools/program_split.sh python3 threads.py 300
#   lab/tools/program_split.sh perl words.pl 200000
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
lib=$root/target/release/libtagalloc_malloc.so
rounds=3
while [ $# -gt 0 ]; do
    case $1 in
        --lib) lib=$(realpath "$2"); shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--lib LIB.so] [--rounds N] PROGRAM..." >&2; exit 2; }
command -v perf > /dev/null || { echo "$0: perf is not installed" >&2; exit 1; }
[ -e "$lib" ] || { echo "$0: $lib: no such library (cargo build --release -p tagalloc-malloc)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
d=/usr/lib/x86_64-linux-gnu
declare -A pre=([glibc]="" [jemalloc]=$d/libjemalloc.so.2 [mimalloc]=$d/libmimalloc.so.2
    [tcmalloc]=$d/libtcmalloc_minimal.so.4 [tagalloc]=$lib)
hz=4000
cd "$root/backend-host/malloc/programs"
echo "$(date -u '+%F %T') UTC, load average $(cut -d' ' -f1-3 /proc/loadavg): $*"
for r in $(seq "$rounds"); do
    for a in glibc jemalloc mimalloc tcmalloc tagalloc; do
        p=${pre[$a]}
        if [ -n "$p" ] && [ ! -e "$p" ]; then
            [ "$r" = 1 ] && echo "$a: $p is not installed, skipped"
            continue
        fi
        LD_PRELOAD=$p PYTHONMALLOC=malloc PYTHONHASHSEED=0 LC_ALL=C \
            perf record -q -F $hz -o "$out/p.data" "$@" > /dev/null 2> "$out/err" ||
            { cat "$out/err" >&2; exit 1; }
        # Samples per shared object, folded into five groups; the program is whatever is
        # neither an allocator, the C library nor the kernel.
        perf report -i "$out/p.data" --stdio --no-children --sort dso -F sample,dso 2> /dev/null |
            awk -v a="$a" -v r="$r" -v hz=$hz -v lib="$(basename "$lib")" '
                /^#/ || NF < 2 { next }
                { n = $1; $1 = ""; d = $0
                  if (d ~ /jemalloc|mimalloc|tcmalloc/ || index(d, lib)) k = "alloc"
                  else if (d ~ /kernel/) k = "kernel"
                  else if (d ~ /libc\.so/) k = "libc"
                  else k = "program"
                  s[k] += n; t += n }
                END { f = 1000 / hz
                      printf "round %d %-9s total %4.0f ms: program %4.0f, allocator %4.0f, libc %4.0f, kernel %4.0f\n",
                          r, a, t * f, s["program"] * f, s["alloc"] * f, s["libc"] * f, s["kernel"] * f }'
    done
done
echo "(glibc's malloc is inside libc; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
