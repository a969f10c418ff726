import { Controller, Module, Param, Post, type INestApplication } from '@nestjs/common';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { childrenOf, closeAll, connect, engine, eventually, zkConnectString } from '../support/helpers.js';

// A client that gives up while its request waits for a lock: the wait is cancelled (its node leaves
// the queue) and the handler never runs, on Express and on Fastify.
const basePath = `/e2e-gone-${process.pid}`;
let ran = 0;

@Controller('seats')
class SeatsController {
  @Post(':id')
  @WithLock('seat:{0}', { waitMs: 120_000 })
  async buy(@Param('id') id: string): Promise<string> {
    ran++;
    return `sold ${id}`;
  }
}

@Module({ imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath })], controllers: [SeatsController] })
class AppModule {}

afterAll(closeAll);

describe.each([
  ['Express', () => undefined],
  ['Fastify', () => new FastifyAdapter()],
])('@WithLock on %s when the client disconnects while waiting', (_name, adapter) => {
  let app: INestApplication;
  let url: string;
  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    const httpAdapter = adapter();
    app = httpAdapter ? moduleRef.createNestApplication(httpAdapter, { logger: false }) : moduleRef.createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(() => app?.close());

  it('takes the waiter out of the queue and never runs the handler', async () => {
    const seat = `${_name}-1`;
    const lockPath = `${basePath}/seat:${seat}`;
    const observer = await connect();
    const holder = await new Mutex(await engine(), 'holder', lockPath).acquire();
    ran = 0;
    const client = new AbortController();
    const request = fetch(`${url}/seats/${seat}`, { method: 'POST', signal: client.signal }).catch((e: unknown) => e);
    await eventually(async () => (await childrenOf(observer, lockPath)).length === 2); // the request waits in the queue
    client.abort();
    await request;
    await eventually(async () => (await childrenOf(observer, lockPath)).length === 1, 15_000); // its node left the queue
    await holder.release();
    // Nobody is left to take the lock, and the handler did not run.
    await eventually(async () => (await childrenOf(observer, lockPath)).length === 0);
    expect(ran).toBe(0);
    // A client that stays gets its answer.
    await expect(fetch(`${url}/seats/${seat}`, { method: 'POST' }).then((r) => r.text())).resolves.toBe(`sold ${seat}`);
    expect(ran).toBe(1);
  });
});
