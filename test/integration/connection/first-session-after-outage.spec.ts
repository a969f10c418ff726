// A session that comes up after an outage longer than the session timeout is not lost the moment
// it is usable, on either client. The C client writes its ConnectRequest out of our sight, so its
// new session's deadline counts from the handle's creation, past after such an outage: the
// connection moves it with answered syncs before it counts the session usable. Ours counts from
// the ConnectRequest.
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { nextEvent, TEST_SERVER_TICK_MS, zkConnectString } from '../../support/helpers.js';
import { TcpProxy } from '../../support/tcp-proxy.js';

let proxy: TcpProxy;
let connection: ZkConnection | undefined;

beforeEach(async () => {
  proxy = await TcpProxy.start(zkConnectString());
});
afterEach(async () => {
  await connection?.close().catch(() => undefined);
  connection = undefined;
  await proxy.close();
});

it('the addon: a session that comes up after an outage longer than its timeout is not lost the moment it is usable', async () => {
  proxy.cut(); // ZooKeeper away from the start
  connection = new ZkConnection({ connectString: proxy.connectString, sessionTimeoutMs: 2000, serverTickTimeMs: TEST_SERVER_TICK_MS, client: 'addon' });
  const losses: string[] = [];
  let connectedAt = 0;
  connection.on('connected', () => (connectedAt = performance.now()));
  connection.on('lost', (reason) => losses.push(`${reason} ${Math.round(performance.now() - connectedAt)} ms after connected`));
  connection.connectInBackground();
  await new Promise((resolve) => setTimeout(resolve, 3000)); // the outage: longer than the 2 s timeout
  proxy.restore();
  await nextEvent(connection, 'connected', 30_000);
  // Healthy from here on: the server keeps the session, and so should the client (a heartbeat
  // every T/20 moves the deadline well within the next timeout).
  await new Promise((resolve) => setTimeout(resolve, 2500));
  expect(losses).toEqual([]);
}, 60_000);

it('contrast, the TypeScript client: the same outage, no loss (its deadline counts from the ConnectRequest)', async () => {
  proxy.cut();
  connection = new ZkConnection({ connectString: proxy.connectString, sessionTimeoutMs: 2000, serverTickTimeMs: TEST_SERVER_TICK_MS });
  const losses: string[] = [];
  connection.on('lost', (reason) => losses.push(reason));
  connection.connectInBackground();
  await new Promise((resolve) => setTimeout(resolve, 3000));
  proxy.restore();
  await nextEvent(connection, 'connected', 30_000);
  await new Promise((resolve) => setTimeout(resolve, 2500));
  expect(losses).toEqual([]);
}, 60_000);
