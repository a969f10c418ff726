import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { InvalidOptionError, LockLostError } from '../../lib/core/errors.js';
import { LockContext } from '../../lib/core/leases/lock-context.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { eventually, uniquePath, zkConnectString } from '../support/helpers.js';
import { within } from '../support/lock-test-helpers.js';

const basePath = uniquePath('e2e-revoke');

/** Long work under the lock that stops when its signal aborts (as a revocable job should). */
@Injectable()
class Reports {
  readonly started: Array<() => void> = [];
  readonly outcomes: string[] = [];

  private async work(ms: number): Promise<string> {
    const signal = LockContext.current()!.signal;
    this.started.shift()?.();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
    });
    const outcome = signal.aborted ? `stopped: ${(signal.reason as LockLostError).reason}` : 'finished';
    this.outcomes.push(outcome);
    return outcome;
  }

  @WithLock('report', { revocable: true, waitMs: 0, minHoldMs: 30_000 })
  revocable(): Promise<string> {
    return this.work(20_000);
  }

  @WithLock('stubborn', { waitMs: 0 })
  notRevocable(): Promise<string> {
    return this.work(1_500);
  }

  whenStarted(): Promise<void> {
    return new Promise((resolve) => this.started.push(resolve));
  }
}

@Module({
  imports: [ZkLockModule.forRoot({ connectString: zkConnectString(), basePath })],
  providers: [Reports],
})
class ReportsModule {}

describe('@WithLock({ revocable: true })', () => {
  let app: INestApplicationContext;
  let other: INestApplicationContext;
  beforeAll(async () => {
    [app, other] = await Promise.all(
      [0, 1].map(async () => (await Test.createTestingModule({ imports: [ReportsModule] }).compile()).init()),
    );
  });
  afterAll(async () => {
    await Promise.all([app?.close(), other?.close()]);
  });

  it('a revocation stops the method through its signal (reason revoked), and the lock goes at once, without the minimum hold', async () => {
    const reports = app.get(Reports);
    const started = reports.whenStarted();
    const running = reports.revocable();
    await started;
    const asked = await other.get(LockService).revoke('report');
    expect(asked).toHaveLength(1);
    expect(asked[0]!.holder.pid).toBe(process.pid);
    expect(await within(running, 10_000, 'the method stops')).toBe('stopped: revoked');
    // Released right away (minHoldMs would have kept it 30 s): the node goes (its delete may
    // still be on its way when the method returns), then the other instance gets it.
    await eventually(async () => ((await other.get(LockService).inspect('report'))?.holders.length ?? 0) === 0, 10_000, 20);
    const otherReports = other.get(Reports);
    const next = otherReports.whenStarted();
    const second = otherReports.revocable();
    await within(next, 10_000, 'the other instance runs it');
    await app.get(LockService).revoke('report');
    expect(await second).toBe('stopped: revoked');
  });

  it('a method that did not opt in runs to its end; revoke says whom it asked', async () => {
    const reports = app.get(Reports);
    const started = reports.whenStarted();
    const running = reports.notRevocable();
    await started;
    expect(await other.get(LockService).revoke('stubborn')).toHaveLength(1);
    expect(await within(running, 10_000, 'the method ends')).toBe('finished');
  });

  it('revocable with a semaphore is refused at decoration', () => {
    expect(() => WithLock('pool', { kind: 'semaphore', permits: 2, revocable: true })).toThrow(InvalidOptionError);
    expect(() => WithLock('pool', { revocable: 'yes' as unknown as boolean })).toThrow(InvalidOptionError);
  });
});
