package dev.overlap.nio;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.channels.ShutdownChannelGroupException;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

/**
 * An overlap engine (liboverlap's {@code overlap_engine}) with one completion port and the threads
 * that reap it. Channels opened without an engine use {@link #shared()}, made on first use.
 *
 * <p><b>Threads.</b> An engine starts {@code reapers} daemon threads (default 2) that wait on the
 * port and hand each completion to its operation: a {@code Future} is completed there; the
 * {@code CompletionHandler} of a channel opened with an executor is given to that executor; the
 * handler of a channel of the default group runs on the reaper itself, at once: the reapers ARE
 * the default group's threads ({@link DefaultGroup}; made by the group's configured
 * {@code ThreadFactory}, else named {@code overlap-reaper-E-N}). A reaper takes a batch of
 * completions, first completes its futures and hands over the handlers bound elsewhere, then runs
 * the batch's default-group handlers one after the other; a handler's next read or write is
 * submitted from the reaper. An exception a handler throws goes to the reaper's uncaught
 * exception handler, and the reaper goes on.
 *
 * <p><b>Batches.</b> The reads and writes a batch's handlers start on a reaper are queued in the
 * ring and reach the kernel together when the batch's last handler returned, in one system call
 * per 32 at most (earlier if another thread submits meanwhile), not one each
 * ({@code overlap_port_batch_begin}/{@code _end}; fast device, 4 KiB O_DIRECT reads: 1.1-1.6x the
 * reads per second at 32 to 1024 chains, at 0.6-0.7x the CPU per read;
 * {@code -Doverlap.batch=false} submits each at once). What a reaper queued goes to the kernel
 * before the reaper waits anywhere in the library ({@code Future.get()}, a full budget,
 * {@link #close}); a handler that blocks elsewhere (a latch, a lock, a sleep) while a read an
 * earlier handler of its batch started is still queued has that read submitted by the standby,
 * which finds the reaper held, within {@link #STUCK_NANOS} or two (a wait in the port submits
 * nothing but its own thread's). Reapers that are virtual threads do not batch.
 *
 * <p><b>The standby.</b> A handler may block (on a lock, a latch, a full budget); while it does,
 * its reaper reaps nothing. Each engine therefore has one more thread, {@code overlap-standby-E},
 * started when a handler first runs on a reaper, that never runs a handler itself: it looks at the
 * reapers every {@link #STUCK_NANOS} (while handlers run; it sleeps when none ran for a while).
 * From a reaper that is still inside the same handler as at its last look it takes the rest of
 * that reaper's batch and hands those handlers to the default group's pool; and while every
 * reaper is inside such a handler it waits on the port itself, completes futures, and hands every
 * handler over (to the pool, or to the channel's executor), until a reaper comes back. So
 * completions are always reaped and the budget always drains, whatever handlers do, at a delay
 * of one or two looks for what a blocked handler held up; a handler that blocks holds its reaper
 * (as it would hold a thread of the JDK's pool). The cost on the fast path is two stores and a
 * load per handler. A handler that waits in {@code Future.get()} helps reap meanwhile (below).
 * Threads the library starts by default for the shared engine: 2 reapers, the standby, at most 4
 * pool threads, the lock retrier: at most 8; and once a FIFO, device or socket is opened on
 * io_uring, the reaper of its cancellable port ({@link #portFor}).
 *
 * <p><b>get() helps.</b> A thread in {@code Future.get()} of a read or write not yet done waits
 * on the port itself and dispatches whatever it takes as a reaper does, but never runs a handler
 * (a default-group handler goes to the group's pool, any other to its channel's executor: it runs
 * on the getter only if that executor runs tasks on the thread that hands them over; a getter
 * inside a handler on a reaper hands over too), until its own future is done: on
 * the critical path of {@code read(...).get()} the kernel wakes the caller directly, instead of
 * waking a reaper that then wakes the caller. Reapers stand aside while getters wait in the port
 * (and for {@link #STAND_ASIDE_NANOS} after). At most
 * {@code helpers} getters help at once (default: the processors; {@code overlap.helpers}, 0
 * turns helping off); virtual threads never help (they wait without pinning their carrier), and
 * others beyond that number wait for a reaper as before. A getter that another thread's
 * completion left asleep in the port is woken by a posted completion (a nudge), and waits in
 * slices of {@link #HELP_SLICE_NANOS} in any case, so an interrupt or a timeout is seen within
 * one slice.
 *
 * <p><b>Budget and backpressure.</b> The engine's in-flight budget ({@code maxInflightOps},
 * default 4096 operations; {@code maxInflightBytes}, default 64 MiB) bounds what is in flight,
 * counting completions not yet reaped. A read or write submitted while the budget is full waits
 * on the calling thread until completions free some (the engine's own blocking submit does the
 * same); the channel holds no lock meanwhile, so {@code close()} is never delayed by it. (A
 * handler on a reaper that waits so holds its reaper; if every reaper waits so, the standby reaps
 * in their place, above.) Heap
 * buffers (and buffers of an arena the caller may close) are copied into library-owned native
 * memory, and those copies are taken out of a second budget of {@code maxInflightBytes} before
 * they are allocated: the native memory the library holds for copies never exceeds it, and a
 * writer that submits faster than the device writes waits instead of growing a queue. A single
 * transfer through a copy is capped at {@code maxInflightBytes} (a shorter read or write, as the
 * channel's contract allows).
 *
 * <p>Configuration of the shared engine, by system properties read once:
 * {@code overlap.driver} ({@code auto}, {@code uring}, {@code aio}, {@code pool}; the
 * {@code OVERLAP_DRIVER} environment variable is honoured by {@code auto}),
 * {@code overlap.maxInflightOps}, {@code overlap.maxInflightBytes}, {@code overlap.poolThreads},
 * {@code overlap.reapers}, {@code overlap.helpers}, {@code overlap.cachedReads}.
 */
