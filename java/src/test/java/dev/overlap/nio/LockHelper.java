package dev.overlap.nio;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * Another JVM's view of a file's locks, through the JDK's FileChannel:
 * {@code try FILE POS SIZE} prints LOCKED or BUSY; {@code hold FILE POS SIZE} locks, prints HELD,
 * releases when a line arrives on stdin and prints RELEASED.
 */
public class LockHelper {
    public static void main(String[] a) throws Exception {
        Path p = Path.of(a[1]);
        long pos = Long.parseLong(a[2]);
        long size = Long.parseLong(a[3]);
        try (FileChannel fc = FileChannel.open(p, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            if (a[0].equals("try")) {
                FileLock l = fc.tryLock(pos, size, false);
                System.out.println(l != null ? "LOCKED" : "BUSY");
            } else {
                FileLock l = fc.lock(pos, size, false);
                System.out.println("HELD");
                System.out.flush();
                new BufferedReader(new InputStreamReader(System.in)).readLine();
                l.release();
                System.out.println("RELEASED");
            }
        }
    }
}
