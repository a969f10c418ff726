import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { uniquePath, zkConnectString } from '../../support/helpers.js';

const WORKER = fileURLToPath(new URL('../fixtures/counter-worker.mjs', import.meta.url));
const PROCESSES = 4;
const INCREMENTS = 25;

/** Runs PROCESSES worker processes on one counter file; resolves with the final count. */
async function runWorkers(locked: boolean): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'zk-counter-'));
  const counterFile = join(dir, 'counter');
  await writeFile(counterFile, '0');
  const lockPath = uniquePath('counter');
  const startAt = String(Date.now() + 1500); // after every Node process has loaded and connected
  try {
    await Promise.all(
      Array.from(
        { length: PROCESSES },
        () =>
          new Promise<void>((resolve, reject) =>
            execFile(
              process.execPath,
              [WORKER, lockPath, counterFile, String(INCREMENTS), locked ? '1' : '0'],
              { env: { ...process.env, ZK_CONNECT: zkConnectString(), START_AT: startAt }, timeout: 120_000 },
              (error, _stdout, stderr) => (error ? reject(new Error(`worker failed: ${error.message}\n${stderr}`)) : resolve()),
            ),
          ),
      ),
    );
    return Number(await readFile(counterFile, 'utf8'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('mutex across processes', () => {
  it(`loses no update: ${PROCESSES} processes × ${INCREMENTS} read→await→write increments inside the lock`, async () => {
    expect(await runWorkers(true)).toBe(PROCESSES * INCREMENTS);
  });

  it('and the same workload without the lock does lose updates (the test can fail)', async () => {
    expect(await runWorkers(false)).toBeLessThan(PROCESSES * INCREMENTS);
  });
});
