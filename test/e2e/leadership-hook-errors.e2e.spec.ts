import { randomUUID } from 'node:crypto';
import { Injectable, Module, type DynamicModule, type INestApplication, type LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { LeaderElections } from '../../lib/nest/leader-elections.js';
import { OnLeadershipGained, OnLeadershipLost } from '../../lib/nest/only-leader.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { eventually, zkConnectString } from '../support/helpers.js';

// A @OnLeadershipGained/@OnLeadershipLost hook that throws is reported as docs/leader-election.md says, as a
// ZkLockWarning (ZkLockModule logs those as warnings, under its own name), not as an error, and the
// election goes on.

class CapturedLog implements LoggerService {
  readonly lines: { level: string; message: string }[] = [];
  log = (message: unknown) => void this.lines.push({ level: 'log', message: String(message) });
  error = (message: unknown) => void this.lines.push({ level: 'error', message: String(message) });
  warn = (message: unknown) => void this.lines.push({ level: 'warn', message: String(message) });
  debug = () => undefined;
  verbose = () => undefined;
  about(text: string): { level: string; message: string }[] {
    return this.lines.filter((l) => l.message.includes(text));
  }
}

function failingHooks(election: string) {
  @Injectable()
  class FailingHooks {
    @OnLeadershipGained(election)
    async warmUp(): Promise<void> {
      throw new Error('warm-up broke');
    }

    @OnLeadershipLost(election)
    coolDown(): void {
      throw new Error('cool-down broke');
    }
  }
  return FailingHooks;
}

async function boot(lockModule: DynamicModule, election: string, logger: LoggerService): Promise<INestApplication> {
  @Module({ imports: [lockModule], providers: [failingHooks(election)] })
  class AppModule {}
  const app = (await Test.createTestingModule({ imports: [AppModule] }).compile()).createNestApplication({ logger });
  await app.init();
  return app;
}

describe('a leadership hook that throws', () => {
  it('is logged as a warning under ZkLockModule (gained and lost), and the election goes on', async () => {
    const election = `hook-errors-${randomUUID().slice(0, 8)}`;
    const logger = new CapturedLog();
    const app = await boot(ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: `/e2e-hook-errors-${process.pid}` }), election, logger);
    try {
      const leadership = app.get(LeaderElections).get(election);
      await eventually(() => logger.about('warm-up broke').length > 0, 30_000);
      expect(leadership.isLeader).toBe(true);
      await leadership.stepDown();
      await eventually(() => logger.about('cool-down broke').length > 0, 30_000);
      expect(logger.about('broke')).toEqual([
        { level: 'warn', message: `@OnLeadershipGained hook FailingHooks.warmUp of leader election ${JSON.stringify(election)} threw: Error: warm-up broke` },
        { level: 'warn', message: `@OnLeadershipLost hook FailingHooks.coolDown of leader election ${JSON.stringify(election)} threw: Error: cool-down broke` },
      ]);
      // It queued again after stepping down, and leads again (alone in the election).
      await eventually(() => leadership.isLeader, 30_000);
    } finally {
      await app.close();
    }
  });
});
