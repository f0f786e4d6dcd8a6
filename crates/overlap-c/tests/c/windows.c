/* liboverlap on Windows, on the driver OVERLAP_DRIVER names (iocp or
 * pool): files opened by path and adopted as HANDLEs, the blocking calls,
 * a port's reads, writes, syncs and posted completions, Win32 errors as
 * the C runtime's errno with overlap_last_os_error() giving the Win32
 * code, and shutdown. Built with tests/windows.sh. */
#include "check.h"

#include <windows.h>

#define BS 4096

static overlap_engine *engine;

static void fill(uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(seed + i * 7);
}

static void check_fill(const uint8_t *p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) CHECK_EQ(p[i], (uint8_t)(seed + i * 7));
}

/* Waits for exactly n completions (10 s at most). */
static void reap(overlap_port *port, overlap_completion *out, size_t n) {
    size_t got = 0;
    while (got < n) {
        int64_t r = overlap_port_wait(port, out + got, 1, n - got, 10LL * 1000 * 1000 * 1000);
        CHECK(r > 0);
        got += (size_t)r;
    }
    CHECK_EQ(overlap_port_wait(port, out, 0, 1, 0), 0);
}

static const overlap_completion *find(const overlap_completion *c, size_t n, uint64_t key) {
    for (size_t i = 0; i < n; i++)
        if (c[i].user_data == key) return &c[i];
    fprintf(stderr, "no completion with user data %" PRIu64 "\n", key);
    exit(1);
}

static void test_driver(void) {
    int32_t d = overlap_engine_driver(engine);
    int32_t want = wanted_driver();
    CHECK_EQ(d, want == OVERLAP_DRIVER_AUTO ? OVERLAP_DRIVER_IOCP : want);
    char text[256];
    CHECK(overlap_engine_driver_text(engine, text, sizeof text) > 0);
    printf("driver: %s\n", text);
    /* io_uring and Linux AIO are Linux's: refused with -EOPNOTSUPP. */
    overlap_engine_options o;
    overlap_engine_options_init(&o);
    o.driver = OVERLAP_DRIVER_URING;
    overlap_engine *e = NULL;
    CHECK_ERR(overlap_engine_create(&o, &e), EOPNOTSUPP);
    CHECK(e == NULL);
}

static void test_errors(void) {
    char path[512];
    test_path(path, sizeof path, "win-errors");
    overlap_file *f = NULL;
    /* ERROR_FILE_NOT_FOUND or ERROR_PATH_NOT_FOUND -> ENOENT. */
    CHECK_ERR(overlap_file_open(engine, "Z:\\no\\such\\dir\\file", OVERLAP_OPEN_READ, 0, &f), ENOENT);
    CHECK(overlap_last_os_error() == ERROR_PATH_NOT_FOUND || overlap_last_os_error() == ERROR_FILE_NOT_FOUND);
    CHECK_ERR(overlap_file_open(engine, path, OVERLAP_OPEN_READ, 0, &f), ENOENT);
    CHECK_EQ(overlap_last_os_error(), ERROR_FILE_NOT_FOUND);
    CHECK(strstr(overlap_last_error(), "os error 2") != NULL);
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0, &f));
    overlap_file *g = NULL;
    /* ERROR_FILE_EXISTS -> EEXIST. */
    CHECK_ERR(overlap_file_open(engine, path, OVERLAP_OPEN_WRITE | OVERLAP_OPEN_EXCLUSIVE, 0, &g), EEXIST);
    CHECK_EQ(overlap_last_os_error(), ERROR_FILE_EXISTS);
    /* The library's own refusals carry no Win32 code. */
    CHECK_ERR(overlap_file_open(engine, path, 0, 0, &g), EINVAL);
    CHECK_EQ(overlap_last_os_error(), 0);
    /* A file open only for writing cannot be read: -EBADF. */
    uint8_t b[16];
    CHECK_ERR(overlap_pread(f, b, sizeof b, 0), EBADF);
    /* A C runtime descriptor cannot be adopted: a HANDLE can. */
    CHECK_ERR(overlap_file_adopt(engine, 0, &g), EOPNOTSUPP);
    CHECK_OK(overlap_file_close(f));
    CHECK_ERR(overlap_file_close(f), EBADF);
    void *h = NULL;
    CHECK_ERR(overlap_file_handle(f, &h), EBADF);
    CHECK(h == INVALID_HANDLE_VALUE);
    overlap_file_free(f);
    /* A handle of the caller's without sharing: ERROR_SHARING_VIOLATION -> EACCES. */
    HANDLE mine = CreateFileA(path, GENERIC_READ, 0, NULL, OPEN_EXISTING, 0, NULL);
    CHECK(mine != INVALID_HANDLE_VALUE);
    CHECK_ERR(overlap_file_open(engine, path, OVERLAP_OPEN_READ, 0, &g), EACCES);
    CHECK_EQ(overlap_last_os_error(), ERROR_SHARING_VIOLATION);
    CHECK(CloseHandle(mine));
    CHECK(DeleteFileA(path));
}

