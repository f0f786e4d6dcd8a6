package dev.overlap.nio;

import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.CompletionHandler;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import static java.nio.file.StandardOpenOption.READ;
import static java.nio.file.StandardOpenOption.WRITE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** POSIX locks against FileChannel.lock of another JVM, and the JDK's rules within this one. */
class LockTest {
    @TempDir
    Path dir;

    @Test
    void aLockExcludesAnotherJvmAndSizeZeroMeansToTheEnd() throws Exception {
        Path f = dir.resolve("lock");
        Files.write(f, new byte[100]);
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ, WRITE)) {
            FileLock l = ch.lock(10, 0, false).get(10, TimeUnit.SECONDS);
            assertSame(ch, l.acquiredBy(), "acquiredBy() is the user's channel");
            assertTrue(l.isValid());
            assertEquals(Long.MAX_VALUE - 10, l.size(), "size 0 means to the end, as the JDK records it");
            try (var other = new TestSupport.OtherJvm("try", f.toString(), "1000000", "10")) {
                assertEquals("BUSY", other.line(), "far past the end of the file is locked too");
            }
            try (var other = new TestSupport.OtherJvm("try", f.toString(), "0", "10")) {
                assertEquals("LOCKED", other.line(), "before the locked range is free");
            }
            l.release();
            assertFalse(l.isValid());
            try (var other = new TestSupport.OtherJvm("try", f.toString(), "1000000", "10")) {
                assertEquals("LOCKED", other.line(), "released");
            }
            FileLock t = ch.tryLock();
            assertNotNull(t);
            try (var other = new TestSupport.OtherJvm("try", f.toString(), "0", "1")) {
                assertEquals("BUSY", other.line());
            }
            t.release();
        }
    }

    @Test
    void aPendingLockWaitsForTheOtherJvmAndCloseFailsItPromptly() throws Exception {
        Path f = dir.resolve("pending");
        Files.write(f, new byte[100]);
        try (var other = new TestSupport.OtherJvm("hold", f.toString(), "0", "100")) {
            assertEquals("HELD", other.line());
            AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ, WRITE);
            assertNull(ch.tryLock(0, 100, false), "tryLock says another process holds it");
            Future<FileLock> pending = ch.lock(50, 10, false);
            Thread.sleep(300);
            assertFalse(pending.isDone(), "the lock waits");
            long t0 = System.nanoTime();
            ch.close();
            ExecutionException x = assertThrows(ExecutionException.class, () -> pending.get(2, TimeUnit.SECONDS));
            assertInstanceOf(AsynchronousCloseException.class, x.getCause());
            assertTrue(System.nanoTime() - t0 < 1_000_000_000L, "promptly");

            // and a pending lock is granted once the other JVM lets go
            try (AsynchronousFileChannel ch2 = OverlapAsynchronousFileChannel.open(f, READ, WRITE)) {
                Future<FileLock> p2 = ch2.lock(0, 100, false);
                Thread.sleep(200);
                assertFalse(p2.isDone());
                other.send();
                assertEquals("RELEASED", other.line());
                FileLock l = p2.get(10, TimeUnit.SECONDS);
                assertSame(ch2, l.acquiredBy());
                assertTrue(l.isValid());
            }
        }
    }

    @Test
    void closingAnotherDescriptorOfTheFileKeepsTheLock() throws Exception {
        Path f = dir.resolve("others");
        Files.write(f, new byte[100]);
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ, WRITE)) {
            FileLock l = ch.lock(0, 100, false).get(10, TimeUnit.SECONDS);
            // a process's POSIX locks (F_SETLK, the JDK's) go with the first close of any of its
            // descriptors of the file; the open file description's do not
            Files.readAllBytes(f);
            try (FileChannel jdk = FileChannel.open(f, READ)) {
                jdk.size();
            }
            AsynchronousFileChannel.open(f, READ).close(); // the JDK's own channel
            OverlapAsynchronousFileChannel.open(f, READ).close();
            assertTrue(l.isValid());
            try (var other = new TestSupport.OtherJvm("try", f.toString(), "0", "10")) {
                assertEquals("BUSY", other.line(), "still held after other descriptors closed");
            }
            // and a JDK FileChannel lock in this JVM is excluded too
            try (FileChannel jdk = FileChannel.open(f, READ, WRITE)) {
                assertNull(jdk.tryLock(0, 10, false), "a JDK lock on another description conflicts");
            }
            l.release();
            try (var other = new TestSupport.OtherJvm("try", f.toString(), "0", "10")) {
                assertEquals("LOCKED", other.line(), "released");
            }
        }
    }

    @Test
    void theHandlerFormIsGrantedAndFailedByClose() throws Exception {
        Path f = dir.resolve("handler");
        Files.write(f, new byte[100]);
        try (var other = new TestSupport.OtherJvm("hold", f.toString(), "50", "50")) {
            assertEquals("HELD", other.line());
            AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ, WRITE);
            CompletableFuture<Object[]> granted = new CompletableFuture<>();
            ch.lock(0, 50, false, "a", new CompletionHandler<FileLock, String>() {
                @Override
                public void completed(FileLock l, String att) {
                    granted.complete(new Object[] {l, att});
                }

                @Override
                public void failed(Throwable x, String att) {
                    granted.completeExceptionally(x);
                }
            });
            Object[] got = granted.get(10, TimeUnit.SECONDS);
            FileLock l = (FileLock) got[0];
            assertEquals("a", got[1], "the attachment");
            assertSame(ch, l.acquiredBy());
            assertTrue(l.isValid());
            CompletableFuture<Object> failed = new CompletableFuture<>();
            ch.lock(60, 10, true, "b", new CompletionHandler<FileLock, String>() {
                @Override
                public void completed(FileLock l2, String att) {
                    failed.complete(l2);
                }

                @Override
                public void failed(Throwable x, String att) {
                    failed.complete(new Object[] {x, att});
                }
            });
            Thread.sleep(200);
            assertFalse(failed.isDone(), "the other JVM holds 50..100: the lock waits");
            ch.close();
            Object[] f2 = assertInstanceOf(Object[].class, failed.get(2, TimeUnit.SECONDS));
            assertInstanceOf(AsynchronousCloseException.class, f2[0]);
            assertEquals("b", f2[1]);
            assertFalse(l.isValid(), "closing the channel invalidates its lock");
        }
    }

    @Test
    void overlappingLocksInOneJvmThrowAtTheCall() throws Exception {
        Path f = dir.resolve("overlap");
        Files.write(f, new byte[100]);
        try (AsynchronousFileChannel a = OverlapAsynchronousFileChannel.open(f, READ, WRITE);
             AsynchronousFileChannel b = OverlapAsynchronousFileChannel.open(f, READ, WRITE)) {
            FileLock l = a.lock(0, 50, false).get(10, TimeUnit.SECONDS);
            assertThrows(OverlappingFileLockException.class, () -> a.lock(10, 10, false));
            assertThrows(OverlappingFileLockException.class, () -> a.tryLock(49, 10, true));
            assertThrows(OverlappingFileLockException.class, () -> b.lock(0, 0, false), "another channel, same file");
            FileLock m = b.lock(50, 50, true).get(10, TimeUnit.SECONDS);
            assertTrue(m.isShared());
            l.release();
            FileLock n = b.tryLock(0, 50, false);
            assertNotNull(n);
            assertTrue(b.isOpen());
            b.close();
            assertFalse(n.isValid(), "closing the channel invalidates its locks");
            assertFalse(m.isValid());
            FileLock again = a.tryLock(0, 100, false);
            assertNotNull(again, "closing released them");
        }
    }

    @Test
    void cancellingAPendingLockFreesItsRange() throws Exception {
        Path f = dir.resolve("cancel");
        Files.write(f, new byte[100]);
        try (var other = new TestSupport.OtherJvm("hold", f.toString(), "0", "100");
             AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(f, READ, WRITE)) {
            assertEquals("HELD", other.line());
            Future<FileLock> p = ch.lock(0, 10, false);
            assertTrue(p.cancel(false));
            assertTrue(ch.isOpen());
            other.send();
            assertEquals("RELEASED", other.line());
            FileLock l = ch.lock(0, 10, false).get(10, TimeUnit.SECONDS);
            assertTrue(l.isValid(), "the cancelled request no longer holds the range in the table");
        }
    }
}
