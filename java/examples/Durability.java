// Durability: what force() changes. Writes N records through an AsynchronousFileChannel three ways
// and says, for each, what a power cut right after the writes completed could lose:
//   none    write(...).get() only: the data is in the page cache; a crash may lose all of it
//           (the kernel writes it back later, ~30 s by default); the call returned long before that;
//   force   write(...).get() then force(false) (fdatasync, performed by overlap's engine): on
//           stable storage when force returns;
//   dsync   opened with StandardOpenOption.DSYNC (O_DSYNC): each write completes only once on
//           stable storage.
// It measures the time of each and reads /proc/meminfo's Dirty: before and after, the bytes the
// kernel still has to write back. A crash cannot be simulated here; what the numbers show is how
// much a call's return promises.
//
//   java -cp overlap-java.jar java/examples/Durability.java DIR [RECORDS] [SIZE]
//   (or with -Djava.nio.file.spi.DefaultFileSystemProvider=dev.overlap.nio.OverlapFileSystemProvider
//    to have AsynchronousFileChannel.open itself be overlap's)
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.file.Files;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

public class Durability {
    static long dirtyKb() throws Exception {
        for (String l : Files.readAllLines(Path.of("/proc/meminfo"))) {
            if (l.startsWith("Dirty:")) return Long.parseLong(l.replaceAll("[^0-9]", ""));
        }
        return -1;
    }

    public static void main(String[] a) throws Exception {
        if (a.length < 1) { System.err.println("usage: Durability DIR [RECORDS] [SIZE]"); System.exit(2); }
        int records = a.length > 1 ? Integer.parseInt(a[1]) : 200;
        int size = a.length > 2 ? Integer.parseInt(a[2]) : 4096;
        for (String mode : new String[]{"none", "force", "dsync"}) {
            Path f = Path.of(a[0], "durability-" + mode + ".bin");
            List<OpenOption> o = new ArrayList<>(List.of(StandardOpenOption.CREATE, StandardOpenOption.WRITE, StandardOpenOption.TRUNCATE_EXISTING));
            if (mode.equals("dsync")) o.add(StandardOpenOption.DSYNC);
            boolean overlap = !Boolean.getBoolean("jdk");
            try (AsynchronousFileChannel ch = overlap
                    ? dev.overlap.nio.OverlapAsynchronousFileChannel.open(f, o.toArray(new OpenOption[0]))
                    : AsynchronousFileChannel.open(f, o.toArray(new OpenOption[0]))) {
                long d0 = dirtyKb();
                long t0 = System.nanoTime();
                for (int i = 0; i < records; i++) {
                    ByteBuffer b = ByteBuffer.allocate(size);
                    b.putInt(0, i);
                    ch.write(b, (long) i * size).get();   // "done", as far as the caller knows
                }
                long tw = System.nanoTime();
                long dAfterWrites = dirtyKb();
                if (mode.equals("force")) ch.force(false);
                long tf = System.nanoTime();
                long dAfterForce = dirtyKb();
                System.out.printf(Locale.ROOT, "{\"mode\": \"%s\", \"channel\": \"%s\", \"records\": %d, \"size\": %d, \"writes_ms\": %.2f, \"force_ms\": %.2f, "
                        + "\"dirty_kb_before\": %d, \"dirty_kb_after_writes\": %d, \"dirty_kb_after_force\": %d, \"promised_on_stable_storage_when_calls_return\": %s}%n",
                        mode, ch.getClass().getSimpleName(), records, size, (tw - t0) / 1e6, (tf - tw) / 1e6, d0, dAfterWrites, dAfterForce,
                        mode.equals("none") ? "false" : "true");
            }
            Files.deleteIfExists(f);
        }
    }
}