static void test_blocking_calls(void) {
    char path[512];
    test_path(path, sizeof path, "win-files");
    overlap_file *f = NULL;
    CHECK_OK(overlap_file_open(engine, path,
                               OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE | OVERLAP_OPEN_TRUNCATE,
                               0, &f));
    uint8_t w[3 * BS], r[3 * BS];
    fill(w, sizeof w, 1);
    CHECK_EQ(overlap_pwrite(f, w, sizeof w, 0), sizeof w);
    CHECK_OK(overlap_fsync(f));
    memset(r, 0, sizeof r);
    CHECK_EQ(overlap_pread(f, r, sizeof r, 0), sizeof r);
    check_fill(r, sizeof r, 1);
    /* Near and past the end: a short count, then 0 (ERROR_HANDLE_EOF). */
    CHECK_EQ(overlap_pread(f, r, BS, 2 * BS + 100), BS - 100);
    CHECK_EQ(overlap_pread(f, r, BS, 10 * BS), 0);
    /* The file's HANDLE sees the same file. */
    void *h = NULL;
    CHECK_OK(overlap_file_handle(f, &h));
    LARGE_INTEGER size;
    CHECK(GetFileSizeEx((HANDLE)h, &size));
    CHECK_EQ(size.QuadPart, sizeof w);
    CHECK_OK(overlap_file_close(f));
    overlap_file_free(f);
    CHECK(DeleteFileA(path));
}

static HANDLE create(const char *path, DWORD flags) {
    HANDLE h = CreateFileA(path, GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                           NULL, OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL | flags, NULL);
    CHECK(h != INVALID_HANDLE_VALUE);
    return h;
}

static void test_adopt_handle(void) {
    char path[512];
    test_path(path, sizeof path, "win-adopt");
    overlap_file *f = NULL;
    CHECK_ERR(overlap_file_adopt_handle(engine, NULL, &f), EBADF);
    CHECK_ERR(overlap_file_adopt_handle(engine, INVALID_HANDLE_VALUE, &f), EBADF);
    /* A value that names no handle: ERROR_INVALID_HANDLE -> EBADF. */
    CHECK_ERR(overlap_file_adopt_handle(engine, (void *)(intptr_t)0x7ff0, &f), EBADF);
    CHECK_EQ(overlap_last_os_error(), ERROR_INVALID_HANDLE);
    CHECK_ERR(overlap_file_adopt_handle(NULL, NULL, &f), EINVAL);
    /* A handle for synchronous I/O is refused (the engine's I/O is
     * overlapped), with a message saying what to change; it stays the
     * caller's, open. */
    HANDLE sync = create(path, 0);
    CHECK_ERR(overlap_file_adopt_handle(engine, sync, &f), EINVAL);
    CHECK(strstr(overlap_last_error(), "FILE_FLAG_OVERLAPPED") != NULL);
    CHECK(f == NULL);
    DWORD info = 0;
    CHECK(GetHandleInformation(sync, &info));
    /* An overlapped one is the engine's from now on. */
    HANDLE h = create(path, FILE_FLAG_OVERLAPPED);
    CHECK_ERR(overlap_file_adopt_handle(engine, h, NULL), EINVAL);
    CHECK_OK(overlap_file_adopt_handle(engine, h, &f));
    /* The engine keeps a duplicate; the caller's handle is closed. */
    void *back = NULL;
    CHECK_OK(overlap_file_handle(f, &back));
    CHECK(back != NULL && back != INVALID_HANDLE_VALUE && back != h);
    CHECK(GetHandleInformation((HANDLE)back, &info));
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(engine, 0, &port));
    uint8_t w[2 * BS], r[2 * BS];
    fill(w, sizeof w, 5);
    CHECK_OK(overlap_port_write(port, f, w, BS, 0, 1));
    CHECK_OK(overlap_port_write(port, f, w + BS, BS, BS, 2));
    overlap_completion c[2];
    reap(port, c, 2);
    CHECK_EQ(find(c, 2, 1)->result, BS);
    CHECK_EQ(find(c, 2, 2)->result, BS);
    /* The synchronous handle reads what the adopted one wrote. */
    DWORD got = 0;
    CHECK(ReadFile(sync, r, sizeof r, &got, NULL));
    CHECK_EQ(got, sizeof r);
    check_fill(r, sizeof r, 5);
    CHECK(CloseHandle(sync));
    overlap_port_free(port);
    CHECK_OK(overlap_file_close(f));
    overlap_file_free(f);
    CHECK(DeleteFileA(path));
}

