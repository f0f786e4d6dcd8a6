package dev.overlap.nio;

import java.lang.reflect.InvocationTargetException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The default group: where handlers of channels opened without an executor run.
 *
 * <p><b>Its threads are the engines' reapers.</b> A reaper that takes the completion of a read or
 * write of such a channel runs its handler itself, at once, as the JDK's own Linux channel runs
 * the I/O and then the handler on the same pool thread: no hand-over to another thread (a
 * cross-thread wake-up per operation), and the next operation a handler starts is submitted from
 * the reaper. A handler never runs on the thread that called read or write during that call, nor
 * on a thread in {@code Future.get()} that helps reap (those hand it over, see below); its
 * interrupt status is cleared after it, as the JDK's invoker does. An exception a handler throws
 * goes to the reaper's uncaught exception handler (by default printed with the thread's name, as
 * for a JDK pool thread), and the reaper goes on with the next completion (where a JDK pool would
 * replace the thread).
 *
 * <p><b>The overflow pool.</b> Handlers that cannot run on a reaper run on a small pool:
 * completions of handler operations a getter took while helping ({@link OpFuture}); failures
 * known at the call (a closed channel, an empty buffer: the JDK also runs those on a group
 * thread), operations failed by {@code close}, lock handlers; and the handlers the engine's
 * standby hands over when a handler blocks: a reaper inside one handler for more than about
 * {@link OverlapEngine#STUCK_NANOS} (blocked on a lock, a latch, a budget wait) has the rest of
 * its batch of completions taken from it and handed here, and while every reaper of the engine is
 * inside such a handler the standby reaps the port itself and hands handlers here (see
 * {@link OverlapEngine}), so a blocking handler never stops other channels' completions. The pool
 * has at most {@code overlap.handlerThreads} threads (default: the processors, at least 2, at
 * most 4), made on demand and ended after 30 s idle; a handler that blocks holds one of them.
 *
 * <p><b>Thread factory.</b> As the JDK's default group, its threads (the reapers of every engine
 * and the pool's) come from the {@code ThreadFactory} class named by
 * {@code java.nio.channels.DefaultThreadPool.threadFactory} (instantiated through the system class
 * loader; a failure is an Error, as in the JDK); the threads it makes are set to be daemons (a
 * reaper of the shared engine lives as long as the process). Without it, reapers are daemon
 * threads named {@code overlap-reaper-E-N} and pool threads {@code overlap-handler-N}.
 */
final class DefaultGroup {
    private DefaultGroup() {}

    static final String THREAD_FACTORY = "java.nio.channels.DefaultThreadPool.threadFactory";
    static final int THREADS = Integer.getInteger("overlap.handlerThreads",
            Math.max(2, Math.min(4, Runtime.getRuntime().availableProcessors())));

    private static final class Holder {
        static final ExecutorService EXECUTOR = create();
    }

    static ExecutorService executor() {
        return Holder.EXECUTOR;
    }

    /** The configured factory of the group's threads, or null (made when first needed). */
    private static final class FactoryHolder {
        static final ThreadFactory FACTORY = configuredFactory();
    }

    /**
     * A thread of the group (a reaper runs handlers): made by the configured factory if there is
     * one, else named {@code name}; a daemon either way.
     */
    static Thread newThread(Runnable r, String name) {
        ThreadFactory f = FactoryHolder.FACTORY;
        Thread t = f == null ? new Thread(r, name) : f.newThread(r);
        if (t == null) {
            throw new IllegalStateException(THREAD_FACTORY + ": " + f.getClass().getName() + " made no thread");
        }
        if (!t.isDaemon()) {
            t.setDaemon(true);
        }
        return t;
    }

    private static ExecutorService create() {
        AtomicInteger n = new AtomicInteger();
        ThreadFactory factory = r -> newThread(r, "overlap-handler-" + n.incrementAndGet());
        ThreadPoolExecutor ex = new ThreadPoolExecutor(THREADS, THREADS, 30, TimeUnit.SECONDS,
                new LinkedBlockingQueue<>(), factory);
        ex.allowCoreThreadTimeOut(true);
        return new Unstoppable(ex);
    }

    private static ThreadFactory configuredFactory() {
        String name = System.getProperty(THREAD_FACTORY);
        if (name == null) {
            return null;
        }
        try {
            Class<?> c = Class.forName(name, true, ClassLoader.getSystemClassLoader());
            return (ThreadFactory) c.getConstructor().newInstance();
        } catch (ClassNotFoundException | ClassCastException | InstantiationException | IllegalAccessException
                 | NoSuchMethodException | InvocationTargetException x) {
            throw new Error(x);
        }
    }

    /** The group's executor as channels see it: it cannot be shut down from outside. */
    private static final class Unstoppable extends java.util.concurrent.AbstractExecutorService {
        private final ExecutorService e;

        Unstoppable(ExecutorService e) {
            this.e = e;
        }

        @Override
        public void execute(Runnable command) {
            e.execute(command);
        }

        @Override
        public void shutdown() {
            throw new UnsupportedOperationException("the default group is not shut down");
        }

        @Override
        public java.util.List<Runnable> shutdownNow() {
            throw new UnsupportedOperationException("the default group is not shut down");
        }

        @Override
        public boolean isShutdown() {
            return false;
        }

        @Override
        public boolean isTerminated() {
            return false;
        }

        @Override
        public boolean awaitTermination(long timeout, TimeUnit unit) {
            return false;
        }
    }
}
