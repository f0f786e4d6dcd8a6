// HelloAfc: an ordinary program using java.nio.channels.AsynchronousFileChannel, nothing of
// overlap's in it. Run it as it is, or on overlap with only a -D option and the jar:
//
//   java -cp overlap-java.jar \
//        -Djava.nio.file.spi.DefaultFileSystemProvider=dev.overlap.nio.OverlapFileSystemProvider \
//        java/examples/HelloAfc.java /tmp/hello.txt
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousFileChannel;
import java.nio.channels.CompletionHandler;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.CountDownLatch;

public class HelloAfc {
    public static void main(String[] args) throws Exception {
        Path p = Path.of(args.length > 0 ? args[0] : "hello-afc.txt");
        try (AsynchronousFileChannel ch = AsynchronousFileChannel.open(p,
                StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            System.out.println("channel: " + ch.getClass().getName());
            int n = ch.write(ByteBuffer.wrap("hello, asynchronous world\n".getBytes(StandardCharsets.UTF_8)), 0).get();
            ByteBuffer buf = ByteBuffer.allocate(64);
            CountDownLatch done = new CountDownLatch(1);
            ch.read(buf, 0, "attachment", new CompletionHandler<Integer, String>() {
                public void completed(Integer r, String a) {
                    System.out.printf("wrote %d, read %d bytes on %s: %s", n, r, Thread.currentThread().getName(),
                            new String(buf.array(), 0, r, StandardCharsets.UTF_8));
                    done.countDown();
                }
                public void failed(Throwable e, String a) { e.printStackTrace(); done.countDown(); }
            });
            done.await();
        }
    }
}
