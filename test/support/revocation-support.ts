// Helpers of the revocation and lock-node ACL tests (one copy each).
import { REVOKE_MARKER } from '../../lib/core/recipes/revocation.js';
import { ZkCode, ZkError } from '../../lib/core/client/zk-error.js';
import { CreateMode } from '../../lib/core/client/session.js';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';

/** The data of a revocation request (Curator's marker). */
export const marker = () => Buffer.from(REVOKE_MARKER);

/** Makes `path` and its parents as persistent nodes (as an operator or a Curator app would), where missing. */
export async function ensurePersistent(connection: ZkConnection, path: string): Promise<void> {
  const parts = path.split('/').filter(Boolean);
  for (let i = 1; i <= parts.length; i++) {
    const p = '/' + parts.slice(0, i).join('/');
    await connection.session!.create(p, Buffer.alloc(0), CreateMode.PERSISTENT).catch((e: unknown) => {
      if (!(e instanceof ZkError && e.code === ZkCode.NODEEXISTS)) throw e;
    });
  }
}
