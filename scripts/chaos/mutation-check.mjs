// Do the safety tools catch what they exist for? Puts known defects back into the library, one at a
// time, each in a throw-away checkout of HEAD (built there), and runs the tools against it: the
// session simulation (scripts/simulation/, virtual time) and the real-time fault schedules
// (scripts/chaos/schedule/, a real ZooKeeper: standalone, and with --ensemble three servers). Prints
// how many worlds or schedules each tool needed to catch each defect, or that it did not within its
// budget. On demand only (minutes per defect for the real-time tools):
//
//   node scripts/chaos/mutation-check.mjs [--defects a,b] [--tools simulation,schedules,ensemble]
//        [--simulations N] [--schedules N] [--ensemble-schedules N] [--seed S] [--json FILE]
//
// Defaults: every defect, every tool; 3000 worlds, 30 standalone and 20 ensemble schedules, seed 1.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { REPO_ROOT } from '../support/zookeeper.mjs';

/**
 * Each defect: where it goes (file, the text it replaces, exactly once) and where it comes from.
 * @type {{ id: string, what: string, file: string, find: string, replace: string }[]}
 */
export const DEFECTS = [
  {
    id: 'deadline-from-read',
    what: "a new session's deadline counted from when its ConnectRequest's answer was read (issue #34, 1)",
    file: 'lib/core/client/wire/session.ts',
    find: 'this.requests.negotiated(response.timeoutMs, this.connectRequestSentAt);',
    replace: 'this.requests.negotiated(response.timeoutMs, this.clock.now());',
  },
  {
    id: 'reattach-keeps-timer',
    what: 'a re-attach granted a shorter timeout leaves the lost timer armed for the old one (issue #34, 2)',
    file: 'lib/core/connection/zk-connection.ts',
    find: 'if (this.connectedSessions.has(session)) this.armDeadline(session);',
    replace: '',
  },
  {
    id: 'latest-timeout',
    what: 'the deadline uses the latest negotiated timeout, not the shortest (a late report from an older link)',
    file: 'lib/core/client/session-bookkeeping.ts',
    find: 'this.shortestTimeoutMs = Math.min(this.shortestTimeoutMs, timeoutMs);',
    replace: 'this.shortestTimeoutMs = timeoutMs;',
  },
  {
    id: 'lost-signal-late',
    what: 'the lost signal fires at the deadline, not a margin before it (synthetic)',
    file: 'lib/core/connection/zk-connection.ts',
    find: '}, Math.max(0, due));',
    replace: '}, Math.max(0, due) + lossMarginMs(session.timeoutMs));',
  },
  {
    id: 'every-answer-moves-deadline',
    what: "every answer moves the deadline, also a cut-off follower's (the partitioned-follower defect)",
    file: 'lib/core/client/session-bookkeeping.ts',
    find: 'if (viaLeader) {\n        const heard = this.newestAnsweredBy(request.sentAt - this.reportLag());',
    replace: 'if (viaLeader || !viaLeader) {\n        const heard: number | undefined = request.sentAt;',
  },
  {
    id: 'reconnect-unconfirmed',
    what: 'a reconnect counts as connected before a sync on the new link is answered (the reconnect-trust defect)',
    file: 'lib/core/connection/zk-connection.ts',
    find: '    this.confirmLink(session, link);\n  }',
    replace: "    this.confirming = undefined;\n    this.setState('connected');\n    this.emit('reconnected', session.id);\n  }",
  },
  {
    id: 'connected-link-down',
    what: "a new session said connected although its link dropped while its deadline was being freshened",
    file: 'lib/core/connection/zk-connection.ts',
    find: 'if (!session.isConnectedNatively) return this.prepareAgain(session, isCurrent);',
    replace: '',
  },
  {
    id: 'grant-without-isheld',
    what: 'a grant handed out without checking the deadline on the clock (synthetic)',
    file: 'lib/core/recipes/lock-recipe.ts',
    find: 'if (!lease.isHeld) {',
    replace: 'if (false as boolean) {',
  },
  {
    id: 'handoff-ignores-connection',
    what: "a local handoff that ignores the connection's state (synthetic)",
    file: 'lib/core/recipes/mutex-coalescing.ts',
    find: "connection.state === 'connected' &&\n      connection.session === node.session &&",
    replace: 'true &&',
  },
  {
    id: 'handoff-keeps-token',
    what: 'a local handoff that does not raise the fencing token',
    file: 'lib/core/recipes/mutex-coalescing.ts',
    find: 'own.lease.fencingToken + BigInt(own.handoffs)',
    replace: 'own.lease.fencingToken',
  },
];

