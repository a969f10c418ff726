import type { JuteWriter } from './jute.js';
import { encodeRequest, OpCode, Xid } from './records.js';

/** What the Java client puts in one SetWatches at most (ZOOKEEPER-706): well under jute.maxbuffer. */
export const SET_WATCHES_BATCH_BYTES = 128 * 1024;

type Kind = 'data' | 'exist' | 'child';

/**
 * The watches the server holds for this session, by the caller's path, as Java's ZKWatchManager
 * keeps them: armed by a successful watching read, dropped when their event comes. The server
 * forgets them with the connection, so they are sent again after each reconnect (SetWatches).
 */
export class ServerWatches {
  private readonly paths: Record<Kind, Set<string>> = { data: new Set(), exist: new Set(), child: new Set() };

  armed(kind: Kind, path: string): void {
    this.paths[kind].add(path);
  }

  /** An event fired on `path`: the watches it consumed on the server. */
  fired(type: 'created' | 'deleted' | 'changed' | 'child', path: string): void {
    if (type !== 'child') {
      this.paths.data.delete(path);
      this.paths.exist.delete(path);
    }
    if (type === 'child' || type === 'deleted') this.paths.child.delete(path);
  }

  clear(): void {
    for (const set of Object.values(this.paths)) set.clear();
  }

  get size(): number {
    return this.paths.data.size + this.paths.exist.size + this.paths.child.size;
  }

  /**
   * SetWatches frames (xid -8) re-arming all of them relative to `lastZxid`, each under
   * `batchBytes` of paths (counted in UTF-8; a batch goes one path over at most).
   */
  setWatchesFrames(lastZxid: bigint, toServer: (path: string) => string, batchBytes = SET_WATCHES_BATCH_BYTES): Buffer[] {
    const frames: Buffer[] = [];
    let batch: Record<Kind, string[]> = { data: [], exist: [], child: [] };
    let bytes = 0;
    const flush = () => {
      if (bytes === 0) return;
      const { data, exist, child } = batch;
      const write = (w: JuteWriter, list: string[]) => w.vector(list, (v, p) => v.ustring(p));
      frames.push(encodeRequest(Xid.setWatches, OpCode.setWatches, (w) => {
        w.long(lastZxid);
        write(w, data);
        write(w, exist);
        write(w, child);
      }));
      batch = { data: [], exist: [], child: [] };
      bytes = 0;
    };
    for (const kind of ['data', 'exist', 'child'] as const) {
      for (const path of this.paths[kind]) {
        if (bytes >= batchBytes) flush();
        const serverPath = toServer(path);
        batch[kind].push(serverPath);
        bytes += Buffer.byteLength(serverPath) + 4;
      }
    }
    flush();
    return frames;
  }
}
