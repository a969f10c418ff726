import { ancestorsOf } from '../paths.js';
import { ZkError } from '../client/zk-error.js';
import { CreateMode, ZkPerm, type ZkAcl, type ZkSession } from '../client/session.js';

/**
 * The lock root is `basePath`, under which lock paths live. Guarded by an ACL (`parentAcl`; with
 * `auth`, ZkLockModule's default) it is made PERSISTENT, with its missing ancestors: a container
 * is deleted by ZooKeeper once empty, and a client with other credentials could then make it again
 * under an ACL of its own and lock out every holder of the right ones. Lock paths below it stay
 * containers (reaped when empty): the root's ACL decides who may make them again. Without an ACL
 * everything is a container, as Curator makes parents: anyone may lock there anyway.
 */
export function isLockRootOrAbove(path: string, basePath: string): boolean {
  return path === basePath || basePath.startsWith(`${path}/`);
}

/**
 * Makes `basePath` and its missing ancestors PERSISTENT with `acl`, in one round trip; existing
 * nodes stay as they are. Refusals (NODEEXISTS, NOAUTH, INVALIDACL...) resolve: whether this
 * session may lock there is for `checkCreateAccess` to say. Rejects when ZooKeeper does not answer.
 */
export async function ensureLockRoot(session: ZkSession, basePath: string, acl: readonly ZkAcl[]): Promise<void> {
  if (basePath === '/') return;
  const creates = [...ancestorsOf(basePath), basePath].map((path) => session.create(path, Buffer.alloc(0), CreateMode.PERSISTENT, acl));
  for (const result of await Promise.allSettled(creates)) {
    const refused = result.status === 'rejected' && result.reason instanceof ZkError && !result.reason.isConnectionError && !result.reason.isSessionGone;
    if (result.status === 'rejected' && !refused) throw result.reason;
  }
}

/** Whether `acl` lets any client create children (`world:anyone` with CREATE). */
export function letsAnyoneCreate(acl: readonly ZkAcl[]): boolean {
  return acl.some((entry) => entry.scheme === 'world' && entry.id === 'anyone' && (entry.perms & ZkPerm.CREATE) !== 0);
}
