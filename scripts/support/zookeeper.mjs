// Throw-away ZooKeeper servers on 127.0.0.1 and the four-letter words to watch them, for the
// tests (test/support/zk-server.ts re-exports this), the bench, the chaos runners and the demo.
// A thin typed wrapper over scripts/zookeeper.sh, which owns the process handling. Node builtins
// only, and no ZooKeeper session: what the tooling observes must not depend on the library.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const ZK_SCRIPT = join(REPO_ROOT, 'scripts', 'zookeeper.sh');
/** The tickTime of the servers scripts/zookeeper.sh writes (a client's serverTickTimeMs). */
export const TICK_TIME_MS = 250;

/** @typedef {'leader' | 'follower' | 'standalone' | 'down'} ZkMode */
/**
 * The PEM files of a server started with `tls` (made for that run by scripts/zookeeper.sh).
 * @typedef {object} ZkTlsMaterial
 * @property {string} ca the throw-away CA that signed the server's and the client's certificate
 * @property {string} cert the client certificate (CN=zk-test-client)
 * @property {string} key its private key
 * @property {string} serverCert the server's certificate (for the name given by `tlsName`)
 */
/**
 * @typedef {object} ZkServerInfo
 * @property {number} id
 * @property {number} port
 * @property {number} pid 0 while the server is stopped
 */
/**
 * @typedef {object} ScriptOptions
 * @property {boolean} [echoStderr] pass the script's messages (progress, errors) on to our stderr
 * @property {boolean} [echoStdout] pass its stdout on too (e.g. `install`'s progress)
 * @property {string} [jvmFlags] extra JVM flags for the servers it starts (SERVER_JVMFLAGS), e.g.
 *   `-Dznode.container.checkIntervalMs=600000` (a later -D overrides the script's own)
 */

/**
 * Runs `bash scripts/zookeeper.sh ...args`; resolves with the last stdout line (for `start` and
 * `ensemble`: the connect string).
 * @param {string[]} args
 * @param {ScriptOptions} [options]
 * @returns {Promise<string>}
 */
export function zkScript(args, { echoStderr = false, echoStdout = false, jvmFlags } = {}) {
  // An explicit env: Jest gives a test its own copy of process.env, which children do not see.
  const env = jvmFlags === undefined ? process.env : { ...process.env, SERVER_JVMFLAGS: jvmFlags };
  return new Promise((resolve, reject) => {
    const child = execFile(
      'bash',
      [ZK_SCRIPT, ...args],
      { cwd: REPO_ROOT, maxBuffer: 64 * 1024 * 1024, timeout: 300_000, env },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`scripts/zookeeper.sh ${args.join(' ')} failed: ${err.message}\n${stderr}`));
        else resolve(stdout.trim().split('\n').pop() ?? '');
      },
    );
    if (echoStderr) child.stderr?.pipe(process.stderr, { end: false });
    if (echoStdout) child.stdout?.pipe(process.stdout, { end: false });
  });
}

/**
 * Sends a four-letter word (ruok, srvr, mntr, dump, ...) to a server; resolves with the answer.
 * @param {number | string} server a port on 127.0.0.1, or "host:port"
 * @param {string} cmd
 * @param {number} [timeoutMs] of silence on the socket before giving up
 * @returns {Promise<string>}
 */
export function fourLetter(server, cmd, timeoutMs = 2000) {
  const [host, port] = typeof server === 'number' ? ['127.0.0.1', server] : splitHostPort(server);
  return new Promise((resolve, reject) => {
    /** @type {Buffer[]} */
    const chunks = [];
    const socket = createConnection({ host, port }, () => socket.end(cmd));
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`${cmd} to ${host}:${port} timed out`)));
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', (hadError) => {
      if (!hadError) resolve(Buffer.concat(chunks).toString('utf8'));
    });
  });
}

/**
 * @param {string} hostPort
 * @returns {[string, number]}
 */
function splitHostPort(hostPort) {
  const i = hostPort.lastIndexOf(':');
  return [hostPort.slice(0, i), Number(hostPort.slice(i + 1))];
}

