package dev.overlap.nio;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousCloseException;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.CompletionHandler;
import java.nio.channels.FileLock;
import java.nio.channels.NonReadableChannelException;
import java.nio.channels.NonWritableChannelException;
import java.nio.channels.ShutdownChannelGroupException;
import java.nio.charset.Charset;
import java.nio.file.LinkOption;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.ProviderMismatchException;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.util.Collections;
import java.util.HashSet;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantReadWriteLock;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_SHORT;

/**
 * An {@link AsynchronousFileChannel} whose reads, writes and syncs are performed by overlap's engine
 * (io_uring; Linux AIO and a bounded thread pool as fallbacks), not by a pool of Java threads
 * calling {@code pread}.
 *
 * <p>It follows the JDK's conventions ({@code sun.nio.ch.SimpleAsynchronousFileChannelImpl}):
 * the same exceptions at the call, futures and handlers completed with the same exceptions,
 * handlers run on the executor given to {@link #open(Path, Set, ExecutorService, FileAttribute[])},
 * else on the default group ({@link DefaultGroup}), whose threads are the engine's reapers: the
 * reaper that takes a completion runs its handler (never the thread that called read or write,
 * during that call).
 *
 * <p>Closing, as the JDK's channel: operations not yet submitted fail with
 * {@link AsynchronousCloseException}; {@link #close} waits for the reads and writes in flight of
 * a regular file or a block device, which complete with their real results (a read's bytes, a
 * write's count: a write that completed is in the file and is reported so), and returns once the
 * kernel is done with every buffer. A FIFO, a character device or a socket may never complete an
 * operation (a read of a FIFO nobody writes), where the JDK's close interrupts the thread blocked
 * in it: their reads and writes always go through library-owned copies, never the caller's
 * memory. On io_uring close asks the kernel to stop them (they go through a cancellable port) and
 * each fails with AsynchronousCloseException once stopped (or completes, if it completed first);
 * where they cannot be stopped (Linux AIO, the thread pool, or not within a second) close fails
 * them with AsynchronousCloseException at once; the kernel may then still finish them into or
 * from its copy, which is freed when their completion is reaped, and the caller's buffer is never
 * touched after the failure was reported. Close never shuts an
 * executor down. Interrupting a thread does not close the channel.
 *
 * <p>A channel of an engine that was shut down ({@link OverlapEngine#close}) throws
 * {@link ShutdownChannelGroupException} at every read and write, as a channel of a terminated
 * AsynchronousChannelGroup does; opening one on it throws the same.
 *
 * <p>Cached reads: a read that returns a Future, of a file not opened with O_DIRECT, first asks the
 * page cache on the calling thread (one {@code preadv2(RWF_NOWAIT)}, which never waits for the
 * device; at most 1 MiB): when the cache holds the range, the Future is complete on return and no
 * operation is made ({@link OverlapEngine.Options#cachedReads}, {@code -Doverlap.cachedReads=false}
 * to turn it off). A heap buffer is read into as it is then.
 *
 * <p>Buffers: heap buffers are copied through library-owned native memory (within the engine's
 * copy budget: when it is full the calling thread waits, see {@link OverlapEngine}); direct buffers
 * ({@code allocateDirect}, mapped, {@code Arena.global()} and {@code Arena.ofAuto()} segments) are
 * given to the kernel as they are and kept reachable until the completion is reaped; buffers of
 * an arena the caller can close ({@code Arena.ofShared()}) are copied, so that closing that arena
 * while a read is in flight cannot let the kernel write into freed memory (such a read then fails
 * with IllegalStateException, wrapped as the JDK wraps failures of futures). Buffers of a confined
 * arena are refused with IllegalStateException (the JDK's channel hangs on them).
 *
 * <p>{@code com.sun.nio.file.ExtendedOpenOption.DIRECT} opens with
 * O_DIRECT: positions, lengths and direct buffer addresses must be multiples of the alignment the
 * kernel reports ({@link #directAlignment()}), or the operation fails with an IOException saying
 * which; heap buffers are copied into aligned memory. {@code SYNC} and {@code DSYNC} open with
 * O_SYNC and O_DSYNC. {@code APPEND} is refused (UnsupportedOperationException), as by the JDK.
 *
 * <p>Locks are POSIX byte-range locks of the channel's open file description (fcntl
 * {@code F_OFD_SETLK}; the process's {@code F_SETLK} on kernels before 3.15), so they exclude
 * {@code FileChannel.lock} of another process, and of this one. Unlike the JDK's own locks (which
 * are the process's), closing another descriptor of the same file (another channel, a
 * {@code Files.readAllBytes}) does not release them: only releasing the lock or closing this
 * channel does. {@code lock} tries at once; while a conflicting lock is held it tries
 * again with a backoff (1 ms doubling to 50 ms) on one daemon thread shared by all channels,
 * holding no thread meanwhile; {@code close} fails a pending lock with
 * AsynchronousCloseException at once. As a waiting lock is retried, not queued in the kernel, a
 * waiter may be overtaken by a later one.
 */
