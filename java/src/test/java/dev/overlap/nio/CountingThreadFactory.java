package dev.overlap.nio;

import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/** Named by -Djava.nio.channels.DefaultThreadPool.threadFactory in the tests' JVM (pom.xml). */
public class CountingThreadFactory implements ThreadFactory {
    static final AtomicInteger CREATED = new AtomicInteger();

    @Override
    public Thread newThread(Runnable r) {
        Thread t = new Thread(r, "counting-factory-" + CREATED.incrementAndGet());
        t.setDaemon(true);
        return t;
    }
}
