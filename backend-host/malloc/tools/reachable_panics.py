#!/usr/bin/env python3
"""Which panics can the preload library's exported functions reach?

Builds the static call graph of a built libtagalloc_malloc.so from its disassembly (objdump),
direct calls and calls through the GOT (resolved through the relocations), starting from every
exported function, and prints where a panic or an abort can start: each reachable function
whose name says it panics or aborts, called from one that does not, with one call chain from
an exported function (demangled with c++filt). What the panic machinery calls after that is
counted, not printed. Indirect calls through registers are not followed (the library makes
none on its own paths: the pool is statically dispatched).

Usage: python3 tools/reachable_panics.py target/release/libtagalloc_malloc.so
"""
import collections
import re
import subprocess
import sys

PANICKY = re.compile(
    r"panic|unwrap_failed|expect_failed|slice_(start_|end_)?index|bounds_check|"
    r"handle_alloc_error|abort|unwind|_Unwind_Resume",
    re.I,
)


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main(so):
    labels = {}
    for line in run("nm", so).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].lower() == "t":
            labels.setdefault(int(parts[0], 16), parts[2])
    got = {}
    for line in run("objdump", "-R", so).splitlines():
        m = re.match(r"^([0-9a-f]+) R_X86_64_RELATIVE\s+\*ABS\*\+0x([0-9a-f]+)", line)
        if m and int(m.group(2), 16) in labels:
            got[int(m.group(1), 16)] = labels[int(m.group(2), 16)]
        m = re.match(r"^([0-9a-f]+) R_X86_64_(GLOB_DAT|JUMP_SLOT)\s+(\S+)", line)
        if m:
            got[int(m.group(1), 16)] = m.group(3)
    edges = collections.defaultdict(set)
    func = None
    for line in run("objdump", "-d", "--no-show-raw-insn", so).splitlines():
        m = re.match(r"^([0-9a-f]+) <(.+)>:$", line)
        if m:
            func = labels.get(int(m.group(1), 16), m.group(2))
            continue
        if func is None:
            continue
        m = re.search(r"\s(call|jmp|j[a-z]+)\s+([0-9a-f]+) <", line)
        if m and int(m.group(2), 16) in labels:
            target = labels[int(m.group(2), 16)]
            if target != func:
                edges[func].add(target)
            continue
        m = re.search(r"\s(call|jmp)\s+\*0x[0-9a-f]+\(%rip\)\s+# ([0-9a-f]+)", line)
        if m and int(m.group(2), 16) in got:
            edges[func].add(got[int(m.group(2), 16)])
    entries = []
    for line in run("nm", "-D", "--defined-only", so).splitlines():
        addr, _, name = line.split()
        entries.append(labels.get(int(addr, 16), name))
    seen = {e: None for e in entries}
    queue = collections.deque(entries)
    while queue:
        f = queue.popleft()
        for t in sorted(edges.get(f, ())):
            if t not in seen:
                seen[t] = f
                queue.append(t)
    bad = [f for f in seen if PANICKY.search(f)]

    def chain_of(f):
        chain = [f]
        while seen[chain[-1]] is not None:
            chain.append(seen[chain[-1]])
        return chain

    # Where a panic starts: no function before it on its chain panics.
    starts = [f for f in bad if not any(PANICKY.search(c) for c in chain_of(f)[1:])]

    def demangle(name):
        try:
            return run("c++filt", name).strip()
        except (OSError, subprocess.CalledProcessError):
            return name

    for b in starts:
        chain = chain_of(b)
        names = (demangle(re.sub(r"@.*", "", c)) for c in chain)
        print(" <- ".join(re.sub(r"\[[0-9a-f]{16}\]|::h[0-9a-f]{16}$", "", n) for n in names))
    print(
        f"{len(set(entries))} entry points, {len(seen)} functions reachable, {len(bad)} that "
        f"panic or abort, {len(starts)} places where that can start"
    )


if __name__ == "__main__":
    main(sys.argv[1])
