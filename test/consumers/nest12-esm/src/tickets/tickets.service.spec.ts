import { Test } from '@nestjs/testing';
import { LockNotAcquiredError } from 'nestjs-zk-lock';
import { FakeLockService, ZkLockTestingModule } from 'nestjs-zk-lock/testing';
import { TicketsController } from './tickets.controller.js';
import { TicketsModule } from './tickets.module.js';
import { TicketsService } from './tickets.service.js';

// A unit test through nestjs-zk-lock/testing: no ZooKeeper (and no native addon) needed.
describe('TicketsService (unit, nestjs-zk-lock/testing)', () => {
  it('sells one seat per call, one caller at a time', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [ZkLockTestingModule.forRoot(), TicketsModule] }).compile();
    await moduleRef.init();
    const tickets = moduleRef.get(TicketsService);
    const results = await Promise.all([tickets.sell('a'), tickets.sell('a'), tickets.sell('a')]);
    expect(results.map((r) => r.sold).sort()).toEqual([1, 2, 3]);
    expect(moduleRef.get(FakeLockService)).toBeDefined();
    await moduleRef.close();
  });

  it('refuses a second caller while the lock is held', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [ZkLockTestingModule.forRoot(), TicketsModule] }).compile();
    await moduleRef.init();
    const tickets = moduleRef.get(TicketsService);
    const first = tickets.report(200);
    await new Promise((resolve) => setTimeout(resolve, 20));
    await expect(tickets.report(0)).rejects.toBeInstanceOf(LockNotAcquiredError);
    await expect(first).resolves.toBe('done');
    await moduleRef.close();
  });

  it('is injected into the controller by its type (the test runner kept emitDecoratorMetadata)', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [ZkLockTestingModule.forRoot(), TicketsModule] }).compile();
    await moduleRef.init();
    await expect(moduleRef.get(TicketsController).sell('b')).resolves.toMatchObject({ sold: 1 });
    await moduleRef.close();
  });
});
