// `npm run chaos -- --schedules N` / `--schedule-seconds S`: randomized fault schedules
// (generate.mjs, run-schedule.mjs) against a throw-away standalone ZooKeeper, one after the other,
// each printed as a line; a failing one prints its seed, its schedule and its history's tail.
//
//   node scripts/chaos/index.mjs --schedules N | --schedule-seconds S
//        [--seed FIRST] [--seeds a,b,c] [--schedule-ms MS] [--recipe mutex|semaphore|read-write|multi-lock|leadership]
//        [--session-timeout-ms MS] [--faults-per-second F] [--edge-faults-per-second F] [--lib PATH]
//        [--zk HOST:PORT] [--json FILE] [--keep-going] [--ensemble]
//
// Seeds run FIRST, FIRST+1, ... (default: from the clock, printed); --seeds lists them instead
// (a replay: `--seeds 1234`). --schedule-ms is each schedule's fault window (default 8000).
// --lib is the library's core module (default dist/core/index.js; e.g. an older build to compare).
// --ensemble: a 3-server quorum of its own (servers linked through forwarders here), each client
// behind a proxy per server, and server faults drawn too: the leader or a follower killed
// (SIGKILL, restarted after a while), a follower cut off from the others with its client port up.
// Session timeout 6000 ms there unless --session-timeout-ms.
// Edge faults (generate.mjs's EDGE_FAULT_KINDS, --edge-faults-per-second, default 0.3, 0: none):
// a stall inside a client's handshake, a reply over 1 MiB, a server restart (maybe with a lower
// maxSessionTimeout; not with --zk, a server the run does not own) and on the ensemble a follower
// lagging behind the leader.
// Stops at the first failing schedule unless --keep-going. Exit code 0: every schedule passed;
// 1: a violation; 2: the run itself failed.
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { REPO_ROOT, startEnsemble, startStandalone, TICK_TIME_MS } from '../../support/zookeeper.mjs';
import { describeSchedule, faultListing, generateSchedule } from './generate.mjs';
import { runSchedule } from './run-schedule.mjs';
import { serverControl } from './servers.mjs';

const { values: args } = parseArgs({
  options: {
    schedules: { type: 'string' },
    'schedule-seconds': { type: 'string' },
    seed: { type: 'string' },
    seeds: { type: 'string' },
    'schedule-ms': { type: 'string' },
    recipe: { type: 'string' },
    'session-timeout-ms': { type: 'string' },
    'faults-per-second': { type: 'string' },
    'edge-faults-per-second': { type: 'string' },
    lib: { type: 'string' },
    zk: { type: 'string' },
    json: { type: 'string' },
    'keep-going': { type: 'boolean', default: false },
    ensemble: { type: 'boolean', default: false },
  },
});

const fail = (/** @type {string} */ message) => {
  process.stderr.write(`chaos --schedules: ${message}\n`);
  process.exit(2);
};
const seedList = args.seeds?.split(',').map(Number);
const count = args.schedules !== undefined ? Number(args.schedules) : seedList ? seedList.length : Infinity;
const seconds = args['schedule-seconds'] !== undefined ? Number(args['schedule-seconds']) : Infinity;
if (count === Infinity && seconds === Infinity) fail('give --schedules N, --schedule-seconds S or --seeds');
if (!(count > 0) || !(seconds > 0)) fail('--schedules and --schedule-seconds expect positive numbers');
const firstSeed = args.seed !== undefined ? Number(args.seed) : Date.now() % 2 ** 31;
const scheduleMs = Number(args['schedule-ms'] ?? 8000);
const sessionTimeoutMs = Number(args['session-timeout-ms'] ?? (args.ensemble ? 6000 : 4000));
const faultsPerSecond = args['faults-per-second'] !== undefined ? Number(args['faults-per-second']) : undefined;
const edgeFaultsPerSecond = args['edge-faults-per-second'] !== undefined ? Number(args['edge-faults-per-second']) : undefined;
const libPath = resolve(args.lib ?? `${REPO_ROOT}/dist/core/index.js`);
const lib = await import(pathToFileURL(libPath).href).catch((e) => fail(`cannot load ${libPath} (run \`npm run build\`): ${e.message}`));

if (args.ensemble && args.zk) fail('--ensemble starts its own servers: no --zk with it');
const server = args.zk ? undefined : args.ensemble ? await startEnsemble({ peerLinks: true }) : await startStandalone();
const connectString = args.zk ?? /** @type {any} */ (server).connectString;
/** @type {import('./generate.mjs').ServerKind} */
const serverKind = args.zk ? 'shared' : args.ensemble ? 'ensemble' : 'standalone';
const servers = server && serverControl(server, args.ensemble ? 'ensemble' : 'standalone');
console.log(`fault schedules against ${connectString}, library ${libPath}; first seed ${firstSeed}`);

const deadline = Date.now() + seconds * 1000;
/** @type {any[]} */
const results = [];
let failed = 0;
let exitCode = 0;
try {
  for (let i = 0; i < count && Date.now() < deadline; i++) {
    const seed = seedList ? seedList[i] : firstSeed + i;
    if (seed === undefined) break;
    const schedule = generateSchedule(seed, { durationMs: scheduleMs, sessionTimeoutMs, faultsPerSecond, edgeFaultsPerSecond, recipe: args.recipe, server: serverKind });
    const result = await runSchedule({ lib, connectString, schedule, servers, serverTickTimeMs: args.zk ? undefined : TICK_TIME_MS });
    const line = `#${i + 1} seed ${seed}: ${result.ok ? 'ok  ' : 'FAIL'} ${(result.elapsedMs / 1000).toFixed(1)} s ${describeSchedule(schedule)} | ${JSON.stringify(result.stats)}`;
    console.log(line);
    results.push({ seed, ok: result.ok, elapsedMs: result.elapsedMs, schedule: describeSchedule(schedule), stats: result.stats, faultsRun: result.faultsRun, violations: result.violations, warnings: result.warnings, ...(result.ok ? {} : { faults: schedule.faults, events: result.events }) });
    if (!result.ok) {
      failed++;
      console.log(
        `  replay: npm run chaos -- --seeds ${seed} --schedule-ms ${scheduleMs}${args.recipe ? ` --recipe ${args.recipe}` : ''}${faultsPerSecond ? ` --faults-per-second ${faultsPerSecond}` : ''}${edgeFaultsPerSecond !== undefined ? ` --edge-faults-per-second ${edgeFaultsPerSecond}` : ''}${args.zk ? ` --zk ${args.zk}` : ''}${args.ensemble ? ' --ensemble' : ''}${args['session-timeout-ms'] ? ` --session-timeout-ms ${sessionTimeoutMs}` : ''}\n${faultListing(schedule)}\n` +
          `  violations (${result.violations.length}):\n    ${result.violations.slice(0, 12).join('\n    ')}\n  faults as they ran:\n${result.events.filter((e) => / fault /.test(e)).join('\n')}\n` +
          `  history (last 80 events):\n${result.events.slice(-80).join('\n')}`,
      );
      if (!args['keep-going']) break;
    }
  }
  console.log(`fault schedules: ${results.length} run, ${failed} failed${failed ? ` (seeds ${results.filter((r) => !r.ok).map((r) => r.seed).join(', ')})` : ''}`);
  if (args.json) writeFileSync(args.json, JSON.stringify({ connectString, libPath, results }, (_, v) => (typeof v === 'bigint' ? String(v) : v), 2));
  exitCode = failed ? 1 : 0;
} catch (error) {
  console.error(error);
  exitCode = 2;
} finally {
  await server?.stop();
}
process.exit(exitCode);
