import { Injectable, Module, type INestApplicationContext, type LoggerService } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { LockNotAcquiredError } from '../../lib/core/errors.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { closeAll, connect, engine, nextEvent, zkConnectString } from '../support/helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';

// An outage is not contention: a wait that ends while ZooKeeper is unreachable rejects with reason
// 'connection' (503 through the filter), and a skipped job says ZooKeeper was unavailable.
const basePath = `/e2e-outage-${process.pid}`;

@Injectable()
class Reports {
  @WithLock('outage-report', { waitMs: 1_500 })
  async build(): Promise<string> {
    return 'built';
  }

  @Cron('0 0 * * * *')
  @WithLock('outage-job')
  async nightly(): Promise<string> {
    return 'ran';
  }
}

const logged: string[] = [];
const logger: LoggerService = {
  log: (m: unknown) => logged.push(`log ${String(m)}`),
  warn: (m: unknown) => logged.push(`warn ${String(m)}`),
  error: (m: unknown) => logged.push(`error ${String(m)}`),
  debug: (m: unknown) => logged.push(`debug ${String(m)}`),
  verbose: () => undefined,
};

describe('@WithLock during a ZooKeeper outage', () => {
  let proxy: TcpProxy;
  let connection: ZkConnection;
  let app: INestApplicationContext;

  beforeAll(async () => {
    proxy = await TcpProxy.start(zkConnectString());
    connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 });
    @Module({ imports: [ZkLockModule.forRoot({ connection, basePath })], providers: [Reports] })
    class AppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    moduleRef.useLogger(logger);
    app = await moduleRef.init();
  });
  afterAll(async () => {
    await app?.close();
    await proxy?.close();
    await closeAll();
  });

  it('a wait that ends while the link is down rejects with reason connection, not timeout', async () => {
    // Contended first: another client holds the lock, so the call waits; then the link goes down.
    const held = await new Mutex(await engine(), 'outage-report', `${basePath}/outage-report`).acquire();
    const call = app.get(Reports).build().catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const suspended = nextEvent(connection, 'suspended');
    proxy.cut();
    await suspended;
    const error = await call;
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    expect((error as LockNotAcquiredError).reason).toBe('connection');
    await held.release();
    const reconnected = nextEvent(connection, 'reconnected');
    proxy.restore();
    await reconnected;
    await expect(app.get(Reports).build()).resolves.toBe('built');
  });

  it('a wait over a link that went silent (the client still says connected) rejects with reason connection', async () => {
    proxy.blackhole();
    const error = await app.get(Reports).build().catch((e: unknown) => e);
    expect(connection.state).toBe('connected'); // the client has not noticed yet
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    expect((error as LockNotAcquiredError).reason).toBe('connection');
    const reconnected = nextEvent(connection, 'reconnected');
    proxy.restore();
    await reconnected;
    await expect(app.get(Reports).build()).resolves.toBe('built');
  });

  it('a job skipped because ZooKeeper is unreachable says so (a warning), not "held elsewhere"', async () => {
    const suspended = nextEvent(connection, 'suspended');
    proxy.cut();
    await suspended;
    logged.length = 0;
    await expect(app.get(Reports).nightly()).resolves.toBeUndefined();
    expect(logged.filter((line) => line.includes('Reports.nightly'))).toEqual([expect.stringMatching(/^warn Reports\.nightly: ZooKeeper is unavailable .*skipped this run/)]);
    const reconnected = nextEvent(connection, 'reconnected');
    proxy.restore();
    await reconnected;
    await expect(app.get(Reports).nightly()).resolves.toBe('ran');
  });
});