/**
 * Mode of a server as `srvr` reports it; 'down' when it does not serve.
 * @param {number | string} server a port on 127.0.0.1, or "host:port"
 * @param {number} [timeoutMs]
 * @returns {Promise<ZkMode>}
 */
export async function modeOf(server, timeoutMs = 2000) {
  try {
    const m = /^Mode: (leader|follower|standalone)$/m.exec(await fourLetter(server, 'srvr', timeoutMs));
    return m ? /** @type {ZkMode} */ (m[1]) : 'down';
  } catch {
    return 'down';
  }
}

/**
 * Polls `check` every `intervalMs` until it returns a value other than undefined.
 * @template T
 * @param {string} what for the timeout's message
 * @param {() => Promise<T | undefined>} check
 * @param {number} [timeoutMs]
 * @param {number} [intervalMs]
 * @returns {Promise<T>}
 */
export async function waitFor(what, check, timeoutMs = 30_000, intervalMs = 100) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * A path for a new server folder: it does not exist yet (the script creates it, and a full stop
 * removes it again).
 * @param {string} [label] tells apart whose servers these are in the temp dir
 */
export function newZkDir(label = 'zk') {
  return join(tmpdir(), `nestjs-zk-lock-${label}.${randomBytes(6).toString('hex')}`);
}

/** The servers recorded in a folder made by scripts/zookeeper.sh, controlled through it. */
export class ZkServerHandle {
  /**
   * @param {string} dir the servers' config, data and logs (layout: see scripts/zookeeper.sh);
   *   it may be created later (the handle reads it afresh on every access)
   * @param {ScriptOptions} [scriptOptions] for every script run through this handle
   */
  constructor(dir, scriptOptions = {}) {
    /** @readonly */
    this.dir = dir;
    /** @private @readonly */
    this.scriptOptions = scriptOptions;
  }

  /** The connect string of all servers (`host:port,...`). */
  get connectString() {
    return this.read('connect');
  }

  /** The TLS port's connect string, `localhost:PORT` (a server started with `tls` only). */
  get secureConnectString() {
    if (!existsSync(join(this.dir, 'secure-connect'))) throw new Error(`the server in ${this.dir} was not started with tls`);
    return this.read('secure-connect');
  }

  /**
   * The CA, client certificate and key to reach the TLS port with (a server started with `tls` only).
   * @returns {ZkTlsMaterial}
   */
  get tls() {
    if (!existsSync(join(this.dir, 'tls', 'ca.pem'))) throw new Error(`the server in ${this.dir} was not started with tls`);
    return { ca: this.read('tls/ca.pem'), cert: this.read('tls/client.crt'), key: this.read('tls/client.key'), serverCert: this.read('tls/server.crt') };
  }

  /**
   * The servers as recorded in `dir`, read afresh on every access.
   * @returns {ZkServerInfo[]}
   */
  get servers() {
    return readdirSync(this.dir)
      .map((f) => /^server\.(\d+)\.cfg$/.exec(f))
      .filter((m) => m !== null)
      .map((m) => this.server(Number(m[1])))
      .sort((a, b) => a.id - b.id);
  }

  /**
   * @param {number} id
   * @returns {ZkServerInfo}
   */
  server(id) {
    const pid = existsSync(join(this.dir, `server.${id}.pid`)) ? Number(this.read(`server.${id}.pid`)) : 0;
    return { id, port: Number(this.read(`server.${id}.port`)), pid };
  }

  /**
   * Runs scripts/zookeeper.sh with this handle's script options.
   * @param {string[]} args
   */
  script(args) {
    return zkScript(args, this.scriptOptions);
  }

  /**
   * Stops every server (SIGTERM, then SIGKILL after a few seconds); removes `dir` if the script made it.
   * @returns {Promise<void>}
   */
  async stop() {
    try {
      if (existsSync(this.dir)) await this.script(['stop', '--dir', this.dir]);
    } finally {
      await PEER_LINKS.get(this.dir)?.close();
      PEER_LINKS.delete(this.dir);
    }
  }

