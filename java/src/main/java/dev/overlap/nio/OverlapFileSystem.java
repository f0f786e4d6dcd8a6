package dev.overlap.nio;

import java.io.IOException;
import java.nio.file.FileStore;
import java.nio.file.FileSystem;
import java.nio.file.Path;
import java.nio.file.PathMatcher;
import java.nio.file.ProviderMismatchException;
import java.nio.file.WatchService;
import java.nio.file.attribute.UserPrincipalLookupService;
import java.nio.file.spi.FileSystemProvider;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/** The default file system under {@link OverlapFileSystemProvider}: the platform's, paths wrapped. */
final class OverlapFileSystem extends FileSystem {
    private final OverlapFileSystemProvider provider;
    final FileSystem delegate;

    OverlapFileSystem(OverlapFileSystemProvider provider, FileSystem delegate) {
        this.provider = provider;
        this.delegate = delegate;
    }

    Path wrap(Path p) {
        return p == null ? null : new OverlapPath(this, p);
    }

    boolean isOurs(Path p) {
        return p instanceof OverlapPath op ? op.fs == this : p != null && p.getFileSystem() == delegate;
    }

    /** The platform path inside; a platform path itself is taken as it is. */
    Path unwrap(Path p) {
        if (p == null) {
            throw new NullPointerException();
        }
        if (p instanceof OverlapPath op && op.fs == this) {
            return op.delegate;
        }
        if (p.getFileSystem() == delegate) {
            return p;
        }
        throw new ProviderMismatchException();
    }

    @Override public FileSystemProvider provider() { return provider; }
    @Override public void close() throws IOException { delegate.close(); }
    @Override public boolean isOpen() { return delegate.isOpen(); }
    @Override public boolean isReadOnly() { return delegate.isReadOnly(); }
    @Override public String getSeparator() { return delegate.getSeparator(); }

    @Override
    public Iterable<Path> getRootDirectories() {
        List<Path> roots = new ArrayList<>();
        for (Path p : delegate.getRootDirectories()) {
            roots.add(wrap(p));
        }
        return roots;
    }

    @Override public Iterable<FileStore> getFileStores() { return delegate.getFileStores(); }
    @Override public Set<String> supportedFileAttributeViews() { return delegate.supportedFileAttributeViews(); }
    @Override public Path getPath(String first, String... more) { return wrap(delegate.getPath(first, more)); }

    /**
     * The platform's matcher, which matches a path by its string form, as the JDK's does: a path
     * of any provider (a zip file system's, say) is matched, never refused.
     */
    @Override
    public PathMatcher getPathMatcher(String syntaxAndPattern) {
        PathMatcher m = delegate.getPathMatcher(syntaxAndPattern);
        return p -> m.matches(p instanceof OverlapPath op && op.fs == this ? op.delegate : p);
    }

    @Override
    public UserPrincipalLookupService getUserPrincipalLookupService() {
        return delegate.getUserPrincipalLookupService();
    }

    /** The platform's watch service, its keys and events in this file system's paths. */
    @Override
    public WatchService newWatchService() throws IOException {
        return new OverlapWatchService(this, delegate.newWatchService());
    }
}
