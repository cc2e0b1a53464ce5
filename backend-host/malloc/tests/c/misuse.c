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

/* A heap of many blocks (checked mode's proof must not depend on the block's place): 100,000
 * blocks of mixed sizes, every third freed, then a double free of one freed (refused first, as
 * a double free), its realloc and size query, a pointer into the middle of a live block and one
 * into the middle of a freed block: all refused, the figures unchanged; then every block is
 * freed and the heap still serves. */
static void many(void) {
    enum { N = 100000 };
    static unsigned char *blocks[N];
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)(i * 37 % 400);
        blocks[i] = malloc(n);
        memset(blocks[i], 'A', n);
    }
    for (int i = 0; i < N; i += 3) free(blocks[i]);
    CHECK("the blocks are served", 1);
    size_t before = in_use();
    unsigned char *freed = blocks[N / 2 - (N / 2) % 3];
    free(launder(freed));
    CHECK("the double free is refused", in_use() == before);
    errno = 0;
    CHECK("realloc of the freed block is NULL with EINVAL",
          realloc(launder(freed), 100) == NULL && errno == EINVAL);
    CHECK("malloc_usable_size of the freed block is 0", malloc_usable_size(launder(freed)) == 0);
    unsigned char *live = blocks[N / 2 - (N / 2) % 3 + 1];
    free(launder(live + 16));
    CHECK("a pointer into a live block is refused", in_use() == before);
    unsigned char *gone = blocks[N / 3 - (N / 3) % 3 + 3 * 7];
    free(launder(gone + 32));
    CHECK("a pointer into a freed block is refused", in_use() == before);
    CHECK("the live block is intact", live[0] == 'A' && live[15] == 'A' && live[16] == 'A');
    for (int i = 0; i < N; i++)
        if (i % 3 != 0) free(blocks[i]);
    char *c = malloc(128);
    CHECK("the heap still serves", c != NULL);
    free(c);
}

/* Pointers into a live block and into a free chunk, each after bytes forged to read as a sound
 * in-use tag whose chunk ends where the real one does (the default proof takes the first for a
 * block: only checked mode refuses them). */
static void forged(void) {
    unsigned char *p = malloc(256), *keep = malloc(64);
    size_t chunk = malloc_usable_size(p) + sizeof(size_t);
    memset(p, 'A', 256);
    strcpy((char *)keep, "intact");
    /* A head at p + 56 (so a payload at p + 64) whose chunk ends at p's chunk's end. */
    size_t fake = (chunk - 64) | 3;
    memcpy(p + 56, &fake, sizeof fake);
    size_t before = in_use();
    free(launder(p + 64));
    CHECK("a pointer into a block after a forged tag is refused", in_use() == before);
    unsigned char *q = malloc(1024), *keep2 = malloc(64);
    size_t qchunk = malloc_usable_size(q) + sizeof(size_t);
    free(q);
    before = in_use();
    size_t qfake = (qchunk - 512) | 3;
    memcpy(q + 504, &qfake, sizeof qfake);
    free(launder(q + 512));
    CHECK("a pointer into a free chunk after a forged tag is refused", in_use() == before);
    CHECK("the live block is intact", strcmp((char *)keep, "intact") == 0);
    free(p);
    free(keep);
    free(keep2);
}

/* A large block grown by realloc (its mapping grown in place where it can be); the heap grown
 * over several regions, emptied, trimmed (regions and region ends given back), grown again;
 * then misuse: a double free in the regrown heap (refused first), a pointer into a live
 * block, a pointer into the large block: refused; every other block freed as usual. */
static void regrown(void) {
    enum { N = 200000 };
    static char *blocks[N];
    char *keep = malloc(64);
    strcpy(keep, "intact");
    CHECK("a block to keep", keep != NULL);
    /* The large block's mapping goes in the highest gap that fits, at its top: a hole made at
     * the bottom of a mapping of our own, whose rest is then unmapped, leaves room above it to
     * grow in place (where no higher gap fits it, as is usual). */
    size_t span = (size_t)64 << 20, hole = (size_t)8 << 20;
    char *room = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK("room mapped", room != MAP_FAILED);
    munmap(room, hole);
    char *big = malloc(2 << 20);
    munmap(room + hole, span - hole);
    memset(big, 'C', 2 << 20);
    printf("%s the large block lies in the hole\n", big > room && big < room + hole ? "ok  " : "note");
    for (size_t n = 4 << 20; n <= (32 << 20); n *= 2) {
        char *b = realloc(big, n);
        if (b) big = b;
    }
    CHECK("the large block kept its bytes", big[0] == 'C' && big[(2 << 20) - 1] == 'C');
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) {
            blocks[i] = malloc(100 + (size_t)(i % 7) * 16);
            memset(blocks[i], 'B', 100);
        }
        if (round == 0) {
            for (int i = 0; i < N; i++) free(blocks[i]);
            malloc_trim(0);
        }
    }
    size_t before = in_use();
    char *freed = blocks[N / 2];
    free(freed);
    before = in_use();
    free(launder(freed));
    CHECK("the double free in the regrown heap is refused", in_use() == before);
    free(launder(blocks[N / 2 + 1] + 32));
    CHECK("a pointer into a live block is refused", in_use() == before);
    free(launder(big + 4096));
    CHECK("a pointer into the large block is refused", in_use() == before);
    for (int i = 0; i < N; i++)
        if (i != N / 2) free(blocks[i]);
    free(big);
    CHECK("the live block is intact", strcmp(keep, "intact") == 0);
    free(keep);
}

