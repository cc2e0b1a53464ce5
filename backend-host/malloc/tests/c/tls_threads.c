/* Many threads, half of them never joined, that dlopen a library with thread-local storage,
 * allocate small blocks (through their thread caches), free blocks other threads allocated, and
 * exit. Each thread's first allocation is made by glibc's pthread_setspecific for a key past
 * the first 32 (it allocates that thread's second-level table), so the allocator sets up the
 * thread's cache, and registers its destructor, from inside pthread_setspecific. At the end the
 * main thread trims (which gives back its own cache); the allocator's statistics at exit
 * (TAGALLOC_STATS) then show no block left in any cache if every exited thread's cache went
 * back.
 * Usage: tls_threads MODULE.so [THREADS] */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *module;
static void *volatile sink;
static _Atomic(void *) shared[64];
static atomic_int exited;
static pthread_key_t last_key;

/* Runs at each thread's exit, after the thread-local destructors (the allocator's among them). */
static void count_exit(void *v) {
    (void)v;
    atomic_fetch_add(&exited, 1);
}

static void *worker(void *arg) {
    long id = (long)arg;
    pthread_setspecific(last_key, (void *)1);
    void *h = dlopen(module, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(1);
    }
    int (*touch)(int) = (int (*)(int))dlsym(h, "touch");
    if (!touch) exit(1);
    long sum = touch((int)id);
    for (int r = 0; r < 2000; r++) {
        char *p = malloc(16 + (r * 37 + id) % 900);
        sink = p;
        memset(p, r, 16);
        /* Hand a block to another thread, free whatever was there: cross-thread frees. */
        void *old = atomic_exchange(&shared[(r + id) % 64], p);
        free(old);
    }
    dlclose(h);
    return (void *)sum;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    module = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 32;
    /* 40 keys first, so that the counting key is past glibc's first 32. The allocator's
     * thread destructors (registered with __cxa_thread_atexit_impl) run before any key's. */
    pthread_key_t keys[40];
    for (int i = 0; i < 40; i++)
        if (pthread_key_create(&keys[i], NULL) != 0) return 1;
    void *first = malloc(10);
    sink = first;
    if (pthread_key_create(&last_key, count_exit) != 0) return 1;
    pthread_t t[256];
    if (n > 256) n = 256;
    for (long i = 0; i < n; i++) {
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0) return 1;
        if (i % 2) pthread_detach(t[i]);
    }
    for (int i = 0; i < n; i += 2) pthread_join(t[i], NULL);
    while (atomic_load(&exited) < n) usleep(1000);
    for (int i = 0; i < 64; i++) free(atomic_exchange(&shared[i], NULL));
    free(first);
    printf("%d threads done\n", n);
    fflush(stdout);
    malloc_trim(0); /* gives back the main thread's cache; nothing allocates after it */
    return 0;
}
