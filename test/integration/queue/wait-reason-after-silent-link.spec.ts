// A wait due during a disconnection says 'connection' when nothing had been answered for its bound
// by its due time (lib/core/queue/cancellation.ts), counting what was unanswered when the link
// dropped plus the time since: seconds of silence before a drop count. The TypeScript session
// reports that before it fails the requests the drop took with it.
import { LockNotAcquiredError } from '../../../lib/core/errors.js';
import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { childrenOf, eventually, nextEvent, TEST_SERVER_TICK_MS, uniquePath, zkConnectString } from '../../support/helpers.js';
import { TcpProxy } from '../../support/tcp-proxy.js';

let proxy: TcpProxy;
const connections: ZkConnection[] = [];

beforeEach(async () => {
  proxy = await TcpProxy.start(zkConnectString());
});
afterEach(async () => {
  for (const c of connections.splice(0)) await c.close().catch(() => undefined);
  await proxy.close();
});

it('a wait due shortly after a link that had been silent for 3 s is dropped says connection, not timeout', async () => {
  const direct = new ZkConnection({ connectString: zkConnectString(), sessionTimeoutMs: 10_000, serverTickTimeMs: TEST_SERVER_TICK_MS });
  const proxied = new ZkConnection({ connectString: proxy.connectString, sessionTimeoutMs: 10_000, serverTickTimeMs: TEST_SERVER_TICK_MS });
  connections.push(direct, proxied);
  await Promise.all([direct.connect(), proxied.connect()]);
  const path = uniquePath('silent-wait');
  const holder = await new Mutex(new LockEngine(direct), 'm', path, { coalesce: false }).acquire();
  const waiting = new Mutex(new LockEngine(proxied), 'm', path, { coalesce: false }).acquire({ waitMs: 4000 });
  const outcome = waiting.then(
    () => 'acquired',
    (error: unknown) => (error instanceof LockNotAcquiredError ? error.reason : String(error)),
  );
  await eventually(async () => (await childrenOf(direct, path)).length === 2);
  proxy.blackhole(); // ZooKeeper stops answering the waiter (the link stays up: noticed after 2/3 T)
  await new Promise((resolve) => setTimeout(resolve, 3200)); // the fault: 3.2 s of silence...
  const suspended = nextEvent(proxied, 'suspended', 10_000);
  proxy.cut(); // ...then the link drops, under 1 s before the wait is due
  await suspended;
  const unansweredAtDown = proxied.links.unansweredAtDown;
  const reason = await outcome;
  console.log('unansweredAtDown', unansweredAtDown);
  await holder.release();
  // The heartbeats (a sync every T/20) had gone unanswered for about 3 s when the link dropped.
  expect({ reason, unansweredAtDownOver2s: unansweredAtDown > 2000 }).toEqual({ reason: 'connection', unansweredAtDownOver2s: true });
}, 60_000);
