// The ZooKeeper contract against the real server through the TypeScript wire client
// (lib/core/zookeeper), each connection behind its own TcpProxy, as the C client's run does.
import { once } from 'node:events';
import { ZkConnection } from '../../lib/core/zk-connection.js';
import { wireSessionFactory } from '../../lib/core/zookeeper/session.js';
import { killSession, zkConnectString } from '../support/helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { describeZooKeeperContract, type ZooKeeperUnderTest } from './zookeeper-contract.js';

const SESSION_TIMEOUT_MS = 4000;

function suspension(connection: ZkConnection): Promise<unknown> {
  return once(connection as never, 'suspended', { signal: AbortSignal.timeout(20_000) });
}

describeZooKeeperContract('real ZooKeeper, wire client', async (): Promise<ZooKeeperUnderTest> => {
  const proxies = new Map<ZkConnection, TcpProxy>();
  return {
    reapWithinMs: 10_000,
    async connect(options = {}) {
      const proxy = await TcpProxy.start(zkConnectString());
      const connection = new ZkConnection({ connectString: proxy.connectString, sessionTimeoutMs: SESSION_TIMEOUT_MS, ...options }, wireSessionFactory);
      proxies.set(connection, proxy);
      await connection.connect();
      return connection;
    },
    async expire(connection) {
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
});
