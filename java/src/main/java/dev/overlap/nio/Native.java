package dev.overlap.nio;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.charset.StandardCharsets;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

/**
 * The bindings: liboverlap (overlap.h) and the few libc calls the channel needs (open, fcntl locks,
 * fstat, ftruncate, aligned memory), as FFM downcall handles.
 *
 * <p>Loading: the system property {@code overlap.library.path} names a liboverlap.so to load;
 * without it the copy inside the jar ({@code /native/linux-x86_64/liboverlap.so}) is extracted to a
 * temporary file, loaded, and the file deleted at once (the mapping stays), as zstd-jni and
 * rocksdbjni do (they delete at exit).
 *
 * <p>Handles (engine, file, port) and buffer addresses cross as {@code long}: on x86-64 (System V)
 * a pointer and a 64-bit integer travel in the same registers, so {@code void *} parameters are
 * declared {@code JAVA_LONG}; this saves a {@code MemorySegment} per call on the hot path.
 */
final class Native {
    private Native() {}

    static final Linker LINKER = Linker.nativeLinker();
    static final String LIBRARY_PATH_PROPERTY = "overlap.library.path";
    private static final String RESOURCE = "/native/linux-x86_64/liboverlap.so";

    /** Where the library was loaded from (a path, or "jar:" + the resource). */
    static final String LOADED_FROM;
    private static final SymbolLookup LIB;

    static {
        String os = System.getProperty("os.name", "");
        String arch = System.getProperty("os.arch", "");
        String override = System.getProperty(LIBRARY_PATH_PROPERTY);
        if (override != null && !override.isEmpty()) {
            LIB = SymbolLookup.libraryLookup(new File(override).getAbsolutePath(), Arena.global());
            LOADED_FROM = override;
        } else {
            if (!os.equals("Linux") || !(arch.equals("amd64") || arch.equals("x86_64"))) {
                throw new UnsatisfiedLinkError("overlap-java carries liboverlap for linux-x86_64 only (this is "
                        + os + "/" + arch + "): build crates/overlap-c and set -D" + LIBRARY_PATH_PROPERTY);
            }
            File tmp = null;
            try (InputStream in = Native.class.getResourceAsStream(RESOURCE)) {
                if (in == null) {
                    throw new UnsatisfiedLinkError("overlap-java: " + RESOURCE + " is not in the jar (built without"
                            + " java/build-native.sh?); set -D" + LIBRARY_PATH_PROPERTY + "=/path/to/liboverlap.so");
                }
                // java.io.File, not java.nio.file: this may run inside the default file system
                // provider, which must not recurse into itself while it loads.
                tmp = File.createTempFile("liboverlap-", ".so");
                tmp.deleteOnExit();
                try (java.io.FileOutputStream out = new java.io.FileOutputStream(tmp)) {
                    in.transferTo(out);
                }
                LIB = SymbolLookup.libraryLookup(tmp.getAbsolutePath(), Arena.global());
                LOADED_FROM = "jar:" + RESOURCE;
            } catch (IOException e) {
                throw (UnsatisfiedLinkError) new UnsatisfiedLinkError(
                        "overlap-java: cannot extract liboverlap.so to a temporary file: " + e).initCause(e);
            } finally {
                if (tmp != null) {
                    // dlopen has mapped it: the name is no longer needed.
                    tmp.delete();
                }
            }
        }
    }

    private static MethodHandle ov(String name, FunctionDescriptor fd, Linker.Option... options) {
        MemorySegment sym = LIB.find(name).orElseThrow(
                () -> new UnsatisfiedLinkError("liboverlap has no symbol " + name + " (" + LOADED_FROM + ")"));
        return LINKER.downcallHandle(sym, fd, options);
    }

    private static MethodHandle libc(String name, FunctionDescriptor fd, Linker.Option... options) {
        MemorySegment sym = LINKER.defaultLookup().find(name).orElseThrow(
                () -> new UnsatisfiedLinkError("libc has no symbol " + name));
        return LINKER.downcallHandle(sym, fd, options);
    }

    // ---- liboverlap constants (overlap.h)
    static final int DRIVER_AUTO = 0, DRIVER_URING = 1, DRIVER_AIO = 2, DRIVER_POOL = 3;
    static final int PORT_NONBLOCK = 1, PORT_CANCEL = 2;
    static final int COMPLETION_INLINE = 1;

