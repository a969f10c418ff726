// ZooKeeper accepts any digest credentials at connect: wrong ones used to go unnoticed until the
// first lock call failed with NOAUTH (the app booted, /health said up). The module now checks at
// bootstrap that its credentials may create under basePath (an ephemeral probe node).
import { randomUUID } from 'node:crypto';
import type { LoggerService } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { ZkConnectError } from '../../lib/core/errors.js';
import { digestIdOf } from '../../lib/core/inspect.js';
import { LockService } from '../../lib/nest/lock.service.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { ZkLockHealthIndicator, ZkLockHealthModule } from '../../lib/terminus/index.js';
import { CreateMode, ZkPerm, type ZkAcl } from '../../lib/core/client/session.js';
import { fourLetter } from '../support/zk-server.js';
import { closeAll, connect, eventually, pastContainerReaping, uniquePath, zkConnectString } from '../support/helpers.js';

afterAll(closeAll);

const ALICE = 'alice:right-password';
const ALICE_ACL: ZkAcl[] = [
  { perms: ZkPerm.ALL, scheme: 'digest', id: digestIdOf(ALICE) },
  { perms: ZkPerm.READ, scheme: 'world', id: 'anyone' },
];

/** A fresh path whose node (made with `acl`) exists; its parent is open. */
async function lockedDown(acl: ZkAcl[], label: string): Promise<string> {
  const admin = await connect({ auth: { credentials: ALICE } });
  const path = uniquePath(label);
  await admin.session!.create('/it', Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
  await admin.session!.create(path, Buffer.alloc(0), CreateMode.PERSISTENT, acl);
  return path;
}

function recordingLogger(lines: string[]): LoggerService {
  const push = (level: string) => (m: unknown) => void lines.push(`${level} ${String(m)}`);
  return { log: push('log'), warn: push('warn'), error: push('error'), debug: push('debug'), verbose: () => undefined };
}

async function boot(options: Parameters<typeof ZkLockModule.forRoot>[0], logged: string[] = []) {
  const moduleRef = await Test.createTestingModule({ imports: [ZkLockModule.forRoot(options), ZkLockHealthModule] })
    .setLogger(recordingLogger(logged))
    .compile();
  return moduleRef.init();
}

describe('ZkLockModule checks at bootstrap that its credentials may create under basePath', () => {
  it('fails the bootstrap with ZkConnectError auth-failed, naming the path and its ACL, and closes the session', async () => {
    const basePath = await lockedDown(ALICE_ACL, 'wrong-credentials');
    const logged: string[] = [];
    const error = await boot({ connectString: zkConnectString(), basePath, auth: { credentials: 'alice:wrong-password' } }, logged).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ZkConnectError);
    expect((error as ZkConnectError).reason).toBe('auth-failed');
    const message = (error as ZkConnectError).message;
    expect(message).toContain(`basePath ${basePath}`);
    // Without ADMIN on the node, ZooKeeper masks digest ids in the ACL it returns.
    expect(message).toContain('whose ACL is digest:alice:x:cdrwa, world:anyone:r');
    expect(message).toContain('digest user "alice"');
    expect(message).not.toContain('wrong-password');
    // Said once: Nest prints the error the bootstrap fails with; the module does not log it as well.
    expect(logged.filter((line) => line.includes('auth-failed'))).toEqual([]);
    // The session it opened is closed (it would keep the process alive).
    const session = logged.map((l) => /session 0x([0-9a-f]+)/.exec(l)?.[1]).find(Boolean);
    expect(session).toBeDefined();
    await eventually(async () => !(await fourLetter(zkConnectString(), 'cons')).includes(`sid=0x${session}`), 10_000);
  }, 30_000);

  it('checks the nearest existing parent when basePath does not exist yet', async () => {
    const parent = await lockedDown(ALICE_ACL, 'missing-base');
    const error = await boot({ connectString: zkConnectString(), basePath: `${parent}/app/locks` }).catch((e: unknown) => e);
    expect(error).toMatchObject({ reason: 'auth-failed' });
    expect((error as Error).message).toContain(`in ${parent} (the nearest existing parent of basePath ${parent}/app/locks)`);
    expect((error as Error).message).toContain('has no credentials');
  }, 30_000);

  it('boots with the right credentials, and with an ip ACL entry that lets this host create', async () => {
    const basePath = await lockedDown(ALICE_ACL, 'right-credentials');
    const app = await boot({ connectString: zkConnectString(), basePath, auth: { credentials: ALICE } });
    await expect(app.get(LockService).withLock('orders', () => 'ran')).resolves.toBe('ran');
    await app.close();

    // The server judges every scheme: an ip entry for this host lets a session without credentials in.
    const ipOnly = await lockedDown([{ perms: ZkPerm.ALL, scheme: 'ip', id: '127.0.0.1' }, ...ALICE_ACL], 'ip-acl');
    const other = await boot({ connectString: zkConnectString(), basePath: ipOnly });
    await expect(other.get(LockService).withLock('orders', () => 'ran')).resolves.toBe('ran');
    await other.close();
  }, 30_000);

  it('with waitForConnection: false, boots, logs the error once, and health is down with reason auth-failed until the ACL is fixed', async () => {
    const basePath = await lockedDown(ALICE_ACL, 'background');
    const logged: string[] = [];
    const app = await boot({ connectString: zkConnectString(), basePath, auth: { credentials: 'bob:pw' }, waitForConnection: false }, logged);
    try {
      const indicator = app.get(ZkLockHealthIndicator);
      await eventually(() => logged.some((l) => l.startsWith('error') && l.includes('auth-failed')), 15_000);
      const health = await indicator.isHealthy();
      expect(health.zookeeper).toMatchObject({ status: 'down', state: 'connected', reason: 'auth-failed' });
      expect(String(health.zookeeper.message)).toContain(`basePath ${basePath}`);
      expect(logged.filter((l) => l.includes('auth-failed'))).toHaveLength(1);

      // An operator fixes the ACL: the next health check sees it.
      const admin = await connect({ auth: { credentials: ALICE } });
      await admin.session!.setAcl(basePath, [...ALICE_ACL, { perms: ZkPerm.ALL, scheme: 'digest', id: digestIdOf('bob:pw') }]);
      expect((await indicator.isHealthy()).zookeeper).toMatchObject({ status: 'up' });
      expect((await indicator.isHealthy()).zookeeper.reason).toBeUndefined();
    } finally {
      await app.close();
    }
  }, 30_000);
});

