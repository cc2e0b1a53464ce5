# Sourced by layouts.sh and ab.sh. `relink_bench SEED`, run in the tree to build: links the
# bench in $CARGO_TARGET_DIR (which the caller sets, with RUSTFLAGS naming shuffle-link as the
# linker) with every input section placed in an order shuffled by SEED, or in the usual order
# for 0. Only the binary is removed, so cargo links it again from the same compiled crates
# (about a second) after the first build.
relink_bench() {
    rm -f "$CARGO_TARGET_DIR/release/tagalloc-bench"
    local f
    for f in "$CARGO_TARGET_DIR"/release/deps/tagalloc_bench-*; do
        case $f in *.d | *.rlib | *.rmeta) ;; *) [ -f "$f" ] && rm -f "$f" ;; esac
    done
    if [ "$1" = 0 ]; then
        env -u TAGALLOC_LAYOUT_SEED cargo build --release -p tagalloc-bench >&2
    else
        TAGALLOC_LAYOUT_SEED=$1 cargo build --release -p tagalloc-bench >&2
    fi
}
