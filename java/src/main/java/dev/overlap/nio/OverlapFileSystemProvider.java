package dev.overlap.nio;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URI;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.FileChannel;
import java.nio.channels.SeekableByteChannel;
import java.nio.file.AccessMode;
import java.nio.file.CopyOption;
import java.nio.file.DirectoryStream;
import java.nio.file.FileStore;
import java.nio.file.FileSystem;
import java.nio.file.FileSystemAlreadyExistsException;
import java.nio.file.LinkOption;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.FileAttributeView;
import java.nio.file.spi.FileSystemProvider;
import java.util.Iterator;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutorService;

/**
 * A default file system provider that gives {@code AsynchronousFileChannel.open} overlap's channel
 * and leaves everything else to the platform's provider:
 *
 * <pre>
 * java -Djava.nio.file.spi.DefaultFileSystemProvider=dev.overlap.nio.OverlapFileSystemProvider \
 *      -cp overlap-java.jar:app.jar app.Main
 * </pre>
 *
 * <p>As the JDK requires of a default provider, it has a public constructor taking the platform
 * provider, its scheme is {@code file}, and the paths of its file system are its own
 * ({@link OverlapPath}, wrapping the platform's), so {@code Path.of}, {@code Paths.get},
 * {@code File.toPath()} and {@code FileSystems.getDefault()} all lead here.
 *
 * <p>Limits: every method but {@code newAsynchronousFileChannel} is the platform provider's, called
 * with the platform path inside; a {@code DirectoryStream} is a plain one (not a
 * {@code SecureDirectoryStream}); the watch service is the platform's, its keys' {@code watchable()}
 * and its events' {@code context()} being this file system's paths (equal to {@code Path.of} of
 * the same name); the JDK's
 * own internal paths (class loading, jrt:) do not go through any default provider. A channel
 * opened here cannot be used before the native library loads (on the first
 * {@code AsynchronousFileChannel.open}); a failure to load it is an UnsatisfiedLinkError there.
 */
public final class OverlapFileSystemProvider extends FileSystemProvider {
    private final FileSystemProvider delegate;
    private final OverlapFileSystem fs;

    /** Made by the JDK with the platform's provider (java.nio.file.spi.DefaultFileSystemProvider). */
    public OverlapFileSystemProvider(FileSystemProvider delegate) {
        this.delegate = delegate;
        this.fs = new OverlapFileSystem(this, delegate.getFileSystem(URI.create("file:///")));
    }

    private Path unwrap(Path p) {
        return fs.unwrap(p);
    }

    @Override public String getScheme() { return delegate.getScheme(); }

    @Override
    public FileSystem newFileSystem(URI uri, Map<String, ?> env) throws IOException {
        delegate.getFileSystem(uri); // checks the URI as the platform does
        throw new FileSystemAlreadyExistsException();
    }

    @Override
    public FileSystem getFileSystem(URI uri) {
        delegate.getFileSystem(uri); // checks the URI as the platform does
        return fs;
    }

    @Override public Path getPath(URI uri) { return fs.wrap(delegate.getPath(uri)); }

    @Override
    public FileSystem newFileSystem(Path path, Map<String, ?> env) throws IOException {
        return delegate.newFileSystem(unwrap(path), env);
    }

    /** overlap's channel. */
    @Override
    public AsynchronousFileChannel newAsynchronousFileChannel(Path path, Set<? extends OpenOption> options,
                                                              ExecutorService executor, FileAttribute<?>... attrs)
            throws IOException {
        return OverlapAsynchronousFileChannel.open(OverlapEngine.shared(), unwrap(path), options, executor, attrs);
    }

    @Override
    public SeekableByteChannel newByteChannel(Path path, Set<? extends OpenOption> options, FileAttribute<?>... attrs)
            throws IOException {
        return delegate.newByteChannel(unwrap(path), options, attrs);
    }

    @Override
    public FileChannel newFileChannel(Path path, Set<? extends OpenOption> options, FileAttribute<?>... attrs)
            throws IOException {
        return delegate.newFileChannel(unwrap(path), options, attrs);
    }

    @Override
    public InputStream newInputStream(Path path, OpenOption... options) throws IOException {
        return delegate.newInputStream(unwrap(path), options);
    }

