/* Every function of liboverlap, on the driver OVERLAP_DRIVER names: the
 * results, the buffer rule under cancellation and close, and bad input
 * (NULL handles, unaligned direct buffers, closed files, absurd sizes):
 * a clear -errno with a message, never a crash. */
#include "check.h"

#if defined(_WIN32)
#define FALLOC_FL_KEEP_SIZE 1 /* Linux's value: overlap_port_fallocate()'s mode */
#else
#include <linux/falloc.h>
#endif
#include <sys/stat.h>

#define BS 4096

static overlap_engine *engine;
static int32_t driver;

static void fill(uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed + i * 7);
}

static void check_fill(const uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != (uint8_t)(seed + i * 7)) {
            fprintf(stderr, "byte %zu is %u, expected %u\n", i, p[i], (uint8_t)(seed + i * 7));
            exit(1);
        }
    }
}

/* Waits for exactly n completions (10 s at most). */
static void reap(overlap_port *port, overlap_completion *out, size_t n) {
    size_t got = 0;
    double t0 = now_s();
    while (got < n) {
        int64_t r = overlap_port_wait(port, out + got, 1, n - got, 1000000000LL);
        CHECK(r >= 0);
        got += (size_t)r;
        CHECK(now_s() - t0 < 10.0);
    }
}

static const overlap_completion *find(const overlap_completion *c, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i++)
        if (c[i].user_data == key) return &c[i];
    fprintf(stderr, "no completion with user data %" PRIu64 "\n", key);
    exit(1);
}

static void test_version_and_errors(void) {
    CHECK(strlen(overlap_version()) > 0);
    CHECK(overlap_last_error() != NULL);
    CHECK_ERR(overlap_engine_options_init(NULL), EINVAL);
    CHECK(strstr(overlap_last_error(), "overlap_engine_options_init") != NULL);
}

static void test_engine_calls(void) {
    overlap_engine_options o;
    CHECK_OK(overlap_engine_options_init(&o));
    CHECK_EQ(o.size, sizeof o);
    CHECK_EQ(o.driver, OVERLAP_DRIVER_AUTO);
    CHECK_EQ(o.max_inflight_ops, 4096);

    overlap_engine *e = NULL;
    CHECK_ERR(overlap_engine_create(&o, NULL), EINVAL);
    o.size = 3;
    CHECK_ERR(overlap_engine_create(&o, &e), EINVAL);
    CHECK(strstr(overlap_last_error(), "overlap_engine_options_init") != NULL);
    overlap_engine_options_init(&o);
    o.driver = 9;
    CHECK_ERR(overlap_engine_create(&o, &e), EINVAL);
    overlap_engine_options_init(&o);
    o.max_inflight_ops = 0;
    CHECK_ERR(overlap_engine_create(&o, &e), EINVAL);
    overlap_engine_options_init(&o);
    o.pool_threads = 100000;
    CHECK_ERR(overlap_engine_create(&o, &e), EINVAL);
    CHECK(e == NULL);

    /* The driver: the one OVERLAP_DRIVER asked for, and said why. */
    int32_t d = overlap_engine_driver(engine);
#if defined(_WIN32)
    CHECK(d == OVERLAP_DRIVER_IOCP || d == OVERLAP_DRIVER_POOL);
#else
    CHECK(d == OVERLAP_DRIVER_URING || d == OVERLAP_DRIVER_AIO || d == OVERLAP_DRIVER_POOL);
#endif
    if (wanted_driver() != OVERLAP_DRIVER_AUTO) CHECK_EQ(d, wanted_driver());
    int64_t n = overlap_engine_driver_text(engine, NULL, 0);
    CHECK(n > 0);
    char text[512], small[4];
    CHECK_EQ(overlap_engine_driver_text(engine, text, sizeof text), n);
    CHECK_EQ((int64_t)strlen(text), n < 511 ? n : 511);
    CHECK_EQ(overlap_engine_driver_text(engine, small, sizeof small), n);
    CHECK_EQ(strlen(small), 3);
    const char *name = d == OVERLAP_DRIVER_URING ? "uring" : d == OVERLAP_DRIVER_AIO ? "aio+pool" : "pool";
#if defined(_WIN32)
    if (d == OVERLAP_DRIVER_IOCP) name = "iocp";
#endif
    CHECK(strncmp(text, name, strlen(name)) == 0);
    int64_t f = overlap_engine_fallback_reason(engine, text, sizeof text);
    CHECK(f >= 0);
    int native = d == OVERLAP_DRIVER_URING;
#if defined(_WIN32)
    native = d == OVERLAP_DRIVER_IOCP; /* Windows' own driver: no fallback */
#endif
    if (native) {
        CHECK_EQ(f, 0);
        CHECK_EQ(text[0], 0);
    } else {
        CHECK(f > 0);
        CHECK(strstr(text, "io_uring") != NULL);
    }
    overlap_engine_driver_text(engine, text, sizeof text);
    printf("driver: %s\n", text);

    overlap_stats s;
    CHECK_OK(overlap_engine_stats(engine, &s));
    CHECK_ERR(overlap_engine_stats(engine, NULL), EINVAL);
}

