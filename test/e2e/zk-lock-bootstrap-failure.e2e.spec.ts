import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { eventually, zkConnectString } from '../support/helpers.js';
import { fourLetter } from '../support/zk-server.js';

// An application whose bootstrap fails after ZkLockModule opened its session: Nest calls no
// shutdown hook for it, so the session used to stay open and keep the process alive for ever.
// Each case runs in a process of its own (TypeScript sources through ts-loader.mjs): its session
// must be gone from ZooKeeper while the process is still up, and the process must exit by itself.
const FIXTURES = fileURLToPath(new URL('./fixtures/', import.meta.url));

/** The sessions ZooKeeper has connections for (`cons`), as hex ids. */
async function liveSessions(): Promise<string> {
  return fourLetter(zkConnectString(), 'cons');
}

describe('a bootstrap that fails after ZkLockModule connected', () => {
  it.each([
    ['another provider cannot be built (NestFactory, abortOnError: false)', 'provider', 'this provider cannot be built'],
    ['a testing module fails to compile (Test.createTestingModule)', 'testing', 'this provider cannot be built'],
    ['another provider\'s onModuleInit throws', 'init', 'onModuleInit failed'],
  ])('closes the session and lets the process exit: %s', async (_label, how, failure) => {
    const child = spawn(process.execPath, ['--import', './ts-loader.mjs', 'bootstrap-failure-app.ts', zkConnectString(), how], {
      cwd: FIXTURES,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const exited = once(child, 'exit');
    try {
      await eventually(() => out.includes('failed:') || child.exitCode !== null, 45_000, 20);
      const session = /session ([0-9a-f]+)/.exec(out)?.[1];
      expect({ out, session: session ? 'seen' : 'missing' }).toEqual({ out: expect.stringContaining(`failed: ${failure}`), session: 'seen' });
      // While the process is still up (it stays 3 s more for this): the session is gone.
      await eventually(async () => !(await liveSessions()).includes(`sid=0x${session}`), 2500, 50);
      // Then nothing keeps the process alive.
      const [code] = (await Promise.race([exited, new Promise((resolve) => setTimeout(() => resolve(['still running after 20 s']), 20_000))])) as [unknown];
      expect({ code, out, err: code === 0 ? '' : err }).toEqual({ code: 0, out: expect.stringContaining('done'), err: '' });
    } finally {
      if (child.exitCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
    }
  }, 90_000);
});
