import { once } from 'node:events';
import { Controller, Get, Injectable, Module, type INestApplication } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Test } from '@nestjs/testing';
import { InvalidLockNameError, type LockLostReason } from '../../lib/core/errors.js';
import type { LeadershipTerm } from '../../lib/core/recipes/leadership.js';
import { LeaderContext, LeaderElections } from '../../lib/nest/leader-elections.js';
import { OnLeadershipGained, OnLeadershipLost, OnlyLeader } from '../../lib/nest/only-leader.decorator.js';
import { ZkLockExceptionFilter } from '../../lib/nest/zk-lock-exception.filter.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { childrenOf, closeAll, connect, eventually, zkConnectString } from '../support/helpers.js';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';

afterAll(closeAll);

const election = `housekeeping-${process.pid}`;

@Injectable()
class Housekeeping {
  readonly log: string[] = [];
  cronRuns = 0;

  @OnlyLeader(election)
  async sweep(): Promise<string> {
    const term = LeaderContext.current()!;
    return `swept under ${term.election} (token ${term.fencingToken > 0n ? 'set' : 'missing'})`;
  }

  @OnLeadershipGained(election)
  gained(term: LeadershipTerm): void {
    this.log.push(`gained ${term.signal.aborted ? 'aborted' : 'live'}`);
  }

  @OnLeadershipLost(election)
  lost(term: LeadershipTerm, reason: LockLostReason): void {
    this.log.push(`lost ${reason} ${term.signal.aborted ? 'aborted' : 'live'}`);
  }
}

@Controller('admin')
class AdminController {
  @Get('rebuild')
  @OnlyLeader(election) // a route handler throws by default: 503, never an empty 200
  async rebuild(): Promise<string> {
    return 'rebuilt';
  }
}

async function instance(): Promise<{ app: INestApplication; jobs: Housekeeping; url: string }> {
  @Module({
    imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), sessionTimeoutMs: 4000 })],
    providers: [Housekeeping, { provide: APP_FILTER, useClass: ZkLockExceptionFilter }],
    controllers: [AdminController],
  })
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const app = moduleRef.createNestApplication({ logger: false });
  await app.listen(0, '127.0.0.1');
  return { app, jobs: app.get(Housekeeping), url: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
}

describe('@OnlyLeader across application instances', () => {
  it('runs on the leader only (skips or answers 503 elsewhere), and a closed leader hands over at once', async () => {
    const first = await instance();
    const second = await instance();
    const leaderOf = async () => {
      const elections = [first, second].map((i) => i.app.get(LeaderElections).get(election));
      await eventually(() => elections.some((e) => e.isLeader), 10_000);
      return elections[0]!.isLeader ? [first, second] : [second, first];
    };
    const [leader, follower] = await leaderOf();
    expect(await leader!.jobs.sweep()).toBe(`swept under ${election} (token set)`);
    expect(await follower!.jobs.sweep()).toBeUndefined();
    expect(leader!.jobs.log).toEqual(['gained live']);

    expect((await fetch(`${leader!.url}/admin/rebuild`)).status).toBe(200);
    const refused = await fetch(`${follower!.url}/admin/rebuild`);
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ message: 'This instance is not the leader; retry later' });

    const takeover = once(follower!.app.get(LeaderElections).get(election), 'gained', { signal: AbortSignal.timeout(10_000) });
    const closing = Date.now();
    await leader!.app.close();
    await takeover;
    expect(Date.now() - closing).toBeLessThan(3000); // not the 4 s session timeout: it stepped down
    expect(leader!.jobs.log).toEqual(['gained live', 'lost stepped-down aborted']);
    await eventually(() => follower!.jobs.log.includes('gained live'), 5000);
    expect(await follower!.jobs.sweep()).toContain('swept');
    await follower!.app.close();
  });

  it.each(['above', 'below'])('a @Cron job with @OnlyLeader %s it runs on one instance only', async (order) => {
    const name = `cron-leader-${order}-${process.pid}`;
    const runs: string[] = [];
    const make = (label: string) => {
      @Injectable()
      class Above {
        @OnlyLeader(name)
        @Cron('* * * * * *')
        async tick() {
          runs.push(label);
        }
      }
      @Injectable()
      class Below {
        @Cron('* * * * * *')
        @OnlyLeader(name)
        async tick() {
          runs.push(label);
        }
      }
      return order === 'above' ? Above : Below;
    };
    const apps = await Promise.all(
      ['a', 'b'].map(async (label) => {
        @Module({ imports: [ScheduleModule.forRoot(), ZkLockModule.forRoot({ connectString: zkConnectString() })], providers: [make(label)] })
        class AppModule {}
        const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
        moduleRef.useLogger(false);
        return moduleRef.createNestApplication().init();
      }),
    );
    try {
      await eventually(() => runs.length >= 3, 15_000);
      expect(new Set(runs).size).toBe(1);
    } finally {
      await Promise.all(apps.map((app) => app.close()));
    }
  }, 30_000);

  it('an application whose bootstrap fails never joins its elections (no leader that never started)', async () => {
    const name = `zombie-${process.pid}`;
    @Injectable()
    class Job {
      @OnlyLeader(name)
      async run() {}
    }
    @Injectable()
    class Database {
      async onModuleInit() {
        throw new Error('database down');
      }
    }
    @Module({ imports: [ZkLockModule.forRoot({ connectString: zkConnectString() })], providers: [Job, Database] })
    class AppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    moduleRef.useLogger(false);
    await expect(moduleRef.createNestApplication().init()).rejects.toThrow('database down');
    const observer = await connect();
    expect(await childrenOf(observer, `/locks/${name}`)).toEqual([]);
    await moduleRef.get(ZkConnection).close(); // Nest runs no shutdown hook after a failed bootstrap
  });

  it('fails the bootstrap on an election name that cannot be a lock path', async () => {
    @Injectable()
    class Bad {
      @OnlyLeader('a//b')
      async run() {}
    }
    @Module({ imports: [ZkLockModule.forRoot({ connectString: zkConnectString() })], providers: [Bad] })
    class AppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    moduleRef.useLogger(false);
    await expect(moduleRef.createNestApplication().init()).rejects.toBeInstanceOf(InvalidLockNameError);
  });
});
