package dev.overlap.nio;

import java.lang.reflect.InvocationTargetException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The default group: where handlers of channels opened without an executor run. As the JDK's
 * default thread pool, its threads come from the {@code ThreadFactory} class named by
 * {@code java.nio.channels.DefaultThreadPool.threadFactory} (instantiated through the system class
 * loader; a failure is an Error, as in the JDK), else from a factory of daemon threads named
 * {@code overlap-handler-N}. Unlike the JDK's (an unbounded cached pool), it has at most
 * {@code overlap.handlerThreads} threads (default: the processors, at least 2, at most 4), made on
 * demand and ended after 30 s idle; a handler that blocks holds one of them.
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

    private static ExecutorService create() {
        ThreadFactory factory = configuredFactory();
        if (factory == null) {
            AtomicInteger n = new AtomicInteger();
            factory = r -> {
                Thread t = new Thread(r, "overlap-handler-" + n.incrementAndGet());
                t.setDaemon(true);
                return t;
            };
        }
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
