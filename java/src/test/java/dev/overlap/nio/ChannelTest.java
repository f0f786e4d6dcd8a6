package dev.overlap.nio;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.CompletionHandler;
import java.nio.channels.NonReadableChannelException;
import java.nio.channels.NonWritableChannelException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.IntFunction;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static java.nio.file.StandardOpenOption.CREATE;
import static java.nio.file.StandardOpenOption.READ;
import static java.nio.file.StandardOpenOption.WRITE;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class ChannelTest {
    @TempDir
    Path dir;

    static ExecutorService named;

    @BeforeAll
    static void setup() {
        AtomicInteger n = new AtomicInteger();
        named = Executors.newFixedThreadPool(2, r -> {
            Thread t = new Thread(r, "callers-executor-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        System.out.println("overlap-java: liboverlap " + OverlapEngine.version() + " from "
                + OverlapEngine.libraryLoadedFrom() + "; engine: " + OverlapEngine.shared().driverText());
    }

    @AfterAll
    static void teardown() {
        named.shutdownNow();
    }

    static byte[] pattern(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            b[i] = (byte) (i * 31 + seed);
        }
        return b;
    }

    static IntFunction<ByteBuffer> kind(String k) {
        return switch (k) {
            case "heap" -> ByteBuffer::allocate;
            case "direct" -> ByteBuffer::allocateDirect;
            case "shared" -> n -> Arena.ofShared().allocate(n).asByteBuffer();
            case "auto" -> n -> Arena.ofAuto().allocate(n).asByteBuffer();
            case "global" -> n -> Arena.global().allocate(n).asByteBuffer();
            case "heap-slice" -> n -> ByteBuffer.allocate(n + 100).position(37).slice().limit(n);
            default -> throw new IllegalArgumentException(k);
        };
    }

    static <V> V await(Future<V> f) throws Exception {
        return f.get(10, TimeUnit.SECONDS);
    }

    /** A handler recording where and with what it ran. */
    static final class Recorder<V> implements CompletionHandler<V, String> {
        final CompletableFuture<V> result = new CompletableFuture<>();
        volatile Thread thread;
        volatile String attachment;

        @Override
        public void completed(V v, String a) {
            thread = Thread.currentThread();
            attachment = a;
            result.complete(v);
        }

        @Override
        public void failed(Throwable exc, String a) {
            thread = Thread.currentThread();
            attachment = a;
            result.completeExceptionally(exc);
        }

        V get() throws Exception {
            return result.get(10, TimeUnit.SECONDS);
        }

        Throwable failure() throws Exception {
            try {
                result.get(10, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                return e.getCause();
            }
            throw new AssertionError("the handler's completed() ran, not failed()");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"heap", "direct", "shared", "auto", "global", "heap-slice"})
    void writeThenReadBothForms(String k) throws Exception {
        IntFunction<ByteBuffer> alloc = kind(k);
        Path f = dir.resolve("rw-" + k);
        byte[] data = pattern(10_000, k.length());
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, CREATE, WRITE, READ)) {
            assertInstanceOf(OverlapAsynchronousFileChannel.class, ch);
            // Future form: write at 0
            ByteBuffer w = alloc.apply(data.length);
            w.put(data).flip();
            assertEquals(data.length, await(ch.write(w, 0)));
            assertEquals(data.length, w.position(), "the buffer's position advances by the bytes written");
            // CompletionHandler form: write the same at 20_000
            ByteBuffer w2 = alloc.apply(data.length);
            w2.put(data).flip();
            Recorder<Integer> rw = new Recorder<>();
            ch.write(w2, 20_000, "att-w", rw);
            assertEquals(data.length, rw.get());
            assertEquals("att-w", rw.attachment);
            assertEquals(data.length, w2.position());
            assertEquals(30_000, ch.size());

            // Future form: read from 0 into a buffer whose position is 100
            ByteBuffer r = alloc.apply(data.length + 100);
            r.position(100);
            assertEquals(data.length, await(ch.read(r, 0)));
            assertEquals(data.length + 100, r.position());
            byte[] got = new byte[data.length];
            r.position(100);
            r.get(got);
            assertTrue(Arrays.equals(data, got), "the bytes read are the bytes written");
            // Handler form: read across the hole and the second copy
            ByteBuffer r2 = alloc.apply(20_000);
            Recorder<Integer> rr = new Recorder<>();
            ch.read(r2, 10_000, "att-r", rr);
            assertEquals(20_000, rr.get());
            assertEquals(20_000, r2.position());
            r2.flip();
            byte[] hole = new byte[10_000];
            r2.get(hole);
            assertTrue(Arrays.equals(new byte[10_000], hole), "the hole reads as zeros");
            r2.get(got);
            assertTrue(Arrays.equals(data, got));
            // a short read near the end, then -1 at the end, 0 for an empty buffer
            ByteBuffer r3 = alloc.apply(4096);
            assertEquals(1000, await(ch.read(r3, 29_000)));
            assertEquals(1000, r3.position());
            assertEquals(-1, await(ch.read(alloc.apply(4096), 30_000)));
            assertEquals(-1, await(ch.read(alloc.apply(4096), 1L << 40)));
            Recorder<Integer> eof = new Recorder<>();
            ch.read(alloc.apply(10), 30_000, null, eof);
            assertEquals(-1, eof.get());
            assertEquals(0, await(ch.read(alloc.apply(0), 0)));
            assertEquals(0, await(ch.write(alloc.apply(0), 0)));
        }
    }

    @Test
    void argumentsAreCheckedAtTheCallAsTheJdkDoes() throws Exception {
        Path f = dir.resolve("args");
        Files.write(f, new byte[100]);
        try (AsynchronousFileChannel ro = OverlapAsynchronousFileChannel.open(f, READ);
             AsynchronousFileChannel wo = OverlapAsynchronousFileChannel.open(f, WRITE)) {
            ByteBuffer b = ByteBuffer.allocate(10);
            assertThrows(IllegalArgumentException.class, () -> ro.read(b, -1));
            assertThrows(IllegalArgumentException.class, () -> ro.read(ByteBuffer.allocate(4).asReadOnlyBuffer(), 0));
            assertThrows(NonWritableChannelException.class, () -> ro.write(b, 0));
            assertThrows(NonReadableChannelException.class, () -> wo.read(b, 0));
            assertThrows(NullPointerException.class, () -> ro.read(b, 0, null, null));
            assertThrows(NullPointerException.class, () -> ro.read(null, 0));
            assertThrows(IllegalArgumentException.class, () -> wo.write(b, -5));
            assertThrows(NonWritableChannelException.class, () -> ro.truncate(0));
            assertThrows(IllegalArgumentException.class, () -> wo.truncate(-1));
            assertThrows(NonWritableChannelException.class, () -> ro.lock());
            assertThrows(NonReadableChannelException.class, () -> wo.lock(0, 10, true));
            assertThrows(IllegalArgumentException.class, () -> wo.lock(-1, 10, false));
            assertThrows(IllegalArgumentException.class, () -> wo.tryLock(0, -10, false));
        }
        assertThrows(UnsupportedOperationException.class,
                () -> OverlapAsynchronousFileChannel.open(f, WRITE, StandardOpenOption.APPEND));
        assertThrows(java.nio.file.NoSuchFileException.class,
                () -> OverlapAsynchronousFileChannel.open(dir.resolve("missing"), READ));
        assertThrows(java.nio.file.FileAlreadyExistsException.class,
                () -> OverlapAsynchronousFileChannel.open(f, WRITE, StandardOpenOption.CREATE_NEW));
        try (Arena confined = Arena.ofConfined();
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ)) {
            assertThrows(IllegalStateException.class, () -> ch.read(confined.allocate(10).asByteBuffer(), 0));
        }
    }

    @Test
    void closedChannelFailsWithClosedChannelException() throws Exception {
        Path f = dir.resolve("closed");
        Files.write(f, new byte[100]);
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, Set.of(READ, WRITE), named);
        ch.close();
        assertFalse(ch.isOpen());
        ch.close(); // again: nothing
        ExecutionException e = assertThrows(ExecutionException.class, () -> await(ch.read(ByteBuffer.allocate(10), 0)));
        assertInstanceOf(ClosedChannelException.class, e.getCause());
        e = assertThrows(ExecutionException.class, () -> await(ch.write(ByteBuffer.allocate(10), 0)));
        assertInstanceOf(ClosedChannelException.class, e.getCause());
        e = assertThrows(ExecutionException.class, () -> await(ch.lock()));
        assertInstanceOf(ClosedChannelException.class, e.getCause());
        Recorder<Integer> h = new Recorder<>();
        ch.read(ByteBuffer.allocate(10), 0, "x", h);
        assertInstanceOf(ClosedChannelException.class, h.failure());
        assertTrue(h.thread.getName().startsWith("callers-executor-"), "failed() ran on the channel's executor");
        assertThrows(ClosedChannelException.class, ch::size);
        assertThrows(ClosedChannelException.class, () -> ch.force(true));
        assertThrows(ClosedChannelException.class, () -> ch.tryLock());
        assertThrows(ClosedChannelException.class, () -> ch.truncate(0));
        assertFalse(named.isShutdown(), "closing the channel never shuts the caller's executor down");
    }

    @Test
    void handlersRunOnTheGivenExecutorNeverOnAnEngineThread() throws Exception {
        Path f = dir.resolve("exec");
        Files.write(f, pattern(8192, 1));
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, Set.of(READ), named)) {
            for (int i = 0; i < 20; i++) {
                Recorder<Integer> h = new Recorder<>();
                ch.read(ByteBuffer.allocateDirect(4096), i * 100, null, h);
                h.get();
                assertTrue(h.thread.getName().startsWith("callers-executor-"), h.thread.getName());
            }
        }
        assertFalse(named.isShutdown());
    }

    @Test
    void defaultGroupThreadsComeFromTheConfiguredThreadFactory() throws Exception {
        assertEquals(CountingThreadFactory.class.getName(), System.getProperty(DefaultGroup.THREAD_FACTORY),
                "the test JVM names the factory (pom.xml)");
        Path f = dir.resolve("group");
        Files.write(f, pattern(8192, 1));
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ)) {
            Recorder<Integer> h = new Recorder<>();
            ch.read(ByteBuffer.allocate(100), 0, null, h);
            assertEquals(100, h.get());
            assertTrue(h.thread.getName().startsWith("counting-factory-"), h.thread.getName());
            assertTrue(h.thread.isDaemon());
            assertTrue(CountingThreadFactory.CREATED.get() >= 1);
        }
    }

    /** The proof the engine did the I/O: its counters moved by what was asked, and no Java pool read. */
    @Test
    void theEnginePerformedTheIo() throws Exception {
        OverlapEngine e = OverlapEngine.shared();
        Path f = dir.resolve("engine");
        Files.write(f, pattern(64 * 4096, 3));
        int n = 200;
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, Set.of(READ), named)) {
            OverlapEngine.Stats before = e.stats();
            List<Future<Integer>> fs = new ArrayList<>();
            List<ByteBuffer> bufs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                ByteBuffer b = ByteBuffer.allocateDirect(4096);
                bufs.add(b);
                fs.add(ch.read(b, (i % 64) * 4096L));
            }
            for (Future<Integer> fu : fs) {
                assertEquals(4096, await(fu));
            }
            OverlapEngine.Stats after = e.stats();
            long submitted = after.submitted() - before.submitted();
            long bytes = after.bytesRead() - before.bytesRead();
            System.out.printf("engine %s: %d reads submitted, %d bytes read, %d async, %d inline, %d pool, %d aio%n",
                    e.driver(), submitted, bytes, after.completedAsync() - before.completedAsync(),
                    after.completedInline() - before.completedInline(),
                    after.submittedPool() - before.submittedPool(), after.submittedAio() - before.submittedAio());
            assertTrue(submitted >= n, "the engine accepted the reads: " + submitted);
            assertTrue(bytes >= (long) n * 4096, "the engine read the bytes: " + bytes);
            // no thread of a JDK pool (or any Java thread) called pread: the only Java threads of the
            // library are the reapers and the handler group, and none of them reads.
            if (e.driver().equals("uring")) {
                assertEquals(0, after.submittedPool() - before.submittedPool(), "io_uring did them all");
            } else {
                String forced = System.getenv("OVERLAP_DRIVER");
                if (forced != null && !forced.isEmpty()) {
                    // chosen, not a lack of io_uring: scripts/test's no-uring check must not count it
                    System.out.println("NOTE: the engine runs on OVERLAP_DRIVER=" + forced
                            + ": checked the fallback's counters instead");
                } else {
                    System.out.println("SKIPPED: io_uring unavailable (" + e.fallbackReason()
                            + "): checked the fallback's counters instead");
                }
                // page-cache hits complete inline (a non-blocking attempt as they are submitted), the
                // rest go to the engine's pool or Linux AIO
                assertTrue(after.submittedPool() - before.submittedPool() + after.submittedAio() - before.submittedAio()
                        + after.completedInline() - before.completedInline() >= n, "the engine's fallback did them");
            }
        }
    }

    @Test
    void closeFailsOperationsInFlightWithAsynchronousCloseException() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-close");
        OverlapEngine e = OverlapEngine.shared();
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(fifo, Set.of(READ, WRITE), named);
        Future<Integer> heap = ch.read(ByteBuffer.allocate(100), 0);
        Future<Integer> direct = ch.read(ByteBuffer.allocateDirect(100), 0);
        Arena arena = Arena.ofShared();
        Future<Integer> shared = ch.read(arena.allocate(100).asByteBuffer(), 0);
        Recorder<Integer> h = new Recorder<>();
        ch.read(ByteBuffer.allocate(100), 0, "h", h);
        Thread.sleep(100);
        assertFalse(heap.isDone() || direct.isDone() || shared.isDone() || h.result.isDone(),
                "reads of an empty FIFO are in flight");
        long t0 = System.nanoTime();
        ch.close();
        for (Future<Integer> fu : List.of(heap, direct, shared)) {
            ExecutionException x = assertThrows(ExecutionException.class, () -> fu.get(2, TimeUnit.SECONDS));
            assertInstanceOf(AsynchronousCloseException.class, x.getCause());
        }
        assertInstanceOf(AsynchronousCloseException.class, h.failure());
        assertTrue(h.thread.getName().startsWith("callers-executor-"));
        assertTrue(System.nanoTime() - t0 < 3_000_000_000L, "promptly");
        // The caller may free its memory now: the shared arena closes (the kernel has a copy of
        // the library's, not the arena's memory).
        arena.close();
        if (e.driver().equals("uring")) {
            // the kernel was asked to stop them, and did (a read of an empty FIFO stops at once)
            assertTrue(e.ops.values().stream().noneMatch(op -> op.channel == ch), "stopped in the kernel");
        } else {
            // nothing stops them here: the library's memory stays until they are reaped
            assertTrue(e.ops.values().stream().anyMatch(op -> op.channel == ch), "still in flight in the kernel");
        }
        TestSupport.feed(fifo, 400);
        assertTrue(TestSupport.waitUntil(() -> e.ops.values().stream().noneMatch(op -> op.channel == ch), 10_000),
                "the completions were reaped after the data arrived");
        assertFalse(named.isShutdown());
    }

    @Test
    void futureCancelAsTheJdkDocuments() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-cancel");
        OverlapEngine e = OverlapEngine.shared();
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(fifo, Set.of(READ, WRITE), named);
        ByteBuffer b = ByteBuffer.allocate(10);
        Future<Integer> f = ch.read(b, 0);
        assertThrows(TimeoutException.class, () -> f.get(50, TimeUnit.MILLISECONDS));
        assertTrue(f.cancel(false));
        assertTrue(f.isCancelled());
        assertTrue(f.isDone());
        assertFalse(f.cancel(false), "cancelled once");
        assertThrows(CancellationException.class, f::get);
        assertTrue(ch.isOpen(), "cancel(false) leaves the channel open");
        // cancel(true) closes the channel ("the I/O operation may be interrupted by closing the channel")
        Future<Integer> g = ch.read(ByteBuffer.allocate(10), 0);
        assertTrue(g.cancel(true));
        assertFalse(ch.isOpen());
        assertThrows(CancellationException.class, g::get);
        TestSupport.feed(fifo, 20);
        assertTrue(TestSupport.waitUntil(() -> e.ops.values().stream().noneMatch(op -> op.channel == ch), 10_000));
        assertEquals(0, b.position(), "a cancelled read leaves a heap buffer alone");
        // a completed future cannot be cancelled
        Path f2 = dir.resolve("cancel-done");
        Files.write(f2, new byte[10]);
        try (AsynchronousFileChannel c2 = OverlapAsynchronousFileChannel.open(f2, READ)) {
            Future<Integer> done = c2.read(ByteBuffer.allocate(10), 0);
            assertEquals(10, await(done));
            assertFalse(done.cancel(true));
            assertTrue(c2.isOpen());
        }
    }

    @Test
    void anInterruptedThreadDoesNotCloseTheChannel() throws Exception {
        Path f = dir.resolve("interrupt");
        Files.write(f, pattern(4096, 2));
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, Set.of(READ), named)) {
            CountDownLatch done = new CountDownLatch(1);
            AtomicReference<Object> second = new AtomicReference<>();
            ch.read(ByteBuffer.allocate(100), 0, null, new CompletionHandler<Integer, Void>() {
                @Override
                public void completed(Integer n, Void v) {
                    Thread.currentThread().interrupt();
                    try {
                        second.set(ch.read(ByteBuffer.allocate(100), 0).get());
                    } catch (Exception x) {
                        second.set(x);
                    }
                    done.countDown();
                }

                @Override
                public void failed(Throwable exc, Void v) {
                    second.set(exc);
                    done.countDown();
                }
            });
            assertTrue(done.await(10, TimeUnit.SECONDS));
            // the get() above either had its result already or was interrupted (as Future.get
            // must be); either way the channel stays open
            assertTrue(second.get() instanceof InterruptedException || Integer.valueOf(100).equals(second.get()),
                    String.valueOf(second.get()));
            assertTrue(ch.isOpen());
            Thread.currentThread().interrupt();
            Future<Integer> r = ch.read(ByteBuffer.allocate(100), 0);
            assertTrue(Thread.interrupted(), "the caller's interrupt status is left as it was");
            assertEquals(100, await(r));
            assertTrue(ch.isOpen());
            // the handler thread's interrupt was cleared after the handler (as the JDK's Invoker does)
            Recorder<Integer> h = new Recorder<>();
            ch.read(ByteBuffer.allocate(10), 0, null, h);
            assertEquals(10, h.get());
        }
    }

    @Test
    void sizeTruncateNeverGrowsForce() throws Exception {
        Path f = dir.resolve("size");
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, CREATE, READ, WRITE)) {
            assertEquals(0, ch.size());
            assertEquals(5000, await(ch.write(ByteBuffer.wrap(pattern(5000, 0)), 0)));
            assertEquals(5000, ch.size());
            assertEquals(ch, ch.truncate(10_000));
            assertEquals(5000, ch.size(), "truncate never grows the file");
            ch.truncate(1234);
            assertEquals(1234, ch.size());
            assertEquals(1234, Files.size(f));
            OverlapEngine.Stats before = OverlapEngine.shared().stats();
            ch.force(true);
            ch.force(false);
            OverlapEngine.Stats after = OverlapEngine.shared().stats();
            assertTrue(after.submitted() - before.submitted() >= 2,
                    "fsync and fdatasync went through the engine: " + (after.submitted() - before.submitted()));
        }
    }

    @Test
    void syncAndDsyncOpenWriteThrough() throws Exception {
        Path f = dir.resolve("sync");
        try (OverlapAsynchronousFileChannel s = OverlapAsynchronousFileChannel.open(f, CREATE, WRITE,
                StandardOpenOption.SYNC);
             OverlapAsynchronousFileChannel d = OverlapAsynchronousFileChannel.open(f, WRITE, StandardOpenOption.DSYNC);
             OverlapAsynchronousFileChannel p = OverlapAsynchronousFileChannel.open(f, WRITE)) {
            assertEquals(Native.O_SYNC, TestSupport.fdFlags(s.fd()) & Native.O_SYNC, "SYNC is O_SYNC");
            assertEquals(Native.O_DSYNC, TestSupport.fdFlags(d.fd()) & Native.O_SYNC, "DSYNC is O_DSYNC");
            assertEquals(0, TestSupport.fdFlags(p.fd()) & Native.O_DSYNC);
            assertEquals(3, await(s.write(ByteBuffer.wrap(new byte[]{1, 2, 3}), 0)));
            assertEquals(3, await(d.write(ByteBuffer.wrap(new byte[]{1, 2, 3}), 3)));
        }
    }

    @Test
    void directIoWithTheKernelsAlignment() throws Exception {
        Path f = dir.resolve("direct");
        Files.write(f, pattern(1 << 20, 5));
        OverlapAsynchronousFileChannel ch;
        try {
            ch = OverlapAsynchronousFileChannel.open(f, READ, WRITE, com.sun.nio.file.ExtendedOpenOption.DIRECT);
        } catch (java.nio.file.FileSystemException e) {
            System.out.println("SKIPPED: O_DIRECT: the file system of " + dir + " refuses it: " + e.getMessage());
            return;
        }
        try (ch) {
            assertEquals(Native.O_DIRECT, TestSupport.fdFlags(ch.fd()) & Native.O_DIRECT);
            int align = ch.directAlignment();
            assertTrue(align >= 512 && Integer.bitCount(align) == 1, "alignment " + align);
            ByteBuffer b = ByteBuffer.allocateDirect(8192 + 4096).alignedSlice(4096).limit(8192);
            assertEquals(8192, await(ch.read(b, 8192)));
            byte[] want = Arrays.copyOfRange(pattern(1 << 20, 5), 8192, 16384);
            byte[] got = new byte[8192];
            b.flip().get(got);
            assertTrue(Arrays.equals(want, got));
            // a heap buffer goes through aligned library memory
            ByteBuffer h = ByteBuffer.allocate(4096);
            assertEquals(4096, await(ch.read(h, 4096)));
            assertEquals(4096, await(ch.write(ByteBuffer.wrap(pattern(4096, 9)), 0)));
            // a misaligned position fails with an IOException saying why
            ExecutionException x = assertThrows(ExecutionException.class,
                    () -> await(ch.read(ByteBuffer.allocateDirect(8192).alignedSlice(4096), align / 2)));
            assertInstanceOf(IOException.class, x.getCause());
            System.out.println("misaligned O_DIRECT read: " + x.getCause().getMessage());
        }
    }

    /**
     * Buffers whose memory outlives the operation (allocateDirect, Arena.global(), Arena.ofAuto())
     * go to the kernel as they are, no copy: a check of the scope classes the channel recognises,
     * which a JDK that renamed them would fail (buffers would be copied, correctly but slower).
     */
    @Test
    void directAndLongLivedSegmentBuffersAreNotCopied() throws Exception {
        Path f = dir.resolve("nocopy");
        Files.write(f, pattern(2 * 8192, 5));
        try (OverlapEngine e = OverlapEngine.create(new OverlapEngine.Options("auto", 0, 1 << 20, 0, 1))) {
            AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ, WRITE), named);
            List<ByteBuffer> bufs = List.of(ByteBuffer.allocateDirect(8192),
                    java.lang.foreign.Arena.global().allocate(8192).asByteBuffer(),
                    java.lang.foreign.Arena.ofAuto().allocate(8192).asByteBuffer());
            for (ByteBuffer b : bufs) {
                assertEquals(8192, await(ch.read(b, 0)));
                b.flip();
                assertEquals(8192, await(ch.write(b, 8192)));
            }
            assertEquals(0, e.stats().copyBytesHighWater(), "no copy was made for those buffers");
            // and the counter does see a copy: a heap buffer's write (a heap read may be answered
            // from the page cache into the array itself)
            assertEquals(4096, await(ch.write(ByteBuffer.wrap(pattern(4096, 6)), 0)));
            assertTrue(e.stats().copyBytesHighWater() > 0);
            ch.close();
        }
    }

    /** A write flood against a FIFO nobody reads: the caller waits at the budget; memory stays bounded. */
    @Test
    void heapWritesWaitAtTheBudget() throws Exception {
        long budget = 1 << 20;
        try (OverlapEngine e = OverlapEngine.create(new OverlapEngine.Options("auto", 0, budget, 0, 1))) {
            Path fifo = TestSupport.fifo(dir, "fifo-flood");
            AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, fifo, Set.of(READ, WRITE), named);
            int writes = 48, size = 64 * 1024; // 3 MiB, 3x the budget
            List<Future<Integer>> fs = new ArrayList<>();
            AtomicInteger submitted = new AtomicInteger();
            Thread writer = new Thread(() -> {
                for (int i = 0; i < writes; i++) {
                    fs.add(ch.write(ByteBuffer.wrap(pattern(size, i)), 0));
                    submitted.incrementAndGet();
                }
            });
            writer.setDaemon(true);
            writer.start();
            writer.join(1000);
            assertTrue(writer.isAlive(), "the writer waits at the budget (submitted " + submitted + ")");
            OverlapEngine.Stats s = e.stats();
            System.out.printf("flood: %d of %d writes submitted, %d copy bytes held (budget %d), %d waits%n",
                    submitted.get(), writes, s.copyBytesInUse(), budget, s.javaBackpressureWaits());
            assertTrue(s.copyBytesInUse() <= budget, "copies within the budget");
            assertTrue(submitted.get() < writes);
            assertTrue(s.javaBackpressureWaits() > 0);
            // drain the FIFO: the writer finishes, every write completes
            Thread reader = new Thread(() -> {
                try (java.io.RandomAccessFile raf = new java.io.RandomAccessFile(fifo.toFile(), "r")) {
                    byte[] buf = new byte[65536];
                    long total = 0;
                    while (total < (long) writes * size) {
                        int n = raf.read(buf);
                        if (n < 0) {
                            break;
                        }
                        total += n;
                    }
                } catch (IOException x) {
                    throw new RuntimeException(x);
                }
            });
            reader.setDaemon(true);
            reader.start();
            writer.join(20_000);
            assertFalse(writer.isAlive());
            long total = 0;
            for (Future<Integer> fu : fs) {
                total += fu.get(20, TimeUnit.SECONDS);
            }
            assertEquals((long) writes * size, total);
            reader.join(10_000);
            assertTrue(e.stats().copyBytesHighWater() <= budget, "never more than the budget in copies");
            assertEquals(0, e.stats().copyBytesInUse());
            ch.close();
        }
    }

    @Test
    void libraryThreadsAreFewAndDaemons() throws Exception {
        Path f = dir.resolve("threads");
        Files.write(f, pattern(1 << 16, 1));
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ)) {
            CountDownLatch l = new CountDownLatch(500);
            for (int i = 0; i < 500; i++) {
                ch.read(ByteBuffer.allocate(512), (i % 128) * 512L, null, new CompletionHandler<Integer, Void>() {
                    @Override public void completed(Integer r, Void a) { l.countDown(); }
                    @Override public void failed(Throwable exc, Void a) { l.countDown(); }
                });
            }
            assertTrue(l.await(20, TimeUnit.SECONDS));
        }
        OverlapEngine shared = OverlapEngine.shared();
        List<String> names = new ArrayList<>();
        long lib = Thread.getAllStackTraces().keySet().stream()
                .filter(t -> t.getName().startsWith("overlap-") || t.getName().startsWith("counting-factory-"))
                .peek(t -> assertTrue(t.isDaemon(), t.getName() + " is a daemon"))
                .filter(t -> OverlapEngine.engineOf(t) == null || OverlapEngine.engineOf(t) == shared)
                .peek(t -> names.add(t.getName()))
                .count();
        // the shared engine's reapers and standby, the default group's pool, the lock retrier
        // (other engines are tests')
        assertTrue(lib <= 8, "at most 8 library threads, saw " + names);
        assertNotEquals(0, lib);
    }

    /**
     * A Future read of a range the page cache holds is complete when read returns (one preadv2 with
     * RWF_NOWAIT on the caller, counted by the engine as an inline completion, no port operation);
     * with cached reads off, or for a handler, it goes through the port. Heap and direct buffers.
     */
    @Test
    void aCachedFutureReadIsCompleteOnReturn() throws Exception {
        Path f = dir.resolve("cached-future");
        byte[] data = pattern(1 << 16, 9);
        Files.write(f, data); // just written: cached
        for (boolean cached : new boolean[] {true, false}) {
            try (OverlapEngine e = OverlapEngine.create(new OverlapEngine.Options("auto", 0, 0, 0, 1, -1, cached));
                 AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), named)) {
                OverlapEngine.Stats before = e.stats();
                ByteBuffer heap = ByteBuffer.allocate(4096);
                Future<Integer> r = ch.read(heap, 8192);
                if (cached) {
                    assertTrue(r.isDone(), "complete on return");
                }
                assertEquals(4096, r.get(10, TimeUnit.SECONDS));
                assertEquals(4096, heap.position());
                assertArrayEquals(Arrays.copyOfRange(data, 8192, 8192 + 4096), heap.array());
                ByteBuffer direct = ByteBuffer.allocateDirect(1000);
                direct.position(10);
                assertEquals(990, ch.read(direct, 100).get(10, TimeUnit.SECONDS));
                byte[] got = new byte[990];
                direct.position(10);
                direct.get(got);
                assertArrayEquals(Arrays.copyOfRange(data, 100, 1090), got);
                // end of file: -1, and a short read before it
                assertEquals(-1, ch.read(ByteBuffer.allocate(10), data.length + 5).get(10, TimeUnit.SECONDS));
                assertEquals(6, ch.read(ByteBuffer.allocate(10), data.length - 6).get(10, TimeUnit.SECONDS));
                // (at least: the engine may complete an operation of the channel's own meanwhile,
                // seen once in CI)
                OverlapEngine.Stats after = e.stats();
                assertTrue(after.completed() - before.completed() >= 4, "the engine did the reads");
                if (cached) {
                    assertTrue(after.completedInline() - before.completedInline() >= 4, "inline");
                }
                // a handler is never run by the calling thread: it goes through the port
                CompletableFuture<Thread> ran = new CompletableFuture<>();
                ch.read(ByteBuffer.allocate(16), 0, null, new CompletionHandler<Integer, Void>() {
                    @Override public void completed(Integer n, Void a) { ran.complete(Thread.currentThread()); }
                    @Override public void failed(Throwable exc, Void a) { ran.completeExceptionally(exc); }
                });
                assertNotEquals(Thread.currentThread(), ran.get(10, TimeUnit.SECONDS));
            }
        }
    }
}
