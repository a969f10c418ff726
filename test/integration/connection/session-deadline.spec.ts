// When the session's deadline starts and what moves it, against a real ZooKeeper whose own
// session tracker (the four-letter word `dump`) says when it expired the session:
// - a new session's clock starts when the server opens it, before the client reads the answer:
//   a client that reads its ConnectResponse 1.5 s late (a stalled event loop) must count its
//   deadline from when it sent the ConnectRequest, not from the late read;
// - a re-attach may negotiate a shorter timeout (the server came back with a lower
//   maxSessionTimeout): the lost signal must move forward at once, not when the timer armed for
//   the old timeout runs.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ZkConnection, lossMarginMs } from '../../../lib/core/connection/zk-connection.js';
import { nextEvent, TEST_SERVER_TICK_MS } from '../../support/helpers.js';
import { startStandalone, type ZkServerHandle } from '../../support/zk-server.js';
import { TcpProxy } from '../../support/tcp-proxy.js';

let zk: ZkServerHandle;
let proxy: TcpProxy;
let connection: ZkConnection | undefined;

beforeEach(async () => {
  zk = await startStandalone();
  proxy = await TcpProxy.start(zk.connectString);
}, 120_000);
afterEach(async () => {
  await connection?.close().catch(() => undefined);
  connection = undefined;
  await proxy.close();
  await zk.stop();
}, 60_000);

/** Whether the server's session tracker still has `sessionId` (hex). */
async function tracked(sessionId: string): Promise<boolean> {
  const dump = await zk.fourLetter(1, 'dump');
  return dump.split('ephemeral nodes dump')[0]!.includes(`0x${sessionId}`);
}

/** performance.now() once the server no longer tracks `sessionId` (polled: a little after it expired it). */
async function expiredAt(sessionId: string, timeoutMs = 60_000): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  while (await tracked(sessionId)) {
    if (performance.now() > deadline) throw new Error(`session ${sessionId} still tracked after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return performance.now();
}

/** The moment (performance.now()) from which the connection counts the session as lost. */
function believedLossAt(c: ZkConnection): number {
  return c.sessionDeadline - lossMarginMs(c.sessionTimeoutMs);
}

it('a new session whose answer is read 1.5 s late counts its deadline from the ConnectRequest: lost before the server expires it', async () => {
  proxy.holdConnectResponses(1500);
  connection = new ZkConnection({ connectString: proxy.connectString, sessionTimeoutMs: 3000, serverTickTimeMs: TEST_SERVER_TICK_MS });
  let believed = Infinity;
  let lostAt = Infinity;
  // The server heard the ConnectRequest and nothing since: from the moment the client counts
  // itself connected, nothing it sends gets through.
  connection.on('connected', () => {
    proxy.blackhole();
    believed = believedLossAt(connection!);
  });
  connection.on('lost', () => (lostAt = performance.now()));
  await connection.connect();
  const sessionId = connection.sessionId!;
  expect(await tracked(sessionId)).toBe(true);
  const gone = await expiredAt(sessionId);
  if (lostAt === Infinity) await nextEvent(connection, 'lost', 30_000).catch(() => undefined);
  // Before the fix: counted from the read, 1.5 s after the server started the clock (believed
  // about 1.2 s after the expiry; the lost signal as late).
  expect(believed).toBeLessThan(gone);
  expect(lostAt).toBeLessThan(gone);
}, 90_000);

it('a re-attach granted a shorter timeout moves the lost signal forward at once', async () => {
  connection = new ZkConnection({ connectString: proxy.connectString, sessionTimeoutMs: 12_000, serverTickTimeMs: TEST_SERVER_TICK_MS });
  await connection.connect();
  expect(connection.sessionTimeoutMs).toBe(12_000);
  const sessionId = connection.sessionId!;
  let lostAt = Infinity;
  connection.on('lost', () => (lostAt = performance.now()));

  // A rolling change: the server comes back with maxSessionTimeout 4000.
  const config = join(zk.dir, 'server.1.cfg');
  writeFileSync(config, readFileSync(config, 'utf8').replace(/^maxSessionTimeout=.*$/m, 'maxSessionTimeout=4000'));
  const reconnected = nextEvent(connection, 'reconnected', 60_000);
  await zk.stopServer(1);
  await zk.restartServer(1);
  await reconnected;
  // Silent from here on: the server's last touch was this link's.
  proxy.blackhole();
  expect(connection.sessionTimeoutMs).toBe(4000);
  const believed = believedLossAt(connection);
  const gone = await expiredAt(sessionId);
  if (lostAt === Infinity) await nextEvent(connection, 'lost', 30_000).catch(() => undefined);
  expect(believed).toBeLessThan(gone);
  // Before the fix: the timer armed for 12 s fired about 7 s after the server expired the session.
  expect(lostAt).toBeLessThan(gone);
}, 120_000);
