package dev.overlap.nio;

import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Named by -Djava.nio.channels.DefaultThreadPool.threadFactory in the tests' JVM (pom.xml). Its
 * threads are not daemons: the tests that assert the default group's threads are daemons check
 * that the library makes them so, whatever the factory does.
 */
public class CountingThreadFactory implements ThreadFactory {
    static final AtomicInteger CREATED = new AtomicInteger();

    @Override
    public Thread newThread(Runnable r) {
        Thread t = new Thread(r, "counting-factory-" + CREATED.incrementAndGet());
        t.setDaemon(false);
        return t;
    }
}