static void test_files_and_blocking_calls(void) {
    char path[512];
    test_path(path, sizeof path, "files");
    overlap_file *f = NULL;
    CHECK_OK(overlap_file_open(engine, path,
                               OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE |
                                   OVERLAP_OPEN_TRUNCATE, 0644, &f));
    CHECK(overlap_file_fd(f) >= 0);
    overlap_alignment a;
    CHECK_OK(overlap_file_alignment(f, &a));
    CHECK_EQ(a.direct, 0);
    CHECK(a.memory > 0 && a.offset > 0);

    uint8_t w[3 * BS], r[3 * BS];
    fill(w, sizeof w, 1);
    CHECK_EQ(overlap_pwrite(f, w, sizeof w, 0), sizeof w);
    memset(r, 0, sizeof r);
    CHECK_EQ(overlap_pread(f, r, sizeof r, 0), sizeof r);
    check_fill(r, sizeof r, 1);
    CHECK_EQ(overlap_pread(f, r, 100, sizeof w - 10), 10); /* short near the end */
    CHECK_EQ(overlap_pread(f, r, 100, sizeof w + 10), 0);  /* past it */
    CHECK_EQ(overlap_pread(f, NULL, 0, 0), 0);             /* nothing to read */
    CHECK_OK(overlap_fsync(f));
    CHECK_OK(overlap_fdatasync(f));

#if defined(_WIN32)
    /* Windows has no read that answers only from the cache: -EAGAIN. */
    CHECK_ERR(overlap_pread_cached(f, r, sizeof r, 0), EAGAIN);
    CHECK_ERR(overlap_pread_cached(f, NULL, 10, 0), EFAULT);
    CHECK_ERR(overlap_pread_cached(NULL, r, 10, 0), EINVAL);
#else
    /* From the page cache only: just written, so cached; then evicted. */
    overlap_stats s0, s1;
    CHECK_OK(overlap_engine_stats(engine, &s0));
    memset(r, 0, sizeof r);
    CHECK_EQ(overlap_pread_cached(f, r, sizeof r, 0), sizeof r);
    check_fill(r, sizeof r, 1);
    CHECK_EQ(overlap_pread_cached(f, r, 100, sizeof w - 10), 10); /* short at the end */
    CHECK_EQ(overlap_pread_cached(f, r, 100, sizeof w + 10), 0);  /* past it */
    CHECK_EQ(overlap_pread_cached(f, NULL, 0, 0), 0);
    CHECK_ERR(overlap_pread_cached(f, NULL, 10, 0), EFAULT);
    CHECK_ERR(overlap_pread_cached(NULL, r, 10, 0), EINVAL);
    CHECK_OK(overlap_engine_stats(engine, &s1));
    CHECK_EQ(s1.completed_inline - s0.completed_inline, 3);
    CHECK_EQ(s1.bytes_read - s0.bytes_read, sizeof r + 10);
    CHECK_EQ(posix_fadvise(overlap_file_fd(f), 0, 0, POSIX_FADV_DONTNEED), 0);
    int64_t cold = overlap_pread_cached(f, r, sizeof r, 0);
    if (cold == -EAGAIN) {
        CHECK(strstr(overlap_last_error(), "page cache") != NULL);
    } else {
        printf("SKIPPED: the evicted read was answered (%" PRId64 "): the kernel kept the pages\n", cold);
    }
#endif

    /* Exclusive creation of an existing file; missing files; flags. */
    overlap_file *g = NULL;
    CHECK_ERR(overlap_file_open(engine, path, OVERLAP_OPEN_WRITE | OVERLAP_OPEN_EXCLUSIVE, 0644, &g), EEXIST);
    CHECK_ERR(overlap_file_open(engine, "/nonexistent/x", OVERLAP_OPEN_READ, 0, &g), ENOENT);
    CHECK(strstr(overlap_last_error(), "/nonexistent/x") != NULL);
    CHECK_ERR(overlap_file_open(engine, path, 0, 0, &g), EINVAL);
    CHECK_ERR(overlap_file_open(engine, path, OVERLAP_OPEN_READ | 0x10000, 0, &g), EINVAL);
    CHECK_ERR(overlap_file_open(engine, NULL, OVERLAP_OPEN_READ, 0, &g), EINVAL);
    CHECK_ERR(overlap_file_open(engine, path, OVERLAP_OPEN_READ, 0, NULL), EINVAL);
    CHECK(g == NULL);

    /* Read-only: writes refused; write-through: works. */
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_READ, 0, &g));
    CHECK_ERR(overlap_pwrite(g, w, 10, 0), EBADF);
    overlap_file_free(g);
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_WRITE | OVERLAP_OPEN_WRITE_THROUGH, 0, &g));
    CHECK_EQ(overlap_pwrite(g, w, 10, 0), 10);
    CHECK_ERR(overlap_pread(g, r, 10, 0), EBADF);
    CHECK_OK(overlap_file_close(g));
    overlap_file_free(g);
    /* Appending needs WRITE, as CREATE and TRUNCATE do (O_APPEND alone
     * gives no write access). */
    g = NULL;
    CHECK_ERR(overlap_file_open(engine, path, OVERLAP_OPEN_APPEND, 0, &g), EINVAL);
    CHECK(strstr(overlap_last_error(), "OVERLAP_OPEN_WRITE") != NULL);
    CHECK_ERR(overlap_file_open(engine, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_APPEND, 0, &g), EINVAL);
    CHECK(g == NULL);
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_WRITE | OVERLAP_OPEN_APPEND, 0, &g));
    CHECK_EQ(overlap_pwrite(g, w, BS, 0), BS); /* goes to the end */
    overlap_file_free(g);
    struct stat st;
    CHECK_OK(stat(path, &st));
    CHECK_EQ(st.st_size, 4 * BS);

