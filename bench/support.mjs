// Helpers for bench/run.mjs: the throw-away servers (ZooKeeper, Redis), the Curator peer's build,
// child "agents" spoken to over stdio, ZooKeeper's mntr counters, process CPU time, statistics,
// the table and CPU-profile summaries. Nothing here opens a ZooKeeper session.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { connect as tcpConnect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { fourLetter, newZkDir, startEnsemble, startStandalone, zkScript } from '../scripts/support/zookeeper.mjs';

export const BENCH_DIR = fileURLToPath(new URL('.', import.meta.url));

// ---------------------------------------------------------------------------------------------
// ZooKeeper

/**
 * Runs `work(connectString, { pid })` against ZK_CONNECT, or a standalone server (with
 * `--ensemble`: a 3-server quorum) started and stopped here; `pid` is the servers' JVMs when we
 * started them (for their CPU time), else undefined.
 * @template T
 * @param {(connectString: string, server: { pid: number[] | undefined }) => Promise<T>} work
 * @param {{ ensemble?: boolean }} [options]
 * @returns {Promise<T>}
 */
export async function withZooKeeper(work, { ensemble = false } = {}) {
  if (process.env.ZK_CONNECT) return work(process.env.ZK_CONNECT, { pid: undefined });
  await zkScript(['install'], { echoStderr: true });
  // ZooKeeper's own container reaper interval (60 s), as in production: the tests' 1 s would reap
  // the paths of W5's keys between two uses of a key.
  const start = { dir: newZkDir('bench'), echoStderr: true, jvmFlags: '-Dznode.container.checkIntervalMs=60000' };
  const zk = ensemble ? await startEnsemble(start) : await startStandalone(start);
  try {
    const pids = zk.servers.map((s) => s.pid).filter((pid) => pid > 0);
    return await work(zk.connectString, { pid: pids.length ? pids : undefined });
  } finally {
    await zk.stop();
  }
}

/** The numeric `mntr` values of every server in a connect string, summed per key. */
export async function mntr(connectString) {
  const hosts = connectString.replace(/\/.*$/, '').split(',');
  /** @type {Record<string, number>} */
  const sums = {};
  for (const text of await Promise.all(hosts.map((h) => fourLetter(h, 'mntr', 5000)))) {
    for (const line of text.split('\n')) {
      const [key, value] = line.split('\t');
      const n = Number(value);
      if (key && value !== undefined && Number.isFinite(n)) sums[key] = (sums[key] ?? 0) + n;
    }
  }
  return sums;
}

/**
 * Watch notifications the server sent: each of these summaries gets, per triggered event, the
 * number of connections (watchers) notified (WatchManager.triggerWatch), so their `sum` is the
 * number of WatcherEvent packets. zk_watch_count is only a gauge of armed watches.
 */
export const NOTIFICATION_COUNTERS = [
  'zk_sum_node_created_watch_count',
  'zk_sum_node_deleted_watch_count',
  'zk_sum_node_changed_watch_count',
  'zk_sum_node_children_watch_count',
];

export function notificationsIn(before, after) {
  return NOTIFICATION_COUNTERS.reduce((n, key) => n + ((after[key] ?? 0) - (before[key] ?? 0)), 0);
}

// ---------------------------------------------------------------------------------------------
// Processes

let clkTck;
function clockTicksPerSecond() {
  try {
    clkTck ??= Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    clkTck = 100;
  }
  return clkTck;
}

/** User + system CPU time of a process (ms), from /proc; undefined when unknown. */
/**
 * CPU time (user + sys) of a process, or the sum over several (an ensemble's servers).
 * @param {number | number[] | undefined} pid
 * @returns {number | undefined}
 */
export function processCpuMs(pid) {
  if (Array.isArray(pid)) {
    const each = pid.map((p) => processCpuMs(p));
    return each.some((ms) => ms === undefined) ? undefined : each.reduce((/** @type {number} */ a, b) => a + (b ?? 0), 0);
  }
  if (!pid) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is the state (field 3); utime and stime are fields 14 and 15.
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicksPerSecond();
  } catch {
    return undefined;
  }
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = /** @type {import('node:net').AddressInfo} */ (server.address());
      server.close(() => resolve(port));
    });
  });
}

