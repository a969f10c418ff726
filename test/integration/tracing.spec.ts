// Contention traces (docs/tracing.md): with the OpenTelemetry SDK registered, every acquire is a
// `lock.acquire` span and every hold a `lock.hold` span; a waiter links its acquire to the acquire
// of the holder it waits behind, named by the trace context in that holder's node data, across
// processes. With no tracer provider registered, the library touches no OpenTelemetry context.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { context, propagation, trace, ROOT_CONTEXT, type Context, type ContextManager, type Tracer, type TracerProvider } from '@opentelemetry/api';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../lib/core/recipes/semaphore.js';
import { parseHolderData } from '../../lib/core/operations/holder-data.js';
import type { LockEngine } from '../../lib/core/lock-engine.js';
import { sortChildren } from '../../lib/core/paths.js';
import { CuratorPeer, curatorPeerUnavailableReason } from '../support/curator-peer.js';
import { closeAll, connect, engine, uniquePath, zkConnectString } from '../support/helpers.js';
import { countRequests, nameOf, notAcquired, untilChildCount, untilWatching, whenAborted, within } from '../support/lock-test-helpers.js';

const HOLDER = fileURLToPath(new URL('./fixtures/traced-holder.mjs', import.meta.url));
const curatorUnavailable = curatorPeerUnavailableReason();

afterAll(closeAll);

/** What a span says, as the other process prints it (see fixtures/traced-holder.mjs). */
interface PlainSpan {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string; attributes?: Record<string, unknown> }[];
}

function plain(span: ReadableSpan): PlainSpan {
  const { traceId, spanId } = span.spanContext();
  const links = span.links.map((l) => ({ traceId: l.context.traceId, spanId: l.context.spanId, attributes: l.attributes }));
  return { name: span.name, traceId, spanId, parentSpanId: span.parentSpanContext?.spanId, attributes: span.attributes, links };
}

