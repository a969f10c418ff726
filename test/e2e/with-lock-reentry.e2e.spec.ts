import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import { Test } from '@nestjs/testing';
import { LockNotAcquiredError } from '../../lib/core/errors.js';
import { LockContext } from '../../lib/core/leases/lock-context.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { eventually, zkConnectString } from '../support/helpers.js';

// Re-entry followed the async context, which also reaches work the holder merely started: an
// @OnEvent({ async: true }) listener started inside a locked handler ran inside the same exclusive
// lock, at the same time as the holder, with the same fencing token.
const log: string[] = [];
let tokens: bigint[] = [];

@Injectable()
class Orders {
  constructor(private readonly events: EventEmitter2) {}

  @WithLock('order:1', { waitMs: 10_000 })
  async place(): Promise<void> {
    tokens.push(LockContext.current()!.fencingToken);
    log.push('place: in');
    this.events.emit('order.placed'); // the listener starts now, in this async context
    await new Promise((resolve) => setTimeout(resolve, 300));
    log.push('place: out');
  }

  @OnEvent('order.placed', { async: true })
  @WithLock('order:1', { waitMs: 10_000 })
  async onPlaced(): Promise<void> {
    tokens.push(LockContext.current()!.fencingToken);
    log.push('listener: in');
    await new Promise((resolve) => setTimeout(resolve, 50));
    log.push('listener: out');
  }

  @WithLock('order:2', { reentrant: true })
  async outer(): Promise<string> {
    const token = LockContext.current()!.fencingToken;
    return (await this.inner()) === token ? 'same lock, same token' : 'different';
  }

  @WithLock('order:2', { reentrant: true })
  async inner(): Promise<bigint> {
    return LockContext.current()!.fencingToken;
  }

  @WithLock('order:3', { waitMs: 300 })
  async outerWithoutReentry(): Promise<void> {
    await this.innerWithoutReentry();
  }

  @WithLock('order:3', { waitMs: 300 })
  async innerWithoutReentry(): Promise<void> {}
}

@Module({
  imports: [EventEmitterModule.forRoot(), ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: `/e2e-reentry-${process.pid}` })],
  providers: [Orders],
})
class OrdersModule {}

describe('@WithLock re-entry', () => {
  let app: INestApplicationContext;
  beforeAll(async () => {
    app = await (await Test.createTestingModule({ imports: [OrdersModule] }).compile()).init();
  });
  afterAll(() => app?.close());

  it('work the holder started (an async event listener) waits for the lock instead of entering it', async () => {
    log.length = 0;
    tokens = [];
    await app.get(Orders).place();
    await eventually(() => log.includes('listener: out'), 10_000, 10);
    expect(log).toEqual(['place: in', 'place: out', 'listener: in', 'listener: out']);
    expect(new Set(tokens).size).toBe(2);
  });

  it('a nested call re-enters with { reentrant: true }', async () => {
    await expect(app.get(Orders).outer()).resolves.toBe('same lock, same token');
  });

  it('a nested call without it waits for itself, then says why', async () => {
    const error = await app.get(Orders).outerWithoutReentry().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockNotAcquiredError);
    expect((error as Error).message).toContain('this call chain already holds it (Orders.innerWithoutReentry was called inside its own lock); nested @WithLock calls need { reentrant: true }');
  });
});
