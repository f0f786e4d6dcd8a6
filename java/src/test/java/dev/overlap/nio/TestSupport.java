package dev.overlap.nio;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

final class TestSupport {
    private TestSupport() {}

    static Path fifo(Path dir, String name) throws Exception {
        Path p = dir.resolve(name);
        Process pr = new ProcessBuilder("mkfifo", p.toString()).inheritIO().start();
        if (pr.waitFor() != 0) {
            throw new IOException("mkfifo failed");
        }
        return p;
    }

    /** Writes n bytes into a FIFO (opened read-write, so the open never blocks). */
    static void feed(Path fifo, int n) throws IOException {
        try (RandomAccessFile raf = new RandomAccessFile(fifo.toFile(), "rw")) {
            raf.write(new byte[n]);
        }
    }

    /** The open flags of a descriptor of this process (/proc/self/fdinfo), octal. */
    static int fdFlags(int fd) throws IOException {
        for (String l : Files.readAllLines(Path.of("/proc/self/fdinfo/" + fd))) {
            if (l.startsWith("flags:")) {
                return Integer.parseInt(l.substring(6).trim(), 8);
            }
        }
        throw new IOException("no flags in fdinfo");
    }

    /** Another JVM running LockHelper. */
    static final class OtherJvm implements AutoCloseable {
        final Process process;
        final BufferedReader out;

        OtherJvm(String... args) throws IOException {
            this(LockHelper.class, args);
        }

        /** Runs {@code main} (a class of the tests) with {@code args}, without this JVM's -D options. */
        OtherJvm(Class<?> main, String... args) throws IOException {
            String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
            List<String> cmd = new java.util.ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED",
                    "-cp", System.getProperty("java.class.path"), main.getName()));
            cmd.addAll(List.of(args));
            process = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            out = new BufferedReader(new InputStreamReader(process.getInputStream()));
        }

        String line() throws IOException {
            return out.readLine();
        }

        void send() throws IOException {
            process.getOutputStream().write('\n');
            process.getOutputStream().flush();
        }

        @Override
        public void close() throws Exception {
            process.destroy();
            process.waitFor(10, TimeUnit.SECONDS);
        }
    }

    static boolean waitUntil(java.util.function.BooleanSupplier c, long millis) throws InterruptedException {
        long end = System.nanoTime() + millis * 1_000_000L;
        while (!c.getAsBoolean()) {
            if (System.nanoTime() > end) {
                return false;
            }
            Thread.sleep(5);
        }
        return true;
    }
}