  /**
   * Stops one server, keeping its data so that restartServer(id) can bring it back.
   * @param {number} id
   * @param {'SIGTERM' | 'SIGKILL'} [signal]
   * @returns {Promise<void>}
   */
  async stopServer(id, signal = 'SIGTERM') {
    await this.script(['stop', '--dir', this.dir, '--id', String(id), '--signal', signal]);
  }

  /**
   * Starts a stopped server again; resolves once it serves (for an ensemble: leader or follower).
   * With a session timeout bound, that line of its config is changed first (it stays so for
   * later restarts): a client that re-attaches there negotiates within the new bounds.
   * @param {number} id
   * @param {{ minSessionTimeoutMs?: number, maxSessionTimeoutMs?: number }} [config]
   * @returns {Promise<void>}
   */
  async restartServer(id, config = {}) {
    const args = ['restart', '--dir', this.dir, '--id', String(id)];
    if (config.minSessionTimeoutMs !== undefined) args.push('--min-session-timeout', String(config.minSessionTimeoutMs));
    if (config.maxSessionTimeoutMs !== undefined) args.push('--max-session-timeout', String(config.maxSessionTimeoutMs));
    await this.script(args);
  }

  /**
   * @param {number} id
   * @param {string} cmd
   * @param {number} [timeoutMs]
   */
  fourLetter(id, cmd, timeoutMs) {
    return fourLetter(this.server(id).port, cmd, timeoutMs);
  }

  /**
   * @param {number} id
   * @param {number} [timeoutMs]
   */
  mode(id, timeoutMs) {
    return modeOf(this.server(id).port, timeoutMs);
  }

  /**
   * SIGSTOP: the server hangs (no answers, no heartbeats) until resume(id).
   * @param {number} id
   */
  pause(id) {
    const pid = this.livePid(id);
    process.kill(pid, 'SIGSTOP');
    // kill() only queues the stop: a JVM thread running on the other core can still answer a
    // request for a moment (seen once in a loaded run). Return once every thread is stopped.
    const stopped = () =>
      readdirSync(`/proc/${pid}/task`).every((tid) => {
        try {
          return / [tT] /.test(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').replace(/^.*\)/s, ''));
        } catch {
          return true; // the thread is gone
        }
      });
    const until = Date.now() + 5000;
    while (!stopped() && Date.now() < until) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
  }

  /** @param {number} id */
  resume(id) {
    process.kill(this.livePid(id), 'SIGCONT');
  }

  /**
   * @private
   * @param {number} id
   */
  livePid(id) {
    const { pid } = this.server(id);
    const cmdline = pid > 0 && existsSync(`/proc/${pid}/cmdline`) ? readFileSync(`/proc/${pid}/cmdline`, 'utf8') : '';
    if (!cmdline.includes(join(this.dir, `server.${id}.cfg`))) throw new Error(`ZooKeeper server ${id} is not running`);
    return pid;
  }

  /**
   * @private
   * @param {string} file
   */
  read(file) {
    return readFileSync(join(this.dir, file), 'utf8').trim();
  }
}

export class ZkEnsembleHandle extends ZkServerHandle {
  /**
   * Silences every link between server `id` and the other servers (quorum and election ports):
   * nothing passes either way and nothing is closed, as in a network partition; its client port
   * is untouched, so it goes on answering its clients (reads, pings) until it gives up on the
   * leader (syncLimit × tickTime, 5 s) and drops them. Needs an ensemble started with
   * `peerLinks: true`. New connections to or from it are accepted and then hear nothing.
   * @param {number} id
   */
  isolate(id) {
    this.peerLinks().isolate(id);
  }

  /**
   * Ends isolate(id): drops the connections of its links (the servers open new ones, and it
   * rejoins the quorum) and forwards normally again.
   * @param {number} id
   */
  rejoin(id) {
    this.peerLinks().rejoin(id);
  }

