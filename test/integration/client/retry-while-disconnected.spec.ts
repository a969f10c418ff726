// A caller that tries again at once when a request fails for want of a link (a loop around
// create or exists, as an application or a script writes it) must not keep the process from
// reconnecting: the failure comes in a later turn of the event loop, so socket events and timers
// run between two tries. Against the real ZooKeeper, through a proxy that cuts the link.
import { CLIENT_KINDS } from '../../../lib/core/connection/connection-options.js';
import { CreateMode } from '../../../lib/core/client/session.js';
import { ZkCode, type ZkError } from '../../../lib/core/client/zk-error.js';
import { TcpProxy } from '../../support/tcp-proxy.js';
import { closeAll, connect, nextEvent, uniquePath, zkConnectString } from '../../support/helpers.js';

afterAll(closeAll);

/** More tries than any real wait for a reconnect takes: a loop that reaches it never yielded. */
const TRIES = 2_000_000;

describe.each(CLIENT_KINDS)('%s client', (client) => {
  let proxy: TcpProxy;
  beforeEach(async () => {
    proxy = await TcpProxy.start(zkConnectString());
  });
  afterEach(async () => {
    await closeAll();
    await proxy.close();
  });

  it.each([
    ['a create (batched with other lock-node writes)', { batchable: true }],
    ['a create', undefined],
  ] as const)('%s retried at once while the link is down lets the link come back, and then succeeds', async (_, createOptions) => {
    const connection = await connect({ client, connectString: proxy.connectString, sessionTimeoutMs: 10_000 });
    const session = connection.session!;
    const parent = uniquePath('retry-at-once');
    await session.create(parent.slice(0, parent.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
    await session.create(parent, Buffer.alloc(0), CreateMode.PERSISTENT);
    const suspended = nextEvent(connection, 'suspended', 10_000);
    proxy.cut();
    await suspended;
    // The link may come back 100 ms from now: only if the event loop gets a turn for the timer.
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 10);
    const restore = setTimeout(() => proxy.restore(), 100);
    let tries = 0;
    let created: string | undefined;
    try {
      for (; tries < TRIES && created === undefined; tries++) {
        created = await session.create(`${parent}/n-`, Buffer.alloc(0), CreateMode.EPHEMERAL_SEQUENTIAL, undefined, createOptions).catch((error: ZkError) => {
          if (error.code !== ZkCode.CONNECTIONLOSS) throw error;
          return undefined;
        });
      }
    } finally {
      clearInterval(ticker);
      clearTimeout(restore);
    }
    expect({ created: created !== undefined, timersRan: ticks > 0 }).toEqual({ created: true, timersRan: true });
    expect(tries).toBeLessThan(TRIES);
  }, 60_000);
});
