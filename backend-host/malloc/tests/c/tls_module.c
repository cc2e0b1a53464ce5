/* A shared library with a large thread-local block: loaded with dlopen, its TLS lives in
 * dynamically allocated blocks that the dynamic loader gets from malloc and frees when the
 * library is closed (tests/c/dlopen_tls.c). */
__thread char tls_block[64 * 1024];

int touch(int i) {
    tls_block[i % sizeof tls_block] = (char)i;
    return tls_block[(i * 7) % sizeof tls_block] + 1;
}