public final class OverlapEngine implements AutoCloseable {

    /** Options of an engine; {@code 0} means the library's default. */
    public record Options(String driver, long maxInflightOps, long maxInflightBytes, int poolThreads, int reapers,
                          /** getters that may help reap at once; 0 disables helping, -1: the processors */
                          int helpers,
                          /**
                           * whether a read that returns a Future first asks the page cache on the
                           * calling thread (one {@code preadv2(RWF_NOWAIT)}: the Future is complete
                           * on return when the cache holds the range); default true
                           */
                          boolean cachedReads) {
        /** Cached reads on. */
        public Options(String driver, long maxInflightOps, long maxInflightBytes, int poolThreads, int reapers,
                       int helpers) {
            this(driver, maxInflightOps, maxInflightBytes, poolThreads, reapers, helpers, true);
        }

        /** With the default number of helping getters (the processors), cached reads on. */
        public Options(String driver, long maxInflightOps, long maxInflightBytes, int poolThreads, int reapers) {
            this(driver, maxInflightOps, maxInflightBytes, poolThreads, reapers, -1, true);
        }

        public static Options fromSystemProperties() {
            return new Options(System.getProperty("overlap.driver", "auto"),
                    Long.getLong("overlap.maxInflightOps", 0), Long.getLong("overlap.maxInflightBytes", 0),
                    Integer.getInteger("overlap.poolThreads", 0), Integer.getInteger("overlap.reapers", 2),
                    Integer.getInteger("overlap.helpers", -1),
                    !"false".equals(System.getProperty("overlap.cachedReads", "true")));
        }
    }

    /** A snapshot of the engine's counters (overlap_stats), plus the Java side's own. */
    public record Stats(long submitted, long completed, long completedInline, long completedAsync, long errors,
                        long bytesRead, long bytesWritten, long inflightOpsHighWater, long inflightBytesHighWater,
                        long submitSyscalls, long backpressureWaits, long submittedAio, long submittedPool,
                        long ranOnCaller, long kernelWorkersSeen, long resubmittedAfterExit,
                        /** times a Java caller waited for the budget (engine or copy budget) */
                        long javaBackpressureWaits,
                        /** native bytes held now for copies of heap buffers */
                        long copyBytesInUse,
                        /** most native bytes ever held at once for copies */
                        long copyBytesHighWater,
                        /** completions taken and dispatched by getters that helped (not reapers) */
                        long completionsTakenByGetters,
                        /** nudges posted: futures completed by another thread while their getter slept in the port */
                        long getterNudges,
                        /** default-group handlers run (or running) on the reapers that reaped them */
                        long handlersRunInline,
                        /** default-group handlers the standby took from a reaper held in a handler, or reaped itself,
                         *  and handed to the group's pool */
                        long handlersHandedOver) {
    }

    private static final AtomicLong ENGINES = new AtomicLong();
    /** Posted to stop a reaper (an operation's id is never negative). */
    private static final long STOP = -1L;
    /** Posted to wake a getter whose future another thread completed ({@link #strand}). */
    private static final long NUDGE = -2L;
    /** The longest a helping getter sleeps in the port before it looks at its future again. */
    static final long HELP_SLICE_NANOS = 2_000_000L;
    /** The first slice of a getter's wait (a stranded getter's likely cost); doubles up to HELP_SLICE_NANOS. */
    static final long HELP_FIRST_SLICE_NANOS = 100_000L;
    /** How long reapers keep out of the port after a getter helped ({@link #standAside}). */
    static final long STAND_ASIDE_NANOS = 1_000_000L;
    /** Completions a helping getter takes at most per wait. */
    private static final int HELP_MAX = 16;
    /** Completions a reaper (or the standby) takes at most per wait. */
    private static final int REAP_MAX = 64;
    /**
     * Whether a reaper submits the reads and writes its batch's handlers start together, when the
     * last handler of the batch returned (one system call instead of one each; see the class
     * comment). {@code -Doverlap.batch=false} submits each at once.
     */
    static final boolean BATCH = Boolean.parseBoolean(System.getProperty("overlap.batch", "true"));
    /**
     * Channels register their file with the engine's port after their first operations (io_uring's
     * registered files: the kernel skips looking the descriptor up for every read and write;
     * {@code OverlapAsynchronousFileChannel.REGISTER_AFTER_OPS}). {@code
     * -Doverlap.registerFiles=false} leaves them unregistered.
     */
    static final boolean REGISTER_FILES =
            Boolean.parseBoolean(System.getProperty("overlap.registerFiles", "true"));
    /**
     * How often the standby looks at the reapers while handlers run: a reaper inside the same
     * handler at two looks is held in it ({@link #standby}).
     */
    static final long STUCK_NANOS = 10_000_000L;
    /** Looks without any handler run after which the standby sleeps until a handler starts. */
    private static final int QUIET_LOOKS = 20;
    /** The standby: not started, watching, asleep (through STANDBY). */
    private static final int STANDBY_NONE = 0, STANDBY_WATCHING = 1, STANDBY_ASLEEP = 2;
    /** Threads of each engine (reapers, standby), for {@link #engineOf}. */
    private static final ConcurrentHashMap<Thread, OverlapEngine> THREADS = new ConcurrentHashMap<>();
    private static final VarHandle SEQ;
    private static final VarHandle STANDBY;
    private static final VarHandle SLOT = MethodHandles.arrayElementVarHandle(Op[].class);
    /** A helping getter's room for completions (a thread's own: see {@link HelperRoom}). */
    private static final ThreadLocal<HelperRoom> HELPER_ROOM = ThreadLocal.withInitial(HelperRoom::new);
    private static final VarHandle GENERATION;