#if defined(_WIN32)
    /* A C runtime descriptor is not for overlapped I/O: windows.c adopts
     * a HANDLE. */
    CHECK_ERR(overlap_file_adopt(engine, 0, &g), EOPNOTSUPP);
#else
    /* Adopt a descriptor the caller opened; the engine closes it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_OK(overlap_file_adopt(engine, fd, &g));
    CHECK_EQ(overlap_file_fd(g), fd);
    memset(r, 0, sizeof r);
    CHECK_EQ(overlap_pread(g, r, BS, BS), BS);
    check_fill(r, BS, (uint8_t)(1 + BS * 7));
    CHECK_ERR(overlap_pwrite(g, w, 10, 0), EBADF); /* O_RDONLY, read from the descriptor */
    CHECK_OK(overlap_file_close(g));
    CHECK(fcntl(fd, F_GETFD) < 0); /* closed by the engine */
    overlap_file_free(g);
    CHECK_ERR(overlap_file_adopt(engine, -1, &g), EBADF);
    CHECK_ERR(overlap_file_adopt(engine, fd, &g), EBADF); /* closed */
#endif
    CHECK_ERR(overlap_file_adopt(engine, 0, NULL), EINVAL);

    /* Closed files: every call says so. */
    CHECK_OK(overlap_file_close(f));
    CHECK_ERR(overlap_file_close(f), EBADF);
    CHECK_ERR(overlap_pread(f, r, 10, 0), EBADF);
    CHECK_ERR(overlap_pwrite(f, w, 10, 0), EBADF);
    CHECK_ERR(overlap_fsync(f), EBADF);
    CHECK_ERR(overlap_fdatasync(f), EBADF);
    CHECK_ERR(overlap_file_fd(f), EBADF);
    overlap_file_free(f);
    unlink(path);
}

static void test_direct_alignment(void) {
    char path[512];
    test_path(path, sizeof path, "direct");
    overlap_file *f = NULL;
    int32_t r = overlap_file_open(engine, path,
                                  OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE |
                                      OVERLAP_OPEN_DIRECT, 0644, &f);
    if (r == -EINVAL) {
        printf("SKIPPED: O_DIRECT unsupported in %s: %s\n", path, overlap_last_error());
        return;
    }
    CHECK_OK(r);
    overlap_alignment a;
    CHECK_OK(overlap_file_alignment(f, &a));
    CHECK_EQ(a.direct, 1);
    CHECK(a.memory >= 1 && a.offset >= 1 && a.offset <= BS && a.memory <= BS);
    uint8_t *buf = NULL;
    CHECK_OK(posix_memalign((void **)&buf, BS, 4 * BS));
    fill(buf, 2 * BS, 9);
    CHECK_EQ(overlap_pwrite(f, buf, 2 * BS, 0), 2 * BS);
    memset(buf, 0, 2 * BS);
    CHECK_EQ(overlap_pread(f, buf, 2 * BS, 0), 2 * BS);
    check_fill(buf, 2 * BS, 9);

    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(engine, 0, &port));
    if (a.memory > 1) {
        CHECK_ERR(overlap_pread(f, buf + 1, BS, 0), EINVAL);
        CHECK(strstr(overlap_last_error(), "buffer address") != NULL);
        CHECK_ERR(overlap_port_read(port, f, buf + 1, BS, 0, 1), EINVAL);
        CHECK_ERR(overlap_port_write(port, f, buf + 1, BS, 0, 1), EINVAL);
    }
    if (a.offset > 1) {
        CHECK_ERR(overlap_pread(f, buf, BS, 1), EINVAL);
        CHECK(strstr(overlap_last_error(), "file offset") != NULL);
        CHECK_ERR(overlap_pread(f, buf, a.offset + 1, 0), EINVAL);
        CHECK(strstr(overlap_last_error(), "length") != NULL);
        CHECK_ERR(overlap_port_read(port, f, buf, BS, 3, 1), EINVAL);
    }
    CHECK_EQ(overlap_port_outstanding(port), 0);
    /* Aligned through the port. */
    CHECK_OK(overlap_port_read(port, f, buf + BS * 2, BS, BS, 5));
    overlap_completion c;
    reap(port, &c, 1);
    CHECK_EQ(c.user_data, 5);
    CHECK_EQ(c.result, BS);
    check_fill(buf + 2 * BS, BS, (uint8_t)(9 + BS * 7));
    overlap_port_free(port);
    overlap_file_free(f);
    aligned_free(buf);
    unlink(path);
}

/* OVERLAP_ENGINE_WAITS_ON_CALLER: blocking calls make their system call on
 * the calling thread, whatever the driver; a port's operations do not. */