/** A context manager that only counts how often the active context is asked for. */
class CountingContextManager implements ContextManager {
  reads = 0;
  active(): Context {
    this.reads++;
    return ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(_: Context, fn: F, thisArg?: ThisParameterType<F>, ...args: A): ReturnType<F> {
    return fn.call(thisArg, ...args);
  }
  bind<T>(_: Context, target: T): T {
    return target;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    return this;
  }
}

/** Two sessions contend for `path`: `first` holds, the `second` queues behind it, then both release. */
async function contendedCycle(first: Mutex, second: Mutex, observer: Awaited<ReturnType<typeof connect>>, path: string): Promise<void> {
  const held = await first.acquire();
  const waiting = second.acquire({ waitMs: 20_000 });
  await untilChildCount(observer, path, 2);
  await held.release();
  await (await within(waiting, 20_000, 'the waiter')).release();
}

describe('tracing off: no tracer provider registered', () => {
  it('an acquire, contended or not, reads no OpenTelemetry context and writes the plain holder data', async () => {
    const manager = new CountingContextManager();
    context.setGlobalContextManager(manager);
    try {
      const path = uniquePath('untraced');
      const [a, b] = await Promise.all([engine(), engine()]);
      const observer = await connect();
      await contendedCycle(new Mutex(a, 'untraced', path, { coalesce: false }), new Mutex(b, 'untraced', path, { coalesce: false }), observer, path);
      const lease = await new Mutex(a, 'untraced', path).acquire();
      const { data } = await observer.session!.getData(lease.path);
      await lease.release();
      expect(parseHolderData(data)).not.toHaveProperty('traceparent');
      expect(manager.reads).toBe(0);
    } finally {
      context.disable();
    }
  });
});

describe('tracing on', () => {
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const tracer = trace.getTracer('tracing.spec');
  beforeAll(() => provider.register());
  afterAll(async () => {
    trace.disable();
    context.disable();
    propagation.disable();
    await provider.shutdown();
  });
  beforeEach(() => exporter.reset());

  const spans = () => exporter.getFinishedSpans().map(plain);
  const named = (name: string) => spans().filter((s) => s.name === name);

  it("a waiter's lock.acquire links to the holder's span in another process, through the trace context in the holder's node", async () => {
    const path = uniquePath('traced');
    const holder = spawn(process.execPath, [HOLDER], { env: { ...process.env, ZK_CONNECT: zkConnectString(), LOCK_PATH: path }, stdio: ['pipe', 'pipe', 'inherit'] });
    const exited = once(holder, 'exit');
    const lines = createInterface({ input: holder.stdout! });
    const printed: Record<string, unknown>[] = [];
    let written: string | undefined;
    let onHeld!: (node: string) => void;
    const held = new Promise<string>((resolve) => (onHeld = resolve));
    lines.on('line', (line) => {
      const message = JSON.parse(line) as Record<string, unknown>;
      printed.push(message);
      if (typeof message.held === 'string') onHeld(message.held);
    });
    try {
      const holderNode = await within(held, 60_000, 'the other process holding');
      const waiterEngine = await engine();
      const observer = await connect();
      const { data } = await observer.session!.getData(holderNode);
      written = parseHolderData(data).traceparent;
      expect(written).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);

      const waiter = new Mutex(waiterEngine, 'traced', path);
      const waited = tracer.startActiveSpan('waiter-request', (request) =>
        waiter.withLock(() => tracer.startSpan('work-under-lock').end(), { waitMs: 30_000 }).finally(() => request.end()),
      );
      // Its watch on the holder's node is set: the read that set it brought the holder data.
      await untilWatching(holderNode, waiterEngine.connection.session!.id);
      holder.stdin!.write('release\n');
      await within(waited, 30_000, 'the waiter');
      await within(exited, 30_000, 'the other process exiting');
    } finally {
      holder.kill();
    }

    const theirs = printed.flatMap((m) => (m.span ? [m.span as PlainSpan] : []));
    const request = theirs.find((s) => s.name === 'holder-request')!;
    const theirAcquire = theirs.find((s) => s.name === 'lock.acquire')!;
    const theirHold = theirs.find((s) => s.name === 'lock.hold')!;
    expect(theirAcquire).toMatchObject({ traceId: request.traceId, parentSpanId: request.spanId });
    expect(theirHold).toMatchObject({ traceId: request.traceId, parentSpanId: request.spanId, attributes: { 'zk_lock.outcome': 'released' } });
    const holderNodeName = String(theirHold.attributes['zk_lock.node']).split('/').pop();

    const waiterRequest = named('waiter-request')[0]!;
    const [acquire] = named('lock.acquire');
    const [hold] = named('lock.hold');
    expect(acquire).toMatchObject({
      traceId: waiterRequest.traceId,
      parentSpanId: waiterRequest.spanId,
      attributes: {
        'zk_lock.name': 'traced',
        'zk_lock.path': path,
        'zk_lock.kind': 'mutex',
        'zk_lock.outcome': 'acquired',
        'zk_lock.queue.position': 1,
        'zk_lock.watched': [holderNodeName],
      },
    });
    expect(acquire!.attributes['zk_lock.wait_ms']).toBeGreaterThan(0);
    // The link: the very span the other process exported, named in its node's data.
    expect(acquire!.links).toEqual([{ traceId: theirAcquire.traceId, spanId: theirAcquire.spanId, attributes: { 'zk_lock.node': holderNodeName } }]);
    expect(written).toBe(`00-${theirAcquire.traceId}-${theirAcquire.spanId}-01`);
    // The hold is the acquire's sibling; the work done under the lock runs inside it.
    expect(hold).toMatchObject({ traceId: waiterRequest.traceId, parentSpanId: waiterRequest.spanId, attributes: { 'zk_lock.outcome': 'released' } });
    expect(named('work-under-lock')[0]).toMatchObject({ parentSpanId: hold!.spanId });
  }, 90_000);

  it('no extra request: a contended cycle sends the same requests traced as untraced', async () => {
    const counted = async (traced: boolean) => {
      const path = uniquePath('requests');
      const [a, b] = await Promise.all([engine(), engine()]);
      const counts = [countRequests(a.connection.session!), countRequests(b.connection.session!)];
      if (!traced) trace.disable();
      try {
        await contendedCycle(new Mutex(a, 'r', path, { coalesce: false }), new Mutex(b, 'r', path, { coalesce: false }), await connect(), path);
      } finally {
        if (!traced) provider.register();
      }
      await Promise.all([a.drain(), b.drain()]);
      return counts;
    };
    const untraced = await counted(false);
    const traced = await counted(true);
    expect(named('lock.acquire')).toHaveLength(2);
    expect(traced).toEqual(untraced);
  });

  it('a hold lost ends its span with the reason; an acquire that gives up ends its span with its reason', async () => {
    const path = uniquePath('lost');
    const [a, b] = await Promise.all([engine(), engine()]);
    const lease = await new Mutex(a, 'lost', path).acquire();
    const lost = whenAborted(lease.signal);
    await notAcquired(new Mutex(b, 'lost', path).acquire({ waitMs: 300 }));
    await (await connect()).session!.delete(lease.path);
    await lost;
    expect(named('lock.hold')[0]?.attributes).toMatchObject({ 'zk_lock.outcome': 'lost', 'zk_lock.lost.reason': 'node-deleted' });
    const gaveUp = named('lock.acquire').find((s) => s.attributes['zk_lock.outcome'] !== 'acquired');
    expect(gaveUp?.attributes).toMatchObject({ 'zk_lock.outcome': 'timeout', 'zk_lock.queue.position': 1, 'zk_lock.watched': [nameOf(lease)] });
    expect(exporter.getFinishedSpans().find((s) => s.name === 'lock.hold')?.status).toMatchObject({ code: 2, message: 'lost: node-deleted' });
  });

  it('callers of one process behind one node (coalescing): the next caller links to the one that handed the lock over', async () => {
    const path = uniquePath('handoff');
    const e = await engine();
    const mutex = new Mutex(e, 'handoff', path);
    const first = await mutex.acquire();
    const second = tracer.startActiveSpan('second', (span) => mutex.acquire({ waitMs: 20_000 }).finally(() => span.end()));
    await first.release();
    await (await second).release();
    const [firstAcquire, secondAcquire] = named('lock.acquire');
    expect(secondAcquire?.attributes).toMatchObject({ 'zk_lock.queue.position': 1, 'zk_lock.queue.in_process': true });
    expect(secondAcquire?.links).toEqual([{ traceId: firstAcquire!.traceId, spanId: firstAcquire!.spanId }]);
  });

  it('a reader waiting behind a writer, and a semaphore waiter behind the one waiting for a permit, link to them', async () => {
    const path = uniquePath('rw');
    const [a, b] = await Promise.all([engine(), engine()]);
    const observer = await connect();
    const writing = await new ReadWriteLock(a, 'rw', path).write.acquire();
    const reading = new ReadWriteLock(b, 'rw', path).read.acquire({ waitMs: 20_000 });
    await untilWatching(writing.path, b.connection.session!.id);
    await writing.release();
    await (await reading).release();
    const writeAcquire = named('lock.acquire').find((s) => s.attributes['zk_lock.kind'] === 'write')!;
    const readAcquire = named('lock.acquire').find((s) => s.attributes['zk_lock.kind'] === 'read')!;
    expect(readAcquire.links.map((l) => l.spanId)).toEqual([writeAcquire.spanId]);

    // A semaphore's waiters queue on its internal lock behind the one that waits for a permit.
    exporter.reset();
    const semaphorePath = uniquePath('sem');
    const semaphores = [a, b, b].map((on: LockEngine) => new Semaphore(on, 'sem', semaphorePath, { permits: 1 }));
    const lease = await semaphores[0]!.acquire();
    const second = semaphores[1]!.acquire({ waitMs: 20_000 });
    await untilChildCount(observer, `${semaphorePath}/locks`, 1);
    const third = semaphores[2]!.acquire({ waitMs: 20_000 });
    const [head] = sortChildren(await untilChildCount(observer, `${semaphorePath}/locks`, 2), ['lock-']);
    await untilWatching(`${semaphorePath}/locks/${head}`, b.connection.session!.id);
    await lease.release();
    await (await second).release();
    await (await third).release();
    const [firstSpan, secondSpan, thirdSpan] = named('lock.acquire');
    expect(firstSpan?.links).toEqual([]);
    expect(thirdSpan?.links.map((l) => l.spanId)).toEqual([secondSpan!.spanId]);
    expect(named('lock.hold').map((s) => s.attributes['zk_lock.outcome'])).toEqual(['released', 'released', 'released']);
  });

  (curatorUnavailable ? it.skip : it)("beside Curator: Curator queues behind a traced holder and takes over; a traced waiter behind Curator's node waits with no link", async () => {
    const path = uniquePath('curator');
    const e = await engine();
    const curator = await CuratorPeer.start(zkConnectString());
    try {
      const mutex = new Mutex(e, 'curator', path);
      const lease = await mutex.acquire();
      await curator.mutex('c', path);
      const curatorGot = curator.acquire('c', 30_000);
      await untilChildCount(await connect(), path, 2);
      await lease.release();
      expect(await curatorGot).toBe(true);
      const [curatorNode] = await curator.participants('c');
      const waiting = mutex.acquire({ waitMs: 30_000 });
      await untilWatching(`${path}/${curatorNode}`, e.connection.session!.id);
      await curator.release('c');
      await (await within(waiting, 30_000, 'the traced waiter')).release();
      const waited = named('lock.acquire').at(-1)!;
      expect(waited.attributes).toMatchObject({ 'zk_lock.outcome': 'acquired', 'zk_lock.watched': [curatorNode] });
      expect(waited.links).toEqual([]);
    } finally {
      await curator.close();
    }
  }, 90_000);
});