  /**
   * Delays, in order, what server `id` and server `peer` send each other on their quorum link
   * (a follower that lags behind the leader: proposals, commits and pings come late, and so do
   * its acks and the session touches it reports): `outMs` what `id` sends, `inMs` what it
   * receives. Nothing is dropped or closed; 0 and 0 end it (what is on its way still arrives in
   * order). Infinity: nothing passes that way (a one-way partition: e.g. the leader hears none
   * of the follower's acks and touches while its commits still reach it); ending that drops the
   * two servers' connections (they open new ones). Needs an ensemble started with `peerLinks: true`.
   * @param {number} id
   * @param {number} peer
   * @param {{ outMs: number, inMs: number }} delays
   */
  lag(id, peer, delays) {
    this.peerLinks().lag(id, peer, delays);
  }

  /** @private */
  peerLinks() {
    const links = PEER_LINKS.get(this.dir);
    if (!links) throw new Error(`the ensemble in ${this.dir} was not started with peerLinks: true in this process`);
    return links;
  }

  /**
   * Ids of the servers that currently report Mode: leader (normally exactly one).
   * @returns {Promise<number[]>}
   */
  async leaders() {
    const modes = await Promise.all(this.servers.map(async (s) => /** @type {const} */ ([s.id, await this.mode(s.id, 1000)])));
    return modes.filter(([, m]) => m === 'leader').map(([id]) => id);
  }

  /**
   * Waits until exactly one server is leader (optionally: not one of `exclude`); returns its id.
   * @param {number[]} [exclude]
   * @param {number} [timeoutMs]
   * @returns {Promise<number>}
   */
  waitForLeader(exclude = [], timeoutMs = 30_000) {
    return waitFor(`a ZooKeeper leader (excluding ${exclude.join(',') || 'none'})`, async () => {
      const leaders = await this.leaders();
      return leaders.length === 1 && !exclude.includes(leaders[0]) ? leaders[0] : undefined;
    }, timeoutMs);
  }
  /**
   * Waits until one server leads and every other one follows; returns the leader, a follower and
   * the servers other than that follower.
   * @param {number} [timeoutMs]
   * @returns {Promise<{ leader: number, follower: number, others: number[] }>}
   */
  async healthy(timeoutMs = 60_000) {
    const leader = await this.waitForLeader([], timeoutMs);
    await waitFor('every server to serve', async () => {
      const modes = await Promise.all(this.servers.map((s) => this.mode(s.id, 1000)));
      return modes.every((m) => m === 'leader' || m === 'follower') ? true : undefined;
    }, timeoutMs);
    const ids = this.servers.map((s) => s.id);
    const follower = /** @type {number} */ (ids.find((id) => id !== leader));
    return { leader, follower, others: ids.filter((id) => id !== follower) };
  }
}

/**
 * The links between the servers of an ensemble started with `peerLinks: true`: one forwarder per
 * (server, other server, quorum | election port), in this process, each on its own loopback port
 * that the first server's config names for the other one (scripts/zookeeper.sh --peer-ports).
 * A forwarder looks up the target's real port when a connection comes (in the target's own
 * config), so the script may pick other ports on a clash. isolate(id) silences every link that
 * starts or ends at server `id`.
 */
/**
 * @typedef {object} PeerLink
 * @property {number} from the server that connects
 * @property {number} to the server it reaches
 * @property {'quorum' | 'election'} kind
 * @property {import('node:net').Server} server
 * @property {Set<import('node:net').Socket>} sockets both ends of every connection through it
 */
class PeerLinks {
  /** @type {Set<number>} */
  isolated = new Set();
  /** lag(): `${sender}>${receiver}` -> ms that the quorum link's data from sender to receiver waits. @type {Map<string, number>} */
  delays = new Map();
  /** What waits (lag) to be written to a socket, in order. @type {WeakMap<import('node:net').Socket, DelayLine>} */
  lines = new WeakMap();
  /** @type {PeerLink[]} */
  links = [];

  /** @param {string} dir */
  constructor(dir) {
    /** @readonly */
    this.dir = dir;
  }

