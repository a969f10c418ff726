import { Injectable, Module, type INestApplicationContext, type LoggerService } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { Leadership } from '../../lib/core/recipes/leadership.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { OnlyLeader } from '../../lib/nest/only-leader.decorator.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import type { ZkLockModuleOptions } from '../../lib/nest/zk-lock-module-options.interface.js';
import { closeAll, engine, eventually, zkConnectString } from '../support/helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';

// What the module and the decorators log, read as a new user reads it: Nest's default logger
// prints every level, debug and verbose included, so whatever happens on every tick shows.

afterAll(closeAll);

const basePath = `/e2e-module-logs-${process.pid}`;

/** Every line at every level, as `<level> <message>`. */
function recordingLogger(): { logger: LoggerService; lines: string[] } {
  const lines: string[] = [];
  const line = (level: string) => (message: unknown) => void lines.push(`${level} ${String(message)}`);
  return { lines, logger: { log: line('log'), warn: line('warn'), error: line('error'), debug: line('debug'), verbose: line('verbose'), fatal: line('fatal') } };
}

async function boot(options: ZkLockModuleOptions, providers: (new (...args: never[]) => unknown)[] = []): Promise<{ app: INestApplicationContext; lines: string[] }> {
  const { logger, lines } = recordingLogger();
  @Module({ imports: [ZkLockModule.forRoot(options)], providers })
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
    .setLogger(logger) // the module connects while the testing module compiles
    .compile();
  moduleRef.useLogger(logger);
  return { app: await moduleRef.init(), lines };
}

describe('what ZkLockModule logs', () => {
  it('logs nothing, at any level, for a job skipped because another instance holds its lock or leads its election', async () => {
    @Injectable()
    class Jobs {
      runs = 0;
      @Cron('0 0 3 * * *')
      @WithLock('quiet-report')
      async report(): Promise<void> {
        this.runs++;
      }

      @Cron('0 0 4 * * *')
      @OnlyLeader('quiet-sweep')
      async sweep(): Promise<void> {
        this.runs++;
      }
    }
    // Another instance: it holds the job's lock and leads the election before this one starts
    // (a long session: a loaded machine must not end its hold while the ticks run).
    const other = await engine({ sessionTimeoutMs: 30_000 });
    const held = await new Mutex(other, 'quiet-report', `${basePath}/quiet-report`).acquire();
    const leader = new Leadership(other, 'quiet-sweep', `${basePath}/quiet-sweep`).start();
    await leader.whenLeader(AbortSignal.timeout(10_000));

    const { app, lines } = await boot({ connectString: zkConnectString(), basePath }, [Jobs]);
    try {
      const jobs = app.get(Jobs);
      lines.length = 0;
      for (let tick = 0; tick < 3; tick++) {
        await expect(jobs.report()).resolves.toBeUndefined();
        await expect(jobs.sweep()).resolves.toBeUndefined();
      }
      expect(held.isHeld && leader.isLeader).toBe(true); // the other instance held all along
      expect(jobs.runs).toBe(0);
      expect(lines).toEqual([]);
    } finally {
      await app.close();
      await held.release();
      await leader.close();
    }
  });

  it('names the server the session is linked to when it connects, disconnects and reconnects, not the whole connect string', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    // A second address nobody answers on: the connect string is not the server.
    const connectString = `${proxy.connectString},127.0.0.1:1`;
    const { app, lines } = await boot({ connectString, basePath, sessionTimeoutMs: 20_000 });
    try {
      expect(lines).toContainEqual(`log Connecting to ZooKeeper at ${connectString} (up to connectTimeoutMs, 15000 ms)`);
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^log Connected to ZooKeeper at ${proxy.connectString} \\(session 0x[0-9a-f]+\\)$`)));
      proxy.cut();
      await eventually(() => lines.some((l) => l.startsWith('warn Disconnected')), 30_000);
      expect(lines).toContainEqual(`warn Disconnected from ZooKeeper at ${proxy.connectString}; the session may still be alive`);
      proxy.restore();
      await eventually(() => lines.some((l) => l.startsWith('log Reconnected')), 30_000);
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^log Reconnected to ZooKeeper at ${proxy.connectString} \\(session 0x[0-9a-f]+\\)$`)));
    } finally {
      await app.close();
      await proxy.close();
    }
  }, 90_000);
});
