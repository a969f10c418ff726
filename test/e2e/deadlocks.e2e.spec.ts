// Deadlocks seen by a Nest application: @WithLock inside @WithLock in two instances that take two
// events in opposite orders (one answers 409 with reason `deadlock` at once, the other goes on),
// and, with deadlockDetection 'report', a cycle of three (two worker processes and this
// application) reported by LockService.inspect(), the CLI (`locks`, table and JSON) and the
// health indicator, every member named. Needs `npm run build` (the workers use the built package).
import { Controller, Injectable, Module, Param, Post, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { main } from '../../lib/cli.js';
import type { LockInfo } from '../../lib/core/inspect.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { ZkLockHealthIndicator, ZkLockHealthModule } from '../../lib/terminus/index.js';
import { childrenOf, closeAll, connect, eventually, uniquePath, zkConnectString } from '../support/helpers.js';
import { DeadlockWorker, stopDeadlockWorkers } from '../support/deadlock-workers.js';

afterEach(async () => {
  await stopDeadlockWorkers();
  await closeAll();
});

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Per instance: resolved once its request holds its first event, and the gate it then waits on. */
const steps = new Map<string, { inside: ReturnType<typeof deferred>; go: ReturnType<typeof deferred> }>();
const stepsOf = (instance: string) => steps.get(instance)!;

const basePath = `/e2e-deadlocks-${process.pid}`;

function transfersFor(instance: string) {
  @Injectable()
  class Transfers {
    @WithLock('event:{0}', { waitMs: 30_000 })
    async move(from: string, to: string): Promise<string> {
      stepsOf(instance).inside.resolve();
      await stepsOf(instance).go.promise;
      return this.into(to);
    }

    @WithLock('event:{0}', { waitMs: 30_000 })
    async into(to: string): Promise<string> {
      return `moved into ${to}`;
    }
  }

  @Controller()
  class TransferController {
    constructor(private readonly transfers: Transfers) {}

    @Post('transfers/:from/:to')
    move(@Param('from') from: string, @Param('to') to: string): Promise<string> {
      return this.transfers.move(from, to);
    }
  }

  @Module({
    imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath, app: 'transfers', instance })],
    providers: [Transfers],
    controllers: [TransferController],
  })
  class TransfersModule {}
  return TransfersModule;
}

describe('@WithLock inside @WithLock, two instances taking two events in opposite orders', () => {
  const apps: INestApplication[] = [];
  afterAll(() => Promise.all(apps.map((app) => app.close())));

  it('the request whose wait closed the cycle answers 409 (reason deadlock) at once; the other is served', async () => {
    const urls: string[] = [];
    for (const instance of ['a', 'b']) {
      steps.set(instance, { inside: deferred(), go: deferred() });
      const app = (await Test.createTestingModule({ imports: [transfersFor(instance)] }).compile()).createNestApplication({ logger: false });
      await app.listen(0, '127.0.0.1');
      apps.push(app);
      urls.push(await app.getUrl());
    }
    const observer = await connect();
    const ab = fetch(`${urls[0]}/transfers/1/2`, { method: 'POST' });
    const ba = fetch(`${urls[1]}/transfers/2/1`, { method: 'POST' });
    await stepsOf('a').inside.promise;
    await stepsOf('b').inside.promise;
    // a waits for event:2, then b's wait for event:1 closes the cycle.
    stepsOf('a').go.resolve();
    await eventually(async () => (await childrenOf(observer, `${basePath}/event:2`)).length === 2, 20_000, 10);
    const started = Date.now();
    stepsOf('b').go.resolve();
    const refused = await ba;
    expect(refused.status).toBe(409);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(await refused.json()).toEqual({
      statusCode: 409,
      error: 'Conflict',
      message: 'The request waited for a lock in a deadlock with another request; retry later',
      reason: 'deadlock',
    });
    expect(Date.now() - started).toBeLessThan(5_000);
    const served = await ab;
    expect(served.status).toBe(201);
    expect(await served.text()).toBe('moved into 2');
  });
});

