import { Body, Controller, Get, Module, Post, type INestApplication, type LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { randomUUID } from 'node:crypto';
import { InvalidOptionError } from '../../lib/core/errors.js';
import { SECURE_PARENT_ACL } from '../../lib/core/lock-engine.js';
import { CreateMode } from '../../lib/core/client/session.js';
import type { WithLockOptions } from '../../lib/nest/with-lock-options.interface.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import type { ZkLockModuleOptions } from '../../lib/nest/zk-lock-module-options.interface.js';
import { closeAll, connect, zkConnectString } from '../support/helpers.js';

// What a caller and the operator learn when @WithLock cannot run: a bad decorator option fails
// where it is written (never a request), a key the request cannot turn into a lock name is a 400
// that says why, and ZooKeeper refusing the application's credentials (NOAUTH) is a 503 with a log
// line naming the fix, not an unknown 500 (ZkLockModule answers them: nothing else registered).

class CapturedLog implements LoggerService {
  readonly lines: { level: string; message: string }[] = [];
  log = (message: unknown) => void this.lines.push({ level: 'log', message: String(message) });
  error = (message: unknown) => void this.lines.push({ level: 'error', message: String(message) });
  warn = (message: unknown) => void this.lines.push({ level: 'warn', message: String(message) });
  debug = () => undefined;
  verbose = () => undefined;
  at(level: string): string[] {
    return this.lines.filter((l) => l.level === level).map((l) => l.message);
  }
}

const apps: INestApplication[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
});
afterAll(closeAll);

async function serve(controller: Function, options: Partial<ZkLockModuleOptions> = {}, logger = new CapturedLog()): Promise<{ url: string; logger: CapturedLog }> {
  @Module({
    imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: `/e2e-errors-${process.pid}`, ...options } as ZkLockModuleOptions)],
    controllers: [controller as never],
  })
  class AppModule {}
  const app = (await Test.createTestingModule({ imports: [AppModule] }).compile()).createNestApplication({ logger });
  apps.push(app);
  await app.listen(0, '127.0.0.1');
  return { url: await app.getUrl(), logger };
}

describe('a bad @WithLock option', () => {
  it.each([
    ['a negative waitMs', { waitMs: -5 }, 'waitMs', '-5'],
    ['a NaN waitMs', { waitMs: Number.NaN }, 'waitMs', 'NaN'],
    ['a leaseMs of 1e12', { leaseMs: 1e12 }, 'leaseMs', '1000000000000'],
    ['a minHoldMs of 1e12', { minHoldMs: 1e12 }, 'minHoldMs', '1000000000000'],
  ])('fails where it is written, naming the option, its value and the lock: %s', (_label, options, option, value) => {
    let error: unknown;
    try {
      WithLock('orders', options as WithLockOptions);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidOptionError);
    expect((error as InvalidOptionError).option).toBe(option);
    expect((error as Error).message).toContain(`got ${value}`);
    expect((error as Error).message).toContain('@WithLock("orders"');
  });

  it('changed in its object after the decorator read it, never reaches a call (the validated options stay)', async () => {
    const options: { waitMs: number } = { waitMs: 100 };
    @Controller('changed')
    class Changed {
      @Get()
      @WithLock(`changed-${randomUUID()}`, options)
      async handle(): Promise<string> {
        return 'ran';
      }
    }
    options.waitMs = -5;
    const { url } = await serve(Changed);
    const response = await fetch(`${url}/changed`);
    expect({ status: response.status, body: await response.text() }).toEqual({ status: 200, body: 'ran' });
  });
});

describe('a key the request cannot turn into a lock name', () => {
  @Controller('tickets')
  class Tickets {
    @Post()
    @WithLock((dto: { name: string }) => dto.name)
    async book(@Body() _dto: { name: string }): Promise<string> {
      return 'booked';
    }
  }

  async function post(url: string, name: string): Promise<{ status: number; body: { statusCode: number; message: string } ; length: number }> {
    const response = await fetch(`${url}/tickets`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name }) });
    const text = await response.text();
    return { status: response.status, body: JSON.parse(text) as { statusCode: number; message: string }, length: text.length };
  }

  it('is a 400 that says which character ZooKeeper does not allow, and the log says so too', async () => {
    const { url, logger } = await serve(Tickets);
    const answer = await post(url, 'seat-\ud83c');
    expect(answer.status).toBe(400);
    expect(answer.body.message).toContain('contains a character ZooKeeper does not allow (U+D83C)');
    expect(logger.at('warn').join('\n')).toContain('contains a character ZooKeeper does not allow (U+D83C)');
  });

  it('is a 400 that says the name is too long without echoing it; the log quotes only its start', async () => {
    const { url, logger } = await serve(Tickets);
    const answer = await post(url, 'x'.repeat(10_000));
    expect(answer.status).toBe(400);
    expect(answer.body.message).toMatch(/characters long \(at most 1024\)/);
    expect(answer.body).toMatchObject({ reason: 'invalid-lock-key' });
    expect(JSON.stringify(answer.body)).not.toContain('xxxx');
    expect(answer.length).toBeLessThan(300);
    const warned = logger.at('warn').join('\n');
    expect(warned).toMatch(/characters long \(at most 1024\)/);
    expect(warned).toContain('(10000 characters)');
    expect(warned.length).toBeLessThan(600);
  });
});

describe('ZooKeeper refusing the application\'s credentials (NOAUTH)', () => {
  it('is a 503 with a log line naming the credentials as the cause', async () => {
    // basePath is open (the bootstrap check passes), but this lock's path belongs to other
    // credentials (another deployment's, say): persistent, so that no reaper removes it meanwhile.
    const basePath = `/e2e-noauth-${process.pid}-${randomUUID().slice(0, 8)}`;
    await (await connect()).session!.create(basePath, Buffer.alloc(0), CreateMode.PERSISTENT);
    const owner = await connect({ auth: { credentials: 'owner:s3cret' } });
    await owner.session!.create(`${basePath}/orders`, Buffer.alloc(0), CreateMode.PERSISTENT, SECURE_PARENT_ACL);

    @Controller('orders')
    class Orders {
      @Get()
      @WithLock('orders')
      async handle(): Promise<string> {
        return 'ran';
      }
    }
    const { url, logger } = await serve(Orders, { basePath, auth: { credentials: 'app:wrong' } });
    const response = await fetch(`${url}/orders`);
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('5');
    expect(await response.json()).toEqual({ statusCode: 503, error: 'Service Unavailable', message: 'The lock service is unavailable; retry later', reason: 'zookeeper-unavailable' });
    expect(logger.at('error')).toEqual([expect.stringMatching(/ZooKeeper refused this application \(NOAUTH\).*auth option/)]);
  });
});
