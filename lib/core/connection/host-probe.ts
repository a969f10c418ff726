import { lookup } from 'node:dns/promises';
import { connect, isIP, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { LinkFailure } from '../client/session.js';
import { systemClock, type Clock } from '../clock.js';

const PROBE_TIMEOUT_MS = 1000;
/** A ZooKeeper server keeps a new connection open while it waits for the session request. */
const CLOSE_WATCH_MS = 300;
/** TLS record types (change_cipher_spec, alert, handshake, application_data): an answer that starts otherwise is not TLS. */
const TLS_RECORD_TYPES = new Set([0x14, 0x15, 0x16, 0x17]);

export interface ProbeOptions {
  /**
   * The latest failure of the session's link to each server (by `host:port`): where a server holds
   * connections open, it says more than the probe can, and on a link that was closed unanswered
   * the probe checks whether the port speaks the other protocol (TLS or plain).
   */
  failures?: ReadonlyMap<string, LinkFailure>;
  clock?: Clock;
}

export interface ProbeResult {
  /** `host:port`. */
  server: string;
  /** What it said, e.g. `connection refused`. */
  said: string;
  /** The port speaks the other protocol than the client (TLS to a plain port, or the reverse). */
  otherProtocol: boolean;
}

/**
 * What each `host:port` of a connect string says to a plain look-up and TCP connect, for messages
 * while no session comes up (the C client retries silently): `zk1:2181: host not found (ENOTFOUND)`,
 * `connection refused`, `no answer within 1 s`, or accepted and closed at once (a server that is
 * not serving, e.g. outside its quorum). Never rejects; at most about 2.5 s.
 */
export async function probeHosts(hosts: readonly string[], options: ProbeOptions = {}): Promise<ProbeResult[]> {
  const clock = options.clock ?? systemClock;
  return Promise.all(hosts.map((server) => probe(server, options.failures?.get(server), clock)));
}

async function probe(server: string, failure: LinkFailure | undefined, clock: Clock): Promise<ProbeResult> {
  const said = (text: string, otherProtocol = false): ProbeResult => ({ server, said: text, otherProtocol });
  const colon = server.lastIndexOf(':');
  const host = server.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
  const port = Number(server.slice(colon + 1));
  let address = host;
  if (isIP(host) === 0) {
    try {
      address = (await withTimeout(lookup(host), `host look-up took over ${PROBE_TIMEOUT_MS / 1000} s`, clock)).address;
    } catch (error) {
      const code = (error as { code?: string }).code;
      return said(code ? `host not found (${code})` : (error as Error).message);
    }
  }
  const outcome = await holdsConnections(address, port, clock);
  if (outcome !== 'holds') return said(outcome);
  // Serving (or listening): what the session met on its links says more.
  if (!failure || failure.kind === 'other') return said('accepts connections, but no session came up (is it ZooKeeper?)');
  switch (failure.kind) {
    case 'tls-no-answer':
      if (await answersPlaintext(address, port, clock)) return said('does not speak TLS (is it the clientPort rather than the secureClientPort?)', true);
      break;
    case 'unanswered':
      if (await answersTls(address, port, host, clock)) {
        return said('closed the connection on our session request and answers TLS: it may be a TLS port (secureClientPort): pass the `tls` option', true);
      }
      return said(`${failure.message} (is it ZooKeeper?)`);
    case 'not-tls':
      return said(failure.message ?? 'does not speak TLS', true);
  }
  return said(failure.message ?? 'accepts connections, but no session came up');
}

/** A plain TCP connect: 'holds' when the server keeps the connection open, else what happened. */
function holdsConnections(address: string, port: number, clock: Clock): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host: address, port });
    socket.unref(); // a probe never keeps the process alive
    const done = (outcome: string) => {
      clock.clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    let timer = clock.setTimeout(() => done(`no answer within ${PROBE_TIMEOUT_MS / 1000} s`), PROBE_TIMEOUT_MS).unref();
    socket.once('connect', () => {
      clock.clearTimeout(timer);
      timer = clock.setTimeout(() => done('holds'), CLOSE_WATCH_MS).unref();
      socket.once('close', () => done('accepts connections and closes them at once (not serving: outside its quorum?)'));
    });
    socket.once('error', (error: NodeJS.ErrnoException) => done(error.code === 'ECONNREFUSED' ? 'connection refused' : `${error.code ?? error.message}`));
    socket.resume(); // see the peer's close
  });
}

/**
 * Whether the port answers a four-letter word in plain text (a ZooKeeper clientPort does, with the
 * answer or "not in the whitelist"), where our TLS handshake was closed without a TLS answer.
 */
function answersPlaintext(address: string, port: number, clock: Clock): Promise<boolean> {
  const socket = connect({ host: address, port });
  socket.once('connect', () => socket.write('srvr'));
  return firstSign(socket, clock, (settle) => socket.once('data', (chunk: Buffer) => settle(!TLS_RECORD_TYPES.has(chunk[0]!))));
}

/**
 * Whether the port speaks TLS (a handshake completes, or the server answers it with an alert:
 * a client certificate wanted, say), where it closed our plain session request unanswered. The
 * certificate is not checked: nothing is sent over the link.
 */
function answersTls(address: string, port: number, name: string, clock: Clock): Promise<boolean> {
  const socket = tlsConnect({ host: address, port, servername: isIP(name) === 0 ? name : undefined, rejectUnauthorized: false });
  return firstSign(socket, clock, (settle) => {
    socket.once('secureConnect', () => settle(true));
    socket.on('error', (error: NodeJS.ErrnoException) => settle(/ALERT/.test(error.code ?? '')));
  });
}

/** Resolves with what `watch` settles first, or false on a close, an error or after PROBE_TIMEOUT_MS; then destroys the socket. */
function firstSign(socket: Socket, clock: Clock, watch: (settle: (answer: boolean) => void) => void): Promise<boolean> {
  return new Promise((resolve) => {
    socket.unref();
    let settled = false;
    const settle = (answer: boolean) => {
      if (settled) return;
      settled = true;
      clock.clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    const timer = clock.setTimeout(() => settle(false), PROBE_TIMEOUT_MS).unref();
    watch(settle);
    socket.on('error', () => settle(false));
    socket.once('close', () => settle(false));
  });
}

function withTimeout<T>(promise: Promise<T>, message: string, clock: Clock): Promise<T> {
  let timer: ReturnType<Clock['setTimeout']> | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = clock.setTimeout(() => reject(new Error(message)), PROBE_TIMEOUT_MS).unref();
    }),
  ]).finally(() => clock.clearTimeout(timer));
}
