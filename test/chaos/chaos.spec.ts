// The short chaos run (scripts/chaos/run.mjs --short, about 70–110 s): a 3-node ensemble of its own,
// 3 worker processes behind loopback proxies (lock loops and one leader election), and one of each
// fault. The runner does the work and writes its result as JSON; this file asserts on it. Needs the
// built package (npm test builds it).
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const RUNNER = join(REPO, 'scripts', 'chaos', 'run.mjs');

interface FaultRecord {
  fault: string;
  observed: boolean;
  evidence: string;
  lostMs?: number;
  lostReason?: string;
  nextHolderMs?: number;
  nextAfterSessionGone?: boolean | null;
  lateWrite?: string;
  /** Lease signal time minus the next holder's acquisition (< 0: told before anyone else held it). */
  signalAfterNextHolderMs?: number;
  /** At least this long before the server expired the session, the client declared it lost. */
  marginMs?: number;
  /** Notification fault: the silenced waiter held the lock on the event. */
  madeHolder?: boolean;
  /** Rolling restart / notification fault: next holder's acquisition minus the signal (> 0: told first). */
  signalBeforeNextHolderMs?: number;
  tryOnce?: { count: number; maxMs: number; maxLoopDelayMs: number; reasons: Record<string, number> }[];
}
/** One lost signal, judged against the server's end of that hold (node gone, or another holder). */
interface LostSignal {
  at: number;
  lock: string;
  reason: string;
  fault: string;
  /** Server's end minus the signal (ms): < 0 means told after the server let the lock go. */
  marginMs?: number;
  late: boolean;
  excused?: string;
}
interface ChaosResult {
  options: { sessionTimeoutMs: number };
  acquisitions: { total: number; mutex: number; sem: number; 'rw-read': number; 'rw-write': number };
  staleAccepted: number;
  falseRejects: number;
  fencingRejections: number;
  lostUpdates: number;
  counterConsistent: boolean;
  unexplainedOverlaps: number;
  /** Holders that overlapped while neither had been told (the library's promise): must be none. */
  unaware: { pairs: number; totalMs: number; byLock: Record<'mutex' | 'rw' | 'sem' | 'leader', { pairs: number; ms: number }>; examples: unknown[] };
  /** The leader election every worker process joins; a term writes to the store's leader counter. */
  leadership: {
    terms: number;
    changes: number;
    writesAccepted: number;
    /** Terms whose accepted store operations interleaved, plus writes accepted from an older term. */
    overlapping: number;
    interleaved: number;
    staleAccepted: number;
    /** From a term's end (signal, process death or SIGSTOP) to the next gained. */
    failover: { count: number; p50Ms?: number; maxMs?: number; list: { from: string; to: string; ms: number }[] };
  };
  lostSignalMargins: LostSignal[];
  lateSignals: number;
  tryOnce: { calls: number; maxMs: number; failedBursts: unknown[]; outcomes: Record<string, number> };
  overlaps: { sem: { maxConcurrentHealthy: number } };
  readerSawWrite: number;
  tokenInversions: number;
  orphans: number;
  orphanPaths: string[];
  checkError?: string;
  fatals: unknown[];
  crashes: unknown[];
  stuckAtStop: unknown[];
  faults: FaultRecord[];
  passed: boolean;
}

const FAULTS = [
  'kill -9 leader',
  'kill -9 follower with clients',
  'partition holder past session timeout',
  'silent partition (nothing passes, nothing closes) of a holder past session timeout',
  'SIGSTOP holder past session timeout, SIGCONT',
  'SIGKILL worker holding the mutex',
  'SIGKILL worker waiting for the mutex',
  'silent partition right after a watch event reached a waiter',
  'rolling restart: SIGTERM (shutdown hooks) with holds in flight, then a new worker',
  "foreign client: set on every lock node, then delete the holder's node",
  'try-once acquires while cut off, then while silenced',
  'whole ensemble killed and restarted',
  'follower cut off from the leader, its client port up, past session timeout',
  'foreign delete of a kept / coalesced node during a partition, acquire at reconnect',
];

