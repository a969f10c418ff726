// Lock nodes and lock paths created with an ACL (LockEngine's parentAcl): credentials the ACL needs
// but the connection lacks, an empty parentAcl; and the C addon's create with an ACL: an empty ACL
// list refused, and without the addon's create-with-ACL (an unpatched build) the create-then-setAcl
// fallback whose setAcl reply is lost.
import { LockEngine, SECURE_PARENT_ACL } from '../../../lib/core/lock-engine.js';
import { Mutex } from '../../../lib/core/recipes/mutex.js';
import { ZkCode, ZkError } from '../../../lib/core/client/zk-error.js';
import { CreateMode, ZkPerm } from '../../../lib/core/client/session.js';
import { closeAll, connect, engine, uniquePath } from '../../support/helpers.js';
import { connectAddon } from '../../support/addon-client.js';
import { within } from '../../support/lock-test-helpers.js';
import { ensurePersistent, marker } from '../../support/revocation-support.js';

afterAll(closeAll);

describe('lock nodes created with parentAcl', () => {
  it('parentAcl with "auth" but no credentials: a typed ZkError INVALIDACL, no node left, no hang', async () => {
    const path = `${uniquePath('acl-noauth')}/orders`;
    const e = await engine({}, { parentAcl: SECURE_PARENT_ACL });
    const error = await within(new Mutex(e, 'o', path).acquire({ waitMs: 2_000 }).catch((x: unknown) => x), 10_000, 'acquire settles');
    expect(error).toMatchObject({ codeName: 'INVALIDACL' });
    expect(await (await connect()).session!.exists(path)).toBeNull();
  });

  it('parentAcl [] means open', async () => {
    const path = `${uniquePath('acl-empty')}/orders`;
    const e = await engine({}, { parentAcl: [] });
    const lease = await new Mutex(e, 'o', path).acquire();
    const acl = await e.connection.session!.getAcl(lease.path);
    expect(acl).toEqual([{ perms: ZkPerm.ALL, scheme: 'world', id: 'anyone' }]);
    await lease.release();
  });
});

// These check the C addon's own session (NativeZkSession: its a_create_acl, its create-then-setAcl
// fallback): their connections open with the addon (client 'addon'), not the default client.
describe('the C addon\'s create with an ACL', () => {
  it('the patched addon refuses an empty ACL list with INVALIDACL (no crash on calloc(0))', async () => {
    const c = await connectAddon();
    await ensurePersistent(c, '/it');
    await expect(c.session!.create(`${uniquePath('acl-empty-native')}`, Buffer.alloc(0), CreateMode.EPHEMERAL, [])).rejects.toMatchObject({ codeName: 'INVALIDACL' });
  });

  it('without the addon\'s create with an ACL (an unpatched build), a lost setAcl reply after the create is made good when the create is recovered (the node is not left open)', async () => {
    const ALICE = { scheme: 'digest', credentials: 'alice:s3cret-alice' };
    const lockPath = `${uniquePath('acl-fallback')}/orders`;
    const connection = await connectAddon({ auth: ALICE });
    const session = connection.session!;
    Object.defineProperty((session as unknown as { ops: object }).ops, 'a_create_acl', { value: undefined });
    const e = new LockEngine(connection, { parentAcl: SECURE_PARENT_ACL });
    // Make the parents first, so only the lock node's restrict is hit.
    await (await new Mutex(e, 'o', lockPath).acquire()).release();
    const originalSetAcl = session.setAcl.bind(session);
    let failed = false;
    (session as unknown as { setAcl: typeof session.setAcl }).setAcl = (p, acl, v) => {
      if (!failed && p.startsWith(lockPath + '/')) {
        failed = true; // the request may or may not have reached the server: its reply is lost
        return Promise.reject(new ZkError(ZkCode.CONNECTIONLOSS, 'setAcl', p));
      }
      return originalSetAcl(p, acl, v);
    };
    const lease = await new Mutex(e, 'o', lockPath).acquire();
    expect(failed).toBe(true);
    const anonymous = await connect();
    const forged = await anonymous.session!.setData(lease.path, marker()).then(
      () => 'written',
      (x: unknown) => (x as ZkError).codeName,
    );
    await lease.release();
    expect(forged).toBe('NOAUTH');
  });
});
