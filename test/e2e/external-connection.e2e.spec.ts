import { Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { closeAll, connect } from '../support/helpers.js';

// forRoot({ connection }): the app borrows the caller's connection, so closing the app must leave
// it as it found it (12 apps built and closed on one connection used to leave 24 `lost` listeners).
describe('ZkLockModule.forRoot({ connection })', () => {
  afterAll(closeAll);

  it('removes every listener it added when the app closes, and leaves the connection open', async () => {
    const connection: ZkConnection = await connect();
    const events = ['lost', 'state', 'closed', 'connected', 'suspended', 'reconnected'] as const;
    const counts = () => Object.fromEntries(events.map((e) => [e, connection.listenerCount(e)]));
    const before = counts();
    for (let i = 0; i < 12; i++) {
      @Module({ imports: [ZkLockModule.forRoot({ connection, basePath: `/e2e-external-${process.pid}` })] })
      class AppModule {}
      const app = await (await Test.createTestingModule({ imports: [AppModule] }).compile()).init();
      const lease = await app.get(LockService).mutex(`app-${i}`).acquire({ waitMs: 5000 });
      await lease.release();
      await app.close();
    }
    expect(counts()).toEqual(before);
    expect(connection.state).toBe('connected');
  }, 60_000);
});
