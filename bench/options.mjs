// The bench's command line (documented in run.mjs's header), this run's identity, and the
// correctness failures found along the way (reported at the end; exit code 1).
import { readFileSync } from 'node:fs';

/** @param {string[]} argv */
export function parseArgs(argv) {
  /** @type {{ quick: boolean, curator: boolean, redis: boolean, addon: boolean, profile: boolean, ensemble: boolean, only?: Set<string>, churnSeconds?: number, rounds?: number, roundMs?: number }} */
  const opts = { quick: false, curator: true, redis: true, addon: true, profile: false, ensemble: false, only: undefined };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--quick':
        opts.quick = true;
        break;
      case '--churn-seconds':
        opts.churnSeconds = Number(value());
        break;
      case '--rounds':
        opts.rounds = Number(value());
        break;
      case '--round-ms':
        opts.roundMs = Number(value());
        break;
      case '--only':
        opts.only = new Set(value().split(','));
        break;
      case '--profile':
        opts.profile = true;
        break;
      case '--ensemble':
        opts.ensemble = true;
        break;
      case '--no-curator':
        opts.curator = false;
        break;
      case '--no-redis':
        opts.redis = false;
        break;
      case '--no-addon':
        opts.addon = false;
        break;
      case '--help':
      case '-h':
        console.log(readFileSync(new URL('./run.mjs', import.meta.url), 'utf8').split('\n').filter((l) => l.startsWith('//')).join('\n'));
        process.exit(0);
        break;
      default:
        throw new Error(`unknown option ${argv[i]} (see --help)`);
    }
  }
  const q = opts.quick;
  return {
    ...opts,
    // Many short alternating rounds: on a shared 2-core machine load comes in bursts, and a
    // median over more rounds is less at their mercy.
    rounds: opts.rounds ?? (q ? 2 : 8),
    roundMs: opts.roundMs ?? (q ? 800 : 1000),
    warmupMs: q ? 400 : 700,
    // Curator's JVM needs seconds of C2 compilation before its client CPU per acquisition settles
    // (in a 700 ms warm-up it fell from ~470 to ~100 µs over the following rounds).
    jvmWarmupMs: q ? 2000 : 5000,
    churnSeconds: opts.churnSeconds ?? (q ? 20 : 300),
    queueLengths: [2, 8, 64],
    queueRounds: q ? 1 : 3,
    queueReleases: q ? 100 : 300,
    holdMs: 5,
    // Leadership handover: per round and peer, after a warm-up (also the JVMs' JIT) per peer.
    electionSamples: q ? 30 : 60,
    electionWarmup: q ? 10 : 40,
    electionSettleMs: 5,
    recipeHoldMs: 2,
    scaleLocks: 10_000,
    scaleWaiters: 1_000,
    profileSeconds: q ? 3 : 6,
    // Closing a lost session on a silent link: samples per client, and the session timeout there.
    closeSamples: q ? 1 : 3,
    closeSessionTimeoutMs: 2000,
  };
}

export const opts = parseArgs(process.argv.slice(2));
export const wants = (/** @type {string} */ part) => !opts.only || opts.only.has(part);
export const RUN = `run-${process.pid}`;
export const BASE = `/bench/${RUN}`;
export const startedAt = new Date();
/** @type {string[]} */
export const failures = [];

export function fail(message) {
  failures.push(message);
  console.error(`\n!!!!!!!! CORRECTNESS FAILURE: ${message}\n`);
}

export function stamp() {
  return startedAt.toISOString().replace(/[:.]/g, '-');
}
