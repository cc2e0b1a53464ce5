/* The C allocator interface, call by call, with the cases C programs rely on: what must hold
 * on glibc and on any allocator that replaces it (mode `common`), what tagalloc adds (mode
 * `tagalloc`: the functions are the library's, aligned_alloc's C17 rule, mallopt, mallinfo2),
 * and misuse under TAGALLOC_CHECKED=1 (mode `checked`: refused, not obeyed). Each check prints
 * one line; a failed check prints FAIL and the program exits 1.
 * Usage: api common|tagalloc|checked */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* glibc's internal names, which a replacement must also take over; no header declares them. */
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *ptr);

static int failures;

#define CHECK(what, cond)                                                  \
    do {                                                                   \
        if (cond) {                                                        \
            printf("ok   %s\n", what);                                     \
        } else {                                                           \
            printf("FAIL %s (line %d, errno %d)\n", what, __LINE__, errno); \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static int aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static int filled(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* Where blocks are published, so that the compiler cannot drop a malloc/free pair. */
static void *volatile sink;

/* Opaque to the compiler, so that it cannot fold a call with an impossible size away. */
static size_t volatile huge_size = SIZE_MAX;

static void common(void) {
    void *a = malloc(0), *b = malloc(0);
    CHECK("malloc(0) returns distinct non-null pointers", a && b && a != b);
    free(a);
    free(b);
    free(NULL);
    CHECK("free(NULL) does nothing", 1);

    errno = 0;
    CHECK("malloc(SIZE_MAX) is NULL with ENOMEM", malloc(huge_size) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK("malloc(PTRDIFF_MAX) is NULL with ENOMEM",
          malloc(huge_size / 2) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK("calloc overflow is NULL with ENOMEM",
          calloc(huge_size / 2 + 2, 2) == NULL && errno == ENOMEM);

    /* Blocks handed out again must come back zeroed from calloc, small and large alike. */
    size_t sizes[] = {1, 24, 100, 1000, 4096, 70000, 1 << 20, (1 << 20) + 1, 3 << 20};
    int zeroed = 1, kept = 1, sized = 1, aligned16 = 1;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        unsigned char *p = malloc(sizes[i]);
        if (!p) { zeroed = 0; continue; }
        aligned16 &= aligned(p, 16);
        sized &= malloc_usable_size(p) >= sizes[i];
        memset(p, 0xAB, sizes[i]);
        free(p);
        unsigned char *q = calloc(1, sizes[i]);
        zeroed &= q && filled(q, sizes[i], 0);
        free(q);
        /* realloc keeps the contents through growth and shrinking, across the 1 MiB bypass. */
        unsigned char *r = malloc(sizes[i]);
        memset(r, 0x5C, sizes[i]);
        r = realloc(r, sizes[i] * 3 + 7);
        kept &= r && filled(r, sizes[i], 0x5C);
        r = realloc(r, sizes[i] / 2 + 1);
        kept &= r && filled(r, sizes[i] / 2 + 1, 0x5C);
        free(r);
    }
    CHECK("malloc is 16-byte aligned at every size", aligned16);
    CHECK("malloc_usable_size covers the request", sized);
    CHECK("calloc zeroes reused memory", zeroed);
    CHECK("realloc keeps the contents growing and shrinking", kept);
    CHECK("malloc_usable_size(NULL) is 0", malloc_usable_size(NULL) == 0);

    char *p = realloc(NULL, 100);
    CHECK("realloc(NULL, n) allocates", p != NULL && malloc_usable_size(p) >= 100);
    strcpy(p, "still here");
    errno = 0;
    CHECK("realloc(p, SIZE_MAX) is NULL with ENOMEM",
          realloc(p, huge_size) == NULL && errno == ENOMEM);
    CHECK("a failed realloc leaves the block", strcmp(p, "still here") == 0);
    errno = 0;
    CHECK("reallocarray overflow is NULL with ENOMEM",
          reallocarray(p, huge_size / 2, 4) == NULL && errno == ENOMEM);
    p = reallocarray(p, 50, 4);
    CHECK("reallocarray resizes", p != NULL && strcmp(p, "still here") == 0);
    CHECK("realloc(p, 0) frees and returns NULL", realloc(p, 0) == NULL);

    void *m = (void *)1;
    CHECK("posix_memalign(align 3) is EINVAL", posix_memalign(&m, 3, 10) == EINVAL);
    CHECK("posix_memalign(align 4) is EINVAL", posix_memalign(&m, 4, 10) == EINVAL);
    CHECK("posix_memalign(align 0) is EINVAL", posix_memalign(&m, 0, 10) == EINVAL);
    CHECK("posix_memalign(SIZE_MAX bytes) is ENOMEM", posix_memalign(&m, 64, huge_size) == ENOMEM);
    CHECK("a failed posix_memalign leaves *out", m == (void *)1);
    int every = 1;
    for (size_t a = 8; a <= (4 << 20); a *= 2) {
        void *q = NULL;
        every &= posix_memalign(&q, a, 1000) == 0 && q && aligned(q, a);
        if (q) memset(q, 1, 1000);
        free(q);
    }
    CHECK("posix_memalign aligns to 8 B .. 4 MiB", every);

    void *al = aligned_alloc(256, 1000);
    CHECK("aligned_alloc(256)", al && aligned(al, 256));
    free(al);
    void *ma = memalign(48, 100);
    CHECK("memalign(48) rounds up to 64", ma && aligned(ma, 64));
    free(ma);
    errno = 0;
    CHECK("memalign(SIZE_MAX) is NULL with EINVAL", memalign(huge_size, 10) == NULL && errno == EINVAL);
    long page = sysconf(_SC_PAGESIZE);
    void *v = valloc(100);
    CHECK("valloc is page-aligned", v && aligned(v, (size_t)page));
    free(v);
    void *pv = pvalloc(100);
    CHECK("pvalloc is page-aligned and rounds up to a page",
          pv && aligned(pv, (size_t)page) && malloc_usable_size(pv) >= (size_t)page);
    free(pv);
    void *pv0 = pvalloc(0);
    CHECK("pvalloc(0) returns a block", pv0 != NULL);
    free(pv0);
    int t = malloc_trim(0);
    CHECK("malloc_trim returns 0 or 1", t == 0 || t == 1);
}

/* The library file that defines `name` as the program sees it. */
static const char *defined_in(const char *name) {
    Dl_info info;
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f || !dladdr(f, &info) || !info.dli_fname) return "(nowhere)";
    return info.dli_fname;
}

static void tagalloc(void) {
    const char *names[] = {"malloc", "free", "calloc", "realloc", "reallocarray",
                           "posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc",
                           "malloc_usable_size", "malloc_trim", "mallopt", "mallinfo",
                           "mallinfo2", "malloc_stats", "malloc_info", "__libc_malloc",
                           "__libc_free", "__libc_calloc", "__libc_realloc", "__libc_memalign",
                           "__libc_valloc", "__libc_pvalloc", "cfree"};
    int ours = 1;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *where = defined_in(names[i]);
        if (!strstr(where, "libtagalloc_malloc")) {
            printf("     %s comes from %s\n", names[i], where);
            ours = 0;
        }
    }
    CHECK("every allocator function is the preloaded library's", ours);
    errno = 0;
    CHECK("aligned_alloc(24) is NULL with EINVAL (C17)",
          aligned_alloc(24, 100) == NULL && errno == EINVAL);
    CHECK("mallopt supports no parameter", mallopt(M_TRIM_THRESHOLD, 1 << 20) == 0);
    void *pv0 = pvalloc(0);
    CHECK("pvalloc(0) returns a whole page", pv0 && malloc_usable_size(pv0) >= 4096);
    free(pv0);

    /* A large block is a mapping of its own, kept for reuse when freed (counted in arena and
       keepcost) and given back by malloc_trim; the heap's figures move. */
    malloc_trim(0);
    struct mallinfo2 before = mallinfo2();
    char *big = malloc(8 << 20);
    memset(big, 7, 8 << 20);
    sink = big;
    struct mallinfo2 during = mallinfo2();
    free(big);
    struct mallinfo2 after = mallinfo2();
    CHECK("mallinfo2 counts a large block in use and held",
          during.uordblks >= before.uordblks + (8 << 20) && during.arena >= before.arena + (8 << 20));
    CHECK("a freed large block's mapping is kept for reuse, and counted",
          after.keepcost >= (8 << 20) && after.arena >= after.keepcost &&
              after.uordblks + (8 << 20) <= during.uordblks);
    char *again = malloc(6 << 20);
    struct mallinfo2 reused = mallinfo2();
    /* Its head, without a system call: the 2 MiB tail stays kept. */
    CHECK("a smaller large block reuses its head, the tail kept",
          again && reused.arena <= after.arena && reused.keepcost >= (2 << 20) &&
              reused.keepcost + (6 << 20) <= after.keepcost);
    sink = again;
    free(again);
    CHECK("malloc_trim gives back the kept mappings",
          malloc_trim(0) == 1 && mallinfo2().keepcost == 0 &&
              mallinfo2().arena + (6 << 20) <= during.arena);

    /* Many small blocks, then all freed: trim gives the regions back. */
    void *many[20000];
    for (int i = 0; i < 20000; i++) many[i] = malloc(100 + i % 300);
    struct mallinfo2 full = mallinfo2();
    for (int i = 0; i < 20000; i++) free(many[i]);
    int trimmed = malloc_trim(0);
    struct mallinfo2 empty = mallinfo2();
    CHECK("malloc_trim gives free regions back", trimmed == 1 && empty.arena < full.arena);

    void *p = __libc_malloc(100);
    CHECK("__libc_malloc's blocks are malloc's", p && malloc_usable_size(p) >= 100);
    free(p);
    void *q = malloc(10);
    __libc_free(q);
    CHECK("__libc_free takes malloc's blocks", 1);
}

static void checked(void) {
    char *p = malloc(100);
    char *keep = malloc(100); /* keeps p's chunk from merging with its neighbour */
    sink = p;
    free(p);
    free(p); /* a double free: refused */
    CHECK("a double free is refused and the program goes on", 1);
    char local[64];
    free(local); /* not a heap block: refused */
    free(keep + 16); /* inside a block: refused */
    CHECK("a foreign pointer is refused", strcpy(keep, "intact") && strcmp(keep, "intact") == 0);
    errno = 0;
    CHECK("realloc of a foreign pointer is NULL with EINVAL",
          realloc(local, 10) == NULL && errno == EINVAL);
    CHECK("malloc_usable_size of a foreign pointer is 0", malloc_usable_size(local) == 0);
    char *r = malloc(50);
    CHECK("the heap still serves", r && strcpy(r, "fine") && strcmp(keep, "intact") == 0);
    free(r);
    free(keep);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "common";
    if (strcmp(mode, "common") == 0) common();
    else if (strcmp(mode, "tagalloc") == 0) tagalloc();
    else if (strcmp(mode, "checked") == 0) checked();
    else {
        fprintf(stderr, "usage: api common|tagalloc|checked\n");
        return 2;
    }
    printf("%s: %d failed\n", mode, failures);
    return failures ? 1 : 0;
}
