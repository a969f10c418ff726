// Apache Curator's InterProcessMutex and LeaderLatch as benchmark peers for bench/run.mjs. One JVM =
// one CuratorFramework client (one ZooKeeper session); workers are threads, each with its own
// InterProcessMutex on the same path (Curator's mutex is re-entrant per thread and per instance,
// so separate instances contend like separate processes would); one LeaderLatch per JVM.
//
// Compiled at bench time with javac against Debian's jars (libcurator-{recipes,framework,client}-java
// plus zookeeper, guava and slf4j from the zookeeper package).
//
// Run: java -cp classes:<curator classpath> CuratorBench <connectString>
//
// Protocol (one line per message, UTF-8):
//   stdout, once connected:  {"ready":true,"sessionId":"<hex>"}
//   stdin:  run <workers> <t0> <t1> <lockPath> <counter> <maxSamples>
//           t0, t1: epoch ms (this machine's clock, shared with the other processes of the round);
//           workers start at t0 and begin no new acquire at or after t1.
//           counter: "mem" (a shared cell in this JVM) or the path of an 8-byte little-endian file
//           shared with other JVMs. Inside the lock each worker reads the counter, yields, and
//           writes it + 1: a lost update means two holders at once.
//           lockPath "none": no lock at all (a negative control: the counter must lose updates).
//   stdout: {"ok":true,"acquired":N,"inWindow":M,"perWorker":[...],"lat":[ms,...],"counter":C,
//            "cpuMs":<process CPU time during the run>,"errors":[...]}
//           lat: acquire() latencies of the acquisitions that returned before t1 (at most maxSamples).
//           counter: the final value for "mem" (for a file the caller reads it), else -1.
//   stdin:  latchJoin <path> <id>: join the election at <path> with a LeaderLatch (one per JVM).
//           latchStatus: {"ok":true,"isLeader":b,"gains":N,"participants":[ids in queue order]}
//           latchAwait <gains>: once more than <gains> terms were gained here, {"ok":true,"gainedAt":ms}
//           latchHandover: the leader close()s its latch, {"ok":true,"t":ms} (t: just before close());
//             latchJoin again to take part anew. latchLeave: close it.
//           Times are System.nanoTime() in ms: CLOCK_MONOTONIC on Linux, as Node's process.hrtime.
//   stdin:  quit (or end of input): close the client and exit 0.
// Nothing else is written to stdout; Curator and ZooKeeper log (warn and up) to stderr.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorBench {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    /** The non-atomic counter: read, yield, write. */
    interface Counter extends AutoCloseable {
        long read() throws Exception;
        void write(long value) throws Exception;
        @Override void close() throws Exception;
    }

    static final class MemCounter implements Counter {
        private final AtomicLong cell = new AtomicLong(); // get/set only: visibility, not atomicity
        public long read() { return cell.get(); }
        public void write(long value) { cell.set(value); }
        public void close() {}
    }

    static final class FileCounter implements Counter {
        private final FileChannel channel;
        FileCounter(String path) throws Exception {
            channel = FileChannel.open(Paths.get(path), StandardOpenOption.READ, StandardOpenOption.WRITE);
        }
        public long read() throws Exception {
            ByteBuffer buf = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            while (buf.hasRemaining()) if (channel.read(buf, buf.position()) < 0) break;
            return buf.getLong(0);
        }
        public void write(long value) throws Exception {
            ByteBuffer buf = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            buf.putLong(0, value);
            while (buf.hasRemaining()) channel.write(buf, buf.position());
        }
        public void close() throws Exception { channel.close(); }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: CuratorBench <connectString>");
            System.exit(2);
        }
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(args[0])
                .sessionTimeoutMs(10_000)
                .connectionTimeoutMs(5_000)
                .retryPolicy(new ExponentialBackoffRetry(100, 5))
                .build();
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            System.err.println("CuratorBench: not connected within 60 s");
            System.exit(1);
        }
        long sessionId = client.getZookeeperClient().getZooKeeper().getSessionId();
        OUT.println("{\"ready\":true,\"sessionId\":\"" + Long.toHexString(sessionId) + "\"}");

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line; (line = in.readLine()) != null; ) {
                String[] parts = line.trim().split("\\s+");
                if (parts.length == 0 || parts[0].isEmpty()) continue;
                if (parts[0].equals("quit")) break;
                try {
                    if (parts[0].equals("run") && parts.length >= 7) {
                        OUT.println(run(client, Integer.parseInt(parts[1]), Long.parseLong(parts[2]), Long.parseLong(parts[3]),
                                parts[4], parts[5], Integer.parseInt(parts[6])));
                    } else if (parts[0].equals("latchJoin") && parts.length >= 3) {
                        Election.join(client, parts[1], parts[2]);
                        OUT.println("{\"ok\":true}");
                    } else if (parts[0].equals("latchStatus")) {
                        OUT.println(Election.status());
                    } else if (parts[0].equals("latchAwait") && parts.length >= 2) {
                        OUT.println(Election.await(Long.parseLong(parts[1])));
                    } else if (parts[0].equals("latchHandover")) {
                        OUT.println(Election.handover());
                    } else if (parts[0].equals("latchLeave")) {
                        Election.leave();
                        OUT.println("{\"ok\":true}");
                    } else {
                        OUT.println("{\"ok\":false,\"error\":" + quote("unknown command: " + line) + "}");
                    }
                } catch (Exception e) {
                    OUT.println("{\"ok\":false,\"error\":" + quote(String.valueOf(e)) + "}");
                }
            }
        } finally {
            Election.leave();
            client.close();
        }
        System.exit(0);
    }

    private static String run(CuratorFramework client, int workers, long t0, long t1, String path, String counterSpec, int maxSamples)
            throws Exception {
        final Counter counter = counterSpec.equals("mem") ? new MemCounter() : new FileCounter(counterSpec);
        final long[] perWorker = new long[workers];
        final long[] inWindow = new long[workers];
        final List<List<Double>> lat = new ArrayList<>();
        final List<String> errors = java.util.Collections.synchronizedList(new ArrayList<>());
        final int perWorkerSamples = Math.max(1, maxSamples / workers);
        Thread[] threads = new Thread[workers];
        long cpuBefore = processCpuNanos();
        for (int w = 0; w < workers; w++) {
            final int id = w;
            final List<Double> samples = new ArrayList<>();
            lat.add(samples);
            final InterProcessMutex mutex = path.equals("none") ? null : new InterProcessMutex(client, path);
            threads[w] = new Thread(() -> {
                try {
                    long wait = t0 - System.currentTimeMillis();
                    if (wait > 0) Thread.sleep(wait);
                    while (System.currentTimeMillis() < t1) {
                        long start = System.nanoTime();
                        if (mutex != null) mutex.acquire();
                        long end = System.nanoTime();
                        try {
                            perWorker[id]++;
                            if (System.currentTimeMillis() < t1) {
                                inWindow[id]++;
                                if (samples.size() < perWorkerSamples) samples.add((end - start) / 1e6);
                            }
                            long v = counter.read();
                            Thread.yield();
                            counter.write(v + 1);
                        } finally {
                            if (mutex != null) mutex.release();
                        }
                    }
                } catch (Exception e) {
                    errors.add(String.valueOf(e));
                }
            }, "bench-worker-" + w);
            threads[w].start();
        }
        for (Thread t : threads) t.join();
        long cpuNanos = processCpuNanos() - cpuBefore;
        long finalCounter = counterSpec.equals("mem") ? counter.read() : -1;
        counter.close();

        StringBuilder sb = new StringBuilder(64 + maxSamples * 8);
        long acquired = 0, window = 0;
        for (int w = 0; w < workers; w++) {
            acquired += perWorker[w];
            window += inWindow[w];
        }
        sb.append("{\"ok\":true,\"acquired\":").append(acquired).append(",\"inWindow\":").append(window);
        sb.append(",\"perWorker\":[");
        for (int w = 0; w < workers; w++) sb.append(w == 0 ? "" : ",").append(perWorker[w]);
        sb.append("],\"lat\":[");
        boolean first = true;
        for (List<Double> samples : lat) {
            for (Double d : samples) {
                sb.append(first ? "" : ",").append(String.format(java.util.Locale.ROOT, "%.4f", d));
                first = false;
            }
        }
        sb.append("],\"counter\":").append(finalCounter);
        sb.append(",\"cpuMs\":").append(String.format(java.util.Locale.ROOT, "%.1f", cpuNanos / 1e6));
        sb.append(",\"errors\":[");
        synchronized (errors) {
            for (int i = 0; i < errors.size(); i++) sb.append(i == 0 ? "" : ",").append(quote(errors.get(i)));
        }
        sb.append("]}");
        return sb.toString();
    }

    /** This JVM's participant in one election (LeaderLatch), for the leadership handover workload. */
    static final class Election {
        private static final Object LOCK = new Object();
        private static final long WAIT_MS = 10_000;
        private static LeaderLatch latch;
        private static long gains;
        private static double gainedAt = Double.NaN;

        static double monoMs() { return System.nanoTime() / 1e6; }

        static void join(CuratorFramework client, String path, String id) throws Exception {
            LeaderLatch l = new LeaderLatch(client, path, id);
            l.addListener(new LeaderLatchListener() {
                @Override public void isLeader() {
                    double at = monoMs();
                    synchronized (LOCK) {
                        gains++;
                        gainedAt = at;
                        LOCK.notifyAll();
                    }
                }
                @Override public void notLeader() {}
            });
            l.start();
            latch = l;
        }

        static String status() throws Exception {
            StringBuilder sb = new StringBuilder("{\"ok\":true,\"isLeader\":").append(latch.hasLeadership());
            synchronized (LOCK) { sb.append(",\"gains\":").append(gains); }
            sb.append(",\"participants\":[");
            boolean first = true;
            for (Participant p : latch.getParticipants()) {
                sb.append(first ? "" : ",").append(quote(p.getId()));
                first = false;
            }
            return sb.append("]}").toString();
        }

        static String await(long after) throws Exception {
            long deadline = System.currentTimeMillis() + WAIT_MS;
            synchronized (LOCK) {
                while (gains <= after) {
                    long left = deadline - System.currentTimeMillis();
                    if (left <= 0) throw new IllegalStateException("no leadership gained within " + WAIT_MS + " ms");
                    LOCK.wait(left);
                }
                return "{\"ok\":true,\"gainedAt\":" + ms(gainedAt) + "}";
            }
        }

        static String handover() throws Exception {
            if (!latch.await(WAIT_MS, TimeUnit.MILLISECONDS)) throw new IllegalStateException("not the leader");
            double t = monoMs();
            latch.close();
            return "{\"ok\":true,\"t\":" + ms(t) + "}";
        }

        static void leave() {
            try {
                if (latch != null) latch.close();
            } catch (Exception e) {
                // already closed
            }
            latch = null;
        }

        private static String ms(double x) { return String.format(java.util.Locale.ROOT, "%.4f", x); }
    }

    /** CPU time of the whole JVM (all threads, including Curator's and ZooKeeper's own). */
    private static long processCpuNanos() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
        }
        return 0;
    }

    private static String quote(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }
}
