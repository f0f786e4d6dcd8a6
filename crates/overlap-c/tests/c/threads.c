/* Many threads on one port: submitters that exit right after submitting
 * (their operations outlive them), waiters that take any completion with
 * a minimum, a maximum and a timeout, and posted completions that tell
 * the waiters to stop. Every user datum arrives exactly once, with the
 * right data. Then threads each with one blocking read in flight. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#define BS 512
#define SUBMITTERS 8
#define WAITERS 4
#define PER 400
#define TOTAL (SUBMITTERS * PER)
#define SLOTS 256 /* distinct file blocks */
#define STOP (1ULL << 62)

static overlap_engine *engine;
static overlap_file *file;
static overlap_port *port;
static uint8_t *bufs; /* one per operation */
static atomic_int seen[TOTAL];
static atomic_long reaped;

static uint8_t pattern(uint64_t slot, size_t i) { return (uint8_t)(slot * 31 + i); }

static void *submitter(void *arg) {
    intptr_t t = (intptr_t)arg;
    for (int i = 0; i < PER; i++) {
        uint64_t key = (uint64_t)t * PER + (uint64_t)i;
        uint64_t slot = key % SLOTS;
        CHECK_OK(overlap_port_read(port, file, bufs + key * BS, BS, slot * BS, key));
    }
    return NULL; /* exits with operations in flight */
}

static void *waiter(void *arg) {
    (void)arg;
    overlap_completion c[16];
    for (;;) {
        int64_t n = overlap_port_wait(port, c, 1, 16, 2000000000LL);
        CHECK(n >= 0);
        int stop = 0;
        for (int64_t i = 0; i < n; i++) {
            if (c[i].flags & OVERLAP_COMPLETION_POSTED) {
                CHECK_EQ(c[i].user_data, STOP);
                /* One stop is this waiter's; one it took for another
                 * waiter goes back on the port. */
                if (stop++) CHECK_OK(overlap_port_post(port, STOP, 0));
                continue;
            }
            uint64_t key = c[i].user_data;
            CHECK(key < TOTAL);
            CHECK_EQ(c[i].result, BS);
            CHECK_EQ(atomic_fetch_add(&seen[key], 1), 0);
            const uint8_t *b = bufs + key * BS;
            for (size_t j = 0; j < BS; j++) CHECK_EQ(b[j], pattern(key % SLOTS, j));
            atomic_fetch_add(&reaped, 1);
        }
        if (stop) return NULL;
    }
}

struct reader {
    overlap_file *f;
    int id;
};

static void *blocking_reader(void *arg) {
    struct reader *r = arg;
    uint8_t b[BS];
    for (int i = 0; i < 200; i++) {
        uint64_t slot = (uint64_t)(r->id * 7 + i) % SLOTS;
        CHECK_EQ(overlap_pread(r->f, b, BS, slot * BS), BS);
        for (size_t j = 0; j < BS; j++) CHECK_EQ(b[j], pattern(slot, j));
    }
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    engine = test_engine(NULL);
    char path[512];
    test_path(path, sizeof path, "threads");
    CHECK_OK(overlap_file_open(engine, path, OVERLAP_OPEN_READ | OVERLAP_OPEN_WRITE | OVERLAP_OPEN_CREATE | OVERLAP_OPEN_TRUNCATE, 0644, &file));
    uint8_t block[BS];
    for (uint64_t s = 0; s < SLOTS; s++) {
        for (size_t j = 0; j < BS; j++) block[j] = pattern(s, j);
        CHECK_EQ(overlap_pwrite(file, block, BS, s * BS), BS);
    }
    bufs = calloc(TOTAL, BS);
    CHECK(bufs != NULL);
    CHECK_OK(overlap_port_create(engine, 0, &port));

    pthread_t w[WAITERS], s[SUBMITTERS];
    for (long i = 0; i < WAITERS; i++) CHECK_OK(pthread_create(&w[i], NULL, waiter, NULL));
    for (intptr_t i = 0; i < SUBMITTERS; i++) CHECK_OK(pthread_create(&s[i], NULL, submitter, (void *)i));
    for (int i = 0; i < SUBMITTERS; i++) CHECK_OK(pthread_join(s[i], NULL));
    double t0 = now_s();
    while (atomic_load(&reaped) < TOTAL) {
        CHECK(now_s() - t0 < 30.0);
        usleep(1000);
    }
    for (int i = 0; i < WAITERS; i++) CHECK_OK(overlap_port_post(port, STOP, 0));
    for (int i = 0; i < WAITERS; i++) CHECK_OK(pthread_join(w[i], NULL));
    for (int k = 0; k < TOTAL; k++) CHECK_EQ(atomic_load(&seen[k]), 1);
    CHECK_EQ(overlap_port_outstanding(port), 0);
    overlap_port_free(port);

    /* Threads each with one blocking read in flight (W3's shape). */
    enum { READERS = 8 };
    pthread_t r[READERS];
    struct reader rd[READERS];
    for (int i = 0; i < READERS; i++) {
        rd[i].f = file;
        rd[i].id = i;
        CHECK_OK(pthread_create(&r[i], NULL, blocking_reader, &rd[i]));
    }
    for (int i = 0; i < READERS; i++) CHECK_OK(pthread_join(r[i], NULL));

    overlap_stats st;
    CHECK_OK(overlap_engine_stats(engine, &st));
    CHECK(st.completed >= TOTAL);
    CHECK_OK(overlap_file_close(file));
    overlap_file_free(file);
    overlap_engine_free(engine);
    free(bufs);
    unlink(path);
    printf("threads: all passed\n");
    return 0;
}