describe('tracing with an SDK that throws', () => {
  afterEach(() => trace.disable());

  /** A provider whose tracer throws at `startSpan`, or whose spans throw at every update and at `end`. */
  function throwingProvider(where: 'startSpan' | 'span'): TracerProvider {
    const fail = () => {
      throw new Error('a broken span processor');
    };
    const spanContext = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: 1 };
    const span = { spanContext: () => spanContext, isRecording: () => true, setAttribute: fail, setAttributes: fail, addLink: fail, setStatus: fail, recordException: fail, end: fail };
    return { getTracer: () => ({ startSpan: where === 'startSpan' ? fail : () => span }) as unknown as Tracer };
  }

  it.each(['startSpan', 'span'] as const)('never breaks locking (throwing at %s): contended, handed over in process, with work under the lock', async (where) => {
    trace.setGlobalTracerProvider(throwingProvider(where));
    const path = uniquePath(`throwing-${where}`);
    const [a, b] = await Promise.all([engine(), engine()]);
    await contendedCycle(new Mutex(a, 't', path, { coalesce: false }), new Mutex(b, 't', path, { coalesce: false }), await connect(), path);
    const mutex = new Mutex(a, 't', path);
    const first = await mutex.acquire();
    const second = mutex.withLock(() => 'worked', { waitMs: 20_000 });
    await first.release();
    expect(await within(second, 20_000, 'the handed-over caller')).toBe('worked');
    const lost = await mutex.acquire();
    const aborted = whenAborted(lost.signal);
    await (await connect()).session!.delete(lost.path);
    await aborted;
    expect(lost.isHeld).toBe(false);
  });
});