  /** Opens the 12 forwarders; resolves with their ports in the order of --peer-ports. */
  async open() {
    for (const from of [1, 2, 3]) {
      for (const to of [1, 2, 3]) {
        if (to === from) continue;
        for (const kind of /** @type {const} */ (['quorum', 'election'])) {
          /** @type {PeerLink} */
          const link = { from, to, kind, server: createServer((socket) => this.accept(link, socket)), sockets: new Set() };
          this.links.push(link);
          await new Promise((resolve, reject) => {
            link.server.once('error', reject);
            link.server.listen(0, '127.0.0.1', () => resolve(undefined));
          });
        }
      }
    }
    return this.links.map((l) => /** @type {import('node:net').AddressInfo} */ (l.server.address()).port);
  }

  /** @param {PeerLink} link */
  silent(link) {
    return this.isolated.has(link.from) || this.isolated.has(link.to);
  }

  /**
   * @param {PeerLink} link
   * @param {import('node:net').Socket} socket
   */
  accept(link, socket) {
    link.sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => link.sockets.delete(socket));
    // Isolated: the connection is there, and nothing ever comes through it (until rejoin()).
    if (this.silent(link)) return;
    // The connection is accepted before the target is reached, so a target that does not listen
    // (yet) must not look like one that closed at once: a follower that reaches a new leader's
    // quorum port a moment before it listens would give up and start another election (seconds,
    // with its backoff). So the forwarder keeps trying for a while, holding what the peer sends.
    /** @type {Buffer[]} */
    const pending = [];
    /** @type {import('node:net').Socket | undefined} */
    let upstream;
    const rewrite = link.kind === 'election' ? this.initialMessageRewriter(link) : undefined;
    socket.on('data', (received) => {
      if (this.silent(link)) return;
      const chunk = rewrite ? rewrite(received) : received;
      if (!chunk) return;
      if (upstream) this.pass(link, link.from, upstream, chunk);
      else pending.push(chunk);
    });
    // A close does not cross a silent link either: the other side stays open, hearing nothing.
    socket.on('close', () => {
      if (!this.silent(link)) upstream?.destroy();
    });
    const started = Date.now();
    const attempt = () => {
      if (socket.destroyed || this.silent(link)) return;
      const attemptSocket = createConnection({ host: '127.0.0.1', port: this.targetPort(link) ?? 1 });
      link.sockets.add(attemptSocket);
      attemptSocket.on('error', () => undefined);
      attemptSocket.once('connect', () => {
        upstream = attemptSocket;
        for (const chunk of pending.splice(0)) this.pass(link, link.from, attemptSocket, chunk);
      });
      attemptSocket.on('data', (chunk) => {
        if (!this.silent(link)) this.pass(link, link.to, socket, chunk);
      });
      attemptSocket.on('close', () => {
        link.sockets.delete(attemptSocket);
        if (upstream !== attemptSocket) {
          if (Date.now() - started < CONNECT_TRIES_MS) setTimeout(attempt, 50);
          else socket.destroy();
        } else if (!this.silent(link)) socket.destroy();
      });
    };
    attempt();
  }

  /**
   * An election connection opens with the sender's id and its own election address, and a server
   * with a higher id closes it and connects back to that address (QuorumCnxManager): straight to
   * the real port, around the forwarders and so around isolate(). The rewriter points that address
   * at the forwarder of the way back. Returns what to pass on (undefined while the header is short).
   * @param {PeerLink} link
   * @returns {(chunk: Buffer) => Buffer | undefined}
   */
  initialMessageRewriter(link) {
    let head = Buffer.alloc(0);
    let done = false;
    return (chunk) => {
      if (done) return chunk;
      head = Buffer.concat([head, chunk]);
      if (head.length < 8) return undefined;
      // Protocol 0 (a bare sid) carries no address; 3.5+ sends a negative version, sid, length, address.
      const headerBytes = head.readBigInt64BE(0) >= 0n ? 0 : 20;
      if (headerBytes > 0 && head.length < headerBytes) return undefined;
      const addressBytes = headerBytes > 0 ? head.readInt32BE(16) : 0;
      if (head.length < headerBytes + addressBytes) return undefined;
      done = true;
      const back = this.links.find((l) => l.from === link.to && l.to === link.from && l.kind === 'election');
      if (headerBytes === 0 || !back) return head;
      const address = Buffer.from(`127.0.0.1:${/** @type {import('node:net').AddressInfo} */ (back.server.address()).port}`);
      const length = Buffer.alloc(4);
      length.writeInt32BE(address.length);
      return Buffer.concat([head.subarray(0, 16), length, address, head.subarray(headerBytes + addressBytes)]);
    };
  }

