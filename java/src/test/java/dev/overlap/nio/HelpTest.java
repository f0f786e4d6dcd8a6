package dev.overlap.nio;

import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.CompletionHandler;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.AbstractExecutorService;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static java.nio.file.StandardOpenOption.READ;
import static java.nio.file.StandardOpenOption.WRITE;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code Future.get()} helps: the getter waits on the engine's port itself and dispatches what it
 * takes as a reaper would (OpFuture, OverlapEngine#help). These tests make the getter's help the
 * only way a completion can be reaped (the engine's one reaper held inside an executor's
 * {@code execute}), or race getters against each other and against close, cancel and interrupts.
 * A hang (a lost completion, a getter nobody wakes, a reaper that never stops) fails by the
 * class's timeout.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class HelpTest {
    @TempDir
    Path dir;

    static ExecutorService named;

    @BeforeAll
    static void setup() {
        AtomicInteger n = new AtomicInteger();
        named = Executors.newFixedThreadPool(2, r -> {
            Thread t = new Thread(r, "help-executor-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
    }

    @AfterAll
    static void teardown() {
        named.shutdownNow();
    }

    static byte[] pattern(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            b[i] = (byte) (i * 131 + seed * 7 + (i >>> 12));
        }
        return b;
    }

    static OverlapEngine engine(int reapers, int helpers) {
        // cached reads off: these reads must go through the port, where getters help reap
        return OverlapEngine.create(new OverlapEngine.Options("auto", 0, 0, 0, reapers, helpers, false));
    }

    /**
     * An executor whose {@code execute} holds the calling thread until released: the reaper that
     * hands it a handler is stuck there, and reaps nothing else meanwhile.
     */
    static final class Holding extends AbstractExecutorService {
        final CountDownLatch entered = new CountDownLatch(1);
        final CountDownLatch release = new CountDownLatch(1);
        final CountDownLatch passed = new CountDownLatch(1);
        volatile Thread held;
        final ExecutorService then = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "holding-executor");
            t.setDaemon(true);
            return t;
        });

        @Override
        public void execute(Runnable command) {
            if (held == null) {
                held = Thread.currentThread();
                entered.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                then.execute(command);
                passed.countDown();
                return;
            }
            then.execute(command);
        }

        /** Lets the held thread go on, and shuts down once it handed its task over. */
        void finish() throws InterruptedException {
            release.countDown();
            assertTrue(passed.await(10, TimeUnit.SECONDS), "the held thread went on");
            shutdown();
        }

        @Override public void shutdown() { then.shutdown(); }
        @Override public List<Runnable> shutdownNow() { return then.shutdownNow(); }
        @Override public boolean isShutdown() { return then.isShutdown(); }
        @Override public boolean isTerminated() { return then.isTerminated(); }
        @Override public boolean awaitTermination(long t, TimeUnit u) throws InterruptedException {
            return then.awaitTermination(t, u);
        }
    }

    /** Holds the engine's only reaper inside {@code execute} of a handler's executor. */
    static Holding holdTheReaper(OverlapEngine e, Path file) throws Exception {
        Holding h = new Holding();
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, file, Set.of(READ), h);
        ch.read(ByteBuffer.allocateDirect(16), 0, null, new CompletionHandler<Integer, Void>() {
            @Override public void completed(Integer r, Void a) { }
            @Override public void failed(Throwable exc, Void a) { }
        });
        assertTrue(h.entered.await(10, TimeUnit.SECONDS), "the reaper dispatched the handler");
        assertTrue(e.isReaper(h.held), h.held.getName());
        return h;
    }

    @Test
    void getCompletesWhileTheOnlyReaperIsHeld() throws Exception {
        Path f = dir.resolve("held");
        byte[] data = pattern(1 << 16, 1);
        Files.write(f, data);
        try (OverlapEngine e = engine(1, 4)) {
            Holding h = holdTheReaper(e, f);
            try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), named)) {
                long before = e.stats().completionsTakenByGetters();
                for (int i = 0; i < 50; i++) {
                    ByteBuffer b = ByteBuffer.allocate(4096);
                    assertEquals(4096, ch.read(b, i * 1024L).get(10, TimeUnit.SECONDS));
                    assertArrayEquals(Arrays.copyOfRange(data, i * 1024, i * 1024 + 4096), b.array());
                }
                // and the untimed get()
                ByteBuffer b = ByteBuffer.allocateDirect(100);
                assertEquals(100, ch.read(b, 7).get());
                assertTrue(e.stats().completionsTakenByGetters() - before >= 51,
                        "the getters reaped their own completions: the reaper could not");
            } finally {
                h.finish();
            }
        }
    }

    @Test
    void withoutHelpersTheReaperDoesIt() throws Exception {
        Path f = dir.resolve("nohelp");
        Files.write(f, pattern(8192, 2));
        try (OverlapEngine e = engine(2, 0);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), named)) {
            for (int i = 0; i < 20; i++) {
                assertEquals(4096, ch.read(ByteBuffer.allocate(4096), i * 100L).get(10, TimeUnit.SECONDS));
            }
            assertEquals(0, e.stats().completionsTakenByGetters(), "overlap.helpers=0 turns helping off");
        }
    }

    @Test
    void handlerCompletionsTakenByAGetterStillRunOnTheGroup() throws Exception {
        Path f = dir.resolve("handlers");
        byte[] data = pattern(1 << 16, 3);
        Files.write(f, data);
        try (OverlapEngine e = engine(1, 4)) {
            Holding held = holdTheReaper(e, f);
            try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), named)) {
                int n = 20;
                CountDownLatch done = new CountDownLatch(n);
                List<AtomicReference<Thread>> ran = new ArrayList<>();
                List<ByteBuffer> bufs = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    AtomicReference<Thread> t = new AtomicReference<>();
                    ran.add(t);
                    ByteBuffer b = ByteBuffer.allocate(512);
                    bufs.add(b);
                    ch.read(b, i * 512L, null, new CompletionHandler<Integer, Void>() {
                        @Override
                        public void completed(Integer r, Void a) {
                            t.set(Thread.currentThread());
                            done.countDown();
                        }

                        @Override
                        public void failed(Throwable exc, Void a) {
                            done.countDown();
                        }
                    });
                }
                // Only a getter can reap them now: it takes them with its own completion.
                Thread getter = Thread.currentThread();
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (done.getCount() > 0 && System.nanoTime() < deadline) {
                    assertEquals(16, ch.read(ByteBuffer.allocate(16), 0).get(10, TimeUnit.SECONDS));
                }
                assertTrue(done.await(1, TimeUnit.SECONDS), "every handler ran");
                for (int i = 0; i < n; i++) {
                    Thread t = ran.get(i).get();
                    assertNotSame(getter, t, "a handler never runs on the getter's thread");
                    assertTrue(t.getName().startsWith("help-executor-"), "ran on the channel's group: " + t.getName());
                    assertArrayEquals(Arrays.copyOfRange(data, i * 512, i * 512 + 512), bufs.get(i).array());
                }
            } finally {
                held.finish();
            }
        }
    }

    @Test
    void manyThreadsEachGetTheirOwnData() throws Exception {
        Path f = dir.resolve("many");
        int size = 1 << 20;
        byte[] data = pattern(size, 4);
        Files.write(f, data);
        // the shared engine (helpers = processors) and one with fewer helpers than getters
        try (OverlapEngine few = engine(2, 1)) {
            for (OverlapEngine e : List.of(OverlapEngine.shared(), few)) {
                try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), named)) {
                    int threads = 8, reads = 300;
                    AtomicReference<Throwable> failure = new AtomicReference<>();
                    List<Thread> ts = new ArrayList<>();
                    for (int t = 0; t < threads; t++) {
                        int id = t;
                        Thread th = new Thread(() -> {
                            try {
                                long x = id * 7919L + 1;
                                for (int i = 0; i < reads; i++) {
                                    x = x * 6364136223846793005L + 1442695040888963407L;
                                    int len = 1 + (int) Long.remainderUnsigned(x >>> 20, 8192);
                                    int pos = (int) Long.remainderUnsigned(x >>> 7, size - len);
                                    ByteBuffer b = (i & 1) == 0 ? ByteBuffer.allocate(len) : ByteBuffer.allocateDirect(len);
                                    int n = (i % 3 == 0) ? ch.read(b, pos).get() : ch.read(b, pos).get(10, TimeUnit.SECONDS);
                                    assertEquals(len, n);
                                    byte[] got = new byte[len];
                                    b.flip().get(got);
                                    assertArrayEquals(Arrays.copyOfRange(data, pos, pos + len), got,
                                            "thread " + id + " read " + i + " at " + pos);
                                }
                            } catch (Throwable x) {
                                failure.compareAndSet(null, x);
                            }
                        }, "getter-" + t);
                        ts.add(th);
                        th.start();
                    }
                    for (Thread th : ts) {
                        th.join(60_000);
                        assertFalse(th.isAlive(), th.getName() + " finished");
                    }
                    if (failure.get() != null) {
                        throw new AssertionError("a getter failed", failure.get());
                    }
                }
            }
        }
    }

    @Test
    void closeWhileGettersWait() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-getters");
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(fifo, Set.of(READ, WRITE), named);
        int threads = 4;
        List<Future<Integer>> fs = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            fs.add(ch.read(ByteBuffer.allocate(100), 0));
        }
        AtomicReference<Throwable>[] got = newRefs(threads);
        CountDownLatch started = new CountDownLatch(threads);
        List<Thread> ts = new ArrayList<>();
        for (int i = 0; i < threads; i++) {
            int id = i;
            Thread t = new Thread(() -> {
                started.countDown();
                try {
                    fs.get(id).get(); // untimed: only the close can end it
                    got[id].set(new AssertionError("completed"));
                } catch (ExecutionException x) {
                    got[id].set(x.getCause());
                } catch (Throwable x) {
                    got[id].set(x);
                }
            });
            t.setDaemon(true);
            ts.add(t);
            t.start();
        }
        assertTrue(started.await(10, TimeUnit.SECONDS));
        Thread.sleep(100); // the getters are in get(), most of them in the port
        ch.close();
        for (int i = 0; i < threads; i++) {
            ts.get(i).join(10_000);
            assertFalse(ts.get(i).isAlive(), "getter " + i + " returned after close");
            assertInstanceOf(AsynchronousCloseException.class, got[i].get());
        }
        TestSupport.feed(fifo, 400); // the kernel's reads end; their completions are reaped
        OverlapEngine e = OverlapEngine.shared();
        assertTrue(TestSupport.waitUntil(() -> e.ops.values().stream().noneMatch(op -> op.channel == ch), 10_000));
    }

    @Test
    void cancelAndInterruptWhileAGetterWaits() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-cancel-get");
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(fifo, Set.of(READ, WRITE), named);
        // interrupt: InterruptedException, the future and the channel untouched
        Future<Integer> f = ch.read(ByteBuffer.allocate(10), 0);
        AtomicReference<Throwable> got = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                f.get();
            } catch (Throwable x) {
                got.set(x);
            }
        });
        t.start();
        Thread.sleep(50);
        t.interrupt();
        t.join(10_000);
        assertFalse(t.isAlive());
        assertInstanceOf(InterruptedException.class, got.get());
        assertFalse(f.isDone());
        assertTrue(ch.isOpen(), "an interrupted get() does not close the channel");
        // a timed get() times out
        assertThrows(TimeoutException.class, () -> f.get(30, TimeUnit.MILLISECONDS));
        // cancel(false) from another thread while a getter waits: CancellationException
        got.set(null);
        Thread t2 = new Thread(() -> {
            try {
                f.get();
            } catch (Throwable x) {
                got.set(x);
            }
        });
        t2.start();
        Thread.sleep(50);
        assertTrue(f.cancel(false));
        t2.join(10_000);
        assertFalse(t2.isAlive());
        assertInstanceOf(CancellationException.class, got.get());
        assertTrue(ch.isOpen());
        // cancel(true) closes the channel: the getter of another read sees the close
        Future<Integer> g = ch.read(ByteBuffer.allocate(10), 0);
        Future<Integer> other = ch.read(ByteBuffer.allocate(10), 0);
        got.set(null);
        Thread t3 = new Thread(() -> {
            try {
                other.get();
            } catch (ExecutionException x) {
                got.set(x.getCause());
            } catch (Throwable x) {
                got.set(x);
            }
        });
        t3.start();
        Thread.sleep(50);
        assertTrue(g.cancel(true));
        assertFalse(ch.isOpen());
        t3.join(10_000);
        assertFalse(t3.isAlive());
        assertInstanceOf(AsynchronousCloseException.class, got.get());
        TestSupport.feed(fifo, 100);
        OverlapEngine e = OverlapEngine.shared();
        assertTrue(TestSupport.waitUntil(() -> e.ops.values().stream().noneMatch(op -> op.channel == ch), 10_000));
    }

    @Test
    void closingTheEngineWhileAGetterHelps() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-engine");
        OverlapEngine e = engine(2, 4);
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, fifo, Set.of(READ, WRITE), named);
        Future<Integer> f = ch.read(ByteBuffer.allocate(10), 0);
        AtomicReference<Throwable> got = new AtomicReference<>();
        Thread t = new Thread(() -> {
            try {
                f.get(2, TimeUnit.SECONDS);
            } catch (Throwable x) {
                got.set(x);
            }
        });
        t.start();
        Thread.sleep(50);
        Thread closer = new Thread(e::close);
        closer.start();
        closer.join(10_000);
        assertFalse(closer.isAlive(), "the engine's reapers stopped (a STOP a getter took went on to a reaper)");
        t.join(10_000);
        assertFalse(t.isAlive());
        // the FIFO stays empty: the read cannot complete, and the shutdown fails it (the kernel has
        // only the library's copy of its buffer)
        assertInstanceOf(ExecutionException.class, got.get());
        assertInstanceOf(java.nio.channels.ShutdownChannelGroupException.class, got.get().getCause().getCause());
        ch.close();
        TestSupport.feed(fifo, 10);
    }

    @Test
    void virtualThreadsWaitWithoutHelping() throws Exception {
        Path f = dir.resolve("virtual");
        Files.write(f, pattern(8192, 5));
        try (OverlapEngine e = engine(2, 4);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), named)) {
            AtomicReference<Object> got = new AtomicReference<>();
            Thread v = Thread.ofVirtual().start(() -> {
                try {
                    int total = 0;
                    for (int i = 0; i < 20; i++) {
                        total += ch.read(ByteBuffer.allocate(100), i).get();
                    }
                    got.set(total);
                } catch (Throwable x) {
                    got.set(x);
                }
            });
            v.join(10_000);
            assertEquals(2000, got.get());
            assertEquals(0, e.stats().completionsTakenByGetters(), "a virtual thread never waits in the port");
        }
    }

    /** An executor that runs each task on the thread that hands it over. */
    static final class CallerRuns extends AbstractExecutorService {
        volatile boolean shut;

        @Override public void execute(Runnable command) { command.run(); }
        @Override public void shutdown() { shut = true; }
        @Override public List<Runnable> shutdownNow() { shut = true; return List.of(); }
        @Override public boolean isShutdown() { return shut; }
        @Override public boolean isTerminated() { return shut; }
        @Override public boolean awaitTermination(long t, TimeUnit u) { return shut; }
    }

    @Test
    void aHandlerThatWaitsOnTheGettersThreadLosesNoCompletion() throws Exception {
        // A getter takes a batch of completions of handlers whose executor runs them on the
        // getter itself, and each handler waits for a read of its own: that get() helps again
        // while the first batch is still being handed out (it must not reuse its room).
        Path f = dir.resolve("nested");
        byte[] data = pattern(1 << 16, 6);
        Files.write(f, data);
        try (OverlapEngine e = engine(1, 4)) {
            Holding held = holdTheReaper(e, f);
            try (AsynchronousFileChannel inline = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ),
                         new CallerRuns());
                 AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), named)) {
                int n = 40;
                CountDownLatch done = new CountDownLatch(n);
                AtomicReference<Throwable> failure = new AtomicReference<>();
                for (int i = 0; i < n; i++) {
                    int id = i;
                    inline.read(ByteBuffer.allocate(256), id * 256L, null, new CompletionHandler<Integer, Void>() {
                        @Override
                        public void completed(Integer r, Void a) {
                            try {
                                assertEquals(256, r);
                                ByteBuffer b = ByteBuffer.allocate(1000);
                                assertEquals(1000, ch.read(b, id * 1000L).get(10, TimeUnit.SECONDS));
                                assertArrayEquals(Arrays.copyOfRange(data, id * 1000, id * 1000 + 1000), b.array());
                            } catch (Throwable x) {
                                failure.compareAndSet(null, x);
                            }
                            done.countDown();
                        }

                        @Override
                        public void failed(Throwable exc, Void a) {
                            failure.compareAndSet(null, exc);
                            done.countDown();
                        }
                    });
                }
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (done.getCount() > 0 && System.nanoTime() < deadline) {
                    assertEquals(16, ch.read(ByteBuffer.allocate(16), 0).get(10, TimeUnit.SECONDS));
                }
                assertEquals(0, done.getCount(), "every handler ran (no completion was lost)");
                if (failure.get() != null) {
                    throw new AssertionError("a handler failed", failure.get());
                }
            } finally {
                held.finish();
            }
        }
    }

    @Test
    void closeStopsEveryReaperAfterGettersHelped() throws Exception {
        // The reapers stand aside while getters help; a close then finds them all out of the
        // port and the first one back may take every STOP in one batch.
        Path f = dir.resolve("stops");
        Files.write(f, pattern(8192, 7));
        for (int round = 0; round < 5; round++) {
            OverlapEngine e = engine(3, 4);
            try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), named)) {
                for (int i = 0; i < 20; i++) {
                    assertEquals(100, ch.read(ByteBuffer.allocateDirect(100), i).get());
                }
            }
            Thread closer = new Thread(e::close, "closer-" + round);
            closer.setDaemon(true);
            closer.start();
            closer.join(10_000);
            assertFalse(closer.isAlive(), "close returned: every reaper took its STOP (round " + round + ")");
        }
    }

    @Test
    void anInterruptedGetLeavesTheOperationInFlight() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-interrupt");
        try (OverlapEngine e = engine(2, 4);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, fifo, Set.of(READ, WRITE), named)) {
            // a heap buffer (read through the library's copy) and a direct one (read in place)
            for (ByteBuffer b : List.of(ByteBuffer.allocate(8), ByteBuffer.allocateDirect(8))) {
                Future<Integer> f = ch.read(b, 0);
                AtomicReference<Throwable> got = new AtomicReference<>();
                Thread t = new Thread(() -> {
                    try {
                        f.get();
                        got.set(new AssertionError("completed"));
                    } catch (Throwable x) {
                        got.set(x);
                    }
                });
                t.start();
                Thread.sleep(50);
                t.interrupt();
                t.join(10_000);
                assertFalse(t.isAlive());
                assertInstanceOf(InterruptedException.class, got.get());
                assertFalse(f.isDone());
                assertTrue(e.ops.values().stream().anyMatch(op -> op.future == f), "the read is still tracked");
                // the kernel completes it later: its memory was kept, the result reaches the future
                try (java.io.RandomAccessFile raf = new java.io.RandomAccessFile(fifo.toFile(), "rw")) {
                    raf.write(new byte[] {1, 2, 3, 4, 5, 6, 7, 8});
                }
                assertEquals(8, f.get(10, TimeUnit.SECONDS));
                byte[] bytes = new byte[8];
                b.flip().get(bytes);
                assertArrayEquals(new byte[] {1, 2, 3, 4, 5, 6, 7, 8}, bytes);
            }
        }
    }

    @Test
    void manyGettersOfOneFuture() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-one-future");
        try (OverlapEngine e = engine(2, 4);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, fifo, Set.of(READ, WRITE), named)) {
            Future<Integer> f = ch.read(ByteBuffer.allocate(5), 0);
            int threads = 6;
            List<AtomicReference<Object>> got = new ArrayList<>();
            List<Thread> ts = new ArrayList<>();
            for (int i = 0; i < threads; i++) {
                int id = i;
                AtomicReference<Object> r = new AtomicReference<>();
                got.add(r);
                Thread t = new Thread(() -> {
                    try {
                        r.set((id & 1) == 0 ? f.get() : f.get(60, TimeUnit.SECONDS));
                    } catch (Throwable x) {
                        r.set(x);
                    }
                });
                t.setDaemon(true);
                ts.add(t);
                t.start();
            }
            Thread.sleep(50); // most of them in get(): one in the port, the others on the latch
            TestSupport.feed(fifo, 5);
            for (int i = 0; i < threads; i++) {
                ts.get(i).join(10_000);
                assertFalse(ts.get(i).isAlive(), "getter " + i + " returned");
                assertEquals(5, got.get(i).get());
            }
        }
    }

    @Test
    void aGetterInThePortIsNudgedWhenAnotherThreadCompletesItsFuture() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-nudge");
        try (OverlapEngine e = engine(2, 4)) {
            AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, fifo, Set.of(READ, WRITE), named);
            long before = e.stats().getterNudges();
            int rounds = 0;
            // until one cancel found its getter in the port (the getter is out of it only for
            // moments between slices): that getter must be woken, and every getter returns
            while (e.stats().getterNudges() == before && rounds < 200) {
                rounds++;
                OpFuture<Integer> f = (OpFuture<Integer>) ch.read(ByteBuffer.allocate(4), 0);
                AtomicReference<Throwable> got = new AtomicReference<>();
                Thread t = new Thread(() -> {
                    try {
                        f.get();
                        got.set(new AssertionError("completed"));
                    } catch (Throwable x) {
                        got.set(x);
                    }
                });
                t.setDaemon(true);
                t.start();
                assertTrue(TestSupport.waitUntil(f::getterInPort, 10_000), "the getter helps");
                assertTrue(f.cancel(false));
                t.join(10_000);
                assertFalse(t.isAlive(), "the getter returned");
                assertInstanceOf(CancellationException.class, got.get());
            }
            assertTrue(e.stats().getterNudges() > before, "a nudge was posted (" + rounds + " rounds)");
            ch.close();
            TestSupport.feed(fifo, 4 * rounds); // the cancelled reads end
            assertTrue(TestSupport.waitUntil(() -> e.ops.isEmpty(), 10_000), "every read was reaped");
        }
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static AtomicReference<Throwable>[] newRefs(int n) {
        AtomicReference<Throwable>[] a = new AtomicReference[n];
        for (int i = 0; i < n; i++) {
            a[i] = new AtomicReference<>();
        }
        return a;
    }

    @Test
    void completedFuturesAndLocksDoNotHelp() throws Exception {
        Path f = dir.resolve("locks");
        Files.write(f, new byte[10]);
        try (OverlapEngine e = engine(2, 4);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ, WRITE), named)) {
            assertEquals(0, ch.read(ByteBuffer.allocate(0), 0).get());
            var l = ch.lock().get(10, TimeUnit.SECONDS);
            assertTrue(l.isValid());
            l.release();
            assertEquals(0, e.stats().completionsTakenByGetters());
        }
    }
}
