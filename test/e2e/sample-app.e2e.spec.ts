// The sample app's ticket sale (what `npm run demo` shows), smaller: three instances of the real
// service on one SQLite file sell an event's seats to concurrent buyers, once with @WithLock and
// once with LOCKS=off. The instances are separate processes started from here before this process
// opens any ZooKeeper connection of its own (a child would inherit the client's sockets).
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { resolveLockPath } from '../../lib/core/paths.js';
import { build, describeTakeover, getJson, http, leaderReport, ROOT, runScenario, startInstances, stopInstances, type Instance } from '../../sample-app/scenario.mjs';
import { closeAll, engine, eventually, zkConnectString } from '../support/helpers.js';

const basePath = `/sample-app-e2e-${process.pid}-${Date.now().toString(36)}/locks`;
// A payment call of 40-80 ms: a window wide enough that the unlocked run oversells even on a busy machine.
const env = { PAYMENT_MIN_MS: '40', PAYMENT_MAX_MS: '80' };
let workDir: string;

beforeAll(async () => {
  workDir = await mkdtemp(join(tmpdir(), 'sample-app-e2e-'));
  // The library normally comes from `npm run build` (npm test); the sample app is built here, as the demo does.
  build({ library: !existsSync(join(ROOT, 'dist', 'index.js')), sampleApp: true });
}, 120_000);

afterAll(async () => {
  await closeAll();
  await rm(workDir, { recursive: true, force: true });
});

const scenario = { instances: 3, buyers: 60, seats: 20, concurrency: 20, minTicks: 3, basePath, env };