    @Override
    public OutputStream newOutputStream(Path path, OpenOption... options) throws IOException {
        return delegate.newOutputStream(unwrap(path), options);
    }

    @Override
    public DirectoryStream<Path> newDirectoryStream(Path dir, DirectoryStream.Filter<? super Path> filter)
            throws IOException {
        DirectoryStream<Path> ds = delegate.newDirectoryStream(unwrap(dir),
                entry -> filter.accept(fs.wrap(entry)));
        return new DirectoryStream<>() {
            @Override
            public Iterator<Path> iterator() {
                Iterator<Path> it = ds.iterator();
                return new Iterator<>() {
                    @Override public boolean hasNext() { return it.hasNext(); }
                    @Override public Path next() { return fs.wrap(it.next()); }
                    @Override public void remove() { it.remove(); }
                };
            }

            @Override
            public void close() throws IOException {
                ds.close();
            }
        };
    }

    @Override
    public void createDirectory(Path dir, FileAttribute<?>... attrs) throws IOException {
        delegate.createDirectory(unwrap(dir), attrs);
    }

    @Override
    public void createSymbolicLink(Path link, Path target, FileAttribute<?>... attrs) throws IOException {
        delegate.createSymbolicLink(unwrap(link), unwrap(target), attrs);
    }

    @Override
    public void createLink(Path link, Path existing) throws IOException {
        delegate.createLink(unwrap(link), unwrap(existing));
    }

    @Override public void delete(Path path) throws IOException { delegate.delete(unwrap(path)); }
    @Override public boolean deleteIfExists(Path path) throws IOException { return delegate.deleteIfExists(unwrap(path)); }
    @Override public Path readSymbolicLink(Path link) throws IOException { return fs.wrap(delegate.readSymbolicLink(unwrap(link))); }

    @Override
    public void copy(Path source, Path target, CopyOption... options) throws IOException {
        delegate.copy(unwrap(source), unwrap(target), options);
    }

    @Override
    public void move(Path source, Path target, CopyOption... options) throws IOException {
        delegate.move(unwrap(source), unwrap(target), options);
    }

    @Override
    public boolean isSameFile(Path path, Path path2) throws IOException {
        return delegate.isSameFile(unwrap(path), unwrap(path2));
    }

    @Override public boolean isHidden(Path path) throws IOException { return delegate.isHidden(unwrap(path)); }
    @Override public FileStore getFileStore(Path path) throws IOException { return delegate.getFileStore(unwrap(path)); }

    @Override
    public void checkAccess(Path path, AccessMode... modes) throws IOException {
        delegate.checkAccess(unwrap(path), modes);
    }

    @Override
    public <V extends FileAttributeView> V getFileAttributeView(Path path, Class<V> type, LinkOption... options) {
        return delegate.getFileAttributeView(unwrap(path), type, options);
    }

    @Override
    public <A extends BasicFileAttributes> A readAttributes(Path path, Class<A> type, LinkOption... options)
            throws IOException {
        return delegate.readAttributes(unwrap(path), type, options);
    }

    @Override
    public Map<String, Object> readAttributes(Path path, String attributes, LinkOption... options)
            throws IOException {
        return delegate.readAttributes(unwrap(path), attributes, options);
    }

    @Override
    public void setAttribute(Path path, String attribute, Object value, LinkOption... options) throws IOException {
        delegate.setAttribute(unwrap(path), attribute, value, options);
    }

    @Override
    public boolean exists(Path path, LinkOption... options) {
        return delegate.exists(unwrap(path), options);
    }

    @Override
    public <A extends BasicFileAttributes> A readAttributesIfExists(Path path, Class<A> type, LinkOption... options)
            throws IOException {
        return delegate.readAttributesIfExists(unwrap(path), type, options);
    }

    /** The platform provider this one delegates to. */
    public FileSystemProvider platformProvider() {
        return delegate;
    }

    static Optional<OverlapFileSystemProvider> installed() {
        return java.nio.file.FileSystems.getDefault().provider() instanceof OverlapFileSystemProvider p
                ? Optional.of(p) : Optional.empty();
    }
}