static void test_waits_on_caller(void) {
    overlap_engine_options o;
    overlap_engine *e = NULL;
    overlap_engine_options_init(&o);
    CHECK_EQ(o.flags, 0);
    o.flags = 2;
    CHECK_ERR(overlap_engine_create(&o, &e), EINVAL);
    CHECK(strstr(overlap_last_error(), "flags") != NULL);
    CHECK(e == NULL);
    for (int on = 0; on <= 1; on++) {
        overlap_engine_options_init(&o);
        o.flags = on ? OVERLAP_ENGINE_WAITS_ON_CALLER : 0;
        e = test_engine(&o);
        char path[512];
        test_path(path, sizeof path, "on-caller");
        overlap_file *f = NULL;
        CHECK_OK(overlap_file_open(e, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0644, &f));
        uint8_t buf[BS];
        fill(buf, BS, 4);
        overlap_stats before, after;
        CHECK_OK(overlap_engine_stats(e, &before));
        for (int i = 0; i < 4; i++) CHECK_EQ(overlap_pwrite(f, buf, BS, (uint64_t)i * BS), BS);
        CHECK_OK(overlap_fsync(f));
        CHECK_OK(overlap_engine_stats(e, &after));
        uint64_t here = after.ran_on_caller - before.ran_on_caller;
        /* Without the flag: io_uring takes them on the thread's ring; the
         * pool runs a blocking call on the caller anyway; aio+pool gives the
         * fsync to io_submit and the buffered writes to its pool. */
        int32_t d = overlap_engine_driver(e);
        uint64_t expected = on || d == OVERLAP_DRIVER_POOL ? 5 : d == OVERLAP_DRIVER_AIO ? 4 : 0;
#if defined(_WIN32)
        /* IOCP: the writes are overlapped ones on its port; the fsync has
         * no overlapped form and runs on the caller, as on the pool. */
        if (!on && d == OVERLAP_DRIVER_IOCP) expected = 1;
#endif
        CHECK_EQ(here, expected);
        /* A port's write is no blocking call. */
        overlap_port *port = NULL;
        CHECK_OK(overlap_port_create(e, 0, &port));
        CHECK_OK(overlap_engine_stats(e, &before));
        CHECK_OK(overlap_port_write(port, f, buf, BS, 0, 1));
        overlap_completion c;
        reap(port, &c, 1);
        CHECK_EQ(c.result, BS);
        CHECK_OK(overlap_engine_stats(e, &after));
        CHECK_EQ(after.ran_on_caller, before.ran_on_caller);
        overlap_port_free(port);
        overlap_file_free(f);
        unlink(path);
        overlap_engine_free(e);
    }
}

