/* Known issue (found by overlap-java, issue 22): heap corruption in liboverlap on io_uring when
 * one thread waits on a port and two other threads submit the next reads (the shape of
 * overlap-java's reaper and handler threads; AfcBench W3:4 through the provider aborts with
 * "malloc(): unsorted double linked list corrupted" about one run in three). Reproduced here in C,
 * no Java involved; not seen with OVERLAP_DRIVER=pool.
 *
 *   cargo build --release -p overlap-c
 *   cc -O2 -pthread -Icrates/overlap-c/include java/known-issues/concurrent-submitters.c \
 *      -Ltarget/release -loverlap_c -o /tmp/repro && ln -sf liboverlap_c.so target/release/liboverlap.so.0
 *   python3 ../shared/peers/mkdata.py /some/ext4/dir 67108864
 *   for i in 1 2 3 4 5; do LD_LIBRARY_PATH=target/release /tmp/repro /some/ext4/dir/overlap-data.bin 100000 1; done
 *
 * argv: FILE READS [PORT_FLAGS (1 = OVERLAP_PORT_NONBLOCK, the default; 0 also crashed once from Java)]
 */
/* 1 waiter thread hands completions to 2 worker threads, which submit the next read (4 chains of
 * O_DIRECT 4 KiB reads): the shape of overlap-java's reaper + handler threads. */
#define _GNU_SOURCE
#include <overlap.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
static overlap_engine *engine; static overlap_file *file; static overlap_port *port;
static void *bufs[4]; static long total; static atomic_long issued, done;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long q[64]; static int qh, qt; static int flags;
static void submit(long chain) {
    long i = atomic_fetch_add(&issued, 1);
    if (i >= total) return;
    uint64_t off = ((uint64_t)(i * 2654435761u) % (64u << 20) / 4096) * 4096;
    int r;
    while ((r = overlap_port_read(port, file, bufs[chain], 4096, off, chain)) == -11) ;
    if (r < 0) { fprintf(stderr, "read: %s\n", overlap_last_error()); exit(1); }
}
static void *worker(void *a) {
    for (;;) {
        pthread_mutex_lock(&mu);
        while (qh == qt) pthread_cond_wait(&cv, &mu);
        long c = q[qh++ % 64];
        pthread_mutex_unlock(&mu);
        if (c < 0) return NULL;
        submit(c);
    }
}
static void *waiter(void *a) {
    overlap_completion c[64];
    while (atomic_load(&done) < total) {
        long n = overlap_port_wait(port, c, 1, 64, 100000000);
        for (long i = 0; i < n; i++) {
            if (c[i].result != 4096) { fprintf(stderr, "result %lld\n", (long long)c[i].result); exit(1); }
            atomic_fetch_add(&done, 1);
            pthread_mutex_lock(&mu); q[qt++ % 64] = (long)c[i].user_data; pthread_cond_signal(&cv); pthread_mutex_unlock(&mu);
        }
    }
    pthread_mutex_lock(&mu); for (int i = 0; i < 2; i++) q[qt++ % 64] = -1; pthread_cond_broadcast(&cv); pthread_mutex_unlock(&mu);
    return NULL;
}
int main(int argc, char **argv) {
    total = atol(argv[2]); flags = argc > 3 ? atoi(argv[3]) : 1;
    if (overlap_engine_create(NULL, &engine) < 0 || overlap_file_open(engine, argv[1], OVERLAP_OPEN_READ | OVERLAP_OPEN_DIRECT, 0, &file) < 0
        || overlap_port_create(engine, flags, &port) < 0) { fprintf(stderr, "%s\n", overlap_last_error()); return 1; }
    for (int i = 0; i < 4; i++) bufs[i] = aligned_alloc(4096, 4096);
    pthread_t w, k[2];
    pthread_create(&w, NULL, waiter, NULL);
    pthread_create(&k[0], NULL, worker, NULL); pthread_create(&k[1], NULL, worker, NULL);
    for (int i = 0; i < 4; i++) submit(i);
    pthread_join(w, NULL); pthread_join(k[0], NULL); pthread_join(k[1], NULL);
    printf("ok %ld\n", (long)atomic_load(&done));
    return 0;
}
