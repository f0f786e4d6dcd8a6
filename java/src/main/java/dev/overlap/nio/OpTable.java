package dev.overlap.nio;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

/**
 * An engine's operations in flight, by id (the port's user data): the thread that takes a
 * completion finds its operation here, and closing walks them. Ids are handed out in order, so the
 * operations in flight at one time rarely share the low bits of their ids: a slot array indexed by
 * those bits holds nearly all of them, without allocating or boxing, and an operation whose slot an
 * older one still holds (one that waits on a FIFO, say) goes to an overflow map. A
 * {@code ConcurrentHashMap<Long, Op>} alone allocated a key and a node per operation.
 *
 * <p>Each operation is put once before it is submitted and removed once by whoever takes its
 * completion (or by the submitter, when the submission failed); {@link #remove} of an id that is
 * not here returns null.
 */
final class OpTable {
    /** Slots in the array: a power of two, well above the operations an engine has in flight. */
    static final int SLOTS = 4096;
    private static final VarHandle SLOT = MethodHandles.arrayElementVarHandle(Op[].class);

    private final Op[] slots = new Op[SLOTS];
    private final ConcurrentHashMap<Long, Op> overflow = new ConcurrentHashMap<>();

    static {
        assert Integer.bitCount(SLOTS) == 1 : "the slot of an id is its low bits";
    }

    private static int slotOf(long id) {
        return (int) (id & (SLOTS - 1));
    }

    /** Adds {@code op} under {@code op.id}, which no operation here has. */
    void put(Op op) {
        if (!SLOT.compareAndSet(slots, slotOf(op.id), (Op) null, op)) {
            Op old = overflow.put(op.id, op);
            assert old == null : "an operation's id is unique";
        }
    }

    /** Removes and returns the operation of {@code id}, or null if none is here. */
    Op remove(long id) {
        int i = slotOf(id);
        Op op = (Op) SLOT.getVolatile(slots, i);
        if (op != null && op.id == id && SLOT.compareAndSet(slots, i, op, (Op) null)) {
            return op;
        }
        return overflow.isEmpty() ? null : overflow.remove(id);
    }

    /** The operations here now (a snapshot: for closing, cancelling and tests, not a hot path). */
    List<Op> values() {
        List<Op> all = new ArrayList<>();
        for (int i = 0; i < SLOTS; i++) {
            Op op = (Op) SLOT.getVolatile(slots, i);
            if (op != null) {
                all.add(op);
            }
        }
        all.addAll(overflow.values());
        return all;
    }

    /** How many are here now. */
    int size() {
        return values().size();
    }

    /** Whether none is here now. */
    boolean isEmpty() {
        return values().isEmpty();
    }
}