public final class OverlapAsynchronousFileChannel extends AsynchronousFileChannel {

    final OverlapEngine engine;
    private final long file;
    private final int fd;
    private final boolean reading;
    private final boolean writing;
    private final ExecutorService executor;
    /** Opened without an executor: handlers run on the default group (a reaper, see DefaultGroup). */
    final boolean inDefaultGroup;
    private final String path;
    private final boolean direct;
    private final int memAlign;
    private final int offAlign;
    /**
     * A regular file or a block device: its reads and writes complete by themselves, so close
     * waits for them and the kernel may be given a direct buffer as it is. Otherwise (a FIFO, a
     * character device, a socket) every transfer goes through a library-owned copy.
     */
    final boolean bounded;
    /** The port its reads and writes go to ({@link OverlapEngine#portFor}). */
    private final long opPort;
    /** Reads and writes submitted and not yet completed (see {@link #completed}). */
    private final java.util.concurrent.atomic.AtomicInteger inFlight = new java.util.concurrent.atomic.AtomicInteger();
    final OverlapFileLock.Table.FileKey key;

    private final ReentrantReadWriteLock closeLock = new ReentrantReadWriteLock();
    private final Object stateLock = new Object();
    private volatile boolean closed;
    private final Set<PendingLock> pendingLocks = ConcurrentHashMap.newKeySet();
    /** For the copy budget's wait (one object, not one per operation). */
    private final java.util.function.BooleanSupplier isClosed = this::closedOrShutdown;

    private boolean closedOrShutdown() {
        return closed || engine.isShutdown();
    }

    private OverlapAsynchronousFileChannel(OverlapEngine engine, long file, int fd, boolean reading, boolean writing,
                                           ExecutorService executor, boolean inDefaultGroup, String path, long dev,
                                           long ino, boolean bounded) throws IOException {
        this.engine = engine;
        this.file = file;
        this.fd = fd;
        this.reading = reading;
        this.writing = writing;
        this.executor = executor;
        this.inDefaultGroup = inDefaultGroup;
        this.path = path;
        this.bounded = bounded;
        this.opPort = engine.portFor(bounded);
        this.key = new OverlapFileLock.Table.FileKey(dev, ino);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment a = arena.allocate(Native.ALIGN_SIZE, 8);
            int r = (int) Native.file_alignment.invokeExact(file, a.address());
            if (r < 0) {
                throw new IOException("overlap_file_alignment: " + Native.lastError());
            }
            memAlign = Math.max(1, a.get(JAVA_INT, 0));
            offAlign = Math.max(1, a.get(JAVA_INT, 4));
            direct = a.get(JAVA_INT, 8) != 0;
        } catch (IOException | RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
    }

    // ------------------------------------------------------------------ opening

    /** As {@link AsynchronousFileChannel#open(Path, OpenOption...)}, on the shared engine. */
    public static OverlapAsynchronousFileChannel open(Path file, OpenOption... options) throws IOException {
        Set<OpenOption> set = new HashSet<>(options.length);
        Collections.addAll(set, options);
        return open(OverlapEngine.shared(), file, set, null);
    }

    /**
     * As {@link AsynchronousFileChannel#open(Path, Set, ExecutorService, FileAttribute[])}, on the
     * shared engine: handlers run on {@code executor}, or on the default group if it is null.
     */
    public static OverlapAsynchronousFileChannel open(Path file, Set<? extends OpenOption> options,
                                                      ExecutorService executor, FileAttribute<?>... attrs)
            throws IOException {
        return open(OverlapEngine.shared(), file, options, executor, attrs);
    }

