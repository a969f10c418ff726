// Interleavings of the TypeScript client (WireZkSession) that ZkConnection's safety relies on:
// replies read before a drop, a reply after abandon(), requests behind an auth whose answer never
// comes, and the xid at the end of its range. Against the real ZooKeeper (through a TcpProxy where
// the link must misbehave).
import { createHash, randomUUID } from 'node:crypto';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ZkCode, ZkError } from '../../../lib/core/client/zk-error.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import { WireZkSession } from '../../../lib/core/client/wire/session.js';
import { closeAll, connect, engine, eventually, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { recordingEvents } from '../../support/session-events.js';

const EMPTY = Buffer.alloc(0);


/** The outcome of a request: 'ok' or the code it failed with. */
function outcome(work: Promise<unknown>): Promise<string | number> {
  return work.then(
    () => 'ok',
    (error: unknown) => {
      if (error instanceof ZkError) return error.code;
      throw error;
    },
  );
}

/** Settles with `work`, or fails after `ms` (a request that never settles is a bug here). */
function within<T>(work: Promise<T>, ms: number, label: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${label}: not settled within ${ms} ms`)), ms))),
  ]);
}

/** The private parts these interleavings need to reach (no public way to get there in a test's time). */
interface WireInternals {
  nextXid: number;
  linkDown(): void;
}
const internals = (session: WireZkSession) => session as unknown as WireInternals;

const opened: WireZkSession[] = [];
function open(connectString: string, sessionTimeoutMs = 4000) {
  const events = recordingEvents();
  const session = new WireZkSession({ connectString, sessionTimeoutMs }, events);
  opened.push(session);
  return { session, events };
}

let proxies: TcpProxy[] = [];
afterEach(async () => {
  for (const session of opened.splice(0)) {
    try {
      void session.close();
    } catch {
      // reported by the test that left it so
    }
  }
  await closeAll().catch(() => undefined);
  for (const proxy of proxies) {
    proxy.forward();
    await proxy.close();
  }
  proxies = [];
});

async function proxied(): Promise<TcpProxy> {
  const proxy = await TcpProxy.start(zkConnectString());
  proxies.push(proxy);
  return proxy;
}

describe('WireZkSession interleavings', () => {
  let admin: WireZkSession;
  let base: string;

  beforeAll(async () => {
    admin = new WireZkSession({ connectString: zkConnectString(), sessionTimeoutMs: 10_000 }, recordingEvents());
    await eventually(() => admin.isConnectedNatively, 20_000, 10);
    await admin.create('/wire-interleavings', EMPTY, CreateMode.PERSISTENT).catch(() => undefined);
  });
  afterAll(() => admin.close());
  beforeEach(async () => {
    base = `/wire-interleavings/${randomUUID().slice(0, 8)}`;
    await admin.create(base, EMPTY, CreateMode.PERSISTENT);
  });

  it('replies of a dropped link still waiting for their macrotask are not delivered: the rest fail with CONNECTIONLOSS, and the new link serves', async () => {
    const { session, events } = open(zkConnectString());
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    await session.create(`${base}/n`, Buffer.from('x'), CreateMode.PERSISTENT);
    const count = 40;
    const results: (string | number)[] = [];
    let dropped = false;
    const all = Array.from({ length: count }, (_, i) =>
      outcome(session.getData(`${base}/n`)).then((result) => {
        results[i] = result;
        // The first answer's continuation runs before the next frame is handled (one per macrotask):
        // drop the link here, with the other replies read and queued on the old socket.
        if (!dropped && result === 'ok') {
          dropped = true;
          internals(session).linkDown();
        }
      }),
    );
    await within(Promise.all(all), 20_000, 'the requests of the dropped link');
    const firstFailed = results.findIndex((r) => r !== 'ok');
    expect(firstFailed).toBeGreaterThan(0);
    // Nothing answered OK after the drop: every later one failed with CONNECTIONLOSS (in order).
    expect(results.slice(firstFailed)).toEqual(Array(count - firstFailed).fill(ZkCode.CONNECTIONLOSS));
    expect(events.connecting).toBe(1);
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    expect(events.connected).toBe(2);
    await expect(session.getData(`${base}/n`)).resolves.toMatchObject({ data: Buffer.from('x') });
    expect(events.closed).toEqual([]);
  });

  it('a watch event read on a dropped link is not delivered from it: it fires once, on the new link (SetWatches), after onConnected', async () => {
    const { session, events } = open(zkConnectString());
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    await session.create(`${base}/w`, EMPTY, CreateMode.PERSISTENT);
    const fired: { type: string; connectedBefore: number }[] = [];
    await session.getData(`${base}/w`, (event) => fired.push({ type: event.type, connectedBefore: events.connected }));
    // Pipelined: exists, then our own setData. The server sends the exists answer, then the watch
    // event of the setData, then its answer; the link is dropped in the exists answer's
    // continuation, with the event read (or still to come) on the old socket.
    let dropped = false;
    const first = session.exists(base).then(() => {
      dropped = true;
      internals(session).linkDown();
    });
    const write = outcome(session.setData(`${base}/w`, Buffer.from('changed')));
    await first;
    await expect(write).resolves.toBe(ZkCode.CONNECTIONLOSS); // applied, but its answer was on the old link
    expect(dropped).toBe(true);
    expect(fired).toEqual([]); // not from the old link's queued frame
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    // The watch goes again in SetWatches with a lastZxid older than the change: it fires there.
    await eventually(() => fired.length > 0, 20_000, 10);
    await session.sync('/');
    expect(fired).toEqual([{ type: 'changed', connectedBefore: 2 }]);
  });

  it('replies read before close() and still queued settle with CLOSING, none as OK', async () => {
    const { session } = open(zkConnectString());
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    const results: (string | number)[] = [];
    let closed = false;
    const all = Array.from({ length: 30 }, (_, i) =>
      outcome(session.exists('/')).then((result) => {
        results[i] = result;
        if (!closed) {
          closed = true;
          void session.close();
        }
      }),
    );
    await within(Promise.all(all), 20_000, 'the requests around close()');
    expect(results[0]).toBe('ok');
    expect(results.slice(1)).toEqual(Array(29).fill(ZkCode.CLOSING));
  });

  it('a request too large to send fails with BADARGUMENTS on the spot; the link stays up and the next reply is matched', async () => {
    const { session, events } = open(zkConnectString());
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    const before = outcome(session.exists('/'));
    const tooLarge = outcome(session.create(`${base}/big`, Buffer.alloc(0x100000), CreateMode.PERSISTENT));
    const after = outcome(session.create(`${base}/small`, EMPTY, CreateMode.PERSISTENT));
    await expect(within(Promise.all([before, tooLarge, after]), 20_000, 'the requests')).resolves.toEqual(['ok', ZkCode.BADARGUMENTS, 'ok']);
    expect(events.connecting).toBe(0);
    expect(session.isConnectedNatively).toBe(true);
  });

  it('a reply handled after abandon() rejects with SESSIONEXPIRED, also one read before it and still queued; no watch fires', async () => {
    const { session } = open(zkConnectString());
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    await session.create(`${base}/a`, EMPTY, CreateMode.PERSISTENT);
    const fired: string[] = [];
    const results: (string | number)[] = [];
    let abandoned = false;
    const all = Array.from({ length: 30 }, (_, i) =>
      outcome(session.getData(`${base}/a`, i === 29 ? (event) => fired.push(event.type) : undefined)).then((result) => {
        results[i] = result;
        if (!abandoned) {
          abandoned = true;
          session.abandon();
        }
      }),
    );
    // And one asked after abandon(): never sent.
    await within(Promise.all(all), 20_000, 'the requests around abandon()');
    expect(results[0]).toBe('ok');
    expect(results.slice(1)).toEqual(Array(29).fill(ZkCode.SESSIONEXPIRED));
    await expect(outcome(session.sync('/'))).resolves.toBe(ZkCode.SESSIONEXPIRED);
    await admin.setData(`${base}/a`, Buffer.from('changed'));
    await admin.sync('/');
    await admin.getData(`${base}/a`);
    expect(fired).toEqual([]);
  });

  it('requests waiting behind an auth whose answer never comes fail with CONNECTIONLOSS when the link is dropped, and the session serves again after', async () => {
    const proxy = await proxied();
    const { session, events } = open(proxy.connectString, 3000);
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    proxy.blackhole();
    const auth = outcome(session.addAuth('digest', 'someone:secret'));
    const behind = [outcome(session.exists('/')), outcome(session.sync('/')), outcome(session.getChildren('/'))];
    // The read timeout (2/3 T) drops the silent link.
    await expect(within(auth, 20_000, 'the auth')).resolves.toBe(ZkCode.CONNECTIONLOSS);
    await expect(within(Promise.all(behind), 20_000, 'the requests behind the auth')).resolves.toEqual([
      ZkCode.CONNECTIONLOSS,
      ZkCode.CONNECTIONLOSS,
      ZkCode.CONNECTIONLOSS,
    ]);
    expect(events.connecting).toBe(1);
    proxy.restore();
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    await expect(within(outcome(session.exists('/')), 20_000, 'a request on the new link')).resolves.toBe('ok');
    expect(events.closed).toEqual([]);
  });

  it('the xid wraps from 0x7fffffff to 1: both requests answered in order', async () => {
    const { session } = open(zkConnectString());
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    internals(session).nextXid = 0x7ffffffe;
    const last = outcome(session.exists('/'));
    const wrapped = outcome(session.exists('/'));
    expect(internals(session).nextXid).toBe(1);
    await expect(within(Promise.all([last, wrapped]), 20_000, 'the requests around the wrap')).resolves.toEqual(['ok', 'ok']);
    expect(session.isConnectedNatively).toBe(true);
  });

  it('close() right after the request with xid 0x7fffffff ends the session and fails what waits (closeSession needs an xid too)', async () => {
    const { session } = open(zkConnectString());
    await eventually(() => session.isConnectedNatively, 20_000, 10);
    const ephemeral = `${base}/e`;
    await session.create(ephemeral, EMPTY, CreateMode.EPHEMERAL);
    internals(session).nextXid = 0x7ffffffe;
    const pending = outcome(session.exists('/')); // xid 0x7fffffff, unanswered when close() runs
    let ended: Promise<void> | undefined;
    let thrown: unknown;
    try {
      ended = session.close();
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeUndefined();
    await within(ended ?? Promise.resolve(), 10_000, 'close()');
    await expect(within(pending, 10_000, 'the request pending at close()')).resolves.toBe(ZkCode.CLOSING);
    // The server ended the session: its ephemeral node is gone.
    await expect(admin.exists(ephemeral)).resolves.toBeNull();
  });

  it('ZkConnection.close() right after the request with xid 0x7fffffff: resolves, the state is closed, a held lease is aborted before anyone else holds the lock', async () => {
    const connection = await connect();
    const path = uniquePath('xid-close');
    const lease = await new Mutex(new LockEngine(connection, { app: 'jest' }), 'xid', path).acquire();
    const session = connection.session as WireZkSession;
    await session.exists('/');
    internals(session).nextXid = 0x7fffffff; // the newest request went out with the last positive xid
    const closing = await within(connection.close().then(() => 'ok', (error: unknown) => String(error)), 10_000, 'ZkConnection.close()');
    const afterClose = { closing, state: connection.state, aborted: lease.signal.aborted };
    // Another process takes the lock once the server has let the first session go.
    const other = await engine();
    const next = await within(new Mutex(other, 'xid', path).acquire({ waitMs: 30_000 }), 40_000, 'the next holder');
    const whenNextHeld = { firstLeaseAborted: lease.signal.aborted, state: connection.state };
    await next.release();
    expect({ afterClose, whenNextHeld }).toEqual({
      afterClose: { closing: 'ok', state: 'closed', aborted: true },
      whenNextHeld: { firstLeaseAborted: true, state: 'closed' },
    });
  });
});

describe('ZkConnection on the TypeScript client: a new link with credentials', () => {
  it('a watch re-armed through onLinkUp and the confirming sync wait behind the re-sent auth: both answered as the authenticated user', async () => {
    const proxy = await proxied();
    const credentials = 'wire-user:wire-secret';
    const digestId = `wire-user:${createHash('sha1').update(credentials).digest('base64')}`;
    const connection = await connect({ connectString: proxy.connectString, auth: { scheme: 'digest', credentials } });
    const session = connection.session!;
    expect(session).toBeInstanceOf(WireZkSession);
    const path = uniquePath('wire-auth');
    await session.create(path.slice(0, path.lastIndexOf('/')), EMPTY, CreateMode.PERSISTENT).catch(() => undefined);
    await session.create(path, Buffer.from('secret'), CreateMode.PERSISTENT, [{ perms: 31, scheme: 'digest', id: digestId }]);

    proxy.cut();
    await nextEvent(connection, 'suspended', 20_000);
    // Asked while the link is down: runs when it is back, ahead of the confirming sync.
    const rearmed = new Promise<string | number>((resolve) =>
      connection.onLinkUp(session, () => void outcome(session.getData(path, () => undefined)).then(resolve)),
    );
    const reconnected = nextEvent(connection, 'reconnected', 30_000);
    proxy.restore();
    await expect(within(rearmed, 30_000, 'the re-armed read')).resolves.toBe('ok'); // not NOAUTH
    await reconnected;
    expect(connection.state).toBe('connected');
    expect(connection.session).toBe(session);
    await expect(session.getData(path)).resolves.toMatchObject({ data: Buffer.from('secret') });
    await session.delete(path);
  });
});
