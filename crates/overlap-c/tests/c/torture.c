/* The acknowledged-byte torture suite for liboverlap
 * (docs/acknowledged-bytes.md, section 6), on the driver OVERLAP_DRIVER
 * names. Prints one line per scenario:
 *
 *   torture: c DRIVER SCENARIO ok | FAIL: why | SKIPPED: why
 *
 * and exits 1 if any failed. A scenario that hangs is a failure: an alarm
 * prints its FAIL line and ends the program. Acknowledged means: the
 * completion's result (or a blocking call's return) is >= 0. */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/stat.h>
#if !defined(_WIN32)
#include <sys/wait.h>
#endif

#define BS 4096
#define HANG_LIMIT_S 60

static const char *driver_name = "?";
static const char *scenario = "?";
static char why[512];
static pid_t main_pid;

/* See fork.c: the forked child's exit is not checked for leaks (the
 * memory of the parent's threads is not the child's to free). */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return getpid() != main_pid; }

/* Records why the scenario failed and returns -1 from it. */
#define T_CHECK(cond, ...)                                                        \
    do {                                                                          \
        if (!(cond)) {                                                            \
            int n_ = snprintf(why, sizeof why, "%s:%d: ", __FILE__, __LINE__);    \
            snprintf(why + n_, sizeof why - (size_t)n_, __VA_ARGS__);             \
            return -1;                                                            \
        }                                                                         \
    } while (0)

#if defined(_WIN32)
/* No SIGALRM: tests/windows.sh bounds the run (timeout). */
#define alarm(s) ((void)(s))
#else
static void on_alarm(int sig) {
    (void)sig;
    char line[256];
    int n = snprintf(line, sizeof line, "torture: c %s %s FAIL: no result after %d s (hung)\n",
                     driver_name, scenario, HANG_LIMIT_S);
    if (write(1, line, (size_t)n) < 0) _exit(1);
    _exit(1);
}
#endif

static uint8_t pattern(uint64_t block, size_t i) { return (uint8_t)(block * 31 + i * 7 + 1); }

static void fill_block(uint8_t *p, uint64_t block) {
    for (size_t i = 0; i < BS; i++) p[i] = pattern(block, i);
}

static int block_is(const uint8_t *p, uint64_t block) {
    for (size_t i = 0; i < BS; i++)
        if (p[i] != pattern(block, i)) return 0;
    return 1;
}

/* Reads block `b` of `path` with a plain descriptor (what a later reader
 * of the file sees); 1 if it holds the block's pattern. */
static int on_disk(const char *path, uint64_t b) {
    static uint8_t r[BS];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = pread(fd, r, BS, (off_t)(b * BS));
    close(fd);
    return n == BS && block_is(r, b);
}

static overlap_engine *new_engine(void) {
    overlap_engine *e = NULL;
    return overlap_engine_create(NULL, &e) == 0 ? e : NULL;
}

static overlap_file *open_rw(overlap_engine *e, const char *path, uint32_t extra) {
    overlap_file *f = NULL;
    uint32_t fl = OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE | OVERLAP_OPEN_TRUNCATE;
    return overlap_file_open(e, path, fl | extra, 0644, &f) == 0 ? f : NULL;
}

/* Takes exactly n completions (10 s at most); -1 on error or time out. */
static int reap(overlap_port *port, overlap_completion *out, size_t n) {
    size_t got = 0;
    double t0 = now_s();
    while (got < n) {
        int64_t r = overlap_port_wait(port, out + got, 1, n - got, 100000000LL);
        if (r < 0) return -1;
        got += (size_t)r;
        if (now_s() - t0 > 10.0) return -1;
    }
    return 0;
}

/* ---- drop-behind: close, port free, engine free with writes in flight -- */

enum { DROP_N = 64 };

/* Submits DROP_N block writes; how = 0: close the file, then reap (each
 * acknowledged block must be in the file); 1: free the port without
 * reaping; 2: free the engine, then the port and the file. */
