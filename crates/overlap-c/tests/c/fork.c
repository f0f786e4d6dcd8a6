/* fork() with operations in flight, on the driver OVERLAP_DRIVER names:
 * the child's calls on the parent's handles fail at once with -ECHILD;
 * closing and freeing them in the child (here from an atexit handler, as
 * a library's cleanup does) returns at once, whatever the parent has in
 * flight; the parent's operations complete in the parent, with their
 * data, and its descriptors stay open. */
#include "check.h"

#include <signal.h>
#include <sys/wait.h>

#define BS 4096

static pid_t parent_pid;

/* LeakSanitizer would report, at the child's exit, the memory of the
 * parent's threads (they are not in the child, and the child must leave
 * their engine alone): the child's exit is not checked for leaks. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return getpid() != parent_pid; }

static overlap_engine *engine;
static overlap_file *file, *pipe_file;
static overlap_port *port;

/* Every call on the parent's handles, in the child: -ECHILD, at once. */
static void child_calls(void) {
    static uint8_t b[BS];
    overlap_completion c;
    overlap_stats s;
    overlap_alignment a;
    char t[64];
    overlap_file *g = NULL;
    overlap_port *q = NULL;
    overlap_op op = {OVERLAP_OP_WRITE, 0, file, b, BS, 0, 9};
    double t0 = now_s();
    CHECK_ERR(overlap_engine_driver(engine), ECHILD);
    CHECK(strstr(overlap_last_error(), "forked") != NULL);
    CHECK_ERR(overlap_engine_driver_text(engine, t, sizeof t), ECHILD);
    CHECK_ERR(overlap_engine_fallback_reason(engine, t, sizeof t), ECHILD);
    CHECK_ERR(overlap_engine_stats(engine, &s), ECHILD);
    CHECK_ERR(overlap_file_open(engine, "/dev/null", OVERLAP_OPEN_READ, 0, &g), ECHILD);
    CHECK_ERR(overlap_file_adopt(engine, 0, &g), ECHILD);
    CHECK(g == NULL);
    CHECK_ERR(overlap_port_create(engine, 0, &q), ECHILD);
    CHECK(q == NULL);
    CHECK_ERR(overlap_pwrite(file, b, BS, 0), ECHILD);
    CHECK_ERR(overlap_pread(file, b, BS, 0), ECHILD);
    CHECK_ERR(overlap_pread_cached(file, b, BS, 0), ECHILD);
    CHECK_ERR(overlap_fsync(file), ECHILD);
    CHECK_ERR(overlap_fdatasync(file), ECHILD);
    CHECK_ERR(overlap_file_alignment(file, &a), ECHILD);
    CHECK_ERR(overlap_file_fd(file), ECHILD);
    CHECK_ERR(overlap_port_read(port, file, b, BS, 0, 9), ECHILD);
    CHECK_ERR(overlap_port_write(port, file, b, BS, 0, 9), ECHILD);
    CHECK_ERR(overlap_port_fsync(port, file, 9), ECHILD);
    CHECK_ERR(overlap_port_fdatasync(port, file, 9), ECHILD);
    CHECK_ERR(overlap_port_fallocate(port, file, 0, 0, BS, 9), ECHILD);
    CHECK_ERR(overlap_port_submit(port, &op, 1), ECHILD);
    CHECK_ERR(overlap_port_wait(port, &c, 1, 1, 5000000000LL), ECHILD);
    CHECK_ERR(overlap_port_outstanding(port), ECHILD);
    CHECK_ERR(overlap_port_post(port, 9, 0), ECHILD);
    CHECK_ERR(overlap_port_cancel(port, 9), ECHILD);
    CHECK_ERR(overlap_port_flush(port), ECHILD);
    CHECK_ERR(overlap_port_batch_begin(port), ECHILD);
    CHECK_ERR(overlap_port_register_memory(port, b, BS), ECHILD);
    CHECK_ERR(overlap_port_register_file(port, file), ECHILD);
    CHECK_ERR(overlap_engine_shutdown(engine), ECHILD);
    /* At once: no call waited (the wait above would take 5 s; the margin
     * is for a loaded machine). */
    CHECK(now_s() - t0 < 4.0);

#if defined(__SANITIZE_ADDRESS__)
    /* Not under GCC's AddressSanitizer: its allocator does not take its
     * locks around fork(), so a lock a parent's thread held at the fork
     * stays held in the child, and the new engine's first thread waits for
     * it for ever (glibc's malloc takes its locks around fork). */
    return;
#endif
    /* A new engine in the child works. */
    overlap_engine *mine = test_engine(NULL);
    char path[512];
    test_path(path, sizeof path, "fork-child");
    CHECK_OK(overlap_file_open(mine, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0644, &g));
    memset(b, 5, BS);
    CHECK_EQ(overlap_pwrite(g, b, BS, 0), BS);
    CHECK_OK(overlap_file_close(g));
    overlap_file_free(g);
    overlap_engine_free(mine);
    unlink(path);
}

