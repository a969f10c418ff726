import { lookup } from 'node:dns/promises';
import { connect, isIP } from 'node:net';

const PROBE_TIMEOUT_MS = 1000;
/** A ZooKeeper server keeps a new connection open while it waits for the session request. */
const CLOSE_WATCH_MS = 300;

/**
 * What each `host:port` of a connect string says to a plain look-up and TCP connect, for messages
 * while no session comes up (the C client retries silently): `zk1:2181: host not found (ENOTFOUND)`,
 * `connection refused`, `no answer within 1 s`, or accepted and closed at once (a server that is
 * not serving, e.g. outside its quorum). Never rejects; at most about 1.5 s.
 */
export async function probeHosts(hosts: readonly string[]): Promise<string[]> {
  return Promise.all(hosts.map(async (host) => `${host}: ${await probe(host)}`));
}

async function probe(hostPort: string): Promise<string> {
  const colon = hostPort.lastIndexOf(':');
  const host = hostPort.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
  const port = Number(hostPort.slice(colon + 1));
  let address = host;
  if (isIP(host) === 0) {
    try {
      address = (await withTimeout(lookup(host), `host look-up took over ${PROBE_TIMEOUT_MS / 1000} s`)).address;
    } catch (error) {
      const code = (error as { code?: string }).code;
      return code ? `host not found (${code})` : (error as Error).message;
    }
  }
  return new Promise((resolve) => {
    const socket = connect({ host: address, port });
    socket.unref(); // a probe never keeps the process alive
    const done = (outcome: string) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(outcome);
    };
    let timer = setTimeout(() => done(`no answer within ${PROBE_TIMEOUT_MS / 1000} s`), PROBE_TIMEOUT_MS).unref();
    socket.once('connect', () => {
      clearTimeout(timer);
      timer = setTimeout(() => done('accepts connections, but no session came up (is it ZooKeeper?)'), CLOSE_WATCH_MS).unref();
      socket.once('close', () => done('accepts connections and closes them at once (not serving: outside its quorum?)'));
    });
    socket.once('error', (error: NodeJS.ErrnoException) =>
      done(error.code === 'ECONNREFUSED' ? 'connection refused' : `${error.code ?? error.message}`),
    );
    socket.resume(); // see the peer's close
  });
}

function withTimeout<T>(promise: Promise<T>, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message)), PROBE_TIMEOUT_MS).unref();
    }),
  ]).finally(() => clearTimeout(timer));
}
