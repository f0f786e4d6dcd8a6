/* The floor for `overlap bench --preset cached`: a bare C loop of pread(2),
 * 4 KiB at uniformly random 4 KiB-aligned offsets of a file already in the
 * page cache, one at a time on one thread. Prints reads per second and CPU
 * microseconds per read, the bench harness's own measures.
 *
 *   cc -O2 -o target/pread-loop scripts/pread-loop.c
 *   target/pread-loop FILE [READS]        (default 200000 reads)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [READS]\n", argv[0]);
        return 2;
    }
    long reads = argc > 2 ? atol(argv[2]) : 200000;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < 4096) {
        perror(argv[1]);
        return 1;
    }
    uint64_t blocks = st.st_size / 4096, seed = 42;
    static char buf[4096] __attribute__((aligned(4096)));
    /* Warm the page cache: read the whole file once. */
    for (uint64_t b = 0; b < blocks; b++)
        if (pread(fd, buf, 4096, (off_t)(b * 4096)) != 4096) { perror("warm"); return 1; }
    double t0 = now(), c0 = cpu();
    for (long i = 0; i < reads; i++) {
        off_t off = (off_t)(splitmix64(&seed) % blocks) * 4096;
        if (pread(fd, buf, 4096, off) != 4096) { perror("pread"); return 1; }
    }
    double t = now() - t0, c = cpu() - c0;
    printf("{\"system\":\"c-pread-loop\",\"reads\":%ld,\"iops\":%.0f,\"cpu_us_per_op\":%.3f}\n",
           reads, reads / t, c / reads * 1e6);
    return 0;
}
