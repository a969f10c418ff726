// A man in the middle between our TypeScript client and the real ZooKeeper (TcpProxy's
// rewriteReplies / rewriteConnectResponses) sends replies that are well framed yet cannot be a
// correct server's answer: bytes left over, a multi whose results do not match its ops, an error
// code ZooKeeper does not define, a negotiated timeout no server grants. Each drops the link like a
// broken frame: the request fails as a connection loss, so an acquire recovers its node on the
// reconnect (or says LockNotAcquiredError), never a raw TypeError or ZkError, and leaves no node
// behind. A timeout of 0 for every new session gets a few sessions, not thousands.
import { ZkConnectError } from '../../../lib/core/errors.js';
import type { Lease } from '../../../lib/core/leases/lease.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { CLIENT_KINDS } from '../../../lib/core/connection/connection-options.js';
import type { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { ZkError } from '../../../lib/core/client/zk-error.js';
import { JuteReader, JuteWriter } from '../../../lib/core/client/wire/jute.js';
import { decodeStat, OpCode } from '../../../lib/core/client/wire/records.js';
import { childrenOf, closeAll, connect, engine, eventually, killSession, nextEvent, uniquePath } from '../../support/helpers.js';
import { nameOf, within, withProxy } from '../../support/lock-test-helpers.js';
import type { TcpProxy } from '../../support/tcp-proxy.js';

afterEach(closeAll);

type ProxiedRequest = { xid: number; type: number; body: Buffer };

/** The path a request names first (create, delete, exists, getData, getChildren2). */
function pathOf(request: ProxiedRequest): string {
  return new JuteReader(request.body).string();
}

/** Whether `request` is of `type` and on a node under `parent`. */
function under(request: ProxiedRequest | undefined, type: number, parent: string): boolean {
  return request !== undefined && request.type === type && pathOf(request).startsWith(`${parent}/`);
}

/** The bytes `write` writes, without a length prefix. */
function record(write: (w: JuteWriter) => void): Buffer {
  const w = new JuteWriter();
  write(w);
  return w.frame().subarray(4);
}

const stat = (w: JuteWriter) => w.long(1n).long(1n).long(1_700_000_000_000n).long(1_700_000_000_000n).int(0).int(0).int(0).long(0n).int(0).int(0).long(1n);
/** A reply's header (xid, zxid, err): its first 16 bytes. */
const headerOf = (reply: Buffer) => reply.subarray(0, 16);
/** The same header saying OK. */
function okHeader(reply: Buffer): Buffer {
  const header = Buffer.from(headerOf(reply));
  header.writeInt32BE(0, 12);
  return header;
}

/** A multi reply's results, each with its own header (type, done, err), without the end marker. */
function multiResults(reply: Buffer): Buffer[] {
  const reader = new JuteReader(reply, 16);
  const at = () => reply.length - reader.remaining;
  const results: Buffer[] = [];
  for (;;) {
    const start = at();
    const type = reader.int();
    const done = reader.bool();
    reader.int();
    if (done) return results;
    if (type === OpCode.create) reader.string();
    else if (type === OpCode.create2 || type === OpCode.createContainer) (reader.string(), decodeStat(reader));
    else if (type === OpCode.error) reader.int();
    results.push(reply.subarray(start, at()));
  }
}
const MULTI_END = record((w) => w.int(-1).bool(true).int(-1));

/** An engine whose link goes through `proxy`. */
const through = (proxy: TcpProxy) => engine({ connectString: proxy.connectString });

/** A lock's children as a second session lists them (the lock path may be gone: none then). */
const queueOf = (observer: ZkConnection, path: string) => childrenOf(observer, path).catch(() => [] as string[]);

/** Acquires `path` through `proxy` with `rewrite` in place; checks the link dropped and nothing but the lease's node is left. */
async function acquiredOverRewrite(proxy: TcpProxy, path: string, rewrite: (reply: Buffer, request: ProxiedRequest | undefined) => Buffer | undefined) {
  const e = await through(proxy);
  const observer = await connect();
  const sessionId = e.connection.sessionId;
  let rewritten = 0;
  proxy.rewriteReplies((reply, request) => {
    if (rewritten > 0) return undefined;
    const changed = rewrite(reply, request);
    if (changed) rewritten++;
    return changed;
  });
  const lease = await within(new Mutex(e, 'mitm', path, { coalesce: false }).acquire({ waitMs: 10_000 }), 30_000, 'acquire');
  expect(rewritten).toBe(1);
  // The link dropped and the same session came back on a new one.
  expect(proxy.connectRequests.reattaches).toBeGreaterThanOrEqual(1);
  expect(e.connection.sessionId).toBe(sessionId);
  expect(lease.signal.aborted).toBe(false);
  expect(await queueOf(observer, path)).toEqual([nameOf(lease)]);
  await lease.release();
  expect(await queueOf(observer, path)).toEqual([]);
}

describe('replies read to their end', () => {
  it('a lock create answered with a listing (bytes left over): the link drops, the acquire gets its node on the reconnect, no orphan', async () => {
    await withProxy(async (proxy) => {
      const path = uniquePath('mitm-listing-as-create');
      await acquiredOverRewrite(proxy, path, (reply, request) =>
        under(request, OpCode.create, path) ? Buffer.concat([headerOf(reply), record((w) => stat(w.vector(['x'], (v, s) => v.ustring(s))))]) : undefined,
      );
    });
  });

  it.each([
    ['with bytes left over', 80],
    ['exactly as long as a Stat (its text read as times)', 64],
  ])('an exists answered with a path %s: fails as CONNECTIONLOSS, the link drops, the same session answers again', async (_name, length) => {
    await withProxy(async (proxy) => {
      const connection = await connect({ connectString: proxy.connectString });
      const session = connection.session!;
      const path = uniquePath('mitm-path-as-stat');
      proxy.rewriteReplies((reply, request) =>
        request?.type === OpCode.exists && pathOf(request) === path ? Buffer.concat([okHeader(reply), record((w) => w.ustring(`/${'p'.repeat(length - 1)}`))]) : undefined,
      );
      const failure = await session.exists(path).then(
        (stat) => stat,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(ZkError);
      expect((failure as ZkError).codeName).toBe('CONNECTIONLOSS');
      proxy.rewriteReplies(undefined);
      await eventually(() => session.isConnectedNatively, 10_000, 10);
      expect(proxy.connectRequests.reattaches).toBe(1);
      expect(await session.exists(path)).toBeNull();
      expect(connection.session).toBe(session);
    });
  });
});

describe('multi replies match their ops', () => {
  /** Two locks whose node creates go in one multi: paths the engine knows (used once), acquired in the same turn. */
  async function bothOverRewrite(proxy: TcpProxy, rewrite: (results: Buffer[]) => Buffer[]) {
    const e = await through(proxy);
    const observer = await connect();
    const paths = [uniquePath('mitm-multi-a'), uniquePath('mitm-multi-b')];
    const locks = paths.map((p) => new Mutex(e, 'mitm', p, { coalesce: false }));
    for (const lock of locks) await (await lock.acquire()).release();
    let rewritten = 0;
    proxy.rewriteReplies((reply, request) => {
      if (rewritten > 0 || request?.type !== OpCode.multi) return undefined;
      const results = multiResults(reply);
      if (results.length < 2) return undefined;
      rewritten++;
      return Buffer.concat([headerOf(reply), ...rewrite(results), MULTI_END]);
    });
    const leases: Lease[] = await within(Promise.all(locks.map((lock) => lock.acquire({ waitMs: 10_000 }))), 30_000, 'acquire');
    expect(rewritten).toBe(1);
    expect(proxy.connectRequests.reattaches).toBeGreaterThanOrEqual(1);
    for (const [i, lease] of leases.entries()) {
      expect(lease.signal.aborted).toBe(false);
      expect(await queueOf(observer, paths[i]!)).toEqual([nameOf(lease)]);
      await lease.release();
      expect(await queueOf(observer, paths[i]!)).toEqual([]);
    }
  }

  it('one result fewer than ops: the link drops, both acquires get their nodes, no orphan (was: a TypeError out of acquire)', async () => {
    await withProxy((proxy) => bothOverRewrite(proxy, (results) => results.slice(0, -1)));
  });

  it('a create answered as a delete: the link drops, both acquires get their nodes, no orphan', async () => {
    const asDelete = record((w) => w.int(OpCode.delete).bool(false).int(0));
    await withProxy((proxy) => bothOverRewrite(proxy, ([first, ...rest]) => [first!.readInt32BE(0) === OpCode.create ? asDelete : first!, ...rest]));
  });
});

describe('error codes ZooKeeper defines', () => {
  it('a lock create answered with UNKNOWN(131072): the link drops, the acquire gets its node on the reconnect (was: a raw ZkError)', async () => {
    await withProxy(async (proxy) => {
      const path = uniquePath('mitm-unknown-code');
      await acquiredOverRewrite(proxy, path, (reply, request) => {
        if (!under(request, OpCode.create, path)) return undefined;
        const header = Buffer.from(headerOf(reply));
        header.writeInt32BE(131072, 12);
        return header;
      });
    });
  });
});

describe('our own node missing from our listing', () => {
  it('is deleted by path before we queue again: the lock is acquired, no orphan blocks it', async () => {
    await withProxy(async (proxy) => {
      const path = uniquePath('mitm-own-node-unlisted');
      const e = await through(proxy);
      const observer = await connect();
      let rewritten = 0;
      proxy.rewriteReplies((reply, request) => {
        if (rewritten > 0 || request?.type !== OpCode.getChildren2 || pathOf(request) !== path) return undefined;
        rewritten++;
        // The same listing without its children (ours among them).
        const reader = new JuteReader(reply, 16);
        reader.vector((r) => r.string());
        return Buffer.concat([headerOf(reply), record((w) => w.int(0)), reply.subarray(reply.length - reader.remaining)]);
      });
      const lease = await within(new Mutex(e, 'mitm', path, { coalesce: false }).acquire({ waitMs: 5_000 }), 30_000, 'acquire');
      expect(rewritten).toBe(1);
      expect(await queueOf(observer, path)).toEqual([nameOf(lease)]);
      await lease.release();
      expect(await queueOf(observer, path)).toEqual([]);
    });
  });
});

describe('the negotiated timeout', () => {
  it.each(CLIENT_KINDS)('%s client: more than a server grants for the ask: refused as a connection failure; the connect error says granted vs asked and which option to raise', async (client) => {
    await withProxy(async (proxy) => {
      proxy.rewriteConnectResponses((response) => {
        const changed = Buffer.from(response);
        changed.writeInt32BE(40_000, 4);
        return changed;
      });
      const failure = await connect({ client, connectString: proxy.connectString, sessionTimeoutMs: 4000, connectTimeoutMs: 4000 }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(ZkConnectError);
      expect((failure as Error).message).toMatch(/granted a session timeout of 40000 ms for the 4000 ms asked/);
      expect((failure as Error).message).toMatch(/raise sessionTimeoutMs to 40000 or more/);
    });
  });

  it('a negative one on re-attach: the link drops, the session is not taken as expired; it re-attaches and a held lease stays held', async () => {
    await withProxy(async (proxy) => {
      const e = await engine({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
      const sessionId = e.connection.sessionId!;
      const lease = await new Mutex(e, 'mitm', uniquePath('mitm-negative-reattach')).acquire();
      let refused = 0;
      proxy.rewriteConnectResponses((response, request) => {
        if (request.sessionId === 0n || refused >= 3) return undefined;
        refused++;
        const changed = Buffer.from(response);
        changed.writeInt32BE(-1, 4);
        return changed;
      });
      const reconnected = nextEvent(e.connection, 'reconnected', 15_000);
      proxy.restore(); // drops the link: the client re-attaches
      expect(await reconnected).toEqual([sessionId]);
      expect(refused).toBe(3);
      expect(e.connection.session!.lastLinkError).toBeUndefined();
      expect(lease.signal.aborted).toBe(false);
      expect(lease.isHeld).toBe(true);
      await lease.release();
    });
  });
});

describe.each(CLIENT_KINDS)('%s client: new sessions after a backoff', (client) => {
  it('a timeout of 0 answered to every new session: a few sessions in 4 s, not thousands; connect() fails with ZkConnectError', async () => {
    await withProxy(async (proxy) => {
      proxy.rewriteConnectResponses((response) => {
        const changed = Buffer.from(response);
        changed.writeInt32BE(0, 4);
        return changed;
      });
      const started = performance.now();
      const failure = await connect({ client, connectString: proxy.connectString, connectTimeoutMs: 4000 }).then(
        () => undefined,
        (error: unknown) => error,
      );
      const seconds = (performance.now() - started) / 1000;
      const sessions = proxy.connectRequests.newSessions;
      console.log(`${client}: ${sessions} new sessions asked in ${seconds.toFixed(1)} s with every new session granted a timeout of 0`);
      expect(failure).toBeInstanceOf(ZkConnectError);
      expect(sessions).toBeGreaterThanOrEqual(2);
      expect(sessions).toBeLessThanOrEqual(25);
    });
  });
});

describe('a new session after a real loss', () => {
  it('still comes quickly (tens of ms)', async () => {
    await withProxy(async (proxy) => {
      const connection = await connect({ connectString: proxy.connectString });
      const oldId = connection.sessionId!;
      const password = connection.session!.password;
      const suspended = nextEvent(connection, 'suspended');
      proxy.cut();
      await suspended;
      await killSession(oldId, password);
      const lost = nextEvent(connection, 'lost');
      const connected = nextEvent(connection, 'connected');
      proxy.restore();
      await lost;
      const lostAt = performance.now();
      const [newId] = await connected;
      const ms = performance.now() - lostAt;
      console.log(`a new session usable ${ms.toFixed(0)} ms after the loss`);
      expect(newId).not.toBe(oldId);
      expect(ms).toBeLessThan(2000);
    });
  });
});
