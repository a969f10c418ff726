// `npm run demo`: the ticket sale that never oversells. Makes sure a ZooKeeper is there (a
// throw-away standalone one unless ZK_CONNECT is set), builds the library and the sample app,
// then runs the same sale twice on 3 instances sharing one SQLite file: with @WithLock, and with
// LOCKS=off. Prints both results side by side. In the run with locks it then stops the leader of
// 'jobs:housekeeping' (SIGTERM) and prints who led, how soon another instance led, and how the
// leader-only housekeeping job ran per tick around it. Stops everything it started, also on Ctrl-C.
//
// Options (environment): DEMO_INSTANCES (3), DEMO_BUYERS (600), DEMO_SEATS (100),
// DEMO_CONCURRENCY (50), LOCK_WAIT_MS (the instances' default), DEMO_SKIP_BUILD=1.
// This process never connects to ZooKeeper itself: it only spawns the instances and talks HTTP.
import { join } from 'node:path';
import { newZkDir, startStandalone, zkScript } from './support/zookeeper.mjs';
import { ROOT, build, comparisonTable, describeLockSnapshot, leaderReport, progressBar, runScenario, stopAllInstances, verdict } from '../sample-app/scenario.mjs';

const number = (name, fallback) => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer`);
  return value;
};
const settings = {
  instances: number('DEMO_INSTANCES', 3),
  buyers: number('DEMO_BUYERS', 600),
  seats: number('DEMO_SEATS', 100),
  concurrency: number('DEMO_CONCURRENCY', 50),
  lockWaitMs: process.env.LOCK_WAIT_MS === undefined ? undefined : Number(process.env.LOCK_WAIT_MS),
};
const say = (text = '') => process.stderr.write(`${text}\n`);

/** @type {import('./support/zookeeper.mjs').ZkServerHandle | undefined} */
let zooKeeper;
const interrupted = new AbortController();
async function stopZooKeeper() {
  if (!zooKeeper) return;
  const server = zooKeeper;
  zooKeeper = undefined;
  try {
    await server.stop();
  } catch (error) {
    say(`could not stop ZooKeeper in ${server.dir}: ${error.message}`);
  }
}
// Ctrl-C: the instances first (by PID; they release their locks and close their sessions), then
// ZooKeeper (by the script). Anything still running at exit is killed by scenario.mjs.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, async () => {
    if (interrupted.signal.aborted) return;
    interrupted.abort(new Error(signal));
    say(`\n${signal}: stopping the instances and ZooKeeper`);
    await stopAllInstances({ graceMs: 5000 });
    await stopZooKeeper();
    process.exit(130);
  });
}

try {
  let connect = process.env.ZK_CONNECT;
  if (!connect) {
    await zkScript(['install'], { echoStdout: true, echoStderr: true });
    // Owned by this process: should it die without cleaning up, a watchdog stops the server.
    zooKeeper = await startStandalone({ dir: newZkDir('demo'), echoStderr: true });
    connect = zooKeeper.connectString;
  }
  // A ZooKeeper of your own may be shared: keep this run's locks apart.
  const basePath = process.env.ZK_CONNECT ? `/nestjs-zk-lock-demo-${process.pid}/locks` : '/locks';

  if (process.env.DEMO_SKIP_BUILD !== '1') {
    say('building the library (dist/) and the sample app (sample-app/dist/)');
    build();
  }

  const workDir = join(ROOT, 'sample-app', 'data', 'demo');
  const { instances, buyers, seats, concurrency } = settings;
  say(
    `\nThe sale: ${instances} instances of sample-app, one SQLite file, ZooKeeper at ${connect}. ` +
      `${buyers} buyers want 1 seat each of an event with ${seats} seats, ${concurrency} at a time, round-robin over the instances.`,
  );
  const runs = [];
  for (const locks of [true, false]) {
    const title = locks ? 'with @WithLock  ' : 'LOCKS=off       ';
    const tty = process.stderr.isTTY;
    let lastDraw = 0;
    let lastQuarter = -1;
    const run = await runScenario({
      ...settings,
      zkConnect: connect,
      workDir,
      locks,
      basePath,
      signal: interrupted.signal,
      takeover: locks, // LOCKS=off has no election to take over
      onTakeover: (leader) => say(`  after the sale: stopping the leader of jobs:housekeeping, ${leader.name} (pid ${leader.pid}), to time its successor`),
      onInstances: (list) => say(`\n${title.trim()}: ${list.map((i) => `${i.name} (pid ${i.pid}, :${i.port})`).join(', ')}`),
      onProgress: (progress) => {
        if (interrupted.signal.aborted) return;
        if (tty) {
          const now = Date.now();
          if (now - lastDraw < 80 && progress.done < progress.total) return;
          lastDraw = now;
          process.stderr.write(`\r\x1b[2K  ${title}${progressBar(progress)}`);
          if (progress.done === progress.total) process.stderr.write('\n');
        } else {
          const quarter = Math.floor((progress.done / progress.total) * 4);
          if (quarter === lastQuarter) return;
          lastQuarter = quarter;
          say(`  ${title}${progressBar(progress)}`);
        }
      },
    });
    runs.push(run);
    say(`  sale over in ${(run.saleMs / 1000).toFixed(1)} s; ${describeLockSnapshot(locks ? run.lockSnapshot : undefined).replace(/^no snapshot$/, 'no locks to show')}`);
    if (run.other > 0) say(`  other errors, e.g.: ${run.otherSamples.join(' | ')}`);
  }

  console.log(`\n${comparisonTable(runs)}\n\n${verdict(runs)}\n\n${leaderReport(runs)}\n`);
  say(`instance logs and databases: ${workDir}`);
  const [on, off] = runs;
  // A missed tick is reported, not a failure; one instance has no one to hand over to.
  const takeoverOk = on.instances.length < 2 || (on.takeover?.successor !== undefined && on.takeover.doubled.length === 0);
  process.exitCode = on.oversold === 0 && on.other === 0 && takeoverOk ? 0 : 1;
  if (off.oversold === 0) say('(LOCKS=off did not oversell this time: the race depends on timing)');
} catch (error) {
  if (!interrupted.signal.aborted) {
    say(`demo failed: ${error.stack ?? error}`);
    process.exitCode = 1;
  }
} finally {
  if (!interrupted.signal.aborted) await stopZooKeeper(); // else the signal handler does, after the instances
}
