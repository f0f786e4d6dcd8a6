/* A tiny test harness for liboverlap's C tests: CHECK and friends print
 * the failing expression, the values and overlap_last_error(), and exit 1.
 * Exit status 77 means "skipped" (the runner prints the reason). */
#ifndef OVERLAP_CHECK_H
#define OVERLAP_CHECK_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "overlap.h"

#if defined(_WIN32)
#include <io.h>
#include <malloc.h>
#if !defined(ESHUTDOWN)
/* The C runtime has no ESHUTDOWN: liboverlap's (overlap.h). */
#define ESHUTDOWN OVERLAP_ESHUTDOWN
#endif
/* What the tests' own descriptors need there: bytes, not text (no exec to
 * close them on). */
#define O_CLOEXEC O_BINARY
/* pread() for a test's own descriptor (nothing else moves its offset). */
static inline ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    if (_lseeki64(fd, off, SEEK_SET) < 0) return -1;
    return _read(fd, buf, (unsigned)n);
}
/* No aligned_alloc() in Windows' C runtime; the memory is freed with
 * aligned_free(). */
#define aligned_alloc(align, n) _aligned_malloc((n), (align))
#define aligned_free _aligned_free
static inline int posix_memalign(void **p, size_t align, size_t n) {
    *p = _aligned_malloc(n, align);
    return *p ? 0 : ENOMEM;
}
#include <windows.h>
/* 1 when running under Wine (its ntdll exports wine_get_version). */
static inline int under_wine(void) {
    HMODULE ntdll = GetModuleHandleA("ntdll.dll");
    return ntdll && GetProcAddress(ntdll, "wine_get_version") != NULL;
}
#else
#define aligned_free free
static inline int under_wine(void) { return 0; }
#endif

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n",        \
                    __FILE__, __LINE__, #cond, overlap_last_error());            \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

#define CHECK_EQ(a, b)                                                           \
    do {                                                                         \
        int64_t a_ = (int64_t)(a), b_ = (int64_t)(b);                            \
        if (a_ != b_) {                                                          \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s = %" PRId64              \
                    ", %s = %" PRId64 " (last error: %s)\n",                     \
                    __FILE__, __LINE__, #a, a_, #b, b_, overlap_last_error());   \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

/* The call failed with -errno and left a message. */
#define CHECK_ERR(call, errno_)                                                  \
    do {                                                                         \
        int64_t r_ = (int64_t)(call);                                            \
        if (r_ != -(int64_t)(errno_)) {                                          \
            fprintf(stderr, "%s:%d: %s returned %" PRId64 ", expected -%s"       \
                    " (last error: %s)\n", __FILE__, __LINE__, #call, r_,        \
                    #errno_, overlap_last_error());                              \
            exit(1);                                                             \
        }                                                                        \
        if (overlap_last_error()[0] == '\0') {                                   \
            fprintf(stderr, "%s:%d: %s failed without a message\n",              \
                    __FILE__, __LINE__, #call);                                  \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

#define CHECK_OK(call) CHECK_EQ((call), 0)

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The driver OVERLAP_DRIVER names, as an OVERLAP_DRIVER_* value (AUTO if
 * unset). */
static inline int32_t wanted_driver(void) {
    const char *d = getenv("OVERLAP_DRIVER");
    if (!d || !*d) return OVERLAP_DRIVER_AUTO;
    if (!strcmp(d, "uring")) return OVERLAP_DRIVER_URING;
    if (!strcmp(d, "aio")) return OVERLAP_DRIVER_AIO;
    if (!strcmp(d, "pool")) return OVERLAP_DRIVER_POOL;
#if defined(_WIN32)
    if (!strcmp(d, "iocp")) return OVERLAP_DRIVER_IOCP;
#endif
    return OVERLAP_DRIVER_AUTO;
}

/* An engine on the driver OVERLAP_DRIVER names (through
 * OVERLAP_DRIVER_AUTO, which obeys it); exits 77 with a SKIPPED line when
 * that driver cannot run here. */
static inline overlap_engine *test_engine(const overlap_engine_options *opts) {
    overlap_engine *e = NULL;
    int32_t r = overlap_engine_create(opts, &e);
    if (r == -EOPNOTSUPP) {
        const char *what = wanted_driver() == OVERLAP_DRIVER_URING ? "io_uring" : "Linux AIO";
        printf("SKIPPED: %s unavailable: %s\n", what, overlap_last_error());
        exit(77);
    }
    CHECK_OK(r);
    CHECK(e != NULL);
    return e;
}

/* A path under OVERLAP_TEST_DIR (a directory on a disk file system). */
static inline void test_path(char *out, size_t n, const char *name) {
    const char *dir = getenv("OVERLAP_TEST_DIR");
    snprintf(out, n, "%s/%s-%d", dir ? dir : "/tmp", name, (int)getpid());
}

#endif
