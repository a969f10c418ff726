import {
  Body,
  Catch,
  Controller,
  Get,
  HttpException,
  ImATeapotException,
  Injectable,
  Module,
  Post,
  UseGuards,
  type ArgumentsHost,
  type DynamicModule,
  type CanActivate,
  type ExceptionFilter,
  type INestApplication,
  type LoggerService,
  type Provider,
} from '@nestjs/common';
import { APP_FILTER, HttpAdapterHost } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { InvalidOptionError } from '../../lib/core/errors.js';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockExceptionFilter } from '../../lib/nest/zk-lock-exception.filter.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { ZkLockTestingModule } from '../../lib/testing/index.js';
import { closeAll, eventually, zkConnectString } from '../support/helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';

// The answers an application gets with ZkLockModule.forRoot and @WithLock and nothing else, on
// Express and Fastify: contention is a 409 with Retry-After, a key ZooKeeper cannot take a 400
// that says why without echoing the key, ZooKeeper away a 503; each body has a `reason`. Errors
// that are not the library's pass through untouched, the application's own filters keep working
// (registered either way, one that catches everything included), a ZkLockExceptionFilter
// registered by hand answers no twice, and `answerErrors: false` leaves it all to the application.
// (RPC: with-lock-microservice.e2e.spec.ts; WebSocket gateways: with-lock-websocket.e2e.spec.ts.)

const basePath = `/e2e-answers-${process.pid}`;
const LONG_KEY = 'k'.repeat(5_000);

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Per seat: resolved when its holder is inside, and the gate the holder waits on. */
const holders = new Map<string, { inside: ReturnType<typeof deferred>; gate: ReturnType<typeof deferred> }>();
function holderOf(seat: string) {
  let holder = holders.get(seat);
  if (!holder) holders.set(seat, (holder = { inside: deferred(), gate: deferred() }));
  return holder;
}

class OwnError extends Error {}

@Injectable()
class InspectingGuard implements CanActivate {
  constructor(private readonly locks: LockService) {}
  async canActivate(): Promise<boolean> {
    await this.locks.inspect(LONG_KEY); // a library error raised outside the handler
    return true;
  }
}

@Controller()
class Seats {
  constructor(private readonly locks: LockService) {}

  // Tries once (the default): the second buyer of a held seat is refused at once.
  @Post('seats')
  @WithLock('seat:{0.seat}')
  async buy(@Body() dto: { seat: string }): Promise<{ sold: string }> {
    const holder = holderOf(dto.seat);
    holder.inside.resolve();
    await holder.gate.promise;
    return { sold: dto.seat };
  }

  @Post('waiting')
  @WithLock('seat:{0.seat}', { waitMs: 1_000 })
  async buyWaiting(@Body() dto: { seat: string }): Promise<{ sold: string }> {
    return { sold: dto.seat };
  }

  @Get('locks')
  async locksNow(): Promise<unknown> {
    return this.locks.inspect({ signal: AbortSignal.timeout(500) });
  }

  @Get('guarded')
  @UseGuards(InspectingGuard)
  guarded(): string {
    return 'passed';
  }

  @Get('boom')
  boom(): never {
    throw new Error('boom');
  }

  @Get('teapot')
  teapot(): never {
    throw new ImATeapotException();
  }

  @Get('own')
  own(): never {
    throw new OwnError('own');
  }
}

interface Answer {
  status: number;
  retryAfter: string | null;
  body: any;
  text: string;
}

