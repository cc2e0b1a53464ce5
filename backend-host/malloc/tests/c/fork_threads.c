/* A multi-threaded program that forks: worker threads allocate, touch, reallocate and free
 * blocks of many sizes without pause while the main thread forks children; each child
 * allocates at once (in an allocator whose lock another thread of the parent may have held at
 * the moment of the fork), checks what it got and exits. A child that hangs is killed by its
 * alarm and counted as hung, and no more children are forked after a failure. Prints counts that are the same on every run.
 * Usage: fork_threads [CHILDREN] [THREADS] */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_int stop;
static atomic_long rounds;

static void *worker(void *arg) {
    uintptr_t seed = (uintptr_t)arg * 2654435761u + 1;
    void *held[64] = {0};
    while (!atomic_load(&stop)) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        unsigned slot = (seed >> 33) % 64;
        /* Mostly small blocks, some of tens of KiB, and now and then one above the pool's 1 MiB
         * bypass threshold (a mapping of its own). */
        unsigned kind = (seed >> 20) % 64;
        size_t size = kind == 0 ? (1 << 20) + (seed >> 8) % (1 << 20)
                      : kind < 8 ? (seed >> 8) % (64 << 10)
                                 : (seed >> 8) % 512;
        if (held[slot]) {
            if ((seed >> 40) % 3 == 0) {
                void *p = realloc(held[slot], size + 1);
                if (!p) abort();
                held[slot] = p;
                continue;
            }
            free(held[slot]);
            held[slot] = NULL;
        } else {
            char *p = (seed >> 41) % 4 == 0 ? calloc(1, size + 1) : malloc(size + 1);
            if (!p) abort();
            p[0] = p[size] = (char)slot;
            held[slot] = p;
        }
        atomic_fetch_add(&rounds, 1);
    }
    for (int i = 0; i < 64; i++) free(held[i]);
    return NULL;
}

/* What a child does: allocate right away, check, free, and exit with 0 if all went well. */
static int child(int i) {
    alarm(5); /* a child that hangs in the allocator is killed, and the parent counts it */
    size_t total = 0;
    char *blocks[100];
    for (int k = 0; k < 100; k++) {
        size_t size = 16 + (size_t)(k * 977 + i) % 100000;
        blocks[k] = malloc(size);
        if (!blocks[k]) return 1;
        memset(blocks[k], k, size);
        total += size;
    }
    for (int k = 0; k < 100; k++) {
        if (blocks[k][0] != (char)k) return 2;
        free(blocks[k]);
    }
    char *s = strdup("child allocation after fork");
    if (!s || total == 0) return 3;
    free(s);
    return 0;
}

int main(int argc, char **argv) {
    int children = argc > 1 ? atoi(argv[1]) : 50;
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    pthread_t t[64];
    if (threads > 64) threads = 64;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)) != 0) return 1;
    int ok = 0, failed = 0, hung = 0;
    for (int i = 0; i < children; i++) {
        /* Let the workers run a little between forks, so forks land at random moments. */
        long before = atomic_load(&rounds);
        while (atomic_load(&rounds) < before + 200) sched_yield();
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) _exit(child(i));
        int status = 0;
        if (waitpid(pid, &status, 0) != pid) return 1;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
        else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) hung++;
        else failed++;
        if (ok != i + 1) break; /* one failure says it all; the rest would only wait */
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("children: %d ok, %d failed, %d hung\n", ok, failed, hung);
    printf("threads: %d joined\n", threads);
    return ok == children ? 0 : 1;
}