  /**
   * The real port of the link's target: from `server.<to>=host:quorum:election` in its own config.
   * @param {PeerLink} link
   */
  targetPort(link) {
    try {
      const cfg = readFileSync(join(this.dir, `server.${link.to}.cfg`), 'utf8');
      const m = new RegExp(`^server\\.${link.to}=[^:]+:(\\d+):(\\d+)`, 'm').exec(cfg);
      return m ? Number(m[link.kind === 'quorum' ? 1 : 2]) : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Writes `chunk`, which server `sender` sent on `link`, to `to`: at once, or after the link's
   * lag (behind what already waits there, so that the stream keeps its order). What is due while
   * the link is silent is dropped, as anything sent then.
   * @param {PeerLink} link
   * @param {number} sender
   * @param {import('node:net').Socket} to
   * @param {Buffer} chunk
   */
  pass(link, sender, to, chunk) {
    const receiver = sender === link.from ? link.to : link.from;
    const ms = link.kind === 'quorum' ? (this.delays.get(`${sender}>${receiver}`) ?? 0) : 0;
    if (ms === Infinity) return;
    let line = this.lines.get(to);
    if (ms === 0 && !line?.busy) return void to.write(chunk);
    if (!line) this.lines.set(to, (line = new DelayLine(to, () => this.silent(link))));
    line.push(chunk, ms);
  }

  /**
   * @param {number} id
   * @param {number} peer
   * @param {{ outMs: number, inMs: number }} delays
   */
  lag(id, peer, { outMs, inMs }) {
    const keys = [`${id}>${peer}`, `${peer}>${id}`];
    const wasSilent = keys.some((k) => this.delays.get(k) === Infinity);
    this.delays.set(keys[0], outMs);
    this.delays.set(keys[1], inMs);
    if (!wasSilent || outMs === Infinity || inMs === Infinity) return;
    // What was dropped broke their streams: new connections.
    for (const link of this.links) {
      if (!((link.from === id && link.to === peer) || (link.from === peer && link.to === id))) continue;
      for (const socket of link.sockets) socket.destroy();
      link.sockets.clear();
    }
  }

  /** @param {number} id */
  isolate(id) {
    this.isolated.add(id);
  }

  /** @param {number} id */
  rejoin(id) {
    if (!this.isolated.delete(id)) return;
    for (const link of this.links) {
      if (link.from !== id && link.to !== id) continue;
      for (const socket of link.sockets) socket.destroy();
      link.sockets.clear();
    }
  }

  async close() {
    for (const link of this.links) {
      for (const socket of link.sockets) socket.destroy();
      link.sockets.clear();
      await new Promise((resolve) => link.server.close(() => resolve(undefined)));
    }
  }
}

/** Chunks on their way to one socket, each written once its time has come, in order (PeerLinks.lag). */
class DelayLine {
  /** @type {{ due: number, chunk: Buffer }[]} */
  queue = [];
  /** @type {NodeJS.Timeout | undefined} */
  timer;

  /**
   * @param {import('node:net').Socket} socket
   * @param {() => boolean} silent what comes due while this is true is dropped
   */
  constructor(socket, silent) {
    this.socket = socket;
    this.silent = silent;
  }

  get busy() {
    return this.queue.length > 0;
  }

  /** @param {Buffer} chunk @param {number} ms */
  push(chunk, ms) {
    const last = this.queue.at(-1)?.due ?? 0;
    this.queue.push({ due: Math.max(performance.now() + ms, last), chunk });
    this.timer ??= setTimeout(() => this.drain(), Math.max(0, /** @type {number} */ (this.queue[0]?.due) - performance.now()));
  }

  /** @private */
  drain() {
    this.timer = undefined;
    while (this.queue.length > 0 && /** @type {{ due: number }} */ (this.queue[0]).due <= performance.now()) {
      const { chunk } = /** @type {{ chunk: Buffer }} */ (this.queue.shift());
      if (!this.socket.destroyed && !this.silent()) this.socket.write(chunk);
    }
    if (this.queue.length > 0) this.timer = setTimeout(() => this.drain(), Math.max(0, /** @type {{ due: number }} */ (this.queue[0]).due - performance.now()));
  }
}

/** How long a peer link keeps trying to reach a target that does not listen before it closes. */
const CONNECT_TRIES_MS = 1000;

/** The peer links of the ensembles this process started with `peerLinks: true`, by dir. @type {Map<string, PeerLinks>} */
const PEER_LINKS = new Map();

/**
 * @typedef {object} StartOptions
 * @property {string} [dir] default: newZkDir(); the script creates it and stop() removes it
 * @property {number} [ownerPid] the servers are stopped once this process exits (default: this
 *   one), even if stop() never runs
 * @property {boolean} [echoStderr] pass the script's messages on to our stderr (this and later runs)
 * @property {string} [jvmFlags] extra JVM flags for the servers (see ScriptOptions)
 * @property {'need' | 'want' | 'none'} [tls] startStandalone only: a TLS port too (secureClientPort,
 *   next to the plain port), with a throw-away CA and certificates made for this run; the value is
 *   the server's ssl.clientAuth. The handle's `secureConnectString` and `tls` give the rest.
 * @property {string} [tlsName] with `tls`: the DNS name the server's certificate is made for
 *   (default `localhost`, which also gets IP 127.0.0.1); the TLS connect string still says localhost
 * @property {boolean} [peerLinks] startEnsemble only: the servers reach each other through
 *   forwarders in this process, so that ZkEnsembleHandle.isolate(id) can cut one off from the
 *   others while its client port stays up (they last as long as this process, or until stop())
 */

/**
 * @param {string} cmd
 * @param {StartOptions} opts
 * @returns {[string, string[]]}
 */
function startArgs(cmd, opts) {
  const dir = opts.dir ?? newZkDir();
  return [dir, [cmd, '--dir', dir, '--owner-pid', String(opts.ownerPid ?? process.pid)]];
}

/**
 * One standalone server (id 1) on 127.0.0.1 (on `port`, or a free one).
 * @param {StartOptions & { port?: number }} [opts]
 * @returns {Promise<ZkServerHandle>}
 */
export async function startStandalone(opts = {}) {
  const [dir, args] = startArgs('start', opts);
  const handle = new ZkServerHandle(dir, { echoStderr: opts.echoStderr, jvmFlags: opts.jvmFlags });
  if (opts.port) args.push('--port', String(opts.port));
  if (opts.tls) args.push('--tls', opts.tls);
  if (opts.tlsName) args.push('--tls-name', opts.tlsName);
  await handle.script(args);
  return handle;
}

/**
 * Three servers in a real quorum on 127.0.0.1; resolves once one of them leads.
 * @param {StartOptions} [opts]
 * @returns {Promise<ZkEnsembleHandle>}
 */
export async function startEnsemble(opts = {}) {
  if (opts.tls) throw new Error('startEnsemble: tls is for a standalone server only');
  const [dir, args] = startArgs('ensemble', opts);
  const handle = new ZkEnsembleHandle(dir, { echoStderr: opts.echoStderr, jvmFlags: opts.jvmFlags });
  if (!opts.peerLinks) {
    await handle.script(args);
    return handle;
  }
  const links = new PeerLinks(dir);
  try {
    const ports = await links.open();
    PEER_LINKS.set(dir, links);
    await handle.script([...args, '--peer-ports', ports.join(',')]);
  } catch (error) {
    PEER_LINKS.delete(dir);
    await links.close();
    throw error;
  }
  return handle;
}
