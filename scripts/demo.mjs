// `npm run demo`: makes sure a ZooKeeper is there (a throw-away standalone one unless ZK_CONNECT
// is set), runs the sample app against it, and stops what it started.
import { execFileSync, spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const script = join(root, 'scripts', 'zookeeper.sh');
let connect = process.env.ZK_CONNECT;
let dir;
if (!connect) {
  execFileSync('bash', [script, 'install'], { stdio: 'inherit' });
  dir = join(tmpdir(), `nestjs-zk-lock-demo.${process.pid}.${Date.now()}`); // created (and removed) by the script
  connect = execFileSync('bash', [script, 'start', '--dir', dir, '--owner-pid', String(process.pid)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
    .toString()
    .trim()
    .split('\n')
    .pop();
}
const run = spawnSync(process.execPath, [join(root, 'sample-app', 'src', 'main.mjs')], {
  stdio: 'inherit',
  env: { ...process.env, ZK_CONNECT: connect },
});
if (dir) execFileSync('bash', [script, 'stop', '--dir', dir], { stdio: 'inherit' });
process.exit(run.status ?? 1);
