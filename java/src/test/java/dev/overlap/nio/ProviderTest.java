package dev.overlap.nio;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import static java.nio.file.StandardOpenOption.CREATE;
import static java.nio.file.StandardOpenOption.READ;
import static java.nio.file.StandardOpenOption.WRITE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Runs in a JVM started with -Djava.nio.file.spi.DefaultFileSystemProvider=dev.overlap.nio.OverlapFileSystemProvider
 * (the provider-test execution in pom.xml).
 */
@Tag("provider")
class ProviderTest {

    static Path tmp() throws Exception {
        return Files.createTempDirectory("overlap-provider");
    }

    @Test
    void theProviderIsTheDefaultAndEveryWayToAPathReachesIt() throws Exception {
        assertInstanceOf(OverlapFileSystemProvider.class, FileSystems.getDefault().provider(),
                "this JVM must run with -Djava.nio.file.spi.DefaultFileSystemProvider=" + OverlapFileSystemProvider.class.getName());
        Path d = tmp();
        for (Path p : List.of(Path.of(d.toString(), "a"), Paths.get(d.toString(), "a"), new File(d.toFile(), "a").toPath(),
                d.resolve("a"), Path.of(d.resolve("a").toUri()))) {
            assertInstanceOf(OverlapFileSystemProvider.class, p.getFileSystem().provider(), p.toString());
            assertSame(FileSystems.getDefault(), p.getFileSystem());
            assertEquals(d.resolve("a"), p);
            assertEquals(d.resolve("a").hashCode(), p.hashCode());
        }
    }

    @Test
    void asynchronousFileChannelOpenGivesOverlapsChannelAndTheEngineDoesTheIo() throws Exception {
        Path f = tmp().resolve("data");
        OverlapEngine.Stats before = OverlapEngine.shared().stats();
        try (AsynchronousFileChannel ch = AsynchronousFileChannel.open(f, CREATE, READ, WRITE)) {
            assertInstanceOf(OverlapAsynchronousFileChannel.class, ch);
            assertEquals(11, ch.write(ByteBuffer.wrap("hello world".getBytes()), 0).get(10, TimeUnit.SECONDS));
            ByteBuffer b = ByteBuffer.allocate(20);
            assertEquals(11, ch.read(b, 0).get(10, TimeUnit.SECONDS));
        }
        OverlapEngine.Stats after = OverlapEngine.shared().stats();
        // this JVM runs with the shipped defaults (pom.xml): the read may be answered by the page
        // cache on the calling thread (overlap_pread_cached), which the engine counts as well
        assertTrue(after.submitted() - before.submitted() >= 2);
        assertTrue(after.bytesWritten() - before.bytesWritten() >= 11);
        assertTrue(after.bytesRead() - before.bytesRead() >= 11, "the engine read the bytes");
        assertEquals("hello world", Files.readString(f), "the rest of the JDK sees the bytes");
    }

