// TLS to a real ZooKeeper (Debian's 3.8, scripts/zookeeper.sh --tls): its secureClientPort on the
// Netty connection factory, with a throw-away CA and certificates made for this run. The default
// session (WireZkSession) speaks TLS from the first byte when ZkConnection gets `tls`.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkServerIdentity } from 'node:tls';
import { ZkConnectError } from '../../../lib/core/errors.js';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import type { ZkConnectionOptions } from '../../../lib/core/connection/connection-options.js';
import { closeAll, connect, nextEvent, uniquePath } from '../../support/helpers.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { startStandalone, type ZkServerHandle } from '../../support/zk-server.js';

/** A client that must never connect gives up after this long (connect() rejects then). */
const REFUSED_CONNECT_TIMEOUT_MS = 3000;

/** Server `need`: wants a client certificate signed by its CA; its certificate is for localhost and 127.0.0.1. */
let need: ZkServerHandle;
/** Server `otherName`: no client certificate wanted; its certificate is for zk.other.test only. */
let otherName: ZkServerHandle;

beforeAll(async () => {
  [need, otherName] = await Promise.all([startStandalone({ tls: 'need' }), startStandalone({ tls: 'none', tlsName: 'zk.other.test' })]);
}, 180_000);

afterEach(closeAll);

afterAll(async () => {
  await closeAll();
  await Promise.all([need?.stop(), otherName?.stop()]);
}, 60_000);

/** How often the server's log says `what` (its handshake failures say why the server refused). */
function serverLogCount(server: ZkServerHandle, what: string): number {
  return readFileSync(join(server.dir, 'log.1', 'zookeeper.out'), 'utf8').split(what).length - 1;
}

/** connect() of a connection that must not come up: resolves with its rejection, and whether it ever connected. */
async function refusedConnect(options: Partial<ZkConnectionOptions> & Pick<ZkConnectionOptions, 'connectString'>) {
  const connection = new ZkConnection({ sessionTimeoutMs: 4000, connectTimeoutMs: REFUSED_CONNECT_TIMEOUT_MS, ...options });
  let connected = 0;
  connection.on('connected', () => connected++);
  const started = performance.now();
  const error = await connection.connect().then(
    () => undefined,
    (e: unknown) => e,
  );
  const elapsedMs = performance.now() - started;
  await connection.close();
  return { error, elapsedMs, connected, state: connection.state };
}

