import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { zkConnectString } from '../support/helpers.js';

// A default Nest 11 project (CommonJS, ts-jest, both tsconfigs `nest new` has written) and a Nest 12
// ES module project, each in a folder of its own, installing the packed package as a user would
// (from the npm registry, with their own Nest, Jest and TypeScript). `npm test` builds dist first.
const root = fileURLToPath(new URL('../..', import.meta.url));
const consumers = join(root, 'test/consumers');

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, env: { ...process.env, ...env }, timeout: 240_000, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} ${args.join(' ')} failed in ${cwd}:\n${stdout}\n${stderr}`));
      else resolve(`${stdout}\n${stderr}`);
    });
  });
}

let work: string;
let tarball: string;
beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'zk-lock-consumers-'));
  await run('npm', ['pack', '--ignore-scripts', '--pack-destination', work], root);
  tarball = join(work, readdirSync(work).find((file) => file.endsWith('.tgz'))!);
}, 120_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe.each([
  ['nest11-cjs', 'a default Nest 11 project (CommonJS, ts-jest)'],
  ['nest12-esm', 'a Nest 12 ES module project'],
])('%s: %s', (name) => {
  let dir: string;
  beforeAll(async () => {
    dir = join(work, name);
    cpSync(join(consumers, name), dir, { recursive: true });
    await run('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund'], dir);
    // Without install scripts, as on a CI image without build tools: the addon is not compiled.
    await run('npm', ['install', tarball, '--ignore-scripts', '--no-save', '--no-audit', '--no-fund'], dir);
  }, 300_000);

  it('type-checks against the package with its tsconfig(s)', async () => {
    await run('npm', ['run', 'typecheck'], dir);
  }, 120_000);

  it('runs a unit test through nestjs-zk-lock/testing without the native addon', async () => {
    expect(existsSync(join(dir, 'node_modules/zookeeper/build'))).toBe(false);
    const output = await run('npm', ['test'], dir);
    expect(output).toMatch(/Tests:\s+2 passed, 2 total/);
  }, 120_000);

  it('runs an e2e test against ZooKeeper (HTTP and a TCP microservice)', async () => {
    // The addon as our own install compiled and patched it (the same zookeeper 7.3.0), instead of
    // compiling it again here for two minutes.
    rmSync(join(dir, 'node_modules/zookeeper'), { recursive: true, force: true });
    cpSync(join(root, 'node_modules/zookeeper'), join(dir, 'node_modules/zookeeper'), { recursive: true });
    const output = await run('npm', ['run', 'test:e2e'], dir, { ZK_CONNECT: zkConnectString() });
    expect(output).toMatch(/Tests:\s+2 passed, 2 total/);
  }, 120_000);
});
