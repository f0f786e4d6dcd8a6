package dev.overlap.nio;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.CompletionHandler;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A read or write in flight: what keeps its memory alive and where its result goes.
 *
 * <p>Memory rule: the native memory the kernel reads or writes ({@code bounce}, or the caller's
 * direct buffer, kept reachable through {@code buffer}) stays allocated and reachable until the
 * engine has reaped the operation's completion, whatever happened meanwhile (the channel closed,
 * the future cancelled, the caller's arena closed: an arena the caller can close is never given to
 * the kernel, its bytes go through {@code bounce}). Only {@link #complete} (on a reaper, after the
 * completion was reaped) frees it.
 */
final class Op {
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
    private final AtomicBoolean delivered = new AtomicBoolean();

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
        return delivered.get() || (future != null && future.isDone());
    }

    /** On a reaper: the completion was reaped; {@code res} is a byte count or -errno. */
    void complete(long res) {
        Integer value = null;
        Throwable exc = null;
        try {
            if (isDelivered()) {
                return; // closed or cancelled meanwhile: the caller's buffer is left alone
            }
            if (res < 0) {
                exc = channel.isOpen() ? Errors.io((int) -res, write ? "write" : "read")
                        : new AsynchronousCloseException();
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
        deliver(value, exc);
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

    /** The channel was closed with this operation in flight. */
    void failClosed() {
        deliver(null, new AsynchronousCloseException());
    }

    void deliver(Integer value, Throwable exc) {
        if (!delivered.compareAndSet(false, true)) {
            return;
        }
        if (future != null) {
            if (exc == null) {
                future.setResult(value);
            } else {
                future.setFailure(exc);
            }
        } else {
            dispatch(executor, handler, attachment, value, exc);
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
            System.err.println("overlap-java: the channel's executor rejected a completion handler (was it shut down"
                    + " with operations in flight?); the handler is not run: " + e);
        }
    }

    static IOException closed() {
        return new java.nio.channels.ClosedChannelException();
    }
}