// Reported: with auth, the lock root was a container node. Once the right app stopped and its
// locks' paths were reaped, ZooKeeper deleted the empty root; an app with a wrong password then
// booted (its check found only the open "/"), made the root again with its own ACL and took locks,
// and the right app failed its bootstrap. The root guarded by credentials now stays.
describe('the lock root guarded by credentials stays, whatever the start order', () => {
  /** A fresh top-level basePath: no ancestor of it is made (nor locked down) for it. */
  const freshBase = (label: string) => `/${label}-${process.pid}-${randomUUID().slice(0, 8)}`;

  /** Boots, takes a lock and stops: 'ran', or the bootstrap's error. */
  async function runOnce(options: Parameters<typeof ZkLockModule.forRoot>[0]): Promise<unknown> {
    const app = await boot(options).catch((error: unknown) => error);
    if (!('get' in (app as object))) return app;
    const booted = app as Awaited<ReturnType<typeof boot>>;
    try {
      return await booted.get(LockService).withLock('orders', () => 'ran');
    } finally {
      await booted.close();
    }
  }

  it('right app, stop, reaping, wrong app, right app: the wrong app fails its bootstrap, the right one boots', async () => {
    const basePath = freshBase('credentials-root');
    const right = { connectString: zkConnectString(), basePath, auth: { credentials: ALICE } };
    const wrong = { connectString: zkConnectString(), basePath, auth: { credentials: 'alice:wrong-password' } };
    expect(await runOnce(right)).toBe('ran');
    // The lock's path, a container, goes once empty; then the reaper passes again over the root.
    const observer = await connect({ auth: { credentials: ALICE } }); // ADMIN: reads the ACL's digest ids unmasked
    await eventually(async () => (await observer.session!.exists(`${basePath}/orders`)) === null, 30_000);
    await pastContainerReaping(observer);
    const outcomes = { wrong: await runOnce(wrong), right: await runOnce(right) };
    expect(outcomes).toEqual({ wrong: expect.objectContaining({ reason: 'auth-failed' }), right: 'ran' });
    expect(await observer.session!.exists(basePath)).not.toBeNull();
    // Only alice (all rights) and the world (read) are on the root: nothing of the wrong app's.
    expect(await observer.session!.getAcl(basePath)).toEqual(expect.arrayContaining(ALICE_ACL));
    expect(await observer.session!.getAcl(basePath)).toHaveLength(2);
  }, 90_000);

  it('is made at bootstrap, before any lock: the first app with credentials to boot owns it', async () => {
    const basePath = freshBase('credentials-root-at-boot');
    const app = await boot({ connectString: zkConnectString(), basePath, auth: { credentials: ALICE } });
    await app.close();
    await pastContainerReaping(await connect());
    expect(await runOnce({ connectString: zkConnectString(), basePath, auth: { credentials: 'mallory:pw' } })).toMatchObject({ reason: 'auth-failed' });
  }, 60_000);

  it('warns once at bootstrap when an existing basePath lets anyone create in it (a lock path could then be taken)', async () => {
    const basePath = freshBase('open-root');
    await (await connect()).session!.create(basePath, Buffer.alloc(0), CreateMode.PERSISTENT);
    const logged: string[] = [];
    const app = await boot({ connectString: zkConnectString(), basePath, auth: { credentials: ALICE } }, logged);
    await expect(app.get(LockService).withLock('orders', () => 'ran')).resolves.toBe('ran');
    await app.close();
    expect(logged.filter((line) => line.includes('lets anyone create'))).toEqual([
      expect.stringContaining(`warn basePath ${basePath} lets anyone create in it (its ACL is world:anyone:cdrwa)`),
    ]);
  }, 30_000);
});