/* A handle opened for synchronous I/O, as fopen and CreateFile's default
 * make it: adopted with overlap_file_adopt_synchronous_handle(), its reads
 * and writes run as blocking calls on the pool, with their offsets. */
static void test_adopt_synchronous_handle(void) {
    char path[512];
    test_path(path, sizeof path, "win-adopt-sync");
    overlap_file *f = NULL;
    CHECK_ERR(overlap_file_adopt_synchronous_handle(engine, NULL, &f), EBADF);
    CHECK_ERR(overlap_file_adopt_synchronous_handle(engine, INVALID_HANDLE_VALUE, &f), EBADF);
    HANDLE sync = create(path, 0);
    CHECK_ERR(overlap_file_adopt_synchronous_handle(engine, sync, NULL), EINVAL);
    DWORD info = 0;
    CHECK(GetHandleInformation(sync, &info)); /* still the caller's */
    CHECK_OK(overlap_file_adopt_synchronous_handle(engine, sync, &f));
    CHECK(!GetHandleInformation(sync, &info)); /* closed: the engine has a duplicate */
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(engine, 0, &port));
    enum { N = 8 };
    static uint8_t w[N][BS], r[N][BS];
    for (int i = 0; i < N; i++) {
        fill(w[i], BS, (uint8_t)(40 + i));
        CHECK_OK(overlap_port_write(port, f, w[i], BS, (uint64_t)(N - 1 - i) * BS, 200 + i));
    }
    overlap_completion c[N];
    reap(port, c, N);
    for (int i = 0; i < N; i++) CHECK_EQ(find(c, N, 200 + i)->result, BS);
    for (int i = 0; i < N; i++) CHECK_OK(overlap_port_read(port, f, r[i], BS, (uint64_t)(N - 1 - i) * BS, 300 + i));
    reap(port, c, N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(find(c, N, 300 + i)->result, BS);
        check_fill(r[i], BS, (uint8_t)(40 + i));
    }
    overlap_port_free(port);
    CHECK_OK(overlap_file_close(f));
    overlap_file_free(f);
    CHECK(DeleteFileA(path));
}

static void test_port(void) {
    char path[512];
    test_path(path, sizeof path, "win-port");
    overlap_file *f = NULL;
    CHECK_OK(overlap_file_open(engine, path,
                               OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE | OVERLAP_OPEN_TRUNCATE,
                               0, &f));
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(engine, 0, &port));
    enum { N = 16 };
    static uint8_t w[N][BS], r[N][BS];
    for (int i = 0; i < N; i++) {
        fill(w[i], BS, (uint8_t)i);
        CHECK_OK(overlap_port_write(port, f, w[i], BS, (uint64_t)i * BS, 100 + i));
    }
    overlap_completion c[N + 1];
    reap(port, c, N);
    for (int i = 0; i < N; i++) CHECK_EQ(find(c, N, 100 + i)->result, BS);
    CHECK_OK(overlap_port_fsync(port, f, 7));
    CHECK_OK(overlap_port_post(port, 8, -EINTR));
    reap(port, c, 2);
    CHECK_EQ(find(c, 2, 7)->result, 0);
    CHECK_EQ(find(c, 2, 8)->result, -EINTR);
    CHECK(find(c, 2, 8)->flags & OVERLAP_COMPLETION_POSTED);
    for (int i = 0; i < N; i++) CHECK_OK(overlap_port_read(port, f, r[i], BS, (uint64_t)i * BS, 200 + i));
    /* One read past the end: 0 bytes. */
    uint8_t tail[BS];
    CHECK_OK(overlap_port_read(port, f, tail, BS, (uint64_t)N * BS, 300));
    reap(port, c, N + 1);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(find(c, N + 1, 200 + i)->result, BS);
        check_fill(r[i], BS, (uint8_t)i);
    }
    CHECK_EQ(find(c, N + 1, 300)->result, 0);
    overlap_stats st;
    CHECK_OK(overlap_engine_stats(engine, &st));
    CHECK(st.bytes_written >= (uint64_t)N * BS && st.bytes_read >= (uint64_t)N * BS);
    CHECK_EQ(overlap_port_outstanding(port), 0);
    overlap_port_free(port);
    CHECK_OK(overlap_file_close(f));
    overlap_file_free(f);
    CHECK(DeleteFileA(path));
}

/* The buffer rule under cancellation, on a named pipe's client end (a
 * read that waits until the other end writes). The engine's ports stop
 * operations on io_uring only: on IOCP, as on the pool, overlap_port_cancel()
 * asks none (0) and the read completes with its real result once the
 * other end writes, into its buffer, never before. */