export function commandExists(cmd) {
  const result = spawnSync('bash', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
  return result.status === 0;
}

/** apt-get install when running as root on Debian; returns whether it ran and succeeded. */
export function aptInstall(packages) {
  if (process.getuid?.() !== 0 || !commandExists('apt-get')) return false;
  console.error(`bench: apt-get install -y --no-install-recommends ${packages.join(' ')}`);
  const result = spawnSync('apt-get', ['install', '-y', '--no-install-recommends', ...packages], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  return result.status === 0;
}

/**
 * Our own redis-server on a free loopback port, in the foreground of a child process (no
 * persistence); `stop()` signals exactly that pid.
 */
export async function startRedis() {
  if (!commandExists('redis-server') && !aptInstall(['redis-server'])) return undefined;
  const port = await freePort();
  const dir = join(tmpdir(), `nestjs-zk-lock-bench-redis.${process.pid}`);
  mkdirSync(dir, { recursive: true });
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no', '--dir', dir, '--loglevel', 'warning'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (c) => (stderr += c));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      const reply = await redisPing(port);
      if (reply.startsWith('+PONG')) break;
    } catch {
      // not up yet
    }
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`redis-server did not start on port ${port}: ${stderr}`);
    }
    await sleep(50);
  }
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', () => child.exitCode === null && child.kill('SIGKILL'));
  return { port, pid: child.pid, stop };
}

function redisPing(port) {
  return new Promise((resolve, reject) => {
    const socket = tcpConnect({ host: '127.0.0.1', port });
    let text = '';
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (c) => {
      text += c;
      if (text.includes('\r\n')) socket.end();
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(text));
  });
}

// ---------------------------------------------------------------------------------------------
// Curator (Java)

export const CURATOR_APT_PACKAGES = ['libcurator-recipes-java', 'libcurator-framework-java', 'libcurator-client-java', 'default-jdk-headless'];
const JAR_DIR = process.env.CURATOR_JAR_DIR ?? '/usr/share/java';
const ARTIFACTS = ['curator-recipes', 'curator-framework', 'curator-client', 'zookeeper', 'zookeeper-jute', 'guava', 'slf4j-api', 'slf4j-simple'];
export const JAVA = process.env.JAVA ?? 'java';
const JAVAC = process.env.JAVAC ?? 'javac';
const CURATOR_SOURCE = join(BENCH_DIR, 'java', 'CuratorBench.java');

function findJar(files, artifact) {
  if (files.includes(`${artifact}.jar`)) return join(JAR_DIR, `${artifact}.jar`);
  const pattern = new RegExp(`^${artifact.replace(/[-.]/g, '\\$&')}-(\\d[\\w.-]*)\\.jar$`);
  const best = files
    .map((f) => ({ f, version: pattern.exec(f)?.[1] }))
    .filter((x) => x.version !== undefined)
    .sort((a, b) => a.version.localeCompare(b.version, 'en', { numeric: true }))
    .at(-1);
  return best ? join(JAR_DIR, best.f) : undefined;
}

function curatorClasspath() {
  if (process.env.CURATOR_CLASSPATH) return process.env.CURATOR_CLASSPATH;
  let files = [];
  try {
    files = readdirSync(JAR_DIR);
  } catch {
    return undefined;
  }
  const jars = ARTIFACTS.map((a) => findJar(files, a));
  return jars.every(Boolean) ? jars.join(delimiter) : undefined;
}

/**
 * Compiles CuratorBench.java (once per source + classpath, cached in the temp dir) and returns the
 * java arguments to start it, or throws with the reason it cannot run here.
 */
export function prepareCurator() {
  const javaOk = () => [JAVA, JAVAC].every((c) => spawnSync(c, ['-version'], { stdio: 'ignore' }).status === 0);
  let classpath = curatorClasspath();
  if (!classpath || !javaOk()) {
    aptInstall(CURATOR_APT_PACKAGES);
    classpath = curatorClasspath();
  }
  if (!javaOk()) throw new Error('java and javac are needed (apt-get install default-jdk-headless)');
  if (!classpath) throw new Error(`Curator jars missing in ${JAR_DIR} (apt-get install --no-install-recommends ${CURATOR_APT_PACKAGES.join(' ')})`);
  const source = readFileSync(CURATOR_SOURCE);
  const hash = createHash('sha256').update(source).update('\0').update(classpath).digest('hex').slice(0, 16);
  const target = join(tmpdir(), `nestjs-zk-lock-curator-bench.${hash}`);
  if (!existsSync(join(target, 'CuratorBench.class'))) {
    const staging = `${target}.build.${process.pid}`;
    rmSync(staging, { recursive: true, force: true });
    mkdirSync(staging, { recursive: true });
    const result = spawnSync(JAVAC, ['-Xlint:-path', '-encoding', 'UTF-8', '-cp', classpath, '-d', staging, CURATOR_SOURCE], {
      encoding: 'utf8',
      timeout: 180_000,
    });
    if (result.status !== 0) throw new Error(`javac ${CURATOR_SOURCE} failed:\n${result.stdout}${result.stderr}`);
    try {
      renameSync(staging, target);
    } catch (error) {
      if (!existsSync(join(target, 'CuratorBench.class'))) throw error;
      rmSync(staging, { recursive: true, force: true });
    }
  }
  return (connectString) => [
    '-Xmx256m',
    '-XX:+UseSerialGC',
    '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
    // ZooKeeper's client logs a stack trace at WARN on every normal close.
    '-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error',
    '-cp',
    [target, classpath].join(delimiter),
    'CuratorBench',
    connectString,
  ];
}

