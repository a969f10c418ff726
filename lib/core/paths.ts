import { randomUUID } from 'node:crypto';
import { InvalidLockNameError } from './errors.js';

/** Longest lock path we accept; ZooKeeper's own limit is the 1 MB packet, far above sane names. */
export const MAX_LOCK_PATH_LENGTH = 1024;

/**
 * ZooKeeper's path rules (PathUtils.validatePath): absolute, no empty, "." or ".." segments, no
 * trailing slash, no control characters and none of the code points the server refuses.
 * Returns a description of the first problem, or undefined when the path is valid.
 */
export function validateZkPath(path: string): string | undefined {
  if (path.length === 0) return 'is empty';
  if (path[0] !== '/') return 'must start with "/"';
  if (path === '/') return undefined;
  if (path.endsWith('/')) return 'must not end with "/"';
  for (let i = 0; i < path.length; i++) {
    const c = path.charCodeAt(i);
    if (
      c === 0 ||
      (c > 0x00 && c <= 0x1f) ||
      (c >= 0x7f && c <= 0x9f) ||
      (c >= 0xd800 && c <= 0xf8ff) ||
      (c >= 0xfff0 && c <= 0xffff)
    ) {
      return `contains a character ZooKeeper does not allow (U+${c.toString(16).toUpperCase().padStart(4, '0')}) at index ${i}`;
    }
  }
  for (const segment of path.slice(1).split('/')) {
    if (segment === '') return 'contains an empty segment ("//")';
    if (segment === '.' || segment === '..') return `contains a "${segment}" segment`;
  }
  if (path === '/zookeeper' || path.startsWith('/zookeeper/')) return 'is inside /zookeeper, which the server reserves';
  return undefined;
}

/**
 * Maps a lock name to its ZooKeeper path: `<basePath>/<name>`, or the name itself when it starts
 * with "/" (an absolute path, e.g. to share a lock with a Curator service).
 */
export function resolveLockPath(basePath: string, name: unknown): string {
  if (typeof name !== 'string') {
    throw new InvalidLockNameError(safeString(name), `expected a string, got ${name === null ? 'null' : typeof name}`);
  }
  if (name.trim() === '') throw new InvalidLockNameError(name, 'is empty');
  const path = name.startsWith('/') ? name : basePath === '/' ? `/${name}` : `${basePath}/${name}`;
  const problem = validateZkPath(path);
  if (problem) throw new InvalidLockNameError(name, `the path ${JSON.stringify(path)} ${problem}`);
  if (path === '/') throw new InvalidLockNameError(name, 'the root cannot be a lock');
  if (path.length > MAX_LOCK_PATH_LENGTH) {
    throw new InvalidLockNameError(name, `the path is ${path.length} characters long (at most ${MAX_LOCK_PATH_LENGTH})`);
  }
  return path;
}

export function joinPath(parent: string, child: string): string {
  return parent === '/' ? `/${child}` : `${parent}/${child}`;
}

export function parentOf(path: string): string {
  const i = path.lastIndexOf('/');
  return i <= 0 ? '/' : path.slice(0, i);
}

/** Every ancestor of `path`, root-most first, excluding "/" and the path itself. */
export function ancestorsOf(path: string): string[] {
  const out: string[] = [];
  for (let i = path.indexOf('/', 1); i > 0; i = path.indexOf('/', i + 1)) out.push(path.slice(0, i));
  return out;
}

/**
 * Curator's sort key: the text after the last occurrence of each marker in turn (e.g. "lock-",
 * or "__READ__" then "__WRIT__"); a name without any marker sorts by its whole self.
 */
export function sortKey(name: string, markers: readonly string[]): string {
  let key = name;
  for (const marker of markers) {
    const i = key.lastIndexOf(marker);
    if (i >= 0) key = key.slice(i + marker.length);
  }
  return key;
}

/** Sorts children as Curator does: stable, by sort key, compared by UTF-16 code units. */
export function sortChildren(children: readonly string[], markers: readonly string[]): string[] {
  // A queue of one (a lock nobody else wants, the usual case) needs no sort keys.
  if (children.length < 2) return children.slice();
  return children
    .map((name) => ({ name, key: sortKey(name, markers) }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    .map((c) => c.name);
}

/** Curator's protected-mode prefix: `_c_` + a fresh v4 UUID + `-` (40 characters). */
export function newProtectedPrefix(): string {
  return `_c_${randomUUID()}-`;
}

/** The server-assigned sequence (the trailing 10 digits), or undefined for non-sequential names. */
export function sequenceOf(name: string): number | undefined {
  // /\d{10}$/ without a regular expression (this runs on every acquire).
  const end = name.length;
  if (end < 10) return undefined;
  for (let i = end - 10; i < end; i++) {
    const c = name.charCodeAt(i);
    if (c < 48 || c > 57) return undefined;
  }
  return Number(name.slice(end - 10));
}

/** Low bits of a fencing token that count local handoffs of one node (in-process coalescing). */
export const HANDOFF_BITS = 16;

/**
 * A node's fencing token: (queue parent's czxid × 2^32 + the node's sequence) × 2^16. The parent
 * czxid grows when the path is re-created, the sequence with every node; the low 16 bits number
 * the local handoffs of one node, so they keep growing within a process too.
 */
export function fencingTokenOf(parentCzxid: number, sequence: number): bigint {
  return ((BigInt(parentCzxid) << 32n) | BigInt(sequence >>> 0)) << BigInt(HANDOFF_BITS);
}

/** String(value) for messages, even for objects without a prototype or a throwing toString. */
function safeString(value: unknown): string {
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}
