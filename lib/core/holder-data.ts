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
}

export interface HolderIdentity {
  app?: string;
  instance?: string;
}

let host: string | undefined;

export function holderData(identity: HolderIdentity): Buffer {
  host ??= hostname(); // a system call; the host does not change under a running process
  const info: HolderInfo = { host, pid: process.pid, ...identity, createdAt: new Date().toISOString() };
  return Buffer.from(JSON.stringify(info));
}

/** Parses a node's data as HolderInfo; Curator's nodes hold a bare IP, which becomes `{ host }`. */
export function parseHolderData(data: Buffer): Partial<HolderInfo> {
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