static void test_port_operations(void) {
    char path[512];
    test_path(path, sizeof path, "port");
    overlap_file *f = NULL;
    CHECK_OK(overlap_file_open(engine, path,
                               OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0644, &f));
    overlap_port *port = NULL;
    CHECK_ERR(overlap_port_create(engine, 0x80, &port), EINVAL);
    CHECK_OK(overlap_port_create(engine, OVERLAP_PORT_NONBLOCK | OVERLAP_PORT_CANCEL, &port));
    overlap_port_free(port);
    port = NULL;
    CHECK_ERR(overlap_port_create(engine, 0, NULL), EINVAL);
    CHECK_OK(overlap_port_create(engine, 0, &port));

    static uint8_t w[4][BS], r[4][BS];
    for (int i = 0; i < 4; i++) fill(w[i], BS, (uint8_t)(10 + i));
    for (int i = 0; i < 4; i++) CHECK_OK(overlap_port_write(port, f, w[i], BS, (uint64_t)i * BS, 100 + i));
    overlap_completion c[16];
    reap(port, c, 4);
    for (int i = 0; i < 4; i++) {
        const overlap_completion *x = find(c, 4, 100 + i);
        CHECK_EQ(x->result, BS);
        CHECK_EQ(x->flags & (OVERLAP_COMPLETION_POSTED | OVERLAP_COMPLETION_KERNEL_WORKER), 0);
    }
    CHECK_OK(overlap_port_fsync(port, f, 200));
    CHECK_OK(overlap_port_fdatasync(port, f, 201));
    CHECK_OK(overlap_port_fallocate(port, f, 0, 4 * BS, 4 * BS, 202));
    CHECK_OK(overlap_port_fallocate(port, f, FALLOC_FL_KEEP_SIZE, 0, 1 << 20, 203));
    for (int i = 0; i < 4; i++) CHECK_OK(overlap_port_read(port, f, r[i], BS, (uint64_t)i * BS, 300 + i));
    reap(port, c, 8);
    /* Wine has no file allocation call (ERROR_CALL_NOT_IMPLEMENTED). */
    const int64_t falloc = under_wine() ? -ENOSYS : 0;
    for (int k = 200; k < 202; k++) CHECK_EQ(find(c, 8, k)->result, 0);
    for (int k = 202; k < 204; k++) CHECK_EQ(find(c, 8, k)->result, falloc);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(find(c, 8, 300 + i)->result, BS);
        check_fill(r[i], BS, (uint8_t)(10 + i));
    }
    struct stat st;
    CHECK_OK(stat(path, &st));
    CHECK_EQ(st.st_size, falloc == 0 ? 8 * BS : 4 * BS);
    CHECK_EQ(overlap_port_outstanding(port), 0);

    /* A batch: how many were taken; an invalid entry stops it there. */
    overlap_op ops[6];
    memset(ops, 0, sizeof ops);
    for (int i = 0; i < 6; i++) {
        ops[i].opcode = OVERLAP_OP_READ;
        ops[i].file = f;
        ops[i].buf = r[i % 4];
        ops[i].len = BS;
        ops[i].offset = (uint64_t)(i % 4) * BS;
        ops[i].user_data = 400 + i;
    }
    ops[4].opcode = OVERLAP_OP_FDATASYNC;
    ops[5].opcode = OVERLAP_OP_FALLOCATE;
    ops[5].offset = 0;
    ops[5].len = BS;
    /* Reads 0-3 share buffers with nothing else in flight: 4 distinct. */
    CHECK_EQ(overlap_port_submit(port, ops, 6), 6);
    reap(port, c, 6);
    for (int i = 0; i < 4; i++) CHECK_EQ(find(c, 6, 400 + i)->result, BS);
    CHECK_EQ(find(c, 6, 404)->result, 0);
    CHECK_EQ(find(c, 6, 405)->result, 0); /* within the allocation: no call */
    ops[2].opcode = 77;
    CHECK_EQ(overlap_port_submit(port, ops, 4), 2);
    CHECK_ERR(overlap_port_submit(port, ops + 2, 2), EINVAL);
    CHECK(strstr(overlap_last_error(), "opcode 77") != NULL);
    ops[2].opcode = OVERLAP_OP_READ;
    ops[2].file = NULL;
    CHECK_ERR(overlap_port_submit(port, ops + 2, 2), EINVAL);
    reap(port, c, 2);
    CHECK_EQ(overlap_port_submit(port, ops, 0), 0);
    CHECK_ERR(overlap_port_submit(port, NULL, 3), EINVAL);
    CHECK_ERR(overlap_port_submit(port, ops, UINT64_MAX), EINVAL);

    /* wait: arguments, the timeout, polls. */
    CHECK_ERR(overlap_port_wait(port, c, 3, 2, 0), EINVAL);
    CHECK_EQ(overlap_port_wait(port, c, 0, 0, 0), 0);
    CHECK_ERR(overlap_port_wait(port, NULL, 0, 4, 0), EINVAL);
    CHECK_EQ(overlap_port_wait(port, c, 0, 16, 0), 0);
    double t0 = now_s();
    CHECK_EQ(overlap_port_wait(port, c, 1, 16, 30 * 1000000LL), 0);
    CHECK(now_s() - t0 >= 0.029);

    /* Posted completions. */
    CHECK_OK(overlap_port_post(port, 900, 42));
    CHECK_OK(overlap_port_post(port, 901, -EINTR));
    CHECK_ERR(overlap_port_post(port, 902, -5000), EINVAL);
    CHECK_EQ(overlap_port_outstanding(port), 2);
    reap(port, c, 2);
    CHECK_EQ(find(c, 2, 900)->result, 42);
    CHECK_EQ(find(c, 2, 901)->result, -EINTR);
    CHECK(find(c, 2, 900)->flags & OVERLAP_COMPLETION_POSTED);

    /* Errors of operations arrive as -errno in the completion... */
    CHECK_EQ(overlap_port_read(port, f, r[0], BS, 1ULL << 40, 950), 0);
    reap(port, c, 1);
    CHECK_EQ(c[0].result, 0); /* end of file */
    /* ... and refusals at submission as the return value. */
    CHECK_ERR(overlap_port_read(port, f, NULL, BS, 0, 1), EFAULT);
    CHECK_ERR(overlap_port_read(port, f, r[0], UINT64_MAX, 0, 1), EINVAL);
    CHECK_ERR(overlap_port_read(port, f, r[0], BS, UINT64_MAX - 10, 1), EINVAL);
    CHECK_ERR(overlap_port_fallocate(port, f, 0, 0, 0, 1), EINVAL);
    CHECK_ERR(overlap_port_fallocate(port, f, 0, UINT64_MAX - 1, BS, 1), EINVAL);
    CHECK_ERR(overlap_pread(f, r[0], UINT64_MAX, 0), EINVAL);
    CHECK_ERR(overlap_pread(f, NULL, 5, 0), EFAULT);
    CHECK_ERR(overlap_pwrite(f, r[0], ((uint64_t)1 << 63) + 5, 0), EINVAL);

    /* A file of another engine. */
    overlap_engine *other = test_engine(NULL);
    overlap_port *op2 = NULL;
    CHECK_OK(overlap_port_create(other, 0, &op2));
    CHECK_ERR(overlap_port_read(op2, f, r[0], BS, 0, 1), EINVAL);
    CHECK(strstr(overlap_last_error(), "another engine") != NULL);
    overlap_port_free(op2);
    overlap_engine_free(other);

    /* Batches: what a thread submits between begin and end goes to the
     * kernel at the end (one call); flush submits it from any thread; a
     * port without a ring of its own (aio, pool) has nothing to batch. */
    CHECK_ERR(overlap_port_batch_begin(NULL), EINVAL);
    CHECK_ERR(overlap_port_batch_end(NULL), EINVAL);
    CHECK_ERR(overlap_port_flush(NULL), EINVAL);
    CHECK_EQ(overlap_port_batch_end(port), 0); /* none began */
    int32_t began = overlap_port_batch_begin(port);
    CHECK_EQ(began, driver == OVERLAP_DRIVER_URING ? 1 : 0);
    if (began) CHECK_EQ(overlap_port_batch_begin(port), 0); /* one per thread and port */
    overlap_stats s0, s1;
    CHECK_OK(overlap_engine_stats(engine, &s0));
    for (int i = 0; i < 4; i++) CHECK_OK(overlap_port_read(port, f, r[i], BS, (uint64_t)i * BS, 700 + i));
    CHECK_OK(overlap_engine_stats(engine, &s1));
    if (began) CHECK_EQ(s1.submit_syscalls, s0.submit_syscalls); /* queued, not entered */
    CHECK_OK(overlap_port_flush(port));
    CHECK_EQ(overlap_port_batch_end(port), began);
    reap(port, c, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(find(c, 4, 700 + i)->result, BS);
        check_fill(r[i], BS, (uint8_t)(10 + i));
    }

    /* A registered file: its reads go by the kernel's table (counted), and
     * closing the file ends the registration; registering a closed file is
     * -EBADF. */
    CHECK_ERR(overlap_port_register_file(NULL, f), EINVAL);
    CHECK_ERR(overlap_port_register_file(port, NULL), EINVAL);
    int32_t reg = overlap_port_register_file(port, f);
    CHECK_EQ(reg, driver == OVERLAP_DRIVER_URING ? 1 : 0);
    CHECK_EQ(overlap_port_register_file(port, f), reg);
    for (int i = 0; i < 4; i++) CHECK_OK(overlap_port_read(port, f, r[i], BS, (uint64_t)i * BS, 800 + i));
    reap(port, c, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(find(c, 4, 800 + i)->result, BS);
        check_fill(r[i], BS, (uint8_t)(10 + i));
    }

    /* Registered memory: reads into it (READ_FIXED on io_uring) fill it. */
    CHECK_ERR(overlap_port_register_memory(NULL, r[0], BS), EINVAL);
    CHECK_ERR(overlap_port_register_memory(port, NULL, BS), EINVAL);
    uint8_t *pool = NULL;
    CHECK_EQ(posix_memalign((void **)&pool, 4096, 4 * BS), 0);
    memset(pool, 0, 4 * BS);
    if (driver == OVERLAP_DRIVER_URING) CHECK_ERR(overlap_port_register_memory(port, pool, 0), EINVAL);
    int32_t mem = overlap_port_register_memory(port, pool, 4 * BS);
    CHECK_EQ(mem, driver == OVERLAP_DRIVER_URING ? 1 : 0);
    CHECK_EQ(overlap_port_register_memory(port, pool, 4 * BS), mem);
    for (int i = 0; i < 4; i++)
        CHECK_OK(overlap_port_read(port, f, pool + (size_t)i * BS, BS, (uint64_t)i * BS, 900 + i));
    reap(port, c, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(find(c, 4, 900 + i)->result, BS);
        check_fill(pool + (size_t)i * BS, BS, (uint8_t)(10 + i));
    }

    CHECK_EQ(overlap_port_outstanding(port), 0);
    overlap_file *g2 = NULL;
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_READ, 0, &g2));
    CHECK_OK(overlap_file_close(g2));
    CHECK_ERR(overlap_port_register_file(port, g2), driver == OVERLAP_DRIVER_URING ? EBADF : 0);
    overlap_file_free(g2);
    overlap_port_free(port);
    aligned_free(pool); /* after the port: the memory rule */
    overlap_file_free(f);
    unlink(path);
}

