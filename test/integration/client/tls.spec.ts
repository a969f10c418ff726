// TLS to a real ZooKeeper (Debian's 3.8, scripts/zookeeper.sh --tls): its secureClientPort on the
// Netty connection factory, with a throw-away CA and certificates made for this run. The default
// session (WireZkSession) speaks TLS from the first byte when ZkConnection gets `tls`.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { checkServerIdentity } from 'node:tls';
import { createServer } from 'node:net';
import { InvalidOptionError, ZkConnectError } from '../../../lib/core/errors.js';
import { main } from '../../../lib/cli.js';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import type { ZkConnectionOptions } from '../../../lib/core/connection/connection-options.js';
import { closeAll, connect, eventually, nextEvent, uniquePath } from '../../support/helpers.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { startStandalone, type ZkServerHandle } from '../../support/zk-server.js';

/** A client that must never connect gives up after this long (connect() rejects then). */
const REFUSED_CONNECT_TIMEOUT_MS = 3000;
/** A client whose certificate check fails everywhere: it must not wait out this connectTimeoutMs... */
const CERTIFICATE_CONNECT_TIMEOUT_MS = 15_000;
/** ...but fail within this (generous: a loaded machine; a handshake takes tens of ms). */
const CERTIFICATE_REFUSED_WITHIN_MS = 5000;
/** Room for the probe (from 2 s on, about 1.5 s) to look at a port that speaks the other protocol. */
const OTHER_PROTOCOL_CONNECT_TIMEOUT_MS = 6000;

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
  return { error, elapsedMs, connected, state: connection.state, failure: connection.failure };
}

/**
 * refusedConnect with the default-like connectTimeoutMs, for a certificate refused by every server:
 * ZkConnectError with reason tls, well before connectTimeoutMs.
 */
async function certificateRefused(options: Partial<ZkConnectionOptions> & Pick<ZkConnectionOptions, 'connectString'>) {
  const result = await refusedConnect({ connectTimeoutMs: CERTIFICATE_CONNECT_TIMEOUT_MS, ...options });
  expect(result.error).toBeInstanceOf(ZkConnectError);
  expect(result.error).toMatchObject({ reason: 'tls' });
  expect(String(result.error)).toMatch(/\(tls\): no server passed the TLS handshake, for a certificate reason that retrying does not mend: /);
  expect(result.elapsedMs).toBeLessThan(CERTIFICATE_REFUSED_WITHIN_MS);
  expect(result.connected).toBe(0);
  expect(result.state).toBe('closed');
  expect(result.failure).toBe(result.error); // what a health check reports
  return result;
}

