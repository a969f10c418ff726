import { Controller, Get, Module, Param, type INestApplication } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { LockContext } from '../../lib/core/leases/lock-context.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockExceptionFilter } from '../../lib/nest/zk-lock-exception.filter.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { zkConnectString } from '../support/helpers.js';

// A route parameter interpolated into a key stays one key: "y%2Fz" arrives as "y/z" and used to
// name lock "ticket:y/z", a child of lock "ticket:y" (which every Curator-layout lock counts as a
// contender, so one request could block another key's lock); "a%00b" and "x%2F" answered 500.
@Controller('tickets')
class TicketsController {
  @Get(':id')
  @WithLock('ticket:{0}')
  async show(@Param('id') id: string): Promise<{ id: string; lock: string }> {
    return { id, lock: LockContext.current()!.name };
  }
}

const basePath = `/e2e-keys-http-${process.pid}`;

@Module({
  imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath })],
  controllers: [TicketsController],
  providers: [{ provide: APP_FILTER, useClass: ZkLockExceptionFilter }],
})
class TicketsModule {}

describe('request input in @WithLock templates', () => {
  let app: INestApplication;
  let url: string;
  beforeAll(async () => {
    app = (await Test.createTestingModule({ imports: [TicketsModule] }).compile()).createNestApplication({ logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  });
  afterAll(() => app?.close());

  const get = async (raw: string) => {
    const response = await fetch(`${url}/tickets/${raw}`);
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  it('escapes each interpolated value into one path segment, reversibly', async () => {
    expect(await get('y%2Fz')).toEqual({ status: 200, body: { id: 'y/z', lock: 'ticket:y%2Fz' } });
    expect(await get('a%00b')).toEqual({ status: 200, body: { id: 'a\u0000b', lock: 'ticket:a%00b' } });
    expect(await get('x%2F')).toEqual({ status: 200, body: { id: 'x/', lock: 'ticket:x%2F' } });
    expect(await get('50%25')).toEqual({ status: 200, body: { id: '50%', lock: 'ticket:50%25' } });
    expect(decodeURIComponent('ticket:y%2Fz')).toBe('ticket:y/z');
  });

  it('answers 400 when the input cannot name a lock', async () => {
    const { status, body } = await get('x'.repeat(2000));
    const name = 'ticket:' + 'x'.repeat(2000);
    const pathLength = `${basePath}/${name}`.length; // the pid's digits vary
    const message = `The request cannot name a lock: its path is ${pathLength} characters long (at most 1024)`;
    expect({ status, body }).toEqual({ status: 400, body: { statusCode: 400, error: 'Bad Request', message, reason: 'invalid-lock-key' } });
  });
});
