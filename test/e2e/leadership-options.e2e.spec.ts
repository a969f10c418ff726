import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { Controller, Get, Inject, Injectable, Module, Scope, type INestApplication, type LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { InvalidOptionError, LockUsageError, type LockLostReason } from '../../lib/core/errors.js';
import type { LeadershipTerm } from '../../lib/core/recipes/leadership.js';
import { LeaderElections } from '../../lib/nest/leader-elections.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { OnLeadershipGained, OnLeadershipLost, OnlyLeader } from '../../lib/nest/only-leader.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import type { ZkLockModuleOptions } from '../../lib/nest/zk-lock-module-options.interface.js';
import { eventually, zkConnectString } from '../support/helpers.js';

// The module's participantId option (the id every election of the app carries, so that two apps
// in one process, or two containers that are both pid 1 on one hostname, can be told apart), and
// leadership hooks on every instance Nest builds of a class (two tokens, useValue, useFactory,
// transient), as @nestjs/schedule and @nestjs/event-emitter do; request-scoped ones are skipped
// with a warning.

const electionName = (label: string) => `${label}-${process.pid}-${randomUUID().slice(0, 8)}`;
const zk = (options: Partial<ZkLockModuleOptions> = {}) => ZkLockModule.forRoot({ connectString: zkConnectString(), sessionTimeoutMs: 4000, ...options });

/** Nest's log lines, by level (the leadership explorer's warnings, say). */
class CapturedLog implements LoggerService {
  readonly lines: { level: string; message: string }[] = [];
  log = (message: unknown) => void this.lines.push({ level: 'log', message: String(message) });
  error = (message: unknown) => void this.lines.push({ level: 'error', message: String(message) });
  warn = (message: unknown) => void this.lines.push({ level: 'warn', message: String(message) });
  debug = () => undefined;
  verbose = () => undefined;
  warnings(): string[] {
    return this.lines.filter((l) => l.level === 'warn').map((l) => l.message);
  }
}

const apps: INestApplication[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
});

async function boot(
  metadata: { imports?: unknown[]; providers?: unknown[]; controllers?: unknown[] },
  options: { logger?: LoggerService | false; listen?: boolean } = {},
): Promise<INestApplication> {
  @Module(metadata as never)
  class AppModule {}
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const app = moduleRef.createNestApplication({ logger: options.logger ?? false });
  if (options.listen) await app.listen(0, '127.0.0.1');
  else await app.init();
  apps.push(app);
  return app;
}

/** A class whose gained/lost hooks record which instance heard them. */
function hookedJobs(election: string) {
  const gained: object[] = [];
  const lost: [object, LockLostReason][] = [];
  @Injectable()
  class Jobs {
    @OnLeadershipGained(election)
    onGained(term: LeadershipTerm): void {
      if (!term.signal.aborted) gained.push(this);
    }

    @OnLeadershipLost(election)
    onLost(_term: LeadershipTerm, reason: LockLostReason): void {
      lost.push([this, reason]);
    }
  }
  return { Jobs, gained, lost };
}

describe('ZkLockModule option participantId', () => {
  it('is the id every election of the application carries (forRoot and forRootAsync), so participants() and leader() tell two apps of one process apart', async () => {
    const election = electionName('participant-id');
    const { Jobs } = hookedJobs(election);
    const one = await boot({ imports: [zk({ participantId: 'orders-a' })], providers: [Jobs] });
    const two = await boot({
      imports: [ZkLockModule.forRootAsync({ useFactory: () => ({ connectString: zkConnectString(), participantId: 'orders-b' }) })],
      providers: [Jobs],
    });
    const elections = [one, two].map((app) => app.get(LeaderElections).get(election));
    expect(elections.map((e) => e.participantId)).toEqual(['orders-a', 'orders-b']);
    await eventually(async () => (await elections[0]!.participants()).length === 2 && elections.some((e) => e.isLeader), 10_000);
    const participants = await elections[1]!.participants();
    expect(participants.map((p) => p.id).sort()).toEqual(['orders-a', 'orders-b']);
    const leading = elections.find((e) => e.isLeader)!;
    expect((await elections[0]!.leader())?.id).toBe(leading.participantId);
    // An election joined on first use (no decorator names it) carries it too.
    const later = electionName('joined-later');
    expect(two.get(LeaderElections).get(later).participantId).toBe('orders-b');
  });

  it('defaults to <host>:<pid>, distinct for two applications of one process', async () => {
    const election = electionName('default-id');
    const { Jobs } = hookedJobs(election);
    const one = await boot({ imports: [zk()], providers: [Jobs] });
    const two = await boot({ imports: [zk()], providers: [Jobs] });
    const elections = [one, two].map((app) => app.get(LeaderElections).get(election));
    await eventually(async () => (await elections[0]!.participants()).length === 2, 10_000);
    const ids = (await elections[0]!.participants()).map((p) => p.id);
    expect(new Set(ids).size).toBe(2);
    for (const id of ids) expect(id.startsWith(`${hostname()}:${process.pid}`)).toBe(true);
    expect(ids.sort()).toEqual(elections.map((e) => e.participantId).sort());
  });

  it.each([
    ['an empty string', ''],
    ['blanks', '   '],
    ['a number', 42],
    ['null', null],
  ])('fails the bootstrap with InvalidOptionError("participantId") on %s, before connecting', async (_label, participantId) => {
    const { Jobs } = hookedJobs(electionName('bad-id'));
    for (const imports of [
      // Nothing listens there: checked after connecting, this would fail with ZkConnectError.
      [zk({ connectString: '127.0.0.1:1', connectTimeoutMs: 10_000, participantId: participantId as string })],
      // forRootAsync: its options are only seen at bootstrap.
      [ZkLockModule.forRootAsync({ useFactory: () => ({ connectString: zkConnectString(), participantId: participantId as string }) })],
    ]) {
      const booting = boot({ imports, providers: [Jobs] });
      await expect(booting).rejects.toBeInstanceOf(InvalidOptionError);
      await expect(booting).rejects.toMatchObject({ option: 'participantId', message: expect.stringContaining('expected a non-empty string') });
    }
  });

  it('locks.leadership(name, { participantId }) refuses an empty id too', async () => {
    const app = await boot({ imports: [zk()] });
    expect(() => app.get(LockService).leadership('any', { participantId: '' })).toThrow(InvalidOptionError);
  });
});