/* Backpressure: completions hold the budget until reaped; a NONBLOCK port
 * says -EAGAIN and a batch stops where the budget ends. */
static void test_backpressure(void) {
    overlap_engine_options o;
    overlap_engine_options_init(&o);
    o.max_inflight_ops = 4;
    overlap_engine *e = test_engine(&o);
    char path[512];
    test_path(path, sizeof path, "budget");
    overlap_file *f = NULL;
    CHECK_OK(overlap_file_open(e, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0644, &f));
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(e, OVERLAP_PORT_NONBLOCK, &port));
    static uint8_t w[BS];
    overlap_op ops[6];
    memset(ops, 0, sizeof ops);
    for (int i = 0; i < 6; i++) {
        ops[i].opcode = OVERLAP_OP_WRITE;
        ops[i].file = f;
        ops[i].buf = w;
        ops[i].len = 512;
        ops[i].offset = (uint64_t)i * 512;
        ops[i].user_data = (uint64_t)i;
    }
    CHECK_EQ(overlap_port_submit(port, ops, 6), 4);
    CHECK_ERR(overlap_port_submit(port, ops + 4, 2), EAGAIN);
    CHECK_ERR(overlap_port_write(port, f, w, 512, 0, 9), EAGAIN);
    CHECK_ERR(overlap_port_fsync(port, f, 9), EAGAIN);
    CHECK_ERR(overlap_port_post(port, 9, 0), EAGAIN);
    overlap_completion c[8];
    reap(port, c, 4);
    CHECK_EQ(overlap_port_submit(port, ops + 4, 2), 2);
    reap(port, c, 2);
    overlap_stats s;
    CHECK_OK(overlap_engine_stats(e, &s));
    CHECK(s.submitted >= 6);
    CHECK(s.bytes_written >= 6 * 512);
    CHECK(s.inflight_ops_high_water <= 4);
    overlap_port_free(port);
    overlap_file_free(f);
    overlap_engine_free(e);
    unlink(path);
}

#if !defined(_WIN32) /* a pipe for a read that waits: Linux's */
static int make_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

/* The buffer rule under cancellation: after the completion, the kernel
 * never writes into the buffer of a cancelled read. */
