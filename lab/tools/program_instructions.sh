#!/usr/bin/env bash
# What a change to the preload library costs real programs, in instructions (callgrind), which
# the machine's load does not move: CPython with PYTHONMALLOC=malloc (a JSON round trip, dicts
# and lists), perl and sqlite3 on the workloads of backend-host/malloc/programs/, smaller than
# `tagalloc-bench programs` runs them (callgrind is about 50 times slower), each run once on
# each library given; prints a markdown table of the programs' instruction totals and the ratio
# of the second library's to the first's.
#
# Usage: lab/tools/program_instructions.sh BASE.so NEW.so [OUT_DIR]
#   (OUT_DIR, default target/program-instructions, keeps callgrind's files for
#   callgrind_annotate)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 2 ] || { echo "usage: $0 BASE.so NEW.so [OUT_DIR]" >&2; exit 2; }
base=$(realpath "$1")
new=$(realpath "$2")
out=${3:-$root/target/program-instructions}
mkdir -p "$out"
command -v valgrind > /dev/null || { echo "$0: valgrind is not installed" >&2; exit 1; }
programs=$root/backend-host/malloc/programs
python=$(python3 -c 'import sys; print(sys.executable)')
sed 's/@ROWS@/20000/' "$programs/queries.sql" > "$out/queries.sql"

# Instructions of one program on one library: callgrind's total.
count() {
    local lib=$1 name=$2 input=$3
    shift 3
    LD_PRELOAD=$lib PYTHONMALLOC=malloc PYTHONHASHSEED=0 LC_ALL=C \
        valgrind --tool=callgrind --callgrind-out-file="$out/$name.$(basename "$lib").out" \
        "$@" < "$input" > /dev/null 2> "$out/$name.err"
    grep -o 'Collected : [0-9]*' "$out/$name.err" | grep -o '[0-9]*$'
}

echo "| program | $(basename "$base") | $(basename "$new") | ratio |"
echo "| --- | ---: | ---: | ---: |"
row() {
    local name=$1 input=$2
    shift 2
    local a b
    a=$(count "$base" "$name" "$input" "$@")
    b=$(count "$new" "$name" "$input" "$@")
    awk -v n="$name" -v a="$a" -v b="$b" 'BEGIN { printf "| %s | %d | %d | %.3f |\n", n, a, b, b / a }'
}
row "json_roundtrip.py 3000" /dev/null "$python" "$programs/json_roundtrip.py" 3000
row "dicts_lists.py 30000" /dev/null "$python" "$programs/dicts_lists.py" 30000
row "words.pl 30000" /dev/null perl "$programs/words.pl" 30000
row "sqlite3, 20000 rows" "$out/queries.sql" sqlite3