static int drop_one(int how) {
    char path[512];
    test_path(path, sizeof path, "torture-drop");
    overlap_engine *e = new_engine();
    T_CHECK(e, "engine: %s", overlap_last_error());
    overlap_file *f = open_rw(e, path, 0);
    T_CHECK(f, "open: %s", overlap_last_error());
    overlap_port *port = NULL;
    T_CHECK(overlap_port_create(e, 0, &port) == 0, "port: %s", overlap_last_error());
    uint8_t *bufs = malloc((size_t)DROP_N * BS);
    T_CHECK(bufs, "out of memory");
    for (uint64_t b = 0; b < DROP_N; b++) {
        fill_block(bufs + b * BS, b);
        T_CHECK(overlap_port_write(port, f, bufs + b * BS, BS, b * BS, b) == 0, "write %d: %s",
                (int)b, overlap_last_error());
    }
    int acked = DROP_N;
    if (how == 0) {
        int32_t rc = overlap_file_close(f);
        T_CHECK(rc == 0, "close with writes in flight: %d (%s)", rc, overlap_last_error());
        overlap_completion c[DROP_N];
        T_CHECK(reap(port, c, DROP_N) == 0, "reaping after close: %s", overlap_last_error());
        acked = 0;
        for (int i = 0; i < DROP_N; i++) {
            if (c[i].result == BS) {
                acked++;
                T_CHECK(on_disk(path, c[i].user_data), "acknowledged block %d is not in the file",
                        (int)c[i].user_data);
            } else {
                T_CHECK(c[i].result < 0, "block %d: short write %d", (int)c[i].user_data,
                        (int)c[i].result);
            }
        }
        overlap_port_free(port);
        overlap_file_free(f);
        overlap_engine_free(e);
    } else if (how == 1) {
        overlap_port_free(port); /* waits for the writes */
        overlap_file_free(f);
        overlap_engine_free(e);
    } else {
        overlap_engine_free(e); /* the file and the port hold it */
        overlap_port_free(port);
        overlap_file_free(f);
    }
    free(bufs);
    if (how != 0) {
        /* No completion was taken, so none was acknowledged; the writes were
         * still made, and the port's free waited for them: all are there. */
        for (uint64_t b = 0; b < DROP_N; b++)
            T_CHECK(on_disk(path, b), "block %d written before the %s is missing", (int)b,
                    how == 1 ? "port's free" : "engine's free");
    }
    T_CHECK(acked > 0, "no write was acknowledged");
    unlink(path);
    return 0;
}

static int drop_behind(void) {
    for (int how = 0; how < 3; how++)
        if (drop_one(how) < 0) return -1;
    return 0;
}

/* ---- shared-writers: threads writing through one file handle ---------- */

enum { SW_THREADS = 8, SW_EACH = 48, SW_REC = 256 };

struct sw {
    overlap_file *pos, *app;
    overlap_port *port;
    int t;
    atomic_int acked;
    char err[256];
};

static void record(uint8_t *r, int t, int s) {
    for (int i = 0; i < SW_REC; i += 4) {
        r[i] = (uint8_t)t;
        r[i + 1] = (uint8_t)s;
        r[i + 2] = 0xA5;
        r[i + 3] = (uint8_t)(t ^ s);
    }
}

static void *sw_thread(void *arg) {
    struct sw *w = arg;
    uint8_t rec[SW_REC];
    for (int s = 0; s < SW_EACH; s++) {
        record(rec, w->t, s);
        uint64_t off = ((uint64_t)w->t * SW_EACH + (uint64_t)s) * SW_REC;
        int64_t n;
        if (s % 2 == 0) {
            n = overlap_pwrite(w->pos, rec, SW_REC, off);
        } else {
            /* Through the thread's own port (a completion taken from a
             * shared one could be another thread's, and this buffer would
             * be reused while its write is in flight). */
            uint64_t key = ((uint64_t)w->t << 32) | (uint64_t)s;
            if (overlap_port_write(w->port, w->pos, rec, SW_REC, off, key) != 0) {
                snprintf(w->err, sizeof w->err, "port write: %s", overlap_last_error());
                return NULL;
            }
            overlap_completion c;
            if (reap(w->port, &c, 1) < 0) {
                snprintf(w->err, sizeof w->err, "reaping: %s", overlap_last_error());
                return NULL;
            }
            n = c.user_data == key ? c.result : -1;
        }
        if (n != SW_REC) {
            snprintf(w->err, sizeof w->err, "positional write returned %lld", (long long)n);
            return NULL;
        }
        n = overlap_pwrite(w->app, rec, SW_REC, 0); /* O_APPEND: at the end */
        if (n != SW_REC) {
            snprintf(w->err, sizeof w->err, "append returned %lld", (long long)n);
            return NULL;
        }
        atomic_fetch_add(&w->acked, 1);
    }
    return NULL;
}