static void test_cancel(void) {
    overlap_port *plain = NULL;
    CHECK_OK(overlap_port_create(engine, 0, &plain));
    CHECK_ERR(overlap_port_cancel(plain, 77), EOPNOTSUPP);
    overlap_port_free(plain);
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(engine, OVERLAP_PORT_CANCEL, &port));
    int fds[2];
    CHECK_OK(make_pipe(fds));
    overlap_file *rf = NULL;
    CHECK_OK(overlap_file_adopt(engine, fds[0], &rf));
    uint8_t *buf = malloc(64);
    memset(buf, 0xAB, 64);
    CHECK_OK(overlap_port_read(port, rf, buf, 64, 0, 77));
    usleep(50 * 1000);
    CHECK_EQ(overlap_port_cancel(port, 12345), 0);
    int64_t asked = overlap_port_cancel(port, 77);
    overlap_completion c;
    if (driver == OVERLAP_DRIVER_URING) {
        CHECK_EQ(asked, 1);
        reap(port, &c, 1);
        CHECK_EQ(c.user_data, 77);
        CHECK_EQ(c.result, -ECANCELED);
        /* The completion is reaped: the buffer is ours; a later write to
         * the pipe must not land in it. */
        CHECK_EQ(write(fds[1], "hello", 5), 5);
        usleep(20 * 1000);
        for (int i = 0; i < 64; i++) CHECK_EQ(buf[i], 0xAB);
    } else {
        /* A blocking read on a pool thread cannot be stopped: it completes
         * with its real result when written to. */
        CHECK_EQ(asked, 0);
        CHECK_EQ(overlap_port_wait(port, &c, 0, 1, 0), 0);
        for (int i = 0; i < 64; i++) CHECK_EQ(buf[i], 0xAB);
        CHECK_EQ(write(fds[1], "hello", 5), 5);
        reap(port, &c, 1);
        CHECK_EQ(c.result, 5);
        CHECK(memcmp(buf, "hello", 5) == 0);
    }
    CHECK_EQ(overlap_port_wait(port, &c, 0, 1, 0), 0); /* exactly once */
    free(buf);
    close(fds[1]);
    overlap_file_free(rf);
    overlap_port_free(port);
}
#endif

/* The buffer rule under close and free: operations already submitted
 * complete with their real results; new ones are refused. */
static void test_close_with_operations_in_flight(void) {
    char path[512];
    test_path(path, sizeof path, "close");
    overlap_file *f = NULL;
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0644, &f));
    enum { N = 32 };
    static uint8_t data[N][BS];
    for (int i = 0; i < N; i++) fill(data[i], BS, (uint8_t)i);
    for (int i = 0; i < N; i++) CHECK_EQ(overlap_pwrite(f, data[i], BS, (uint64_t)i * BS), BS);
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(engine, 0, &port));
    uint8_t *bufs = malloc((size_t)N * BS);
    memset(bufs, 0, (size_t)N * BS);
    for (int i = 0; i < N; i++) CHECK_OK(overlap_port_read(port, f, bufs + (size_t)i * BS, BS, (uint64_t)i * BS, (uint64_t)i));
    CHECK_OK(overlap_file_close(f));
    CHECK_ERR(overlap_port_read(port, f, bufs, BS, 0, 99), EBADF);
    CHECK_ERR(overlap_port_fsync(port, f, 99), EBADF);
    overlap_completion c[N];
    reap(port, c, N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(find(c, N, (uint64_t)i)->result, BS);
        check_fill(bufs + (size_t)i * BS, BS, (uint8_t)i);
    }
    overlap_file_free(f);

    /* Freeing the file handle with operations in flight. */
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_READ, 0, &f));
    memset(bufs, 0, (size_t)N * BS);
    for (int i = 0; i < N; i++) CHECK_OK(overlap_port_read(port, f, bufs + (size_t)i * BS, BS, (uint64_t)i * BS, (uint64_t)i));
    overlap_file_free(f);
    reap(port, c, N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(find(c, N, (uint64_t)i)->result, BS);
        check_fill(bufs + (size_t)i * BS, BS, (uint8_t)i);
    }

    /* Freeing the port with operations in flight waits for them: the
     * buffers may be freed right after. */
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_READ, 0, &f));
    for (int i = 0; i < N; i++) CHECK_OK(overlap_port_read(port, f, bufs + (size_t)i * BS, BS, (uint64_t)i * BS, (uint64_t)i));
    CHECK_OK(overlap_port_post(port, 1000, 0));
    overlap_port_free(port);
    free(bufs);
    overlap_file_free(f);
    unlink(path);
}

