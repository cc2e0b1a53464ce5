/* Threads that dlopen and dlclose a library with thread-local storage while allocating: the
 * dynamic loader then allocates and frees TLS blocks and resizes each thread's table of them
 * (its DTV) with malloc, possibly from inside the TLS lookups that the allocator itself makes
 * (it reads a thread-local to know which thread holds its lock). A recursion there would hang
 * or crash. Usage: dlopen_tls MODULE.so [ROUNDS] */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *module;
static int rounds = 200;
/* Every block is published here, so that the compiler cannot elide a malloc/free pair (GCC
 * does at -O2 when a block's contents are never read back): the test counts them. */
static void *volatile sink;

static void *worker(void *arg) {
    long sum = 0;
    for (int r = 0; r < rounds; r++) {
        void *h = dlopen(module, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            exit(1);
        }
        int (*touch)(int) = (int (*)(int))dlsym(h, "touch");
        if (!touch) exit(1);
        sum += touch(r + (int)(long)arg);
        char *p = malloc(100 + r);
        sink = p;
        memset(p, r, 100 + r);
        dlclose(h);
        /* The first allocation after the module's TLS went away. */
        char *q = malloc(1000);
        sink = q;
        q[0] = p[0];
        free(p);
        free(q);
    }
    return (void *)sum;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    module = argv[1];
    if (argc > 2) rounds = atoi(argv[2]);
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) return 1;
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("4 threads x %d dlopen/dlclose rounds done\n", rounds);
    return 0;
}
