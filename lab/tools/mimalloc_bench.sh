#!/usr/bin/env bash
# The field's benchmark suite, mimalloc-bench (https://github.com/daanx/mimalloc-bench, MIT),
# built from a checkout given on the command line (nothing of it is copied here), run under
# glibc, tagalloc (default and TAGALLOC_CHECKED=1), jemalloc, mimalloc and tcmalloc,
# interleaved: round 1 runs every allocator on every program, then round 2, and so on. Then its
# security tests (bench/security), classified as its bench.sh does, with a "late crash" column.
#
# Usage: bash lab/tools/mimalloc_bench.sh --suite DIR [options]
#   --suite DIR        a mimalloc-bench work tree (bench.sh, bench/ in it)
#   --lib PATH         the preload library (default: cargo build --release -p tagalloc-malloc,
#                      then target/release/libtagalloc_malloc.so)
#   --rounds N         rounds of the interleaved runs (default 3)
#   --procs N          the thread count bench.sh calls procs (default: nproc)
#   --scale F          work factor for the programs that take a duration or a repetition
#                      count (larson, xmalloc-test: seconds; cache-*, mstress: iterations);
#                      1 (default) is bench.sh's command line, 0.2 a short run
#   --only "P ..."     only these programs (names as in the tables: cfrac alloc-test1 ...)
#   --allocators "A ..."  only these allocators (glibc tagalloc tagalloc-checked jemalloc
#                      mimalloc tcmalloc)
#   --timeout S        seconds per run before it is killed and reported "timeout" (default 120)
#   --out DIR          results and builds (default target/mimalloc-bench)
#   --security-only    only the security tests
#   --no-security      only the timed programs
#   --no-install       do not apt-get the peers that are missing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

suite="" lib="" rounds=3 procs=$(nproc) scale=1 only="" out="$root/target/mimalloc-bench"
timeout_s=120 security=yes timed=yes install=yes
allocators="glibc tagalloc tagalloc-checked jemalloc mimalloc tcmalloc"
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
    --suite) suite=$2; shift ;;
    --lib) lib=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --procs) procs=$2; shift ;;
    --scale) scale=$2; shift ;;
    --only) only=$2; shift ;;
    --allocators) allocators=$2; shift ;;
    --timeout) timeout_s=$2; shift ;;
    --out) out=$2; shift ;;
    --security-only) timed=no ;;
    --no-security) security=no ;;
    --no-install) install=no ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$suite" ] || [ ! -f "$suite/bench/CMakeLists.txt" ]; then
    echo "--suite must name a mimalloc-bench work tree (with bench/CMakeLists.txt)" >&2
    exit 2
fi
suite=$(cd "$suite" && pwd)
bench=$suite/bench
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ -z "$lib" ]; then
    (cd "$root" && cargo build --release -p tagalloc-malloc)
    lib=$root/target/release/libtagalloc_malloc.so
fi
lib=$(realpath "$lib")
[ -f "$lib" ] || { echo "no library at $lib" >&2; exit 2; }

# --- the peers ------------------------------------------------------------------------------
# allocator -> "package:library file name"
declare -A peer_pkg=([jemalloc]=libjemalloc2:libjemalloc.so.2
    [mimalloc]=libmimalloc2.0:libmimalloc.so.2 [tcmalloc]=libtcmalloc-minimal4:libtcmalloc_minimal.so.4)
declare -A preload=([glibc]="" [tagalloc]=$lib [tagalloc-checked]=$lib)
peer_so() { # PACKAGE FILE -> the installed file's path, or nothing
    dpkg -L "$1" 2>/dev/null | grep "/$2\$" | head -n1 || true
}
missing=()
for a in jemalloc mimalloc tcmalloc; do
    [[ " $allocators " == *" $a "* ]] || continue
    pkg=${peer_pkg[$a]%%:*} file=${peer_pkg[$a]#*:}
    [ -n "$(peer_so "$pkg" "$file")" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ] && [ "$install" = yes ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing ${missing[*]}"
        apt-get update -qq >/dev/null 2>&1 || echo "apt-get update failed" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
            echo "apt-get install ${missing[*]} failed" >&2
    else
        echo "not root or no apt-get: cannot install ${missing[*]}" >&2
    fi
fi
active=()
for a in $allocators; do
    case "$a" in
    glibc | tagalloc | tagalloc-checked) active+=("$a") ;;
    jemalloc | mimalloc | tcmalloc)
        pkg=${peer_pkg[$a]%%:*} file=${peer_pkg[$a]#*:}
        so=$(peer_so "$pkg" "$file")
        if [ -n "$so" ] && [ -f "$so" ]; then
            preload[$a]=$so
            active+=("$a")
        else
            echo "skipping $a: package $pkg is not installed (no $file)"
        fi
        ;;
    *) echo "unknown allocator $a" >&2; exit 2 ;;
    esac
