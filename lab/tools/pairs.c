/* One malloc+free pair, timed: 256 blocks live, each step frees a random one and allocates
 * 16 to 143 bytes in its place (the allocator's small-request path, with whatever per-thread
 * cache it has). Prints nanoseconds per pair. Usage: pairs [PAIRS] (default 20 million).
 * Run with each allocator preloaded: lab/tools/pairs.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void *volatile sink;

int main(int argc, char **argv) {
    long pairs = argc > 1 ? atol(argv[1]) : 20000000;
    void *live[256];
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < 256; i++) live[i] = malloc(16 + i % 128);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long n = 0; n < pairs; n++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned i = x & 255;
        free(live[i]);
        char *p = malloc(16 + (x >> 8) % 128);
        p[0] = (char)n; /* touched, so the pair cannot be elided */
        live[i] = p;
        sink = p;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    for (int i = 0; i < 256; i++) free(live[i]);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("%.1f ns per malloc+free pair\n", ns / pairs);
    return 0;
}
