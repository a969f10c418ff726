import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { ZkConnectError } from '../../../lib/core/errors.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import { ZkError } from '../../../lib/core/client/zk-error.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { closeAll, connect, killSession, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';

afterAll(closeAll);

describe('ZkConnection against a real ZooKeeper', () => {
  it('connects, reports the negotiated session and runs the typed operations', async () => {
    const connection = await connect({ sessionTimeoutMs: 5000 });
    expect(connection.state).toBe('connected');
    expect(connection.sessionId).toMatch(/^[0-9a-f]+$/);
    expect(connection.sessionTimeoutMs).toBe(5000);

    const session = connection.session!;
    const base = uniquePath('ops');
    await session.create('/it', Buffer.alloc(0), CreateMode.CONTAINER).catch(() => undefined);
    await session.create(base, Buffer.from('v1'), CreateMode.PERSISTENT);
    const child = await session.create(`${base}/n-`, Buffer.alloc(0), CreateMode.EPHEMERAL_SEQUENTIAL);
    expect(child).toMatch(/\/n-\d{10}$/);
    const { children, stat } = await session.getChildren(base);
    expect(children).toEqual([child.slice(base.length + 1)]);
    expect(stat.numChildren).toBe(1);
    expect((await session.getData(base)).data.toString()).toBe('v1');
    await session.setData(base, Buffer.from('v2'), 0);
    await expect(session.setData(base, Buffer.from('v3'), 0)).rejects.toMatchObject({ codeName: 'BADVERSION' });
    await session.sync(base);
    await expect(session.delete(base)).rejects.toMatchObject({ codeName: 'NOTEMPTY' });
    await session.delete(child);
    await session.delete(base);
    const error = await session.getData(base).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ZkError);
    expect(error).toMatchObject({ code: -101, codeName: 'NONODE', operation: 'getData', path: base });
    expect(await session.exists(base)).toBeNull();
  });

  it('fails within connectTimeoutMs with a typed error when nothing listens', async () => {
    const connection = new ZkConnection({ connectString: '127.0.0.1:1', connectTimeoutMs: 1500 });
    const started = Date.now();
    const error = await connection.connect().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ZkConnectError);
    expect(error).toMatchObject({ reason: 'unreachable', connectString: '127.0.0.1:1' });
    expect((error as Error).message).toContain('127.0.0.1:1');
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(connection.state).toBe('closed');
  });

  it('says what each server answered: a host name that does not resolve, a refused port (events from 2 s, and in the error)', async () => {
    const connection = new ZkConnection({ connectString: 'no-such-zk-host.invalid:2181,127.0.0.1:1', connectTimeoutMs: 4000 });
    const started = Date.now();
    const reported = nextEvent(connection, 'unreachable', 10_000);
    const error = await connection.connect().catch((e: unknown) => e);
    const [problems] = await reported;
    expect(problems).toEqual([expect.stringMatching(/^no-such-zk-host\.invalid:2181: host not found \(E[A-Z]+\)$/), '127.0.0.1:1: connection refused']);
    expect(error).toBeInstanceOf(ZkConnectError);
    expect((error as Error).message).toContain('no-such-zk-host.invalid:2181: host not found');
    expect((error as Error).message).toContain('127.0.0.1:1: connection refused');
    expect(Date.now() - started).toBeLessThan(8000);
  });

  it('connectInBackground() returns at once, keeps trying past connectTimeoutMs, and connects once the server is there', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    proxy.cut();
    const connection = new ZkConnection({ connectString: proxy.connectString, connectTimeoutMs: 1000 });
    try {
      connection.connectInBackground();
      expect(connection.state).toBe('connecting');
      const [problems] = await nextEvent(connection, 'unreachable', 10_000);
      // The proxy accepts and drops each connection, as a server outside its quorum does.
      expect(problems).toEqual([`${proxy.connectString}: accepts connections and closes them at once (not serving: outside its quorum?)`]);
      await new Promise((resolve) => setTimeout(resolve, 1500)); // past connectTimeoutMs: it must not give up
      expect(connection.state).toBe('connecting');
      const connected = nextEvent(connection, 'connected', 20_000);
      proxy.restore();
      await connected;
      expect(connection.state).toBe('connected');
      await expect(connection.connect()).resolves.toBeUndefined();
    } finally {
      await connection.close();
      await proxy.close();
    }
  }, 40_000);

  it('names a missing chroot, and works inside an existing one', async () => {
    const root = await connect();
    const chroot = uniquePath('chroot');
    const missing = new ZkConnection({ connectString: zkConnectString(), chroot, connectTimeoutMs: 5000 });
    await expect(missing.connect()).rejects.toMatchObject({ name: 'ZkConnectError', reason: 'chroot-missing' });

    await root.session!.create('/it', Buffer.alloc(0), CreateMode.CONTAINER).catch(() => undefined);
    await root.session!.create(chroot, Buffer.alloc(0), CreateMode.PERSISTENT);
    const inside = await connect({ chroot });
    await inside.session!.create('/x', Buffer.alloc(0), CreateMode.EPHEMERAL);
    expect(await root.session!.exists(`${chroot}/x`)).not.toBeNull();
    await inside.close();
    await root.session!.delete(chroot);
  });

  it('declares "lost" when the server expires the session, then opens a new one', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 8000 });
      const oldId = connection.sessionId!;
      const password = connection.session!.password;
      const suspended = nextEvent(connection, 'suspended');
      proxy.cut();
      await suspended;
      await killSession(oldId, password);
      const lost = nextEvent(connection, 'lost');
      const connected = nextEvent(connection, 'connected');
      proxy.restore();
      expect(await lost).toEqual(['session-expired', oldId]);
      const [newId] = await connected;
      expect(newId).not.toBe(oldId);
      expect(connection.state).toBe('connected');
    } finally {
      await proxy.close();
    }
  });

  it('declares "lost" when disconnected long enough that the server may have expired the session', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 2000 });
      const oldId = connection.sessionId!;
      const lost = nextEvent(connection, 'lost');
      const cutAt = Date.now();
      proxy.cut();
      expect(await lost).toEqual(['session-timeout', oldId]);
      // Not before a third of the timeout after the cut; not after the server's deadline.
      expect(Date.now() - cutAt).toBeGreaterThanOrEqual(2000 / 3 - 300);
      expect(Date.now() - cutAt).toBeLessThanOrEqual(2000 + 300);
      const connected = nextEvent(connection, 'connected');
      proxy.restore();
      const [newId] = await connected;
      expect(newId).not.toBe(oldId);
    } finally {
      await proxy.close();
    }
  });

  it('keeps the session through a short disconnection: suspended, then reconnected', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    try {
      const connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
      const id = connection.sessionId;
      const states: string[] = [];
      connection.on('state', (s) => states.push(s));
      const suspended = nextEvent(connection, 'suspended');
      proxy.cut();
      await suspended;
      const reconnected = nextEvent(connection, 'reconnected');
      proxy.restore();
      expect(await reconnected).toEqual([id]);
      expect(states).toEqual(['suspended', 'connected']);
    } finally {
      await proxy.close();
    }
  });
});
