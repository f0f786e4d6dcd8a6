package dev.overlap.nio;

import java.io.IOException;
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
 */
final class OpFuture<V> implements Future<V> {
    private final AsynchronousChannel channel;
    private volatile boolean haveResult;
    private V result;
    private Throwable exc;
    private CountDownLatch latch;
    /** Told about a cancellation (a pending lock gives up its place). */
    volatile Runnable onCancel;

    OpFuture(AsynchronousChannel channel) {
        this.channel = channel;
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
            CountDownLatch l = prepareForWait();
            if (l != null && !l.await(timeout, unit)) {
                throw new TimeoutException();
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
        return true;
    }
}
