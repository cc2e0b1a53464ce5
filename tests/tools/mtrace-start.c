/* Preloaded next to glibc's libc_malloc_debug.so.0: starts mtrace() as the process starts, logging
 * every malloc, free and realloc to the file named by TAGALLOC_MTRACE_LOG.
 *
 * Only the first process is traced: the variable is removed from the environment once tracing
 * has started, so child processes (which would otherwise truncate the same log) run untraced. */
#include <mcheck.h>
#include <stdlib.h>

__attribute__((constructor)) static void tagalloc_mtrace_start(void) {
    const char *log = getenv("TAGALLOC_MTRACE_LOG");
    if (log == NULL || *log == '\0')
        return;
    if (setenv("MALLOC_TRACE", log, 1) != 0)
        return;
    mtrace();
    unsetenv("MALLOC_TRACE");
    unsetenv("TAGALLOC_MTRACE_LOG");
}
