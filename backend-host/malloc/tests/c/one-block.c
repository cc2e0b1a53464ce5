/* One block allocated and freed: the statistics then count 1 of several things (with
 * TAGALLOC_CHECKED=1, which bypasses the thread caches, 1 allocation, 1 free, 1 region). */
#include <stdlib.h>

int main(void) {
    void *volatile p = malloc(100);
    free(p);
    return 0;
}
