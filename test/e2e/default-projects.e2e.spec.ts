import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stripVTControlCharacters } from 'node:util';
import { zkConnectString } from '../support/helpers.js';

// Nest projects, each in a folder of its own, installing the packed package as a user would (from
// the npm registry, with their own Nest, @nestjs/schedule, test runner and TypeScript):
// - nest11-cjs: a default Nest 11 project (CommonJS, ts-jest, TypeScript 5.7, both tsconfigs
//   `nest new` has written) with @nestjs/schedule 6 (12 is ES-module-only: Jest's CommonJS
//   runtime cannot load it);
// - nest12-esm: a Nest 12 ES module project on Jest (ts-jest in ESM mode, TypeScript 5.9);
// - nest12-vitest: a Nest 12 project as `nest new` (@nestjs/cli 12) makes it by default: ES
//   modules, TypeScript 6, Vitest 4 (on Vite 8, whose Oxc transform emits decorator metadata).
// Each has a @Cron job under @WithLock and an @Interval job under @OnlyLeader (@nestjs/schedule 12
// with Nest 12), checked in its own test runner, over nestjs-zk-lock/testing and over ZooKeeper,
// and an AppModule that registers nothing for errors: two buyers of one seat get 201 and 409, a
// 5 000-character key 400, from ZkLockModule alone.
// Then the Vitest project on Vite 7, as a project locked before Vite 8 has it: esbuild drops the
// decorator metadata, and docs/testing.md's unplugin-swc config brings it back.
// The projects install concurrently (mostly network and disk); `npm test` builds dist first.
const root = fileURLToPath(new URL('../..', import.meta.url));
const consumers = join(root, 'test/consumers');

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, env: { ...process.env, ...env }, timeout: 300_000, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${command} ${args.join(' ')} failed in ${cwd}:\n${stdout}\n${stderr}`));
      else resolve(stripVTControlCharacters(`${stdout}\n${stderr}`));
    });
  });
}

type Runner = 'jest' | 'vitest';
const projects: [name: string, label: string, runner: Runner][] = [
  ['nest11-cjs', 'a default Nest 11 project (CommonJS, ts-jest, @nestjs/schedule 6)', 'jest'],
  ['nest12-esm', 'a Nest 12 ES module project on Jest (@nestjs/schedule 12)', 'jest'],
  ['nest12-vitest', 'a Nest 12 project as nest new makes it (ES modules, TypeScript 6, Vitest)', 'vitest'],
];

/** The runner's summary line for `count` passed tests out of `count`. */
function passed(runner: Runner, count: number): RegExp {
  return runner === 'jest' ? new RegExp(`Tests:\\s+${count} passed, ${count} total`) : new RegExp(`Tests\\s+${count} passed \\(${count}\\)`);
}

let work: string;
let tarball: string;
const installed = new Map<string, Promise<string>>();
beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'zk-lock-consumers-'));
  await run('npm', ['pack', '--ignore-scripts', '--pack-destination', work], root);
  tarball = join(work, readdirSync(work).find((file) => file.endsWith('.tgz'))!);
  for (const [name] of projects) {
    const dir = join(work, name);
    const install = (async () => {
      cpSync(join(consumers, name), dir, { recursive: true });
      await run('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund'], dir);
      // Without install scripts, as on a CI image without build tools: the package needs none.
      await run('npm', ['install', tarball, '--ignore-scripts', '--no-save', '--no-audit', '--no-fund'], dir);
      return dir;
    })();
    install.catch(() => undefined); // awaited (and reported) by the project's own beforeAll
    installed.set(name, install);
  }
}, 120_000);
afterAll(async () => {
  await Promise.allSettled(installed.values());
  rmSync(work, { recursive: true, force: true });
});

describe.each(projects)('%s: %s', (name, _label, runner) => {
  let dir: string;
  beforeAll(async () => {
    dir = await installed.get(name)!;
  }, 600_000);

  it('type-checks against the package with its tsconfig(s)', async () => {
    await run('npm', ['run', 'typecheck'], dir);
  }, 120_000);

  it('installs nothing native: no zookeeper addon, and the package has no install script', async () => {
    expect(existsSync(join(dir, 'node_modules/zookeeper'))).toBe(false);
    const lock = JSON.parse(readFileSync(join(dir, 'node_modules/.package-lock.json'), 'utf8')) as { packages: Record<string, { hasInstallScript?: boolean }> };
    const own = Object.entries(lock.packages).filter(([path]) => path === 'node_modules/nestjs-zk-lock' || path.startsWith('node_modules/nestjs-zk-lock/'));
    expect(own.length).toBeGreaterThan(0);
    expect(own.filter(([, entry]) => entry.hasInstallScript)).toEqual([]);
  });

  it('runs unit tests through nestjs-zk-lock/testing (a @Cron job under its lock)', async () => {
    const output = await run('npm', ['test'], dir);
    expect(output).toMatch(passed(runner, 4));
  }, 180_000);

  it('runs an e2e test against ZooKeeper, installed as above (HTTP with the answers of ZkLockModule alone: 201/409 and 400, a TCP microservice, @Cron under @WithLock, @Interval under @OnlyLeader)', async () => {
    const output = await run('npm', ['run', 'test:e2e'], dir, { ZK_CONNECT: zkConnectString() });
    expect(output).toMatch(passed(runner, 5));
  }, 180_000);
});

// Not what nest new writes: docs/testing.md's fix for Vitest on Vite 7 or older, whose esbuild transform
// does not emit decorator metadata (Nest then injects undefined into constructors).
const swcVitestConfig = `import swc from 'unplugin-swc';
import { defineConfig } from 'vitest/config';
import tsconfigPaths from 'vite-tsconfig-paths';

export default defineConfig({
  plugins: [tsconfigPaths(), swc.vite({ module: { type: 'es6' } })],
  test: {
    globals: true,
    root: './',
    include: ['**/*.spec.ts'],
  },
});
`;

describe('nest12-vitest on Vite 7 (esbuild)', () => {
  it('loses constructor injection without unplugin-swc and passes its unit tests with it', async () => {
    const dir = await installed.get('nest12-vitest')!;
    // --no-save drops what package.json does not list, so the packed package goes in again with them.
    await run('npm', ['install', 'vite@^7', 'unplugin-swc@^2', '@swc/core@^1', tarball, '--ignore-scripts', '--no-save', '--no-audit', '--no-fund'], dir);
    expect(await run('npx', ['vite', '--version'], dir)).toMatch(/vite\/7\./);
    const without = await run('npm', ['test'], dir).catch((error: Error) => stripVTControlCharacters(error.message));
    expect(without).toContain("TypeError: Cannot read properties of undefined (reading 'sell')");
    expect(without).toMatch(/Tests\s+1 failed \| 3 passed \(4\)/);
    writeFileSync(join(dir, 'vitest.config.swc.ts'), swcVitestConfig);
    expect(await run('npx', ['vitest', 'run', '--config', './vitest.config.swc.ts'], dir)).toMatch(passed('vitest', 4));
  }, 300_000);
});
