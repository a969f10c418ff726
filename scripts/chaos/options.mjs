// The chaos run's command line (documented in run.mjs's header) and the settings derived from it.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { REPO_ROOT } from '../support/zookeeper.mjs';

export const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string' },
    short: { type: 'boolean', default: false },
    processes: { type: 'string' },
    json: { type: 'string' },
    verbose: { type: 'boolean', default: false },
    faults: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  const lines = readFileSync(fileURLToPath(new URL('./run.mjs', import.meta.url)), 'utf8').split('\n').slice(1);
  const header = lines.slice(0, lines.findIndex((l) => !l.startsWith('//')));
  process.stdout.write(`${header.map((l) => l.replace(/^\/\/ ?/, '')).join('\n')}\n`);
  process.exit(0);
}

export const short = args.short;
export const opts = {
  short,
  seconds: args.seconds !== undefined ? Number(args.seconds) : short ? 0 : 150,
  processes: Number(args.processes ?? 3),
  mutexWorkers: 4,
  semWorkers: 2,
  rwWorkers: 2,
  permits: 2,
  sessionTimeoutMs: short ? 4000 : 6000,
  waitMs: short ? 8000 : 10_000,
  holdMs: [5, 25],
  writeRatio: 0.3,
  /** How long killed servers stay down. */
  downMs: short ? 1500 : 4000,
  /** Quiet time between faults (after the system is healthy again). */
  gapMs: short ? 500 : 3000,
  /** How far past the session timeout a SIGSTOPped holder stays stopped. */
  pauseExtraMs: short ? 2000 : 4000,
  /** A SIGTERMed worker's holders get this long before their signals abort (engine.shutdown()). */
  shutdownGraceMs: 2000,
  /** How long a worker sends try-once acquires while cut off. */
  tryOnceBurstMs: short ? 2500 : 4000,
};
if (!Number.isFinite(opts.seconds) || opts.seconds < 0) fail('--seconds expects a number of seconds');
if (!Number.isInteger(opts.processes) || opts.processes < 3) fail('--processes expects an integer ≥ 3');
export const FAULT_NAMES = [
  'leader', 'follower', 'partition', 'silent-partition', 'notify-partition', 'pause', 'kill-holder', 'kill-waiter',
  'rolling-restart', 'foreign-set', 'try-once-outage', 'ensemble', 'follower-cut',
  'kept-node-delete',
];
if (args.faults !== undefined && !args.faults.split(',').every((f) => FAULT_NAMES.includes(f.trim()))) {
  fail(`--faults expects a comma-separated list of ${FAULT_NAMES.join(', ')}`);
}
export const HARD_LIMIT_MS = (short ? 240 : opts.seconds + 360) * 1000;

export function fail(message) {
  process.stderr.write(`chaos: ${message}\n`);
  process.exit(2);
}
if (!existsSync(join(REPO_ROOT, 'dist', 'core', 'index.js'))) fail('dist/ is missing: run `npm run build` (or npx tsc -p tsconfig.build.json) first');
