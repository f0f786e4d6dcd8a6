// Depth 1: one thread reads 4 KiB blocks at random offsets, one read at a time, through
// overlap's AsynchronousFileChannel (`read(buf, pos).get()`) and through the JDK's
// FileChannel.read(buf, pos) (a plain pread), on the same file, interleaved round by round
// (A B A B), page cache (the file read once first) and O_DIRECT. Prints one JSON line per
// round and mode and a summary line per mode with the median ratio.
//
//   java --enable-native-access=ALL-UNNAMED -cp java/target/overlap-java-0.1.0.jar \
//       java/examples/Depth1.java FILE [READS_PER_ROUND] [ROUNDS] [cached|direct|both]
//
// FILE: an existing file of at least 64 MiB on the disk or the fast device (for example one
// made by `head -c 1073741824 /dev/urandom > FILE`).

import com.sun.nio.file.ExtendedOpenOption;
import dev.overlap.nio.OverlapAsynchronousFileChannel;
import java.lang.foreign.Arena;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.OpenOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

public class Depth1 {
    static final int BS = 4096;

    static long[] offsets(long size, int n, long seed) {
        long blocks = size / BS;
        long[] o = new long[n];
        long x = seed;
        for (int i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            o[i] = Long.remainderUnsigned(x >>> 11, blocks) * BS;
        }
        return o;
    }

    static double afc(Path file, boolean direct, long[] offs, ByteBuffer buf) throws Exception {
        List<OpenOption> opts = new ArrayList<>(List.of(StandardOpenOption.READ));
        if (direct) opts.add(ExtendedOpenOption.DIRECT);
        try (AsynchronousFileChannel ch = OverlapAsynchronousFileChannel.open(file, opts.toArray(new OpenOption[0]))) {
            long t0 = System.nanoTime();
            for (long off : offs) {
                buf.clear();
                int n = ch.read(buf, off).get();
                if (n != BS) throw new IllegalStateException("short read " + n + " at " + off);
            }
            return (System.nanoTime() - t0) / 1e9;
        }
    }

    static double fc(Path file, boolean direct, long[] offs, ByteBuffer buf) throws Exception {
        List<OpenOption> opts = new ArrayList<>(List.of(StandardOpenOption.READ));
        if (direct) opts.add(ExtendedOpenOption.DIRECT);
        try (FileChannel ch = FileChannel.open(file, opts.toArray(new OpenOption[0]))) {
            long t0 = System.nanoTime();
            for (long off : offs) {
                buf.clear();
                int n = ch.read(buf, off);
                if (n != BS) throw new IllegalStateException("short read " + n + " at " + off);
            }
            return (System.nanoTime() - t0) / 1e9;
        }
    }

    public static void main(String[] args) throws Exception {
        Path file = Path.of(args[0]);
        int reads = args.length > 1 ? Integer.parseInt(args[1]) : 20000;
        int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 3;
        String which = args.length > 3 ? args[3] : "both";
        long size = Files.size(file);
        // Aligned for O_DIRECT (4 KiB covers the logical block sizes here), off the Java heap.
        ByteBuffer buf = Arena.global().allocate(BS, 4096).asByteBuffer();
        List<Boolean> modes = switch (which) {
            case "cached" -> List.of(false);
            case "direct" -> List.of(true);
            default -> List.of(false, true);
        };
        for (boolean direct : modes) {
            if (!direct) {
                // Into the page cache once, so that every cached round reads memory.
                try (FileChannel ch = FileChannel.open(file)) {
                    ByteBuffer b = ByteBuffer.allocateDirect(1 << 20);
                    long pos = 0;
                    while (ch.read(b, pos) > 0) { pos += b.position(); b.clear(); }
                }
            }
            String mode = direct ? "direct" : "cached";
            // A warm-up round of each, not reported (JIT, engine start).
            long[] warm = offsets(size, Math.max(1000, reads / 10), 7);
            afc(file, direct, warm, buf);
            fc(file, direct, warm, buf);
            double[] ratios = new double[rounds];
            for (int r = 0; r < rounds; r++) {
                long[] offs = offsets(size, reads, 1000 + r);
                // A B, then B A in the next round: neither always goes first.
                double a, f;
                if (r % 2 == 0) { a = afc(file, direct, offs, buf); f = fc(file, direct, offs, buf); }
                else { f = fc(file, direct, offs, buf); a = afc(file, direct, offs, buf); }
                ratios[r] = (reads / a) / (reads / f);
                System.out.printf(Locale.ROOT,
                    "{\"round\": %d, \"mode\": \"%s\", \"reads\": %d, \"afc_overlap_reads_per_s\": %.0f, \"filechannel_reads_per_s\": %.0f, \"ratio\": %.3f}%n",
                    r, mode, reads, reads / a, reads / f, ratios[r]);
            }
            double[] s = ratios.clone();
            Arrays.sort(s);
            System.out.printf(Locale.ROOT, "{\"mode\": \"%s\", \"rounds\": %d, \"ratio_median\": %.3f, \"ratio_min\": %.3f, \"ratio_max\": %.3f}%n",
                mode, rounds, s[rounds / 2], s[0], s[rounds - 1]);
        }
    }
}