    /** As above, on the given engine. */
    public static OverlapAsynchronousFileChannel open(OverlapEngine engine, Path file,
                                                      Set<? extends OpenOption> options, ExecutorService executor,
                                                      FileAttribute<?>... attrs) throws IOException {
        if (file instanceof OverlapPath op) {
            file = op.delegate;
        } else if (!file.getFileSystem().provider().getScheme().equals("file")) {
            throw new ProviderMismatchException("not a path of the default file system: " + file);
        }
        boolean read = false, write = false, append = false, truncate = false, noFollow = false, create = false,
                createNew = false, deleteOnClose = false, sync = false, dsync = false, odirect = false;
        for (OpenOption option : options) {
            if (option instanceof StandardOpenOption s) {
                switch (s) {
                    case READ -> read = true;
                    case WRITE -> write = true;
                    case APPEND -> append = true;
                    case TRUNCATE_EXISTING -> truncate = true;
                    case CREATE -> create = true;
                    case CREATE_NEW -> createNew = true;
                    case DELETE_ON_CLOSE -> deleteOnClose = true;
                    case SPARSE -> { }
                    case SYNC -> sync = true;
                    case DSYNC -> dsync = true;
                    default -> throw new UnsupportedOperationException();
                }
                continue;
            }
            if (option == LinkOption.NOFOLLOW_LINKS) {
                noFollow = true;
                continue;
            }
            if (option == com.sun.nio.file.ExtendedOpenOption.DIRECT) {
                odirect = true;
                continue;
            }
            if (option == null) {
                throw new NullPointerException();
            }
            throw new UnsupportedOperationException(option + " not supported");
        }
        if (!read && !write) {
            read = true;
        }
        if (append) {
            throw new UnsupportedOperationException("APPEND not allowed");
        }
        int mode = modeOf(attrs);
        if (executor != null && executor.isShutdown()) {
            throw new RejectedExecutionException("the executor is shut down");
        }
        if (engine.isShutdown()) {
            throw new ShutdownChannelGroupException();
        }

        String name = file.toString();
        int oflags = (read && write) ? Native.O_RDWR : write ? Native.O_WRONLY : Native.O_RDONLY;
        if (write) {
            if (truncate) {
                oflags |= Native.O_TRUNC;
            }
            if (createNew) {
                if (name.equals(".") || name.endsWith("/.")) {
                    throw Errors.forPath(Native.EEXIST, name, "");
                }
                oflags |= Native.O_CREAT | Native.O_EXCL;
            } else if (create) {
                oflags |= Native.O_CREAT;
            }
        }
        boolean followLinks = true;
        if (!createNew && (noFollow || deleteOnClose)) {
            followLinks = false;
            oflags |= Native.O_NOFOLLOW;
        }
        if (dsync) {
            oflags |= Native.O_DSYNC;
        }
        if (sync) {
            oflags |= Native.O_SYNC;
        }
        if (odirect) {
            oflags |= Native.O_DIRECT;
        }
        oflags |= Native.O_CLOEXEC;

        Charset cs = Charset.forName(System.getProperty("sun.jnu.encoding", "UTF-8"));
        int fd;
        long dev, ino;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment cpath = arena.allocateFrom(name, cs);
            MemorySegment cap = arena.allocate(Native.CAPTURE_LAYOUT);
            fd = (int) Native.open.invokeExact(cap, cpath, oflags, mode);
            if (fd < 0) {
                int e = Native.errno(cap);
                if (createNew && e == Native.EISDIR) {
                    e = Native.EEXIST;
                }
                throw Errors.forPath(e, name, (!followLinks && e == Native.ELOOP) ? " (NOFOLLOW_LINKS specified)" : "");
            }
            if (deleteOnClose) {
                int ignored = (int) Native.unlink.invokeExact(cap, cpath);
            }
            MemorySegment st = arena.allocate(Native.STAT_SIZE, 8);
            if ((int) Native.fstat.invokeExact(cap, fd, st.address()) < 0) {
                int e = Native.errno(cap);
                int ignored = (int) Native.close.invokeExact(fd);
                throw Errors.forPath(e, name, "");
            }
            dev = st.get(JAVA_LONG, Native.STAT_DEV);
            ino = st.get(JAVA_LONG, Native.STAT_INO);
            int type = st.get(JAVA_INT, Native.STAT_MODE) & Native.S_IFMT;
            boolean bounded = type == Native.S_IFREG || type == Native.S_IFBLK;
            MemorySegment out = arena.allocate(8, 8);
            int r = (int) Native.file_adopt.invokeExact(engine.handle, fd, out.address());
            if (r < 0) {
                String msg = Native.lastError();
                int ignored = (int) Native.close.invokeExact(fd);
                throw new IOException("overlap_file_adopt: " + msg);
            }
            long handle = out.get(JAVA_LONG, 0);
            ExecutorService ex = executor != null ? executor : DefaultGroup.executor();
            try {
                return new OverlapAsynchronousFileChannel(engine, handle, fd, read, write, ex, executor == null, name,
                        dev, ino, bounded);
            } catch (IOException | RuntimeException | Error e) {
                Native.file_free.invokeExact(handle);
                throw e;
            }
        } catch (IOException | RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
    }