done
# The environment of one allocator's runs, as env(1) arguments.
alloc_env() {
    case "$1" in
    glibc) echo "LD_PRELOAD=" ;;
    tagalloc-checked) echo "LD_PRELOAD=${preload[$1]} TAGALLOC_CHECKED=1" ;;
    *) echo "LD_PRELOAD=${preload[$1]}" ;;
    esac
}

# --- building -------------------------------------------------------------------------------
# As bench/CMakeLists.txt builds them (CMake's Release flags, -O3 -DNDEBUG, its warnings off),
# with gcc and g++ directly.
bin=$out/bin
mkdir -p "$bin" "$bin/security"
quiet="-w -Wno-implicit-function-declaration -Wno-implicit-int -Wno-int-conversion"
quiet="$quiet -Wno-incompatible-pointer-types"
# gcc 14 knows -Wno-return-mismatch; older ones reject it
if echo 'int main(void){return 0;}' | gcc -Wno-return-mismatch -x c -o /dev/null - 2>/dev/null; then
    quiet="$quiet -Wno-return-mismatch"
fi
cflags="-O3 -DNDEBUG $quiet"
cxxflags="-O3 -DNDEBUG -std=gnu++17 -w"
build_log=$out/build.log
: >"$build_log"
compile() { # NAME COMPILER ARGS... : builds $bin/NAME unless it is newer than the checkout
    local name=$1 cc=$2
    shift 2
    [ "$bin/$name" -nt "$bench/CMakeLists.txt" ] && return 0
    # shellcheck disable=SC2086
    if ! "$cc" "$@" -o "$bin/$name" >>"$build_log" 2>&1; then
        echo "build of $name failed (see $build_log)" >&2
        rm -f "$bin/$name"
    fi
}
build_programs() {
    local s
    local cfrac=(cfrac pops pconst pio pabs pneg pcmp podd phalf padd psub pmul pdivmod psqrt
        ppowmod atop ptoa itop utop ptou errorp pfloat pidiv pimod picmp primes pcfrac pgcd)
    local espresso=(cofactor cols compl contain cubestr cvrin cvrm cvrmisc cvrout dominate equiv
        espresso essen exact expand gasp getopt gimpel globals hack indep irred main map matrix
        mincov opo pair part primes reduce rows set setc sharp sminterf solution sparse unate
        utility verify)
    local barnes=(code code_io load grav getparam util)
    # shellcheck disable=SC2086
    {
        s=("${cfrac[@]/#/$bench/cfrac/}")
        compile cfrac gcc $cflags -std=gnu89 -DNOMEMOPT=1 "${s[@]/%/.c}" -lm
        s=("${espresso[@]/#/$bench/espresso/}")
        compile espresso gcc $cflags -std=gnu89 "${s[@]/%/.c}" -lm
        s=("${barnes[@]/#/$bench/barnes/}")
        compile barnes gcc $cflags -std=gnu89 "${s[@]/%/.c}" -lm
        compile larson g++ $cxxflags -Wno-unused-result -DCPP=1 "$bench/larson/larson.cpp" -pthread
        compile larson-sized g++ $cxxflags -Wno-unused-result -fsized-deallocation -DCPP=1 \
            -DSIZED=1 "$bench/larson/larson.cpp" -pthread
        compile alloc-test g++ $cxxflags -DBENCH=4 "$bench/alloc-test/test_common.cpp" \
            "$bench/alloc-test/allocator_tester.cpp" -pthread
        compile cache-scratch g++ $cxxflags "$bench/cache-scratch/cache-scratch.cpp" -pthread
        compile cache-thrash g++ $cxxflags "$bench/cache-thrash/cache-thrash.cpp" -pthread
        compile xmalloc-test gcc $cflags "$bench/xmalloc-test/xmalloc-test.c" -pthread
        compile malloc-large g++ $cxxflags "$bench/malloc-large/malloc-large.cpp" -pthread
        compile mstress gcc $cflags "$bench/mstress/mstress.c" -pthread
        compile mleak gcc $cflags "$bench/mleak/mleak.c" -pthread
        compile rptest gcc $cflags -I"$bench/rptest" "$bench/rptest/rptest.c" \
            "$bench/rptest/thread.c" "$bench/rptest/timer.c" -pthread -lm
        compile glibc-simple gcc $cflags "$bench/glibc-bench/bench-malloc-simple.c" -pthread
        compile glibc-thread gcc $cflags "$bench/glibc-bench/bench-malloc-thread.c" -pthread
    }
}
# bench/security/CMakeLists.txt: each C test three times (8 bytes, 4 KiB, 256 KiB), the C++
# ones once (4 KiB).
build_security() {
    local f n secflags="-O3 -DNDEBUG -Wno-free-nonheap-object -fno-inline -fno-builtin-inline"
    secflags="$secflags -fno-inline-small-functions -fno-ipa-pure-const"
    for f in "$bench"/security/*.c; do
        n=$(basename "$f" .c)
        # shellcheck disable=SC2086
        {
            compile "security/${n}_small" gcc $secflags -DALLOCATION_SIZE=8 "$f"
            compile "security/${n}_medium" gcc $secflags -DALLOCATION_SIZE=4096 "$f"
            compile "security/${n}_large" gcc $secflags "-DALLOCATION_SIZE=256*1024" "$f"
        }
    done
    for f in "$bench"/security/*.cc; do
        n=$(basename "$f" .cc)
        compile "security/$n" g++ -O3 -DNDEBUG -std=c++17 -fsized-deallocation \
            -DALLOCATION_SIZE=4096 "$f"
    done
}

# --- the timed programs ---------------------------------------------------------------------
scaled() { # N -> N * scale, at least 1
    awk -v n="$1" -v f="$scale" 'BEGIN { v = int(n * f + 0.5); print (v < 1 ? 1 : v) }'
}
# bench.sh's command lines (its run_test), with procs threads; name|command|stdin file
programs_table() {
    local P=$procs
    cat <<EOF
cfrac|./cfrac 17545186520507317056371138836327483792789528|
espresso|./espresso $bench/espresso/largest.espresso|
barnes|./barnes|$bench/barnes/input
alloc-test1|./alloc-test 1|
alloc-testN|./alloc-test $((P > 16 ? 16 : P))|
larsonN|./larson $(scaled 5) 8 1000 5000 100 4141 $P|
larsonN-sized|./larson-sized $(scaled 5) 8 1000 5000 100 4141 $P|
xmalloc-testN|./xmalloc-test -w $P -t $(scaled 5) -s 64|
cache-thrash1|./cache-thrash 1 $(scaled 1000) 1 2000000 $P|
cache-thrashN|./cache-thrash $P $(scaled 1000) 1 2000000 $P|
cache-scratch1|./cache-scratch 1 $(scaled 1000) 1 2000000 $P|
cache-scratchN|./cache-scratch $P $(scaled 1000) 1 2000000 $P|
malloc-large|./malloc-large|
mstressN|./mstress $P 50 $(scaled 25)|
mleak10|./mleak 5|
mleak100|./mleak 50|
rptestN|./rptest $P 0 1 2 500 1000 100 8 16000|
glibc-simple|./glibc-simple|
glibc-thread|./glibc-thread $P|
EOF
}

# The figure of a finished run, as bench.sh takes it: the elapsed seconds, or for the
# programs that report a rate, bench.sh's "relative time" made from it (smaller is better,
# proportional to 1/rate, so a ratio of two figures is the inverse ratio of the rates).
# Prints "FIGURE KIND" or "- wrong" when the output lacks what it should print.
figure() { # NAME OUTFILE ELAPSED
    local v=""
    case "$1" in
    larson*) v=$(sed -n 's/.*relative time: \([0-9.]*\)s.*/\1/p' "$2" | tail -n1) ;;
    rptest*) v=$(sed -n 's/.*\.\.\.\([0-9]*\) memory ops.*/\1/p' "$2" | tail -n1)
        [ -n "$v" ] && [ "$v" != 0 ] && v=$(awk -v o="$v" 'BEGIN { printf "%.4f", 2000000 / o }') ;;
    xmalloc*) v=$(sed -n 's/^rtime: \([0-9.]*\).*/\1/p' "$2" | tail -n1) ;;
    glibc-thread) v=$(sed -n 's/^\([0-9]*\) iterations.*/\1/p' "$2" | tail -n1)
        [ -n "$v" ] && [ "$v" != 0 ] && v=$(awk -v o="$v" 'BEGIN { printf "%.4f", 1e9 / o }') ;;
    *) echo "$3 elapsed"; return ;;
    esac
    if [ -n "$v" ]; then echo "$v rate"; else echo "- wrong"; fi
}
# What a deterministic program prints, without its timings: compared with glibc's.
canonical() { # NAME FILE
    case "$1" in
    cfrac | espresso) cat "$2" ;;
    barnes) grep -v -e TIME -e COMPUTE "$2" ;;
    *) return 1 ;;
    esac
}

