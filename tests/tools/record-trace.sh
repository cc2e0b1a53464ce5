#!/usr/bin/env bash
# Records the allocations of a command as a tagalloc trace (gzip-compressed), using glibc's mtrace.
#
#   tests/tools/record-trace.sh OUT.trace.gz "what the workload is" -- COMMAND [ARGS...]
#
# Preloads glibc's libc_malloc_debug.so.0 and a tiny library (mtrace-start.c, compiled here with
# cc) whose constructor calls mtrace(), runs COMMAND, and converts the log with mtrace2trace.py.
# Only the command's own process is traced, not its children. Logging slows the command down
# about tenfold, so keep workloads short. Needs: cc, python3, gzip, glibc with malloc-debug.
set -euo pipefail

usage() {
    echo "usage: $0 OUT.trace.gz DESCRIPTION -- COMMAND [ARGS...]" >&2
    exit 2
}

[ $# -ge 4 ] && [ "$3" = "--" ] || usage
out=$1
description=$2
shift 3

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
debug_lib=${MALLOC_DEBUG_LIB:-}
if [ -z "$debug_lib" ]; then
    for candidate in /usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0 \
        /usr/lib/aarch64-linux-gnu/libc_malloc_debug.so.0 \
        /lib64/libc_malloc_debug.so.0 /usr/lib64/libc_malloc_debug.so.0 \
        /usr/lib/libc_malloc_debug.so.0; do
        if [ -e "$candidate" ]; then
            debug_lib=$candidate
            break
        fi
    done
fi
if [ -z "$debug_lib" ]; then
    echo "$0: libc_malloc_debug.so.0 not found (glibc 2.34 or later); set MALLOC_DEBUG_LIB" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cc -shared -fPIC -O2 -o "$work/libmtrace-start.so" "$here/mtrace-start.c"

echo "recording: ${*@Q}" >&2
status=0
env LD_PRELOAD="$debug_lib $work/libmtrace-start.so${LD_PRELOAD:+ $LD_PRELOAD}" \
    TAGALLOC_MTRACE_LOG="$work/mtrace.log" "$@" >&2 || status=$?
if [ "$status" -ne 0 ]; then
    echo "$0: the command exited with status $status" >&2
    exit "$status"
fi
if [ ! -s "$work/mtrace.log" ]; then
    echo "$0: no mtrace log was written" >&2
    exit 1
fi

glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null || echo "glibc")
python3 "$here/mtrace2trace.py" "$work/mtrace.log" \
    --source "$description" \
    --source "recorded with tests/tools/record-trace.sh (mtrace, $glibc, $(uname -m)): ${*@Q}" |
    gzip -9n >"$out"
echo "wrote $out ($(wc -c <"$out") bytes)" >&2