/* A block moved by realloc (a neighbour keeps it from growing in place), then its old pointer
 * freed, resized and queried: refused as a double free; the moved block keeps its bytes. */
static void realloc_moved(void) {
    char *p = malloc(100), *blocker = malloc(100);
    strcpy(p, "moved");
    strcpy(blocker, "intact");
    char *q = realloc(p, 5000);
    CHECK("the block moved", q != NULL && q != p);
    size_t before = in_use();
    free(launder(p));
    CHECK("the free of the old pointer is refused", in_use() == before);
    errno = 0;
    CHECK("realloc of the old pointer is NULL with EINVAL",
          realloc(launder(p), 10) == NULL && errno == EINVAL);
    CHECK("malloc_usable_size of the old pointer is 0", malloc_usable_size(launder(p)) == 0);
    CHECK("the moved block kept its bytes", strcmp(q, "moved") == 0);
    CHECK("the live block is intact", strcmp(blocker, "intact") == 0);
    free(q);
    free(blocker);
}

/* Blocks of every aligned allocation function, at alignments from 32 bytes to 64 KiB: aligned,
 * usable, resized and freed as any block; then a double free of one, refused. */
static void aligned(void) {
    enum { K = 64 };
    void *blocks[K * 5];
    int n = 0, ok = 1;
    for (int i = 0; i < K; i++) {
        size_t align = (size_t)32 << (i % 12), size = 1 + (size_t)i * 97;
        void *p = NULL;
        if (posix_memalign(&p, align, size) != 0) ok = 0;
        blocks[n++] = p;
        blocks[n++] = aligned_alloc(align, size);
        blocks[n++] = memalign(align, size);
        blocks[n++] = valloc(size);
        blocks[n++] = pvalloc(size);
        for (int j = n - 5; j < n; j++) {
            size_t a = j == n - 2 || j == n - 1 ? (size_t)sysconf(_SC_PAGESIZE) : align;
            if (!blocks[j] || (uintptr_t)blocks[j] % a != 0 || malloc_usable_size(blocks[j]) < size)
                ok = 0;
            else
                memset(blocks[j], 'D', size);
        }
    }
    CHECK("every aligned block is aligned and usable", ok);
    for (int j = 0; j < n; j += 7) {
        void *r = realloc(blocks[j], 3000);
        if (r) blocks[j] = r;
        else ok = 0;
    }
    CHECK("aligned blocks resize", ok);
    void *last = blocks[n - 3];
    for (int j = 0; j < n; j++) free(blocks[j]);
    size_t before = in_use();
    free(launder(last));
    CHECK("the double free of an aligned block is refused", in_use() == before);
}

/* A write past a block's end that grows the next block's size over its own neighbour exactly
 * (every tag stays consistent), then frees: checked mode reports heap corruption at the free of
 * that block (its chunk covers a live block). */
static void grown_over(void) {
    unsigned char *a = malloc(24), *b = malloc(24), *c = malloc(24), *d = malloc(24);
    size_t n = malloc_usable_size(a), bchunk = malloc_usable_size(b) + sizeof(size_t);
    size_t cchunk = malloc_usable_size(c) + sizeof(size_t);
    CHECK("the blocks lie side by side", b == a + bchunk && c == b + bchunk && d == c + cchunk);
    size_t head;
    memcpy(&head, a + n, sizeof head);
    head += cchunk;
    memcpy(a + n, &head, sizeof head);
    fflush(stdout);
    free(launder(a));
    free(launder(b));
    free(launder(c));
    free(launder(d));
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
    else if (strcmp(c, "many") == 0) many();
    else if (strcmp(c, "forged") == 0) forged();
    else if (strcmp(c, "regrown") == 0) regrown();
    else if (strcmp(c, "realloc-moved") == 0) realloc_moved();
    else if (strcmp(c, "aligned") == 0) aligned();
    else if (strcmp(c, "grown-over") == 0) grown_over();
    else {
        fprintf(stderr, "usage: misuse CASE\n");
        return 2;
    }
    printf("%s: done, %d failed\n", c, failures);
    return failures != 0;
}
