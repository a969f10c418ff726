// A throw-away 3-node ensemble for the chaos runners, driven through scripts/zookeeper.sh and
// four-letter words only (the runners' own process holds no ZooKeeper connection: what it observes
// must not depend on the library under test).
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
const ZK_SCRIPT = join(REPO, 'scripts', 'zookeeper.sh');
export const SERVER_IDS = [1, 2, 3];

export function fourLetter(port, cmd, timeoutMs = 2000) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const socket = net.createConnection({ host: '127.0.0.1', port }, () => socket.end(cmd));
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`${cmd} to ${port} timed out`)));
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', (hadError) => !hadError && resolve(Buffer.concat(chunks).toString('utf8')));
  });
}

/** The ensemble in its own temp folder (`dir`); `verbose` passes the script's messages on. */
export function ensemble({ verbose = false } = {}) {
  const dir = join(tmpdir(), `nestjs-zk-lock-chaos.${randomBytes(6).toString('hex')}`);
  /** Runs `zookeeper.sh <args>`; resolves with its last line of stdout. */
  const script = (cmdArgs) =>
    new Promise((resolve, reject) => {
      execFile('bash', [ZK_SCRIPT, ...cmdArgs], { cwd: REPO, timeout: 180_000, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
        if (verbose && stderr) process.stderr.write(stderr);
        if (error) reject(new Error(`zookeeper.sh ${cmdArgs.join(' ')}: ${error.message}\n${stderr}`));
        else resolve(stdout.trim().split('\n').pop() ?? '');
      });
    });
  const port = (id) => Number(readFileSync(join(dir, `server.${id}.port`), 'utf8').trim());
  const pid = (id) => Number(readFileSync(join(dir, `server.${id}.pid`), 'utf8').trim());
  async function modeOf(id) {
    try {
      return /^Mode: (\w+)$/m.exec(await fourLetter(port(id), 'srvr', 1000))?.[1] ?? 'down';
    } catch {
      return 'down';
    }
  }
  async function leaders() {
    const modes = await Promise.all(SERVER_IDS.map(async (id) => [id, await modeOf(id)]));
    return modes.filter(([, m]) => m === 'leader').map(([id]) => id);
  }
  async function waitForLeader(timeoutMs = 60_000, exclude = []) {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const l = await leaders();
      if (l.length === 1 && !exclude.includes(l[0])) return l[0];
      await sleep(100);
    }
    return undefined;
  }
  return { dir, script, port, pid, modeOf, leaders, waitForLeader };
}
