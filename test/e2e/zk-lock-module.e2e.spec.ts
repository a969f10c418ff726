import { Controller, Injectable, Module, Param, Post, type INestApplication, type INestApplicationContext } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { Test } from '@nestjs/testing';
import { InvalidOptionError, LockUsageError, ZkConnectError } from '../../lib/core/errors.js';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import type { ZkLockModuleOptions, ZkLockOptionsFactory } from '../../lib/nest/zk-lock-module-options.interface.js';
import { LockContext } from '../../lib/core/leases/lock-context.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { childrenOf, closeAll, connect, engine, zkConnectString } from '../support/helpers.js';
import { delay } from '../support/lock-test-helpers.js';
import { fourLetter } from '../support/zk-server.js';

async function boot(imports: unknown[]): Promise<INestApplicationContext> {
  const moduleRef = await Test.createTestingModule({ imports: imports as never[] }).compile();
  moduleRef.useLogger(false);
  return moduleRef.init();
}

/** The sessions the server has open connections for (4lw `cons`). */
async function serverSessions(): Promise<string> {
  const port = Number(zkConnectString().split(',')[0]!.split(':')[1]);
  return fourLetter(port, 'cons');
}

afterAll(closeAll);

/** An HTTP app with the module and `controller`, listening on a free loopback port. */
async function listen(controller: new (...args: never[]) => unknown): Promise<{ app: INestApplication; url: string }> {
  const moduleRef = await Test.createTestingModule({
    imports: [ZkLockModule.forRoot({ connectString: zkConnectString() })],
    controllers: [controller],
  }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.listen(0, '127.0.0.1');
  return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
}

/** `inside` resolves once a handler called `entered()`; the handler waits for `gate` until `letGo()`. */
function handlerGate() {
  let entered!: () => void;
  const inside = new Promise<void>((resolve) => (entered = resolve));
  let letGo!: () => void;
  const gate = new Promise<void>((resolve) => (letGo = resolve));
  return { entered, inside, letGo, gate };
}

describe('ZkLockModule', () => {
  it('boots with forRoot, injects LockService and reports the connection state', async () => {
    const app = await boot([ZkLockModule.forRoot({ connectString: zkConnectString(), app: 'e2e' })]);
    const locks = app.get(LockService);
    const connection = app.get(ZkConnection);
    expect(connection.state).toBe('connected');
    expect(locks.state).toBe('connected');
    expect(connection.sessionId).toMatch(/^[0-9a-f]+$/);
    const path = await locks.withLock('e2e-forroot', (lease) => lease.path);
    expect(path).toMatch(/^\/locks\/e2e-forroot\/_c_/);
    await app.close();
    expect(connection.state).toBe('closed');
  });

  it('boots with forRootAsync from ConfigService', async () => {
    const app = await boot([
      ZkLockModule.forRootAsync({
        imports: [ConfigModule.forRoot({ ignoreEnvFile: true, load: [() => ({ zk: { connect: zkConnectString(), base: '/e2e-config' } })] })],
        inject: [ConfigService],
        useFactory: (config: ConfigService): ZkLockModuleOptions => ({
          connectString: config.getOrThrow<string>('zk.connect'),
          basePath: config.getOrThrow<string>('zk.base'),
          sessionTimeoutMs: 5000,
        }),
      }),
    ]);
    const locks = app.get(LockService);
    expect(locks.pathOf('job')).toBe('/e2e-config/job');
    await expect(locks.withLock('job', () => 'ran')).resolves.toBe('ran');
    await app.close();
  });

  it('boots with forRootAsync useClass, and isGlobal makes LockService injectable everywhere', async () => {
    @Injectable()
    class Options implements ZkLockOptionsFactory {
      createZkLockOptions(): ZkLockModuleOptions {
        return { connectString: zkConnectString() };
      }
    }
    @Injectable()
    class Billing {
      constructor(readonly locks: LockService) {}
    }
    @Module({ providers: [Billing] })
    class BillingModule {}

    const app = await boot([ZkLockModule.forRootAsync({ useClass: Options, isGlobal: true }), BillingModule]);
    expect(app.get(Billing).locks).toBeInstanceOf(LockService);
    await app.close();
  });

  it('is global by default: forRoot in the root module, @WithLock and LockService in a feature module that does not import it', async () => {
    @Injectable()
    class Seats {
      constructor(readonly locks: LockService) {}
      @WithLock('module-global-seat')
      async take(): Promise<string> {
        return LockContext.current()!.path;
      }
    }
    @Module({ providers: [Seats] })
    class SeatsModule {}

    const app = await boot([ZkLockModule.forRoot({ connectString: zkConnectString() }), SeatsModule]);
    await expect(app.get(Seats).take()).resolves.toMatch(/^\/locks\/module-global-seat\/_c_/);
    await app.close();
  });

  it('with isGlobal: false, a feature module that cannot see it fails the bootstrap saying what to add', async () => {
    @Injectable()
    class Seats {
      @WithLock('module-local-seat')
      async take(): Promise<void> {}
    }
    @Module({ providers: [Seats] })
    class SeatsModule {}

    const error = await boot([ZkLockModule.forRoot({ connectString: zkConnectString(), isGlobal: false }), SeatsModule]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockUsageError);
    expect((error as Error).message).toContain('@WithLock on Seats.take: SeatsModule cannot see LockService (ZkLockModule was registered with isGlobal: false');
    expect((error as Error).message).toContain('or leave ZkLockModule global (the default)');
  });

  it('fails the bootstrap within connectTimeoutMs when nothing listens, naming the connect string', async () => {
    const started = Date.now();
    const error = await boot([ZkLockModule.forRoot({ connectString: '127.0.0.1:1', connectTimeoutMs: 1500 })]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ZkConnectError);
    expect((error as ZkConnectError).reason).toBe('unreachable');
    expect((error as Error).message).toContain('127.0.0.1:1');
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it.each([
    [{ connectString: '' }, 'connectString'],
    [{ connectString: '127.0.0.1:2181', sessionTimeoutMs: -5 }, 'sessionTimeoutMs'],
    [{ connectString: '127.0.0.1:2181', chroot: 'no-slash' }, 'chroot'],
    [{ connectString: '127.0.0.1:2181', basePath: 'locks' }, 'basePath'],
  ])('rejects invalid options %j at bootstrap, naming %s', async (options, option) => {
    const error = await boot([ZkLockModule.forRoot(options as ZkLockModuleOptions)]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as InvalidOptionError).option).toBe(option);
  });

  it('on shutdown ends locks still held after shutdownGraceMs (their signals abort first), then closes its session', async () => {
    const app = await boot([ZkLockModule.forRoot({ connectString: zkConnectString(), shutdownGraceMs: 200 })]);
    const locks = app.get(LockService);
    const sessionId = app.get(ZkConnection).sessionId!;
    const lease = await locks.mutex('e2e-shutdown').acquire();
    const observer = await connect();
    expect(await childrenOf(observer, '/locks/e2e-shutdown')).toHaveLength(1);
    expect(await serverSessions()).toContain(`sid=0x${sessionId}`);

    await app.close();
    expect(lease.isHeld).toBe(false);
    expect(lease.signal.reason).toMatchObject({ name: 'LockLostError', reason: 'shutdown' });
    expect(await childrenOf(observer, '/locks/e2e-shutdown')).toEqual([]);
    expect(await serverSessions()).not.toContain(`sid=0x${sessionId}`);
  });

  it('does not close a connection it was handed', async () => {
    const connection = await connect();
    const app = await boot([ZkLockModule.forRoot({ connection })]);
    await expect(app.get(LockService).withLock('e2e-external', () => 1)).resolves.toBe(1);
    await app.close();
    expect(connection.state).toBe('connected');
  });

  it('refuses acquires once shutdown began, with a typed error', async () => {
    const app = await boot([ZkLockModule.forRoot({ connectString: zkConnectString(), shutdownGraceMs: 100 })]);
    const locks = app.get(LockService);
    const holder = await locks.mutex('e2e-closing').acquire();
    const waiter = locks.mutex('e2e-closing').acquire({ waitMs: 30_000 });
    const closing = app.close();
    await expect(waiter).rejects.toMatchObject({ name: 'LockNotAcquiredError', reason: 'connection' });
    await closing;
    expect(holder.isHeld).toBe(false);
  });

  it('app.close() with an HTTP request inside its critical section: the request finishes holding the lock, nobody else takes it meanwhile', async () => {
    const { entered, inside, letGo, gate } = handlerGate();
    @Controller('orders')
    class OrdersController {
      @Post(':id')
      @WithLock('e2e-close-order-{0}', { waitMs: 5000 })
      async place(@Param('id') _id: string): Promise<{ fencingToken: string }> {
        entered();
        await gate;
        return { fencingToken: String(LockContext.current()!.fencingToken) };
      }
    }
    const { app, url } = await listen(OrdersController);
    const otherEngine = await engine();
    const other = new LockService(otherEngine, otherEngine.connection);

    const response = fetch(`${url}/orders/7`, { method: 'POST' });
    await inside;
    const closing = app.close();
    await delay(300);
    // The instance is shutting down, but its request is still in its critical section.
    expect(await other.mutex('e2e-close-order-7').tryAcquire()).toBeNull();
    letGo();
    const answer = await response;
    expect(answer.status).toBe(201);
    await closing;
    const next = await other.mutex('e2e-close-order-7').tryAcquire();
    expect(next).not.toBeNull();
    expect(next!.fencingToken).toBeGreaterThan(BigInt(((await answer.json()) as { fencingToken: string }).fencingToken));
    await next!.release();
  });

  it('app.close() lets a request in flight take a lock after close began: lock shutdown waits for the HTTP server to close', async () => {
    const { entered, inside, letGo, gate } = handlerGate();
    @Controller('late')
    class LateController {
      constructor(private readonly locks: LockService) {}
      @Post()
      async lockLate(): Promise<string> {
        entered();
        await gate; // e.g. validation or a remote call before the critical section
        return this.locks.withLock('e2e-close-late', (lease) => lease.path);
      }
    }
    const { app, url } = await listen(LateController);
    const response = fetch(`${url}/late`, { method: 'POST' });
    await inside;
    const closing = app.close();
    await delay(200);
    letGo();
    const answer = await response;
    expect({ status: answer.status, body: await answer.text() }).toEqual({ status: 201, body: expect.stringMatching(/^\/locks\/e2e-close-late\/_c_/) });
    await closing;
  });
});
