// The data side of the ZooKeeper model: a server's copy of the tree, the transactions the leader
// makes of requests (prepared against its copy) and every server applies in zxid order, and the
// watches each server keeps for its connections, fired as it applies a change (DataTree and
// WatchManager in 3.8: one-shot; a deletion fires the node's data and child watches; a create or
// delete fires the parent's child watches; SetWatches re-arms or fires at once against a zxid).
// Simplification: the leader applies a transaction when it prepares it (ZooKeeper at commit).

export const EventType = { created: 1, deleted: 2, changed: 3, children: 4 };

export const Code = {
  OK: 0, RUNTIMEINCONSISTENCY: -2, NONODE: -101, BADVERSION: -103, NOCHILDRENFOREPHEMERALS: -108, NODEEXISTS: -110, NOTEMPTY: -111,
};

/**
 * @typedef {object} ZNode
 * @property {Buffer} data
 * @property {bigint} czxid
 * @property {bigint} mzxid
 * @property {bigint} pzxid
 * @property {number} version
 * @property {number} cversion
 * @property {bigint} owner the ephemeral owner's session (0n: persistent)
 * @property {boolean} container
 * @property {Set<string>} children
 * @property {number} ctime
 */

/**
 * @typedef {(
 *   | { type: 'create', path: string, data: Buffer, owner: bigint, container: boolean }
 *   | { type: 'delete', path: string }
 *   | { type: 'setData', path: string, data: Buffer }
 *   | { type: 'closeSession', id: bigint }
 *   | { type: 'multi', txns: Txn[] }
 *   | { type: 'none' }
 * ) & { zxid?: bigint }} Txn
 */

/** @typedef {{ op: 'create', path: string, data: Buffer, flags: number } | { op: 'delete', path: string, version: number } | { op: 'setData', path: string, data: Buffer, version: number } | { op: 'check', path: string, version: number }} WriteOp */

const parentOf = (/** @type {string} */ path) => path.slice(0, path.lastIndexOf('/')) || '/';
const nameOf = (/** @type {string} */ path) => path.slice(path.lastIndexOf('/') + 1);

export class DataTree {
  /** @type {Map<string, ZNode>} */
  nodes = new Map();
  /** The last applied zxid. */
  zxid = 0n;

  constructor() {
    this.nodes.set('/', newNode(Buffer.alloc(0), 0n, 0n, false, 0));
  }

  clone() {
    const copy = new DataTree();
    copy.zxid = this.zxid;
    copy.nodes = new Map([...this.nodes].map(([p, n]) => [p, { ...n, children: new Set(n.children) }]));
    return copy;
  }

  /**
   * What a write would do against this tree (PrepRequestProcessor): the transaction and its
   * result, or the error code. Does not change the tree.
   * @param {WriteOp} op @param {bigint} session
   * @returns {{ err: number } | { err: 0, txn: Txn, path?: string, node?: ZNode }}
   */
  prepare(op, session) {
    const node = this.nodes.get(op.path);
    switch (op.op) {
      case 'create': {
        const parent = this.nodes.get(parentOf(op.path));
        if (!parent) return { err: Code.NONODE };
        if (parent.owner !== 0n) return { err: Code.NOCHILDRENFOREPHEMERALS };
        const path = op.flags & 2 ? `${op.path}${String(parent.cversion).padStart(10, '0')}` : op.path;
        if (this.nodes.has(path)) return { err: Code.NODEEXISTS };
        return { err: 0, txn: { type: 'create', path, data: op.data, owner: op.flags & 1 ? session : 0n, container: op.flags === 4 }, path };
      }
      case 'delete':
        if (!node) return { err: Code.NONODE };
        if (op.version !== -1 && op.version !== node.version) return { err: Code.BADVERSION };
        if (node.children.size > 0) return { err: Code.NOTEMPTY };
        return { err: 0, txn: { type: 'delete', path: op.path } };
      case 'setData':
        if (!node) return { err: Code.NONODE };
        if (op.version !== -1 && op.version !== node.version) return { err: Code.BADVERSION };
        return { err: 0, txn: { type: 'setData', path: op.path, data: op.data } };
      case 'check':
        if (!node) return { err: Code.NONODE };
        if (op.version !== -1 && op.version !== node.version) return { err: Code.BADVERSION };
        return { err: 0, txn: { type: 'none' } };
    }
  }

