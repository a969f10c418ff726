// After an outage longer than the session timeout, a restarted ZooKeeper restores every session
// from its snapshot and log with a fresh timeout: the nodes of a session that died during the
// outage stay for one more session timeout, and its locks look taken (409s, skipped jobs) while
// /health said ok. Health now reports such holders (degraded, staleHolders) for the locks this
// application used, and `nestjs-zk-lock locks --older-than` marks old holders.
import type { INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { main } from '../../lib/cli.js';
import { LockEngine } from '../../lib/core/lock-engine.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { ZkLockHealthIndicator, ZkLockHealthModule } from '../../lib/terminus/index.js';
import { eventually, nextEvent } from '../support/helpers.js';
import { startStandalone, type ZkServerHandle } from '../support/zk-server.js';

const basePath = '/stale-holders';

describe('after ZooKeeper restarts from an outage longer than the session timeout', () => {
  let zk: ZkServerHandle;
  let app: INestApplicationContext | undefined;

  beforeAll(async () => {
    zk = await startStandalone();
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await zk?.stop();
  }, 60_000);

  it('health is degraded with the holders left by sessions from before the loss, the CLI marks them, and both clear once ZooKeeper frees them', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [ZkLockModule.forRoot({ connectString: zk.connectString, sessionTimeoutMs: 4000, basePath, app: 'shop' }), ZkLockHealthModule],
    }).compile();
    moduleRef.useLogger(false);
    app = await moduleRef.init();
    const locks = app.get(LockService);
    const connection = app.get(ZkConnection);
    const health = app.get(ZkLockHealthIndicator);
    await expect(locks.withLock('orders', () => 'bought')).resolves.toBe('bought');

    // Another instance holds the lock, and dies while ZooKeeper is down.
    const other = new ZkConnection({ connectString: zk.connectString, sessionTimeoutMs: 6000 });
    await other.connect();
    const otherSession = other.sessionId!;
    await new Mutex(new LockEngine(other, { app: 'dead-instance' }), 'orders', `${basePath}/orders`).acquire();
    expect((await health.isHealthy()).zookeeper.status).toBe('up');

    const lost = nextEvent(connection, 'lost', 30_000);
    await zk.stopServer(1, 'SIGKILL');
    await other.close(); // the server is down: its session stays in the server's log
    await lost;
    const reconnected = nextEvent(connection, 'connected', 60_000);
    await zk.restartServer(1);
    await reconnected;

    // The dead instance's node is back for one more session timeout: the lock looks taken.
    await expect(locks.withLock('orders', () => 'bought', { waitMs: 0 })).rejects.toMatchObject({ reason: 'timeout' });
    const degraded = (await health.isHealthy()).zookeeper;
    expect(degraded).toMatchObject({
      status: 'degraded',
      state: 'connected',
      staleHolders: [expect.objectContaining({ lock: `${basePath}/orders`, sessionId: `0x${otherSession}`, app: 'dead-instance' })],
    });
    expect(String(degraded.message)).toContain('one session timeout after it restarted');

    let out = '';
    const code = await main(['locks', basePath, '--connect', zk.connectString, '--older-than', '1000'], {}, { out: (t) => void (out += t), err: (t) => void (out += t) });
    expect(code).toBe(0);
    expect(out).toMatch(/\/stale-holders\/orders .* 0x[0-9a-f]+ +\d+s\* /);
    expect(out).toContain('* held for more than 1s (1 holder)');
    let json = '';
    await main(['locks', basePath, '--connect', zk.connectString, '--older-than', '1000', '--json'], {}, { out: (t) => void (json += t), err: () => undefined });
    expect((JSON.parse(json) as { holders: { olderThan: boolean }[] }[])[0]!.holders[0]!.olderThan).toBe(true);

    // ZooKeeper expires the restored session within its timeout: the lock is free, health is up.
    await eventually(async () => (await health.isHealthy()).zookeeper.status === 'up', 20_000, 250);
    expect((await health.isHealthy()).zookeeper.staleHolders).toBeUndefined();
    await expect(locks.withLock('orders', () => 'bought', { waitMs: 5000 })).resolves.toBe('bought');
  }, 120_000);
});
