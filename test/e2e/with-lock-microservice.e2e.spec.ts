import { createServer } from 'node:net';
import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { ClientProxyFactory, MessagePattern, Payload, Transport, type ClientProxy } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { firstValueFrom, timeout } from 'rxjs';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { closeAll, eventually, zkConnectString } from '../support/helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';

// A TCP microservice with ZkLockModule and nothing else registered: a caller that meets a busy lock
// must get an error reply at once with the answer's reason (not wait for its own timeout: with a
// filter rethrowing outside HTTP, Nest's RPC path sent nothing at all), a key ZooKeeper cannot
// take a 400 that does not echo it, and ZooKeeper away a 503.
let release: () => void = () => {};
const held = new Promise<void>((resolve) => (release = resolve));

@Controller()
class SeatsHandler {
  @MessagePattern('hold')
  @WithLock((id: number) => `seat:${id}`, { waitMs: 10_000 })
  async hold(@Payload() id: number): Promise<string> {
    await held;
    return `held ${id}`;
  }

  @MessagePattern('buy')
  @WithLock((id: number | string) => `seat:${id}`)
  async buy(@Payload() id: number | string): Promise<string> {
    return `sold ${id}`;
  }

  @MessagePattern('buy-waiting')
  @WithLock((id: number) => `seat:${id}`, { waitMs: 1_000 })
  async buyWaiting(@Payload() id: number): Promise<string> {
    return `sold ${id}`;
  }
}

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function startMicroservice(lockModule: ReturnType<typeof ZkLockModule.forRoot>): Promise<{ app: INestMicroservice; client: ClientProxy }> {
  @Module({ imports: [lockModule], controllers: [SeatsHandler] })
  class MicroserviceModule {}
  const port = await freePort();
  const moduleRef = await Test.createTestingModule({ imports: [MicroserviceModule] }).compile();
  const app = moduleRef.createNestMicroservice({ transport: Transport.TCP, options: { host: '127.0.0.1', port }, logger: false });
  await app.listen();
  const client = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
  await client.connect();
  return { app, client };
}

/** The reply, or the error reply, within 5 s. */
function ask(client: ClientProxy, pattern: string, data: unknown): Promise<unknown> {
  return firstValueFrom(client.send<string>(pattern, data).pipe(timeout(5000))).catch((error: unknown) => error);
}

afterAll(closeAll);

describe('@WithLock on a TCP microservice, with ZkLockModule alone', () => {
  let app: INestMicroservice;
  let client: ClientProxy;
  beforeAll(async () => {
    ({ app, client } = await startMicroservice(ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: `/e2e-rpc-${process.pid}` })));
  }, 30_000);
  afterAll(async () => {
    release();
    client?.close();
    await app?.close();
  });

  it('answers a caller that meets a busy lock with an error reply (409, reason lock-timeout), and serves it once free', async () => {
    const holding = firstValueFrom(client.send<string>('hold', 7));
    // The holder is in: a buy of the same seat now meets the lock.
    let answer: unknown;
    for (let i = 0; i < 100 && answer === undefined; i++) {
      const reply = await ask(client, 'buy', 7);
      answer = reply === 'sold 7' ? undefined : reply; // the holder was not in yet
    }
    expect(answer).toEqual({ status: 'error', statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', reason: 'lock-timeout', retryAfterSeconds: 1 });
    release();
    expect(await holding).toBe('held 7');
    expect(await ask(client, 'buy', 7)).toBe('sold 7');
  }, 60_000);

  it('answers a 5 000-character key with an error reply (400, reason invalid-lock-key) that does not echo it', async () => {
    const answer = await ask(client, 'buy', 'k'.repeat(5_000));
    expect(answer).toMatchObject({ status: 'error', statusCode: 400, reason: 'invalid-lock-key', message: expect.stringMatching(/characters long \(at most 1024\)$/) });
    expect(JSON.stringify(answer)).not.toContain('kkkk');
  });
});

describe('@WithLock on a TCP microservice while ZooKeeper is away', () => {
  it('answers with an error reply (503, reason zookeeper-unavailable)', async () => {
    const proxy = await TcpProxy.start(zkConnectString());
    const { app, client } = await startMicroservice(ZkLockModule.forRoot({ connectString: proxy.connectString, basePath: `/e2e-rpc-${process.pid}`, sessionTimeoutMs: 20_000 }));
    try {
      proxy.cut();
      await eventually(() => app.get(ZkConnection).state === 'suspended', 20_000);
      expect(await ask(client, 'buy-waiting', 8)).toEqual({
        status: 'error',
        statusCode: 503,
        error: 'Service Unavailable',
        message: 'The lock service is unavailable; retry later',
        reason: 'zookeeper-unavailable',
        retryAfterSeconds: 5,
      });
    } finally {
      proxy.restore();
      client.close();
      await app.close();
      await proxy.close();
    }
  }, 60_000);
});
