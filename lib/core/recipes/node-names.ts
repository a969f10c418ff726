// The names of each recipe's nodes in ZooKeeper (Curator's layouts, so that Curator's recipes and
// ours queue together): defined here once, used by the recipes and by inspect.ts (and the testing
// kit), which tells a lock's kind from them. A contender's node is
// `<path>/_c_<uuid>-<name><sequence>` (see newProtectedPrefix and sortKey in paths.ts).

/** A mutex's contender (InterProcessMutex): `_c_<uuid>-lock-<seq>`. */
export const MUTEX_NODE = 'lock-';
/** A read-write lock's readers and writers (InterProcessReadWriteLock): `_c_<uuid>-__READ__<seq>`, `_c_<uuid>-__WRIT__<seq>`. */
export const READ_NODE = '__READ__';
export const WRITE_NODE = '__WRIT__';
/** What a read-write lock's contenders sort by: the sequence after either marker. */
export const READ_WRITE_MARKERS = [READ_NODE, WRITE_NODE] as const;
/**
 * A semaphore (InterProcessSemaphoreV2): its leases `<path>/leases/_c_<uuid>-lease-<seq>`, taken
 * under the mutex `<path>/locks`.
 */
export const SEMAPHORE_LEASES = 'leases';
export const SEMAPHORE_LOCKS = 'locks';
export const LEASE_NODE = 'lease-';
/** A leader election's participant (LeaderLatch): `_c_<uuid>-latch-<seq>`, its data the participant id. */
export const LATCH_NODE = 'latch-';