run_timed() {
    local csv=$out/runs.csv round line name cmd input a rundir o t rc status fig kind
    local e s u m
    echo "round,program,allocator,status,figure,kind,elapsed_s,user_s,sys_s,maxrss_kib" >"$csv"
    rm -rf "$out/reference"  # glibc's outputs of this invocation, not an earlier one's
    mkdir -p "$out/output" "$out/reference"
    for round in $(seq "$rounds"); do
        while IFS='|' read -r name cmd input; do
            if [ -n "$only" ] && [[ " $only " != *" $name "* ]]; then continue; fi
            cmd=$bin/${cmd#./}
            [ -x "${cmd%% *}" ] || { echo "$name: not built, skipped"; continue; }
            for a in "${active[@]}"; do
                rundir=$out/run/$a
                mkdir -p "$rundir"
                o=$out/output/$name-$a-$round.txt t=$out/output/$name-$a-$round.time
                rc=0
                # shellcheck disable=SC2046,SC2086
                (cd "$rundir" && timeout "$timeout_s" /usr/bin/time \
                    -o "$t" -f "TIME %e %U %S %M" env $(alloc_env "$a") $cmd \
                    <"${input:-/dev/null}" >"$o" 2>"$o.err") || rc=$?
                read -r e u s m < <(grep '^TIME' "$t" 2>/dev/null | tail -n1 | cut -d' ' -f2-) ||
                    true
                status=ok fig=- kind=-
                if [ "$rc" = 124 ]; then
                    status=timeout
                elif [ "$rc" != 0 ]; then
                    if [ "$rc" -gt 128 ]; then status="signal$((rc - 128))"; else status="exit$rc"; fi
                else
                    read -r fig kind < <(figure "$name" "$o" "$e")
                    [ "$fig" = - ] && status=wrong
                    if canonical "$name" "$o" >"$o.canon" 2>/dev/null; then
                        if [ "$a" = glibc ] && [ ! -f "$out/reference/$name" ]; then
                            cp "$o.canon" "$out/reference/$name"
                        elif [ -f "$out/reference/$name" ] &&
                            ! cmp -s "$o.canon" "$out/reference/$name"; then
                            status=wrong
                        fi
                    fi
                    rm -f "$o.canon"
                fi
                [ "$status" = ok ] || fig=-
                line="$round,$name,$a,$status,$fig,$kind,${e:--},${u:--},${s:--},${m:--}"
                echo "$line" >>"$csv"
                printf 'round %s %-15s %-17s %-8s %8s s  rss %8s KiB\n' "$round" "$name" "$a" \
                    "$status" "$fig" "${m:--}"
                e="" u="" s="" m=""
            done
        done < <(programs_table)
    done
}

# --- the security tests ---------------------------------------------------------------------
# bench.sh's classification: the misuse caught (the process stopped before printing
# NOT_CAUGHT: a signal, an abort, an exit, or nothing printed), not caught (NOT_CAUGHT printed
# and a normal exit), and, apart, a late report (NOT_CAUGHT printed, then the allocator reported
# the damage on stderr and aborted: found later, at a free or at exit, never followed), a late
# crash (NOT_CAUGHT printed, then any other signal or failing exit: the misuse went unnoticed and
# broke something later) and timeouts.
run_security() {
    local csv=$out/security.csv a b n rc class o=$out/security.tmp
    echo "test,allocator,class,exit" >"$csv"
    for a in "${active[@]}"; do
        mkdir -p "$out/run/$a"
        for b in "$bin"/security/*; do
            [ -x "$b" ] || continue
            n=$(basename "$b")
            rc=0
            # shellcheck disable=SC2046
            (cd "$out/run/$a" && timeout 5 env $(alloc_env "$a") "$b" </dev/null >"$o" 2>"$o.err") ||
                rc=$?
            if grep -q --text NOT_CAUGHT "$o"; then
                case "$rc" in
                0) class=not-caught ;;
                124) class=late-timeout ;;
                134) if [ -s "$o.err" ]; then class=late-report; else class=late-crash; fi ;;
                *) class=late-crash ;;
                esac
            else
                if [ "$rc" = 124 ]; then class=timeout; else class=caught; fi
            fi
            echo "$n,$a,$class,$rc" >>"$csv"
        done
        echo "security: $a done"
    done
    rm -f "$o" "$o.err"
}

echo "$(date -u '+%F %T') UTC; $(nproc) cores, procs $procs, scale $scale, rounds $rounds"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); library $lib"
echo "allocators: ${active[*]}"
for a in "${active[@]}"; do echo "  $a: $(alloc_env "$a")"; done
if [ "$timed" = yes ]; then
    build_programs
    run_timed
fi
if [ "$security" = yes ]; then
    build_security
    run_security
fi
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
args=()
[ "$timed" = yes ] && args+=(--runs "$out/runs.csv")
[ "$security" = yes ] && args+=(--security "$out/security.csv")
python3 "$here/mimalloc_bench.py" "${args[@]}" | tee "$out/tables.md"
raw=()
[ "$timed" = yes ] && raw+=(runs.csv output/)
[ "$security" = yes ] && raw+=(security.csv)
echo "raw results in $out: ${raw[*]}; the tables in tables.md"