    @SuppressWarnings("unchecked")
    private static int modeOf(FileAttribute<?>... attrs) {
        int mode = 0666;
        for (FileAttribute<?> attr : attrs) {
            String n = attr.name();
            if (!n.equals("posix:permissions") && !n.equals("unix:permissions")) {
                throw new UnsupportedOperationException("'" + attr.name() + "' not supported as initial attribute");
            }
            mode = 0;
            for (PosixFilePermission p : (Set<PosixFilePermission>) attr.value()) {
                mode |= switch (p) {
                    case OWNER_READ -> 0400;
                    case OWNER_WRITE -> 0200;
                    case OWNER_EXECUTE -> 0100;
                    case GROUP_READ -> 040;
                    case GROUP_WRITE -> 020;
                    case GROUP_EXECUTE -> 010;
                    case OTHERS_READ -> 04;
                    case OTHERS_WRITE -> 02;
                    case OTHERS_EXECUTE -> 01;
                };
            }
        }
        return mode;
    }

    // ------------------------------------------------------------------ state

    @Override
    public boolean isOpen() {
        return !closed;
    }

    /** The engine this channel's operations run on. */
    public OverlapEngine engine() {
        return engine;
    }

    /** The O_DIRECT alignment (bytes) of offsets and lengths the kernel reports, or 1 without O_DIRECT. */
    public int directAlignment() {
        return direct ? offAlign : 1;
    }

    /** The file descriptor (tests, diagnostics). */
    int fd() {
        return fd;
    }

    private void begin() throws ClosedChannelException {
        closeLock.readLock().lock();
        if (closed) {
            closeLock.readLock().unlock();
            throw new ClosedChannelException();
        }
    }

    private void end() {
        closeLock.readLock().unlock();
    }

    /**
     * Closes the channel, as the JDK's: pending locks fail with AsynchronousCloseException, held
     * locks are released; reads and writes in flight on a regular file or block device complete
     * (with their results) before this returns, so the kernel touches no buffer of the caller's
     * after it; those of a FIFO, a character device or a socket (which may never complete) are
     * stopped on io_uring and fail with AsynchronousCloseException once stopped, elsewhere at once
     * (the kernel has only the library's copies); the descriptor is closed. The executor is not
     * shut down.
     */
    @Override
    public void close() throws IOException {
        synchronized (stateLock) {
            if (closed) {
                return;
            }
            closed = true;
        }
        // pending locks give up at once
        for (PendingLock p : pendingLocks) {
            p.abandon(new AsynchronousCloseException());
        }
        pendingLocks.clear();
        // held locks: released (closing the descriptor would release them too) and invalidated
        for (OverlapFileLock l : OverlapFileLock.Table.removeAll(key, this)) {
            synchronized (l) {
                if (l.isValidIgnoringChannel()) {
                    fcntlLock(Native.F_UNLCK, l.position(), l.size());
                }
                l.invalidate();
            }
        }
        // wait for submissions in progress on other threads (none waits while holding it); every
        // later one sees `closed`
        closeLock.writeLock().lock();
        closeLock.writeLock().unlock();
        boolean unfinished = false;
        if (bounded) {
            // as the JDK's channel: the reads and writes in flight complete (with their results)
            // before the descriptor closes, and no buffer of the caller's is the kernel's after this
            engine.helpUntil(() -> inFlight.get() == 0);
        } else if (!engine.cancel(this, opPort, () -> inFlight.get() == 0)) {
            // may never complete, and the kernel could not stop them (AIO, the pool): failed now
            // (the kernel has only the library's copies)
            unfinished = engine.failInflight(this);
        }
        int r = 0;
        try {
            // overlap_file_close waits for operations in flight on the thread pool driver (a read
            // of an empty FIFO: for ever); with operations in flight only the handle is freed, and
            // the descriptor closes when the last of them completes (the engine holds the file for
            // them). Without, the close's verdict is reported.
            if (!unfinished) {
                r = (int) Native.file_close.invokeExact(file);
            }
            Native.file_free.invokeExact(file);
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
        if (r < 0 && r != -Native.EBADF) {
            throw Errors.io(-r, "close");
        }
    }

    // ------------------------------------------------------------------ size, truncate, force

    @Override
    public long size() throws IOException {
        begin();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment cap = arena.allocate(Native.CAPTURE_LAYOUT);
            MemorySegment st = arena.allocate(Native.STAT_SIZE, 8);
            if ((int) Native.fstat.invokeExact(cap, fd, st.address()) < 0) {
                throw Errors.io(Native.errno(cap), "fstat");
            }
            return st.get(JAVA_LONG, Native.STAT_SIZE_OFF);
        } catch (IOException | RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Native.fatal(t);
        } finally {
            end();
        }
    }

