import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('../scripts/zookeeper.sh', import.meta.url));

/** Runs `work(connectString)` against ZK_CONNECT, or a standalone server started (and stopped) here. */
export async function withZooKeeper(work) {
  if (process.env.ZK_CONNECT) return work(process.env.ZK_CONNECT);
  execFileSync('bash', [SCRIPT, 'install'], { stdio: 'inherit' });
  // A path that does not exist yet: the script creates it and removes it again on stop.
  const dir = join(tmpdir(), `nestjs-zk-lock-bench.${process.pid}.${Date.now()}`);
  const connect = execFileSync('bash', [SCRIPT, 'start', '--dir', dir, '--owner-pid', String(process.pid)], { stdio: ['ignore', 'pipe', 'inherit'] }).toString().trim().split('\n').pop();
  try {
    return await work(connect);
  } finally {
    execFileSync('bash', [SCRIPT, 'stop', '--dir', dir], { stdio: 'inherit' });
  }
}

export function percentile(values, p) {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export function median(values) {
  return percentile(values, 50);
}

export function printTable(header, rows) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) => '| ' + cells.map((c, i) => String(c).padEnd(widths[i])).join(' | ') + ' |';
  console.log(line(header));
  console.log('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|');
  for (const row of rows) console.log(line(row));
}
