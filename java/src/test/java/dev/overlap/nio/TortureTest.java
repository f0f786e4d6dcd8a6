package dev.overlap.nio;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.CompletionHandler;
import java.nio.channels.ShutdownChannelGroupException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import static java.nio.file.StandardOpenOption.CREATE;
import static java.nio.file.StandardOpenOption.READ;
import static java.nio.file.StandardOpenOption.WRITE;

/**
 * The acknowledged-byte torture suite for the Java channel (docs/acknowledged-bytes.md, section
 * 6): one line {@code torture: FRONT DRIVER SCENARIO ok|FAIL: why|n/a: why|SKIPPED: why} per cell.
 *
 * <p>FRONT: {@code java-handler-*} completes through CompletionHandlers, {@code java-future-*}
 * through Futures; {@code *-default} opens channels without an executor, in the default group
 * (handlers on the engine's own threads; the shared engine, except where the scenario shuts an
 * engine down: the shared one lives as long as the process, so an engine of the test's own, its
 * channels still without an executor), {@code *-group} on an engine of the test's own with an
 * executor of the caller's. DRIVER: the kind the engine really runs ({@code aio+pool} is
 * {@code aio}).
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class TortureTest {
    @TempDir
    Path dir;

    static ExecutorService executor;
    static OverlapEngine groupEngine;

    @BeforeAll
    static void setup() {
        executor = Executors.newFixedThreadPool(3, r -> {
            Thread t = new Thread(r, "torture-group");
            t.setDaemon(true);
            return t;
        });
        groupEngine = OverlapEngine.create(new OverlapEngine.Options("auto", 0, 0, 0, 2));
    }

    @AfterAll
    static void teardown() {
        groupEngine.close();
        executor.shutdownNow();
    }

    // ---------------------------------------------------------------- fronts

    /** How a front end learns of a completion. */
    enum Form { HANDLER, FUTURE }

    /** One front: a form, a group, the engine and executor its channels use. */
    record Front(Form form, boolean group) {
        String name() {
            return "java-" + (form == Form.HANDLER ? "handler" : "future") + (group ? "-group" : "-default");
        }

        OverlapEngine engine() {
            return group ? groupEngine : OverlapEngine.shared();
        }

        ExecutorService executor() {
            return group ? executor : null;
        }

        AsynchronousFileChannel open(OverlapEngine e, Path f) throws IOException {
            return OverlapAsynchronousFileChannel.open(e, f, Set.of(READ, WRITE, CREATE), executor());
        }

        AsynchronousFileChannel open(Path f) throws IOException {
            return open(engine(), f);
        }

        /** With O_DIRECT (the reads stay in flight in the device), or buffered where the file system refuses it. */
        AsynchronousFileChannel openDirect(Path f) throws IOException {
            try {
                return OverlapAsynchronousFileChannel.open(engine(), f, Set.of(READ, WRITE,
                        com.sun.nio.file.ExtendedOpenOption.DIRECT), executor());
            } catch (java.nio.file.FileSystemException x) {
                System.out.println("close-racing-reads: O_DIRECT refused (" + x.getMessage() + "): buffered reads");
                return open(f);
            }
        }

        /** A read or write in this front's form; its outcome as a future. */
        CompletableFuture<Integer> io(AsynchronousFileChannel ch, boolean write, ByteBuffer b, long pos) {
            if (form == Form.HANDLER) {
                CompletableFuture<Integer> c = new CompletableFuture<>();
                if (write) {
                    ch.write(b, pos, c, HANDLER);
                } else {
                    ch.read(b, pos, c, HANDLER);
                }
                return c;
            }
            Future<Integer> f = write ? ch.write(b, pos) : ch.read(b, pos);
            return CompletableFuture.supplyAsync(() -> {
                try {
                    return f.get(60, TimeUnit.SECONDS);
                } catch (ExecutionException x) {
                    throw new java.util.concurrent.CompletionException(x.getCause());
                } catch (Exception x) {
                    throw new java.util.concurrent.CompletionException(x);
                }
            }, GETTERS);
        }
    }

    /** Where a Future's get() waits, so that the Future form is seen as a CompletableFuture too. */
    static final ExecutorService GETTERS = Executors.newVirtualThreadPerTaskExecutor();

    static final CompletionHandler<Integer, CompletableFuture<Integer>> HANDLER = new CompletionHandler<>() {
        @Override
        public void completed(Integer n, CompletableFuture<Integer> c) {
            c.complete(n);
        }

        @Override
        public void failed(Throwable exc, CompletableFuture<Integer> c) {
            c.completeExceptionally(exc);
        }
    };

    static final List<Front> FRONTS = List.of(new Front(Form.HANDLER, false), new Front(Form.HANDLER, true),
            new Front(Form.FUTURE, false), new Front(Form.FUTURE, true));

    static String driverOf(OverlapEngine e) {
        String d = e.driver();
        return d.startsWith("aio") ? "aio" : d;
    }

    /** A cell: runs the check, prints its line; a failure prints FAIL and is rethrown at the end. */
    interface Cell {
        /** Returns null for ok, or "n/a: why" / "SKIPPED: why". */
        String run(Front f, Path dir) throws Exception;
    }

    void cells(String scenario, Cell cell) throws Exception {
        List<String> failed = new ArrayList<>();
        for (Front f : FRONTS) {
            Path d = Files.createDirectories(dir.resolve(f.name() + "-" + scenario));
            String outcome;
            try {
                String r = cell.run(f, d);
                outcome = r == null ? "ok" : r;
            } catch (Throwable t) {
                outcome = "FAIL: " + (t.getMessage() == null ? t.toString() : t.getMessage()).replace('\n', ' ');
                failed.add(f.name() + ": " + outcome);
                t.printStackTrace();
            }
            System.out.println("torture: " + f.name() + " " + driverOf(f.engine()) + " " + scenario + " " + outcome);
        }
        if (!failed.isEmpty()) {
            throw new AssertionError(scenario + ": " + failed);
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static byte[] pattern(int n, int seed) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            b[i] = (byte) (seed * 7 + i / 251 + 1);
        }
        return b;
    }

    static ByteBuffer buffer(byte[] data, boolean direct) {
        ByteBuffer b = direct ? ByteBuffer.allocateDirect(data.length) : ByteBuffer.allocate(data.length);
        b.put(data).flip();
        return b;
    }

    /** The outcome of a future: its count, or -1 if it failed (the failure must be one of {@code allowed}). */
    @SafeVarargs
    static int outcome(CompletableFuture<Integer> c, Class<? extends Throwable>... allowed) throws Exception {
        try {
            return c.get(60, TimeUnit.SECONDS);
        } catch (ExecutionException x) {
            Throwable cause = x.getCause();
            if (cause instanceof IOException io && io.getCause() != null && !(cause instanceof AsynchronousCloseException)) {
                cause = io.getCause(); // a Future wraps what is not an IOException
            }
            for (Class<? extends Throwable> a : allowed) {
                if (a.isInstance(cause)) {
                    return -1;
                }
            }
            throw new AssertionError("unexpected failure: " + cause, cause);
        }
    }

    /** Every acknowledged write ({@code acks[i] >= 0}) of {@code SIZE} bytes at i*SIZE is in the file, whole. */
    static void acknowledgedInFile(Path f, int[] acks, int size, int seedBase) throws IOException {
        byte[] got = Files.readAllBytes(f);
        int acked = 0;
        for (int i = 0; i < acks.length; i++) {
            if (acks[i] < 0) {
                continue;
            }
            acked++;
            byte[] want = Arrays.copyOf(pattern(size, seedBase + i), acks[i]);
            check(got.length >= i * size + acks[i], "write " + i + " acknowledged but the file is short");
            check(Arrays.equals(Arrays.copyOfRange(got, i * size, i * size + acks[i]), want),
                    "write " + i + " acknowledged (" + acks[i] + " bytes) but not in the file");
        }
        check(acked > 0, "no write was acknowledged: nothing checked");
    }

    // ---------------------------------------------------------------- drop-behind

    static final int DROP_WRITES = 64, DROP_SIZE = 16 * 1024;

    /** Writes in flight, then {@code end} (close, drop to GC, engine shutdown); every acknowledged write in the file. */
    static void dropWith(Front f, OverlapEngine e, Path file, java.util.function.Consumer<AsynchronousFileChannel> end)
            throws Exception {
        AsynchronousFileChannel ch = f.open(e, file);
        List<CompletableFuture<Integer>> ws = new ArrayList<>();
        for (int i = 0; i < DROP_WRITES; i++) {
            ws.add(f.io(ch, true, buffer(pattern(DROP_SIZE, i), i % 2 == 0), (long) i * DROP_SIZE));
        }
        end.accept(ch);
        ch = null;
        int[] acks = new int[DROP_WRITES];
        for (int i = 0; i < DROP_WRITES; i++) {
            acks[i] = outcome(ws.get(i), AsynchronousCloseException.class, ShutdownChannelGroupException.class);
        }
        acknowledgedInFile(file, acks, DROP_SIZE, 0);
    }

    @Test
    void dropBehind() throws Exception {
        cells("drop-behind", (f, d) -> {
            dropWith(f, f.engine(), d.resolve("closed"), ch -> {
                try {
                    ch.close();
                } catch (IOException x) {
                    throw new java.io.UncheckedIOException(x);
                }
            });
            dropWith(f, f.engine(), d.resolve("dropped"), ch -> System.gc());
            try (OverlapEngine own = OverlapEngine.create(new OverlapEngine.Options("auto", 0, 0, 0, 1))) {
                dropWith(f, own, d.resolve("shutdown"), ch -> own.close());
            }
            return null;
        });
    }

    // ---------------------------------------------------------------- shared-writers

    static final int THREADS = 8, PER_THREAD = 48, SHARED_SIZE = 4096 + 512;

    @Test
    void sharedWriters() throws Exception {
        cells("shared-writers", (f, d) -> {
            Path file = d.resolve("shared");
            int[] acks = new int[THREADS * PER_THREAD];
            try (AsynchronousFileChannel ch = f.open(file)) {
                List<Thread> ts = new ArrayList<>();
                ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
                for (int t = 0; t < THREADS; t++) {
                    int tt = t;
                    ts.add(Thread.ofPlatform().start(() -> {
                        try {
                            for (int k = 0; k < PER_THREAD; k++) {
                                int i = k * THREADS + tt; // interleaved positions
                                acks[i] = outcome(f.io(ch, true, buffer(pattern(SHARED_SIZE, i), k % 2 == 0),
                                        (long) i * SHARED_SIZE));
                                check(acks[i] == SHARED_SIZE, "write " + i + " short: " + acks[i]);
                            }
                        } catch (Throwable x) {
                            errors.add(x);
                        }
                    }));
                }
                for (Thread t : ts) {
                    t.join(120_000);
                }
                check(errors.isEmpty(), "writers failed: " + errors);
            }
            acknowledgedInFile(file, acks, SHARED_SIZE, 0);
            check(Files.size(file) == (long) THREADS * PER_THREAD * SHARED_SIZE, "nothing else in the file");
            return null;
        });
    }

    // ---------------------------------------------------------------- close-racing-reads

    static final int READ_SIZE = 8192, READ_BLOCKS = 512;
    static final byte SENTINEL = (byte) 0xee;

    /** Readers reuse each buffer as soon as its read reported; close races them; no reused buffer changes after. */
    @Test
    void closeRacingReads() throws Exception {
        cells("close-racing-reads", (f, d) -> {
            Path file = d.resolve("racing");
            byte[] content = pattern(READ_SIZE * READ_BLOCKS, 3);
            Files.write(file, content);
            AsynchronousFileChannel ch = f.openDirect(file);
            ConcurrentLinkedQueue<ByteBuffer> reused = new ConcurrentLinkedQueue<>();
            ConcurrentLinkedQueue<String> bad = new ConcurrentLinkedQueue<>();
            AtomicBoolean closing = new AtomicBoolean();
            List<Thread> readers = new ArrayList<>();
            int[] data = new int[1], closedErr = new int[1];
            for (int r = 0; r < 4; r++) {
                int rr = r;
                readers.add(Thread.ofPlatform().start(() -> readUntilClosed(f, ch, content, rr, reused, bad, data,
                        closedErr)));
            }
            Thread.sleep(20 + (long) (Math.random() * 30));
            closing.set(true);
            ch.close();
            for (Thread t : readers) {
                t.join(60_000);
                check(!t.isAlive(), "a reader did not end");
            }
            Thread.sleep(200); // a kernel still holding a buffer would write it meanwhile
            int changed = 0;
            for (ByteBuffer b : reused) {
                for (int j = 0; j < b.limit(); j++) {
                    if (b.get(j) != SENTINEL) {
                        changed++;
                        break;
                    }
                }
            }
            check(bad.isEmpty(), "reads reported wrong data: " + bad);
            check(changed == 0, changed + " of " + reused.size() + " reused buffers changed after their read reported");
            check(data[0] > 0, "no read completed before close: nothing raced");
            System.out.printf("close-racing-reads %s: %d reads with data, %d with the closed error, %d buffers reused%n",
                    f.name(), data[0], closedErr[0], reused.size());
            return null;
        });
    }

    static void readUntilClosed(Front f, AsynchronousFileChannel ch, byte[] content, int seed,
                                ConcurrentLinkedQueue<ByteBuffer> reused, ConcurrentLinkedQueue<String> bad,
                                int[] data, int[] closedErr) {
        java.util.Random rnd = new java.util.Random(seed);
        for (;;) {
            List<ByteBuffer> bs = new ArrayList<>();
            List<CompletableFuture<Integer>> cs = new ArrayList<>();
            List<Integer> blocks = new ArrayList<>();
            for (int k = 0; k < 32; k++) {
                ByteBuffer b = ByteBuffer.allocateDirect(READ_SIZE + 4096).alignedSlice(4096).limit(READ_SIZE);
                int block = rnd.nextInt(READ_BLOCKS);
                bs.add(b);
                blocks.add(block);
                try {
                    cs.add(f.io(ch, false, b, (long) block * READ_SIZE));
                } catch (RuntimeException x) {
                    bad.add("read call threw " + x);
                    return;
                }
            }
            boolean ended = false;
            for (int k = 0; k < cs.size(); k++) {
                int n;
                try {
                    n = outcome(cs.get(k), AsynchronousCloseException.class, ClosedChannelException.class);
                } catch (Throwable x) {
                    bad.add(x.toString());
                    return;
                }
                ByteBuffer b = bs.get(k);
                if (n >= 0) {
                    byte[] got = new byte[n];
                    b.get(0, got);
                    int off = blocks.get(k) * READ_SIZE;
                    if (n != READ_SIZE || !Arrays.equals(got, Arrays.copyOfRange(content, off, off + n))) {
                        bad.add("block " + blocks.get(k) + ": " + n + " bytes, not the file's");
                    }
                    synchronized (data) {
                        data[0]++;
                    }
                } else {
                    ended = true;
                    synchronized (closedErr) {
                        closedErr[0]++;
                    }
                }
                for (int j = 0; j < b.limit(); j++) {
                    b.put(j, SENTINEL); // reused at once by its owner
                }
                reused.add(b);
            }
            if (ended || !ch.isOpen()) {
                return;
            }
        }
    }

    // ---------------------------------------------------------------- shutdown-in-flight

    @Test
    void shutdownInFlight() throws Exception {
        cells("shutdown-in-flight", (f, d) -> {
            Path file = d.resolve("shutdown");
            OverlapEngine own = OverlapEngine.create(new OverlapEngine.Options("auto", 0, 0, 0, 1));
            AsynchronousFileChannel ch = f.open(own, file);
            List<CompletableFuture<Integer>> ws = new ArrayList<>();
            for (int i = 0; i < DROP_WRITES; i++) {
                ws.add(f.io(ch, true, buffer(pattern(DROP_SIZE, i), i % 2 == 1), (long) i * DROP_SIZE));
            }
            own.close();
            int[] acks = new int[DROP_WRITES];
            for (int i = 0; i < DROP_WRITES; i++) {
                acks[i] = outcome(ws.get(i), ShutdownChannelGroupException.class);
            }
            acknowledgedInFile(file, acks, DROP_SIZE, 0);
            int refused = 0;
            for (boolean write : new boolean[] {false, true}) {
                for (boolean direct : new boolean[] {false, true}) {
                    ByteBuffer b = direct ? ByteBuffer.allocateDirect(16) : ByteBuffer.allocate(16);
                    try {
                        f.io(ch, write, b, 0);
                    } catch (ShutdownChannelGroupException x) {
                        refused++;
                    }
                }
            }
            check(refused == 4, "after shutdown " + (4 - refused) + " of 4 calls were accepted");
            try {
                f.open(own, file).close();
                check(false, "a channel opened on a shut-down engine");
            } catch (ShutdownChannelGroupException expected) {
                // as a terminated AsynchronousChannelGroup
            }
            ch.close();
            return null;
        });
    }

    // ---------------------------------------------------------------- fork-in-flight

    @Test
    void forkInFlight() throws Exception {
        cells("fork-in-flight", (f, d) -> "n/a: the JVM does not fork (no API forks a JVM with its threads; "
                + "ProcessBuilder spawns a new program)");
    }

    // ---------------------------------------------------------------- injected-failure

    static final Path SMALL_FS = Path.of("..", "scripts", "small-fs");

    @Test
    void injectedFailure() throws Exception {
        Path mountDir = Files.createTempDirectory("overlap-java-smallfs");
        Process p = new ProcessBuilder(SMALL_FS.toString(), "mount", mountDir.toString(), "8")
                .redirectErrorStream(false).start();
        String out = new String(p.getInputStream().readAllBytes()).trim();
        String err = new String(p.getErrorStream().readAllBytes()).trim();
        int rc = p.waitFor();
        if (rc != 0) {
            String why = rc == 77 ? err : "scripts/small-fs exited " + rc + ": " + err;
            cells("injected-failure", (f, d) -> "SKIPPED: " + why.replace('\n', ' '));
            check(rc == 77, why);
            return;
        }
        try {
            Path mnt = Path.of(out);
            cells("injected-failure", (f, d) -> enospc(f, Files.createDirectories(mnt.resolve(f.name()))));
        } finally {
            new ProcessBuilder(SMALL_FS.toString(), "umount", mountDir.toString()).inheritIO().start().waitFor();
        }
    }

    static final int CHUNK = 256 * 1024;

    /** Writes until the small file system is full: the failing write gets ENOSPC; every acknowledged byte is there. */
    static String enospc(Front f, Path d) throws Exception {
        Path file = d.resolve("fill");
        long acked = 0;
        IOException failure = null;
        try (AsynchronousFileChannel ch = f.open(file)) {
            for (int i = 0; i < 1000 && failure == null; i++) {
                ByteBuffer b = buffer(pattern(CHUNK, i), i % 2 == 0);
                while (b.hasRemaining()) {
                    long pos = (long) i * CHUNK + b.position();
                    try {
                        acked += f.io(ch, true, b, pos).get(60, TimeUnit.SECONDS);
                    } catch (ExecutionException x) {
                        check(x.getCause() instanceof IOException, "not an IOException: " + x.getCause());
                        failure = (IOException) x.getCause();
                        break;
                    }
                }
            }
        }
        check(failure != null, "the small file system never filled up");
        String msg = String.valueOf(failure.getMessage());
        check(msg.contains("errno 28") || msg.contains("No space left"), "not ENOSPC: " + msg);
        byte[] got = Files.readAllBytes(file);
        check(got.length >= acked, "the file (" + got.length + " bytes) is shorter than what was acknowledged ("
                + acked + ")");
        for (long off = 0; off < acked; off += CHUNK) {
            int i = (int) (off / CHUNK);
            int n = (int) Math.min(CHUNK, acked - off);
            check(Arrays.equals(Arrays.copyOfRange(got, (int) off, (int) off + n), Arrays.copyOf(pattern(CHUNK, i), n)),
                    "acknowledged chunk " + i + " not in the file");
        }
        System.out.printf("injected-failure %s: %d bytes acknowledged, then %s%n", f.name(), acked, msg);
        Files.delete(file);
        return null;
    }
}
