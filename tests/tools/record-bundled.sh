#!/usr/bin/env bash
# Re-records the traces bundled in tests/data/ (see tests/data/README.md). A few allocations differ
# from run to run (string hash randomisation, the environment); the shape does not.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
data=$(cd "$here/../data" && pwd)
cd "$here/workloads"

# Trace the interpreter itself, not a wrapper script in front of it (pyenv shims, for one).
python_bin=$(dirname "$(python3 -c 'import sys; print(sys.executable)')")
PATH="$python_bin:$PATH" PYTHONMALLOC=malloc "$here/record-trace.sh" \
    "$data/python-dicts.trace.gz" \
    "CPython $(python3 -c 'import platform; print(platform.python_version())') building, sorting, slicing and dropping dicts, lists and strings (tests/tools/workloads/dicts.py run by python3 -S; interpreter start-up and shutdown included), every object through malloc (PYTHONMALLOC=malloc)" \
    -- python3 -S dicts.py

"$here/record-trace.sh" \
    "$data/perl-words.trace.gz" \
    "Perl $(perl -e 'print substr($^V, 1)') counting, sorting and concatenating words in hashes, arrays and growing strings (tests/tools/workloads/words.pl; interpreter start-up and shutdown included)" \
    -- perl words.pl
