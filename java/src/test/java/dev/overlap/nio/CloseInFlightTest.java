package dev.overlap.nio;

import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.CompletionHandler;
import java.nio.channels.ShutdownChannelGroupException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static java.nio.file.StandardOpenOption.CREATE;
import static java.nio.file.StandardOpenOption.READ;
import static java.nio.file.StandardOpenOption.WRITE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Closing a channel, and shutting its engine down, with reads and writes in flight: no buffer
 * goes back to its caller while the kernel may still touch it (docs/acknowledged-bytes.md,
 * section 3), and every call after an engine's shutdown fails at once (section 5).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class CloseInFlightTest {
    @TempDir
    Path dir;

    static final byte SENTINEL = 0x11;
    static final byte FED = 0x5a;

    /** Writes n bytes of FED into a FIFO (opened read-write, so the open never blocks). */
    static void feed(Path fifo, int n) throws Exception {
        byte[] b = new byte[n];
        java.util.Arrays.fill(b, FED);
        try (RandomAccessFile raf = new RandomAccessFile(fifo.toFile(), "rw")) {
            raf.write(b);
        }
    }

    static boolean all(ByteBuffer b, byte v) {
        for (int i = 0; i < b.limit(); i++) {
            if (b.get(i) != v) {
                return false;
            }
        }
        return true;
    }

    /**
     * Reads of a FIFO into direct buffers, close, the caller reuses each buffer as soon as its read
     * reported: data that arrives later never lands in a reused buffer. (The JDK's close
     * interrupts such a read; here the kernel reads into the library's copy, which close leaves
     * to it.)
     */
    @Test
    void fifoReadsEndedByCloseNeverTouchTheReusedBuffers() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo");
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(fifo, READ, WRITE);
        List<ByteBuffer> bufs = new ArrayList<>();
        List<Future<Integer>> reads = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            ByteBuffer b = ByteBuffer.allocateDirect(4096);
            bufs.add(b);
            reads.add(ch.read(b, 0));
        }
        Thread.sleep(100);
        for (Future<Integer> f : reads) {
            assertFalse(f.isDone(), "reads of an empty FIFO are in flight");
        }
        long t0 = System.nanoTime();
        ch.close();
        for (int i = 0; i < 3; i++) {
            int k = i;
            ExecutionException x = assertThrows(ExecutionException.class, () -> reads.get(k).get(5, TimeUnit.SECONDS));
            assertInstanceOf(AsynchronousCloseException.class, x.getCause());
            for (int j = 0; j < 4096; j++) {
                bufs.get(i).put(j, SENTINEL); // reused by its owner
            }
        }
        assertTrue(System.nanoTime() - t0 < 5_000_000_000L, "close does not wait for a FIFO's reads");
        feed(fifo, 3 * 4096);
        OverlapEngine e = OverlapEngine.shared();
        assertTrue(TestSupport.waitUntil(() -> e.ops.values().stream().noneMatch(op -> op.channel == ch), 10_000),
                "the reads completed in the kernel");
        int changed = 0;
        for (ByteBuffer b : bufs) {
            changed += all(b, SENTINEL) ? 0 : 1;
        }
        assertEquals(0, changed, changed + " of 3 reused buffers were written after their read reported");
    }

    /**
     * On io_uring close stops a FIFO's reads in the kernel, as the JDK's close interrupts them:
     * data written to the FIFO afterwards is there for its next reader, not taken by a read that
     * already reported AsynchronousCloseException.
     */
    @Test
    void fifoReadsStoppedByCloseLeaveTheDataToTheNextReader() throws Exception {
        Path fifo = TestSupport.fifo(dir, "fifo-stop");
        OverlapAsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(fifo, READ, WRITE);
        List<Future<Integer>> reads = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            reads.add(ch.read(ByteBuffer.allocateDirect(4096), 0));
        }
        Thread.sleep(100);
        ch.close();
        for (Future<Integer> f : reads) {
            ExecutionException x = assertThrows(ExecutionException.class, () -> f.get(5, TimeUnit.SECONDS));
            assertInstanceOf(AsynchronousCloseException.class, x.getCause());
        }
        if (!ch.engine().driver().equals("uring")) {
            System.out.println("SKIPPED: a FIFO read cannot be stopped on " + ch.engine().driver()
                    + " (a blocking read on the pool): it takes the next data, into the library's copy");
            feed(fifo, 3 * 4096);
            return;
        }
        byte[] got = new byte[3 * 4096];
        Thread reader = Thread.ofPlatform().daemon().start(() -> {
            try (RandomAccessFile raf = new RandomAccessFile(fifo.toFile(), "rw")) {
                byte[] b = new byte[got.length];
                java.util.Arrays.fill(b, FED);
                raf.write(b);
                Thread.sleep(300); // a read still pending in the kernel would take the data meanwhile
                raf.readFully(got);
            } catch (java.io.IOException | InterruptedException x) {
                throw new RuntimeException(x);
            }
        });
        reader.join(5_000);
        assertFalse(reader.isAlive(), "the next reader got every byte (none taken by a read close ended)");
        assertTrue(all(ByteBuffer.wrap(got), FED));
    }

    /** Opens with O_DIRECT, or null (printing SKIPPED) where the file system refuses it. */
    static OverlapAsynchronousFileChannel openDirect(OverlapEngine e, Path f, ExecutorService ex) throws Exception {
        try {
            return OverlapAsynchronousFileChannel.open(e, f, Set.of(READ, WRITE, CREATE,
                    com.sun.nio.file.ExtendedOpenOption.DIRECT), ex);
        } catch (java.nio.file.FileSystemException x) {
            System.out.println("SKIPPED: O_DIRECT: the file system of " + f + " refuses it: " + x.getMessage());
            return null;
        }
    }

    static final int OPS = 256, SIZE = 64 * 1024;

    /**
     * An O_DIRECT file, 256 reads and writes in flight of direct buffers, close; then the caller
     * overwrites every buffer: no buffer changes after that, no write's bytes appear unless it
     * reported success, and nothing the caller put in a buffer after close reaches the file.
     */
    @Test
    void closeWithDirectIoInFlightGivesNoBufferBackEarly() throws Exception {
        Path f = dir.resolve("direct");
        byte[] old = new byte[OPS * SIZE];
        for (int i = 0; i < old.length; i++) {
            old[i] = (byte) (i % 251 == 0 ? 1 : 0x20 + i % 7); // never SENTINEL
        }
        Files.write(f, old);
        OverlapAsynchronousFileChannel ch = openDirect(OverlapEngine.shared(), f, null);
        if (ch == null) {
            return;
        }
        List<ByteBuffer> bufs = new ArrayList<>();
        List<Future<Integer>> ops = new ArrayList<>();
        for (int i = 0; i < OPS; i++) {
            ByteBuffer b = ByteBuffer.allocateDirect(SIZE + 4096).alignedSlice(4096).limit(SIZE);
            if (i % 2 == 1) {
                for (int j = 0; j < SIZE; j++) {
                    b.put(j, (byte) (0x40 + i % 64));
                }
            }
            bufs.add(b);
            ops.add(i % 2 == 0 ? ch.read(b, (long) i * SIZE) : ch.write(b, (long) i * SIZE));
        }
        int pending = 0;
        for (Future<Integer> o : ops) {
            pending += o.isDone() ? 0 : 1;
        }
        ch.close();
        for (ByteBuffer b : bufs) {
            for (int j = 0; j < SIZE; j++) {
                b.put(j, SENTINEL); // every buffer reused at once
            }
        }
        int failedReads = 0, failedWrites = 0;
        boolean[] failed = new boolean[OPS];
        for (int i = 0; i < OPS; i++) {
            try {
                assertEquals(SIZE, ops.get(i).get(10, TimeUnit.SECONDS));
            } catch (ExecutionException x) {
                assertInstanceOf(AsynchronousCloseException.class, x.getCause());
                failed[i] = true;
                if (i % 2 == 0) {
                    failedReads++;
                } else {
                    failedWrites++;
                }
            }
        }
        Thread.sleep(200); // a kernel still holding a buffer would write it meanwhile
        int changed = 0;
        for (ByteBuffer b : bufs) {
            changed += all(b, SENTINEL) ? 0 : 1;
        }
        byte[] now = Files.readAllBytes(f);
        long foreign = 0;
        int wrong = 0;
        for (int i = 1; i < OPS; i += 2) {
            boolean ok = !failed[i];
            boolean agrees = true;
            for (int j = 0; j < SIZE; j++) {
                byte got = now[i * SIZE + j];
                if (got == SENTINEL) {
                    foreign++;
                }
                agrees &= ok ? got == (byte) (0x40 + i % 64) : got == old[i * SIZE + j];
            }
            wrong += agrees ? 0 : 1;
        }
        System.out.printf("close with %d of %d O_DIRECT operations in flight: %d reads and %d writes failed;"
                + " %d buffers changed after close, %d bytes of the caller's later data in the file%n",
                pending, OPS, failedReads, failedWrites, changed, foreign);
        if (pending == 0) {
            // Nothing raced close: the assertions below hold trivially. Said, not passed silently.
            System.out.println("SKIPPED: close with O_DIRECT operations in flight: the device answered all " + OPS
                    + " within their submissions, so none was in flight at close (the FIFO tests race close"
                    + " with reads that stay in flight)");
        }
        assertEquals(0, changed, "buffers written by the kernel after close returned and their reads reported");
        assertEquals(0, foreign, "bytes the caller put in buffers after close reached the file");
        assertEquals(0, wrong, "writes whose file range disagrees with what they reported");
    }

    /**
     * After an engine's shutdown every read and write (handler and future forms) throws
     * ShutdownChannelGroupException at once, as does opening a channel on it; what was in flight
     * completed and was delivered, and is in the file.
     */
    @Test
    void afterEngineShutdownEveryCallFailsAtOnce() throws Exception {
        ExecutorService ex = Executors.newFixedThreadPool(2);
        try {
            OverlapEngine e = OverlapEngine.create(new OverlapEngine.Options("auto", 0, 0, 0, 1));
            Path f = dir.resolve("shutdown");
            AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ, WRITE, CREATE), ex);
            List<CompletableFuture<Integer>> done = new ArrayList<>();
            for (int i = 0; i < 64; i++) {
                CompletableFuture<Integer> c = new CompletableFuture<>();
                done.add(c);
                ch.write(ByteBuffer.wrap(ChannelTest.pattern(4096, i)), i * 4096L, c, handlerOf());
            }
            e.close();
            long total = 0;
            for (CompletableFuture<Integer> c : done) {
                assertTrue(c.isDone() || c.get(10, TimeUnit.SECONDS) != null);
                total += c.get();
            }
            assertEquals(64 * 4096, total, "the writes in flight completed and were delivered");
            assertEquals(64 * 4096, Files.size(f));
            CompletableFuture<Integer> late = new CompletableFuture<>();
            assertThrows(ShutdownChannelGroupException.class,
                    () -> ch.read(ByteBuffer.allocate(10), 0, late, handlerOf()));
            assertThrows(ShutdownChannelGroupException.class,
                    () -> ch.write(ByteBuffer.allocate(10), 0, late, handlerOf()));
            assertThrows(ShutdownChannelGroupException.class, () -> ch.read(ByteBuffer.allocate(10), 0));
            assertThrows(ShutdownChannelGroupException.class, () -> ch.write(ByteBuffer.allocate(10), 0));
            assertThrows(ShutdownChannelGroupException.class, () -> ch.read(ByteBuffer.allocateDirect(10), 0));
            assertThrows(ShutdownChannelGroupException.class,
                    () -> OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), ex));
            assertFalse(late.isDone());
            ch.close();
            assertThrows(java.nio.channels.ClosedChannelException.class, () -> {
                try {
                    ch.read(ByteBuffer.allocate(10), 0).get(5, TimeUnit.SECONDS);
                } catch (ExecutionException x) {
                    throw x.getCause();
                }
            });
        } finally {
            ex.shutdownNow();
        }
    }

    /**
     * A handler that closes its own channel (on the engine's only reaper) with other writes in
     * flight, and one that shuts its own engine down: neither waits for ever (the closing thread
     * reaps the port itself), and every write is delivered and in the file.
     */
    @Test
    void closeAndShutdownFromAHandlerOnTheOnlyReaper() throws Exception {
        for (boolean shutdown : new boolean[] {false, true}) {
            OverlapEngine e = OverlapEngine.create(new OverlapEngine.Options("auto", 0, 0, 0, 1));
            Path f = dir.resolve("from-handler-" + shutdown);
            AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ, WRITE, CREATE), null);
            CompletableFuture<Void> closed = new CompletableFuture<>();
            java.util.concurrent.CountDownLatch submitted = new java.util.concurrent.CountDownLatch(1);
            List<CompletableFuture<Integer>> done = new ArrayList<>();
            for (int i = 0; i < 128; i++) {
                CompletableFuture<Integer> c = new CompletableFuture<>();
                done.add(c);
                boolean first = i == 0;
                ch.write(ByteBuffer.wrap(ChannelTest.pattern(4096, i)), i * 4096L, c, new CompletionHandler<>() {
                    @Override
                    public void completed(Integer n, CompletableFuture<Integer> a) {
                        a.complete(n);
                        if (first) {
                            try {
                                submitted.await(); // every write submitted (the standby reaps meanwhile)
                                if (shutdown) {
                                    e.close();
                                } else {
                                    ch.close();
                                }
                                closed.complete(null);
                            } catch (Throwable x) {
                                closed.completeExceptionally(x);
                            }
                        }
                    }

                    @Override
                    public void failed(Throwable exc, CompletableFuture<Integer> a) {
                        a.completeExceptionally(exc);
                    }
                });
            }
            submitted.countDown();
            closed.get(30, TimeUnit.SECONDS);
            long total = 0;
            for (CompletableFuture<Integer> c : done) {
                total += c.get(30, TimeUnit.SECONDS);
            }
            assertEquals(128 * 4096, total, "every write in flight completed and was delivered");
            assertEquals(128 * 4096, Files.size(f));
            ch.close();
            e.close();
        }
    }

    /** close() on a virtual thread (which never waits in the port) waits for the writes in flight too. */
    @Test
    void closeOnAVirtualThreadWaitsForTheWritesInFlight() throws Exception {
        Path f = dir.resolve("virtual");
        AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ, WRITE, CREATE);
        List<Future<Integer>> ws = new ArrayList<>();
        for (int i = 0; i < 128; i++) {
            ws.add(ch.write(ByteBuffer.allocateDirect(8192).put(ChannelTest.pattern(8192, i)).flip(), i * 8192L));
        }
        Thread v = Thread.ofVirtual().start(() -> {
            try {
                ch.close();
            } catch (java.io.IOException x) {
                throw new java.io.UncheckedIOException(x);
            }
        });
        v.join(30_000);
        assertFalse(v.isAlive(), "close returned");
        for (Future<Integer> w : ws) {
            assertTrue(w.isDone(), "every write was delivered before close returned");
            assertEquals(8192, w.get());
        }
        assertEquals(128 * 8192, Files.size(f));
    }

    static CompletionHandler<Integer, CompletableFuture<Integer>> handlerOf() {
        return new CompletionHandler<>() {
            @Override
            public void completed(Integer n, CompletableFuture<Integer> c) {
                c.complete(n);
            }

            @Override
            public void failed(Throwable exc, CompletableFuture<Integer> c) {
                c.completeExceptionally(exc);
            }
        };
    }
}