    @Test
    void everythingElseIsThePlatformsProvider() throws Exception {
        Path d = tmp();
        Path a = Files.writeString(d.resolve("a.txt"), "alpha");
        assertEquals("alpha", Files.readString(a));
        try (FileChannel fc = FileChannel.open(a, READ)) {
            assertEquals(5, fc.size());
        }
        Path sub = Files.createDirectories(d.resolve("x/y"));
        Path b = Files.copy(a, sub.resolve("b.txt"));
        Path c = Files.move(b, sub.resolve("c.txt"), StandardCopyOption.ATOMIC_MOVE);
        assertTrue(Files.exists(c) && !Files.exists(b));
        assertTrue(Files.isDirectory(sub) && Files.isRegularFile(c));
        assertTrue(Files.isSameFile(c, Path.of(c.toString())));
        try (Stream<Path> s = Files.walk(d)) {
            List<Path> all = s.toList();
            assertEquals(5, all.size(), all.toString());
            all.forEach(p -> assertInstanceOf(OverlapFileSystemProvider.class, p.getFileSystem().provider()));
        }
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(d, "*.txt")) {
            int n = 0;
            for (Path p : ds) {
                assertEquals(a, p);
                n++;
            }
            assertEquals(1, n);
        }
        assertTrue(FileSystems.getDefault().getPathMatcher("glob:**/*.txt").matches(c));
        Path link = Files.createSymbolicLink(d.resolve("link"), a);
        assertEquals(a, Files.readSymbolicLink(link));
        assertEquals(a.toRealPath(), link.toRealPath());
        assertEquals(new File(a.toString()), a.toFile());
        assertEquals(d, a.getParent());
        assertEquals("a.txt", a.getFileName().toString());
        assertTrue(a.startsWith(d) && a.endsWith("a.txt"));
        assertEquals(Path.of("a.txt"), d.relativize(a));
        assertNotEquals(a, c);
        Path t = Files.createTempFile(d, "t", ".tmp");
        assertTrue(Files.exists(t));
        assertEquals(5, Files.size(a));
        assertTrue(Files.getLastModifiedTime(a).toMillis() > 0);
        Files.delete(link);
        assertTrue(Files.deleteIfExists(t));
    }

    /**
     * A watch key's watchable() and its events' context() are equal (and hash alike) to Path.of
     * of the same name, so map and set look-ups work, as with the JDK's provider.
     */
    @Test
    void watchPathsEqualPathOf() throws Exception {
        Path dir = tmp();
        try (java.nio.file.WatchService ws = FileSystems.getDefault().newWatchService()) {
            java.nio.file.WatchKey key = dir.register(ws, java.nio.file.StandardWatchEventKinds.ENTRY_CREATE);
            assertEquals(Path.of(dir.toString()), key.watchable());
            assertEquals(Path.of(dir.toString()).hashCode(), key.watchable().hashCode());
            assertSame(key, dir.register(ws, java.nio.file.StandardWatchEventKinds.ENTRY_CREATE), "one key per directory");
            Files.write(dir.resolve("made.txt"), new byte[1]);
            java.nio.file.WatchKey got = ws.poll(10, TimeUnit.SECONDS);
            assertSame(key, got);
            java.util.Map<Path, String> byName = new java.util.HashMap<>();
            byName.put(Path.of("made.txt"), "made");
            java.util.Set<Path> dirs = new java.util.HashSet<>(List.of(Path.of(dir.toString())));
            assertTrue(dirs.contains((Path) got.watchable()), "the watched directory found in a set of Path.of");
            boolean seen = false;
            for (java.nio.file.WatchEvent<?> e : got.pollEvents()) {
                Path ctx = (Path) e.context();
                assertEquals(Path.of("made.txt"), ctx);
                assertEquals(Path.of("made.txt").hashCode(), ctx.hashCode());
                assertEquals("made", byName.get(ctx), "the event's context found in a map keyed by Path.of");
                assertInstanceOf(OverlapFileSystemProvider.class, ctx.getFileSystem().provider());
                assertEquals(dir.resolve("made.txt"), ((Path) got.watchable()).resolve(ctx));
                seen = true;
            }
            assertTrue(seen, "the creation was seen");
            assertTrue(got.reset());
        }
    }

    /** A PathMatcher of the default file system matches a zip file system's path by its string, as the JDK's. */
    @Test
    void pathMatcherMatchesPathsOfOtherProviders() throws Exception {
        Path zip = tmp().resolve("a.zip");
        try (java.nio.file.FileSystem zfs = FileSystems.newFileSystem(zip, java.util.Map.of("create", "true"))) {
            Path inZip = zfs.getPath("/docs/readme.txt");
            java.nio.file.PathMatcher m = FileSystems.getDefault().getPathMatcher("glob:**/*.txt");
            assertTrue(m.matches(inZip), "a zip path matched by its string form");
            assertTrue(!FileSystems.getDefault().getPathMatcher("glob:**/*.md").matches(inZip));
            assertTrue(FileSystems.getDefault().getPathMatcher("regex:/docs/.*").matches(inZip));
        }
    }
}