describe("deadlockDetection 'report': a cycle of three processes", () => {
  @Injectable()
  class Member {
    constructor(readonly locks: LockService) {}
  }

  it('is reported by LockService.inspect(), the CLI and the health indicator, every member named; nobody fails until one gives up', async () => {
    const root = uniquePath('dl-report');
    const paths = [1, 2, 3].map((i) => `${root}/event:${i}`);
    const moduleRef = await Test.createTestingModule({
      imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: root, app: 'report-app', instance: 'app', deadlockDetection: 'report' }), ZkLockHealthModule],
      providers: [Member],
    }).compile();
    const app = await moduleRef.init();
    try {
      const { locks } = app.get(Member);
      const workers = [0, 1].map((i) => DeadlockWorker.start({ MODE: 'cycle', HOLD: paths[i]!, WAIT: paths[i + 1]!, INSTANCE: `w${i}`, DETECTION: 'report' }));
      await Promise.all(workers.map((w) => w.next('holds')));
      // This application holds event:3, then waits for event:1 once both workers wait.
      const holds = deferred();
      const go = deferred();
      const stop = new AbortController();
      const ours = locks.withLock('event:3', async () => {
        holds.resolve();
        await go.promise;
        return locks.withLock('event:1', () => 'acquired', { signal: stop.signal });
      });
      ours.catch(() => undefined);
      await holds.promise;
      for (const worker of workers) {
        worker.send('go');
        await worker.next('waiting');
      }
      go.resolve();
      const observer = await connect();
      await eventually(async () => (await childrenOf(observer, paths[0]!)).length === 2, 20_000, 10);

      const expectMembers = (members: readonly { lock: string; waitsFor: string; holder?: { instance?: string }; instance?: string }[]) => {
        // The first is the wait that began last (this application's); each waits for what the next holds.
        expect(members.map((m) => [m.lock, m.waitsFor, m.holder?.instance ?? m.instance])).toEqual([
          [paths[2], paths[0], 'app'],
          [paths[0], paths[1], 'w0'],
          [paths[1], paths[2], 'w1'],
        ]);
      };

      // inspect(): every lock of the cycle carries it.
      await eventually(async () => (await locks.inspect()).every((l) => l.deadlocks?.length === 1), 10_000, 50);
      const inspected = await locks.inspect();
      expect(inspected.map((l) => l.path)).toEqual(paths);
      expectMembers(inspected[0]!.deadlocks![0]!.members);

      // The CLI: a table with the cycle below it, and JSON.
      const run = async (args: string[]) => {
        let out = '';
        let err = '';
        const code = await main(args, {}, { out: (t) => (out += t), err: (t) => (err += t) });
        return { code, out, err };
      };
      const table = await run(['locks', root, '--connect', zkConnectString()]);
      expect(table).toMatchObject({ code: 0, err: '' });
      expect(table.out).toContain('DEADLOCK 1 (3 waits in a cycle):');
      const lines = table.out.slice(table.out.indexOf('DEADLOCK 1')).trimEnd().split('\n').slice(1);
      expect(lines).toHaveLength(3);
      expect(lines[0]).toMatch(new RegExp(`^  ${paths[2]} is held by \\S+ report-app/app \\(session 0x[0-9a-f]+\\), waiting \\S+ for ${paths[0]}  \\(began last: the one to give up\\)$`));
      expect(lines[1]).toMatch(new RegExp(`^  ${paths[0]} is held by \\S+ deadlock-worker/w0 .*, waiting \\S+ for ${paths[1]}$`));
      expect(lines[2]).toMatch(new RegExp(`^  ${paths[1]} is held by \\S+ deadlock-worker/w1 .*, waiting \\S+ for ${paths[2]}$`));
      const json = JSON.parse((await run(['locks', root, '--json', '--connect', zkConnectString()])).out) as LockInfo[];
      expect(json.map((l) => l.deadlocks?.length)).toEqual([1, 1, 1]);
      expectMembers(json[1]!.deadlocks![0]!.members);

      // The health indicator: degraded, with the cycle.
      const health = await app.get(ZkLockHealthIndicator).isHealthy('zookeeper');
      expect(health.zookeeper.status).toBe('degraded');
      const details = health.zookeeper as unknown as { deadlocks: { members: { lock: string; waitsFor: string; instance: string }[] }[]; message: string };
      expect(details.deadlocks).toHaveLength(1);
      expectMembers(details.deadlocks[0]!.members);
      expect(details.message).toContain('1 deadlock(s)');

      // Nobody gave up: the workers still wait.
      for (const worker of workers) await expect(worker.next(['acquired', 'failed'], 300)).rejects.toThrow('no acquired|failed');
      // This application gives up (its signal): the cycle is broken, the workers acquire in turn.
      stop.abort();
      await expect(ours).rejects.toMatchObject({ reason: 'aborted' });
      await expect(workers[1]!.next(['acquired', 'failed'])).resolves.toMatchObject({ event: 'acquired' });
      workers[1]!.send('exit');
      await expect(workers[0]!.next(['acquired', 'failed'])).resolves.toMatchObject({ event: 'acquired' });
      workers[0]!.send('exit');
      await Promise.all(workers.map((w) => w.exited));
      expect((await app.get(ZkLockHealthIndicator).isHealthy('zookeeper')).zookeeper.status).toBe('up');
      expect((await locks.inspect()).some((l) => l.deadlocks)).toBe(false);
    } finally {
      await app.close();
    }
  });
});