/* Every record of `path` once, untorn, nothing else; `positional`: at its
 * own offset. */
static int sw_verify(const char *path, int positional) {
    int total = SW_THREADS * SW_EACH;
    struct stat st;
    T_CHECK(stat(path, &st) == 0 && st.st_size == (off_t)total * SW_REC,
            "%s is %lld bytes, expected %d", positional ? "positional file" : "append file",
            (long long)st.st_size, total * SW_REC);
    uint8_t *all = malloc((size_t)total * SW_REC);
    T_CHECK(all, "out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? pread(fd, all, (size_t)total * SW_REC, 0) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)total * SW_REC) free(all);
    T_CHECK(got == (ssize_t)total * SW_REC, "reading back: %zd", got);
    static uint8_t seen[SW_THREADS][SW_EACH];
    memset(seen, 0, sizeof seen);
    for (int k = 0; k < total; k++) {
        uint8_t *r = all + (size_t)k * SW_REC, want[SW_REC];
        int t = r[0], s = r[1];
        int ok = t < SW_THREADS && s < SW_EACH;
        if (ok) {
            record(want, t, s);
            ok = memcmp(r, want, SW_REC) == 0 && !seen[t][s]++;
            if (positional) ok = ok && k == t * SW_EACH + s;
        }
        if (!ok) free(all);
        T_CHECK(ok, "record %d of the %s file is torn, misplaced or twice", k,
                positional ? "positional" : "append");
    }
    free(all);
    return 0;
}

static int shared_writers(void) {
    char pos[512], app[512];
    test_path(pos, sizeof pos, "torture-sw-pos");
    test_path(app, sizeof app, "torture-sw-app");
    overlap_engine *e = new_engine();
    T_CHECK(e, "engine: %s", overlap_last_error());
    overlap_file *fp = open_rw(e, pos, 0), *fa = NULL;
    T_CHECK(fp, "open: %s", overlap_last_error());
    T_CHECK(overlap_file_open(e, app, OVERLAP_OPEN_WRITE | OVERLAP_OPEN_APPEND | OVERLAP_OPEN_CREATE,
                              0644, &fa) == 0,
            "open append: %s", overlap_last_error());
    static struct sw w[SW_THREADS];
    pthread_t th[SW_THREADS];
    for (int t = 0; t < SW_THREADS; t++) {
        overlap_port *port = NULL;
        T_CHECK(overlap_port_create(e, 0, &port) == 0, "port: %s", overlap_last_error());
        w[t] = (struct sw){.pos = fp, .app = fa, .port = port, .t = t};
        atomic_init(&w[t].acked, 0);
        T_CHECK(pthread_create(&th[t], NULL, sw_thread, &w[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < SW_THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < SW_THREADS; t++)
        T_CHECK(!w[t].err[0] && atomic_load(&w[t].acked) == SW_EACH, "thread %d: %s", t, w[t].err);
    T_CHECK(overlap_file_close(fp) == 0 && overlap_file_close(fa) == 0, "close: %s",
            overlap_last_error());
    for (int t = 0; t < SW_THREADS; t++) overlap_port_free(w[t].port);
    overlap_file_free(fp);
    overlap_file_free(fa);
    overlap_engine_free(e);
    if (sw_verify(pos, 1) < 0) return -1;
    if (under_wine()) {
        /* Wine writes to an append-only handle as "find the end, then
         * write there", not atomically: concurrent appends overwrite one
         * another without the engine too (WriteFile from four threads).
         * Windows appends each write whole. */
        printf("torture: c %s shared-writers: the append file's check SKIPPED under Wine "
               "(its appends from several threads are not atomic)\n", driver_name);
    } else if (sw_verify(app, 0) < 0) {
        return -1;
    }
    unlink(pos);
    unlink(app);
    return 0;
}

/* ---- close-racing-reads ----------------------------------------------- */

enum { CR_READERS = 4, CR_BLOCKS = 64 };
#define SENTINEL 0xEE

struct cr {
    overlap_file *f;
    overlap_engine *e;
    int id;
    int reads, closed;
    char err[256];
};

/* A byte of buf that is not the sentinel, or -1. */
static int changed(const uint8_t *buf) {
    for (int i = 0; i < BS; i++)
        if (buf[i] != SENTINEL) return i;
    return -1;
}

static void *cr_thread(void *arg) {
    struct cr *r = arg;
    overlap_port *port = NULL;
    if (overlap_port_create(r->e, 0, &port) != 0) {
        snprintf(r->err, sizeof r->err, "port: %s", overlap_last_error());
        return NULL;
    }
    uint8_t *buf = aligned_alloc(BS, BS);
    for (uint64_t i = 0;; i++) {
        uint64_t b = (i * 7 + (uint64_t)r->id) % CR_BLOCKS;
        int64_t res;
        memset(buf, SENTINEL, BS);
        if (i % 2 == 0) {
            int32_t s = overlap_port_read(port, r->f, buf, BS, b * BS, b);
            if (s == -EBADF) { r->closed = 1; break; }
            if (s != 0) { snprintf(r->err, sizeof r->err, "submit: %d", s); break; }
            overlap_completion c;
            if (reap(port, &c, 1) < 0) { snprintf(r->err, sizeof r->err, "reap"); break; }
            res = c.result;
        } else {
            res = overlap_pread(r->f, buf, BS, b * BS);
        }
        if (res == -EBADF) { r->closed = 1; break; }
        if (res != BS || !block_is(buf, b)) {
            snprintf(r->err, sizeof r->err, "read of block %d: %lld, data %s", (int)b,
                     (long long)res, res == BS ? "wrong" : "-");
            break;
        }
        r->reads++;
        /* The buffer is the caller's again: reused at once. Nothing may
         * write into it any more. */
        memset(buf, SENTINEL, BS);
        sched_yield();
        int at = changed(buf);
        if (at >= 0) {
            snprintf(r->err, sizeof r->err, "byte %d of a buffer changed after its read reported", at);
            break;
        }
        if (i > 100000) break;
    }
    /* Later: the last buffer is untouched. */
    usleep(20000);
    if (!r->err[0] && changed(buf) >= 0)
        snprintf(r->err, sizeof r->err, "a buffer changed after the last read reported");
    overlap_port_free(port);
    aligned_free(buf);
    return NULL;
}

static int close_racing_reads(void) {
    char path[512];
    test_path(path, sizeof path, "torture-cr");
    overlap_engine *e = new_engine();
    T_CHECK(e, "engine: %s", overlap_last_error());
    overlap_file *f = open_rw(e, path, 0);
    T_CHECK(f, "open: %s", overlap_last_error());
    static uint8_t blk[BS];
    for (uint64_t b = 0; b < CR_BLOCKS; b++) {
        fill_block(blk, b);
        T_CHECK(overlap_pwrite(f, blk, BS, b * BS) == BS, "fill: %s", overlap_last_error());
    }
    for (int round = 0; round < 5; round++) {
        overlap_file *g = NULL;
        T_CHECK(overlap_file_open(e, path, OVERLAP_OPEN_READ, 0, &g) == 0, "open: %s",
                overlap_last_error());
        static struct cr r[CR_READERS];
        pthread_t th[CR_READERS];
        for (int i = 0; i < CR_READERS; i++) {
            r[i] = (struct cr){.f = g, .e = e, .id = i};
            T_CHECK(pthread_create(&th[i], NULL, cr_thread, &r[i]) == 0, "pthread_create");
        }
        usleep(2000 + 3000 * round);
        int32_t rc = overlap_file_close(g);
        for (int i = 0; i < CR_READERS; i++) pthread_join(th[i], NULL);
        T_CHECK(rc == 0, "close: %d (%s)", rc, overlap_last_error());
        for (int i = 0; i < CR_READERS; i++)
            T_CHECK(!r[i].err[0] && r[i].closed, "reader %d: %s", i,
                    r[i].err[0] ? r[i].err : "never saw the close");
        overlap_file_free(g);
    }
    overlap_file_free(f);
    overlap_engine_free(e);
    unlink(path);
    return 0;
}

/* ---- shutdown-in-flight ----------------------------------------------- */

enum { SD_N = 128 };

static int shutdown_in_flight(void) {
    char path[512];
    test_path(path, sizeof path, "torture-sd");
    overlap_engine *e = new_engine();
    T_CHECK(e, "engine: %s", overlap_last_error());
    overlap_file *f = open_rw(e, path, 0);
    T_CHECK(f, "open: %s", overlap_last_error());
    overlap_port *port = NULL;
    T_CHECK(overlap_port_create(e, 0, &port) == 0, "port: %s", overlap_last_error());
    uint8_t *bufs = malloc((size_t)SD_N * BS);
    T_CHECK(bufs, "out of memory");
    for (uint64_t b = 0; b < SD_N; b++) {
        fill_block(bufs + b * BS, b);
        T_CHECK(overlap_port_write(port, f, bufs + b * BS, BS, b * BS, b) == 0, "write: %s",
                overlap_last_error());
    }
    T_CHECK(overlap_engine_shutdown(e) == 0, "shutdown: %s", overlap_last_error());
    /* Every operation in flight completed (its completion is there), or
     * failed with -ESHUTDOWN, unacknowledged. */
    overlap_completion c[SD_N];
    T_CHECK(reap(port, c, SD_N) == 0, "completions after shutdown: %s", overlap_last_error());
    int acked = 0;
    for (int i = 0; i < SD_N; i++) {
        T_CHECK(c[i].result == BS || c[i].result == -ESHUTDOWN, "block %d: result %lld",
                (int)c[i].user_data, (long long)c[i].result);
        if (c[i].result == BS) {
            acked++;
            T_CHECK(on_disk(path, c[i].user_data), "acknowledged block %d is not in the file",
                    (int)c[i].user_data);
        }
    }
    T_CHECK(acked > 0, "no write was acknowledged");
    /* Every later call that starts work fails at once with -ESHUTDOWN. */
    double t0 = now_s();
    overlap_port *q = NULL;
    overlap_file *g = NULL;
    T_CHECK(overlap_port_write(port, f, bufs, BS, 0, 1) == -ESHUTDOWN, "port write after shutdown");
    T_CHECK(overlap_port_read(port, f, bufs, BS, 0, 1) == -ESHUTDOWN, "port read after shutdown");
    T_CHECK(overlap_port_fsync(port, f, 1) == -ESHUTDOWN, "port fsync after shutdown");
    T_CHECK(overlap_port_post(port, 1, 0) == -ESHUTDOWN, "post after shutdown");
    T_CHECK(overlap_pwrite(f, bufs, BS, 0) == -ESHUTDOWN, "pwrite after shutdown");
    T_CHECK(overlap_pread(f, bufs, BS, 0) == -ESHUTDOWN, "pread after shutdown");
    T_CHECK(overlap_fsync(f) == -ESHUTDOWN, "fsync after shutdown");
    T_CHECK(overlap_port_create(e, 0, &q) == -ESHUTDOWN, "port create after shutdown");
    T_CHECK(overlap_file_open(e, path, OVERLAP_OPEN_READ, 0, &g) == -ESHUTDOWN,
            "open after shutdown");
    T_CHECK(now_s() - t0 < 3.0, "calls after shutdown took %.3f s", now_s() - t0);
    T_CHECK(overlap_file_close(f) == 0, "close after shutdown: %s", overlap_last_error());
    overlap_port_free(port);
    overlap_file_free(f);
    overlap_engine_free(e);
    free(bufs);
    unlink(path);
    return 0;
}

#if !defined(_WIN32)
/* ---- fork-in-flight --------------------------------------------------- */

enum { FK_N = 32 };

static overlap_engine *fk_engine;
static overlap_file *fk_file, *fk_pipe;
static overlap_port *fk_port;

/* The child's cleanup at exit (a library's atexit handler): closes and
 * frees the parent's handles while the parent's operations are in flight. */
static void fk_child_cleanup(void) {
    if (getpid() == main_pid || !fk_engine) return;
    if (overlap_file_close(fk_pipe) != 0 || overlap_file_close(fk_file) != 0) _exit(3);
    overlap_port_free(fk_port);
    overlap_file_free(fk_pipe);
    overlap_file_free(fk_file);
    overlap_engine_free(fk_engine);
}

static int fk_child(void) {
    static uint8_t b[BS];
    overlap_completion c;
    overlap_port *q = NULL;
    double t0 = now_s();
    if (overlap_pwrite(fk_file, b, BS, 0) != -ECHILD) return 10;
    if (overlap_pread(fk_file, b, BS, 0) != -ECHILD) return 11;
    if (overlap_port_write(fk_port, fk_file, b, BS, 0, 1) != -ECHILD) return 12;
    if (overlap_port_wait(fk_port, &c, 1, 1, 5000000000LL) != -ECHILD) return 13;
    if (overlap_port_create(fk_engine, 0, &q) != -ECHILD) return 14;
    if (overlap_fsync(fk_file) != -ECHILD) return 15;
    if (overlap_engine_shutdown(fk_engine) != -ECHILD) return 16;
    if (now_s() - t0 > 4.0) return 17; /* a wait above takes 5 s */
    return 0;
}

static int fork_in_flight(void) {
    char path[512];
    test_path(path, sizeof path, "torture-fork");
    fk_engine = new_engine();
    T_CHECK(fk_engine, "engine: %s", overlap_last_error());
    fk_file = open_rw(fk_engine, path, 0);
    T_CHECK(fk_file, "open: %s", overlap_last_error());
    int p[2];
    T_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
    T_CHECK(overlap_file_adopt(fk_engine, p[0], &fk_pipe) == 0, "adopt: %s", overlap_last_error());
    T_CHECK(overlap_port_create(fk_engine, 0, &fk_port) == 0, "port: %s", overlap_last_error());
    static uint8_t got[8];
    uint8_t *bufs = malloc((size_t)FK_N * BS);
    T_CHECK(bufs, "out of memory");
    /* In flight at the fork: a read of an empty pipe, and file writes. */
    T_CHECK(overlap_port_read(fk_port, fk_pipe, got, sizeof got, 0, 1000) == 0, "pipe read: %s",
            overlap_last_error());
    for (uint64_t b = 0; b < FK_N; b++) {
        fill_block(bufs + b * BS, b);
        T_CHECK(overlap_port_write(fk_port, fk_file, bufs + b * BS, BS, b * BS, b) == 0,
                "write: %s", overlap_last_error());
    }
    T_CHECK(atexit(fk_child_cleanup) == 0, "atexit");
    pid_t pid = fork();
    T_CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) exit(fk_child()); /* exit runs fk_child_cleanup */
    int st = 0;
    double t0 = now_s();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_s() - t0 > 10.0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            T_CHECK(0, "the child's exit hung (killed after 10 s)");
        }
        usleep(5000);
    }
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the child failed (status %d: 1x = a call on the parent's handles did not fail "
            "with -ECHILD at once, 3 = a close failed)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    T_CHECK(write(p[1], "parent!", 7) == 7, "pipe write");
    overlap_completion c[FK_N + 1];
    T_CHECK(reap(fk_port, c, FK_N + 1) == 0, "the parent's completions: %s", overlap_last_error());
    for (int i = 0; i < FK_N + 1; i++) {
        if (c[i].user_data == 1000) {
            T_CHECK(c[i].result == 7 && memcmp(got, "parent!", 7) == 0, "pipe read: %lld",
                    (long long)c[i].result);
        } else {
            T_CHECK(c[i].result == BS, "write %d: %lld", (int)c[i].user_data, (long long)c[i].result);
            T_CHECK(on_disk(path, c[i].user_data), "acknowledged block %d is not in the file",
                    (int)c[i].user_data);
        }
    }
    T_CHECK(overlap_file_close(fk_file) == 0 && overlap_file_close(fk_pipe) == 0,
            "the parent's close (did the child's close its descriptors?): %s", overlap_last_error());
    close(p[1]);
    overlap_port_free(fk_port);
    overlap_file_free(fk_pipe);
    overlap_file_free(fk_file);
    overlap_engine_free(fk_engine);
    fk_engine = NULL;
    free(bufs);
    unlink(path);
    return 0;
}

#endif

/* ---- injected-failure: ENOSPC part-way on a small ext4 ---------------- */

enum { IF_BLOCKS = 1024, IF_DEPTH = 16 }; /* 64 KiB each: 64 MiB, more than fits */
#define IF_BS (64 * 1024)

static int if_block_on_disk(const char *path, uint64_t b, int64_t len) {
    static uint8_t want[IF_BS], got[IF_BS];
    for (int64_t i = 0; i < len; i++) want[i] = (uint8_t)(b * 13 + (uint64_t)i * 3);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = pread(fd, got, (size_t)len, (off_t)(b * IF_BS));
    close(fd);
    return n == len && memcmp(want, got, (size_t)len) == 0;
}

static int injected_failure(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/torture-enospc-%d", dir, (int)getpid());
    overlap_engine *e = new_engine();
    T_CHECK(e, "engine: %s", overlap_last_error());
    overlap_file *f = open_rw(e, path, 0);
    T_CHECK(f, "open on the small file system: %s", overlap_last_error());
    overlap_port *port = NULL;
    T_CHECK(overlap_port_create(e, 0, &port) == 0, "port: %s", overlap_last_error());
    uint8_t *bufs = malloc((size_t)IF_DEPTH * IF_BS);
    T_CHECK(bufs, "out of memory");
    static int64_t result[IF_BLOCKS];
    static int slot_of[IF_BLOCKS];
    int free_slots[IF_DEPTH], nfree = IF_DEPTH;
    for (int i = 0; i < IF_DEPTH; i++) free_slots[i] = i;
    uint64_t next = 0, inflight = 0, enospc = 0, acked = 0;
    int stop = 0;
    /* IF_DEPTH writes in flight; a buffer is reused once its own write
     * reported (completions come in any order). */
    while ((next < IF_BLOCKS && !stop) || inflight > 0) {
        while (nfree > 0 && next < IF_BLOCKS && !stop) {
            int slot = free_slots[--nfree];
            uint8_t *b = bufs + (size_t)slot * IF_BS;
            for (int i = 0; i < IF_BS; i++) b[i] = (uint8_t)(next * 13 + (uint64_t)i * 3);
            slot_of[next] = slot;
            T_CHECK(overlap_port_write(port, f, b, IF_BS, next * IF_BS, next) == 0, "submit: %s",
                    overlap_last_error());
            next++;
            inflight++;
        }
        overlap_completion c;
        T_CHECK(reap(port, &c, 1) == 0, "reap: %s", overlap_last_error());
        inflight--;
        free_slots[nfree++] = slot_of[c.user_data];
        result[c.user_data] = c.result;
        if (c.result == -ENOSPC) enospc++, stop = 1;
        else if (c.result >= 0) acked++;
        else T_CHECK(0, "block %d: unexpected %lld", (int)c.user_data, (long long)c.result);
    }
    /* The blocking call reports it too. */
    int64_t w = overlap_pwrite(f, bufs, IF_BS, (uint64_t)IF_BLOCKS * IF_BS);
    T_CHECK(w == -ENOSPC || (w >= 0 && w < IF_BS), "a blocking write on a full file system: %lld",
            (long long)w);
    T_CHECK(enospc > 0, "no write reported ENOSPC (%d blocks of 64 KiB fit)", (int)acked);
    T_CHECK(acked > 0, "nothing was written before ENOSPC");
    int32_t s = overlap_fsync(f);
    T_CHECK(s == 0 || s == -ENOSPC, "fsync: %d", s);
    for (uint64_t b = 0; b < next; b++)
        if (result[b] > 0)
            T_CHECK(if_block_on_disk(path, b, result[b]),
                    "block %d: %lld bytes acknowledged, not in the file", (int)b, (long long)result[b]);
    T_CHECK(overlap_file_close(f) == 0, "close: %s", overlap_last_error());
    overlap_port_free(port);
    overlap_file_free(f);
    overlap_engine_free(e);
    free(bufs);
    unlink(path);
    return 0;
}

/* ---- the runner ------------------------------------------------------- */

static const char *const SCENARIOS[] = {"drop-behind", "shared-writers", "close-racing-reads",
                                        "shutdown-in-flight", "fork-in-flight", "injected-failure"};

static int run(const char *name, int (*f)(void)) {
    scenario = name;
    why[0] = 0;
    alarm(HANG_LIMIT_S);
    int r = f();
    alarm(0);
    if (r == 0) printf("torture: c %s %s ok\n", driver_name, name);
    else printf("torture: c %s %s FAIL: %s\n", driver_name, name, why);
    return r == 0 ? 0 : 1;
}

/* Removes the test's file even when the scenario failed: the small file
 * system is full otherwise. */
static int injected(void) {
    const char *dir = getenv("OVERLAP_SMALL_FS");
    int r = injected_failure(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/torture-enospc-%d", dir, (int)getpid());
    unlink(path);
    return r;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    main_pid = getpid();
#if !defined(_WIN32)
    signal(SIGALRM, on_alarm);
#endif
    switch (wanted_driver()) {
    case OVERLAP_DRIVER_URING: driver_name = "uring"; break;
    case OVERLAP_DRIVER_AIO: driver_name = "aio"; break;
    case OVERLAP_DRIVER_POOL: driver_name = "pool"; break;
#if defined(_WIN32)
    case OVERLAP_DRIVER_IOCP: driver_name = "iocp"; break;
#endif
    default: driver_name = "auto"; break;
    }
    overlap_engine *probe = NULL;
    if (overlap_engine_create(NULL, &probe) == -EOPNOTSUPP) {
        for (size_t i = 0; i < sizeof SCENARIOS / sizeof *SCENARIOS; i++)
            printf("torture: c %s %s SKIPPED: the driver is unavailable here: %s\n", driver_name,
                   SCENARIOS[i], overlap_last_error());
        printf("SKIPPED: torture on %s: %s\n", driver_name, overlap_last_error());
        return 77;
    }
    CHECK(probe != NULL);
    overlap_engine_free(probe);
    int failed = 0;
    failed += run("drop-behind", drop_behind);
    failed += run("shared-writers", shared_writers);
    failed += run("close-racing-reads", close_racing_reads);
    failed += run("shutdown-in-flight", shutdown_in_flight);
#if defined(_WIN32)
    printf("torture: c %s fork-in-flight SKIPPED: Windows has no fork()\n", driver_name);
#else
    failed += run("fork-in-flight", fork_in_flight);
#endif
    const char *fs = getenv("OVERLAP_SMALL_FS");
    if (fs && *fs) {
        failed += run("injected-failure", injected);
    } else {
        const char *skip = getenv("OVERLAP_SMALL_FS_SKIPPED");
        printf("torture: c %s injected-failure SKIPPED: no small file system: %s\n", driver_name,
               skip && *skip ? skip : "OVERLAP_SMALL_FS is not set (run through tests/c.rs)");
    }
    return failed ? 1 : 0;
}
