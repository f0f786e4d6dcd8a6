package dev.overlap.nio;

import java.io.IOException;
import java.nio.file.Path;
import java.nio.file.ProviderMismatchException;
import java.nio.file.WatchEvent;
import java.nio.file.WatchKey;
import java.nio.file.WatchService;
import java.nio.file.Watchable;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

/**
 * The watch service of {@link OverlapFileSystem}: the platform's, with its keys and events
 * speaking in the file system's own paths. A key's {@code watchable()} is the path that was
 * registered, and an event's {@code context()} a path of this file system, so both are equal
 * (and hash alike) to {@code Path.of} of the same name, as the JDK's are.
 */
final class OverlapWatchService implements WatchService {
    private final OverlapFileSystem fs;
    final WatchService delegate;
    /** The key handed out for each of the platform's keys (one per directory, as the platform's). */
    private final Map<WatchKey, Key> keys = new ConcurrentHashMap<>();

    OverlapWatchService(OverlapFileSystem fs, WatchService delegate) {
        this.fs = fs;
        this.delegate = delegate;
    }

    /** Registers {@code dir} (a path of this file system) with the platform's service. */
    WatchKey register(OverlapPath dir, WatchEvent.Kind<?>[] events, WatchEvent.Modifier... modifiers)
            throws IOException {
        if (dir.fs != fs) {
            throw new ProviderMismatchException();
        }
        WatchKey inner = dir.delegate.register(delegate, events, modifiers);
        return keys.computeIfAbsent(inner, k -> new Key(k, dir));
    }

    private WatchKey ours(WatchKey inner) {
        if (inner == null) {
            return null;
        }
        return keys.computeIfAbsent(inner, k -> new Key(k, fs.wrap((Path) k.watchable())));
    }

    @Override
    public void close() throws IOException {
        delegate.close();
        keys.clear();
    }

    @Override
    public WatchKey poll() {
        return ours(delegate.poll());
    }

    @Override
    public WatchKey poll(long timeout, TimeUnit unit) throws InterruptedException {
        return ours(delegate.poll(timeout, unit));
    }

    @Override
    public WatchKey take() throws InterruptedException {
        return ours(delegate.take());
    }

    /** A platform key, seen through this file system's paths. */
    private final class Key implements WatchKey {
        private final WatchKey inner;
        private final Path dir;

        Key(WatchKey inner, Path dir) {
            this.inner = inner;
            this.dir = dir;
        }

        @Override public boolean isValid() { return inner.isValid(); }
        @Override public boolean reset() { return inner.reset(); }

        @Override
        public void cancel() {
            inner.cancel(); // (the key stays known: a cancelled key may still be queued)
        }

        @Override
        public Watchable watchable() {
            return dir;
        }

        @Override
        public List<WatchEvent<?>> pollEvents() {
            List<WatchEvent<?>> events = inner.pollEvents();
            List<WatchEvent<?>> out = new ArrayList<>(events.size());
            for (WatchEvent<?> e : events) {
                out.add(e.context() instanceof Path p && !(p instanceof OverlapPath) ? new Event<>(e, fs.wrap(p)) : e);
            }
            return out;
        }
    }

    /** An event whose context is a path of this file system. */
    private record Event<T>(WatchEvent<T> inner, Object ctx) implements WatchEvent<T> {
        @Override public Kind<T> kind() { return inner.kind(); }
        @Override public int count() { return inner.count(); }

        @Override
        @SuppressWarnings("unchecked")
        public T context() {
            return (T) ctx;
        }

        @Override
        public String toString() {
            return inner.toString();
        }
    }
}
