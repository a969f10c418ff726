// The sample app under tracing (TRACES=file:<path>, docs/tracing.md): two instances sell the seats
// of one event, a buyer on each buying one seat after another, so that purchases contend across the
// instances. Every purchase that waited for the event's lock links, from its lock.acquire span, to
// the purchase in the other instance that held it: the spans both instances exported show it.
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build, http, ROOT, startInstances, stopInstances, type Instance } from '../../sample-app/scenario.mjs';
import type { SpanLine } from '../../sample-app/src/tracing/tracing.js';
import { zkConnectString } from '../support/helpers.js';

const basePath = `/sample-app-tracing-e2e-${process.pid}-${Date.now().toString(36)}/locks`;
const PURCHASES_PER_BUYER = 12;
const PURCHASE = 'POST /events/:id/purchase';
/** Both instances' clocks are the machine's; span times are converted from each process's own origin. */
const CLOCK_SLACK_MS = 50;

let workDir: string;
let instances: Instance[] = [];

beforeAll(async () => {
  workDir = await mkdtemp(join(tmpdir(), 'sample-app-tracing-e2e-'));
  build({ library: !existsSync(join(ROOT, 'dist', 'index.js')), sampleApp: true });
}, 120_000);

afterAll(async () => {
  await stopInstances(instances);
  await rm(workDir, { recursive: true, force: true });
});

describe('sample-app with TRACES', () => {
  it('each purchase that waited for the seat lock links to the purchase holding it in the other instance', async () => {
    const spansFile = join(workDir, 'spans.jsonl');
    instances = await startInstances({
      count: 2,
      zkConnect: zkConnectString(),
      databaseFile: join(workDir, 'tickets.db'),
      logDir: workDir,
      lockWaitMs: 30_000,
      basePath,
      env: { TRACES: `file:${spansFile}`, PAYMENT_MIN_MS: '30', PAYMENT_MAX_MS: '60' },
    });
    const created = await http('POST', `${instances[0]!.url}/events`, { name: 'Traced', seats: 1000 });
    expect(created.status).toBe(201);
    const eventId: number = created.body.id;
    // One buyer per instance, one purchase at a time: every wait is for the other instance.
    const answers = await Promise.all(
      instances.map(async (instance) => {
        const statuses: number[] = [];
        for (let i = 0; i < PURCHASES_PER_BUYER; i++) statuses.push((await http('POST', `${instance.url}/events/${eventId}/purchase`, { quantity: 1 })).status);
        return statuses;
      }),
    );
    expect(answers.flat()).toEqual(Array(2 * PURCHASES_PER_BUYER).fill(201));
    await stopInstances(instances);

    const spans: SpanLine[] = readFileSync(spansFile, 'utf8').trim().split('\n').map((line) => JSON.parse(line) as SpanLine);
    const byId = new Map(spans.map((s) => [`${s.traceId}/${s.spanId}`, s]));
    const childOf = (parent: SpanLine, name: string) => spans.find((s) => s.name === name && s.traceId === parent.traceId && s.parentSpanId === parent.spanId);
    const purchases = spans.filter((s) => s.name === PURCHASE);
    expect(purchases).toHaveLength(2 * PURCHASES_PER_BUYER);

    let waited = 0;
    for (const purchase of purchases) {
      const acquire = childOf(purchase, 'lock.acquire')!;
      const hold = childOf(purchase, 'lock.hold')!;
      expect(acquire.attributes).toMatchObject({ 'zk_lock.name': `event:${eventId}`, 'zk_lock.kind': 'mutex', 'zk_lock.outcome': 'acquired' });
      expect(hold.attributes).toMatchObject({ 'zk_lock.outcome': 'released' });
      // What the holder did under the lock nests under its hold.
      expect(childOf(hold, 'payment')).toBeDefined();
      if (acquire.attributes['zk_lock.watched'] === undefined) continue; // found the lock free (or freed before its watch was set)
      waited++;
      expect(acquire.links).toHaveLength(1);
      const holderAcquire = byId.get(`${acquire.links[0]!.traceId}/${acquire.links[0]!.spanId}`);
      expect(holderAcquire).toMatchObject({ name: 'lock.acquire' });
      expect(holderAcquire!.instance).not.toBe(purchase.instance);
      const holderPurchase = byId.get(`${holderAcquire!.traceId}/${holderAcquire!.parentSpanId}`)!;
      expect(holderPurchase).toMatchObject({ name: PURCHASE, instance: holderAcquire!.instance });
      // That purchase held the lock while this one waited: its hold ended within the wait.
      const holderHold = childOf(holderPurchase, 'lock.hold')!;
      expect(holderHold.endMs).toBeGreaterThan(acquire.startMs - CLOCK_SLACK_MS);
      expect(holderHold.endMs).toBeLessThan(acquire.endMs + CLOCK_SLACK_MS);
    }
    // Two buyers of 30-60 ms purchases meet often; a run where they never did would prove nothing.
    expect(waited).toBeGreaterThanOrEqual(2);
  }, 180_000);
});
