/* asynchio FILE [N]: KB 156932's experiment ("Asynchronous disk I/O
 * appears as synchronous on Windows") on liboverlap. It queues N reads of
 * FILE (an existing file, read and never written) at once through a
 * completion port, then waits for them, and compares the time queueing
 * took with the time until the last completion:
 *
 * - if queueing took (almost) as long as completing, or (almost) every
 *   read was already complete when its submitting call returned, the I/O
 *   was synchronous: nothing was left to overlap with;
 * - if the kernel handed reads to its blocking worker threads, they were
 *   done synchronously, inside the kernel;
 * - otherwise the reads really overlapped with the program.
 *
 * The rules and their 90% thresholds are `overlap probe`'s
 * (crates/overlap-cli/src/probe/verdict.rs). The reads are O_DIRECT where
 * the file system allows it (else buffered, and a cached file then reads
 * synchronously, as the verdict will say).
 *
 * Before the reads it asks the kernel what of the file is in the page
 * cache (cachestat(2), Linux 6.5): a file just written has dirty pages,
 * and an O_DIRECT read of them must wait until the kernel has written
 * them back. io_uring cannot wait without blocking, so it hands such reads
 * to its worker threads; Linux AIO writes them back inside io_submit. The
 * verdict says so. */
#define _GNU_SOURCE /* syscall() */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <overlap.h>

#define READ_SIZE (64 * 1024)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* the same on every architecture */
#endif

/* cachestat(2)'s range and answer, in pages. */
struct cache_range { uint64_t off, len; };
struct cache_stat { uint64_t cached, dirty, writeback, evicted, recently_evicted; };

/* What of the first `len` bytes of fd is in the page cache; 0, or -errno
 * when the kernel cannot tell (-ENOSYS before Linux 6.5). */
static int page_cache(int fd, uint64_t len, struct cache_stat *out) {
    struct cache_range r = {0, len};
    memset(out, 0, sizeof *out);
    return syscall(__NR_cachestat, fd, &r, out, 0) == 0 ? 0 : -errno;
}

