import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { LockContext } from '../../lib/core/leases/lock-context.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { zkConnectString } from '../support/helpers.js';

// A key list that names one lock twice (a transfer from account 7 to 7) takes that lock once;
// it used to fail with "A multi-lock cannot take ... twice" (a 500 over HTTP).
@Injectable()
class Transfers {
  @WithLock((from: number, to: number) => [`account:${from}`, `account:${to}`])
  async transfer(from: number, to: number): Promise<string> {
    return `moved ${from}→${to} under ${LockContext.current()!.name}`;
  }
}

@Module({
  imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath: `/e2e-keys-${process.pid}` })],
  providers: [Transfers],
})
class TransfersModule {}

describe('@WithLock key lists', () => {
  let app: INestApplicationContext;
  beforeAll(async () => {
    app = await (await Test.createTestingModule({ imports: [TransfersModule] }).compile()).init();
  });
  afterAll(() => app?.close());

  it('a lock named twice is taken once', async () => {
    await expect(app.get(Transfers).transfer(7, 7)).resolves.toMatch(/^moved 7→7 under /);
    await expect(app.get(Transfers).transfer(7, 8)).resolves.toMatch(/^moved 7→8 under /);
  });

  it('LockService.multiLock: a name given twice is one lock', async () => {
    const locks = app.get(LockService);
    const lease = await locks.multiLock(['account:9', 'account:9']).acquire({ waitMs: 5000 });
    expect(lease.isHeld).toBe(true);
    await lease.release();
  });
});
