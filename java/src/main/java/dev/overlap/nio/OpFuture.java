package dev.overlap.nio;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.channels.AsynchronousChannel;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The Future of an operation, with the JDK's semantics (sun.nio.ch.PendingFuture): a failure that
 * is not an IOException is wrapped in one; {@code cancel} marks the future cancelled without
 * stopping the operation (the buffer may still be written: discard it), and with
 * {@code mayInterruptIfRunning} closes the channel, as AsynchronousFileChannel documents.
 *
 * <p><b>get() helps.</b> The future of a read or write knows its engine: a {@code get()} that
 * finds it not done waits on the engine's completion port itself ({@link OverlapEngine#help})
 * and hands every completion it takes to its operation, as a reaper would, until its own is
 * done; so the caller is woken by the kernel, not by a reaper that was woken by the kernel.
 * When another thread completes the future while its getter sleeps in the port, that thread
 * posts a wake-up completion (a "nudge") to the port for the getter, whose wait is also bounded
 * by a short slice. Not from a virtual thread (a wait in native code would pin its carrier),
 * nor beyond the engine's number of helpers, nor once the engine is closed: then get() waits
 * for a reaper.
 */
final class OpFuture<V> implements Future<V> {
    /** {@link #help}: no getter in the port for this future. */
    private static final int NO_HELPER = 0;
    /** A getter sleeps in the port for this future. */
    private static final int IN_PORT = 1;
    /** It still sleeps there, and another thread completed the future meanwhile (and nudged). */
    private static final int STRANDED = 2;
    private static final VarHandle HELP;

