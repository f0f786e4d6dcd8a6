package dev.overlap.nio;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.CompletionHandler;
import java.nio.channels.ShutdownChannelGroupException;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;

/**
 * A read or write in flight: what keeps its memory alive and where its result goes.
 *
 * <p>Memory rule: the native memory the kernel reads or writes ({@code bounce}, or the caller's
 * direct buffer, kept reachable through {@code buffer}) stays allocated and reachable until the
 * engine has reaped the operation's completion, whatever happened meanwhile (the channel closed,
 * the future cancelled, the caller's arena closed: an arena the caller can close is never given to
 * the kernel, its bytes go through {@code bounce}). Only {@link #complete} (on a reaper, after the
 * completion was reaped) frees it, and it tells the channel ({@code completed}): a close waits
 * for that.
 *
 * <p>Delivery happens once ({@link #deliver}'s flag: a close and the reaper race for it). For a
 * handler the Op itself is the task ({@link #run}) given to the channel's executor, or run by the
 * reaper that reaped it when the channel is in the default group ({@link DefaultGroup}).
 */
final class Op implements Runnable {
    private static final VarHandle DELIVERED;

    static {
        try {
            DELIVERED = MethodHandles.lookup().findVarHandle(Op.class, "delivered", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    final OverlapAsynchronousFileChannel channel;
    final boolean write;
    /** The caller's buffer (kept reachable until the completion is reaped). */
    final ByteBuffer buffer;
    /** Its position when submitted. */
    final int position;
    /** For a copy: the caller's bytes as a segment (relative to {@code position}). */
    MemorySegment userSegment;
    /** Library-owned native copy, or 0. */
    long bounce;
    /** Copy budget held (bytes), released with {@code bounce}. */
    long copyBytes;
    /** Bytes asked for. */
    long length;
    long id;

    final OpFuture<Integer> future;
    final CompletionHandler<Integer, Object> handler;
    final Object attachment;
    final Executor executor;
    /** 1 once delivered (through DELIVERED). */
    @SuppressWarnings("unused")
    private volatile int delivered;
    /** For a handler: the outcome {@link #run} reports (set before the Op is handed to a thread). */
    private Integer value;
    private Throwable exc;

    @SuppressWarnings("unchecked")
    Op(OverlapAsynchronousFileChannel channel, boolean write, ByteBuffer buffer, OpFuture<Integer> future,
       CompletionHandler<Integer, ?> handler, Object attachment, Executor executor) {
        this.channel = channel;
        this.write = write;
        this.buffer = buffer;
        this.position = buffer.position();
        this.future = future;
        this.handler = (CompletionHandler<Integer, Object>) handler;
        this.attachment = attachment;
        this.executor = executor;
    }

    boolean isDelivered() {
        return delivered != 0 || (future != null && future.isDone());
    }

    /**
     * On the thread that reaped the completion; {@code res} is a byte count or -errno. With
     * {@code inline} (a reaper), the handler of a default-group channel is not handed to an
     * executor: true is returned and the caller runs it ({@link #run}).
     */
    boolean complete(long res, boolean inline) {
        try {
            return completeAndDeliver(res, inline);
        } finally {
            channel.completed(); // the kernel is done with the buffer: a close waiting for it may go on
        }
    }

    private boolean completeAndDeliver(long res, boolean inline) {
        Integer value = null;
        Throwable exc = null;
        try {
            if (isDelivered()) {
                return false; // closed or cancelled meanwhile: the caller's buffer is left alone
            }
            if (res < 0) {
                exc = !channel.isOpen() ? new AsynchronousCloseException()
                        : res == -Native.ECANCELED && channel.engine.isShutdown() ? new ShutdownChannelGroupException()
                        : Errors.io((int) -res, write ? "write" : "read");
            } else if (res == 0 && !write && length > 0) {
                value = -1; // end of file
            } else {
                int n = (int) res;
                if (!write && bounce != 0) {
                    try {
                        MemorySegment.copy(Native.segment(bounce, n), 0, userSegment, 0, n);
                    } catch (IllegalStateException e) {
                        // the caller closed the arena of its buffer while the read was in flight
                        exc = e;
                    }
                }
                if (exc == null) {
                    buffer.position(position + n);
                    value = n;
                }
            }
        } finally {
            release();
        }
        return deliver(value, exc, inline);
    }

    /** Frees the library's copy and its budget (only after the completion was reaped). */
    void release() {
        if (bounce != 0) {
            Native.freeMemory(bounce);
            bounce = 0;
        }
        if (copyBytes != 0) {
            channel.engine.releaseCopy(copyBytes);
            copyBytes = 0;
        }
    }

    /** The channel was closed with this operation in flight (a handler goes to its executor). */
    void failClosed() {
        deliver(null, new AsynchronousCloseException());
    }

    /** The engine shut down with this operation in flight and it may never complete (a FIFO's read). */
    void failShutdown() {
        deliver(null, new ShutdownChannelGroupException());
    }

    void deliver(Integer value, Throwable exc) {
        deliver(value, exc, false);
    }

    /**
     * Delivers the outcome once: completes the future, or hands the handler to the channel's
     * executor; or, with {@code inline} and a default-group channel, leaves it to the caller to
     * {@link #run} (returns true then).
     */
    private boolean deliver(Integer value, Throwable exc, boolean inline) {
        if (delivered != 0 || !DELIVERED.compareAndSet(this, 0, 1)) {
            return false;
        }
        if (future != null) {
            if (exc == null) {
                future.setResult(value);
            } else {
                future.setFailure(exc);
            }
            return false;
        }
        this.value = value;
        this.exc = exc;
        if (inline && channel.inDefaultGroup) {
            return true;
        }
        handOff();
        return false;
    }

    /** Gives the handler (delivered, not yet run) to the channel's executor. */
    void handOff() {
        try {
            executor.execute(this);
        } catch (RejectedExecutionException e) {
            rejected(e);
        }
    }

    /**
     * Runs the handler with the outcome delivered, on this thread, then clears the interrupt (as
     * the JDK's Invoker does). What the handler throws propagates.
     */
    @Override
    public void run() {
        try {
            if (exc == null) {
                handler.completed(value, attachment);
            } else {
                handler.failed(exc, attachment);
            }
        } finally {
            Thread.interrupted();
        }
    }

    /** Runs a handler on the executor, as the JDK's Invoker does (then clears the interrupt). */
    static <V, A> void dispatch(Executor executor, CompletionHandler<V, ? super A> handler, A attachment, V value,
                                Throwable exc) {
        Runnable task = () -> {
            if (exc == null) {
                handler.completed(value, attachment);
            } else {
                handler.failed(exc, attachment);
            }
            Thread.interrupted();
        };
        try {
            executor.execute(task);
        } catch (RejectedExecutionException e) {
            rejected(e);
        }
    }

    private static void rejected(RejectedExecutionException e) {
        System.err.println("overlap-java: the channel's executor rejected a completion handler (was it shut down"
                + " with operations in flight?); the handler is not run: " + e);
    }

    static IOException closed() {
        return new java.nio.channels.ClosedChannelException();
    }
}
