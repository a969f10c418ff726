import { createHash } from 'node:crypto';
import { LockEngine, SECURE_PARENT_ACL } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { CreateMode, ZkPerm } from '../../../lib/core/client/session.js';
import { ZkConnection } from '../../../lib/core/connection/zk-connection.js';
import { closeAll, connect, uniquePath } from '../../support/helpers.js';

afterAll(closeAll);

const ALICE = { scheme: 'digest', credentials: 'alice:s3cret-alice' };

function digestId(credentials: string): string {
  const [user] = credentials.split(':');
  return `${user}:${createHash('sha1').update(credentials).digest('base64')}`;
}

describe('access control: digest auth and locked-down parents', () => {
  it('parents the library creates are writable only with the same credentials', async () => {
    const base = uniquePath('acl');
    const lockPath = `${base}/orders`;
    const alice = new LockEngine(await connect({ auth: ALICE }), { parentAcl: SECURE_PARENT_ACL });
    const lease = await new Mutex(alice, 'orders', lockPath).acquire();

    // The creator's identity holds every permission; the world may only read.
    const acl = await alice.connection.session!.getAcl(lockPath);
    expect(acl).toEqual(
      expect.arrayContaining([
        { perms: ZkPerm.READ, scheme: 'world', id: 'anyone' },
        { perms: ZkPerm.ALL, scheme: 'digest', id: digestId(ALICE.credentials) },
      ]),
    );

    const anonymous = await connect();
    const bob = await connect({ auth: { credentials: 'bob:other' } });
    for (const intruder of [anonymous, bob]) {
      // Can look (inspection works) ...
      expect((await intruder.session!.getChildren(lockPath)).children).toHaveLength(1);
      // ... but can neither queue for the lock nor break the holder's node.
      await expect(intruder.session!.create(`${lockPath}/_c_x-lock-`, Buffer.alloc(0), CreateMode.EPHEMERAL_SEQUENTIAL)).rejects.toMatchObject({
        codeName: 'NOAUTH',
      });
      await expect(intruder.session!.delete(lease.path)).rejects.toMatchObject({ codeName: 'NOAUTH' });
      // ... nor write to it: not someone else's holder data, not Curator's revoke marker.
      for (const data of ['{"app":"forged"}', '__REVOKE__']) {
        await expect(intruder.session!.setData(lease.path, Buffer.from(data))).rejects.toMatchObject({ codeName: 'NOAUTH' });
      }
      const lockedOut = new Mutex(new LockEngine(intruder), 'orders', lockPath);
      await expect(lockedOut.acquire({ waitMs: 0 })).rejects.toMatchObject({ codeName: 'NOAUTH' });
    }

    // The lock node itself was created with the parent's ACL (no moment in which it was open).
    expect(await alice.connection.session!.getAcl(lease.path)).toEqual(acl);
    expect(JSON.parse((await anonymous.session!.getData(lease.path)).data.toString())).not.toHaveProperty('forged');

    // A second client with the same credentials takes part normally.
    const alice2 = new LockEngine(await connect({ auth: ALICE }), { parentAcl: SECURE_PARENT_ACL });
    const waiting = new Mutex(alice2, 'orders', lockPath).acquire({ waitMs: 10_000 });
    await lease.release();
    await (await waiting).release();
  });

  it('an addon without our patch (no create with an ACL) still restricts each lock node before acquire returns', async () => {
    const lockPath = `${uniquePath('acl')}/orders`;
    const connection = await connect({ auth: ALICE, client: 'addon' });
    // What an unpatched addon lacks: shadow the method on this one handle.
    const native = (connection.session as unknown as { ops: object }).ops;
    Object.defineProperty(native, 'a_create_acl', { value: undefined });
    const lease = await new Mutex(new LockEngine(connection, { parentAcl: SECURE_PARENT_ACL }), 'orders', lockPath).acquire();
    expect(await connection.session!.getAcl(lease.path)).toEqual(await connection.session!.getAcl(lockPath));
    const anonymous = await connect();
    await expect(anonymous.session!.setData(lease.path, Buffer.from('__REVOKE__'))).rejects.toMatchObject({ codeName: 'NOAUTH' });
    await lease.release();
  });

  it('reading the ACL of a missing node fails with NONODE (the process lives on)', async () => {
    const observer = await connect();
    await expect(observer.session!.getAcl(uniquePath('no-such-node'))).rejects.toMatchObject({ codeName: 'NONODE' });
    expect(await observer.session!.exists('/')).not.toBeNull();
  });

  it('never puts credentials in errors or descriptions', async () => {
    const connection = new ZkConnection({ connectString: '127.0.0.1:1', connectTimeoutMs: 500, auth: ALICE });
    const error = await connection.connect().catch((e: unknown) => e);
    expect(String(error)).not.toContain('s3cret');
    expect(connection.description).not.toContain('s3cret');
    expect(JSON.stringify(connection.options.hosts)).not.toContain('s3cret');
  });
});
