import { closeAll, connect, uniquePath, zkConnectString } from '../../support/helpers.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { CreateMode } from '../../../lib/core/client/session.js';

afterAll(closeAll);

describe('a burst of requests on one session', () => {
  it('does not make the deadline call a live session lost while the server works through it', async () => {
    // The server hears from us all along; only the answers take longer than the session timeout.
    // 3 s: a whole-suite run's GC pauses (tens of thousands of pending promises) ate the margin of
    // 2 s sessions once (a fail-safe loss while the server held the session).
    const connection = await connect({ sessionTimeoutMs: 3000 });
    const lost: string[] = [];
    connection.on('lost', (reason) => lost.push(reason));
    const session = connection.session!;
    const path = uniquePath('burst');
    await session.create(path.slice(0, path.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
    await session.create(path, Buffer.alloc(0), CreateMode.EPHEMERAL);
    const started = performance.now();
    // Issued in chunks with a turn of the event loop between them (one synchronous loop making tens
    // of thousands of requests would itself stall the process past the deadline on a loaded
    // machine), for one and a half timeouts: answering them all takes longer than the timeout on
    // any machine, fast or slow.
    const requests: Promise<unknown>[] = [];
    while (performance.now() - started < 1.5 * session.timeoutMs) {
      for (let j = 0; j < 1000; j++) requests.push(session.exists(path));
      await new Promise((resolve) => setImmediate(resolve));
    }
    const answers = await Promise.allSettled(requests);
    const tookMs = performance.now() - started;
    expect(answers.filter((a) => a.status === 'rejected')).toHaveLength(0);
    expect(lost).toEqual([]);
    expect(connection.session).toBe(session);
    // The case this guards: answering all of them took longer than the session's timeout.
    expect(tookMs).toBeGreaterThan(session.timeoutMs);
  }, 120_000);

  it('keeps the session through a burst on a server that answers slowly (the queue at the server stays short)', async () => {
    // Answers at about 280 a second: 1 000 requests in flight would wait 3.5 s for theirs, past the
    // 2 s session's deadline (which counts from the send time of the newest answered request),
    // although the server hears every request at once. Seen in a loaded test run (60 000 CLOSING).
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 2000 });
      const lost: string[] = [];
      connection.on('lost', (reason) => lost.push(reason));
      const session = connection.session!;
      const path = uniquePath('slow-burst');
      await session.create(path.slice(0, path.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
      await session.create(path, Buffer.alloc(0), CreateMode.EPHEMERAL);
      proxy.slowReplies(25_000);
      const requests: Promise<unknown>[] = [];
      for (let i = 0; i < 2000; i++) requests.push(session.exists(path));
      const answers = await Promise.allSettled(requests);
      expect(answers.filter((a) => a.status === 'rejected')).toHaveLength(0);
      expect(lost).toEqual([]);
      expect(connection.session).toBe(session);
    } finally {
      await proxy.close();
    }
  }, 120_000);
});