// ---------------------------------------------------------------------------------------------
// Agents: child processes that answer one line per command, in order

const liveAgents = new Set();
process.once('exit', () => {
  for (const agent of liveAgents) agent.child.kill('SIGKILL');
});

export class Agent {
  /** What close() sends to ask it to quit (default: the Node agent's quit command). @type {string | undefined} */
  quitLine;

  constructor(name, command, args, options = {}) {
    this.name = name;
    this.child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'], cwd: options.cwd, env: options.env ?? process.env });
    liveAgents.add(this);
    this.queue = [];
    this.stderr = '';
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (chunk) => {
      this.stderr = (this.stderr + chunk).slice(-32_768);
      if (options.echoStderr) process.stderr.write(chunk.replace(/^/gm, `[${name}] `));
    });
    this.child.stdin.on('error', () => undefined);
    /** @type {Promise<void>} */
    this.exited = new Promise((resolve) =>
      this.child.once('exit', (code, signal) => {
        liveAgents.delete(this);
        this.exitInfo = signal ?? `code ${code}`;
        for (const waiter of this.queue.splice(0)) waiter.reject(new Error(`${name} exited (${this.exitInfo})${this.tail()}`));
        resolve();
      }),
    );
    this.ready = new Promise((resolve, reject) => {
      this.queue.push({ resolve, reject });
    });
    const lines = createInterface({ input: this.child.stdout, crlfDelay: Infinity });
    lines.on('line', (line) => {
      const waiter = this.queue.shift();
      if (!waiter) {
        process.stderr.write(`[${name}] unexpected output: ${line}\n`);
        return;
      }
      let value;
      try {
        value = JSON.parse(line);
      } catch {
        waiter.reject(new Error(`${name}: not JSON: ${line.slice(0, 200)}`));
        return;
      }
      if (value.ok === false) waiter.reject(new Error(`${name}: ${value.error}`));
      else waiter.resolve(value);
    });
  }

  tail() {
    const text = this.stderr.trim();
    return text ? `\n--- ${this.name} stderr ---\n${text.split('\n').slice(-25).join('\n')}` : '';
  }

  /** Sends one line (a string, or an object as JSON); resolves with the reply. */
  request(message) {
    return new Promise((resolve, reject) => {
      if (this.exitInfo) {
        reject(new Error(`${this.name} has exited (${this.exitInfo})${this.tail()}`));
        return;
      }
      this.queue.push({ resolve, reject });
      this.child.stdin.write((typeof message === 'string' ? message : JSON.stringify(message)) + '\n');
    });
  }

  /** Asks it to quit; kills it after `graceMs`. */
  async close(graceMs = 10_000) {
    if (this.exitInfo) return;
    this.child.stdin.write(typeof this.quitLine === 'string' ? this.quitLine : '{"cmd":"quit"}\n');
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}

// ---------------------------------------------------------------------------------------------
// Statistics and output

export function percentile(values, p) {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export function median(values) {
  return percentile(values, 50);
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function printTable(header, rows, align = []) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i] ?? '').length)));
  const cell = (c, i) => (align[i] === 'r' ? String(c ?? '').padStart(widths[i]) : String(c ?? '').padEnd(widths[i]));
  const line = (cells) => '| ' + cells.map(cell).join(' | ') + ' |';
  console.log(line(header));
  console.log('|' + widths.map((w, i) => (align[i] === 'r' ? '-'.repeat(w + 1) + ':' : '-'.repeat(w + 2))).join('|') + '|');
  for (const row of rows) console.log(line(row));
}

