import { LockEngine } from '../../../lib/core/lock-engine.js';
import { Leadership } from '../../../lib/core/recipes/leadership.js';
import { CreateMode, ZkPerm } from '../../../lib/core/client/session.js';
import { closeAll, connect, uniquePath } from '../../support/helpers.js';

afterAll(closeAll);

describe('a leader election refused by the election parent ACL (NOAUTH)', () => {
  it('warns once while it keeps retrying with a growing pause, and joins once the ACL lets it', async () => {
    const admin = await connect();
    const path = uniquePath('noauth-election');
    await admin.session!.create(path.slice(0, path.lastIndexOf('/')), Buffer.alloc(0), CreateMode.PERSISTENT).catch(() => undefined);
    // Readable by all, nobody may create in it.
    await admin.session!.create(path, Buffer.alloc(0), CreateMode.PERSISTENT, [{ perms: ZkPerm.READ | ZkPerm.ADMIN, scheme: 'world', id: 'anyone' }]);

    const engine = new LockEngine(await connect(), { app: 'jest' });
    const warnings: string[] = [];
    engine.onWarning((m) => warnings.push(m));
    const election = new Leadership(engine, 'noauth', path, { participantId: 'p' }).start();
    // Retries at 0.1, 0.2, 0.4, 0.8, 1.6 s: five attempts in ~3.1 s.
    await new Promise((resolve) => setTimeout(resolve, 3500));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain('NOAUTH');

    // Let it in: it joins and leads.
    await admin.session!.setAcl(path, [{ perms: ZkPerm.ALL, scheme: 'world', id: 'anyone' }]);
    const gained = new Promise((resolve) => election.once('gained', resolve));
    await Promise.race([gained, new Promise((_, reject) => setTimeout(() => reject(new Error('no leadership within 15 s')), 15_000))]);
    await election.close();
  }, 30_000);
});
