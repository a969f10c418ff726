import { Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { LockUsageError } from '../../lib/core/errors.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { zkConnectString } from '../support/helpers.js';

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

  it('a detached call says so', async () => {
    @Module({ imports: [zk()], providers: [Reports] })
    class ClassModule {}
    const app = await (await Test.createTestingModule({ imports: [ClassModule] }).compile()).init();
    try {
      const reports = app.get(Reports);
      await expect(reports.rebuild()).resolves.toBe('rebuilt');
      const detached = reports.rebuild;
      await expect(detached()).rejects.toThrow('@WithLock on Reports.rebuild: called without its instance (as a detached function); call it as a method or bind it');
    } finally {
      await app.close();
    }
  });
});