describe('TLS to a real ZooKeeper (secureClientPort)', () => {
  it('with mutual TLS, connects, and a mutex is acquired (with a fencing token) and released', async () => {
    const { ca, cert, key } = need.tls;
    const connection = await connect({ connectString: need.secureConnectString, tls: { ca, cert, key } });
    expect(connection.state).toBe('connected');
    expect(connection.sessionId).toMatch(/^[0-9a-f]+$/);

    const engine = new LockEngine(connection, { app: 'jest' });
    const path = uniquePath('tls');
    const mutex = new Mutex(engine, 'tls', path);
    const lease = await mutex.acquire();
    expect(lease.isHeld).toBe(true);
    expect(typeof lease.fencingToken).toBe('bigint');
    expect(lease.fencingToken).toBeGreaterThan(0n);
    expect(await connection.session!.exists(lease.path)).not.toBeNull();

    // Held: a second acquire over TLS does not get it; after release the next one does, with a larger token.
    await expect(mutex.acquire({ waitMs: 0 })).rejects.toThrow();
    await lease.release();
    expect(lease.isHeld).toBe(false);
    expect(await connection.session!.exists(lease.path)).toBeNull();
    const next = await mutex.acquire({ waitMs: 0 });
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    await next.release();
  });

  it('checks the certificate against an IP address when the connect string names one', async () => {
    const { ca, cert, key } = need.tls;
    const port = need.secureConnectString.split(':')[1];
    const connection = await connect({ connectString: `127.0.0.1:${port}`, tls: { ca, cert, key } });
    expect(connection.state).toBe('connected');
  });

  it('keeps the plain client port serving next to the TLS port', async () => {
    const connection = await connect({ connectString: need.connectString });
    expect(connection.state).toBe('connected');
    // the plain client sees what a TLS client wrote: one server behind both ports
    const { ca, cert, key } = need.tls;
    const secure = await connect({ connectString: need.secureConnectString, tls: { ca, cert, key } });
    const path = `/tls-plain-${process.pid}-${Date.now()}`;
    await secure.session!.create(path, Buffer.from('over tls'), CreateMode.EPHEMERAL);
    expect((await connection.session!.getData(path)).data.toString()).toBe('over tls');
  });

  it('never connects without a client certificate when the server needs one: connect() rejects with ZkConnectError after connectTimeoutMs', async () => {
    const { ca } = need.tls;
    const refusals = serverLogCount(need, 'Empty client certificate chain');
    const result = await refusedConnect({ connectString: need.secureConnectString, tls: { ca } });
    // the server refused the handshake for want of a certificate (and the client kept trying)
    expect(serverLogCount(need, 'Empty client certificate chain')).toBeGreaterThan(refusals);
    expect(result.error).toBeInstanceOf(ZkConnectError);
    expect(result.error).toMatchObject({ reason: 'unreachable' });
    expect(result.connected).toBe(0);
    expect(result.state).toBe('closed');
    // not before the deadline, and not hanging long after it (generous: a loaded machine)
    expect(result.elapsedMs).toBeGreaterThanOrEqual(REFUSED_CONNECT_TIMEOUT_MS - 50);
    expect(result.elapsedMs).toBeLessThan(REFUSED_CONNECT_TIMEOUT_MS + 10_000);
  });

  it('refuses a server whose certificate the given CA did not sign', async () => {
    // otherName's CA is another throw-away CA: it did not sign need's server certificate
    const { cert, key } = need.tls;
    const result = await refusedConnect({ connectString: need.secureConnectString, tls: { ca: otherName.tls.ca, cert, key } });
    expect(result.error).toBeInstanceOf(ZkConnectError);
    expect(result.connected).toBe(0);
    // the error says why, which a plain TCP probe of the port cannot
    expect(String(result.error)).toMatch(/last attempt: localhost:\d+: .*certificate/i);
  });

  it('refuses a server without any CA given (the system roots do not know the throw-away CA)', async () => {
    const { cert, key } = need.tls;
    const result = await refusedConnect({ connectString: need.secureConnectString, tls: { cert, key } });
    expect(result.error).toBeInstanceOf(ZkConnectError);
    expect(result.connected).toBe(0);
  });

  it('connects without a client certificate when the server does not want one (ssl.clientAuth=none)', async () => {
    const connection = await connect({ connectString: otherName.secureConnectString, tls: { ca: otherName.tls.ca, checkServerIdentity: () => undefined } });
    expect(connection.state).toBe('connected');
  });

  describe('host name verification', () => {
    it('refuses, by default, a certificate made out to another name than the connect string host', async () => {
      const result = await refusedConnect({ connectString: otherName.secureConnectString, tls: { ca: otherName.tls.ca } });
      expect(result.error).toBeInstanceOf(ZkConnectError);
      expect(result.connected).toBe(0);
      expect(String(result.error)).toMatch(/last attempt: localhost:\d+: .*does not match certificate's altnames/);
    });

    it('accepts it when checkServerIdentity says so: switched off, or checking the name the certificate was made for', async () => {
      const { ca } = otherName.tls;
      const off = await connect({ connectString: otherName.secureConnectString, tls: { ca, checkServerIdentity: () => undefined } });
      expect(off.state).toBe('connected');
      const names: string[] = [];
      const otherNameCheck = await connect({
        connectString: otherName.secureConnectString,
        tls: {
          ca,
          checkServerIdentity: (host, cert) => {
            names.push(host);
            return checkServerIdentity('zk.other.test', cert);
          },
        },
      });
      expect(otherNameCheck.state).toBe('connected');
      expect(names.length).toBeGreaterThan(0);
    });

    it('checks the certificate against servername when one is given (as Node does), and sends it as SNI', async () => {
      const connection = await connect({ connectString: otherName.secureConnectString, tls: { ca: otherName.tls.ca, servername: 'zk.other.test' } });
      expect(connection.state).toBe('connected');
      const result = await refusedConnect({ connectString: otherName.secureConnectString, tls: { ca: otherName.tls.ca, servername: 'zk.wrong.test' } });
      expect(result.error).toBeInstanceOf(ZkConnectError);
    });

    it('still checks the chain with checkServerIdentity switched off: a CA that did not sign the certificate is refused', async () => {
      const result = await refusedConnect({ connectString: otherName.secureConnectString, tls: { ca: need.tls.ca, checkServerIdentity: () => undefined } });
      expect(result.error).toBeInstanceOf(ZkConnectError);
      expect(result.connected).toBe(0);
    });
  });

  it('re-attaches the same session over TLS after the link is cut, and a lease held across the cut stays held', async () => {
    const { ca, cert, key } = need.tls;
    // a TCP-level proxy in front of the TLS port: it carries the TLS bytes, and cut() drops them
    const proxy = await TcpProxy.start(`127.0.0.1:${need.secureConnectString.split(':')[1]}`);
    try {
      const connection = await connect({ connectString: `localhost:${proxy.port}`, tls: { ca, cert, key }, sessionTimeoutMs: 20_000 });
      const sessionId = connection.sessionId;
      const engine = new LockEngine(connection, { app: 'jest' });
      const lease = await new Mutex(engine, 'tls-reconnect', uniquePath('tls-reconnect')).acquire();

      const suspended = nextEvent(connection, 'suspended', 30_000);
      proxy.cut();
      await suspended;
      const reconnected = nextEvent(connection, 'reconnected', 30_000);
      proxy.restore();
      const [again] = await reconnected;
      expect(again).toBe(sessionId);
      expect(connection.sessionId).toBe(sessionId);
      expect(connection.state).toBe('connected');
      expect(lease.isHeld).toBe(true);
      // the session's node is still there, and it is ours
      const stat = await connection.session!.exists(lease.path);
      expect(stat).not.toBeNull();
      await lease.release();
    } finally {
      await proxy.close();
    }
  });
});
