package dev.overlap.nio;

import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.CompletionHandler;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static java.nio.file.StandardOpenOption.READ;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Handlers of the default group run on the reaper that reaped their completion (DefaultGroup,
 * OverlapEngine): where they run, what a user executor still gets, what a handler that blocks
 * for ever or throws does to the others (the standby), long chains, closes while handlers run.
 * No assertion depends on timing: where a handler may legitimately have run elsewhere (the
 * standby hands over what a reaper held for a while), the engine's counters account for it. A
 * hang fails by the class's timeout.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS)
class InlineHandlerTest {
    @TempDir
    Path dir;

    /** True on a thread while it is inside a read call made by a chain (no handler may run then). */
    static final ThreadLocal<Boolean> IN_CALL = ThreadLocal.withInitial(() -> false);

    static byte[] pattern(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            b[i] = (byte) (i * 131 + seed * 7 + (i >>> 12));
        }
        return b;
    }

    static OverlapEngine engine(int reapers, int helpers) {
        // cached reads off: a Future read must go through the port (getters, reapers, the standby)
        return OverlapEngine.create(new OverlapEngine.Options("auto", 0, 0, 0, reapers, helpers, false));
    }

    Path file(String name, byte[] data) throws Exception {
        Path f = dir.resolve(name);
        Files.write(f, data);
        return f;
    }

    /**
     * A chain of reads: each handler checks the bytes it got and issues the next read, until the
     * shared {@code budget} of reads runs out (then the chain ends) or a read fails (recorded in
     * {@code endedWith}). Positions are pseudo-random, 512-aligned; buffers heap, direct, sliced.
     */
    static class Chain implements CompletionHandler<Integer, ByteBuffer> {
        static final int LEN = 4096;
        final AsynchronousFileChannel ch;
        final byte[] data;
        final AtomicInteger budget;
        final AtomicInteger completed;
        final Set<Thread> threads;
        final AtomicReference<Throwable> failure;
        final List<Throwable> endedWith;
        final CountDownLatch ended;
        long x;
        int pos;
        int kind;

        Chain(AsynchronousFileChannel ch, byte[] data, int seed, AtomicInteger budget, AtomicInteger completed,
              Set<Thread> threads, AtomicReference<Throwable> failure, List<Throwable> endedWith,
              CountDownLatch ended) {
            this.ch = ch;
            this.data = data;
            this.x = seed * 7919L + 1;
            this.budget = budget;
            this.completed = completed;
            this.threads = threads;
            this.failure = failure;
            this.endedWith = endedWith;
            this.ended = ended;
        }

        void next() {
            if (budget.getAndDecrement() <= 0) {
                ended.countDown();
                return;
            }
            x = x * 6364136223846793005L + 1442695040888963407L;
            int slots = data.length / 512 - LEN / 512;
            pos = (int) Long.remainderUnsigned(x >>> 17, slots) * 512;
            ByteBuffer b = switch (kind++ % 3) {
                case 0 -> ByteBuffer.allocate(LEN);
                case 1 -> ByteBuffer.allocateDirect(LEN);
                default -> ByteBuffer.allocate(LEN + 100).position(37).slice().limit(LEN);
            };
            IN_CALL.set(true);
            try {
                ch.read(b, pos, b, this);
            } catch (Throwable t) {
                failure.compareAndSet(null, t);
                ended.countDown();
            } finally {
                IN_CALL.set(false);
            }
        }

        @Override
        public void completed(Integer n, ByteBuffer b) {
            try {
                if (IN_CALL.get()) {
                    throw new AssertionError("a handler ran inside a read call on its thread");
                }
                if (threads != null) {
                    threads.add(Thread.currentThread());
                }
                assertEquals(LEN, n);
                byte[] got = new byte[LEN];
                b.flip().get(got);
                if (!Arrays.equals(data, pos, pos + LEN, got, 0, LEN)) {
                    throw new AssertionError("wrong bytes at " + pos);
                }
                completed.incrementAndGet();
            } catch (Throwable t) {
                failure.compareAndSet(null, t);
            }
            next();
        }

        @Override
        public void failed(Throwable exc, ByteBuffer b) {
            endedWith.add(exc);
            ended.countDown();
        }
    }

    /** Starts {@code chains} chains sharing {@code reads} reads; returns the latch of their ends. */
    static CountDownLatch chains(AsynchronousFileChannel ch, byte[] data, int chains, int reads,
                                 AtomicInteger completed, Set<Thread> threads, AtomicReference<Throwable> failure,
                                 List<Throwable> endedWith) {
        CountDownLatch ended = new CountDownLatch(chains);
        AtomicInteger budget = new AtomicInteger(reads);
        for (int c = 0; c < chains; c++) {
            new Chain(ch, data, c, budget, completed, threads, failure, endedWith, ended).next();
        }
        return ended;
    }

    static void noFailure(AtomicReference<Throwable> failure) {
        if (failure.get() != null) {
            throw new AssertionError("a handler failed", failure.get());
        }
    }

    /** One read whose handler records its thread; waits for it. */
    static Thread handlerThreadOfOneRead(AsynchronousFileChannel ch) throws Exception {
        AtomicReference<Thread> t = new AtomicReference<>();
        CountDownLatch done = new CountDownLatch(1);
        ch.read(ByteBuffer.allocate(64), 0, null, new CompletionHandler<Integer, Void>() {
            @Override public void completed(Integer r, Void a) { t.set(Thread.currentThread()); done.countDown(); }
            @Override public void failed(Throwable exc, Void a) { done.countDown(); }
        });
        assertTrue(done.await(10, TimeUnit.SECONDS));
        return t.get();
    }

    @Test
    void defaultGroupHandlersRunOnTheReaperThatReapedThem() throws Exception {
        byte[] data = pattern(1 << 18, 1);
        Path f = file("inline", data);
        try (OverlapEngine e = engine(2, 4);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null)) {
            OverlapEngine.Stats before = e.stats();
            Thread caller = Thread.currentThread();
            // 200 reads issued by this thread, then 8 chains of 300 issued by the handlers
            int n = 200;
            Thread[] ran = new Thread[n];
            CountDownLatch done = new CountDownLatch(n);
            AtomicReference<Throwable> failure = new AtomicReference<>();
            for (int i = 0; i < n; i++) {
                int id = i;
                ByteBuffer b = ByteBuffer.allocate(512);
                IN_CALL.set(true);
                ch.read(b, id * 512L, null, new CompletionHandler<Integer, Void>() {
                    @Override
                    public void completed(Integer r, Void a) {
                        if (IN_CALL.get()) {
                            failure.compareAndSet(null, new AssertionError("ran inside the read call"));
                        }
                        ran[id] = Thread.currentThread();
                        if (r != 512 || !Arrays.equals(data, id * 512, id * 512 + 512, b.array(), 0, 512)) {
                            failure.compareAndSet(null, new AssertionError("wrong bytes at " + id * 512));
                        }
                        done.countDown();
                    }

                    @Override
                    public void failed(Throwable exc, Void a) {
                        failure.compareAndSet(null, exc);
                        done.countDown();
                    }
                });
                IN_CALL.set(false);
            }
            assertTrue(done.await(30, TimeUnit.SECONDS));
            noFailure(failure);
            Set<Thread> chained = ConcurrentHashMap.newKeySet();
            List<Throwable> endedWith = Collections.synchronizedList(new ArrayList<>());
            AtomicInteger completed = new AtomicInteger();
            assertTrue(chains(ch, data, 8, 2400, completed, chained, failure, endedWith).await(60, TimeUnit.SECONDS));
            noFailure(failure);
            assertEquals(List.of(), endedWith);
            assertEquals(2400, completed.get());
            OverlapEngine.Stats after = e.stats();

            int onReaper = 0, elsewhere = 0;
            List<Thread> all = new ArrayList<>(Arrays.asList(ran));
            for (Thread t : all) {
                assertNotSame(caller, t, "a handler never runs on the thread that called read");
                if (e.isReaper(t)) {
                    onReaper++;
                } else {
                    elsewhere++;
                    assertNull(OverlapEngine.engineOf(t), "else on the group's pool: " + t.getName());
                }
            }
            long inline = after.handlersRunInline() - before.handlersRunInline();
            long handedOver = after.handlersHandedOver() - before.handlersHandedOver();
            assertEquals(n + 2400, inline + handedOver, "each handler ran once, on a reaper or handed over");
            assertTrue(onReaper > 0 && inline >= onReaper, "handlers ran on the reapers: " + onReaper);
            // On the pool only what the standby handed over: the rest of a batch of a reaper that
            // stayed in one handler for a while (a descheduled reaper on a loaded machine).
            assertTrue(elsewhere <= handedOver, elsewhere + " on the pool, " + handedOver + " handed over");
            assertTrue(chained.stream().anyMatch(e::isReaper));
            String factory = System.getProperty(DefaultGroup.THREAD_FACTORY);
            for (Thread t : all) {
                if (e.isReaper(t) && factory != null) {
                    assertTrue(t.getName().startsWith("counting-factory-"),
                            "the reapers are the group's threads: the configured factory made them: " + t.getName());
                }
                assertTrue(t.isDaemon());
            }
        }
    }

    @Test
    void withoutAThreadFactoryTheHandlersRunOnThreadsNamedOverlapReaper() throws Exception {
        // a JVM of its own: this one names the group's ThreadFactory (pom.xml)
        try (var other = new TestSupport.OtherJvm(InlineHelper.class, dir.resolve("child").toString())) {
            List<String> lines = new ArrayList<>();
            for (String l; (l = other.line()) != null && !l.equals("DONE"); ) {
                lines.add(l);
            }
            assertEquals(20, lines.size(), String.valueOf(lines));
            int onReaper = 0;
            for (String l : lines) {
                String[] w = l.split(" ");
                assertEquals("THREAD", w[0], l);
                if (w[2].equals("reaper")) {
                    onReaper++;
                    assertTrue(w[1].startsWith("overlap-reaper-1-"), l);
                } else {
                    // handed over by the standby to the group's pool (a reaper held for a while)
                    assertEquals("other", w[2], l);
                    assertTrue(w[1].startsWith("overlap-handler-"), l);
                }
            }
            assertTrue(onReaper > 0, String.valueOf(lines));
        }
    }

    @Test
    void aUserExecutorStillGetsEveryHandler() throws Exception {
        byte[] data = pattern(1 << 18, 2);
        Path f = file("executor", data);
        AtomicInteger k = new AtomicInteger();
        ExecutorService ex = Executors.newFixedThreadPool(2, r -> {
            Thread t = new Thread(r, "inline-test-executor-" + k.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        try (OverlapEngine e = engine(2, 4);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), ex)) {
            OverlapEngine.Stats before = e.stats();
            Set<Thread> threads = ConcurrentHashMap.newKeySet();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            List<Throwable> endedWith = Collections.synchronizedList(new ArrayList<>());
            AtomicInteger completed = new AtomicInteger();
            assertTrue(chains(ch, data, 4, 400, completed, threads, failure, endedWith).await(60, TimeUnit.SECONDS));
            noFailure(failure);
            assertEquals(400, completed.get());
            for (Thread t : threads) {
                assertTrue(t.getName().startsWith("inline-test-executor-"), t.getName());
            }
            OverlapEngine.Stats after = e.stats();
            assertEquals(0, after.handlersRunInline() - before.handlersRunInline());
            assertEquals(0, after.handlersHandedOver() - before.handlersHandedOver());
        } finally {
            ex.shutdown();
        }
    }

    @Test
    void aHandlerBlockedForEverStopsNoOtherChannel() throws Exception {
        byte[] data = pattern(1 << 18, 3);
        Path f = file("blocked", data);
        CountDownLatch never = new CountDownLatch(1);
        // helpers 0: no getter reaps; only the reapers and the standby can
        try (OverlapEngine e = engine(2, 0);
             AsynchronousFileChannel a = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null);
             AsynchronousFileChannel b = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null)) {
            Set<Thread> held = ConcurrentHashMap.newKeySet();
            try {
                // hold both reapers, one after the other, in handlers that wait for ever
                for (int i = 0; i < 2; i++) {
                    CountDownLatch started = new CountDownLatch(1);
                    a.read(ByteBuffer.allocate(16), 0, null, new CompletionHandler<Integer, Void>() {
                        @Override
                        public void completed(Integer r, Void v) {
                            held.add(Thread.currentThread());
                            started.countDown();
                            while (never.getCount() > 0) {
                                try {
                                    never.await();
                                } catch (InterruptedException ignore) {
                                    // the test's latch only
                                }
                            }
                        }

                        @Override
                        public void failed(Throwable exc, Void v) {
                            started.countDown();
                        }
                    });
                    assertTrue(started.await(10, TimeUnit.SECONDS));
                }
                assertEquals(2, held.size(), "both reapers are held: " + held);
                assertTrue(held.stream().allMatch(e::isReaper));
                long handedBefore = e.stats().handlersHandedOver();

                // another channel's handlers and futures complete meanwhile: the standby reaps
                Set<Thread> threads = ConcurrentHashMap.newKeySet();
                AtomicReference<Throwable> failure = new AtomicReference<>();
                List<Throwable> endedWith = Collections.synchronizedList(new ArrayList<>());
                AtomicInteger completed = new AtomicInteger();
                assertTrue(chains(b, data, 4, 200, completed, threads, failure, endedWith)
                        .await(60, TimeUnit.SECONDS), "the other channel's chains ended: " + completed);
                noFailure(failure);
                assertEquals(List.of(), endedWith);
                assertEquals(200, completed.get());
                for (Thread t : threads) {
                    assertFalse(e.isReaper(t), "both reapers are held: " + t.getName());
                }
                assertTrue(e.stats().handlersHandedOver() - handedBefore >= 200);
                Future<Integer> fu = b.read(ByteBuffer.allocate(100), 0);
                assertTrue(TestSupport.waitUntil(fu::isDone, 10_000), "a future completes too");
                assertEquals(100, fu.get());
            } finally {
                never.countDown();
            }
            // the reapers are back: handlers run on them again
            boolean back = false;
            for (int i = 0; i < 500 && !back; i++) {
                back = e.isReaper(handlerThreadOfOneRead(b));
            }
            assertTrue(back, "a handler ran on a reaper again");
        }
    }

    @Test
    void aHandlerThatThrowsStopsNothing() throws Exception {
        byte[] data = pattern(1 << 16, 4);
        Path f = file("throws", data);
        try (OverlapEngine e = engine(1, 0);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null)) {
            List<Throwable> caught = Collections.synchronizedList(new ArrayList<>());
            List<Thread> throwers = Collections.synchronizedList(new ArrayList<>());
            CountDownLatch thrown = new CountDownLatch(2);
            List<Throwable> toThrow = List.of(new IllegalStateException("thrown by a handler (expected)"),
                    new Error("thrown by a handler (expected)"));
            for (Throwable x : toThrow) {
                ch.read(ByteBuffer.allocate(16), 0, null, new CompletionHandler<Integer, Void>() {
                    @Override
                    public void completed(Integer r, Void v) {
                        Thread t = Thread.currentThread();
                        throwers.add(t);
                        t.setUncaughtExceptionHandler((th, exc) -> {
                            caught.add(exc);
                            thrown.countDown();
                        });
                        t.interrupt();
                        if (x instanceof Error err) {
                            throw err;
                        }
                        throw (RuntimeException) x;
                    }

                    @Override
                    public void failed(Throwable exc, Void v) {
                        caught.add(exc);
                        thrown.countDown();
                    }
                });
            }
            assertTrue(thrown.await(10, TimeUnit.SECONDS));
            assertEquals(2, caught.size());
            assertTrue(caught.containsAll(toThrow), "each went to the thread's uncaught exception handler: " + caught);

            // later completions: handlers run, on the same reaper, its interrupt cleared
            Set<Thread> threads = ConcurrentHashMap.newKeySet();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            AtomicInteger interrupted = new AtomicInteger();
            int n = 100;
            CountDownLatch done = new CountDownLatch(n);
            for (int i = 0; i < n; i++) {
                ch.read(ByteBuffer.allocate(16), i, null, new CompletionHandler<Integer, Void>() {
                    @Override
                    public void completed(Integer r, Void v) {
                        if (Thread.currentThread().isInterrupted()) {
                            interrupted.incrementAndGet();
                        }
                        threads.add(Thread.currentThread());
                        done.countDown();
                    }

                    @Override
                    public void failed(Throwable exc, Void v) {
                        failure.compareAndSet(null, exc);
                        done.countDown();
                    }
                });
            }
            assertTrue(done.await(10, TimeUnit.SECONDS));
            noFailure(failure);
            assertEquals(0, interrupted.get(), "the interrupt status is cleared after each handler");
            boolean back = threads.stream().anyMatch(e::isReaper);
            for (int i = 0; i < 500 && !back; i++) {
                back = e.isReaper(handlerThreadOfOneRead(ch));
            }
            assertTrue(back, "the engine's one reaper still runs handlers");
            for (Thread t : throwers) {
                if (e.isReaper(t)) {
                    assertTrue(t.isAlive(), "the reaper a handler threw on lives on");
                }
            }
        }
    }

    @Test
    void aHandlerWaitingInGetStillCompletes() throws Exception {
        byte[] data = pattern(1 << 16, 5);
        Path f = file("get", data);
        // helpers 4: the handler's get() reaps its own read; helpers 0: the standby does (the one
        // reaper is inside the handler)
        for (int helpers : new int[] {4, 0}) {
            try (OverlapEngine e = engine(1, helpers);
                 AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null)) {
                int n = 20;
                CountDownLatch done = new CountDownLatch(n);
                AtomicReference<Throwable> failure = new AtomicReference<>();
                ch.read(ByteBuffer.allocate(16), 0, 0, new CompletionHandler<Integer, Integer>() {
                    @Override
                    public void completed(Integer r, Integer i) {
                        try {
                            ByteBuffer b = ByteBuffer.allocate(1000);
                            assertEquals(1000, ch.read(b, i * 1000L).get(30, TimeUnit.SECONDS));
                            assertTrue(Arrays.equals(data, i * 1000, i * 1000 + 1000, b.array(), 0, 1000));
                        } catch (Throwable x) {
                            failure.compareAndSet(null, x);
                        }
                        done.countDown();
                        if (i + 1 < n) {
                            ch.read(ByteBuffer.allocate(16), 0, i + 1, this);
                        }
                    }

                    @Override
                    public void failed(Throwable exc, Integer i) {
                        failure.compareAndSet(null, exc);
                        done.countDown();
                    }
                });
                assertTrue(done.await(60, TimeUnit.SECONDS), "helpers " + helpers + ": " + done.getCount() + " left");
                noFailure(failure);
            }
        }
    }

    /**
     * A reaper submits what its batch's handlers start when the batch's last handler returned;
     * a handler that waits outside the library (a latch) for a read an earlier handler of its
     * batch started must still see it complete: the standby, which finds the reaper held, submits
     * what the batch queued (and hands the read's handler to the pool). Nothing else would: the
     * other reaper's waits in the port submit nothing of another thread's batch. Both reads of a
     * round are page-cache hits that complete during submission, so one wait of the reaper
     * usually takes both: the round then exercises exactly that case.
     */
    @Test
    void aHandlerWaitingOutsideTheLibraryForAReadItsBatchStartedSeesItComplete() throws Exception {
        byte[] data = pattern(1 << 18, 9);
        Path f = file("batch", data);
        try (OverlapEngine e = engine(2, 0);
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null)) {
            int rounds = 200;
            AtomicReference<Throwable> failure = new AtomicReference<>();
            AtomicInteger waitedForTheBatch = new AtomicInteger();
            for (int round = 0; round < rounds; round++) {
                CountDownLatch started = new CountDownLatch(1); // C's handler ran
                CountDownLatch both = new CountDownLatch(2);
                Thread[] ranOn = new Thread[2];
                int at = round * 512;
                ch.read(ByteBuffer.allocate(512), at, 0, new CompletionHandler<Integer, Integer>() {
                    @Override
                    public void completed(Integer n, Integer i) {
                        ranOn[0] = Thread.currentThread();
                        ByteBuffer c = ByteBuffer.allocate(512);
                        ch.read(c, at + 512, c, new CompletionHandler<Integer, ByteBuffer>() {
                            @Override
                            public void completed(Integer m, ByteBuffer b) {
                                if (m != 512 || !Arrays.equals(data, at + 512, at + 1024, b.array(), 0, 512)) {
                                    failure.compareAndSet(null, new AssertionError("read C: " + m));
                                }
                                started.countDown();
                            }

                            @Override
                            public void failed(Throwable exc, ByteBuffer b) {
                                failure.compareAndSet(null, exc);
                                started.countDown();
                            }
                        });
                        both.countDown();
                    }

                    @Override
                    public void failed(Throwable exc, Integer i) {
                        failure.compareAndSet(null, exc);
                        both.countDown();
                    }
                });
                ch.read(ByteBuffer.allocate(512), at + 1024, 1, new CompletionHandler<Integer, Integer>() {
                    @Override
                    public void completed(Integer n, Integer i) {
                        ranOn[1] = Thread.currentThread();
                        try {
                            if (started.getCount() > 0 && ranOn[0] == Thread.currentThread()) {
                                waitedForTheBatch.incrementAndGet();
                            }
                            if (!started.await(30, TimeUnit.SECONDS)) {
                                failure.compareAndSet(null, new AssertionError("read C never completed"));
                            }
                        } catch (InterruptedException x) {
                            failure.compareAndSet(null, x);
                        }
                        both.countDown();
                    }

                    @Override
                    public void failed(Throwable exc, Integer i) {
                        failure.compareAndSet(null, exc);
                        both.countDown();
                    }
                });
                assertTrue(both.await(60, TimeUnit.SECONDS), "round " + round);
                assertTrue(started.await(60, TimeUnit.SECONDS), "round " + round + ": read C");
                noFailure(failure);
            }
            // (only a port with a ring of its own, io_uring, queues a batch's submissions)
            boolean batches = OverlapEngine.BATCH && e.driver().equals("uring");
            if (batches) {
                // else the rounds never had the case this test is for (about 40% of them do)
                assertTrue(waitedForTheBatch.get() > 0, "no round had the waiting handler in the batch");
            }
            System.out.printf("overlap-java: %d of %d rounds had the waiting handler on the reaper of the read"
                            + " it waited for, before that read's handler ran (%s: %s)%n", waitedForTheBatch.get(),
                    rounds, e.driver(), batches ? "its submission was queued in the batch" : "no batches on this driver");
        }
    }

    @Test
    void tenThousandChainedReadsWithTheirBytes() throws Exception {
        byte[] data = pattern(1 << 20, 6);
        Path f = file("chains", data);
        OverlapEngine e = OverlapEngine.shared();
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ)) {
            OverlapEngine.Stats before = e.stats();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            List<Throwable> endedWith = Collections.synchronizedList(new ArrayList<>());
            AtomicInteger completed = new AtomicInteger();
            Set<Thread> threads = ConcurrentHashMap.newKeySet();
            assertTrue(chains(ch, data, 32, 10_000, completed, threads, failure, endedWith)
                    .await(150, TimeUnit.SECONDS), "the chains ended: " + completed);
            noFailure(failure);
            assertEquals(List.of(), endedWith);
            assertEquals(10_000, completed.get());
            OverlapEngine.Stats after = e.stats();
            System.out.printf("overlap-java: 10000 chained reads (32 chains), engine %s: %d handlers on reapers,"
                            + " %d handed over%n", e.driver(), after.handlersRunInline() - before.handlersRunInline(),
                    after.handlersHandedOver() - before.handlersHandedOver());
            assertTrue(threads.stream().anyMatch(e::isReaper));
        }
    }

    static boolean closedFailure(Throwable t) {
        return t instanceof AsynchronousCloseException || t instanceof ClosedChannelException;
    }

    @Test
    void closingTheChannelWhileHandlersRun() throws Exception {
        byte[] data = pattern(1 << 18, 7);
        Path f = file("close", data);
        try (OverlapEngine e = engine(2, 4)) {
            // from another thread
            AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null);
            AtomicReference<Throwable> failure = new AtomicReference<>();
            List<Throwable> endedWith = Collections.synchronizedList(new ArrayList<>());
            AtomicInteger completed = new AtomicInteger();
            CountDownLatch ended = chains(ch, data, 16, Integer.MAX_VALUE, completed, null, failure, endedWith);
            assertTrue(TestSupport.waitUntil(() -> completed.get() >= 2000, 60_000), "chains run: " + completed);
            ch.close();
            assertTrue(ended.await(30, TimeUnit.SECONDS), "every chain ended: " + ended.getCount() + " left");
            noFailure(failure);
            assertEquals(16, endedWith.size());
            for (Throwable t : endedWith) {
                assertTrue(closedFailure(t), String.valueOf(t));
            }
            assertTrue(TestSupport.waitUntil(() -> e.ops.values().stream().noneMatch(op -> op.channel == ch), 10_000));

            // from a handler on a reaper
            AsynchronousFileChannel ch2 = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null);
            List<Throwable> endedWith2 = Collections.synchronizedList(new ArrayList<>());
            AtomicInteger completed2 = new AtomicInteger();
            AtomicReference<Thread> closer = new AtomicReference<>();
            CountDownLatch closedIt = new CountDownLatch(1);
            CountDownLatch ended2 = new CountDownLatch(8);
            AtomicInteger budget = new AtomicInteger(Integer.MAX_VALUE);
            for (int c = 0; c < 8; c++) {
                new Chain(ch2, data, c, budget, completed2, null, failure, endedWith2, ended2) {
                    @Override
                    public void completed(Integer n, ByteBuffer b) {
                        if (completed2.get() >= 500 && closer.compareAndSet(null, Thread.currentThread())) {
                            try {
                                ch2.close();
                            } catch (Throwable t) {
                                failure.compareAndSet(null, t);
                            }
                            closedIt.countDown();
                        }
                        super.completed(n, b);
                    }
                }.next();
            }
            assertTrue(closedIt.await(60, TimeUnit.SECONDS), "a handler closed the channel: " + completed2);
            assertTrue(ended2.await(30, TimeUnit.SECONDS), "every chain ended: " + ended2.getCount() + " left");
            noFailure(failure);
            assertEquals(8, endedWith2.size());
            for (Throwable t : endedWith2) {
                assertTrue(closedFailure(t), String.valueOf(t));
            }
            assertFalse(ch2.isOpen());
        }
    }

    @Test
    void aHandlerClosingItsOwnEngine() throws Exception {
        Path f = file("engine", pattern(8192, 8));
        OverlapEngine e = engine(2, 4);
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null);
        AtomicReference<Thread> ran = new AtomicReference<>();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch closed = new CountDownLatch(1);
        ch.read(ByteBuffer.allocate(100), 0, null, new CompletionHandler<Integer, Void>() {
            @Override
            public void completed(Integer r, Void v) {
                ran.set(Thread.currentThread());
                try {
                    e.close();
                } catch (Throwable t) {
                    failure.set(t);
                }
                closed.countDown();
            }

            @Override
            public void failed(Throwable exc, Void v) {
                failure.set(exc);
                closed.countDown();
            }
        });
        assertTrue(closed.await(20, TimeUnit.SECONDS), "close() on a reaper does not wait for that reaper");
        noFailure(failure);
        Thread t = ran.get();
        if (e.isReaper(t)) {
            t.join(10_000);
            assertFalse(t.isAlive(), "the reaper stopped after its handler");
        }
        ch.close();
    }
}
