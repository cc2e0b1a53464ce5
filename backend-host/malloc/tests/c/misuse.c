/* Misuse of the allocator, one case per run (a case that corrupts the heap ends in an abort):
 * run as `misuse CASE` with the library preloaded, with and without TAGALLOC_CHECKED=1
 * (tests/misuse.rs). A refused call must leave the program's blocks and the figures as they
 * were; each case prints what it checked and "CASE: done" if it got to its end. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int failures;

#define CHECK(what, cond)                                                                       \
    do {                                                                                        \
        int ok_ = (cond);                                                                       \
        printf("%s %s\n", ok_ ? "ok  " : "FAIL", what);                                         \
        if (!ok_) failures++;                                                                   \
    } while (0)

/* Keeps the compiler from proving anything about the pointers freed. */
static void *volatile launder_;
static void *launder(void *p) { launder_ = p; return launder_; }

static size_t in_use(void) { return mallinfo2().uordblks; }

/* free(a); free(b); free(b), b merged into its free neighbour a (or a into b's chunk when
 * `b_first`): the third free is refused, the figures and the live block stay, and realloc
 * and malloc_usable_size of b refuse it too. */
static void merged(int b_first) {
    char *a = malloc(64), *b = malloc(64), *keep = malloc(64);
    strcpy(keep, "intact");
    free(b_first ? b : a);
    free(b_first ? a : b);
    size_t before = in_use();
    free(launder(b));
    CHECK("the double free is refused: in use unchanged", in_use() == before && before > 0);
    errno = 0;
    CHECK("realloc of the freed block is NULL with EINVAL",
          realloc(launder(b), 200) == NULL && errno == EINVAL);
    CHECK("malloc_usable_size of the freed block is 0", malloc_usable_size(launder(b)) == 0);
    CHECK("the live block is intact", strcmp(keep, "intact") == 0);
    char *c = malloc(128);
    CHECK("the heap still serves", c != NULL);
    free(c);
    free(keep);
}

/* A block large enough to have a mapping of its own, freed twice. */
static void large(void) {
    char *keep = malloc(100);
    strcpy(keep, "intact");
    char *p = malloc(4 << 20);
    memset(p, 7, 4 << 20);
    free(p);
    size_t before = in_use();
    free(launder(p));
    CHECK("the double free of a large block is refused", in_use() == before);
    CHECK("the live block is intact", strcmp(keep, "intact") == 0);
    free(keep);
}

/* A block of `size` bytes freed twice while the first free keeps it in the thread's cache
 * (in checked mode, with no caches, while the heap holds it free): the second free, a realloc
 * and malloc_usable_size refuse it. 3000 bytes is one of the classes above 1 KiB, whose block
 * the free files by the chunk its tag names. */
static void cached(size_t size) {
    char *keep = malloc(64);
    strcpy(keep, "intact");
    char *p = malloc(size);
    /* Printed before the free: stdout's buffer, allocated by the first print, must not take
     * the freed block's place (in checked mode it merges into the top). */
    CHECK("the block is served", p != NULL);
    memset(p, 7, size);
    free(p);
    size_t before = in_use();
    free(launder(p));
    CHECK("the double free of a cached block is refused", in_use() == before);
    errno = 0;
    CHECK("realloc of the freed block is NULL with EINVAL",
          realloc(launder(p), size * 2) == NULL && errno == EINVAL);
    CHECK("malloc_usable_size of the freed block is 0", malloc_usable_size(launder(p)) == 0);
    char *q = malloc(size);
    CHECK("the heap still serves the size", q != NULL);
    CHECK("the live block is intact", strcmp(keep, "intact") == 0);
    free(q);
    free(keep);
}

/* A pointer into the middle of a live block, with zeros or garbage before it. */
static void middle(int fill) {
    unsigned char *p = malloc(256), *keep = malloc(64);
    memset(p, fill, 256);
    strcpy((char *)keep, "intact");
    size_t before = in_use();
    free(launder(p + 16));
    free(launder(p + 64));
    free(launder(p + 5));
    CHECK("pointers into a block are refused", in_use() == before);
    CHECK("the block is intact", p[0] == (unsigned char)fill && p[255] == (unsigned char)fill);
    CHECK("the live block is intact", strcmp((char *)keep, "intact") == 0);
    free(p);
    free(keep);
}

/* A stack address, and an mmap of the program's own, filled with garbage. */
static void foreign(void) {
    char *keep = malloc(64);
    strcpy(keep, "intact");
    unsigned char local[64];
    memset(local, 0x41, sizeof local);
    size_t before = in_use();
    free(launder(local + 16));
    unsigned char *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    memset(m, 0x41, 1 << 16);
    free(launder(m + 4096));
    free(launder(m));
    CHECK("stack and mmap pointers are refused", in_use() == before);
    CHECK("the live block is intact", strcmp(keep, "intact") == 0);
    munmap(m, 1 << 16);
    free(keep);
}

/* Small blocks past the first megabytes, freed (the last one freed is the last allocated, so
 * that the thread's last proof of a free was in its region), then malloc_trim, which gives
 * back the regions and region ends that are wholly free: a second free of that block, whose
 * memory went back to the system, is refused as a double free, not read. */
static void trimmed(void) {
    enum { N = 40000 };
    static char *blocks[N];
    char *keep = malloc(64);
    strcpy(keep, "intact");
    /* Printed first, so that stdout's buffer is allocated before the blocks: neither in their
     * regions, kept by the trim, nor after it, over the range given back. */
    CHECK("a block to keep", keep != NULL);
    for (int i = 0; i < N; i++) blocks[i] = malloc(100);
    char *last = blocks[N - 1];
    for (int i = 0; i < N; i++) free(blocks[i]);
    malloc_trim(0);
    long page = sysconf(_SC_PAGESIZE);
    void *at = (void *)((uintptr_t)last & ~(uintptr_t)(page - 1));
    CHECK("the last block's page went back to the system",
          msync(at, (size_t)page, MS_ASYNC) == -1 && errno == ENOMEM);
    size_t before = in_use();
    free(launder(last));
    CHECK("the double free of a block given back is refused", in_use() == before);
    CHECK("the live block is intact", strcmp(keep, "intact") == 0);
    free(keep);
}

/* One byte written past a block's usable size (onto the next chunk's tag), then frees: the
 * library reports heap corruption and aborts. */
static void past_end(unsigned char byte) {
    unsigned char *a = malloc(24), *b = malloc(24), *c = malloc(24);
    size_t n = malloc_usable_size(a);
    ((volatile unsigned char *)a)[n] = byte;
    fflush(stdout);
    free(launder(a));
    free(launder(b));
    free(launder(c));
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "merged") == 0) merged(0);
    else if (strcmp(c, "merged-next") == 0) merged(1);
    else if (strcmp(c, "large") == 0) large();
    else if (strcmp(c, "cached-small") == 0) cached(64);
    else if (strcmp(c, "cached-3000") == 0) cached(3000);
    else if (strcmp(c, "middle-zero") == 0) middle(0);
    else if (strcmp(c, "middle-garbage") == 0) middle(0xff);
    else if (strcmp(c, "middle-text") == 0) middle('A');
    else if (strcmp(c, "foreign") == 0) foreign();
    else if (strcmp(c, "trimmed") == 0) trimmed();
    else if (strcmp(c, "past-end-x") == 0) past_end('x');
    else if (strcmp(c, "past-end-nul") == 0) past_end(0);
    else {
        fprintf(stderr, "usage: misuse CASE\n");
        return 2;
    }
    printf("%s: done, %d failed\n", c, failures);
    return failures != 0;
}
