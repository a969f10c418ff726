// Interop test peer: drives Apache Curator's lock recipes from line commands on stdin, so that a
// Jest test (test/support/curator-peer.ts) can script Curator precisely beside our library.
//
// Run: java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp classes:<curator classpath> CuratorPeer <connectString>
//
// Protocol (one line per message, UTF-8):
//   stdout, once connected:  ready {"sessionId":"<hex>"}
//   stdin, a request:        <req> <command> [args...]      <req> = a positive integer chosen by the caller
//   stdout, its reply:       {"req":<req>,"ok":true,"value":<json>}  or  {"req":<req>,"ok":false,"error":"<text>"}
//   stdout, unsolicited:     {"event":"state","value":"<ConnectionState>"}   (SUSPENDED, RECONNECTED, LOST, ...)
// Replies arrive in completion order, not request order: every reply echoes its <req>.
//
// Locks are named by caller-chosen ids. Every command on one id runs on that id's own thread, in
// request order (Curator's InterProcessMutex is owned per thread, so acquire and release must run
// on the same thread). A blocking acquire on one id therefore never holds up commands on other ids.
// Creating locks, participants, revocations, revoke, children, stat, sessionId, ping and quit run
// on the reader thread or a shared pool and are never queued behind an id's acquire.
//
// Commands (timeouts in ms; a negative timeout waits without limit):
//   mutex <id> <path>                      new InterProcessMutex                     -> null
//   acquire <id> <timeoutMs>               mutex acquire                             -> true | false
//   release <id>                           mutex release                             -> null
//   isAcquired <id>                        isAcquiredInThisProcess (any lock kind)   -> true | false
//   participants <id>                      participant node names (not full paths)   -> ["_c_...-lock-0000000001", ...]
//                                          (rw: both kinds, sorted by sequence)
//   semaphore <id> <path> <permits>        new InterProcessSemaphoreV2               -> null
//   leaseAcquire <id> <n> <timeoutMs>      acquire n leases                          -> n | null (timed out)
//   leaseReleaseAll <id>                   return every lease this id holds          -> number returned
//   rw <id> <path>                         new InterProcessReadWriteLock             -> null
//   readAcquire <id> <timeoutMs>           readLock().acquire                        -> true | false
//   readRelease <id>                       readLock().release                        -> null
//   writeAcquire <id> <timeoutMs>          writeLock().acquire                       -> true | false
//   writeRelease <id>                      writeLock().release                       -> null
//   latch <id> <path> <participantId>      new LeaderLatch, started                  -> null
//   hasLeadership <id>                                                               -> true | false
//   latchLeader <id>                       getLeader().getId()                       -> "<participantId>"
//   latchClose <id>                        LeaderLatch.close                         -> null
//   revocable <id> <release|record>        makeRevocable (rw: on both halves), to be -> null
//                                          sent before acquire. Its listener counts each call; with
//                                          `release` it also fully releases the revoked lock (the
//                                          mutex, or that rw half) on the id's thread, after the
//                                          id's earlier commands (so a waiter revoked while queued
//                                          releases once its acquire returns). `record` only counts:
//                                          a holder that ignores the request.
//   revocations <id>                       times the listener ran                    -> n
//   revoke <path>                          Revoker.attemptRevoke: setData __REVOKE__ -> null
//                                          on the node, NoNode ignored
//   children <path>                        getChildren, in server order              -> [names] | null (no node)
//   stat <path>                            {"ephemeralOwner":"<hex>","dataLength":n,"data":"<text>"} | null
//   sessionId                              this client's session id                  -> "<hex>"
//   ping                                                                             -> "pong"
//   quit                                   close the client and exit 0               -> null
// End of stdin also closes the client and exits, so the JVM never outlives its parent's pipe.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.recipes.locks.RevocationListener;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

public final class CuratorPeer {
    private static final int SESSION_TIMEOUT_MS = 10_000;
    /** Curator warns when this exceeds the session timeout. */
    private static final int CONNECTION_TIMEOUT_MS = 10_000;
    private static final int READY_TIMEOUT_MS = 30_000;

    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    /** One lock of any kind, with the thread every command on it runs on. */
    private static final class Entry {
        final String id;
        final String path;
        final ExecutorService thread;
        InterProcessMutex mutex;
        InterProcessSemaphoreV2 semaphore;
        final List<Lease> leases = Collections.synchronizedList(new ArrayList<>());
        InterProcessReadWriteLock rw;
        LeaderLatch latch;
        /** Times the revocation listener ran (see `revocable`). */
        final AtomicInteger revocations = new AtomicInteger();