static void test_cancel(void) {
    char name[128];
    snprintf(name, sizeof name, "\\\\.\\pipe\\overlap-test-%lu", GetCurrentProcessId());
    HANDLE server = CreateNamedPipeA(name, PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED,
                                     PIPE_TYPE_BYTE | PIPE_WAIT, 1, 4096, 4096, 0, NULL);
    CHECK(server != INVALID_HANDLE_VALUE);
    HANDLE client = CreateFileA(name, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING,
                                FILE_FLAG_OVERLAPPED, NULL);
    CHECK(client != INVALID_HANDLE_VALUE);
    overlap_file *rf = NULL;
    CHECK_OK(overlap_file_adopt_handle(engine, client, &rf));
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(engine, OVERLAP_PORT_CANCEL, &port));
    uint8_t *buf = malloc(64);
    CHECK(buf != NULL);
    memset(buf, 0xAB, 64);
    CHECK_OK(overlap_port_read(port, rf, buf, 64, 0, 77));
    Sleep(50);
    CHECK_EQ(overlap_port_cancel(port, 12345), 0);
    int64_t asked = overlap_port_cancel(port, 77);
    overlap_completion c;
    OVERLAPPED o;
    memset(&o, 0, sizeof o);
    o.hEvent = CreateEventA(NULL, TRUE, FALSE, NULL);
    DWORD n = 0;
    uint64_t key = 77;
    if (overlap_engine_driver(engine) == OVERLAP_DRIVER_IOCP) {
        /* CancelIoEx stops the read: it completes once, cancelled, with
         * the buffer untouched; the next read gets the data. */
        CHECK_EQ(asked, 1);
        reap(port, &c, 1);
        CHECK_EQ(c.user_data, 77);
        CHECK_EQ(c.result, -ECANCELED);
        CHECK_OK(overlap_port_read(port, rf, buf, 64, 0, 78));
        key = 78;
    } else {
        /* A pool thread in ReadFile cannot be stopped. */
        CHECK_EQ(asked, 0);
    }
    CHECK_EQ(overlap_port_wait(port, &c, 0, 1, 0), 0);
    for (int i = 0; i < 64; i++) CHECK_EQ(buf[i], 0xAB);
    CHECK(WriteFile(server, "hello", 5, NULL, &o) || GetLastError() == ERROR_IO_PENDING);
    CHECK(GetOverlappedResult(server, &o, &n, TRUE) && n == 5);
    reap(port, &c, 1);
    CHECK_EQ(c.user_data, key);
    CHECK_EQ(c.result, 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    CHECK_EQ(overlap_port_wait(port, &c, 0, 1, 0), 0); /* exactly once */
    CloseHandle(o.hEvent);
    free(buf);
    overlap_port_free(port);
    CHECK_OK(overlap_file_close(rf));
    overlap_file_free(rf);
    CHECK(CloseHandle(server));
}

static void test_shutdown(void) {
    overlap_engine *e = test_engine(NULL);
    char path[512];
    test_path(path, sizeof path, "win-shutdown");
    overlap_file *f = NULL;
    CHECK_OK(overlap_file_open(e, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0, &f));
    overlap_port *port = NULL;
    CHECK_OK(overlap_port_create(e, 0, &port));
    uint8_t w[BS];
    fill(w, BS, 3);
    CHECK_OK(overlap_port_write(port, f, w, BS, 0, 1));
    CHECK_OK(overlap_engine_shutdown(e));
    /* The write was in flight: its completion stays to be reaped. */
    overlap_completion c;
    reap(port, &c, 1);
    CHECK_EQ(c.result, BS);
    CHECK_ERR(overlap_port_write(port, f, w, BS, 0, 2), ESHUTDOWN);
    CHECK_EQ(overlap_last_os_error(), 0);
    overlap_file *g = NULL;
    CHECK_ERR(overlap_file_open(e, path, OVERLAP_OPEN_READ, 0, &g), ESHUTDOWN);
    HANDLE h = create(path, FILE_FLAG_OVERLAPPED);
    CHECK_ERR(overlap_file_adopt_handle(e, h, &g), ESHUTDOWN);
    CHECK(CloseHandle(h)); /* refused: still the caller's, open */
    CHECK_OK(overlap_file_close(f));
    overlap_file_free(f);
    overlap_port_free(port);
    overlap_engine_free(e);
    CHECK(DeleteFileA(path));
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    engine = test_engine(NULL);
    test_driver();
    test_errors();
    test_blocking_calls();
    test_adopt_handle();
    test_adopt_synchronous_handle();
    test_port();
    test_cancel();
    test_shutdown();
    overlap_engine_free(engine);
    printf("windows: all passed\n");
    return 0;
}
