import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { zkConnectString } from '../support/helpers.js';

const fixture = (name: string) => fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));

/**
 * Runs a consumer app in its own Node process against the built package (`npm test` builds it
 * first). The process must exit by itself: a handle left open after app.close() would keep it
 * alive until the timeout kills it.
 */
function runConsumer(file: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [fixture(file)],
      { env: { ...process.env, ZK_CONNECT: zkConnectString() }, timeout: 30_000 },
      (error, stdout, stderr) => resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr }),
    );
  });
}

describe('the published package', () => {
  it('is importable from a CommonJS Nest app (its CommonJS build) and exits cleanly', async () => {
    const { code, stdout, stderr } = await runConsumer('cjs-consumer.cjs');
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(stdout).toMatch(/^held \/locks\/consumer-cjs\/_c_[0-9a-f-]{36}-lock-\d{10}$/m);
  });

  it('is importable from an ESM Nest app and exits cleanly even with a lock left held', async () => {
    const { code, stdout, stderr } = await runConsumer('esm-consumer.mjs');
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(stdout).toMatch(/^held \/locks\/consumer-esm\/_c_[0-9a-f-]{36}-lock-\d{10}$/m);
  });
});
