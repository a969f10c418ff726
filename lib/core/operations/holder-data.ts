import { hostname } from 'node:os';

/** What a lock node says about its holder (JSON); Curator ignores lock data, operators read it. */
export interface HolderInfo {
  host: string;
  pid: number;
  /** The application (service) name, e.g. "ticket-service". */
  app?: string;
  /** This instance's id, e.g. a pod name. */
  instance?: string;
  /** ISO time the node was created. */
  createdAt: string;
  /**
   * W3C trace context of the acquire that made the node, while tracing (docs/tracing.md): the
   * span that waiters behind this node link to.
   */
  traceparent?: string;
  /**
   * The locks (paths) its call chain held when this node was made to wait here (a nested
   * acquire): what deadlock detection reads (docs/deadlocks.md). Absent when it held none.
   */
  holds?: string[];
}

/** What one acquire adds to its node's data (merged into the JSON): its trace context, the locks its chain holds. */
export type HolderExtra = Pick<HolderInfo, 'traceparent' | 'holds'>;

export interface HolderIdentity {
  app?: string;
  instance?: string;
}

let host: string | undefined;

/**
 * Makes the data of each new lock node: HolderInfo as JSON, with the time of the call. Only the
 * time changes, so the rest is serialised once, and the whole once per millisecond: this runs on
 * every acquire, and many keys acquired at once share the millisecond. The buffer is shared by
 * the nodes made in that millisecond: it is never written to (the client copies it into the request).
 * An acquire's `extra` (its `traceparent`, a nested acquire's `holds`) is merged in, for that node alone.
 */
export function holderDataWriter(identity: HolderIdentity): (extra?: HolderExtra) => Buffer {
  host ??= hostname(); // a system call; the host does not change under a running process
  const fixed = JSON.stringify({ host, pid: process.pid, ...identity, createdAt: '' });
  const head = fixed.slice(0, -3); // up to `"createdAt":`, without `""}`
  let at = NaN;
  let data = Buffer.alloc(0);
  return (extra) => {
    const now = Date.now();
    const more = extra ? JSON.stringify(extra).slice(1, -1) : ''; // its fields, without the braces
    if (more) return Buffer.from(`${head}"${new Date(now).toISOString()}",${more}}`);
    if (now !== at) {
      at = now;
      data = Buffer.from(`${head}"${new Date(now).toISOString()}"}`);
    }
    return data;
  };
}

/**
 * Curator's revoke request (`LockInternals.REVOKE_MESSAGE`): written as a holder's node data by
 * whoever asks it to let go (`Revoker.attemptRevoke`), so Java and Node holders hear each other.
 * It replaces the holder's data.
 */
export const REVOKE_MARKER = '__REVOKE__';

export function isRevokeRequest(data: Buffer): boolean {
  return data.length === REVOKE_MARKER.length && data.toString('latin1') === REVOKE_MARKER;
}

/** Parses a node's data as HolderInfo; Curator's nodes hold a bare IP, which becomes `{ host }`. */
export function parseHolderData(data: Buffer): Partial<HolderInfo> {
  if (isRevokeRequest(data)) return {};
  const text = data.toString('utf8');
  if (text.startsWith('{')) {
    try {
      return JSON.parse(text) as Partial<HolderInfo>;
    } catch {
      // fall through: not ours
    }
  }
  return text === '' ? {} : { host: text };
}