async function request(url: string, path: string, body?: object): Promise<Answer> {
  const response = await fetch(`${url}${path}`, body ? { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {});
  const text = await response.text();
  return { status: response.status, retryAfter: response.headers.get('retry-after'), body: text ? JSON.parse(text) : undefined, text };
}

/** Two buyers of one seat at once: the first holds it until released, the second is answered meanwhile. */
async function twoBuyers(url: string): Promise<{ first: Answer; second: Answer }> {
  const seat = randomUUID();
  const holder = holderOf(seat);
  const first = request(url, '/seats', { seat });
  await holder.inside.promise;
  const second = await request(url, '/seats', { seat });
  holder.gate.resolve();
  return { first: await first, second };
}

class CapturedLog implements LoggerService {
  readonly lines: string[] = [];
  log = () => undefined;
  error = (message: unknown, ...rest: unknown[]) => void this.lines.push(`error ${String(message)} ${rest.map(String).join(' ')}`);
  warn = (message: unknown) => void this.lines.push(`warn ${String(message)}`);
  debug = () => undefined;
  verbose = () => undefined;
}

const adapters = [
  ['Express', () => undefined],
  ['Fastify', () => new FastifyAdapter()],
] as const;
type AdapterName = (typeof adapters)[number][0];

interface Started {
  app: INestApplication;
  url: string;
  log: CapturedLog;
}
const apps: INestApplication[] = [];

async function start(
  lockModule: DynamicModule = ZkLockModule.forRoot({ connectString: zkConnectString(), basePath }),
  { adapter = 'Express' as AdapterName, providers = [] as Provider[], configure = (_app: INestApplication) => {} } = {},
): Promise<Started> {
  @Module({ imports: [lockModule], controllers: [Seats], providers: [InspectingGuard, ...providers] })
  class AppModule {}
  const log = new CapturedLog();
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const httpAdapter = adapters.find(([name]) => name === adapter)![1]();
  const app = httpAdapter ? moduleRef.createNestApplication(httpAdapter, { logger: log }) : moduleRef.createNestApplication({ logger: log });
  apps.push(app);
  configure(app);
  await app.listen(0, '127.0.0.1');
  return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1'), log };
}

/** An application the describe block closes itself (not after each test). */
async function startShared(...args: Parameters<typeof start>): Promise<Started> {
  const started = await start(...args);
  apps.splice(apps.indexOf(started.app), 1);
  return started;
}

afterEach(async () => {
  for (const holder of holders.values()) holder.gate.resolve(); // a failed case leaves no handler waiting
  await Promise.all(apps.splice(0).map((app) => app.close()));
});
afterAll(closeAll);

const busy = { statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', reason: 'lock-timeout' };
const unavailable = { statusCode: 503, error: 'Service Unavailable', message: 'The lock service is unavailable; retry later', reason: 'zookeeper-unavailable' };

describe.each(adapters)('ZkLockModule.forRoot and @WithLock alone, on %s', (adapter) => {
  describe('ZooKeeper up', () => {
    let started: Started;
    beforeAll(async () => {
      started = await startShared(undefined, { adapter });
    });
    afterAll(() => started?.app.close());
    afterEach(() => void (started.log.lines.length = 0));

    it('answers two buyers of one seat at once with 201 and 409 (Retry-After: 1, reason lock-timeout)', async () => {
      const { first, second } = await twoBuyers(started.url);
      expect(first.status).toBe(201);
      expect(second).toMatchObject({ status: 409, retryAfter: '1', body: busy });
      expect(second.body).toEqual(busy); // nothing names the lock
      expect(started.log.lines).toEqual([]); // contention is no error
    });

    it('answers a 5 000-character key with 400 and reason invalid-lock-key, saying why without echoing the key', async () => {
      const answer = await request(started.url, '/seats', { seat: LONG_KEY });
      expect(answer).toMatchObject({ status: 400, retryAfter: null });
      expect(answer.body).toEqual({
        statusCode: 400,
        error: 'Bad Request',
        message: expect.stringMatching(/^The request cannot name a lock: its path is \d+ characters long \(at most 1024\)$/),
        reason: 'invalid-lock-key',
      });
      expect(answer.text).not.toContain('kkkk');
      expect(answer.text).not.toContain(basePath);
      expect(started.log.lines).toEqual([expect.stringMatching(/^warn Answered 400: the request cannot name a lock \("seat:k{59}"… \(5005 characters\)\)/)]);
    });

    it('answers a library error raised outside the handler (a guard) the same way', async () => {
      const answer = await request(started.url, '/guarded');
      expect(answer).toMatchObject({ status: 400, body: { statusCode: 400, reason: 'invalid-lock-key' } });
      expect(answer.text).not.toContain('kkkk');
    });

    it("passes other errors through untouched: Nest's own 500 (and its log) and an HttpException's own answer", async () => {
      expect(await request(started.url, '/boom')).toMatchObject({ status: 500, body: { statusCode: 500, message: 'Internal server error' } });
      expect((await request(started.url, '/boom')).body).toEqual({ statusCode: 500, message: 'Internal server error' });
      expect(started.log.lines.some((line) => line.startsWith('error') && line.includes('boom'))).toBe(true);
      expect(await request(started.url, '/teapot')).toMatchObject({ status: 418, retryAfter: null, body: { statusCode: 418, message: "I'm a teapot" } });
    });
  });

  describe('ZooKeeper away', () => {
    let started: Started;
    let proxy: TcpProxy;
    beforeAll(async () => {
      proxy = await TcpProxy.start(zkConnectString());
      started = await startShared(ZkLockModule.forRoot({ connectString: proxy.connectString, basePath, sessionTimeoutMs: 20_000 }), { adapter });
    });
    afterEach(() => proxy.restore());
    afterAll(async () => {
      await started?.app.close();
      await proxy?.close();
    });

    it('answers a lock call with 503 (Retry-After: 5, reason zookeeper-unavailable), and an inspect() bounded by a signal too', async () => {
      const connection = started.app.get(ZkConnection);
      proxy.cut();
      await eventually(() => connection.state === 'suspended', 20_000);
      const seat = await request(started.url, '/waiting', { seat: 'away' });
      expect(seat).toMatchObject({ status: 503, retryAfter: '5' });
      expect(seat.body).toEqual(unavailable);
      const locks = await request(started.url, '/locks');
      expect(locks).toMatchObject({ status: 503, retryAfter: '5' });
      expect(locks.body).toEqual(unavailable);
      expect(started.log.lines.filter((line) => line.startsWith('error'))).toEqual([]); // an outage is no bug

      proxy.restore();
      await eventually(() => connection.state === 'connected', 30_000);
      expect(await request(started.url, '/waiting', { seat: 'away' })).toMatchObject({ status: 201, body: { sold: 'away' } });
    }, 60_000);
  });
});

/** A filter that catches everything, as in Nest's documentation: HttpExceptions keep their status. */
@Catch()
class CatchEverything implements ExceptionFilter {
  static seen: unknown[] = [];
  constructor(private readonly adapterHost: HttpAdapterHost) {}
  catch(exception: unknown, host: ArgumentsHost): void {
    CatchEverything.seen.push(exception);
    const { httpAdapter } = this.adapterHost;
    const status = exception instanceof HttpException ? exception.getStatus() : 500;
    const detail = exception instanceof HttpException ? exception.getResponse() : String(exception);
    httpAdapter.reply(host.switchToHttp().getResponse(), { by: 'CatchEverything', status, detail }, status);
  }
}

/** A filter for the application's own errors. */
@Catch(OwnError)
class OwnErrors implements ExceptionFilter {
  constructor(private readonly adapterHost: HttpAdapterHost) {}
  catch(_exception: OwnError, host: ArgumentsHost): void {
    this.adapterHost.httpAdapter.reply(host.switchToHttp().getResponse(), { by: 'OwnErrors' }, 422);
  }
}

describe("the application's own global filters", () => {
  beforeEach(() => void (CatchEverything.seen = []));

  const registrations = [
    ['app.useGlobalFilters', (filter: new (host: HttpAdapterHost) => ExceptionFilter) => ({ configure: (app: INestApplication) => void app.useGlobalFilters(new filter(app.get(HttpAdapterHost))) })],
    ['APP_FILTER', (filter: new (host: HttpAdapterHost) => ExceptionFilter) => ({ providers: [{ provide: APP_FILTER, useClass: filter }] })],
  ] as const;

  it.each(registrations)('a filter for its own errors (%s) keeps them, and contention stays a 409', async (_how, register) => {
    const { url } = await start(undefined, register(OwnErrors));
    expect(await request(url, '/own')).toMatchObject({ status: 422, body: { by: 'OwnErrors' } });
    const { first, second } = await twoBuyers(url);
    expect([first.status, second.status]).toEqual([201, 409]);
    expect(second).toMatchObject({ retryAfter: '1', body: busy });
  });

  it.each(registrations)('a filter that catches everything (%s) answers every error, contention as the 409 it is', async (_how, register) => {
    const { url } = await start(undefined, register(CatchEverything));
    expect(await request(url, '/boom')).toMatchObject({ status: 500, body: { by: 'CatchEverything' } });
    const { first, second } = await twoBuyers(url);
    expect(first.status).toBe(201);
    expect(second).toMatchObject({ status: 409, retryAfter: '1', body: { by: 'CatchEverything', status: 409, detail: busy } });
    const long = await request(url, '/seats', { seat: LONG_KEY });
    expect(long).toMatchObject({ status: 400, body: { by: 'CatchEverything', detail: { reason: 'invalid-lock-key' } } });
    expect(CatchEverything.seen).toHaveLength(3);
  });
});

describe('ZkLockExceptionFilter registered by hand, as before', () => {
  it.each<[string, { providers?: Provider[]; configure?: (app: INestApplication) => void }]>([
    ['APP_FILTER', { providers: [{ provide: APP_FILTER, useClass: ZkLockExceptionFilter }] }],
    ['app.useGlobalFilters', { configure: (app: INestApplication) => void app.useGlobalFilters(new ZkLockExceptionFilter(app.get(HttpAdapterHost))) }],
  ])('(%s) answers nothing twice: one 409, one 400 and one log line', async (_how, registration) => {
    const { url, log } = await start(undefined, registration);
    const { first, second } = await twoBuyers(url);
    expect([first.status, second.status]).toEqual([201, 409]);
    expect(second.body).toEqual(busy);
    const long = await request(url, '/seats', { seat: LONG_KEY });
    expect(long).toMatchObject({ status: 400, body: { reason: 'invalid-lock-key' } });
    expect(log.lines).toEqual([expect.stringMatching(/^warn Answered 400/)]);
  });
});

describe('the options', () => {
  it("answerErrors: false registers nothing: contention is Nest's 500 unless the application maps it (here with ZkLockExceptionFilter)", async () => {
    const bare = await start(ZkLockModule.forRoot({ connectString: zkConnectString(), basePath, answerErrors: false }));
    const { second } = await twoBuyers(bare.url);
    expect(second).toMatchObject({ status: 500, retryAfter: null });
    expect(second.body).toEqual({ statusCode: 500, message: 'Internal server error' });

    const mapped = await start(ZkLockModule.forRoot({ connectString: zkConnectString(), basePath, answerErrors: false }), {
      providers: [{ provide: APP_FILTER, useClass: ZkLockExceptionFilter }],
    });
    expect((await twoBuyers(mapped.url)).second).toMatchObject({ status: 409, retryAfter: '1', body: busy });
  });

  it('answerErrors beside useFactory in forRootAsync', async () => {
    const { url } = await start(ZkLockModule.forRootAsync({ useFactory: () => ({ connectString: zkConnectString(), basePath }), answerErrors: false }));
    expect((await twoBuyers(url)).second.status).toBe(500);
  });

  it('answerLockNames: true names the lock in the answers (at most 64 characters of a refused one)', async () => {
    const { url } = await start(ZkLockModule.forRoot({ connectString: zkConnectString(), basePath, answerLockNames: true }));
    const { second } = await twoBuyers(url);
    expect(second.body).toEqual({ ...busy, lockName: expect.stringMatching(/^seat:[0-9a-f-]{36}$/) });
    const long = await request(url, '/seats', { seat: LONG_KEY });
    expect(long.body).toMatchObject({ reason: 'invalid-lock-key', lockName: `seat:${'k'.repeat(59)}…` });
    expect(long.body.message).toContain('(5005 characters)');
    expect(long.text.length).toBeLessThan(600);
  });

  it('ZkLockTestingModule answers as ZkLockModule does, and takes the same options', async () => {
    const { url } = await start(ZkLockTestingModule.forRoot());
    expect((await twoBuyers(url)).second).toMatchObject({ status: 409, retryAfter: '1', body: busy });
    expect(await request(url, '/seats', { seat: LONG_KEY })).toMatchObject({ status: 400, body: { reason: 'invalid-lock-key' } });
    const bare = await start(ZkLockTestingModule.forRoot({ answerErrors: false }));
    expect((await twoBuyers(bare.url)).second.status).toBe(500);
  });

  it('are validated: a value that is not a boolean, or one returned by the factory of forRootAsync, fails naming the option', async () => {
    expect(() => ZkLockModule.forRoot({ connectString: zkConnectString(), answerErrors: 'no' as never })).toThrow(
      new InvalidOptionError('answerErrors', 'expected true or false, got "no"'),
    );
    expect(() => ZkLockModule.forRootAsync({ useFactory: () => ({ connectString: zkConnectString() }), answerLockNames: 1 as never })).toThrow(InvalidOptionError);
    const misplaced = start(ZkLockModule.forRootAsync({ useFactory: () => ({ connectString: zkConnectString(), basePath, answerErrors: false }) as never }));
    await expect(misplaced).rejects.toThrow(/Invalid option "answerErrors": .*beside useFactory/);
  });
});
