// A rolling deploy of the sample app under purchase load: three instances sell 1-seat events, one
// buyer per live instance per event at the same time, while one instance after another gets
// SIGTERM (Nest's shutdown hooks) with purchases in flight and is started again. No event may be
// oversold, and every request gets a real answer — a purchase in flight when its instance is told
// to stop still completes (graceful shutdown), it is not cut off.
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build, getJson, ROOT, startInstances, stopInstances, type Instance } from '../../sample-app/scenario.mjs';
import { zkConnectString } from '../support/helpers.js';

const basePath = `/sample-app-rolling-${process.pid}-${Date.now().toString(36)}/locks`;
const env = { PAYMENT_MIN_MS: '30', PAYMENT_MAX_MS: '60' };
const MIN_EVENTS = 20;
const RESTARTS = 6;
let workDir: string;
let instances = new Map<string, Instance>();

beforeAll(async () => {
  workDir = await mkdtemp(join(tmpdir(), 'sample-app-rolling-'));
  build({ library: !existsSync(join(ROOT, 'dist', 'index.js')), sampleApp: true });
}, 120_000);

afterAll(async () => {
  await stopInstances([...instances.values()]);
  await rm(workDir, { recursive: true, force: true });
});

/** One request on its own connection (no keep-alive socket that a closing server may drop under it). */
function post(url: string, body: unknown): Promise<number | string> {
  return new Promise((resolve) => {
    const payload = JSON.stringify(body);
    const req = request(url, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', connection: 'close' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    req.setTimeout(30_000, () => req.destroy(new Error('timeout')));
    req.end(payload);
  });
}

it('rolling restart with critical sections in flight: 0 oversold, every answer 201/409/410/503, clean exits', async () => {
  const start = (names: string[]) =>
    startInstances({ names, zkConnect: zkConnectString(), databaseFile: join(workDir, 'tickets.db'), logDir: workDir, lockWaitMs: 2000, basePath, env });
  instances = new Map((await start(['instance-1', 'instance-2', 'instance-3'])).map((i) => [i.name, i]));
  const live = new Set(instances.keys());
  const anyLive = () => instances.get([...live][0]!)!;

  const events: number[] = [];

  const answers = new Map<string, number>();
  const count = (key: number | string) => answers.set(String(key), (answers.get(String(key)) ?? 0) + 1);
  const exits: { name: string; how: unknown; ms: number }[] = [];
  let buying = true;

  // One instance at a time: SIGTERM (new requests go elsewhere from now on), wait for its exit, start it again.
  const restarter = (async () => {
    for (let round = 0; round < RESTARTS && buying; round++) {
      await new Promise((resolve) => setTimeout(resolve, 300));
      const name = `instance-${(round % 3) + 1}`;
      const instance = instances.get(name)!;
      live.delete(name);
      const stoppedAt = Date.now();
      instance.child.kill('SIGTERM');
      const how = await instance.exited;
      exits.push({ name, how, ms: Date.now() - stoppedAt });
      const [again] = await start([name]);
      instances.set(name, again!);
      live.add(name);
    }
  })();

  const sales = (async () => {
    for (let i = 0; buying || i < MIN_EVENTS; i++) {
      const { id } = await postJson(`${anyLive().url}/events`, { name: `rolling ${i}`, seats: 1 });
      events.push(id);
      const buyers = [...live].map((name) => post(`${instances.get(name)!.url}/events/${id}/purchase`, { quantity: 1, buyer: name }));
      for (const answer of await Promise.all(buyers)) count(answer);
    }
  })();

  await restarter;
  buying = false;
  await sales;

  const views = await Promise.all(events.map((id) => getJson(`${anyLive().url}/events/${id}`)));
  const oversold = views.filter((v) => v.oversold > 0).map((v) => v.id);
  const summary = Object.fromEntries(answers);
  // eslint-disable-next-line no-console
  console.log(`rolling restart: answers ${JSON.stringify(summary)}, restarts ${exits.length}, exits ${JSON.stringify(exits)}`);
  expect(oversold).toEqual([]);
  expect(Object.keys(summary).filter((status) => !['201', '409', '410', '503'].includes(status))).toEqual([]);
  expect(summary['201']).toBeGreaterThan(0);
  expect(exits).toHaveLength(RESTARTS);
  // Nest's shutdown hooks re-raise the signal after app.close(): a clean stop ends by SIGTERM, not a crash.
  for (const exit of exits) expect(exit).toEqual({ name: exit.name, how: 'SIGTERM', ms: expect.any(Number) });
  for (const exit of exits) expect(exit.ms).toBeLessThan(15_000);
}, 180_000);

async function postJson(url: string, body: unknown): Promise<{ id: number }> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  expect(response.status).toBe(201);
  return (await response.json()) as { id: number };
}
