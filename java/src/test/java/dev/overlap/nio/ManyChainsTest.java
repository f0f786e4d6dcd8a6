package dev.overlap.nio;

import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.CompletionHandler;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import com.sun.nio.file.ExtendedOpenOption;

import static java.nio.file.StandardOpenOption.READ;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

/**
 * Many CompletionHandler chains on one channel of the default group (the handlers run on the
 * reapers): each chain issues its next 4 KiB read from its completed() handler, as
 * AfcBench's W3:1024 does (every chain must end; a read the budget holds up waits on the reaper).
 * O_DIRECT where the file system takes it, else buffered. A hang fails by the wait's timeout
 * (with what is still in flight), else by the class's. (The W3:1024 run that hung did so in the
 * benchmark: about 4 of its 1024 {@code allocateDirect(n + 4096).alignedSlice(4096)} buffers are
 * 8 KiB, the one read of the file's last block into one of them is short, its completed() throws
 * "short op" and that chain never counts down; this test's buffers are exactly 4 KiB.)
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class ManyChainsTest {
    @TempDir
    Path dir;

    static final int LEN = 4096;

    static final class Chain implements CompletionHandler<Integer, Void> {
        final AsynchronousFileChannel ch;
        final ByteBuffer buf = ByteBuffer.allocateDirect(LEN + 4096).alignedSlice(4096).slice(0, LEN);
        final long slots;
        final AtomicInteger next;
        final int reads;
        final CountDownLatch done;
        final AtomicReference<Throwable> failure;
        long x;

        Chain(AsynchronousFileChannel ch, long size, int seed, AtomicInteger next, int reads, CountDownLatch done,
              AtomicReference<Throwable> failure) {
            this.ch = ch;
            this.slots = size / LEN;
            this.x = seed * 7919L + 1;
            this.next = next;
            this.reads = reads;
            this.done = done;
            this.failure = failure;
        }

        void issue() {
            if (next.getAndIncrement() >= reads) {
                done.countDown();
                return;
            }
            x = x * 6364136223846793005L + 1442695040888963407L;
            buf.clear();
            try {
                ch.read(buf, Long.remainderUnsigned(x >>> 17, slots) * LEN, null, this);
            } catch (Throwable t) {
                failure.compareAndSet(null, t);
                done.countDown();
            }
        }

        @Override
        public void completed(Integer n, Void v) {
            if (n != LEN) {
                failure.compareAndSet(null, new AssertionError("short read " + n));
                done.countDown();
                return;
            }
            issue();
        }

        @Override
        public void failed(Throwable exc, Void v) {
            failure.compareAndSet(null, exc);
            done.countDown();
        }
    }

    /**
     * {@code maxOps} 0: the shared engine (budget 4096 operations); else an engine of that budget,
     * below the number of chains: handlers on the reapers then find the budget full and wait in
     * read() for completions that only reaping returns (the standby reaps for held reapers).
     */
    @ParameterizedTest
    @CsvSource({"1024, 0", "2048, 0", "1024, 256", "2048, 64"})
    void everyChainEnds(int chains, long maxOps) throws Exception {
        long size = 64L << 20;
        Path f = dir.resolve("many-chains");
        byte[] block = new byte[1 << 20];
        for (int i = 0; i < block.length; i++) {
            block[i] = (byte) (i * 31);
        }
        try (var out = Files.newOutputStream(f)) {
            for (long w = 0; w < size; w += block.length) {
                out.write(block);
            }
        }
        OverlapEngine e = maxOps == 0 ? OverlapEngine.shared()
                : OverlapEngine.create(new OverlapEngine.Options("auto", maxOps, 0, 0, 2));
        AsynchronousFileChannel ch;
        try {
            ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ, ExtendedOpenOption.DIRECT), null);
        } catch (java.io.IOException | UnsupportedOperationException x) {
            ch = OverlapAsynchronousFileChannel.open(e, f, Set.of(READ), null);
        }
        try (AsynchronousFileChannel c = ch) {
            for (int round = 0; round < 2; round++) {
                int reads = maxOps == 0 ? 100_000 : 20_000;
                AtomicInteger next = new AtomicInteger();
                AtomicReference<Throwable> failure = new AtomicReference<>();
                CountDownLatch done = new CountDownLatch(chains);
                for (int i = 0; i < chains; i++) {
                    new Chain(c, size, i + round * chains, next, reads, done, failure).issue();
                }
                if (!done.await(60, TimeUnit.SECONDS)) {
                    StringBuilder s = new StringBuilder();
                    int shown = 0;
                    for (Op op : e.ops.values()) {
                        if (shown++ < 10) {
                            s.append("\n  op ").append(op.id).append(" delivered=")
                                    .append(op.isDelivered());
                        }
                    }
                    throw new AssertionError("round " + round + ": " + done.getCount() + " of " + chains
                            + " chains did not end in 60 s; issued " + next.get() + "; operations in the engine's table: "
                            + e.ops.size() + s + "\n  " + e.stats());
                }
                assertNull(failure.get());
                assertEquals(0, done.getCount());
            }
        } finally {
            if (e != OverlapEngine.shared()) {
                e.close();
            }
        }
    }
}
