import { Injectable, Module, type INestApplicationContext, type LoggerService, type Provider } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { Interval } from '@nestjs/schedule';
import { lastValueFrom, Observable, of } from 'rxjs';
import { LockService } from '../../lib/nest/lock.service.js';
import { LockUsageError } from '../../lib/core/errors.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { childrenOf, closeAll, connect, engine, eventually, zkConnectString } from '../support/helpers.js';

// Misuse gets its own message, at the earliest moment: a provider that Nest built by useFactory
// booted and then failed at the first call with "LockService was not injected"; a static method
// and a detached call got that same misleading message.
@Injectable()
class Reports {
  @WithLock('report')
  async rebuild(): Promise<string> {
    return 'rebuilt';
  }
}

const zk = () => ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: `/e2e-usage-${process.pid}` });

/** Runs `body` against an app of `providers` over ZooKeeper, and closes the app. */
async function withApp(providers: Provider[], body: (app: INestApplicationContext) => Promise<void>): Promise<void> {
  @Module({ imports: [zk()], providers })
  class AppModule {}
  const app = await (await Test.createTestingModule({ imports: [AppModule] }).compile()).init();
  try {
    await body(app);
  } finally {
    await app.close();
  }
}

describe('@WithLock misuse', () => {
  it('a provider built by useFactory fails the bootstrap, naming the fix', async () => {
    @Module({ imports: [zk()], providers: [{ provide: 'REPORTS', useFactory: () => new Reports() }] })
    class FactoryModule {}
    const moduleRef = await Test.createTestingModule({ imports: [FactoryModule] }).compile();
    const app = moduleRef.createNestApplication();
    try {
      await expect(app.init()).rejects.toThrow(/Reports\.rebuild: provider REPORTS was not built from its class by Nest \(useFactory or useValue\)/);
    } finally {
      await app.close();
    }
  });

  it('a static method is refused where it is declared', () => {
    expect(() => {
      class Jobs {
        @WithLock('nightly')
        static async run(): Promise<void> {}
      }
      return Jobs;
    }).toThrow(new LockUsageError('@WithLock cannot decorate a static method (Jobs.run); use an instance method of a provider'));
  });

  // The wrapper waits for the lock, so it always answers with a Promise: a method typed to return
  // a plain value would lie about its type, and its synchronous throw would become a rejection
  // nobody awaits. `npm test` type-checks this file: the directive fails if the decorator accepts it.
  it('a method with a synchronous return type does not compile', () => {
    class Counter {
      // @ts-expect-error -- @WithLock needs a Promise, Observable or async generator return type
      @WithLock('count')
      count(): number {
        return 1;
      }

      @WithLock('count')
      async countLater(): Promise<number> {
        return 1;
      }

      // A sync generator would be iterated after the release.
      // @ts-expect-error -- @WithLock needs a Promise, Observable or async generator return type
      @WithLock('count')
      *counts(): Generator<number> {
        yield 1;
      }
    }
    expect(Counter).toBeDefined();
  });

  // A key function is called with the method's arguments: one that takes other types, or more
  // parameters than the method has, does not compile.
  it('a key function that cannot take the method\'s arguments does not compile', () => {
    class Orders {
      @WithLock((id: string) => `order:${id}`)
      async pay(id: string, amount: number): Promise<number> {
        return id.length + amount;
      }

      // @ts-expect-error -- the key function takes a number, the method passes a string
      @WithLock((id: number) => `order:${id}`)
      async refund(id: string): Promise<void> {}

      // @ts-expect-error -- the key function wants a second argument the method never gets
      @WithLock((from: string, to: string) => [`account:${from}`, `account:${to}`])
      async close(account: string): Promise<void> {}

      @WithLock((from: string, to: string) => [`account:${from}`, `account:${to}`])
      async transfer(from: string, to: string, amount: number): Promise<number> {
        return amount;
      }
    }
    expect(Orders).toBeDefined();
  });

  it('warns at startup when a wrapping decorator sits above @WithLock (its commit would run after the release)', async () => {
    /** A @Transactional-style decorator: wraps the method and copies its metadata, as such decorators do. */
    const Transactional = (): MethodDecorator => (_target, _key, descriptor: PropertyDescriptor) => {
      const inner = descriptor.value as (...args: unknown[]) => Promise<unknown>;
      const wrapped = async function (this: unknown, ...args: unknown[]) {
        return inner.apply(this, args); // begin … commit around the call
      };
      for (const key of Reflect.getMetadataKeys(inner)) Reflect.defineMetadata(key, Reflect.getMetadata(key, inner), wrapped);
      descriptor.value = wrapped;
    };
    @Injectable()
    class Seats {
      @Transactional()
      @WithLock('seat')
      async wrongOrder(): Promise<void> {}

      @WithLock('seat')
      @Transactional()
      async rightOrder(): Promise<void> {}
    }
    @Module({ imports: [zk()], providers: [Seats] })
    class SeatsModule {}
    const warnings: string[] = [];
    const logger: LoggerService = { log: () => {}, error: () => {}, warn: (m: unknown) => void warnings.push(String(m)) };
    const moduleRef = await Test.createTestingModule({ imports: [SeatsModule] }).compile();
    moduleRef.useLogger(logger);
    const app = await moduleRef.createNestApplication({ logger }).init();
    try {
      expect(warnings.filter((w) => w.includes('@WithLock'))).toEqual([
        'Seats.wrongOrder: a decorator above @WithLock wraps this method, so what it does after the call (e.g. commit a transaction) happens after the lock is released. Put @WithLock above it.',
      ]);
    } finally {
      await app.close();
    }
  });

  // A method declared Observable that returned null on some path kept its lock forever (the
  // teardown that releases it was never registered).
  it('a declared-Observable method that returns null releases its lock', async () => {
    @Injectable()
    class Feed {
      @WithLock('feed', { waitMs: 5000 })
      updates(empty: boolean): Observable<number> {
        return (empty ? null : of(1, 2)) as Observable<number>;
      }
    }
    await withApp([Feed], async (app) => {
      const feed = app.get(Feed);
      await expect(lastValueFrom(feed.updates(false))).resolves.toBe(2);
      await expect(lastValueFrom(feed.updates(true), { defaultValue: 'none' })).resolves.toBe('none');
      // Free again: a try-once acquire of the same lock succeeds.
      const lease = await app.get(LockService).mutex('feed').acquire({ waitMs: 0 });
      await lease.release();
    });
  });

  it('a subscriber that unsubscribes while waiting takes its waiter out of the queue', async () => {
    @Injectable()
    class Ticker {
      @WithLock('ticker', { waitMs: 30_000 })
      ticks(): Observable<number> {
        return of(1);
      }
    }
    const observer = await connect();
    try {
      await withApp([Ticker], async (app) => {
        const locks = app.get(LockService);
        const path = locks.pathOf('ticker');
        // Held by another client (in-process waiters would queue locally, not in ZooKeeper).
        const holder = await new Mutex(await engine(), 'ticker', path).acquire();
        const subscription = app.get(Ticker).ticks().subscribe();
        await eventually(async () => (await childrenOf(observer, path)).length === 2, 10_000, 20); // queued
        subscription.unsubscribe();
        await eventually(async () => (await childrenOf(observer, path)).length === 1, 10_000, 20); // only the holder
        await holder.release();
      });
    } finally {
      await closeAll();
    }
  });

  // Observable rules: Nest's HTTP, SSE and RPC layers subscribe to what a handler returns;
  // schedulers and event emitters discard it.
  it('an Observable returned without a declared type: held while subscribed at once, released when discarded', async () => {
    @Injectable()
    class Streams {
      @WithLock('undeclared', { waitMs: 5000 })
      async numbers() {
        return of(1, 2, 3);
      }
    }
    await withApp([Streams], async (app) => {
      const streams = app.get(Streams);
      const locks = app.get(LockService);
      // Subscribed at once (as Nest's router does): values arrive, then the lock is free.
      await expect(lastValueFrom(await streams.numbers())).resolves.toBe(3);
      await (await locks.mutex('undeclared').acquire({ waitMs: 0 })).release();
      // Discarded (as a scheduler does): the lock goes after this turn of the event loop (it was kept forever).
      const discarded = await streams.numbers();
      await new Promise((resolve) => setImmediate(resolve));
      await (await locks.mutex('undeclared').acquire({ waitMs: 2000 })).release();
      // And a late subscriber never runs the stream unlocked.
      await expect(lastValueFrom(discarded)).rejects.toThrow(/subscribed after the lock was released/);
    });
  });

  it('a job declared to return an Observable (whose body would never run) fails the bootstrap', async () => {
    @Injectable()
    class Poller {
      @Interval(1000)
      @WithLock('poll')
      poll(): Observable<number> {
        return of(1);
      }
    }
    @Module({ imports: [zk()], providers: [Poller] })
    class PollerModule {}
    const app = (await Test.createTestingModule({ imports: [PollerModule] }).compile()).createNestApplication();
    try {
      await expect(app.init()).rejects.toThrow('@WithLock on Poller.poll: a job or event listener declared to return an Observable never runs');
    } finally {
      await app.close();
    }
  });

  it('a detached call says so', async () => {
    await withApp([Reports], async (app) => {
      const reports = app.get(Reports);
      await expect(reports.rebuild()).resolves.toBe('rebuilt');
      const detached = reports.rebuild;
      await expect(detached()).rejects.toThrow('@WithLock on Reports.rebuild: called without its instance (as a detached function); call it as a method or bind it');
    });
  });
});