/* The child's cleanup at exit: closes and frees the parent's handles,
 * with the parent's pipe read still in flight. Every call returns. */
static void child_cleanup(void) {
    if (getpid() == parent_pid) return;
    CHECK_OK(overlap_file_close(pipe_file));
    /* With its message, though exit() already ran the thread's
     * thread-local destructors. */
    CHECK_ERR(overlap_file_close(pipe_file), EBADF);
    CHECK_OK(overlap_file_close(file));
    overlap_port_free(port);
    overlap_file_free(pipe_file);
    overlap_file_free(file);
    overlap_engine_free(engine);
    printf("fork: child's cleanup returned\n");
}

/* In the parent, once the child is gone: its operations complete, with
 * their data, and its descriptors are open. */
static void parent_after_child(int pipe_w, const uint8_t *got, uint8_t (*data)[BS]) {
    /* The parent's operations complete in the parent, with their data. */
    CHECK_EQ(write(pipe_w, "from the parent", 15), 15);
    overlap_completion c[9];
    size_t n = 0;
    double t0 = now_s();
    while (n < 9) {
        int64_t r = overlap_port_wait(port, c + n, 1, 9 - n, 1000000000LL);
        CHECK(r >= 0);
        n += (size_t)r;
        CHECK(now_s() - t0 < 10.0);
    }
    for (size_t i = 0; i < 9; i++) {
        if (c[i].user_data == 100) {
            CHECK_EQ(c[i].result, 15);
            CHECK(memcmp(got, "from the parent", 15) == 0);
        } else {
            CHECK_EQ(c[i].result, BS);
        }
    }
    /* The child's close did not close the parent's descriptors. */
    static uint8_t r[BS];
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(overlap_pread(file, r, BS, (uint64_t)i * BS), BS);
        CHECK(memcmp(r, data[i], BS) == 0);
    }
    CHECK(overlap_file_fd(pipe_file) >= 0);
    CHECK_OK(overlap_file_close(file));
    CHECK_OK(overlap_file_close(pipe_file));
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    parent_pid = getpid();
    engine = test_engine(NULL);
    char path[512];
    test_path(path, sizeof path, "fork");
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE, 0644, &file));
    int p[2];
    CHECK_OK(pipe2(p, O_CLOEXEC));
    CHECK_OK(overlap_file_adopt(engine, p[0], &pipe_file));
    CHECK_OK(overlap_port_create(engine, 0, &port));
    /* In flight at the fork, on every driver: a read of an empty pipe
     * (it completes when the parent writes to it) and file writes. */
    static uint8_t got[16], data[8][BS];
    CHECK_OK(overlap_port_read(port, pipe_file, got, sizeof got, 0, 100));
    for (int i = 0; i < 8; i++) {
        memset(data[i], 'a' + i, BS);
        CHECK_OK(overlap_port_write(port, file, data[i], BS, (uint64_t)i * BS, (uint64_t)i));
    }
    CHECK(atexit(child_cleanup) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        child_calls();
        exit(0); /* runs child_cleanup */
    }
    int st = 0;
    double t0 = now_s();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_s() - t0 > 10.0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fprintf(stderr, "fork: the child hung (killed after 10 s)\n");
            return 1;
        }
        usleep(10000);
    }
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
    parent_after_child(p[1], got, data);
    close(p[1]);
    overlap_port_free(port);
    overlap_file_free(pipe_file);
    overlap_file_free(file);
    overlap_engine_free(engine);
    unlink(path);
    printf("fork: all passed\n");
    return 0;
}