    static {
        try {
            HELP = MethodHandles.lookup().findVarHandle(OpFuture.class, "help", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final AsynchronousChannel channel;
    /** The engine whose port completes it (a read or write), or null. */
    private final OverlapEngine engine;
    /** NO_HELPER, IN_PORT or STRANDED (through HELP). */
    @SuppressWarnings("unused")
    private volatile int help;
    private volatile boolean haveResult;
    private V result;
    private Throwable exc;
    private CountDownLatch latch;
    /** Told about a cancellation (a pending lock gives up its place). */
    volatile Runnable onCancel;

    OpFuture(AsynchronousChannel channel) {
        this(channel, null);
    }

    /** The future of an operation of {@code engine}'s port: get() helps reap it. */
    OpFuture(AsynchronousChannel channel, OverlapEngine engine) {
        this.channel = channel;
        this.engine = engine;
    }

    static <V> OpFuture<V> completed(V value) {
        OpFuture<V> f = new OpFuture<>(null);
        f.setResult(value);
        return f;
    }

    static <V> OpFuture<V> failed(Throwable exc) {
        OpFuture<V> f = new OpFuture<>(null);
        f.setFailure(exc);
        return f;
    }

    /** Sets the result; false if the future already had one (or was cancelled). */
    boolean setResult(V value) {
        CountDownLatch l;
        synchronized (this) {
            if (haveResult) {
                return false;
            }
            result = value;
            haveResult = true;
            l = latch;
        }
        if (l != null) {
            l.countDown();
        }
        doneWhileHelped();
        return true;
    }

    boolean setFailure(Throwable x) {
        if (!(x instanceof IOException) && !(x instanceof CancellationException)) {
            x = new IOException(x);
        }
        CountDownLatch l;
        synchronized (this) {
            if (haveResult) {
                return false;
            }
            exc = x;
            haveResult = true;
            l = latch;
        }
        if (l != null) {
            l.countDown();
        }
        doneWhileHelped();
        return true;
    }

    private CountDownLatch prepareForWait() {
        synchronized (this) {
            if (haveResult) {
                return null;
            }
            if (latch == null) {
                latch = new CountDownLatch(1);
            }
            return latch;
        }
    }

    private V report() throws ExecutionException {
        Throwable x;
        V r;
        synchronized (this) {
            x = exc;
            r = result;
        }
        if (x != null) {
            if (x instanceof CancellationException) {
                throw new CancellationException();
            }
            throw new ExecutionException(x);
        }
        return r;
    }

    @Override
    public V get() throws InterruptedException, ExecutionException {
        if (!haveResult) {
            OverlapEngine.beforeWaiting();
            helpUntilDone(false, 0);
        }
        if (!haveResult) {
            CountDownLatch l = prepareForWait();
            if (l != null) {
                l.await();
            }
        }
        return report();
    }

    @Override
    public V get(long timeout, TimeUnit unit) throws InterruptedException, ExecutionException, TimeoutException {
        if (!haveResult) {
            OverlapEngine.beforeWaiting();
            long nanos = unit.toNanos(timeout);
            long deadline = System.nanoTime() + nanos;
            helpUntilDone(true, deadline);
            if (!haveResult) {
                CountDownLatch l = prepareForWait();
                if (l != null && !l.await(deadline - System.nanoTime(), TimeUnit.NANOSECONDS)) {
                    throw new TimeoutException();
                }
            }
        }
        return report();
    }

    @Override
    public boolean isDone() {
        return haveResult;
    }

    @Override
    public synchronized boolean isCancelled() {
        return exc instanceof CancellationException;
    }

    @Override
    public boolean cancel(boolean mayInterruptIfRunning) {
        CountDownLatch l;
        synchronized (this) {
            if (haveResult || channel == null) {
                return false;
            }
            exc = new CancellationException();
            haveResult = true;
            l = latch;
        }
        Runnable r = onCancel;
        if (r != null) {
            r.run();
        }
        if (mayInterruptIfRunning) {
            try {
                channel.close();
            } catch (IOException ignore) {
                // as the JDK: the cancellation stands
            }
        }
        if (l != null) {
            l.countDown();
        }
        doneWhileHelped();
        return true;
    }

    // ---- helping (see the class comment)

    /**
     * Just done: if a getter sleeps in the port for this future (this thread is not it: a getter
     * leaves the port before it hands out what it took), wake it with a nudge.
     */
    private void doneWhileHelped() {
        if ((int) HELP.getVolatile(this) == IN_PORT && HELP.compareAndSet(this, IN_PORT, STRANDED)) {
            engine.strand();
        }
    }

    /** Entering the port: {@code 0} entered, {@code 1} already done, {@code 2} another getter helps. */
    int enterPort() {
        if (!HELP.compareAndSet(this, NO_HELPER, IN_PORT)) {
            return 2;
        }
        // Dekker with doneWhileHelped: either the completer sees IN_PORT (and nudges), or this
        // sees the result (and does not wait).
        if (haveResult) {
            leavePort();
            return 1;
        }
        return 0;
    }

    /** Left the port (a nudge posted for it meanwhile is taken by whoever waits there next). */
    void leavePort() {
        HELP.setVolatile(this, NO_HELPER);
    }

    /** Whether a getter waits in the port for this future now (for tests). */
    boolean getterInPort() {
        return (int) HELP.getVolatile(this) == IN_PORT;
    }

    /**
     * Helps reap the port until this future is done, the deadline passes ({@code timed}), or
     * helping is not possible here (then the caller waits on the latch).
     */
    private void helpUntilDone(boolean timed, long deadline) throws InterruptedException {
        if (engine == null || Thread.currentThread().isVirtual() || !engine.enterHelping()) {
            return;
        }
        try {
            long next = OverlapEngine.HELP_FIRST_SLICE_NANOS;
            while (!haveResult) {
                if (Thread.interrupted()) {
                    throw new InterruptedException();
                }
                long slice = next;
                next = Math.min(next * 2, OverlapEngine.HELP_SLICE_NANOS);
                if (timed) {
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        return;
                    }
                    slice = Math.min(slice, left);
                }
                if (!engine.help(this, slice)) {
                    return;
                }
            }
        } finally {
            engine.leaveHelping();
        }
    }
}
