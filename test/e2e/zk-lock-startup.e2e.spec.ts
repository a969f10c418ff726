import { Controller, Get, Injectable, Module, type INestApplication, type LoggerService } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { Cron } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { SessionWaitAbortedError, ZkConnectError } from '../../lib/core/errors.js';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockExceptionFilter } from '../../lib/nest/zk-lock-exception.filter.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import type { ZkLockModuleOptions } from '../../lib/nest/zk-lock-module-options.interface.js';
import { eventually, zkConnectString } from '../support/helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';

// Startup says what it is doing, and a service that must start while ZooKeeper is down can.

function capturingLogger(): { logger: LoggerService; lines: string[] } {
  const lines: string[] = [];
  const line = (level: string) => (message: unknown) => void lines.push(`${level} ${String(message)}`);
  return { lines, logger: { log: line('log'), warn: line('warn'), error: line('error'), debug: () => undefined, verbose: () => undefined } };
}

@Controller('seats')
class SeatsController {
  @Get('take')
  @WithLock('startup-seat', { waitMs: 200 })
  async take(): Promise<string> {
    return 'taken';
  }
}

@Injectable()
class NightlyJob {
  runs = 0;
  @WithLock('startup-job')
  @Cron('0 0 3 * * *')
  async run(): Promise<void> {
    this.runs++;
  }
}

async function httpApp(options: ZkLockModuleOptions, logger: LoggerService): Promise<{ app: INestApplication; url: string }> {
  const moduleRef = await Test.createTestingModule({
    imports: [ZkLockModule.forRoot(options)],
    controllers: [SeatsController],
    providers: [NightlyJob, { provide: APP_FILTER, useClass: ZkLockExceptionFilter }],
  })
    .setLogger(logger) // the module connects while the testing module compiles
    .compile();
  const app = moduleRef.createNestApplication({ logger });
  await app.listen(0, '127.0.0.1');
  return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
}

describe('ZkLockModule at startup', () => {
  it('says where it connects, reports an unresolvable host within seconds, and fails the bootstrap naming it', async () => {
    const { logger, lines } = capturingLogger();
    const started = Date.now();
    const error = await httpApp({ connectString: 'no-such-zk-host.invalid:2181', connectTimeoutMs: 4000 }, logger).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ZkConnectError);
    expect((error as Error).message).toMatch(/no-such-zk-host\.invalid:2181: host not found \(E[A-Z]+\)/);
    expect(lines).toContainEqual('log Connecting to ZooKeeper at no-such-zk-host.invalid:2181 (up to connectTimeoutMs, 4000 ms)');
    expect(lines).toContainEqual(expect.stringMatching(/^warn Still connecting to ZooKeeper after 2 s, retrying: no-such-zk-host\.invalid:2181: host not found/));
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  describe('with waitForConnection: false, while ZooKeeper is unreachable', () => {
    let proxy: TcpProxy;
    let app: INestApplication | undefined;
    beforeAll(async () => {
      proxy = await TcpProxy.start(zkConnectString());
    });
    afterAll(async () => {
      await app?.close();
      await proxy.close();
    });

    it('boots at once, answers 503 (jobs skip with a warning) until connected, then locks', async () => {
      proxy.cut();
      const { logger, lines } = capturingLogger();
      const started = await httpApp({ connectString: proxy.connectString, connectTimeoutMs: 1000, waitForConnection: false }, logger);
      app = started.app;
      // Booted without the session: the link is cut, so waiting for it would have failed the boot
      // (ZkConnectError after connectTimeoutMs). No clock bound: a loaded machine boots slowly.
      expect(app.get(ZkConnection).state).toBe('connecting');
      // Each call waits its waitMs for the session (the seat 200 ms), as the line says, then fails.
      expect(lines).toContainEqual(
        `log Connecting to ZooKeeper at ${proxy.connectString} in the background (waitForConnection: false); ` +
          "until connected, each lock call waits up to its waitMs for the session, then fails with reason 'connection'",
      );

      const refused = await fetch(`${started.url}/seats/take`);
      expect(refused.status).toBe(503);
      expect(refused.headers.get('retry-after')).toBe('5');
      const job = app.get(NightlyJob);
      await job.run();
      expect(job.runs).toBe(0);
      expect(lines).toContainEqual(expect.stringMatching(/^warn NightlyJob\.run: ZooKeeper is unavailable .*; skipped this run$/));

      // inspect() waits for a connection; a signal bounds that, and says so with a typed error.
      const locks = app.get(LockService);
      for (const inspecting of [locks.inspect({ signal: AbortSignal.timeout(300) }), locks.inspect('startup-seat', { signal: AbortSignal.timeout(300) })]) {
        const error = await inspecting.catch((e: unknown) => e);
        expect(error).toBeInstanceOf(SessionWaitAbortedError);
        expect(error).toMatchObject({ timedOut: true, cause: { name: 'TimeoutError' } });
      }

      // Past connectTimeoutMs it still tries, and says why it cannot connect.
      await eventually(() => lines.some((l) => l.startsWith('warn Still connecting to ZooKeeper after')), 15_000);
      proxy.restore();
      await eventually(() => app!.get(ZkConnection).state === 'connected', 30_000);
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^log Connected to ZooKeeper at ${proxy.connectString} \\(session 0x`)));
      const served = await fetch(`${started.url}/seats/take`);
      expect(served.status).toBe(200);
      expect(await served.text()).toBe('taken');
      await job.run();
      expect(job.runs).toBe(1);
    }, 60_000);
  });

  it('gives a connection passed in that is still connecting (in the background) connectTimeoutMs, and refuses a closed one', async () => {
    const { logger } = capturingLogger();
    const connecting = new ZkConnection({ connectString: '127.0.0.1:1', connectTimeoutMs: 1000 });
    connecting.connectInBackground();
    try {
      const started = Date.now();
      const error = await httpApp({ connection: connecting }, logger).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ZkConnectError);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      await connecting.close();
    }
    await expect(httpApp({ connection: connecting }, logger)).rejects.toMatchObject({ name: 'InvalidOptionError', option: 'connection' });
  });

  it('passes maxReplyBytes to its connection, and refuses a bad one before connecting', async () => {
    const { logger } = capturingLogger();
    const { app } = await httpApp({ connectString: zkConnectString(), maxReplyBytes: 64 * 1024 * 1024 }, logger);
    try {
      expect(app.get(ZkConnection).options.maxReplyBytes).toBe(64 * 1024 * 1024);
    } finally {
      await app.close();
    }
    await expect(httpApp({ connectString: zkConnectString(), maxReplyBytes: 1000 }, logger)).rejects.toMatchObject({ name: 'InvalidOptionError', option: 'maxReplyBytes' });
  });

  it('rejects a waitForConnection that is not a boolean before connecting', async () => {
    const { logger } = capturingLogger();
    const options = { connectString: zkConnectString(), waitForConnection: 'no' } as unknown as ZkLockModuleOptions;
    await expect(httpApp(options, logger)).rejects.toMatchObject({ name: 'InvalidOptionError', option: 'waitForConnection' });
  });
});
