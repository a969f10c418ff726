// `npm run chaos -- --simulations N` / `--simulation-seconds S`: the session simulation
// (simulate.mjs) over many seeds, on virtual time against the model of ZooKeeper; a failing seed
// prints its world, its violations and the end of its trace, and replays with --seeds.
//
//   node scripts/chaos/index.mjs --simulations N | --simulation-seconds S
//        [--seed FIRST] [--seeds a,b,c] [--parallel P] [--lib DIR] [--keep-going] [--json FILE]
//
// Seeds run FIRST, FIRST+1, ... (default: from the clock, printed). --lib: the folder of the
// build to simulate (default dist/). --parallel: simulations interleaved in this process
// (default 16; they share the event loop's turns). Exit code 0: no violation; 1: a violation.
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { REPO_ROOT } from '../support/zookeeper.mjs';
import { simulate } from './simulate.mjs';

const { values: args } = parseArgs({
  options: {
    simulations: { type: 'string' },
    'simulation-seconds': { type: 'string' },
    seed: { type: 'string' },
    seeds: { type: 'string' },
    parallel: { type: 'string' },
    lib: { type: 'string' },
    'keep-going': { type: 'boolean', default: false },
    json: { type: 'string' },
    verbose: { type: 'boolean', default: false },
  },
  strict: false,
});

const dist = resolve(String(args.lib ?? resolve(REPO_ROOT, 'dist')));
const load = (/** @type {string} */ path) => import(pathToFileURL(resolve(dist, path)).href);
const [{ ZkConnection, lossMarginMs }, { wireSessionFactoryWith }, core] = await Promise.all([
  load('core/connection/zk-connection.js'),
  load('core/client/wire/session.js'),
  load('core/index.js'),
]);
const { LockEngine, Mutex, LockNotAcquiredError, ConnectionClosedError } = core;
const lib = { ZkConnection, wireSessionFactoryWith, lossMarginMs, LockEngine, Mutex, LockNotAcquiredError, ConnectionClosedError };

const listed = typeof args.seeds === 'string' ? args.seeds.split(',').map(Number) : undefined;
const first = Number(args.seed ?? Date.now() % 1_000_000_000);
const count = listed?.length ?? (args.simulations !== undefined ? Number(args.simulations) : Infinity);
const deadline = args['simulation-seconds'] !== undefined ? Date.now() + Number(args['simulation-seconds']) * 1000 : Infinity;
const parallel = Number(args.parallel ?? 16);
if (!listed) console.log(`simulating from seed ${first}${Number.isFinite(count) ? `, ${count} worlds` : ''}`);

const started = Date.now();
let next = 0;
let done = 0;
let failed = 0;
const totals = { sessions: 0, losses: 0, spuriousLosses: 0, expiries: 0, unforeseeable: 0, holds: 0, events: 0, stuck: 0 };
/** @type {number[]} */
const slack = [];
/** @type {object[]} */
const failures = [];
process.on('unhandledRejection', (error) => {
  console.log(`unhandled rejection: ${error instanceof Error ? error.stack : String(error)}`);
});

async function worker() {
  while (next < count && Date.now() < deadline && (failed === 0 || args['keep-going'])) {
    const seed = listed ? listed[next] : first + next;
    next++;
    const result = await simulate(lib, seed);
    done++;
    totals.sessions += result.stats.sessions;
    totals.losses += result.stats.losses;
    totals.spuriousLosses += result.stats.spuriousLosses;
    totals.expiries += result.stats.expiries;
    totals.unforeseeable += result.stats.unforeseeable;
    totals.holds += result.stats.holds;
    totals.events += result.stats.events;
    totals.stuck += result.stats.stuck ? 1 : 0;
    slack.push(...result.stats.spuriousSlackMs);
    if (result.violations.length > 0) {
      failed++;
      failures.push({ seed, world: result.world, violations: result.violations });
      console.log(`\nseed ${seed} FAILED: ${result.world}\n  ${result.violations.join('\n  ')}\ntrace:\n${result.trace.join('\n')}\nreplay: npm run chaos -- --simulations 1 --seeds ${seed}\n`);
    } else if (args.verbose) console.log(`seed ${seed} ok: ${result.world}`);
    if (done % 500 === 0) console.log(`${done} worlds, ${failed} failed, ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }
}
await Promise.all(Array.from({ length: parallel }, worker));

const seconds = (Date.now() - started) / 1000;
slack.sort((a, b) => a - b);
const median = slack.length ? slack[Math.floor(slack.length / 2)] : 0;
console.log(
  `${done} worlds in ${seconds.toFixed(1)} s (${Math.round((done / seconds) * 60)} a minute), ${failed} with a violation; ` +
    `${totals.sessions} sessions, ${totals.expiries} expired by the leader (${totals.unforeseeable} after a re-attach shortened the timeout, before the client read its answer), ` +
    `${totals.losses} declared lost by the client, ` +
    `${totals.holds} lock holds, ` +
    `${totals.spuriousLosses} of them while the ensemble still held the session (median ${median.toFixed(0)} ms before the leader would have expired it); ` +
    `${totals.stuck} worlds not connected at the end; ${totals.events} events`,
);
if (args.json) writeFileSync(String(args.json), JSON.stringify({ done, failed, totals, failures }, null, 2));
process.exit(failed > 0 ? 1 : 0);
