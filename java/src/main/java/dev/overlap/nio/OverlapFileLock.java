package dev.overlap.nio;

import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A POSIX byte-range lock of the channel's open file description (fcntl F_OFD_SETLK) held by an
 * {@link OverlapAsynchronousFileChannel}; it excludes conflicting locks of other processes
 * (FileChannel.lock of another JVM included) and of other descriptions of the file in this one,
 * and closing another descriptor of the file does not release it. Within this JVM the table below
 * refuses overlapping locks of overlap's channels on the same file (by device and inode) with
 * OverlappingFileLockException at the call, as the JDK's FileLockTable does.
 */
final class OverlapFileLock extends FileLock {
    private final OverlapAsynchronousFileChannel ch;
    private volatile boolean valid = true;

    OverlapFileLock(OverlapAsynchronousFileChannel ch, long position, long size, boolean shared) {
        super(ch, position, size, shared);
        this.ch = ch;
    }

    @Override
    public boolean isValid() {
        return valid && ch.isOpen();
    }

    boolean isValidIgnoringChannel() {
        return valid;
    }

    void invalidate() {
        valid = false;
    }

    @Override
    public void release() throws IOException {
        synchronized (this) {
            if (!ch.isOpen()) {
                throw new ClosedChannelException();
            }
            if (!valid) {
                return;
            }
            ch.unlock(this);
            valid = false;
        }
        Table.remove(ch.key, this);
    }

    /** The JVM-wide table of the locks held or pending through these channels, by file. */
    static final class Table {
        private Table() {}

        private static final Map<FileKey, List<OverlapFileLock>> LOCKS = new HashMap<>();

        record FileKey(long dev, long ino) {}

        static synchronized void add(FileKey key, OverlapFileLock lock) {
            List<OverlapFileLock> list = LOCKS.computeIfAbsent(key, k -> new ArrayList<>());
            for (OverlapFileLock l : list) {
                if (l.overlaps(lock.position(), lock.size())) {
                    throw new OverlappingFileLockException();
                }
            }
            list.add(lock);
        }

        static synchronized void remove(FileKey key, OverlapFileLock lock) {
            List<OverlapFileLock> list = LOCKS.get(key);
            if (list != null) {
                list.remove(lock);
                if (list.isEmpty()) {
                    LOCKS.remove(key);
                }
            }
        }

        /** Removes and returns the locks of one channel. */
        static synchronized List<OverlapFileLock> removeAll(FileKey key, OverlapAsynchronousFileChannel ch) {
            List<OverlapFileLock> out = new ArrayList<>();
            List<OverlapFileLock> list = LOCKS.get(key);
            if (list != null) {
                list.removeIf(l -> {
                    if (l.acquiredBy() == ch) {
                        out.add(l);
                        return true;
                    }
                    return false;
                });
                if (list.isEmpty()) {
                    LOCKS.remove(key);
                }
            }
            return out;
        }
    }
}