let result: ChaosResult;
let output = '';

beforeAll(async () => {
  if (!existsSync(join(REPO, 'dist', 'core', 'index.js'))) throw new Error('dist/ is missing: build first (npm run build)');
  const dir = await mkdtemp(join(tmpdir(), 'zk-chaos-'));
  const json = join(dir, 'result.json');
  try {
    // The runner stops by itself (hard limit 240 s with --short) and cleans up on SIGTERM.
    const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [RUNNER, '--short', '--json', json], { cwd: REPO, timeout: 280_000, maxBuffer: 64 << 20 }, (error, out, err) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout: out, stderr: err }),
      );
    });
    output = `${stdout}\n${stderr.split('\n').slice(-40).join('\n')}`;
    if (!existsSync(json)) throw new Error(`the chaos runner wrote no result (exit ${code}):\n${output}`);
    result = JSON.parse(await readFile(json, 'utf8')) as ChaosResult;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}, 300_000);

/** Adds the runner's tables to a failure message. */
function check(fn: () => void): void {
  try {
    fn();
  } catch (error) {
    (error as Error).message += `\n\nchaos run output:\n${output}`;
    throw error;
  }
}

describe('chaos run (short) on a 3-node ensemble', () => {
  it('kept working: the locks were taken many times by every recipe', () => {
    check(() => {
      expect(result.acquisitions.mutex).toBeGreaterThan(50);
      expect(result.acquisitions.sem).toBeGreaterThan(20);
      expect(result.acquisitions['rw-read']).toBeGreaterThan(10);
      expect(result.acquisitions['rw-write']).toBeGreaterThan(5);
    });
  });

  it('accepted no write from a stale holder, and rejected the late writes by their fencing token', () => {
    check(() => {
      expect(result.staleAccepted).toBe(0);
      expect(result.falseRejects).toBe(0);
      expect(result.tokenInversions).toBe(0);
      expect(result.fencingRejections).toBeGreaterThanOrEqual(2);
    });
  });

  it('lost no update', () => {
    check(() => {
      expect(result.lostUpdates).toBe(0);
      expect(result.counterConsistent).toBe(true);
    });
  });

  it('never had two holders that both still held by their own account (mutex, write lock, semaphore permits)', () => {
    check(() => {
      expect(result.unexplainedOverlaps).toBe(0);
      expect(result.unaware).toMatchObject({ pairs: 0, totalMs: 0, examples: [] });
      expect(result.readerSawWrite).toBe(0);
      expect(result.overlaps.sem.maxConcurrentHealthy).toBeLessThanOrEqual(2);
    });
  });

  it('leader election: never two leaders (in the store\'s view, nor while neither term\'s signal had aborted); leadership changed (the SIGSTOP falls on the leading process); failovers measured', () => {
    check(() => {
      const lead = result.leadership;
      expect(lead).toMatchObject({ overlapping: 0, interleaved: 0, staleAccepted: 0 });
      expect(result.unaware.byLock.leader).toEqual({ pairs: 0, ms: 0 });
      expect(lead.writesAccepted).toBeGreaterThan(50);
      expect(lead.changes).toBeGreaterThanOrEqual(1);
      expect(lead.failover.count).toBe(lead.changes);
      // The next leader gained only after the previous one stopped leading (or its process died or stopped).
      expect(Math.min(...lead.failover.list.map((f) => f.ms))).toBeGreaterThanOrEqual(0);
      expect(lead.failover.maxMs).toBeGreaterThanOrEqual(lead.failover.p50Ms!);
    });
  });

  it('left no lock node behind once the session timeout had passed (checked from a fresh client)', () => {
    check(() => {
      expect(result.checkError).toBeUndefined();
      expect(result.orphanPaths).toEqual([]);
      expect(result.orphans).toBe(0);
    });
  });

  it('had no worker crash, unhandled rejection or hang', () => {
    check(() => {
      expect(result.fatals).toEqual([]);
      expect(result.crashes).toEqual([]);
      expect(result.stuckAtStop).toEqual([]);
    });
  });

  it('injected every fault and observed its effect', () => {
    check(() => {
      expect(result.faults.map((f) => [f.fault, f.observed ? 'observed' : f.evidence])).toEqual(FAULTS.map((f) => [f, 'observed']));
    });
  });

  it('partitions (connections closed, or silent): the lease signal fired before the server could expire the session and before the next holder acquired; the next holder came only after the old session was gone; the late write was rejected', () => {
    check(() => {
      const timeout = result.options.sessionTimeoutMs;
      for (const name of ['partition holder past session timeout', 'silent partition (nothing passes, nothing closes) of a holder past session timeout']) {
        const f = result.faults.find((x) => x.fault === name)!;
        expect(f.lostReason).toBe('session-timeout');
        expect(f.lostMs).toBeGreaterThanOrEqual(timeout / 3 - 300);
        expect(f.lostMs).toBeLessThanOrEqual(timeout + 500);
        expect(f.signalAfterNextHolderMs).toBeLessThan(0);
        expect(f.nextAfterSessionGone).toBe(true);
        expect(f.lateWrite).toBe('rejected');
        expect(f.marginMs).toBeGreaterThanOrEqual(0);
      }
    });
  });

  it('every lost signal came before the server let the lock go (its node disappeared, or another holder acquired), except where excused (SIGSTOP, a foreign delete)', () => {
    check(() => {
      const judged = result.lostSignalMargins.filter((m) => !m.excused);
      expect(judged.length).toBeGreaterThanOrEqual(4);
      expect(judged.filter((m) => m.marginMs === undefined || m.late)).toEqual([]);
      expect(result.lateSignals).toBe(0);
    });
  });

  it('silenced right after the watch event that made it the holder: told before the server expired its session and before the other process took the lock', () => {
    check(() => {
      const f = result.faults.find((x) => x.fault.startsWith('silent partition right after a watch event'))!;
      expect(f.madeHolder).toBe(true);
      expect(f.lostReason).toBe('session-timeout');
      expect(f.marginMs).toBeGreaterThanOrEqual(0);
      expect(f.signalBeforeNextHolderMs).toBeGreaterThan(0);
    });
  });

  it('rolling restart: the holder still inside its critical section after the grace was told (shutdown) before another process held the lock', () => {
    check(() => {
      const f = result.faults.find((x) => x.fault.startsWith('rolling restart'))!;
      expect(f.lostReason).toBe('shutdown');
      expect(f.signalBeforeNextHolderMs).toBeGreaterThan(0);
    });
  });

  it('try-once during outages (cut off, silent link, ensemble down): each failed with reason connection within its 2 s bound', () => {
    check(() => {
      expect(result.tryOnce.calls).toBeGreaterThan(20);
      expect(result.tryOnce.failedBursts).toEqual([]);
      expect(Object.keys(result.tryOnce.outcomes).every((k) => k.endsWith(': connection'))).toBe(true);
    });
  });

  it('SIGSTOP / SIGKILL of a holder: the next holder came only after the old session was gone; the write on SIGCONT was rejected', () => {
    check(() => {
      const paused = result.faults.find((x) => x.fault.startsWith('SIGSTOP'))!;
      expect(paused.nextAfterSessionGone).toBe(true);
      expect(paused.lateWrite).toBe('rejected');
      expect(['session-expired', 'session-timeout']).toContain(paused.lostReason);
      const killed = result.faults.find((x) => x.fault === 'SIGKILL worker holding the mutex')!;
      expect(killed.nextAfterSessionGone).toBe(true);
    });
  });
});
