// WriteFlood: the article's write flood. Submits writes of heap buffers in a loop without waiting
// for any of them (as the article does), then waits for all; heap and RSS are sampled every 50 ms.
//
//   java -Xmx256m -cp overlap-java.jar java/examples/WriteFlood.java jdk     DIR [WRITES] [SIZE]
//   java -Xmx256m -cp overlap-java.jar java/examples/WriteFlood.java overlap DIR [WRITES] [SIZE]
//
// jdk: the JDK's AsynchronousFileChannel (its default pool: a task per write in an unbounded queue,
// each holding its heap buffer, so the heap grows with what is not yet written, until
// OutOfMemoryError if the disk is slower than the loop). overlap: OverlapAsynchronousFileChannel,
// where a write waits at the engine's budget (copies of heap buffers within overlap.maxInflightBytes,
// default 64 MiB). Defaults are small (2000 writes of 64 KiB = 125 MiB); the article's flood is
// e.g. 100000 writes of 64 KiB (6.1 GiB) on a disk slower than memory. Prints one JSON line.
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

public class WriteFlood {
    static long rssKb() {
        try {
            for (String l : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (l.startsWith("VmRSS:")) return Long.parseLong(l.replaceAll("[^0-9]", ""));
            }
        } catch (Exception e) { }
        return -1;
    }

    public static void main(String[] a) throws Exception {
        if (a.length < 2) { System.err.println("usage: WriteFlood jdk|overlap DIR [WRITES] [SIZE]"); System.exit(2); }
        String which = a[0];
        Path file = Path.of(a[1], "write-flood-" + which + ".bin");
        int writes = a.length > 2 ? Integer.parseInt(a[2]) : 2000;
        int size = a.length > 3 ? Integer.parseInt(a[3]) : 65536;
        MemoryMXBean mem = ManagementFactory.getMemoryMXBean();
        AtomicLong heapPeak = new AtomicLong(), rssPeak = new AtomicLong();
        Thread sampler = new Thread(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                heapPeak.accumulateAndGet(mem.getHeapMemoryUsage().getUsed(), Math::max);
                rssPeak.accumulateAndGet(rssKb(), Math::max);
                try { Thread.sleep(50); } catch (InterruptedException e) { return; }
            }
        });
        sampler.setDaemon(true);
        sampler.start();
        var opts = new StandardOpenOption[]{StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING};
        AsynchronousFileChannel ch = switch (which) {
            case "jdk" -> AsynchronousFileChannel.open(file, opts);
            case "overlap" -> dev.overlap.nio.OverlapAsynchronousFileChannel.open(file, opts);
            default -> throw new IllegalArgumentException(which);
        };
        String error = null;
        long t0 = System.nanoTime(), submitNs = 0, written = 0;
        try {
            List<Future<Integer>> fs = new ArrayList<>(writes);
            for (int i = 0; i < writes; i++) {
                ByteBuffer b = ByteBuffer.allocate(size);  // a fresh heap buffer per write, as the article
                b.put(0, (byte) i);
                fs.add(ch.write(b, (long) i * size));
            }
            submitNs = System.nanoTime() - t0;
            for (Future<Integer> f : fs) written += f.get();
            ch.force(false);
        } catch (Throwable e) {
            error = e.toString();
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        sampler.interrupt();
        sampler.join();
        ch.close();
        String extra = "";
        if (ch instanceof dev.overlap.nio.OverlapAsynchronousFileChannel o) {
            var s = o.engine().stats();
            extra = String.format(Locale.ROOT, ", \"engine\": \"%s\", \"budget_bytes\": %d, \"copy_bytes_high_water\": %d, \"budget_waits\": %d",
                    o.engine().driverText(), o.engine().maxInflightBytes(), s.copyBytesHighWater(), s.javaBackpressureWaits());
        }
        System.out.printf(Locale.ROOT, "{\"channel\": \"%s\", \"writes\": %d, \"size\": %d, \"written\": %d, \"submit_s\": %.3f, \"total_s\": %.3f, "
                + "\"heap_peak_mib\": %.1f, \"rss_peak_mib\": %.1f, \"max_heap_mib\": %.0f, \"error\": %s%s}%n",
                which, writes, size, written, submitNs / 1e9, secs, heapPeak.get() / 1048576.0, rssPeak.get() / 1024.0,
                Runtime.getRuntime().maxMemory() / 1048576.0, error == null ? "null" : "\"" + error.replace("\"", "'") + "\"", extra);
        Files.deleteIfExists(file);
        System.exit(error == null ? 0 : 1);
    }
}