    // ---- struct layouts
    /** overlap_engine_options: u32 size, i32 driver, u64 ops, u64 bytes, u32 pool, u32 ring, u32 kw, u32 flags */
    static final long OPT_SIZE = 40, OPT_DRIVER = 4, OPT_MAX_OPS = 8, OPT_MAX_BYTES = 16, OPT_POOL = 24,
            OPT_RING = 28, OPT_KWORKERS = 32;
    /** overlap_stats: 16 u64 */
    static final long STATS_SIZE = 16 * 8;
    /** overlap_alignment: 4 u32 */
    static final long ALIGN_SIZE = 16;
    /** overlap_completion: u64 user_data, i64 result, u32 flags, u32 reserved */
    static final long COMPLETION_SIZE = 24;

    // ---- liboverlap functions
    static final MethodHandle version = ov("overlap_version", FunctionDescriptor.of(ADDRESS));
    static final MethodHandle engine_options_init = ov("overlap_engine_options_init",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle engine_create = ov("overlap_engine_create",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG));
    static final MethodHandle engine_driver = ov("overlap_engine_driver", FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle engine_driver_text = ov("overlap_engine_driver_text",
            FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
    static final MethodHandle engine_fallback_reason = ov("overlap_engine_fallback_reason",
            FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
    static final MethodHandle engine_stats = ov("overlap_engine_stats",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG));
    static final MethodHandle last_error = ov("overlap_last_error", FunctionDescriptor.of(ADDRESS));
    static final MethodHandle file_adopt = ov("overlap_file_adopt",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_INT, JAVA_LONG));
    static final MethodHandle file_alignment = ov("overlap_file_alignment",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG));
    static final MethodHandle file_fd = ov("overlap_file_fd", FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle file_close = ov("overlap_file_close", FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle file_free = ov("overlap_file_free", FunctionDescriptor.ofVoid(JAVA_LONG));
    static final MethodHandle fsync = ov("overlap_fsync", FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle fdatasync = ov("overlap_fdatasync", FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    /**
     * overlap_pread_cached into a heap segment, as it is: a critical downcall (no safepoint while it
     * runs), for a call that does not wait for the device (RWF_NOWAIT, no I/O started) and copies
     * at most {@code CACHED_READ_MAX} bytes into the Java heap, which cannot fault to a disk.
     */
    static final MethodHandle pread_cached_heap = ov("overlap_pread_cached",
            FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, ADDRESS, JAVA_LONG, JAVA_LONG), Linker.Option.critical(true));
    /** overlap_pread_cached into native memory (a direct buffer may be a file mapping: not critical). */
    static final MethodHandle pread_cached = ov("overlap_pread_cached",
            FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
    static final MethodHandle port_create = ov("overlap_port_create",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_INT, JAVA_LONG));
    static final MethodHandle port_read = ov("overlap_port_read",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
    static final MethodHandle port_write = ov("overlap_port_write",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
    static final MethodHandle port_wait = ov("overlap_port_wait",
            FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_LONG));
    static final MethodHandle port_batch_begin = ov("overlap_port_batch_begin",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle port_batch_end = ov("overlap_port_batch_end",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle port_flush = ov("overlap_port_flush",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG));
    static final MethodHandle port_register_file = ov("overlap_port_register_file",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG));
    static final MethodHandle port_cancel = ov("overlap_port_cancel",
            FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG));
    static final MethodHandle port_post = ov("overlap_port_post",
            FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG));

    // ---- libc
    private static final Linker.Option ERRNO = Linker.Option.captureCallState("errno");
    static final MemoryLayout CAPTURE_LAYOUT = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO_HANDLE =
            CAPTURE_LAYOUT.varHandle(MemoryLayout.PathElement.groupElement("errno"));

    static final MethodHandle open = libc("open",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT), ERRNO, Linker.Option.firstVariadicArg(2));
    static final MethodHandle close = libc("close", FunctionDescriptor.of(JAVA_INT, JAVA_INT));
    static final MethodHandle fcntl_lock = libc("fcntl",
            FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, JAVA_LONG), ERRNO, Linker.Option.firstVariadicArg(2));
    static final MethodHandle fstat = libc("fstat", FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_LONG), ERRNO);
    static final MethodHandle ftruncate = libc("ftruncate",
            FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_LONG), ERRNO);
    static final MethodHandle unlink = libc("unlink", FunctionDescriptor.of(JAVA_INT, ADDRESS), ERRNO);
    static final MethodHandle strerror = libc("strerror", FunctionDescriptor.of(ADDRESS, JAVA_INT));
    static final MethodHandle aligned_alloc = libc("aligned_alloc",
            FunctionDescriptor.of(JAVA_LONG, JAVA_LONG, JAVA_LONG));
    static final MethodHandle free = libc("free", FunctionDescriptor.ofVoid(JAVA_LONG));

    // Linux x86-64 values
    static final int O_RDONLY = 0, O_WRONLY = 1, O_RDWR = 2, O_CREAT = 0100, O_EXCL = 0200, O_TRUNC = 01000,
            O_DSYNC = 010000, O_DIRECT = 040000, O_NOFOLLOW = 0400000, O_CLOEXEC = 02000000, O_SYNC = 04010000;
    /**
     * fcntl commands: F_SETLK, the process's POSIX record lock; F_OFD_SETLK (Linux 3.15), the lock
     * of the open file description, which closing another descriptor of the file does not release.
     */
    static final int F_SETLK = 6, F_OFD_SETLK = 37, F_RDLCK = 0, F_WRLCK = 1, F_UNLCK = 2;
    static final int EINVAL = 22;
    static final int EINTR = 4, EAGAIN = 11, EACCES = 13, EEXIST = 17, ENOENT = 2, EISDIR = 21, ELOOP = 40,
            EBADF = 9, ESHUTDOWN = 108, ECANCELED = 125, ENOSPC = 28, ENOTDIR = 20, EPERM = 1;
    /** struct stat (x86-64): st_dev at 0, st_ino at 8, st_size at 48; 144 bytes. */
    static final long STAT_SIZE = 144, STAT_DEV = 0, STAT_INO = 8, STAT_SIZE_OFF = 48;
    /** st_mode (x86_64 struct stat) and the file type bits of it. */
    static final long STAT_MODE = 24;
    static final int S_IFMT = 0170000, S_IFREG = 0100000, S_IFBLK = 0060000;
    /** struct flock (x86-64): short l_type, short l_whence, off_t l_start (8), off_t l_len (16), pid_t l_pid; 32 bytes. */
    static final long FLOCK_SIZE = 32;

    static int errno(MemorySegment capture) {
        return (int) ERRNO_HANDLE.get(capture, 0L);
    }

    static String strerror(int errno) {
        try {
            MemorySegment s = (MemorySegment) strerror.invokeExact(errno);
            return s.reinterpret(4096).getString(0, StandardCharsets.UTF_8);
        } catch (Throwable t) {
            return "errno " + errno;
        }
    }

    /** The calling thread's liboverlap message (read right after a failing call). */
    static String lastError() {
        try {
            MemorySegment s = (MemorySegment) last_error.invokeExact();
            return s.reinterpret(65536).getString(0, StandardCharsets.UTF_8);
        } catch (Throwable t) {
            return "";
        }
    }

    static String versionString() {
        try {
            MemorySegment s = (MemorySegment) version.invokeExact();
            return s.reinterpret(256).getString(0, StandardCharsets.UTF_8);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    /** Library-owned native memory: aligned_alloc, freed by {@link #freeMemory}. */
    static long allocate(long size, long alignment) {
        long rounded = (size + alignment - 1) / alignment * alignment;
        if (rounded == 0) {
            rounded = alignment;
        }
        long addr;
        try {
            addr = (long) aligned_alloc.invokeExact(alignment, rounded);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
        if (addr == 0) {
            throw new OutOfMemoryError("overlap-java: aligned_alloc(" + alignment + ", " + rounded + ") failed");
        }
        return addr;
    }

    static void freeMemory(long addr) {
        if (addr == 0) {
            return;
        }
        try {
            free.invokeExact(addr);
        } catch (Throwable t) {
            throw new AssertionError(t);
        }
    }

    static AssertionError fatal(Throwable t) {
        if (t instanceof Error e) {
            throw e;
        }
        if (t instanceof RuntimeException r) {
            throw r;
        }
        return new AssertionError("unexpected from a downcall", t);
    }

    static MemorySegment segment(long addr, long len) {
        return MemorySegment.ofAddress(addr).reinterpret(len);
    }

    static final ValueLayout.OfLong U64 = JAVA_LONG;
}