    /** Truncates to {@code size} if the file is longer; never grows it (as the JDK's). */
    @Override
    public AsynchronousFileChannel truncate(long size) throws IOException {
        if (size < 0) {
            throw new IllegalArgumentException("Negative size");
        }
        if (!writing) {
            throw new NonWritableChannelException();
        }
        long current = size();
        if (size >= current) {
            return this;
        }
        begin();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment cap = arena.allocate(Native.CAPTURE_LAYOUT);
            if ((int) Native.ftruncate.invokeExact(cap, fd, size) < 0) {
                throw Errors.io(Native.errno(cap), "ftruncate");
            }
            return this;
        } catch (IOException | RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Native.fatal(t);
        } finally {
            end();
        }
    }

    /** fsync ({@code metaData}) or fdatasync, performed by the engine; waits for it. */
    @Override
    public void force(boolean metaData) throws IOException {
        begin();
        int r;
        try {
            r = metaData ? (int) Native.fsync.invokeExact(file) : (int) Native.fdatasync.invokeExact(file);
        } catch (Throwable t) {
            throw Native.fatal(t);
        } finally {
            end();
        }
        if (r < 0) {
            if (!isOpen()) {
                throw new AsynchronousCloseException();
            }
            throw Errors.io(-r, metaData ? "fsync" : "fdatasync");
        }
    }

    // ------------------------------------------------------------------ read, write

    @Override
    public Future<Integer> read(ByteBuffer dst, long position) {
        return implRead(dst, position, null, null);
    }

    @Override
    public <A> void read(ByteBuffer dst, long position, A attachment, CompletionHandler<Integer, ? super A> handler) {
        if (handler == null) {
            throw new NullPointerException("'handler' is null");
        }
        implRead(dst, position, attachment, handler);
    }

    @Override
    public Future<Integer> write(ByteBuffer src, long position) {
        return implWrite(src, position, null, null);
    }

    @Override
    public <A> void write(ByteBuffer src, long position, A attachment, CompletionHandler<Integer, ? super A> handler) {
        if (handler == null) {
            throw new NullPointerException("'handler' is null");
        }
        implWrite(src, position, attachment, handler);
    }

    private <A> Future<Integer> implRead(ByteBuffer dst, long position, A attachment,
                                         CompletionHandler<Integer, ? super A> handler) {
        if (position < 0) {
            throw new IllegalArgumentException("Negative position");
        }
        if (!reading) {
            throw new NonReadableChannelException();
        }
        if (dst.isReadOnly()) {
            throw new IllegalArgumentException("Read-only buffer");
        }
        return transfer(false, dst, position, attachment, handler);
    }

    private <A> Future<Integer> implWrite(ByteBuffer src, long position, A attachment,
                                          CompletionHandler<Integer, ? super A> handler) {
        if (position < 0) {
            throw new IllegalArgumentException("Negative position");
        }
        if (!writing) {
            throw new NonWritableChannelException();
        }
        return transfer(true, src, position, attachment, handler);
    }

    private <A> Future<Integer> immediate(Integer value, Throwable exc, A attachment,
                                          CompletionHandler<Integer, ? super A> handler) {
        if (handler == null) {
            return exc == null ? OpFuture.completed(value) : OpFuture.failed(exc);
        }
        Op.dispatch(executor, handler, attachment, value, exc);
        return null;
    }

    /** Whether the kernel may be given this direct buffer's memory as it is. */
    private static boolean memoryStaysValid(MemorySegment seg) {
        return STAYS_VALID.get(seg.scope().getClass());
    }

    /** By the class of a segment's scope (looked up once per class, not per operation). */
    private static final ClassValue<Boolean> STAYS_VALID = new ClassValue<>() {
        @Override
        protected Boolean computeValue(Class<?> type) {
            String scope = type.getName();
            // allocateDirect / mapped buffers (a heap session holding the buffer), Arena.global(),
            // Arena.ofAuto(): freed only once unreachable, and the Op keeps the buffer reachable.
            return scope.startsWith("jdk.internal.foreign.GlobalSession")
                    || scope.equals("jdk.internal.foreign.ImplicitSession");
        }
    };

    private <A> Future<Integer> transfer(boolean write, ByteBuffer buf, long position, A attachment,
                                         CompletionHandler<Integer, ? super A> handler) {
        if (!isOpen() || buf.remaining() == 0) {
            return immediate(0, isOpen() ? null : new ClosedChannelException(), attachment, handler);
        }
        if (engine.isShutdown()) {
            throw new ShutdownChannelGroupException();
        }
        if (!inDefaultGroup && executor.isShutdown()) {
            throw new RejectedExecutionException("the channel's executor is shut down");
        }
        int remaining = buf.remaining();
        MemorySegment seg = MemorySegment.ofBuffer(buf);
        if (!write && handler == null && !direct && remaining <= CACHED_READ_MAX && engine.cachedReads) {
            Future<Integer> cached = readCached(buf, seg, remaining, position);
            if (cached != null) {
                return cached;
            }
        }
        OpFuture<Integer> future = handler == null ? new OpFuture<>(this, engine) : null;
        Op op = new Op(this, write, buf, future, handler, attachment, executor);
        long addr;
        long len;
        if (bounded && buf.isDirect() && memoryStaysValid(seg)) {
            addr = seg.address();
            len = remaining;
        } else {
            if (buf.isDirect() && seg.scope().getClass().getName().endsWith("ConfinedSession")) {
                throw new IllegalStateException("a buffer of a confined arena cannot be used by an asynchronous"
                        + " channel (only its owner thread may touch it): use Arena.ofShared() or ofAuto()");
            }
            // a copy in library-owned memory, within the copy budget
            len = Math.min(remaining, engine.maxInflightBytes);
            if (!engine.acquireCopy(len, isClosed)) {
                if (engine.isShutdown()) {
                    throw new ShutdownChannelGroupException();
                }
                op.deliver(null, new AsynchronousCloseException());
                return future;
            }
            op.copyBytes = len;
            op.bounce = Native.allocate(len, Math.max(64, direct ? memAlign : 64));
            op.userSegment = seg;
            if (write) {
                MemorySegment.copy(seg, 0, Native.segment(op.bounce, len), 0, len);
            }
            addr = op.bounce;
        }
        op.length = len;
        submit(op, write, addr, len, position);
        return future;
    }

    /** The largest read tried from the page cache on the caller (a heap copy holds off safepoints). */
    private static final int CACHED_READ_MAX = 1 << 20;

    /**
     * A read whose result is a Future, of a buffered file: if the page cache holds the whole range,
     * the calling thread reads it at once ({@code overlap_pread_cached}: one {@code
     * preadv2(RWF_NOWAIT)}, which never waits for the device) and the Future is already complete,
     * as the JDK's channel allows; null when the kernel cannot answer at once (the read is then
     * submitted as usual). A heap buffer is read into as it is (a critical downcall), a direct
     * buffer whose memory stays valid by its address; a buffer of an arena another thread may close
     * is left to the usual path (copied). A handler is never run here: it belongs to its group's
     * threads.
     */
    private Future<Integer> readCached(ByteBuffer buf, MemorySegment seg, int remaining, long position) {
        boolean heap = !buf.isDirect();
        if (!heap && !memoryStaysValid(seg)) {
            return null;
        }
        long n;
        closeLock.readLock().lock();
        try {
            if (closed) {
                return null;
            }
            try {
                n = heap ? (long) Native.pread_cached_heap.invokeExact(file, seg, (long) remaining, position)
                         : (long) Native.pread_cached.invokeExact(file, seg.address(), (long) remaining, position);
            } catch (Throwable t) {
                throw Native.fatal(t);
            }
        } finally {
            closeLock.readLock().unlock();
        }
        if (n < 0) {
            return null; // -EAGAIN, or an error the usual path reports as the JDK would
        }
        if (n == 0) {
            return OpFuture.completed(-1); // end of file (remaining > 0 here)
        }
        buf.position(buf.position() + (int) n);
        return OpFuture.completed((int) n);
    }

    /**
     * A channel registers its file with the engine's port (io_uring's registered files: the kernel
     * then skips looking the descriptor up for each read and write) once it has sent this many
     * operations through the port: two system calls (registering, and ending it at close) that a
     * channel opened for a read or two would not earn back. {@code -Doverlap.registerFiles=false}
     * never registers.
     */
    static final int REGISTER_AFTER_OPS = 64;
    /** Operations sent through the port, until the file is registered (racy: a miss or a second try is harmless). */
    private int portOps;
    private volatile boolean fileRegistered = !OverlapEngine.REGISTER_FILES;

    /**
     * Registers the file (under the close lock's read side). 1 registered, 0 the port cannot (no
     * ring of its own, or a descriptor number beyond its table), -errno: all leave the operations
     * as they were, so the result only ends the attempts.
     */
    private void registerFile() throws Throwable {
        fileRegistered = true;
        int ignored = (int) Native.port_register_file.invokeExact(opPort, file);
    }

    private void submit(Op op, boolean write, long addr, long len, long position) {
        long id = engine.nextId();
        op.id = id;
        for (;;) {
            long seen = engine.generation();
            closeLock.readLock().lock();
            try {
                if (closed) {
                    op.release();
                    op.deliver(null, new AsynchronousCloseException());
                    return;
                }
                if (!engine.enterSubmit()) {
                    op.release();
                    throw new ShutdownChannelGroupException();
                }
                try {
                    if (submitOnce(op, write, addr, len, position)) {
                        return;
                    }
                } finally {
                    engine.exitSubmit();
                }
            } finally {
                closeLock.readLock().unlock();
            }
            // the in-flight budget is full: wait for completions to be reaped (no lock held)
            engine.awaitProgress(seen);
        }
    }

    /**
     * One attempt (under the close lock, counted by the engine): true when the operation was
     * submitted or failed, false when the budget is full (-EAGAIN: try again).
     */
    private boolean submitOnce(Op op, boolean write, long addr, long len, long position) {
        long id = op.id;
        inFlight.incrementAndGet();
        engine.ops.put(op);
        int r;
        try {
            if (!fileRegistered && ++portOps >= REGISTER_AFTER_OPS) {
                registerFile();
            }
            r = write ? (int) Native.port_write.invokeExact(opPort, file, addr, len, position, id)
                      : (int) Native.port_read.invokeExact(opPort, file, addr, len, position, id);
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
        if (r == 0) {
            return true;
        }
        engine.ops.remove(id);
        completed();
        if (r == -Native.EAGAIN) {
            return false;
        }
        op.release();
        if (r == -Native.ESHUTDOWN) {
            throw new ShutdownChannelGroupException();
        }
        String msg = Native.lastError();
        op.deliver(null, new IOException(msg.isEmpty() ? Native.strerror(-r) : msg));
        return true;
    }

    /** A read or write of this channel was reaped (or not submitted after all): the kernel let go of its buffer. */
    void completed() {
        int n = inFlight.decrementAndGet();
        assert n >= 0 : "more completions than submissions";
    }

    // ------------------------------------------------------------------ locks

    /**
     * The fcntl command of the channels' locks: the open file description's lock (F_OFD_SETLK),
     * or, on a kernel before 3.15 that refuses it (EINVAL), the process's (F_SETLK).
     */
    private static volatile int lockCommand = Native.F_OFD_SETLK;

    /**
     * fcntl(F_OFD_SETLK): true if granted, false if a conflicting lock is held, by another
     * process or by another open file description of the file (a JDK FileChannel's lock in this
     * process).
     */
    boolean fcntlLock(int type, long position, long size) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            // zeroed: l_pid is 0, as an open file description lock requires
            MemorySegment fl = arena.allocate(Native.FLOCK_SIZE, 8);
            fl.set(JAVA_SHORT, 0, (short) type);
            fl.set(JAVA_SHORT, 2, (short) 0); // SEEK_SET
            fl.set(JAVA_LONG, 8, position);
            fl.set(JAVA_LONG, 16, size == Long.MAX_VALUE ? 0 : size);
            MemorySegment cap = arena.allocate(Native.CAPTURE_LAYOUT);
            for (;;) {
                int cmd = lockCommand;
                int r = (int) Native.fcntl_lock.invokeExact(cap, fd, cmd, fl.address());
                if (r == 0) {
                    return true;
                }
                int e = Native.errno(cap);
                if (e == Native.EINTR) {
                    continue;
                }
                if (e == Native.EINVAL && cmd == Native.F_OFD_SETLK) {
                    lockCommand = Native.F_SETLK; // a kernel without open file description locks
                    continue;
                }
                if (e == Native.EAGAIN || e == Native.EACCES) {
                    return false;
                }
                throw Errors.io(e, cmd == Native.F_OFD_SETLK ? "fcntl(F_OFD_SETLK)" : "fcntl(F_SETLK)");
            }
        } catch (IOException | RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
    }

    void unlock(OverlapFileLock l) throws IOException {
        begin();
        try {
            fcntlLock(Native.F_UNLCK, l.position(), l.size());
        } finally {
            end();
        }
    }

    private OverlapFileLock addToTable(long position, long size, boolean shared) {
        OverlapFileLock l = new OverlapFileLock(this, position, size, shared); // checks the arguments
        closeLock.readLock().lock();
        try {
            if (closed) {
                return null;
            }
            OverlapFileLock.Table.add(key, l); // may throw OverlappingFileLockException
            return l;
        } finally {
            closeLock.readLock().unlock();
        }
    }

    @Override
    public Future<FileLock> lock(long position, long size, boolean shared) {
        return implLock(position, size, shared, null, null);
    }

    @Override
    public <A> void lock(long position, long size, boolean shared, A attachment,
                         CompletionHandler<FileLock, ? super A> handler) {
        if (handler == null) {
            throw new NullPointerException("'handler' is null");
        }
        implLock(position, size, shared, attachment, handler);
    }

    private <A> Future<FileLock> implLock(long position, long size, boolean shared, A attachment,
                                          CompletionHandler<FileLock, ? super A> handler) {
        if (shared && !reading) {
            throw new NonReadableChannelException();
        }
        if (!shared && !writing) {
            throw new NonWritableChannelException();
        }
        long len = size != 0 ? size : Long.MAX_VALUE - Math.max(0, position);
        OverlapFileLock l = addToTable(position, len, shared);
        if (l == null) {
            ClosedChannelException exc = new ClosedChannelException();
            if (handler == null) {
                return OpFuture.failed(exc);
            }
            Op.dispatch(executor, handler, attachment, null, exc);
            return null;
        }
        OpFuture<FileLock> future = handler == null ? new OpFuture<>(this) : null;
        @SuppressWarnings("unchecked")
        PendingLock p = new PendingLock(l, future, (CompletionHandler<FileLock, Object>) handler, attachment);
        if (future != null) {
            future.onCancel = () -> p.abandon(null);
        }
        pendingLocks.add(p);
        if (closed) {
            p.abandon(new AsynchronousCloseException());
            return future;
        }
        p.run();
        return future;
    }

    @Override
    public FileLock tryLock(long position, long size, boolean shared) throws IOException {
        if (shared && !reading) {
            throw new NonReadableChannelException();
        }
        if (!shared && !writing) {
            throw new NonWritableChannelException();
        }
        if (size == 0) {
            size = Long.MAX_VALUE - Math.max(0, position);
        }
        OverlapFileLock l = addToTable(position, size, shared);
        if (l == null) {
            throw new ClosedChannelException();
        }
        boolean got = false;
        try {
            begin();
            try {
                got = fcntlLock(shared ? Native.F_RDLCK : Native.F_WRLCK, position, size);
            } finally {
                end();
            }
            return got ? l : null;
        } finally {
            if (!got) {
                OverlapFileLock.Table.remove(key, l);
            }
        }
    }

    /** The one daemon thread that retries pending locks. */
    private static final class Retrier {
        static final ScheduledThreadPoolExecutor EXEC;

        static {
            EXEC = new ScheduledThreadPoolExecutor(1, r -> {
                Thread t = new Thread(r, "overlap-lock-retry");
                t.setDaemon(true);
                return t;
            });
            EXEC.setRemoveOnCancelPolicy(true);
            EXEC.setKeepAliveTime(10, TimeUnit.SECONDS);
            EXEC.allowCoreThreadTimeOut(true);
        }
    }

    /** A lock() not yet granted: tried now, then again with a backoff until granted or given up. */
    private final class PendingLock implements Runnable {
        final OverlapFileLock lock;
        final OpFuture<FileLock> future;
        final CompletionHandler<FileLock, Object> handler;
        final Object attachment;
        private long delayMicros = 1000;
        private boolean done; // guarded by this
        private ScheduledFuture<?> next; // guarded by this

        PendingLock(OverlapFileLock lock, OpFuture<FileLock> future, CompletionHandler<FileLock, Object> handler,
                    Object attachment) {
            this.lock = lock;
            this.future = future;
            this.handler = handler;
            this.attachment = attachment;
        }

        @Override
        public synchronized void run() {
            if (done) {
                return;
            }
            boolean granted;
            try {
                begin();
                try {
                    granted = fcntlLock(lock.isShared() ? Native.F_RDLCK : Native.F_WRLCK, lock.position(),
                            lock.size());
                } finally {
                    end();
                }
            } catch (ClosedChannelException e) {
                finish(null, new AsynchronousCloseException());
                return;
            } catch (IOException | RuntimeException e) {
                finish(null, e);
                return;
            }
            if (granted) {
                finish(lock, null);
                return;
            }
            next = Retrier.EXEC.schedule(this, delayMicros, TimeUnit.MICROSECONDS);
            delayMicros = Math.min(delayMicros * 2, 50_000);
        }

        /** Given up: closed (exc set) or the future cancelled (exc null). */
        void abandon(Throwable exc) {
            synchronized (this) {
                if (done) {
                    return;
                }
                done = true;
                if (next != null) {
                    next.cancel(false);
                }
            }
            pendingLocks.remove(this);
            OverlapFileLock.Table.remove(key, lock);
            lock.invalidate();
            if (exc != null) {
                deliver(null, exc);
            }
        }

        private void finish(OverlapFileLock granted, Throwable exc) {
            done = true;
            pendingLocks.remove(this);
            if (granted == null) {
                OverlapFileLock.Table.remove(key, lock);
                lock.invalidate();
            }
            if (!deliver(granted, exc) && granted != null) {
                // cancelled meanwhile: give the lock back
                try {
                    fcntlLock(Native.F_UNLCK, lock.position(), lock.size());
                } catch (IOException ignore) {
                    // the channel's close releases it anyway
                }
                OverlapFileLock.Table.remove(key, lock);
                lock.invalidate();
            }
        }

        private boolean deliver(FileLock value, Throwable exc) {
            if (future != null) {
                return exc == null ? future.setResult(value) : future.setFailure(exc);
            }
            Op.dispatch(executor, handler, attachment, value, exc);
            return true;
        }
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + "[" + path + (closed ? ", closed" : "") + "]";
    }
}
