/* bench FILE [OPS] [THREADS] [w2|w3|w3caller|all]: 4 KiB random O_DIRECT reads of
 * FILE (an existing file, read and never written), two shapes (BENCHMARKS.md):
 *
 *   W2: 32 reads in flight through one completion port, one thread
 *       submitting and reaping (overlap_port_submit/overlap_port_wait);
 *   W3: THREADS threads, each with one blocking read in flight
 *       (overlap_pread: the calling thread's own ring, depth 1);
 *       w3caller: the same on an engine made with
 *       OVERLAP_ENGINE_WAITS_ON_CALLER (overlap_pread makes the pread
 *       itself, as psync does).
 *
 * Prints reads/s and CPU microseconds per read (getrusage: user + system,
 * the whole process, kernel work charged to it included). OPS reads per
 * shape (default 200000), THREADS default 4, both shapes unless one is
 * named (scripts/bench-c runs them one at a time, interleaved with the
 * Rust engine's and fio's). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <overlap.h>

#define BS 4096
#define DEPTH 32

static overlap_file *file;
static uint64_t blocks;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fail(const char *what) {
    fprintf(stderr, "bench: %s: %s\n", what, overlap_last_error());
    exit(1);
}

static void report(const char *shape, long ops, double wall, double cpu) {
    printf("%-34s %10.0f reads/s  %7.2f CPU us/read  (%ld reads, %.2f s)\n", shape, ops / wall,
           cpu * 1e6 / ops, ops, wall);
}

static void w2(overlap_engine *engine, long ops) {
    overlap_port *port;
    if (overlap_port_create(engine, 0, &port) < 0) fail("overlap_port_create");
    uint8_t *mem = aligned_alloc(BS, (size_t)DEPTH * BS);
    uint64_t seed = 0x9E3779B97F4A7C15ULL;
    overlap_completion done[DEPTH];
    long submitted = 0, reaped = 0;
    double t0 = now_s(), c0 = cpu_s();
    for (int i = 0; i < DEPTH && submitted < ops; i++, submitted++) {
        if (overlap_port_read(port, file, mem + (size_t)i * BS, BS, next_rand(&seed) % blocks * BS,
                              (uint64_t)i) < 0)
            fail("overlap_port_read");
    }
    while (reaped < ops) {
        int64_t n = overlap_port_wait(port, done, 1, DEPTH, -1);
        if (n < 0) fail("overlap_port_wait");
        for (int64_t i = 0; i < n; i++) {
            if (done[i].result != BS) {
                fprintf(stderr, "bench: a read returned %" PRId64 "\n", done[i].result);
                exit(1);
            }
            reaped++;
            if (submitted < ops) {
                uint64_t slot = done[i].user_data;
                if (overlap_port_read(port, file, mem + slot * BS, BS,
                                      next_rand(&seed) % blocks * BS, slot) < 0)
                    fail("overlap_port_read");
                submitted++;
            }
        }
    }
    report("W2 port, 32 in flight", ops, now_s() - t0, cpu_s() - c0);
    overlap_port_free(port);
    free(mem);
}

struct job {
    long ops;
    uint64_t seed;
};

static void *reader(void *arg) {
    struct job *j = arg;
    uint8_t *buf = aligned_alloc(BS, BS);
    for (long i = 0; i < j->ops; i++) {
        if (overlap_pread(file, buf, BS, next_rand(&j->seed) % blocks * BS) != BS) fail("overlap_pread");
    }
    free(buf);
    return NULL;
}

static void w3(long ops, int threads) {
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    struct job *jobs = calloc((size_t)threads, sizeof *jobs);
    double t0 = now_s(), c0 = cpu_s();
    for (int i = 0; i < threads; i++) {
        jobs[i].ops = ops / threads;
        jobs[i].seed = 0x2545F4914F6CDD1DULL * (uint64_t)(i + 1);
        pthread_create(&t[i], NULL, reader, &jobs[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    char shape[64];
    snprintf(shape, sizeof shape, "W3 %d threads, 1 read each", threads);
    report(shape, ops / threads * threads, now_s() - t0, cpu_s() - c0);
    free(t);
    free(jobs);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 5) {
        fprintf(stderr, "usage: bench FILE [OPS] [THREADS] [w2|w3|w3caller|all]\n");
        return 2;
    }
    long ops = argc > 2 ? strtol(argv[2], NULL, 10) : 200000;
    int threads = argc > 3 ? atoi(argv[3]) : 4;
    const char *shape = argc > 4 ? argv[4] : "all";
    int run_w2 = strcmp(shape, "w2") == 0 || strcmp(shape, "all") == 0;
    int on_caller = strcmp(shape, "w3caller") == 0;
    int run_w3 = on_caller || strcmp(shape, "w3") == 0 || strcmp(shape, "all") == 0;
    if (!run_w2 && !run_w3) {
        fprintf(stderr, "bench: the shape is w2, w3, w3caller or all\n");
        return 2;
    }
    if (ops < 1 || threads < 1 || threads > 4096) {
        fprintf(stderr, "bench: OPS >= 1, THREADS from 1 to 4096\n");
        return 2;
    }
    overlap_engine_options opts;
    overlap_engine_options_init(&opts);
    if (on_caller) opts.flags = OVERLAP_ENGINE_WAITS_ON_CALLER;
    overlap_engine *engine;
    if (overlap_engine_create(&opts, &engine) < 0) {
        fprintf(stderr, "bench: overlap_engine_create: %s\n", overlap_last_error());
        return 2;
    }
    if (overlap_file_open(engine, argv[1], OVERLAP_OPEN_READ | OVERLAP_OPEN_DIRECT, 0, &file) < 0)
        fail(argv[1]);
    struct stat st;
    if (fstat(overlap_file_fd(file), &st) < 0 || st.st_size < BS) {
        fprintf(stderr, "bench: %s: needs at least 4 KiB\n", argv[1]);
        return 2;
    }
    blocks = (uint64_t)st.st_size / BS;
    char driver[256];
    overlap_engine_driver_text(engine, driver, sizeof driver);
    printf("driver: %s%s; file: %s, %" PRIu64 " blocks of 4 KiB, O_DIRECT\n", driver,
           on_caller ? " (blocking calls on the caller)" : "", argv[1], blocks);
    if (run_w2) w2(engine, ops);
    if (run_w3) w3(ops, threads);
    overlap_file_free(file);
    overlap_engine_free(engine);
    return 0;
}
