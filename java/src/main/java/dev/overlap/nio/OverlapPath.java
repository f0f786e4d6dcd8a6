package dev.overlap.nio;

import java.io.IOException;
import java.net.URI;
import java.nio.file.FileSystem;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.ProviderMismatchException;
import java.nio.file.WatchEvent;
import java.nio.file.WatchKey;
import java.nio.file.WatchService;

/**
 * A path of {@link OverlapFileSystem}: the platform's path inside, so that
 * {@code path.getFileSystem().provider()} is {@link OverlapFileSystemProvider}, as the JDK requires
 * of a default file system's paths. Every operation is the platform path's; paths it returns are
 * wrapped again. Paths of the platform's own file system are accepted wherever a path is taken.
 */
final class OverlapPath implements Path {
    final OverlapFileSystem fs;
    final Path delegate;

    OverlapPath(OverlapFileSystem fs, Path delegate) {
        this.fs = fs;
        this.delegate = delegate;
    }

    private Path wrap(Path p) {
        return fs.wrap(p);
    }

    private Path unwrap(Path p) {
        return fs.unwrap(p);
    }

    @Override public FileSystem getFileSystem() { return fs; }
    @Override public boolean isAbsolute() { return delegate.isAbsolute(); }
    @Override public Path getRoot() { return wrap(delegate.getRoot()); }
    @Override public Path getFileName() { return wrap(delegate.getFileName()); }
    @Override public Path getParent() { return wrap(delegate.getParent()); }
    @Override public int getNameCount() { return delegate.getNameCount(); }
    @Override public Path getName(int index) { return wrap(delegate.getName(index)); }
    @Override public Path subpath(int beginIndex, int endIndex) { return wrap(delegate.subpath(beginIndex, endIndex)); }

    @Override
    public boolean startsWith(Path other) {
        return fs.isOurs(other) && delegate.startsWith(unwrap(other));
    }

    @Override public boolean startsWith(String other) { return delegate.startsWith(other); }

    @Override
    public boolean endsWith(Path other) {
        return fs.isOurs(other) && delegate.endsWith(unwrap(other));
    }

    @Override public boolean endsWith(String other) { return delegate.endsWith(other); }
    @Override public Path normalize() { return wrap(delegate.normalize()); }
    @Override public Path resolve(Path other) { return wrap(delegate.resolve(unwrap(other))); }
    @Override public Path resolve(String other) { return wrap(delegate.resolve(other)); }
    @Override public Path resolveSibling(Path other) { return wrap(delegate.resolveSibling(unwrap(other))); }
    @Override public Path resolveSibling(String other) { return wrap(delegate.resolveSibling(other)); }
    @Override public Path relativize(Path other) { return wrap(delegate.relativize(unwrap(other))); }
    @Override public URI toUri() { return delegate.toUri(); }
    @Override public Path toAbsolutePath() { return wrap(delegate.toAbsolutePath()); }
    @Override public Path toRealPath(LinkOption... options) throws IOException { return wrap(delegate.toRealPath(options)); }

    /**
     * Registers with a watch service of this file system ({@code FileSystems.getDefault()
     * .newWatchService()}): the key's {@code watchable()} is this path and its events' contexts
     * are paths of this file system. Another service is refused with ProviderMismatchException,
     * as the JDK refuses a service of another provider.
     */
    @Override
    public WatchKey register(WatchService watcher, WatchEvent.Kind<?>[] events, WatchEvent.Modifier... modifiers)
            throws IOException {
        if (watcher == null) {
            throw new NullPointerException();
        }
        if (!(watcher instanceof OverlapWatchService w)) {
            throw new ProviderMismatchException();
        }
        return w.register(this, events, modifiers);
    }

    @Override public int compareTo(Path other) { return delegate.compareTo(unwrap(other)); }

    @Override
    public boolean equals(Object other) {
        return other instanceof OverlapPath p && p.fs == fs && delegate.equals(p.delegate);
    }

    @Override public int hashCode() { return delegate.hashCode(); }
    @Override public String toString() { return delegate.toString(); }
}