  /**
   * A multi: every op prepared in turn against the tree as the earlier ones left it; all or
   * nothing. Results: each op's, or (failed) the failing op's code, 0 before it and
   * RUNTIMEINCONSISTENCY after it.
   * @param {WriteOp[]} ops @param {bigint} session
   */
  prepareMulti(ops, session) {
    const scratch = this.clone();
    /** @type {Txn[]} */
    const txns = [];
    /** @type {{ err: number, path?: string }[]} */
    const results = [];
    let failedAt = -1;
    for (const [i, op] of ops.entries()) {
      const prepared = scratch.prepare(op, session);
      if (prepared.err !== 0 || !('txn' in prepared)) {
        failedAt = i;
        results.push({ err: prepared.err });
        break;
      }
      scratch.apply({ ...prepared.txn, zxid: scratch.zxid + 1n }, () => undefined);
      txns.push(prepared.txn);
      results.push({ err: 0, path: prepared.path });
    }
    if (failedAt < 0) return { failed: false, txn: /** @type {Txn} */ ({ type: 'multi', txns }), results };
    return { failed: true, results: ops.map((_, i) => ({ err: i < failedAt ? 0 : i === failedAt ? results[failedAt].err : Code.RUNTIMEINCONSISTENCY })) };
  }

  /**
   * Applies a transaction with its zxid; `fire(type, path)` for each watch event it causes.
   * @param {Txn & { zxid: bigint }} txn @param {(type: number, path: string) => void} fire
   */
  apply(txn, fire) {
    this.zxid = txn.zxid;
    this.applyOne(txn, txn.zxid, fire);
  }

  /** @private @param {Txn} txn @param {bigint} zxid @param {(type: number, path: string) => void} fire */
  applyOne(txn, zxid, fire) {
    switch (txn.type) {
      case 'create': {
        const parent = this.nodes.get(parentOf(txn.path));
        if (!parent || this.nodes.has(txn.path)) return; // cannot happen in order; a resync covers it
        this.nodes.set(txn.path, newNode(txn.data, zxid, txn.owner, txn.container, Number(zxid)));
        parent.children.add(nameOf(txn.path));
        parent.cversion++;
        parent.pzxid = zxid;
        fire(EventType.created, txn.path);
        fire(EventType.children, parentOf(txn.path));
        return;
      }
      case 'delete': {
        const node = this.nodes.get(txn.path);
        if (!node) return;
        this.nodes.delete(txn.path);
        const parent = this.nodes.get(parentOf(txn.path));
        if (parent) {
          parent.children.delete(nameOf(txn.path));
          parent.cversion++;
          parent.pzxid = zxid;
        }
        fire(EventType.deleted, txn.path);
        fire(EventType.children, parentOf(txn.path));
        return;
      }
      case 'setData': {
        const node = this.nodes.get(txn.path);
        if (!node) return;
        node.data = txn.data;
        node.version++;
        node.mzxid = zxid;
        fire(EventType.changed, txn.path);
        return;
      }
      case 'closeSession': {
        const owned = [...this.nodes].filter(([, n]) => n.owner === txn.id).map(([p]) => p);
        for (const path of owned.sort((a, b) => b.length - a.length)) this.applyOne({ type: 'delete', path }, zxid, fire);
        return;
      }
      case 'multi':
        for (const t of txn.txns) this.applyOne(t, zxid, fire);
        return;
      case 'none':
        return;
    }
  }

  /** Empty containers that once had children (ContainerManager's candidates). */
  emptyContainers() {
    return [...this.nodes].filter(([, n]) => n.container && n.children.size === 0 && n.cversion > 0).map(([p]) => p);
  }
}

/** @returns {ZNode} */
function newNode(/** @type {Buffer} */ data, /** @type {bigint} */ zxid, /** @type {bigint} */ owner, /** @type {boolean} */ container, /** @type {number} */ ctime) {
  return { data, czxid: zxid, mzxid: zxid, pzxid: zxid, version: 0, cversion: 0, owner, container, children: new Set(), ctime };
}

/**
 * One server's watches (WatchManager): by path, the connections waiting; one-shot.
 * @template C
 */
export class Watches {
  /** @type {Map<string, Set<C>>} */
  data = new Map();
  /** @type {Map<string, Set<C>>} */
  child = new Map();

  /** @param {'data' | 'child'} kind @param {string} path @param {C} connection */
  add(kind, path, connection) {
    const map = this[kind];
    let set = map.get(path);
    if (!set) map.set(path, (set = new Set()));
    set.add(connection);
  }

  /** A connection closed: its watches go. @param {C} connection */
  remove(connection) {
    for (const map of [this.data, this.child]) {
      for (const [path, set] of map) {
        set.delete(connection);
        if (set.size === 0) map.delete(path);
      }
    }
  }

  /** The connections an event fires, taken out. @param {number} type @param {string} path @returns {Set<C>} */
  take(type, path) {
    /** @type {Set<C>} */
    const fired = new Set();
    const takeFrom = (/** @type {Map<string, Set<C>>} */ map) => {
      for (const c of map.get(path) ?? []) fired.add(c);
      map.delete(path);
    };
    if (type === EventType.children) takeFrom(this.child);
    else takeFrom(this.data);
    if (type === EventType.deleted) takeFrom(this.child);
    return fired;
  }
}