    static {
        try {
            MethodHandles.Lookup l = MethodHandles.lookup();
            GENERATION = l.findVarHandle(OverlapEngine.class, "generation", long.class);
            SEQ = l.findVarHandle(Reaper.class, "seq", long.class);
            STANDBY = l.findVarHandle(OverlapEngine.class, "standbyState", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private static final class SharedHolder {
        static final OverlapEngine SHARED = new OverlapEngine(Options.fromSystemProperties());
    }

    /** The process-wide engine channels use by default (made on first use). */
    public static OverlapEngine shared() {
        return SharedHolder.SHARED;
    }

    /** An engine of one's own (tests, isolation); {@link #close()} stops it. */
    public static OverlapEngine create(Options options) {
        return new OverlapEngine(options);
    }

    final long handle;
    final long port;
    final long maxInflightBytes;
    /** {@link Options#cachedReads}. */
    final boolean cachedReads;
    final OpTable ops = new OpTable();
    private final AtomicLong nextId = new AtomicLong(1);
    private final Reaper[] reapers;
    final long number = ENGINES.incrementAndGet();

    // the standby (see the class comment)
    private final Object standbyLock = new Object();
    /** STANDBY_NONE, _WATCHING or _ASLEEP (through STANDBY). */
    @SuppressWarnings("unused")
    private volatile int standbyState;
    private Thread standbyThread; // guarded by standbyLock
    private final AtomicLong handedOver = new AtomicLong();

    // progress: bumped by reapers after each batch; waiters sleep on `progress`
    private final Object progress = new Object();
    private volatile long generation;
    private volatile int waiters;
    private final AtomicLong javaWaits = new AtomicLong();
    private long copyInUse;      // guarded by progress
    private long copyHighWater;  // guarded by progress
    private volatile boolean closed;
    /**
     * A second port, made with OVERLAP_PORT_CANCEL, for the reads and writes of FIFOs, devices and
     * sockets on io_uring (which may never complete: a read of a FIFO nobody writes), so that a
     * close or a shutdown can ask the kernel to stop them ({@link #cancel}); 0 until first needed.
     * Only there: the per-operation cost of a cancellable port stays off regular files. Reaped by
     * one thread of its own, which hands every handler to its executor or the group's pool.
     */
    private volatile long cancelPort;
    private Thread cancelReaper; // guarded by this
    /** Posted to the cancellable port to stop its reaper (ignored by {@link #dispatch}). */
    private static final long STOP_CANCEL_PORT = -3L;
    /** How long a close or shutdown waits for the operations it asked the kernel to stop. */
    static final long CANCEL_WAIT_NANOS = 1_000_000_000L;
    /** Submissions in progress ({@link #enterSubmit}). */
    private final AtomicLong submitting = new AtomicLong();

    // getters that help (OpFuture.get)
    private final int maxHelpers;
    private final AtomicInteger helpers = new AtomicInteger();
    /** Getters waiting in the port now (reapers stand aside while there are any). */
    private final AtomicInteger gettersInPort = new AtomicInteger();
    /** When a getter last left the port. */
    private volatile long lastHelpNanos = System.nanoTime() - STAND_ASIDE_NANOS;
    private final AtomicLong takenByGetters = new AtomicLong();
    private final AtomicLong nudges = new AtomicLong();

    private OverlapEngine(Options o) {
        maxHelpers = o.helpers() >= 0 ? o.helpers() : Runtime.getRuntime().availableProcessors();
        cachedReads = o.cachedReads();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment opts = arena.allocate(Native.OPT_SIZE, 8);
            check((int) Native.engine_options_init.invokeExact(opts.address()), "overlap_engine_options_init");
            opts.set(JAVA_INT, Native.OPT_DRIVER, switch (o.driver() == null ? "auto" : o.driver()) {
                case "auto", "" -> Native.DRIVER_AUTO;
                case "uring" -> Native.DRIVER_URING;
                case "aio" -> Native.DRIVER_AIO;
                case "pool" -> Native.DRIVER_POOL;
                default -> throw new IllegalArgumentException("overlap.driver: " + o.driver() + " (auto, uring, aio, pool)");
            });
            if (o.maxInflightOps() > 0) {
                opts.set(JAVA_LONG, Native.OPT_MAX_OPS, o.maxInflightOps());
            }
            if (o.maxInflightBytes() > 0) {
                opts.set(JAVA_LONG, Native.OPT_MAX_BYTES, o.maxInflightBytes());
            }
            if (o.poolThreads() > 0) {
                opts.set(JAVA_INT, Native.OPT_POOL, o.poolThreads());
            }
            maxInflightBytes = opts.get(JAVA_LONG, Native.OPT_MAX_BYTES);
            MemorySegment out = arena.allocate(8, 8);
            int r = (int) Native.engine_create.invokeExact(opts.address(), out.address());
            if (r < 0) {
                throw new IllegalStateException("overlap_engine_create: " + Native.lastError());
            }
            handle = out.get(JAVA_LONG, 0);
            r = (int) Native.port_create.invokeExact(handle, Native.PORT_NONBLOCK, out.address());
            if (r < 0) {
                throw new IllegalStateException("overlap_port_create: " + Native.lastError());
            }
            port = out.get(JAVA_LONG, 0);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
        int n = Math.max(1, o.reapers());
        reapers = new Reaper[n];
        for (int i = 0; i < n; i++) {
            reapers[i] = new Reaper();
            reapers[i].thread = DefaultGroup.newThread(reapers[i], "overlap-reaper-" + number + "-" + i);
        }
        for (Reaper r : reapers) {
            THREADS.put(r.thread, this);
            r.thread.start();
        }
    }

    /** The engine whose reaper or standby {@code t} is, or null (tests, diagnostics). */
    static OverlapEngine engineOf(Thread t) {
        return THREADS.get(t);
    }

    /** Whether {@code t} is one of this engine's reapers (the default group's threads). */
    boolean isReaper(Thread t) {
        for (Reaper r : reapers) {
            if (r.thread == t) {
                return true;
            }
        }
        return false;
    }

    private static void check(int r, String what) {
        if (r < 0) {
            throw new IllegalStateException(what + ": " + Native.lastError());
        }
    }

    long nextId() {
        return nextId.getAndIncrement();
    }

    /** The driver running: {@code uring}, {@code aio+pool} or {@code pool}. */
    public String driver() {
        try {
            return switch ((int) Native.engine_driver.invokeExact(handle)) {
                case Native.DRIVER_URING -> "uring";
                case Native.DRIVER_AIO -> "aio+pool";
                case Native.DRIVER_POOL -> "pool";
                default -> "unknown";
            };
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
    }

    /** The driver and, when it is not io_uring, why (overlap_engine_driver_text). */
    public String driverText() {
        return text(Native.engine_driver_text);
    }

    /** Why the engine does not run on io_uring; empty when it does. */
    public String fallbackReason() {
        return text(Native.engine_fallback_reason);
    }

    private String text(java.lang.invoke.MethodHandle mh) {
        try (Arena arena = Arena.ofConfined()) {
            long len = (long) mh.invokeExact(handle, 0L, 0L);
            MemorySegment buf = arena.allocate(len + 1);
            long r = (long) mh.invokeExact(handle, buf.address(), len + 1);
            return r < 0 ? "" : buf.getString(0, StandardCharsets.UTF_8);
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
    }

    /** liboverlap's version string. */
    public static String version() {
        return Native.versionString();
    }

    /** Where liboverlap was loaded from. */
    public static String libraryLoadedFrom() {
        return Native.LOADED_FROM;
    }

    /** The engine's counters now. */
    public Stats stats() {
        long[] v = new long[16];
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment s = arena.allocate(Native.STATS_SIZE, 8);
            check((int) Native.engine_stats.invokeExact(handle, s.address()), "overlap_engine_stats");
            for (int i = 0; i < 16; i++) {
                v[i] = s.get(JAVA_LONG, i * 8L);
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
        long inUse, high;
        synchronized (progress) {
            inUse = copyInUse;
            high = copyHighWater;
        }
        long inline = 0;
        for (Reaper r : reapers) {
            inline += ((long) SEQ.getVolatile(r) + 1) >>> 1; // started (seq is odd while one runs)
        }
        return new Stats(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13],
                v[14], v[15], javaWaits.get(), inUse, high, takenByGetters.get(), nudges.get(), inline,
                handedOver.get());
    }

    /** The in-flight byte budget (and the budget of native copies). */
    public long maxInflightBytes() {
        return maxInflightBytes;
    }

    // ---- budget waits

    long generation() {
        return generation;
    }

    /** Waits until a batch of completions was reaped after {@code seen} was read (or 20 ms passed). */
    void awaitProgress(long seen) {
        javaWaits.incrementAndGet();
        beforeWaiting();
        boolean interrupted = false;
        synchronized (progress) {
            waiters++;
            try {
                if (generation == seen) {
                    try {
                        progress.wait(20);
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
            } finally {
                waiters--;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * Takes {@code n} bytes of the copy budget, waiting while it is full (a single copy larger than
     * the budget waits until no other copy is held). Returns false if {@code giveUp} became true.
     */
    boolean acquireCopy(long n, java.util.function.BooleanSupplier giveUp) {
        boolean interrupted = false;
        boolean counted = false;
        try {
            synchronized (progress) {
                while (copyInUse > 0 && copyInUse + n > maxInflightBytes) {
                    if (giveUp.getAsBoolean()) {
                        return false;
                    }
                    if (!counted) {
                        javaWaits.incrementAndGet();
                        counted = true;
                        beforeWaiting();
                    }
                    waiters++;
                    try {
                        progress.wait(20);
                    } catch (InterruptedException e) {
                        interrupted = true;
                    } finally {
                        waiters--;
                    }
                }
                copyInUse += n;
                copyHighWater = Math.max(copyHighWater, copyInUse);
                return true;
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    void releaseCopy(long n) {
        synchronized (progress) {
            copyInUse -= n;
            if (waiters > 0) {
                progress.notifyAll();
            }
        }
    }

    // ---- reaping

    /**
     * A reaper: its thread, its batch's default-group handlers not yet run ({@code pending}: the
     * standby may take them, each slot is emptied by whoever takes its Op), and {@code seq}, odd
     * while it runs a handler, +2 per handler (so {@code seq / 2} handlers ran on it).
     */
    private final class Reaper implements Runnable {
        Thread thread;
        final Op[] pending = new Op[REAP_MAX];
        /** Written by this reaper only (through SEQ); read by the standby and stats. */
        @SuppressWarnings("unused")
        volatile long seq;
        /** Inside a batch ({@link #beginBatch}); written by this reaper only. */
        volatile boolean batching;

        @Override
        public void run() {
            try {
                reap(this);
            } finally {
                THREADS.remove(Thread.currentThread());
            }
        }
    }

    private void reap(Reaper self) {
        MemorySegment comps = Arena.global().allocate(Native.COMPLETION_SIZE * REAP_MAX, 8);
        long addr = comps.address();
        for (;;) {
            standAside();
            long n;
            try {
                n = (long) Native.port_wait.invokeExact(port, addr, 1L, (long) REAP_MAX, -1L);
            } catch (Throwable t) {
                throw Native.fatal(t);
            }
            if (n < 0) {
                System.err.println("overlap-java: overlap_port_wait failed: " + Native.lastError());
                return;
            }
            if (dispatch(comps, n, self, false)) {
                return;
            }
        }
    }

    /**
     * Hands each of the {@code n} completions at {@code comps} to its operation, on a reaper
     * ({@code self}), on a getter that helps ({@code helper}) or on the standby (neither): a
     * Future is completed here, a CompletionHandler is given to its channel's executor, or, on a
     * reaper, a default-group handler is run by the reaper itself once the whole batch was handed
     * out (so a handler that blocks holds up no future of its batch, and the standby can take the
     * batch's other handlers). Any number of threads run it at once, each with completions of
     * its own (the port gives each to exactly one waiter; {@code ops.remove} and
     * {@link Op#deliver}'s flag make each operation's delivery happen once). Returns true if a
     * reaper took a STOP.
     *
     * <p>{@link #close} posts one STOP per reaper, and each reaper must take exactly one: a STOP
     * that a getter or the standby takes, or a reaper's second STOP of one batch (the reapers
     * stand aside, so both STOPs of a close are often ready when the first reaper comes back to
     * the port), is posted again for another reaper.
     *
     * @param helper taken by a getter that helps (every STOP is posted again for a reaper)
     */
    private boolean dispatch(MemorySegment comps, long n, Reaper self, boolean helper) {
        boolean stop = false;
        int left = 0;
        for (int i = 0; i < n; i++) {
            long base = i * Native.COMPLETION_SIZE;
            long ud = comps.get(JAVA_LONG, base);
            long res = comps.get(JAVA_LONG, base + 8);
            if (ud == STOP) {
                if (self == null || stop) {
                    post(STOP, true); // for another reaper
                } else {
                    stop = true;
                }
                continue;
            }
            if (ud == NUDGE) {
                // Its work is done: whoever takes it returned from the port. A getter that took
                // another's nudge does not pass it on (it would take its own post again at once);
                // that getter's slice bounds its wait.
                continue;
            }
            Op op = ops.remove(ud);
            if (op == null) {
                continue;
            }
            if (helper) {
                takenByGetters.incrementAndGet();
            }
            try {
                if (op.complete(res, !helper)) {
                    if (self != null) {
                        SLOT.setRelease(self.pending, left++, op);
                    } else { // the standby, reaping instead of held reapers
                        handedOver.incrementAndGet();
                        op.handOff();
                    }
                }
            } catch (Throwable t) {
                // never lose the reaper (or a getter's get()): report and go on
                System.err.println("overlap-java: error delivering a completion: " + t);
                t.printStackTrace();
            }
        }
        progressed();
        // (not on a virtual thread: the native batch belongs to its carrier, which may change)
        boolean batch = BATCH && left > 1 && !Thread.currentThread().isVirtual() && beginBatch(self);
        try {
            for (int i = 0; i < left; i++) {
                Op op = (Op) SLOT.getAndSet(self.pending, i, (Op) null);
                if (op != null) { // else the standby took it
                    runHandler(self, op);
                }
            }
        } finally {
            if (batch) {
                endBatch(self);
            }
        }
        return stop;
    }

    // ---- batches: the reads and writes a reaper's handlers start go to the kernel together

    /** Begins the reaper's batch on the port; false if there is nothing to batch (no ring). */
    private boolean beginBatch(Reaper self) {
        int r;
        try {
            r = (int) Native.port_batch_begin.invokeExact(port);
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
        self.batching = r == 1;
        return self.batching;
    }

    /** Ends the reaper's batch: what its handlers started goes to the kernel. */
    private void endBatch(Reaper self) {
        self.batching = false;
        try {
            int r = (int) Native.port_batch_end.invokeExact(port);
            assert r == 1 : "a reaper's batch ends once";
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
    }

    /** Submits what any batch on the port queued and has not submitted yet. */
    private void flushQueued() {
        try {
            int r = (int) Native.port_flush.invokeExact(port);
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
    }

    /**
     * Before the calling thread waits anywhere in this library outside the port (a latch, a
     * monitor, a join, a sleep): if it is a reaper inside a batch, what its handlers started so
     * far goes to the kernel first, since what it waits for may be one of those operations, or
     * the budget they hold. (A wait in the port submits them by itself.) Cheap when not.
     */
    static void beforeWaiting() {
        OverlapEngine e = THREADS.get(Thread.currentThread());
        if (e != null) {
            for (Reaper r : e.reapers) {
                if (r.thread == Thread.currentThread() && r.batching) {
                    e.flushQueued();
                }
            }
        }
    }

    /** Runs a default-group handler on its reaper, where the standby can see it. */
    private void runHandler(Reaper self, Op op) {
        long seq = self.seq;
        SEQ.setVolatile(self, seq + 1);
        // (a volatile store, then a volatile load: Dekker with the standby going to sleep)
        int standby = standbyState;
        if (standby != STANDBY_WATCHING) {
            wakeStandby(standby);
        }
        try {
            op.run();
        } catch (Throwable t) {
            uncaught(t);
        } finally {
            SEQ.setRelease(self, seq + 2);
        }
    }

    /**
     * A handler threw: as a JDK pool thread, the thread's uncaught exception handler is told (by
     * default its thread group prints it with the thread's name); unlike one, the reaper goes on.
     */
    private static void uncaught(Throwable t) {
        Thread me = Thread.currentThread();
        try {
            me.getUncaughtExceptionHandler().uncaughtException(me, t);
        } catch (Throwable ignore) {
            // the uncaught exception handler failed too: nothing more to tell
        }
    }

    // ---- the standby (see the class comment)

    /** A handler starts while the standby is not watching: start it, or wake it. */
    private void wakeStandby(int state) {
        if (state == STANDBY_ASLEEP) {
            if (STANDBY.compareAndSet(this, STANDBY_ASLEEP, STANDBY_WATCHING)) {
                Thread t;
                synchronized (standbyLock) {
                    t = standbyThread;
                }
                LockSupport.unpark(t);
            }
            return;
        }
        synchronized (standbyLock) {
            if (standbyState != STANDBY_NONE || closed) {
                return;
            }
            Thread t = new Thread(this::standby, "overlap-standby-" + number);
            t.setDaemon(true);
            standbyThread = t;
            standbyState = STANDBY_WATCHING;
            THREADS.put(t, this);
            t.start();
        }
    }

    private void standby() {
        try {
            MemorySegment comps = Arena.ofAuto().allocate(Native.COMPLETION_SIZE * REAP_MAX, 8);
            long[] seen = new long[reapers.length];
            int quiet = 0;
            while (!closed) {
                // a full interval between two looks (a stale unpark must not shorten it)
                long deadline = System.nanoTime() + STUCK_NANOS;
                for (long left; (left = deadline - System.nanoTime()) > 0 && !closed; ) {
                    LockSupport.parkNanos(this, left);
                }
                if (closed) {
                    return;
                }
                int held = 0;
                boolean busy = false;
                for (int i = 0; i < reapers.length; i++) {
                    long seq = (long) SEQ.getVolatile(reapers[i]);
                    if ((seq & 1) != 0 && seq == seen[i]) {
                        held++; // inside the same handler as at the last look
                        takePending(reapers[i]);
                        if (reapers[i].batching) {
                            // what the handlers before it started, which it may be waiting for
                            flushQueued();
                        }
                    }
                    busy |= seq != seen[i] || (seq & 1) != 0;
                    seen[i] = seq;
                }
                if (held == reapers.length) {
                    reapInstead(comps, seen);
                    quiet = 0;
                } else if (busy) {
                    quiet = 0;
                } else if (++quiet >= QUIET_LOOKS) {
                    quiet = 0;
                    sleepUntilAHandlerStarts(seen);
                }
            }
        } finally {
            THREADS.remove(Thread.currentThread());
        }
    }

    /** No handler ran for a while: sleep until one starts ({@link #runHandler} wakes it) or close. */
    private void sleepUntilAHandlerStarts(long[] seen) {
        standbyState = STANDBY_ASLEEP;
        // (a volatile store, then volatile loads: a handler that started before it is seen here,
        // one that starts after it sees ASLEEP and wakes this thread)
        for (int i = 0; i < reapers.length; i++) {
            if ((long) SEQ.getVolatile(reapers[i]) != seen[i]) {
                STANDBY.compareAndSet(this, STANDBY_ASLEEP, STANDBY_WATCHING);
                return;
            }
        }
        while (standbyState == STANDBY_ASLEEP && !closed) {
            LockSupport.park(this);
        }
    }

    /** Takes the handlers a held reaper has not run yet and gives them to the group's pool. */
    private void takePending(Reaper r) {
        for (int i = 0; i < r.pending.length; i++) {
            if (SLOT.getAcquire(r.pending, i) != null) {
                Op op = (Op) SLOT.getAndSet(r.pending, i, (Op) null);
                if (op != null) {
                    handedOver.incrementAndGet();
                    op.handOff();
                }
            }
        }
    }

    /**
     * Every reaper is held in a handler: reap in their place (handing every handler over), in
     * waits of {@link #STUCK_NANOS}, until one of them is back (its {@code seq} moved) or close.
     */
    private void reapInstead(MemorySegment comps, long[] seen) {
        while (!closed) {
            for (int i = 0; i < reapers.length; i++) {
                if ((long) SEQ.getVolatile(reapers[i]) != seen[i]) {
                    return;
                }
            }
            long n;
            try {
                n = (long) Native.port_wait.invokeExact(port, comps.address(), 1L, (long) REAP_MAX, STUCK_NANOS);
            } catch (Throwable t) {
                throw Native.fatal(t);
            }
            if (n < 0) {
                return;
            }
            if (n > 0) {
                dispatch(comps, n, null, false);
            }
            for (Reaper r : reapers) {
                takePending(r);
            }
        }
    }

    /** A batch was reaped: wake threads waiting for budget. */
    private void progressed() {
        GENERATION.getAndAdd(this, 1L);
        if (waiters > 0) {
            synchronized (progress) {
                progress.notifyAll();
            }
        }
    }

    /**
     * Posts a completion to the port; {@code retry} waits out a full budget (an interrupt does not
     * stop it: a STOP must reach a reaper; the interrupt status is kept), else it is dropped then.
     */
    private void post(long ud, boolean retry) {
        boolean interrupted = false;
        try {
            while ((int) Native.port_post.invokeExact(port, ud, 0L) == -Native.EAGAIN && retry) {
                beforeWaiting();
                try {
                    Thread.sleep(1);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } catch (Throwable t) {
            throw Native.fatal(t);
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    // ---- getters that help (OpFuture.get)

    /**
     * A reaper keeps out of the port while getters wait in it, and for {@link #STAND_ASIDE_NANOS}
     * after the last one left it: every completion the port gives a reaper instead of the getter
     * waiting for it costs that getter a nudge (or a slice). Completions no getter waits for
     * are meanwhile taken by the getters in the port, else by the reapers once they are back.
     * It counts getters in the port, not getters in get(): a getter held outside the port (in
     * the {@code execute} of a handler's executor it dispatches to, say) keeps no reaper away.
     */
    private void standAside() {
        while (!closed && (gettersInPort.get() > 0 || System.nanoTime() - lastHelpNanos < STAND_ASIDE_NANOS)) {
            LockSupport.parkNanos(STAND_ASIDE_NANOS);
        }
    }

    /** Claims one of the helper places; false if all are taken (or none are configured). */
    boolean enterHelping() {
        for (;;) {
            int h = helpers.get();
            if (h >= maxHelpers || closed) {
                return false;
            }
            if (helpers.compareAndSet(h, h + 1)) {
                return true;
            }
        }
    }

    /** Gives back the place {@link #enterHelping} claimed. */
    void leaveHelping() {
        helpers.decrementAndGet();
    }

    /**
     * One slice of a getter's help: waits on the port for up to {@code sliceNanos} (at least one
     * completion; a few at most) and dispatches what it took, as a reaper does. Returns false if
     * the getter should stop helping and wait for a reaper (engine closed, another getter helps
     * with this future, the port failed).
     */
    boolean help(OpFuture<?> f, long sliceNanos) {
        if (closed) {
            return false;
        }
        switch (f.enterPort()) {
            case 1:
                return true; // done
            case 2:
                return false; // another thread's get() helps for it: wait on the latch
            default:
                break;
        }
        HelperRoom room = HELPER_ROOM.get();
        MemorySegment comps = room.take();
        try {
            long n;
            gettersInPort.incrementAndGet();
            try {
                n = (long) Native.port_wait.invokeExact(port, comps.address(), 1L, (long) HELP_MAX, sliceNanos);
            } catch (Throwable t) {
                throw Native.fatal(t);
            } finally {
                // out of the port before anything is completed: a future this thread completes
                // needs no nudge
                lastHelpNanos = System.nanoTime();
                gettersInPort.decrementAndGet();
                f.leavePort();
            }
            if (n < 0) {
                return false;
            }
            dispatch(comps, n, null, true);
            return true;
        } finally {
            room.give(comps);
        }
    }

    /**
     * A thread's room for the completions it takes as a helping getter. Dispatching them may run
     * a completion handler on this thread (a channel whose executor runs tasks on the caller), and
     * that handler may wait for a future of its own, helping again before the first batch was
     * all handed out: that nested help takes a room of its own, never the one being read.
     */
    private static final class HelperRoom {
        private final MemorySegment own = Arena.ofAuto().allocate(Native.COMPLETION_SIZE * HELP_MAX, 8);
        private boolean inUse;

        /** This thread's room, or a fresh one if a help further out on this thread is using it. */
        MemorySegment take() {
            if (inUse) {
                return Arena.ofAuto().allocate(Native.COMPLETION_SIZE * HELP_MAX, 8);
            }
            inUse = true;
            return own;
        }

        /** Done with a room {@link #take} gave. */
        void give(MemorySegment room) {
            if (room == own) {
                inUse = false;
            }
        }
    }

    /**
     * A future was completed by another thread while its getter sleeps in the port: post a
     * nudge (a completion the getter takes and returns with). If the budget is full it is not
     * posted; the getter's slice bounds its wait then.
     */
    void strand() {
        nudges.incrementAndGet();
        post(NUDGE, false);
    }


    /**
     * Fails every operation of {@code ch} still in flight with AsynchronousCloseException; true if
     * there was one. Only for a channel whose transfers all go through the library's copies (see
     * {@code OverlapAsynchronousFileChannel#bounded}): the kernel never has the caller's memory.
     */
    boolean failInflight(OverlapAsynchronousFileChannel ch) {
        boolean any = false;
        for (Op op : ops.values()) {
            if (op.channel == ch) {
                op.failClosed();
                any = true;
            }
        }
        return any;
    }

    /**
     * The port for the reads and writes of a channel: the engine's, or for a FIFO, device or
     * socket ({@code bounded} false) on io_uring the cancellable one (made and its reaper started
     * on first use; the engine's port if that fails).
     */
    long portFor(boolean bounded) {
        if (bounded) {
            return port;
        }
        long p = cancelPort;
        return p != 0 ? p : startCancelPort();
    }

    private synchronized long startCancelPort() {
        if (cancelPort != 0) {
            return cancelPort;
        }
        if (closed || !"uring".equals(driver())) {
            return port; // nothing the kernel could stop: AIO and the pool cancel nothing
        }
        long p;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(8, 8);
            int r = (int) Native.port_create.invokeExact(handle, Native.PORT_NONBLOCK | Native.PORT_CANCEL,
                    out.address());
            if (r < 0) {
                return port;
            }
            p = out.get(JAVA_LONG, 0);
        } catch (Throwable t) {
            throw Native.fatal(t);
        }
        long cp = p;
        Thread t = new Thread(() -> reapCancelPort(cp), "overlap-reaper-" + number + "-cancel");
        t.setDaemon(true);
        t.start();
        cancelReaper = t;
        cancelPort = p;
        return p;
    }

    /** The cancellable port's reaper: every completion dispatched, every handler handed over. */
    private void reapCancelPort(long p) {
        MemorySegment comps = Arena.ofAuto().allocate(Native.COMPLETION_SIZE * REAP_MAX, 8);
        for (;;) {
            long n;
            try {
                n = (long) Native.port_wait.invokeExact(p, comps.address(), 1L, (long) REAP_MAX, -1L);
            } catch (Throwable t) {
                throw Native.fatal(t);
            }
            if (n < 0) {
                return;
            }
            boolean stop = false;
            for (int i = 0; i < n; i++) {
                stop |= comps.get(JAVA_LONG, i * Native.COMPLETION_SIZE) == STOP_CANCEL_PORT;
            }
            dispatch(comps, n, null, false);
            if (stop) {
                return;
            }
        }
    }

    /**
     * Asks the kernel to stop the operations of {@code ch} in flight on the cancellable port and
     * waits (at most {@link #CANCEL_WAIT_NANOS}) until {@code done}: each completes once, with
     * -ECANCELED or its real result. False if they are not on that port (nothing can be stopped)
     * or did not all complete in time.
     */
    boolean cancel(OverlapAsynchronousFileChannel ch, long onPort, java.util.function.BooleanSupplier done) {
        if (onPort == port) {
            return false;
        }
        for (Op op : ops.values()) {
            if (ch == null ? !op.channel.bounded : op.channel == ch) {
                try {
                    long ignored = (long) Native.port_cancel.invokeExact(onPort, op.id);
                } catch (Throwable t) {
                    throw Native.fatal(t);
                }
            }
        }
        long deadline = System.nanoTime() + CANCEL_WAIT_NANOS;
        while (!done.getAsBoolean()) {
            if (System.nanoTime() - deadline > 0) {
                return false;
            }
            LockSupport.parkNanos(200_000L);
        }
        return true;
    }

    /** Whether {@link #close} began: every read and write from then on throws ShutdownChannelGroupException. */
    public boolean isShutdown() {
        return closed;
    }

    /**
     * Counts a submission in progress (until {@link #exitSubmit}); false, counting nothing, once
     * the engine is shut down. {@link #close} waits for the submissions it counted.
     */
    boolean enterSubmit() {
        submitting.incrementAndGet();
        if (closed) {
            submitting.decrementAndGet();
            return false;
        }
        return true;
    }

    void exitSubmit() {
        submitting.decrementAndGet();
    }

    /**
     * Waits until {@code done} holds, taking completions from the port meanwhile and handing them
     * out as a helping getter does (a handler goes to its executor or the group's pool, never runs
     * here), so that it returns even when every reaper is held or stopped. A virtual thread (whose
     * wait in native code would pin its carrier) only sleeps between looks and leaves the port to
     * the reapers.
     */
    void helpUntil(java.util.function.BooleanSupplier done) {
        beforeWaiting();
        boolean virtual = Thread.currentThread().isVirtual();
        HelperRoom room = HELPER_ROOM.get();
        MemorySegment comps = room.take();
        try {
            while (!done.getAsBoolean()) {
                if (virtual) {
                    LockSupport.parkNanos(HELP_SLICE_NANOS);
                    continue;
                }
                long n;
                gettersInPort.incrementAndGet();
                try {
                    n = (long) Native.port_wait.invokeExact(port, comps.address(), 1L, (long) HELP_MAX,
                            HELP_SLICE_NANOS);
                } catch (Throwable t) {
                    throw Native.fatal(t);
                } finally {
                    lastHelpNanos = System.nanoTime();
                    gettersInPort.decrementAndGet();
                }
                if (n > 0) {
                    dispatch(comps, n, null, true);
                }
            }
        } finally {
            room.give(comps);
        }
    }

    /**
     * Shuts down an engine made by {@link #create}, as an AsynchronousChannelGroup's orderly
     * shutdown: from now on every read and write of its channels, and opening a channel on it,
     * throws {@link ShutdownChannelGroupException} at once. The reads and writes in flight
     * complete and their results are delivered (futures completed, handlers handed to their
     * threads) before this returns; so does every buffer the kernel had. The exception: an
     * operation on a FIFO, a character device or a socket, which may never complete (a read of a
     * FIFO nobody writes): on io_uring the kernel is asked to stop it, and it fails with
     * ShutdownChannelGroupException once stopped (or completes, if it completed first); where it
     * cannot be stopped (Linux AIO, the pool, or not within a second) it fails at once, the kernel
     * holding only the library's copy of its bytes, never the caller's buffer. Then each reaper
     * stops once it is back in the port (so this waits for handlers running on its reapers to return, except on a
     * reaper itself: a handler may close its own engine), and the standby stops. Channels stay
     * open (close them to release their descriptors). The shared engine cannot be closed (it
     * lives as long as the process).
     */
    @Override
    public void close() {
        if (this == SharedHolder.SHARED) {
            throw new UnsupportedOperationException("the shared engine lives as long as the process");
        }
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
        }
        while (submitting.get() > 0) {
            LockSupport.parkNanos(100_000L); // a submission counted before `closed` was seen
        }
        long cp = cancelPort;
        if (cp != 0) {
            cancel(null, cp, this::onlyBoundedInFlight); // they complete with ShutdownChannelGroupException
        }
        for (Op op : ops.values()) {
            if (!op.channel.bounded) {
                op.failShutdown(); // not stopped in time, or not stoppable (AIO, the pool)
            }
        }
        helpUntil(this::onlyUnboundedInFlight);
        stopCancelReaper();
        Thread standby;
        synchronized (standbyLock) {
            standby = standbyThread; // none is started from now on (closed)
        }
        if (standby != null) {
            LockSupport.unpark(standby);
        }
        for (int i = 0; i < reapers.length; i++) {
            post(STOP, true);
        }
        beforeWaiting(); // the STOPs, posted from a reaper's batch
        Thread me = Thread.currentThread();
        try {
            for (Reaper r : reapers) {
                if (r.thread != me) {
                    r.thread.join();
                }
            }
            if (standby != null && standby != me) {
                standby.join();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void stopCancelReaper() {
        Thread t;
        synchronized (this) {
            t = cancelReaper;
        }
        if (t == null) {
            return;
        }
        try {
            while ((int) Native.port_post.invokeExact(cancelPort, STOP_CANCEL_PORT, 0L) == -Native.EAGAIN) {
                LockSupport.parkNanos(1_000_000L);
            }
            if (t != Thread.currentThread()) {
                t.join();
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (Throwable x) {
            throw Native.fatal(x);
        }
    }

    /** No operation of a FIFO, a device or a socket is in flight. */
    private boolean onlyBoundedInFlight() {
        for (Op op : ops.values()) {
            if (!op.channel.bounded) {
                return false;
            }
        }
        return true;
    }

    /** Every operation still in flight is of a FIFO, a device or a socket (already failed). */
    private boolean onlyUnboundedInFlight() {
        for (Op op : ops.values()) {
            if (op.channel.bounded) {
                return false;
            }
        }
        return true;
    }

    @Override
    public String toString() {
        return "OverlapEngine[" + driverText() + "]";
    }
}
