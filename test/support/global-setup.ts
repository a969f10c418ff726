// Jest globalSetup: one standalone ZooKeeper for the whole run, unless ZK_CONNECT names one.
// Jest hands the process.env changes made here to the test workers.
// NB: jest loads globalSetup/globalTeardown as CommonJS, without moduleNameMapper, so these
// two files cannot import ./zk-server.js (nor use import.meta): they use node builtins only.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

declare global {
  // set here, read by global-teardown.ts: stops what this setup started
  var __ZK_TEST_SERVER__: { dir: string; stop: () => Promise<void> } | undefined;
}

function zkScript(rootDir: string, args: string[], echoStderr = false): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      'bash',
      [join(rootDir, 'scripts', 'zookeeper.sh'), ...args],
      { cwd: rootDir, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) =>
        err
          ? reject(new Error(`scripts/zookeeper.sh ${args.join(' ')} failed: ${err.message}\n${stderr}`))
          : resolve(stdout.trim().split('\n').pop() ?? ''),
    );
    if (echoStderr) child.stderr?.pipe(process.stderr);
  });
}

export default async function globalSetup(globalConfig: { rootDir: string }): Promise<void> {
  if (process.env.ZK_CONNECT) return;
  const { rootDir } = globalConfig;
  if (!existsSync('/usr/share/zookeeper/bin/zkServer.sh')) await zkScript(rootDir, ['install'], true);
  // the script creates the dir (and a full stop removes it); the watchdog (--owner-pid) stops
  // the server should this jest process die before global-teardown.ts runs
  const dir = join(tmpdir(), `nestjs-zk-lock-zk.${randomBytes(6).toString('hex')}`);
  process.env.ZK_CONNECT = await zkScript(rootDir, ['start', '--dir', dir, '--owner-pid', String(process.pid)]);
  process.env.ZK_TEST_DIR = dir;
  globalThis.__ZK_TEST_SERVER__ = { dir, stop: () => zkScript(rootDir, ['stop', '--dir', dir]).then(() => undefined) };
}
