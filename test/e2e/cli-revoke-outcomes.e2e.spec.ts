import { Leadership } from '../../lib/core/recipes/leadership.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { main } from '../../lib/cli.js';
import { closeAll, engine, eventually, uniquePath, zkConnectString } from '../support/helpers.js';

// `nestjs-zk-lock revoke` says what each holder it asked did: a revocable holder lets go, this
// library's leader that is not revocable writes its id back (ignored: exit 4), and a holder whose
// marker stays is said to let go only if its lock is revocable (nothing happens otherwise), not
// reported as a plain success. Run in-process (main) against the test ZooKeeper.

afterAll(closeAll);

async function revoke(path: string, ...extra: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = '';
  let err = '';
  const code = await main(['revoke', path, '--connect', zkConnectString(), ...extra], {}, { out: (t) => void (out += t), err: (t) => void (err += t) });
  return { code, out, err };
}

describe('nestjs-zk-lock revoke, after asking', () => {
  it('says a revocable holder let go', async () => {
    const path = `${uniquePath('cli-outcome')}/nightly`;
    const lease = await new Mutex(await engine(), 'nightly', path, { revocable: true }).acquire();
    lease.signal.addEventListener('abort', () => void lease.release(), { once: true });
    const result = await revoke(path, '--wait', '10000');
    expect(result).toMatchObject({ code: 0, err: '' });
    expect(result.out).toMatch(/Asked its holder to let go .*\n {2}.* node _c_.*\n {4}let go\.\n$/);
  });

  it('says a holder that is still there after --wait lets go only if its lock is revocable (nothing happens otherwise)', async () => {
    const path = `${uniquePath('cli-outcome')}/nightly`;
    const lease = await new Mutex(await engine(), 'nightly', path).acquire(); // not revocable
    try {
      const result = await revoke(path, '--wait', '500');
      expect(result).toMatchObject({ code: 0, err: '' });
      expect(result.out).toContain('still holds it after 500ms: it lets go only if it made its lock revocable');
      expect(result.out).toContain('if it did not, nothing happens.');
      expect(lease.isHeld).toBe(true);
      const json = await revoke(path, '--wait', '0', '--json');
      expect((JSON.parse(json.out) as { outcome: string }[]).map((h) => h.outcome)).toEqual(['holding']);
    } finally {
      await lease.release();
    }
  });

  it('says a leader that is not revocable ignored the request, and exits 4', async () => {
    const path = `${uniquePath('cli-outcome')}/election`;
    const leadership = new Leadership(await engine(), 'election', path).start();
    try {
      await eventually(() => leadership.isLeader, 30_000);
      const result = await revoke(path, '--wait', '10000');
      expect(result).toMatchObject({ code: 4, err: '' });
      expect(result.out).toContain('ignored the request: its lock is not revocable');
      expect(leadership.isLeader).toBe(true);
    } finally {
      await leadership.close();
    }
  });
});
