import { createServer } from 'node:net';
import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { ClientProxyFactory, MessagePattern, Payload, Transport, type ClientProxy } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { firstValueFrom, timeout } from 'rxjs';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockExceptionFilter } from '../../lib/nest/zk-lock-exception.filter.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { zkConnectString } from '../support/helpers.js';

// A TCP microservice with the filter global, as docs/with-lock.md says to register it: a caller that
// meets a busy lock must get an error reply at once, not wait for its own timeout (with the filter
// rethrowing outside HTTP, Nest's RPC path sent nothing at all).
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
  @WithLock((id: number) => `seat:${id}`)
  async buy(@Payload() id: number): Promise<string> {
    return `sold ${id}`;
  }
}

@Module({
  imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: `/e2e-rpc-${process.pid}` })],
  controllers: [SeatsHandler],
  providers: [{ provide: APP_FILTER, useClass: ZkLockExceptionFilter }],
})
class MicroserviceModule {}

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('@WithLock on a TCP microservice, with ZkLockExceptionFilter global', () => {
  let app: INestMicroservice;
  let client: ClientProxy;
  beforeAll(async () => {
    const port = await freePort();
    const moduleRef = await Test.createTestingModule({ imports: [MicroserviceModule] }).compile();
    app = moduleRef.createNestMicroservice({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
    await app.listen();
    client = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
    await client.connect();
  }, 30_000);
  afterAll(async () => {
    release();
    client?.close();
    await app?.close();
  });

  it('answers a caller that meets a busy lock with an error reply (409-like), and serves it once free', async () => {
    const holding = firstValueFrom(client.send<string>('hold', 7));
    // The holder is in: a buy of the same seat now meets the lock.
    let answer: unknown;
    for (let i = 0; i < 100 && answer === undefined; i++) {
      answer = await firstValueFrom(client.send<string>('buy', 7).pipe(timeout(5000))).then(
        (value) => (value === 'sold 7' ? undefined : value), // the holder was not in yet
        (error: unknown) => error,
      );
    }
    expect(answer).toEqual({ status: 'error', statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', retryAfterSeconds: 1 });
    release();
    expect(await holding).toBe('held 7');
    expect(await firstValueFrom(client.send<string>('buy', 7).pipe(timeout(5000)))).toBe('sold 7');
  }, 60_000);
});