const { values: args } = parseArgs({
  options: {
    defects: { type: 'string' },
    tools: { type: 'string', default: 'simulation,schedules,ensemble' },
    simulations: { type: 'string', default: '3000' },
    schedules: { type: 'string', default: '30' },
    'ensemble-schedules': { type: 'string', default: '20' },
    seed: { type: 'string', default: '1' },
    json: { type: 'string' },
  },
});
const tools = String(args.tools).split(',');
const chosen = args.defects ? DEFECTS.filter((d) => String(args.defects).split(',').includes(d.id)) : DEFECTS;
const seed = Number(args.seed);

/**
 * Runs `node args...` in the repository; resolves with its stdout (it may fail: a caught defect exits 1).
 * @param {string[]} argv
 * @returns {Promise<string>}
 */
function run(argv) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, argv, { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.on('close', () => resolve(out));
  });
}

/** A checkout of HEAD with `defect` put in, built: its dist/ folder. @param {typeof DEFECTS[number]} defect */
function buildMutant(defect) {
  const dir = mkdtempSync(join(tmpdir(), `zk-mutant-${defect.id}-`));
  execFileSync('git', ['worktree', 'add', '--detach', '--quiet', dir, 'HEAD'], { cwd: REPO_ROOT });
  symlinkSync(join(REPO_ROOT, 'node_modules'), join(dir, 'node_modules'));
  const file = join(dir, defect.file);
  const text = readFileSync(file, 'utf8');
  if (text.split(defect.find).length !== 2) throw new Error(`${defect.id}: its text is not in ${defect.file} exactly once (the code moved: update DEFECTS)`);
  writeFileSync(file, text.replace(defect.find, defect.replace));
  execFileSync(process.execPath, [join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { cwd: dir, stdio: 'inherit' });
  return dir;
}

/** @param {string} dir */
function removeMutant(dir) {
  execFileSync('git', ['worktree', 'remove', '--force', dir], { cwd: REPO_ROOT });
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Which world or schedule (counting from 1) first showed the defect, or undefined.
 * @param {string} tool @param {string} dist
 * @returns {Promise<{ caughtAt: number | undefined, of: number }>}
 */
async function check(tool, dist) {
  if (tool === 'simulation') {
    const n = Number(args.simulations);
    const out = await run(['scripts/simulation/main.mjs', '--simulations', String(n), '--seed', String(seed), '--lib', join(dist, 'dist'), '--parallel', '8']);
    const failed = [...out.matchAll(/^seed (\d+) FAILED/gm)].map((m) => Number(m[1]) - seed + 1);
    return { caughtAt: failed.length ? Math.min(...failed) : undefined, of: n };
  }
  const n = Number(tool === 'ensemble' ? args['ensemble-schedules'] : args.schedules);
  const extra = tool === 'ensemble' ? ['--ensemble'] : [];
  const out = await run(['scripts/chaos/index.mjs', '--schedules', String(n), '--seed', String(seed), '--lib', join(dist, 'dist/core/index.js'), ...extra]);
  const failed = /^#(\d+) seed \d+: FAIL/m.exec(out);
  return { caughtAt: failed ? Number(failed[1]) : undefined, of: n };
}

/** @type {{ id: string, what: string, [tool: string]: unknown }[]} */
const rows = [];
for (const defect of chosen) {
  console.log(`\n== ${defect.id}: ${defect.what}`);
  const dir = buildMutant(defect);
  /** @type {{ id: string, what: string, [tool: string]: unknown }} */
  const row = { id: defect.id, what: defect.what };
  try {
    for (const tool of tools) {
      const result = await check(tool, dir);
      row[tool] = result;
      console.log(`   ${tool}: ${result.caughtAt ? `caught at ${result.caughtAt}` : `not caught in ${result.of}`}`);
    }
  } finally {
    removeMutant(dir);
  }
  rows.push(row);
}

const cell = (/** @type {any} */ r) => (r === undefined ? '–' : r.caughtAt ? `${r.caughtAt}` : `not in ${r.of}`);
console.log(`\n| defect | ${tools.join(' | ')} |\n|---|${tools.map(() => '---').join('|')}|`);
for (const row of rows) console.log(`| ${row.id}: ${row.what} | ${tools.map((t) => cell(row[t])).join(' | ')} |`);
if (args.json) writeFileSync(String(args.json), JSON.stringify(rows, null, 2));
