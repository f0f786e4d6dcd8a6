package dev.overlap.nio;

import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.CompletionHandler;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * Run in a JVM of its own without {@code java.nio.channels.DefaultThreadPool.threadFactory}:
 * {@code FILE} reads it in a chain of 20 default-group handlers and prints, per handler, the
 * thread's name and whether it is a reaper of the shared engine ({@code THREAD name reaper|other}),
 * then {@code DONE}.
 */
public class InlineHelper {
    public static void main(String[] a) throws Exception {
        Path p = Path.of(a[0]);
        Files.write(p, new byte[8192]);
        OverlapEngine e = OverlapEngine.shared();
        CountDownLatch done = new CountDownLatch(1);
        StringBuilder out = new StringBuilder();
        Thread main = Thread.currentThread();
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(p, StandardOpenOption.READ)) {
            ch.read(ByteBuffer.allocate(100), 0, 20, new CompletionHandler<Integer, Integer>() {
                @Override
                public void completed(Integer n, Integer left) {
                    Thread t = Thread.currentThread();
                    synchronized (out) {
                        out.append("THREAD ").append(t.getName()).append(' ')
                                .append(t == main ? "caller" : e.isReaper(t) ? "reaper" : "other").append('\n');
                    }
                    if (left > 1) {
                        ch.read(ByteBuffer.allocate(100), 0, left - 1, this);
                    } else {
                        done.countDown();
                    }
                }

                @Override
                public void failed(Throwable exc, Integer left) {
                    synchronized (out) {
                        out.append("FAILED ").append(exc).append('\n');
                    }
                    done.countDown();
                }
            });
            if (!done.await(30, TimeUnit.SECONDS)) {
                System.out.println("TIMEOUT");
            }
        }
        synchronized (out) {
            System.out.print(out);
        }
        System.out.println("DONE");
    }
}