describe('sample-app: the ticket sale on 3 instances', () => {
  it('with @WithLock sells exactly the seats, the cron job runs once per tick, and the housekeeping leader hands over when stopped', async () => {
    const run = await runScenario({ ...scenario, zkConnect: zkConnectString(), workDir, locks: true, lockWaitMs: 30_000, takeover: true });
    expect(run.otherSamples).toEqual([]);
    expect(run).toMatchObject({ seats: 20, sold: 20, oversold: 0, ok: 20, conflict: 0, soldOut: 40, other: 0 });
    expect(run.cron.ticksObserved).toBeGreaterThanOrEqual(2);
    expect(run.cron.maxRunsPerTick).toBe(1);
    // Mid-sale, GET /locks showed the event's lock held by one instance, others queued behind it.
    const lock = run.lockSnapshot?.locks?.find((l) => l.name.startsWith('event:'));
    expect(lock).toMatchObject({ path: `${basePath}/${lock?.name}`, kind: 'mutex' });
    expect(lock?.holders).toHaveLength(1);
    expect(lock?.holders[0]?.holder).toMatchObject({ app: 'ticket-sale', instance: expect.stringMatching(/^instance-[123]$/) });
    expect(lock?.waiting.length).toBeGreaterThan(0);

    // What the demo prints after the table: the leader of jobs:housekeeping, stopped with SIGTERM,
    // and its successor as GET /locks on the survivors saw it.
    const takeover = run.takeover!;
    expect(takeover).toMatchObject({ election: 'jobs:housekeeping', job: 'housekeeping', seenBy: 'instance-1', participants: 3 });
    expect(run.instances).toContainEqual(expect.objectContaining(takeover.leader));
    // GET /locks and the cron runs agree: no tick before the stop ran elsewhere (a busy machine may miss one).
    const before = takeover.ticks.filter((t) => t.tick <= takeover.stopTick && t.runs > 0);
    expect(before.length).toBeGreaterThanOrEqual(2);
    expect(before.every((t) => t.instances.every((name) => name === takeover.leader.name))).toBe(true);
    expect(takeover.exit).toBe('SIGTERM'); // Nest re-raises it after its shutdown hooks (not killed after the grace)
    expect(takeover.successor).toBeDefined();
    expect(run.instances).toContainEqual(expect.objectContaining(takeover.successor));
    expect(takeover.successor?.name).not.toBe(takeover.leader.name);
    // The leader stepped down: far below the 15 s session timeout its node would otherwise live on.
    expect(takeover.takeoverMs).toBeLessThan(3000);
    expect(takeover.lastOldMs).toBeLessThan(takeover.takeoverMs!);
    expect(takeover.doubled).toEqual([]);
    expect(takeover.firstSuccessorTick! - takeover.stopTick).toBeLessThanOrEqual(2);
    const lines = describeTakeover(takeover).split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^Leader of jobs:housekeeping: instance-[123] \(pid \d+\), per GET \/locks on instance-1 \(3 participants\) and per the cron runs \((it ran all \d+|\d+ of the \d+) housekeeping ticks so far/);
    expect(lines[1]).toMatch(/^Stopped it \(SIGTERM \d+ ms after a tick: .*; it exited \d+ ms later\): instance-[123] \(pid \d+\) took over within \d+ ms of the SIGTERM \(GET \/locks asked of the survivors every \d+ ms, ~\d+ ms per answer/);
    expect(lines[1]).toContain(`${takeover.successor!.name} (pid ${takeover.successor!.pid}) took over within ${Math.round(takeover.takeoverMs!)} ms`);
    expect(lines[2]).toMatch(takeover.missed.length === 0 ? /^Housekeeping ran once per tick throughout: \d+ ticks, .*; none missed, none doubled\.$/ : /^Housekeeping: .*, none doubled\.$/);
    expect(leaderReport([run])).toBe(describeTakeover(takeover));
  }, 90_000);

  it('with LOCKS=off (control) oversells, and every instance runs the cron job each tick', async () => {
    const run = await runScenario({ ...scenario, zkConnect: zkConnectString(), workDir, locks: false });
    expect(run.otherSamples).toEqual([]);
    expect(run.other).toBe(0);
    expect(run.oversold).toBeGreaterThan(0);
    expect(run.sold).toBe(20 + run.oversold);
    expect(run.ok).toBe(run.sold);
    expect(run.cron.maxRunsPerTick).toBeGreaterThan(1);
    // No election and no housekeeping job in this run: the demo says so instead of a takeover.
    expect(run.takeover).toBeUndefined();
    expect(leaderReport([run])).toMatch(/^LOCKS=off: no leader to stop: /);
  }, 90_000);
});

describe('sample-app: the purchase API', () => {
  let instances: Instance[] = [];
  afterAll(() => stopInstances(instances));

  it('answers 400 for a bad id or body, 404, 422, 409 while the seat lock is held elsewhere, 201, then 410', async () => {
    instances = await startInstances({
      count: 1,
      zkConnect: zkConnectString(),
      databaseFile: join(workDir, 'api', 'tickets.db'),
      logDir: join(workDir, 'api'),
      lockWaitMs: 300,
      basePath,
      env,
    });
    const url = instances[0]!.url;
    const created = await http('POST', `${url}/events`, { name: 'One seat', seats: 1 });
    expect(created).toMatchObject({ status: 201, body: { seats: 1, sold: 0, remaining: 1 } });
    const id: number = created.body.id;
    const buy = (body: unknown, eventId: unknown = id) => http('POST', `${url}/events/${eventId}/purchase`, body);

    expect(await buy({ quantity: 1 }, 'abc')).toMatchObject({ status: 400, body: { message: expect.stringContaining('event id') } });
    expect(await buy({ quantity: 0 })).toMatchObject({ status: 400, body: { message: expect.stringContaining('quantity') } });
    expect(await buy({ quantity: 1.5 })).toMatchObject({ status: 400 });
    expect(await buy({ quantity: 1, seat: 'A1' })).toMatchObject({ status: 400, body: { message: expect.stringContaining('seat') } });
    expect(await buy([1])).toMatchObject({ status: 400 });
    expect(await http('POST', `${url}/events`, { name: 'x', seats: -1 })).toMatchObject({ status: 400 });
    expect(await buy({ quantity: 1 }, 999_999)).toMatchObject({ status: 404 });
    expect(await buy({ quantity: 2 })).toMatchObject({ status: 422 });

    // This process takes the event's lock (now that the instance runs): the purchase waits 300 ms, then 409.
    const holder = new Mutex(await engine({}, { basePath, app: 'e2e-holder' }), `event:${id}`, resolveLockPath(basePath, `event:${id}`));
    const lease = await holder.acquire({ waitMs: 10_000 });
    try {
      const locks = await getJson(`${url}/locks`);
      expect(locks.locks).toContainEqual(
        expect.objectContaining({
          name: `event:${id}`,
          kind: 'mutex',
          holders: [expect.objectContaining({ holds: true, holder: expect.objectContaining({ app: 'e2e-holder', pid: process.pid }) })],
          waiting: [],
        }),
      );
      const busy = await buy({ quantity: 1 });
      expect(busy).toMatchObject({ status: 409, headers: { 'retry-after': '1' }, body: { statusCode: 409, error: 'Conflict' } });
      expect(JSON.stringify(busy.body)).not.toContain('event:'); // the filter does not name the lock
    } finally {
      await lease.release();
    }

    const sale = await buy({ quantity: 1, buyer: 'ann' });
    expect(sale).toMatchObject({ status: 201, body: { eventId: id, quantity: 1, remaining: 0, instance: 'instance-1' } });
    expect(BigInt(sale.body.fencingToken)).toBeGreaterThan(lease.fencingToken); // the next holder's token
    expect(await buy({ quantity: 1 })).toMatchObject({ status: 410, body: { message: expect.stringContaining('sold out') } });
    expect(await getJson(`${url}/events/${id}`)).toMatchObject({ seats: 1, sold: 1, remaining: 0, oversold: 0 });
  }, 90_000);
});

describe('sample-app: the leader-only housekeeping job', () => {
  let instances: Instance[] = [];
  afterAll(() => stopInstances(instances));

  it('runs on one instance tick after tick, and another takes over at once when that one stops', async () => {
    instances = await startInstances({
      count: 3,
      zkConnect: zkConnectString(),
      databaseFile: join(workDir, 'leader', 'tickets.db'),
      logDir: join(workDir, 'leader'),
      basePath,
      env,
    });
    const url = instances[0]!.url;
    type Tick = { tick: number; runs: number; instances: string[] };
    const ticks = async (): Promise<Tick[]> => (await getJson(`${url}/jobs/cron-runs?job=housekeeping`)).ticks;
    await eventually(async () => (await ticks()).length >= 3, 30_000);
    const before = await ticks();
    expect(before.every((t) => t.runs === 1)).toBe(true);
    const leaders = new Set(before.flatMap((t) => t.instances));
    expect(leaders.size).toBe(1);
    const leader = instances.find((i) => leaders.has(i.name))!;

    const stopped = Math.floor(Date.now() / 1000);
    await stopInstances([leader]);
    const url2 = instances.find((i) => i !== leader)!.url;
    const after = async (): Promise<Tick[]> => (await getJson(`${url2}/jobs/cron-runs?job=housekeeping&since=${stopped}`)).ticks;
    await eventually(async () => (await after()).some((t) => !t.instances.includes(leader.name)), 15_000);
    const since = await after();
    expect(since.every((t) => t.runs === 1)).toBe(true);
    // The successor ran within a couple of ticks of the stop (it stepped down; no session timeout).
    const firstSuccessorTick = since.find((t) => !t.instances.includes(leader.name))!.tick;
    expect(firstSuccessorTick - stopped).toBeLessThanOrEqual(3);
  }, 120_000);
});
