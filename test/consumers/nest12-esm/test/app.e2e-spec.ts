import { INestApplication } from '@nestjs/common';
import { ClientProxyFactory, Transport, type ClientProxy } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { LockService } from 'nestjs-zk-lock';
import { createServer } from 'node:net';
import { firstValueFrom } from 'rxjs';
import { AppModule } from '../src/app.module.js';
import { SweepJob } from '../src/jobs/sweep.job.js';

// Against a real ZooKeeper (ZK_CONNECT), over HTTP and the TCP microservice transport.
const freePort = () =>
  new Promise<number>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
async function until(check: () => boolean, ms = 10_000): Promise<void> {
  for (const end = Date.now() + ms; !check(); await sleep(20)) if (Date.now() > end) throw new Error('timed out');
}

describe('AppModule (e2e, ZooKeeper)', () => {
  let app: INestApplication;
  let base: string;
  let client: ClientProxy;

  beforeAll(async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestApplication({ logger: false });
    const rpcPort = await freePort();
    // A hybrid app's microservice applies global filters (ZkLockModule's too) only with inheritAppConfig (see docs/with-lock.md in nestjs-zk-lock).
    app.connectMicroservice({ transport: Transport.TCP, options: { host: '127.0.0.1', port: rpcPort } }, { inheritAppConfig: true });
    await app.startAllMicroservices();
    await app.listen(0, '127.0.0.1');
    base = await app.getUrl();
    client = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port: rpcPort } });
  });
  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  it('sells one seat at a time, each under a higher fencing token', async () => {
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => fetch(`${base}/tickets/e2e-${process.pid}`, { method: 'POST' }).then((r) => r.json())),
    );
    expect(answers.map((a) => a.sold).sort()).toEqual([1, 2, 3, 4, 5]);
    const byOrder = [...answers].sort((a, b) => a.sold - b.sold).map((a) => BigInt(a.fencingToken));
    expect(byOrder).toEqual([...byOrder].sort((a, b) => (a < b ? -1 : 1)));
  });

  const buySeat = (seat: string) =>
    fetch(`${base}/tickets/seats`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ seat }) });

  it('answers two buyers of one seat at once with 201 and 409 (Retry-After and a reason), with only ZkLockModule.forRoot and @WithLock', async () => {
    const answers = await Promise.all([buySeat(`s-${process.pid}`), buySeat(`s-${process.pid}`)]);
    expect(answers.map((a) => a.status).sort()).toEqual([201, 409]);
    const busy = answers.find((a) => a.status === 409)!;
    expect(busy.headers.get('retry-after')).toBe('1');
    expect(await busy.json()).toEqual({ statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', reason: 'lock-timeout' });
  });

  it('answers a 5 000-character key with 400 and a reason, without echoing the key', async () => {
    const answer = await buySeat('k'.repeat(5_000));
    expect(answer.status).toBe(400);
    const text = await answer.text();
    expect(JSON.parse(text)).toMatchObject({ statusCode: 400, error: 'Bad Request', reason: 'invalid-lock-key' });
    expect(text).not.toContain('kkkk');
  });

  it('answers an RPC caller that meets a held lock with an error reply (not silence, not a crash)', async () => {
    const first = firstValueFrom(client.send('report', 1_000));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const busy = await firstValueFrom(client.send('report', 0)).catch((error: unknown) => error);
    expect(busy).toMatchObject({ status: 'error', statusCode: 409, reason: 'lock-timeout', retryAfterSeconds: 1 });
    await expect(first).resolves.toBe('done');
  });

  it('runs the @Cron job under its ZooKeeper lock (skipped while held elsewhere) and the @Interval job as leader', async () => {
    const job = app.get(SweepJob);
    await until(() => job.sweeps.length > 0 && job.reports.length > 0);
    expect(job.sweeps[0]).toMatchObject({ name: 'jobs:sweep', path: expect.stringMatching(/\/_c_[0-9a-f-]{36}-lock-\d{10}$/) });
    expect(job.reports[0]).toMatchObject({ name: 'jobs:report', path: expect.stringMatching(/-latch-\d{10}$/) });

    const lease = await app.get(LockService).mutex('jobs:sweep').acquire({ waitMs: 5_000 });
    const before = job.sweeps.length;
    await sleep(2_100);
    expect(job.sweeps.length).toBe(before);
    await lease.release();
    await until(() => job.sweeps.length > before, 5_000);
  }, 30_000);
});