/**
 * Self time of a V8 .cpuprofile by function (name, file:line) and by area (idle, GC, native,
 * this library, the zookeeper binding, node internals, the bench itself), and inclusive time of
 * the library's and the binding's functions (each sample counted once per distinct function on
 * its stack).
 */
export function summarizeCpuProfile(file, top = 15, { inclusiveOf = (/** @type {string} */ url) => url.includes('/dist/') || url.includes('node_modules/zookeeper') } = {}) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parentOf = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parentOf.set(c, n.id);
  const selfUs = new Map();
  const deltas = profile.timeDeltas ?? [];
  profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (deltas[i + 1] ?? deltas[i] ?? 0)));
  const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
  const keyOf = (callFrame) => {
    const url = callFrame.url ?? '';
    const short = url.includes('/sample-app/')
      ? url.replace(/^.*\/sample-app\/(dist\/)?/, 'sample-app/')
      : url.includes('node_modules/')
        ? url.replace(/^.*\/node_modules\//, 'node_modules/')
        : url.replace(/^file:\/\//, '').replace(/^.*\/(dist|bench)\//, '$1/');
    return `${callFrame.functionName || '(anonymous)'} ${short ? `${short}:${callFrame.lineNumber + 1}` : ''}`.trim();
  };
  const areaOf = (callFrame) => {
    const url = callFrame.url ?? '';
    if (callFrame.functionName === '(idle)') return 'idle';
    if (callFrame.functionName === '(garbage collector)') return 'GC';
    if (callFrame.functionName === '(program)') return 'native (libuv, ZooKeeper C client, V8)';
    if (url.includes('/sample-app/') && !url.includes('node_modules/')) return 'sample app';
    // A package's own dist/ (rxjs's, say) is the package's, not the library's.
    if (url.includes('node_modules/zookeeper/')) return 'zookeeper binding JS';
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\/[^]*$/.exec(url)?.[1];
    if (pkg && pkg !== 'nestjs-zk-lock') return `npm: ${pkg}`;
    if (/\/dist\/(cjs\/)?core\/client\/wire\//.test(url)) return 'TypeScript ZooKeeper client (dist/core/client/wire/)';
    if (url.includes('/dist/')) return 'library (dist/)';
    if (url.startsWith('node:')) return 'node internals';
    if (url.includes('/bench/')) return 'bench harness';
    if (url === '') return 'builtins';
    return 'other JS';
  };
  const frames = new Map();
  const areas = new Map();
  const inclusive = new Map();
  // V8 names the binding's native methods arbitrarily (e.g. "add_auth" for all of them): name a
  // native frame called from the binding's JS wrapper after that wrapper instead.
  const nativeCallOf = (id) => {
    const { callFrame } = byId.get(id);
    const parent = byId.get(parentOf.get(id));
    if (callFrame.url || callFrame.functionName.startsWith('(') || !parent?.callFrame.url?.includes('node_modules/zookeeper')) return undefined;
    return `[native zookeeper call, incl. send()] ${parent.callFrame.functionName}`;
  };
  for (const [id, us] of selfUs) {
    const { callFrame } = byId.get(id);
    const native = nativeCallOf(id);
    const key = native ?? keyOf(callFrame);
    frames.set(key, (frames.get(key) ?? 0) + us);
    const area = native ? 'zookeeper native calls' : areaOf(callFrame);
    areas.set(area, (areas.get(area) ?? 0) + us);
    const seen = new Set();
    for (let at = id; at !== undefined; at = parentOf.get(at)) {
      const cf = byId.get(at).callFrame;
      const url = cf.url ?? '';
      if (!inclusiveOf(url)) continue;
      const k = keyOf(cf);
      if (seen.has(k)) continue;
      seen.add(k);
      inclusive.set(k, (inclusive.get(k) ?? 0) + us);
    }
  }
  const sortDesc = (m) => [...m.entries()].sort((a, b) => b[1] - a[1]);
  return {
    totalMs: total / 1000,
    areas: sortDesc(areas).map(([area, us]) => ({ area, ms: us / 1000, share: us / total })),
    top: sortDesc(frames)
      .filter(([k]) => !k.startsWith('(idle)'))
      .slice(0, top)
      .map(([frame, us]) => ({ frame, ms: us / 1000, share: us / total })),
    inclusive: sortDesc(inclusive)
      .slice(0, top)
      .map(([frame, us]) => ({ frame, ms: us / 1000, share: us / total })),
  };
}