describe('leadership hooks and @OnlyLeader on every instance of a class', () => {
  it('calls the hooks of each instance: a class under two tokens, useValue, useFactory and in two modules; an alias or one object under two tokens once', async () => {
    const election = electionName('two-tokens');
    const { Jobs, gained, lost } = hookedJobs(election);
    const value = new Jobs();
    @Module({ providers: [Jobs] })
    class FeatureModule {}
    @Module({
      providers: [
        Jobs,
        { provide: 'OTHER', useClass: Jobs },
        { provide: 'VALUE', useValue: value },
        { provide: 'SAME_VALUE', useValue: value },
        { provide: 'FACTORY', useFactory: () => new Jobs() },
        { provide: 'ALIAS', useExisting: Jobs },
      ],
    })
    class JobsModule {}
    const app = await boot({ imports: [zk(), JobsModule, FeatureModule] });
    const jobs = app.select(JobsModule);
    const strict = { strict: true };
    const expected = [jobs.get(Jobs, strict), jobs.get('OTHER', strict), value, jobs.get('FACTORY', strict), app.select(FeatureModule).get(Jobs, strict)];
    expect(new Set(expected).size).toBe(5);
    await eventually(() => gained.length >= 5, 10_000);
    await new Promise((r) => setTimeout(r, 200)); // no sixth call (an alias, the same value twice)
    expect(gained).toHaveLength(5);
    expect(new Set(gained)).toEqual(new Set(expected));
    await apps.pop()!.close();
    expect(lost).toHaveLength(5);
    expect(new Set(lost.map(([instance]) => instance))).toEqual(new Set(expected));
    expect(new Set(lost.map(([, reason]) => reason))).toEqual(new Set(['stepped-down']));
  });

  it('a transient provider: the hooks of each consumer\'s instance are called, and its @OnlyLeader methods work on each', async () => {
    const election = electionName('transient');
    const gained: object[] = [];
    @Injectable({ scope: Scope.TRANSIENT })
    class Worker {
      @OnLeadershipGained(election)
      onGained(): void {
        gained.push(this);
      }

      @OnlyLeader(election)
      async work(): Promise<string> {
        return 'worked';
      }
    }
    @Injectable()
    class First {
      constructor(readonly worker: Worker) {}
    }
    @Injectable()
    class Second {
      constructor(readonly worker: Worker) {}
    }
    const app = await boot({ imports: [zk()], providers: [Worker, First, Second] });
    const workers = [app.get(First).worker, app.get(Second).worker];
    expect(workers[0]).not.toBe(workers[1]);
    await eventually(() => gained.length >= 2, 10_000);
    await new Promise((r) => setTimeout(r, 200));
    expect(new Set(gained)).toEqual(new Set(workers));
    expect(gained).toHaveLength(2);
    expect(await Promise.all(workers.map((w) => w.work()))).toEqual(['worked', 'worked']);
  });

  it('fails the bootstrap on @OnlyLeader in an instance built by useFactory, even when the class itself is registered first', async () => {
    const election = electionName('factory');
    @Injectable()
    class Reports {
      @OnlyLeader(election)
      async rebuild(): Promise<void> {}
    }
    const booting = boot({ imports: [zk()], providers: [Reports, { provide: 'LEGACY_REPORTS', useFactory: () => new Reports() }] });
    await expect(booting).rejects.toBeInstanceOf(LockUsageError);
    await expect(booting).rejects.toThrow(/@OnlyLeader on Reports\.rebuild: LeaderElections was not injected into provider LEGACY_REPORTS/);
  });

  it('request scope: @OnlyLeader works on a request-scoped controller; hooks of a request-scoped provider are skipped with a warning', async () => {
    const election = electionName('request-scoped');
    const heard: string[] = [];
    @Injectable({ scope: Scope.REQUEST })
    class PerRequest {
      @OnLeadershipGained(election)
      onGained(): void {
        heard.push('request-scoped hook');
      }
    }
    @Controller({ path: 'admin', scope: Scope.REQUEST })
    class AdminController {
      constructor(@Inject(PerRequest) private readonly perRequest: PerRequest) {}

      @Get('rebuild')
      @OnlyLeader(election)
      async rebuild(): Promise<string> {
        return this.perRequest instanceof PerRequest ? 'rebuilt' : 'no';
      }
    }
    const { Jobs, gained } = hookedJobs(election);
    const log = new CapturedLog();
    const app = await boot({ imports: [zk()], providers: [PerRequest, Jobs], controllers: [AdminController] }, { logger: log, listen: true });
    expect(log.warnings().filter((w) => w.includes('hook'))).toEqual([
      expect.stringMatching(/^Cannot register @OnLeadershipGained\(".*"\) hook PerRequest\.onGained of provider PerRequest: it is request-scoped/),
    ]);
    await eventually(() => gained.length === 1, 10_000); // this app leads: the singleton's hook says so
    const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
    const answer = await fetch(`${url}/admin/rebuild`);
    expect(answer.status).toBe(200);
    expect(await answer.text()).toBe('rebuilt');
    expect(heard).toEqual([]);
  });
});
