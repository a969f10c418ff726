// The same ZooKeeper contract against the real server (through a TcpProxy per connection, so a
// connection can be cut off and its session expired), with the C client and with the TypeScript
// wire client, and against the in-memory one.
import { once } from 'node:events';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import type { ZkSessionFactory } from '../../lib/core/client/session.js';
import { wireSessionFactory } from '../../lib/core/client/wire/session.js';
import { InMemoryZooKeeper } from '../../lib/testing/in-memory-zookeeper.js';
import { killSession, zkConnectString } from '../support/helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { describeZooKeeperContract, type ZooKeeperUnderTest } from './zookeeper-contract.js';

const SESSION_TIMEOUT_MS = 4000;

function suspension(connection: ZkConnection): Promise<unknown> {
  return once(connection as never, 'suspended', { signal: AbortSignal.timeout(20_000) });
}

/** The real server, each connection behind its own TcpProxy, through the sessions `openWith` opens. */
const realServer = (openWith?: ZkSessionFactory) => async (): Promise<ZooKeeperUnderTest> => {
  const proxies = new Map<ZkConnection, TcpProxy>();
  return {
    // The test server's reaper runs every second (scripts/zookeeper.sh: znode.container.checkIntervalMs).
    reapWithinMs: 10_000,
    async connect(options = {}) {
      const proxy = await TcpProxy.start(zkConnectString());
      const connection = new ZkConnection({ connectString: proxy.connectString, sessionTimeoutMs: SESSION_TIMEOUT_MS, ...options }, openWith);
      proxies.set(connection, proxy);
      await connection.connect();
      return connection;
    },
    async expire(connection) {
      // Kept off the server while a second client attaches to the session and closes it.
      const proxy = proxies.get(connection)!;
      const { id, password } = connection.session!;
      const suspended = suspension(connection);
      proxy.cut();
      await suspended;
      await killSession(id, password);
      proxy.restore();
    },
    async disconnect(connection) {
      const suspended = suspension(connection);
      proxies.get(connection)!.cut();
      await suspended;
    },
    reconnect(connection) {
      proxies.get(connection)!.restore();
    },
    async close() {
      await Promise.all([...proxies.keys()].map((c) => c.close()));
      await Promise.all([...proxies.values()].map((p) => p.close()));
    },
  };
};

describeZooKeeperContract('real ZooKeeper', realServer()); // the C client (the default session)
describeZooKeeperContract('real ZooKeeper, wire client', realServer(wireSessionFactory)); // lib/core/client/wire

describeZooKeeperContract('InMemoryZooKeeper', async (): Promise<ZooKeeperUnderTest> => {
  const server = new InMemoryZooKeeper();
  const opened: ZkConnection[] = [];
  return {
    reapWithinMs: 1000,
    async connect(options = {}) {
      const connection = new ZkConnection({ connectString: 'in-memory:2181', sessionTimeoutMs: SESSION_TIMEOUT_MS, ...options }, server.sessionFactory());
      opened.push(connection);
      await connection.connect();
      return connection;
    },
    async expire(connection) {
      server.expire(connection.sessionId!);
    },
    async disconnect(connection) {
      const suspended = suspension(connection);
      server.disconnect(connection.sessionId!);
      await suspended;
    },
    reconnect(connection) {
      server.reconnect(connection.sessionId!);
    },
    async close() {
      await Promise.all(opened.map((c) => c.close()));
    },
  };
});
