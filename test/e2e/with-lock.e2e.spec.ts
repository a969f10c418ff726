import diagnostics_channel from 'node:diagnostics_channel';
import { Controller, Get, Injectable, Module, Param, Post, Sse, type INestApplication, type MessageEvent } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { Observable } from 'rxjs';
import { LockNotAcquiredError, LockUsageError } from '../../lib/core/errors.js';
import { LockContext } from '../../lib/core/leases/lock-context.js';
import { LockChannels } from '../../lib/core/diagnostics.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockExceptionFilter } from '../../lib/nest/zk-lock-exception.filter.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { childrenOf, closeAll, connect, zkConnectString } from '../support/helpers.js';

const base = `/e2e-withlock-${process.pid}`;

/** A gate the test opens to let a handler finish. */
class Gate {
  private waiters: (() => void)[] = [];
  entered = 0;
  wait(): Promise<void> {
    this.entered++;
    return new Promise((resolve) => this.waiters.push(resolve));
  }
  open(): void {
    this.waiters.splice(0).forEach((resolve) => resolve());
  }
}
const gate = new Gate();

@Controller('events')
class EventsController {
  @Post(':id/hold')
  @WithLock((id: string) => `event:${id}`, { waitMs: 10_000 })
  async hold(@Param('id') id: string): Promise<{ id: string; token: string }> {
    await gate.wait();
    return { id, token: String(LockContext.current()!.fencingToken) };
  }

  // Decorator above the route decorator: the order must not matter.
  @WithLock('event:{0}')
  @Post(':id/try')
  async tryOnce(@Param('id') id: string): Promise<string> {
    return `sold ${id}`;
  }

  @Sse('stream')
  @WithLock('stream')
  stream(): Observable<MessageEvent> {
    return new Observable((subscriber) => {
      let n = 0;
      const timer = setInterval(() => {
        subscriber.next({ data: String(n++) });
        if (n === 3) {
          clearInterval(timer);
          subscriber.complete();
        }
      }, 50);
      return () => clearInterval(timer);
    });
  }

  @Get('fail')
  @WithLock('fails')
  async fail(): Promise<never> {
    throw new Error('boom');
  }
}

@Injectable()
class Listener {
  calls: string[] = [];
  @OnEvent('ticket.sold')
  @WithLock((payload: { id: string }) => `listener:${payload.id}`)
  async onSold(payload: { id: string }): Promise<void> {
    this.calls.push(`${payload.id}@${LockContext.current()?.name}`);
  }

  @WithLock('plain')
  async plain(): Promise<string> {
    return LockContext.current()!.path;
  }
}

@Module({
  imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: base }), EventEmitterModule.forRoot()],
  controllers: [EventsController],
  providers: [Listener, { provide: APP_FILTER, useClass: ZkLockExceptionFilter }],
})
class AppModule {}

afterAll(closeAll);

describe.each([
  ['express', () => new ExpressAdapter()],
  ['fastify', () => new FastifyAdapter()],
])('@WithLock on HTTP handlers over %s', (_name, adapter) => {
  let app: INestApplication;
  let url: string;
  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication(adapter() as never, { logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(() => app?.close());

  const post = (path: string) => fetch(`${url}${path}`, { method: 'POST' });

  it('serializes requests per key and runs different keys in parallel', async () => {
    gate.entered = 0;
    const contended: string[] = [];
    const onContended = (message: unknown) => contended.push((message as { name: string }).name);
    diagnostics_channel.subscribe(LockChannels.contended.name, onContended);
    const a1 = post('/events/1/hold');
    await waitUntil(() => gate.entered === 1);
    const a2 = post('/events/1/hold'); // same key: must wait for a1
    const b = post('/events/2/hold'); // other key: runs at once
    await waitUntil(() => gate.entered === 2);
    // a1 holds event:1 and a2 waits for it — in memory, behind this process's one node (coalescing) —
    // while b holds event:2.
    await waitUntil(() => contended.includes('event:1'));
    diagnostics_channel.unsubscribe(LockChannels.contended.name, onContended);
    const observer = await connect();
    expect(await childrenOf(observer, `${base}/event:1`)).toHaveLength(1);
    expect(await childrenOf(observer, `${base}/event:2`)).toHaveLength(1);
    expect(gate.entered).toBe(2);
    gate.open();
    await waitUntil(() => gate.entered === 3); // a2 got the lock once a1 released
    gate.open();
    const bodies = await Promise.all([a1, a2, b].map(async (r) => ((await r).status === 201 ? (await r).json() : (await r).status)));
    expect(bodies.map((x) => (x as { id: string }).id)).toEqual(['1', '1', '2']);
    const [t1, t2] = bodies.map((x) => BigInt((x as { token: string }).token));
    expect(t2!).toBeGreaterThan(t1!);
  });

  it('answers 409 with Retry-After on contention with try-once, without leaking the key, and 2xx after release', async () => {
    gate.entered = 0;
    const holding = post('/events/7/hold');
    await waitUntil(() => gate.entered === 1);
    const busy = await post('/events/7/try');
    expect(busy.status).toBe(409);
    expect(busy.headers.get('retry-after')).toBe('1');
    const text = await busy.text();
    expect(text).not.toContain('event:7');
    gate.open();
    await holding;
    const free = await post('/events/7/try');
    expect(free.status).toBe(201);
    expect(await free.text()).toBe('sold 7');
  });

  it('holds the lock of an Observable (SSE) handler until it completes', async () => {
    const observer = await connect();
    const response = fetch(`${url}/events/stream`);
    await waitUntil(async () => (await childrenOf(observer, `${base}/stream`)).length === 1);
    const body = await (await response).text();
    expect(body).toContain('data: 2');
    await waitUntil(async () => (await childrenOf(observer, `${base}/stream`)).length === 0);
  });

  it('releases the lock when the handler throws', async () => {
    expect((await fetch(`${url}/events/fail`)).status).toBe(500);
    const observer = await connect();
    expect(await childrenOf(observer, `${base}/fails`)).toEqual([]);
  });
});

describe('@WithLock outside HTTP', () => {
  it('locks @OnEvent listeners and plain provider methods (LockContext is visible inside)', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    moduleRef.useLogger(false);
    const app = await moduleRef.init();
    const listener = app.get(Listener);
    await app.get(EventEmitter2).emitAsync('ticket.sold', { id: '9' });
    expect(listener.calls).toEqual(['9@listener:9']);
    expect(await listener.plain()).toMatch(`${base}/plain/_c_`);
    await app.close();
  });

  it('fails closed when the instance was not created by Nest (no LockService)', async () => {
    await expect(new Listener().plain()).rejects.toBeInstanceOf(LockUsageError);
  });

  it('throws a typed LockNotAcquiredError (not an HttpException) when a plain method is locked elsewhere', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    moduleRef.useLogger(false);
    const app = await moduleRef.init();
    const listener = app.get(Listener);
    const other = await connect();
    const { LockEngine } = await import('../../lib/core/lock-engine.js');
    const { Mutex } = await import('../../lib/core/recipes/mutex.js');
    const held = await new Mutex(new LockEngine(other), 'plain', `${base}/plain`).acquire();
    await expect(listener.plain()).rejects.toBeInstanceOf(LockNotAcquiredError);
    await held.release();
    await app.close();
  });
});

async function waitUntil(probe: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}