static int die(const char *what) {
    fprintf(stderr, "asynchio: %s: %s\n", what, overlap_last_error());
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: asynchio FILE [N]\n");
        return 2;
    }
    long n = argc == 3 ? strtol(argv[2], NULL, 10) : 256;
    if (n < 1 || n > 4096) {
        fprintf(stderr, "asynchio: N must be between 1 and 4096\n");
        return 2;
    }
    overlap_engine *engine;
    if (overlap_engine_create(NULL, &engine) < 0) return die("overlap_engine_create");
    char driver[256];
    overlap_engine_driver_text(engine, driver, sizeof driver);
    int32_t kind = overlap_engine_driver(engine);

    overlap_file *file;
    int direct = 1;
    int32_t r = overlap_file_open(engine, argv[1], OVERLAP_OPEN_READ | OVERLAP_OPEN_DIRECT, 0, &file);
    if (r == -EINVAL) {
        direct = 0;
        r = overlap_file_open(engine, argv[1], OVERLAP_OPEN_READ, 0, &file);
    }
    if (r < 0) return die(argv[1]);
    struct stat st;
    if (fstat(overlap_file_fd(file), &st) < 0 || st.st_size < READ_SIZE) {
        fprintf(stderr, "asynchio: %s: needs a file of at least %d bytes\n", argv[1], READ_SIZE);
        return 2;
    }
    uint64_t slots = (uint64_t)st.st_size / READ_SIZE;
    overlap_alignment a;
    overlap_file_alignment(file, &a);
    size_t align = a.memory > 4096 ? a.memory : 4096;
    uint8_t *mem = aligned_alloc(align, (size_t)n * READ_SIZE);
    overlap_op *ops = calloc((size_t)n, sizeof *ops);
    overlap_completion *done = calloc((size_t)n, sizeof *done);
    if (!mem || !ops || !done) {
        fprintf(stderr, "asynchio: out of memory\n");
        return 2;
    }
    for (long i = 0; i < n; i++) {
        ops[i].opcode = OVERLAP_OP_READ;
        ops[i].file = file;
        ops[i].buf = mem + (size_t)i * READ_SIZE;
        ops[i].len = READ_SIZE;
        /* Spread over the file, as the KB's sample reads a large file. */
        ops[i].offset = ((uint64_t)i * 7919 % slots) * READ_SIZE;
        ops[i].user_data = (uint64_t)i;
    }
    struct cache_stat pc;
    int pc_err = page_cache(overlap_file_fd(file), (uint64_t)st.st_size, &pc);
    /* Pages an O_DIRECT read must see written back first. */
    uint64_t unwritten = pc_err ? 0 : pc.dirty + pc.writeback;
    overlap_port *port;
    if (overlap_port_create(engine, 0, &port) < 0) return die("overlap_port_create");
    overlap_stats before, after;
    overlap_engine_stats(engine, &before);

    double t0 = now_s();
    for (long taken = 0; taken < n;) {
        int64_t k = overlap_port_submit(port, ops + taken, (uint64_t)(n - taken));
        if (k < 0) return die("overlap_port_submit");
        taken += k;
    }
    double queued = now_s() - t0;
    long got = 0, inline_ = 0, failed = 0;
    while (got < n) {
        int64_t k = overlap_port_wait(port, done + got, 1, (uint64_t)(n - got), -1);
        if (k < 0) return die("overlap_port_wait");
        got += k;
    }
    double complete = now_s() - t0;
    overlap_engine_stats(engine, &after);
    for (long i = 0; i < n; i++) {
        if (done[i].flags & OVERLAP_COMPLETION_INLINE) inline_++;
        if (done[i].result != READ_SIZE) failed++;
    }
    uint64_t workers = after.kernel_workers_seen - before.kernel_workers_seen;

    printf("driver: %s\n", driver);
    printf("file: %s (%s)\n", argv[1], direct ? "O_DIRECT" : "buffered: O_DIRECT refused here");
    if (pc_err)
        printf("page cache before the reads: unknown (cachestat: %s)\n", strerror(-pc_err));
    else
        printf("page cache before the reads: %" PRIu64 " of %" PRIu64 " pages cached, %" PRIu64
               " dirty, %" PRIu64 " under writeback\n",
               pc.cached, ((uint64_t)st.st_size + 4095) / 4096, pc.dirty, pc.writeback);
    printf("queued %ld reads of %d KiB in %.3f ms; the last completed after %.3f ms\n", n,
           READ_SIZE / 1024, queued * 1e3, complete * 1e3);
    printf("queueing took %.0f%% of the time to the last completion; %ld of %ld completed inline",
           complete > 0 ? 100.0 * queued / complete : 100.0, inline_, n);
    if (failed) printf("; %ld reads did not return %d bytes", failed, READ_SIZE);
    printf("; new kernel workers: %" PRIu64 "\n", workers);

    /* overlap probe's rules: kernel workers first, then 90% inline or 90%
     * of the time queueing means synchronous. */
    const char *verdict, *plain;
    int by_threads = kind == OVERLAP_DRIVER_POOL || (kind == OVERLAP_DRIVER_AIO && !direct);
    /* Why, when the file's dirty pages decided it. */
    const char *cause = "";
    if (workers > 0) {
        verdict = "kernel-workers";
        plain = "handed to kernel workers: the kernel did the reads synchronously, on its own threads";
        if (direct && unwritten > 0)
            cause = "; the file had dirty pages (written, not yet on the disk), and an O_DIRECT read "
                    "must wait until the kernel has written them back, which io_uring cannot do "
                    "without blocking: sync the file (fsync) before reading it with O_DIRECT";
    } else if (inline_ * 10 >= n * 9 || queued * 10 >= complete * 9) {
        verdict = "sync";
        plain = "synchronous: the reads were done by the time they were queued, nothing overlapped "
                "(KB 156932's \"asynchronous I/O appears synchronous\")";
    } else if (by_threads) {
        verdict = "async";
        plain = "asynchronous (by threads): the reads overlapped because a thread pool made "
                "blocking calls, not because the kernel did them asynchronously";
    } else {
        verdict = "async";
        plain = "truly asynchronous: queueing returned at once and the kernel completed the reads later";
    }
    if (!*cause && direct && unwritten > 0)
        cause = kind == OVERLAP_DRIVER_AIO
                    ? "; the file had dirty pages (written, not yet on the disk): each O_DIRECT read "
                      "first waited, inside io_submit, until the kernel had written them back"
                    : "; the file had dirty pages (written, not yet on the disk): each O_DIRECT read "
                      "first waited until the kernel had written them back";
    printf("verdict: %s (%s%s)\n", verdict, plain, cause);

    overlap_port_free(port);
    overlap_file_free(file);
    overlap_engine_free(engine);
    free(mem);
    free(ops);
    free(done);
    return 0;
}