        Entry(String id, String path) {
            this.id = id;
            this.path = path;
            this.thread = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "lock-" + id);
                t.setDaemon(true);
                return t;
            });
        }
    }

    @FunctionalInterface
    private interface Work {
        Object run() throws Exception;
    }

    private final CuratorFramework client;
    private final Map<String, Entry> entries = new ConcurrentHashMap<>();
    private final ExecutorService queries = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "query");
        t.setDaemon(true);
        return t;
    });

    private CuratorPeer(CuratorFramework client) {
        this.client = client;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: CuratorPeer <connectString>");
            System.exit(64);
        }
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], SESSION_TIMEOUT_MS, CONNECTION_TIMEOUT_MS, new ExponentialBackoffRetry(100, 3));
        client.getConnectionStateListenable().addListener((c, state) ->
                emit("{\"event\":\"state\",\"value\":" + json(state.name()) + "}"));
        client.start();
        if (!client.blockUntilConnected(READY_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
            System.err.println("CuratorPeer: could not connect to " + args[0] + " within " + READY_TIMEOUT_MS + " ms");
            client.close();
            System.exit(2);
        }
        CuratorPeer peer = new CuratorPeer(client);
        emit("ready {\"sessionId\":" + json(peer.sessionId()) + "}");
        peer.loop();
    }

    private void loop() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) continue;
            String[] words = line.split("\\s+");
            long req;
            try {
                req = Long.parseLong(words[0]);
            } catch (NumberFormatException e) {
                emit("{\"req\":null,\"ok\":false,\"error\":" + json("request must start with a number: " + line) + "}");
                continue;
            }
            if (words.length < 2) {
                fail(req, "missing command");
                continue;
            }
            try {
                if (dispatch(req, words[1], words)) {
                    shutdown();
                    ok(req, null);
                    System.exit(0);
                }
            } catch (Exception e) {
                fail(req, describe(e));
            }
        }
        shutdown();
        System.exit(0);
    }

    /** Runs or schedules one command; returns true on quit. */
    private boolean dispatch(long req, String command, String[] w) throws Exception {
        switch (command) {
            case "mutex": {
                need(w, 4);
                Entry e = create(w[2], w[3]);
                e.mutex = new InterProcessMutex(client, w[3]);
                ok(req, null);
                return false;
            }
            case "semaphore": {
                need(w, 5);
                Entry e = create(w[2], w[3]);
                e.semaphore = new InterProcessSemaphoreV2(client, w[3], Integer.parseInt(w[4]));
                ok(req, null);
                return false;
            }
            case "rw": {
                need(w, 4);
                Entry e = create(w[2], w[3]);
                e.rw = new InterProcessReadWriteLock(client, w[3]);
                ok(req, null);
                return false;
            }
            case "latch": {
                need(w, 5);
                Entry e = create(w[2], w[3]);
                e.latch = new LeaderLatch(client, w[3], w[4]);
                e.latch.start();
                ok(req, null);
                return false;
            }
            case "hasLeadership": {
                need(w, 3);
                ok(req, kind(entry(w[2]).latch, entry(w[2]), "latch").hasLeadership());
                return false;
            }
            case "latchLeader": {
                need(w, 3);
                LeaderLatch l = kind(entry(w[2]).latch, entry(w[2]), "latch");
                query(req, () -> l.getLeader().getId());
                return false;
            }
            case "latchClose": {
                need(w, 3);
                LeaderLatch l = kind(entry(w[2]).latch, entry(w[2]), "latch");
                query(req, () -> {
                    l.close();
                    return null;
                });
                return false;
            }
            case "acquire": {
                need(w, 4);
                Entry e = entry(w[2]);
                InterProcessMutex m = kind(e.mutex, e, "mutex");
                long ms = Long.parseLong(w[3]);
                onLock(req, e, () -> acquire(m, ms));
                return false;
            }
            case "release": {
                need(w, 3);
                Entry e = entry(w[2]);
                InterProcessMutex m = kind(e.mutex, e, "mutex");
                onLock(req, e, () -> {
                    m.release();
                    return null;
                });
                return false;
            }
            case "readAcquire":
            case "writeAcquire": {
                need(w, 4);
                Entry e = entry(w[2]);
                InterProcessReadWriteLock rw = kind(e.rw, e, "rw");
                InterProcessMutex m = command.startsWith("read") ? rw.readLock() : rw.writeLock();
                long ms = Long.parseLong(w[3]);
                onLock(req, e, () -> acquire(m, ms));
                return false;
            }
            case "readRelease":
            case "writeRelease": {
                need(w, 3);
                Entry e = entry(w[2]);
                InterProcessReadWriteLock rw = kind(e.rw, e, "rw");
                InterProcessMutex m = command.startsWith("read") ? rw.readLock() : rw.writeLock();
                onLock(req, e, () -> {
                    m.release();
                    return null;
                });
                return false;
            }
            case "revocable": {
                need(w, 4);
                Entry e = entry(w[2]);
                boolean release;
                switch (w[3]) {
                    case "release": release = true; break;
                    case "record": release = false; break;
                    default: throw new IllegalArgumentException("revocable: mode must be release or record, got " + w[3]);
                }
                if (e.mutex == null && e.rw == null) throw new IllegalArgumentException("lock " + e.id + " is not a mutex or rw");
                RevocationListener<InterProcessMutex> listener = revoked -> onRevoked(e, revoked, release);
                onLock(req, e, () -> {
                    if (e.mutex != null) {
                        e.mutex.makeRevocable(listener);
                    } else {
                        e.rw.readLock().makeRevocable(listener);
                        e.rw.writeLock().makeRevocable(listener);
                    }
                    return null;
                });
                return false;
            }
            case "revocations": {
                need(w, 3);
                ok(req, entry(w[2]).revocations.get());
                return false;
            }
            case "revoke": {
                need(w, 3);
                String path = w[2];
                query(req, () -> {
                    Revoker.attemptRevoke(client, path);
                    return null;
                });
                return false;
            }
            case "leaseAcquire": {
                need(w, 5);
                Entry e = entry(w[2]);
                InterProcessSemaphoreV2 s = kind(e.semaphore, e, "semaphore");
                int n = Integer.parseInt(w[3]);
                long ms = Long.parseLong(w[4]);
                onLock(req, e, () -> {
                    Collection<Lease> got = ms < 0 ? s.acquire(n) : s.acquire(n, ms, TimeUnit.MILLISECONDS);
                    if (got == null) return null;
                    e.leases.addAll(got);
                    return got.size();
                });
                return false;
            }
            case "leaseReleaseAll": {
                need(w, 3);
                Entry e = entry(w[2]);
                InterProcessSemaphoreV2 s = kind(e.semaphore, e, "semaphore");
                onLock(req, e, () -> {
                    List<Lease> all;
                    synchronized (e.leases) {
                        all = new ArrayList<>(e.leases);
                        e.leases.clear();
                    }
                    s.returnAll(all);
                    return all.size();
                });
                return false;
            }
            case "isAcquired": {
                need(w, 3);
                Entry e = entry(w[2]);
                boolean held = e.mutex != null ? e.mutex.isAcquiredInThisProcess()
                        : e.rw != null ? e.rw.readLock().isAcquiredInThisProcess() || e.rw.writeLock().isAcquiredInThisProcess()
                        : !e.leases.isEmpty();
                ok(req, held);
                return false;
            }
            case "participants": {
                need(w, 3);
                Entry e = entry(w[2]);
                query(req, () -> participants(e));
                return false;
            }
            case "children": {
                need(w, 3);
                String path = w[2];
                query(req, () -> {
                    try {
                        return client.getChildren().forPath(path);
                    } catch (KeeperException.NoNodeException x) {
                        return null;
                    }
                });
                return false;
            }
            case "stat": {
                need(w, 3);
                String path = w[2];
                query(req, () -> {
                    Stat stat = new Stat();
                    byte[] data;
                    try {
                        data = client.getData().storingStatIn(stat).forPath(path);
                    } catch (KeeperException.NoNodeException x) {
                        return null;
                    }
                    return new Raw("{\"ephemeralOwner\":" + json(Long.toHexString(stat.getEphemeralOwner()))
                            + ",\"dataLength\":" + stat.getDataLength()
                            + ",\"data\":" + json(data == null ? "" : new String(data, StandardCharsets.UTF_8)) + "}");
                });
                return false;
            }
            case "sessionId":
                ok(req, sessionId());
                return false;
            case "ping":
                ok(req, "pong");
                return false;
            case "quit":
                return true;
            default:
                fail(req, "unknown command: " + command);
                return false;
        }
    }

    private static boolean acquire(InterProcessMutex m, long ms) throws Exception {
        if (ms < 0) {
            m.acquire();
            return true;
        }
        return m.acquire(ms, TimeUnit.MILLISECONDS);
    }

    /**
     * The revocation listener: runs on Curator's event thread (makeRevocable's default direct
     * executor), so it only counts and, in release mode, hands the release to the id's own thread,
     * the one that acquired (InterProcessMutex is owned per thread).
     */
    private static void onRevoked(Entry e, InterProcessMutex revoked, boolean release) {
        e.revocations.incrementAndGet();
        if (!release) return;
        e.thread.execute(() -> {
            try {
                while (revoked.isOwnedByCurrentThread()) revoked.release();
            } catch (Throwable t) {
                System.err.println("CuratorPeer: releasing " + e.id + " on revocation failed: " + describe(t));
            }
        });
    }

    private Object participants(Entry e) throws Exception {
        List<String> names = new ArrayList<>();
        if (e.mutex != null) {
            for (String p : e.mutex.getParticipantNodes()) names.add(lastSegment(p));
        } else if (e.semaphore != null) {
            try {
                names.addAll(e.semaphore.getParticipantNodes());
            } catch (KeeperException.NoNodeException x) {
                // no leases/ node yet: no participants (a mutex answers [] here too)
            }
        } else {
            for (String p : e.rw.writeLock().getParticipantNodes()) names.add(lastSegment(p));
            for (String p : e.rw.readLock().getParticipantNodes()) names.add(lastSegment(p));
            names.sort((a, b) -> sequenceKey(a).compareTo(sequenceKey(b)));
        }
        return names;
    }

    private static String sequenceKey(String name) {
        int r = name.lastIndexOf("__READ__");
        int w = name.lastIndexOf("__WRIT__");
        int i = Math.max(r, w);
        return i < 0 ? name : name.substring(i + 8);
    }

    private static String lastSegment(String path) {
        return path.substring(path.lastIndexOf('/') + 1);
    }

    private String sessionId() {
        try {
            return Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId());
        } catch (Exception e) {
            return "0";
        }
    }

    private Entry create(String id, String path) {
        Entry fresh = new Entry(id, path);
        Entry old = entries.putIfAbsent(id, fresh);
        if (old != null) {
            fresh.thread.shutdown();
            throw new IllegalArgumentException("id already in use: " + id);
        }
        return fresh;
    }

    private Entry entry(String id) {
        Entry e = entries.get(id);
        if (e == null) throw new IllegalArgumentException("no lock with id " + id);
        return e;
    }

    private static <T> T kind(T lock, Entry e, String expected) {
        if (lock == null) throw new IllegalArgumentException("lock " + e.id + " is not a " + expected);
        return lock;
    }

    private static void need(String[] words, int count) {
        if (words.length != count) {
            throw new IllegalArgumentException("'" + words[1] + "' takes " + (count - 2) + " argument(s), got " + (words.length - 2));
        }
    }

    /** Runs work on the lock's own thread, after every earlier command on that lock. */
    private void onLock(long req, Entry e, Work work) {
        e.thread.execute(() -> complete(req, work));
    }

    private void query(long req, Work work) {
        queries.execute(() -> complete(req, work));
    }

    private static void complete(long req, Work work) {
        try {
            ok(req, work.run());
        } catch (Throwable t) {
            fail(req, describe(t));
        }
    }

    private void shutdown() {
        for (Entry e : entries.values()) e.thread.shutdownNow();
        queries.shutdownNow();
        client.close();
    }

    // ---- output ----

    /** A value already rendered as JSON. */
    private static final class Raw {
        final String json;

        Raw(String json) {
            this.json = json;
        }
    }

    private static void ok(long req, Object value) {
        emit("{\"req\":" + req + ",\"ok\":true,\"value\":" + toJson(value) + "}");
    }

    private static void fail(long req, String error) {
        emit("{\"req\":" + req + ",\"ok\":false,\"error\":" + json(error) + "}");
    }

    private static void emit(String line) {
        synchronized (OUT) {
            OUT.print(line);
            OUT.print('\n');
            OUT.flush();
        }
    }

    private static String describe(Throwable t) {
        String message = t.getMessage();
        return t.getClass().getName() + (message == null ? "" : ": " + message);
    }

    private static String toJson(Object value) {
        if (value == null) return "null";
        if (value instanceof Raw) return ((Raw) value).json;
        if (value instanceof Boolean || value instanceof Number) return value.toString();
        if (value instanceof Collection) {
            StringBuilder sb = new StringBuilder("[");
            for (Object item : (Collection<?>) value) {
                if (sb.length() > 1) sb.append(',');
                sb.append(toJson(item));
            }
            return sb.append(']').toString();
        }
        return json(value.toString());
    }

    private static String json(String s) {
        StringBuilder sb = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
