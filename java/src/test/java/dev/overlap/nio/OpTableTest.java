package dev.overlap.nio;

import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The engine's table of operations in flight: each id finds its own operation once. */
class OpTableTest {
    private static Op op(long id) {
        Op op = new Op(null, false, ByteBuffer.allocate(1), null, null, null, null);
        op.id = id;
        return op;
    }

    @Test
    void anIdFindsItsOperationOnceAndAnUnknownIdNone() {
        OpTable t = new OpTable();
        Op a = op(1), b = op(2);
        t.put(a);
        t.put(b);
        assertEquals(2, t.size());
        assertNull(t.remove(3), "no operation has id 3");
        assertSame(b, t.remove(2));
        assertNull(t.remove(2), "removed once");
        assertSame(a, t.remove(1));
        assertTrue(t.isEmpty());
    }

    @Test
    void operationsWhoseIdsShareASlotAreAllKept() {
        OpTable t = new OpTable();
        List<Op> same = new ArrayList<>();
        for (int k = 0; k < 5; k++) {
            Op o = op(7 + (long) k * OpTable.SLOTS); // one slot for all five
            same.add(o);
            t.put(o);
        }
        assertEquals(5, t.size());
        assertNull(t.remove(7 + 5L * OpTable.SLOTS), "the slot's sixth id was never put");
        // removed in another order than put: the slot's holder is not the first to go
        for (int k : new int[] {3, 0, 4, 1, 2}) {
            assertSame(same.get(k), t.remove(same.get(k).id));
        }
        assertTrue(t.isEmpty());
        Op again = op(7 + 9L * OpTable.SLOTS);
        t.put(again);
        assertSame(again, t.remove(again.id), "the slot is free again");
    }

    @Test
    void concurrentSubmittersAndReapersLoseNoOperation() throws Exception {
        OpTable t = new OpTable();
        AtomicLong ids = new AtomicLong(1);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        int threads = 4, perThread = 200_000;
        List<Thread> all = new ArrayList<>();
        for (int n = 0; n < threads; n++) {
            Thread th = new Thread(() -> {
                try {
                    // each thread holds up to 3,000 in flight (12,000 in all: many slots shared)
                    ArrayDeque<Op> held = new ArrayDeque<>();
                    for (int i = 0; i < perThread; i++) {
                        Op o = op(ids.getAndIncrement());
                        t.put(o);
                        held.add(o);
                        if (held.size() > 3_000 || (i & 7) == 0 && !held.isEmpty()) {
                            Op done = held.poll();
                            if (t.remove(done.id) != done) {
                                throw new AssertionError("operation " + done.id + " not found");
                            }
                        }
                    }
                    for (Op done : held) {
                        if (t.remove(done.id) != done) {
                            throw new AssertionError("operation " + done.id + " not found at the end");
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            all.add(th);
            th.start();
        }
        for (Thread th : all) {
            th.join();
        }
        assertNull(failure.get());
        assertTrue(t.isEmpty(), "every operation put was removed");
    }
}
