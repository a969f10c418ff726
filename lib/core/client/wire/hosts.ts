import { lookup } from 'node:dns/promises';
import { newSessionBackoffMs } from '../session-opening.js';

export interface HostPort {
  host: string;
  port: number;
}

/** `h1:2181,h2:2181/app/root` → the hosts and the chroot ('' for none; a bare `/` is none). */
export function parseConnectString(connectString: string): { hosts: HostPort[]; chroot: string } {
  const slash = connectString.indexOf('/');
  const hostPart = slash < 0 ? connectString : connectString.slice(0, slash);
  let chroot = slash < 0 ? '' : connectString.slice(slash);
  if (chroot === '/') chroot = '';
  if (chroot.endsWith('/')) chroot = chroot.slice(0, -1);
  const hosts = hostPart
    .split(',')
    .map((h) => h.trim())
    .filter((h) => h !== '')
    .map((h) => {
      const colon = h.lastIndexOf(':');
      const host = colon < 0 ? h : h.slice(0, colon);
      const port = colon < 0 ? 2181 : Number(h.slice(colon + 1));
      return { host: host.replace(/^\[(.*)\]$/, '$1'), port };
    });
  if (hosts.length === 0) throw new Error(`no host in connect string "${connectString}"`);
  return { hosts, chroot };
}

function shuffle<T>(items: T[], random: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

/**
 * The hosts in random order, round-robin (as Java's StaticHostProvider): each attempt resolves
 * its host's name again (an address may have moved) and picks one of its addresses at random.
 */
export class HostList {
  private readonly hosts: HostPort[];
  private index = -1;
  /** Attempts since the last successful connect. */
  private failures = 0;
  /** Handshakes in a row refused for a timeout no server grants (see refusedGrant): each waits longer. */
  private refusals = 0;

  constructor(
    hosts: readonly HostPort[],
    private readonly random: () => number = Math.random,
  ) {
    this.hosts = shuffle([...hosts], random);
  }

  get size(): number {
    return this.hosts.length;
  }

  /**
   * How long to wait before the next attempt: none for the first after a success, a little
   * jitter between hosts, and a pause after a whole round failed (not to spin on a dead ensemble).
   */
  delayBeforeNextMs(): number {
    if (this.failures === 0) return 0;
    const roundDone = this.failures % this.hosts.length === 0;
    const pause = (roundDone ? 250 : 0) + this.random() * 50;
    // A new session refused each time would otherwise be a new server session every round.
    return this.refusals === 0 ? pause : Math.max(pause, newSessionBackoffMs(this.refusals, this.random));
  }

  /** The next host's address (resolved now) and its name; throws when the name does not resolve. */
  async next(): Promise<HostPort & { name: string }> {
    this.index = (this.index + 1) % this.hosts.length;
    const { host, port } = this.hosts[this.index]!;
    const addresses = await lookup(host, { all: true });
    if (addresses.length === 0) throw new Error(`${host} resolves to no address`);
    return { host: addresses[Math.floor(this.random() * addresses.length)]!.address, port, name: host };
  }

  failed(): void {
    this.failures++;
  }

  /** The server's answer to the handshake was refused (the link drops too: failed() follows). */
  refused(): void {
    this.refusals++;
  }

  connected(): void {
    this.failures = 0;
    this.refusals = 0;
  }
}

/** The C client's path check: it refuses a bad path itself, with BADARGUMENTS, before sending. */
export function isValidPath(path: string, sequential: boolean): boolean {
  if (typeof path !== 'string' || path.charCodeAt(0) !== SLASH) return false;
  if (path === '/') return !sequential;
  // Every name between slashes: not empty, not "." or ".."; a sequential create's last may be
  // empty (the server appends the number). One pass, no arrays: this runs on every request.
  const end = sequential && path.charCodeAt(path.length - 1) === SLASH ? path.length - 1 : path.length;
  let start = 1;
  for (let i = 1; i <= end; i++) {
    const c = i < end ? path.charCodeAt(i) : SLASH;
    if (c === 0) return false;
    if (c !== SLASH) continue;
    const length = i - start;
    if (length === 0 || (length <= 2 && path.charCodeAt(start) === DOT && (length === 1 || path.charCodeAt(start + 1) === DOT))) return false;
    start = i + 1;
  }
  return true;
}

const SLASH = 0x2f;
const DOT = 0x2e;

/** Paths as the caller sees them (under the chroot) and as the server does. */
export class Chroot {
  constructor(private readonly root: string) {}

  toServer(path: string): string {
    if (this.root === '') return path;
    return path === '/' ? this.root : this.root + path;
  }

  /** A path outside the chroot (e.g. /zookeeper/...) passes through unchanged. */
  fromServer(path: string): string {
    if (this.root === '') return path;
    if (path === this.root) return '/';
    return path.startsWith(`${this.root}/`) ? path.slice(this.root.length) : path;
  }
}