static void test_null_handles(void) {
    uint8_t b[16];
    overlap_completion c;
    overlap_alignment a;
    overlap_stats s;
    char t[8];
    overlap_op op;
    memset(&op, 0, sizeof op);
    CHECK_ERR(overlap_engine_driver(NULL), EINVAL);
    CHECK(strstr(overlap_last_error(), "NULL") != NULL);
    CHECK_ERR(overlap_engine_driver_text(NULL, t, sizeof t), EINVAL);
    CHECK_ERR(overlap_engine_fallback_reason(NULL, t, sizeof t), EINVAL);
    CHECK_ERR(overlap_engine_stats(NULL, &s), EINVAL);
    CHECK_ERR(overlap_engine_shutdown(NULL), EINVAL);
    CHECK_ERR(overlap_file_open(NULL, "x", OVERLAP_OPEN_READ, 0, NULL), EINVAL);
    CHECK_ERR(overlap_file_adopt(NULL, 0, NULL), EINVAL);
    CHECK_ERR(overlap_file_alignment(NULL, &a), EINVAL);
    CHECK_ERR(overlap_file_fd(NULL), EINVAL);
    CHECK_ERR(overlap_file_close(NULL), EINVAL);
    CHECK_ERR(overlap_pread(NULL, b, 1, 0), EINVAL);
    CHECK_ERR(overlap_pwrite(NULL, b, 1, 0), EINVAL);
    CHECK_ERR(overlap_fsync(NULL), EINVAL);
    CHECK_ERR(overlap_fdatasync(NULL), EINVAL);
    CHECK_ERR(overlap_port_create(NULL, 0, NULL), EINVAL);
    CHECK_ERR(overlap_port_read(NULL, NULL, b, 1, 0, 0), EINVAL);
    CHECK_ERR(overlap_port_write(NULL, NULL, b, 1, 0, 0), EINVAL);
    CHECK_ERR(overlap_port_fsync(NULL, NULL, 0), EINVAL);
    CHECK_ERR(overlap_port_fdatasync(NULL, NULL, 0), EINVAL);
    CHECK_ERR(overlap_port_fallocate(NULL, NULL, 0, 0, 1, 0), EINVAL);
    CHECK_ERR(overlap_port_submit(NULL, &op, 1), EINVAL);
    CHECK_ERR(overlap_port_wait(NULL, &c, 0, 1, 0), EINVAL);
    CHECK_ERR(overlap_port_cancel(NULL, 0), EINVAL);
    CHECK_ERR(overlap_port_post(NULL, 0, 0), EINVAL);
    CHECK_ERR(overlap_port_outstanding(NULL), EINVAL);
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(engine, 0, &port));
    CHECK_ERR(overlap_port_read(port, NULL, b, 1, 0, 0), EINVAL);
    CHECK_ERR(overlap_port_fsync(port, NULL, 0), EINVAL);
    overlap_port_free(port);
    overlap_engine_free(NULL);
    overlap_file_free(NULL);
    overlap_port_free(NULL);
}

static void test_shutdown(void) {
    overlap_engine *e = test_engine(NULL);
    char path[512];
    test_path(path, sizeof path, "shutdown");
    overlap_file *f = NULL;
    CHECK_OK(overlap_file_open(e, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0644, &f));
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(e, 0, &port));
    static uint8_t b[BS];
    fill(b, BS, 3);
    CHECK_OK(overlap_port_write(port, f, b, BS, 0, 1));
    CHECK_OK(overlap_engine_shutdown(e));
    CHECK_OK(overlap_engine_shutdown(e)); /* again: nothing */
    /* The completion of the operation in flight is still there. */
    overlap_completion c;
    reap(port, &c, 1);
    CHECK_EQ(c.result, BS);
    CHECK_ERR(overlap_port_write(port, f, b, BS, 0, 2), ESHUTDOWN);
    CHECK_ERR(overlap_port_post(port, 2, 0), ESHUTDOWN);
    CHECK_ERR(overlap_pread(f, b, BS, 0), ESHUTDOWN);
    /* Nothing new starts: no port, no file; an adopted descriptor that is
     * refused stays the caller's. */
    overlap_port *q = NULL;
    CHECK_ERR(overlap_port_create(e, 0, &q), ESHUTDOWN);
    CHECK(q == NULL);
    overlap_file *g = NULL;
    CHECK_ERR(overlap_file_open(e, path, OVERLAP_OPEN_READ, 0, &g), ESHUTDOWN);
#if !defined(_WIN32) /* windows.c: a HANDLE refused at shutdown */
    int mine = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(mine >= 0);
    CHECK_ERR(overlap_file_adopt(e, mine, &g), ESHUTDOWN);
    CHECK(g == NULL);
    CHECK(fcntl(mine, F_GETFD) >= 0);
    close(mine);
#endif
    /* Closing still closes the descriptor, and says so: 0, not an error a
     * caller would retry. */
    int fd = overlap_file_fd(f);
    CHECK(fd >= 0);
    CHECK_OK(overlap_file_close(f));
#if !defined(_WIN32)
    CHECK(fcntl(fd, F_GETFD) < 0);
#endif
    CHECK_ERR(overlap_file_close(f), EBADF);
    /* Statistics still answer. */
    overlap_stats s;
    CHECK_OK(overlap_engine_stats(e, &s));
    CHECK(s.completed >= 1);
    overlap_engine_free(e); /* the file and port still hold it */
    overlap_port_free(port);
    overlap_file_free(f);
    unlink(path);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    test_version_and_errors();
    engine = test_engine(NULL);
    driver = overlap_engine_driver(engine);
    test_engine_calls();
    test_waits_on_caller();
    test_files_and_blocking_calls();
    test_direct_alignment();
    test_port_operations();
    test_backpressure();
#if !defined(_WIN32)
    test_cancel();
#endif
    test_close_with_operations_in_flight();
    test_null_handles();
    test_shutdown();
    overlap_engine_free(engine);
    printf("api: all passed\n");
    return 0;
}