/** A loopback port nothing listens on (connections to it are refused). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
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

  it('fails at once, with reason tls, without a client certificate when the server needs one (not after connectTimeoutMs)', async () => {
    const { ca } = need.tls;
    const refusals = serverLogCount(need, 'Empty client certificate chain');
    const result = await certificateRefused({ connectString: need.secureConnectString, tls: { ca } });
    // the server refused the handshake for want of a certificate (its log line may come after the client gave up)
    await eventually(() => serverLogCount(need, 'Empty client certificate chain') > refusals, 30_000);
    expect(String(result.error)).toMatch(/\(tls\): .*localhost:\d+: TLS handshake failed: the server requires a client certificate .*: give one as tls.cert and tls.key/);
  });

  it('fails at once, with reason tls, when the server refuses the client certificate (signed by a CA it does not trust)', async () => {
    const { ca } = need.tls;
    // otherName's client certificate: signed by its own throw-away CA, which need does not trust
    const { cert, key } = otherName.tls;
    const result = await certificateRefused({ connectString: need.secureConnectString, tls: { ca, cert, key } });
    expect(String(result.error)).toMatch(/localhost:\d+: TLS handshake failed: the server refused our client certificate/);
  });

  it('fails at once, with reason tls, for a server whose certificate the given CA did not sign', async () => {
    // otherName's CA is another throw-away CA: it did not sign need's server certificate
    const { cert, key } = need.tls;
    const result = await certificateRefused({ connectString: need.secureConnectString, tls: { ca: otherName.tls.ca, cert, key } });
    // the error says why, which a plain TCP probe of the port cannot
    expect(String(result.error)).toMatch(/localhost:\d+: TLS handshake failed: the server's certificate is not trusted \(.*certificate.*\): give the CA that signed it as tls.ca/);
  });

  it('fails at once, with reason tls, for a server without any CA given (the system roots do not know the throw-away CA)', async () => {
    const { cert, key } = need.tls;
    const result = await certificateRefused({ connectString: need.secureConnectString, tls: { cert, key } });
    expect(String(result.error)).toMatch(/the server's certificate is not trusted/);
  });

  it('keeps retrying until connectTimeoutMs when not every server refused a certificate (one is down), naming the TLS failure', async () => {
    const down = await closedPort();
    const { cert, key } = need.tls;
    const result = await refusedConnect({ connectString: `${need.secureConnectString},127.0.0.1:${down}`, tls: { ca: otherName.tls.ca, cert, key } });
    expect(result.error).toMatchObject({ reason: 'unreachable' });
    expect(result.elapsedMs).toBeGreaterThanOrEqual(REFUSED_CONNECT_TIMEOUT_MS - 50);
    expect(String(result.error)).toMatch(new RegExp(`127.0.0.1:${down}: connection refused`));
    expect(String(result.error)).toMatch(/localhost:\d+: TLS handshake failed: the server's certificate is not trusted/);
  });

  it('in the background, keeps retrying a certificate that does not verify, and says why', async () => {
    const { cert, key } = need.tls;
    const connection = new ZkConnection({ connectString: need.secureConnectString, sessionTimeoutMs: 4000, connectTimeoutMs: 3000, tls: { ca: otherName.tls.ca, cert, key } });
    try {
      const unreachable = nextEvent(connection, 'unreachable', 30_000);
      connection.connectInBackground();
      const [problems] = await unreachable;
      expect(problems.join('; ')).toMatch(/localhost:\d+: TLS handshake failed: the server's certificate is not trusted/);
      expect(connection.state).toBe('connecting');
    } finally {
      await connection.close();
    }
  });

  describe('a port that speaks the other protocol', () => {
    it('a TLS client at the plain clientPort: reason tls, "does not speak TLS (is it the clientPort ...?)"', async () => {
      const { ca, cert, key } = need.tls;
      const result = await refusedConnect({ connectString: need.connectString, tls: { ca, cert, key }, connectTimeoutMs: OTHER_PROTOCOL_CONNECT_TIMEOUT_MS });
      expect(result.error).toBeInstanceOf(ZkConnectError);
      expect(result.error).toMatchObject({ reason: 'tls' });
      expect(String(result.error)).toContain(`${need.connectString}: does not speak TLS (is it the clientPort rather than the secureClientPort?)`);
    });

    it('a plain client at the secureClientPort: reason tls, "may be a TLS port: pass the `tls` option"', async () => {
      // need answers a handshake without a client certificate with an alert, otherName completes it
      const results = await Promise.all([need, otherName].map((server) => refusedConnect({ connectString: server.secureConnectString, connectTimeoutMs: OTHER_PROTOCOL_CONNECT_TIMEOUT_MS })));
      for (const [i, server] of [need, otherName].entries()) {
        const { error } = results[i]!;
        expect(error).toBeInstanceOf(ZkConnectError);
        expect(error).toMatchObject({ reason: 'tls' });
        expect(String(error)).toContain(`${server.secureConnectString}: closed the connection on our session request and answers TLS: it may be a TLS port (secureClientPort): pass the \`tls\` option`);
      }
    });
  });

  describe('the CLI says the same in terms of its --tls-* flags', () => {
    /** Runs the CLI; resolves with its exit code, what it wrote to stderr and how long it took. */
    async function runCli(args: string[]) {
      let stderr = '';
      const started = performance.now();
      const code = await main(args, {}, { out: () => undefined, err: (text) => (stderr += text) });
      return { code, stderr, elapsedMs: performance.now() - started };
    }
    const file = (server: ZkServerHandle, name: string) => join(server.dir, 'tls', name);

    it('a CA that did not sign the server certificate: exit 2 at once, "give the CA that signed it as --tls-ca"', async () => {
      const args = ['locks', '--connect', need.secureConnectString, '--timeout', String(CERTIFICATE_CONNECT_TIMEOUT_MS)];
      const result = await runCli([...args, '--tls-ca', file(otherName, 'ca.pem'), '--tls-cert', file(need, 'client.crt'), '--tls-key', file(need, 'client.key')]);
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(/\(tls\): .*the server's certificate is not trusted \(.*\): give the CA that signed it as --tls-ca\n/);
      expect(result.elapsedMs).toBeLessThan(CERTIFICATE_REFUSED_WITHIN_MS);
      const noCertificate = await runCli([...args, '--tls-ca', file(need, 'ca.pem')]);
      expect(noCertificate.stderr).toMatch(/the server requires a client certificate \(.*\): give one as --tls-cert and --tls-key\n/);
    });

    it('a --tls-ca file that holds no PEM certificate: exit 1, naming the flag', async () => {
      const result = await runCli(['locks', '--connect', need.secureConnectString, '--tls-ca', file(need, 'client.key')]);
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/Invalid option --tls-ca: holds no PEM certificate/);
    });
  });

  describe('a tls option Node refuses is an InvalidOptionError at construction, naming the field', () => {
    it.each([
      ['ca: {}', { ca: {} }, 'tls.ca'],
      ['ca: a file path instead of its content', { ca: '/etc/zookeeper/tls/ca.pem' }, 'tls.ca'],
      ['ca: the second of a list not PEM', () => ({ ca: [need.tls.ca, 'not a certificate'] }), 'tls.ca[1]'],
      ['cert: not PEM', () => ({ ca: need.tls.ca, cert: 'client.pem', key: need.tls.key }), 'tls.cert'],
      ['a key that does not belong to the cert', () => ({ ca: need.tls.ca, cert: need.tls.cert, key: otherName.tls.key }), 'tls'],
      ['minVersion unknown', { minVersion: 'TLSv9' }, 'tls.minVersion'],
      ['servername not a string', { servername: 5 }, 'tls.servername'],
    ])('%s', async (_label, given, option) => {
      const tls = (typeof given === 'function' ? given() : given) as ZkConnectionOptions['tls'];
      let error: unknown;
      try {
        new ZkConnection({ connectString: need.secureConnectString, tls, connectTimeoutMs: 2000 });
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(InvalidOptionError);
      expect(error).toMatchObject({ option });
      expect(String(error)).toContain(`"${option}"`);
    });
  });

  it('connects without a client certificate when the server does not want one (ssl.clientAuth=none)', async () => {
    const connection = await connect({ connectString: otherName.secureConnectString, tls: { ca: otherName.tls.ca, checkServerIdentity: () => undefined } });
    expect(connection.state).toBe('connected');
  });

  describe('host name verification', () => {
    it('refuses, by default, a certificate made out to another name than the connect string host: at once, with reason tls', async () => {
      const result = await certificateRefused({ connectString: otherName.secureConnectString, tls: { ca: otherName.tls.ca } });
      expect(String(result.error)).toMatch(
        /localhost:\d+: TLS handshake failed: the server's certificate is not made out to this host name \(.*is not in the cert's altnames: DNS:zk.other.test.*\): connect by a name it lists, or give that name as tls.servername/,
      );
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
      const result = await certificateRefused({ connectString: otherName.secureConnectString, tls: { ca: otherName.tls.ca, servername: 'zk.wrong.test' } });
      expect(String(result.error)).toMatch(/not made out to this host name/);
    });

    it('still checks the chain with checkServerIdentity switched off: a CA that did not sign the certificate is refused', async () => {
      const result = await certificateRefused({ connectString: otherName.secureConnectString, tls: { ca: need.tls.ca, checkServerIdentity: () => undefined } });
      expect(String(result.error)).toMatch(/the server's certificate is not trusted/);
    });

    it('a checkServerIdentity that refuses the certificate: at once, with reason tls, with its message', async () => {
      const refuse = () => new Error('not our ensemble');
      const result = await certificateRefused({ connectString: otherName.secureConnectString, tls: { ca: otherName.tls.ca, checkServerIdentity: refuse } });
      expect(String(result.error)).toMatch(/the server's certificate was refused \(not our ensemble\)/);
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
