// A foreign delete of a kept or coalesced node while its process is partitioned, and an acquire
// by that process at the reconnect of the same session.
import { setTimeout as sleep } from 'node:timers/promises';
import { log, ms, now } from '../clock.mjs';
import { SERVER_IDS, sid, ZK } from '../ensemble.mjs';
import { observer } from '../observer.mjs';
import { opts } from '../options.mjs';
import { BASE, holds, liveSlots, until } from '../state.mjs';
import { store } from '../store.mjs';
import { settle, startForeign } from '../workers.mjs';

/**
 * Process A (the target) keeps a node on a mutex of its own: mode 'kept', a mutex with retainMs
 * that A took and released twice (the node is kept, its watches set), or mode 'coalesced', a
 * coalesced mutex that A holds with a second local caller queued behind. A's link is cut (`reset`:
 * its connections dropped and refused, A notices at once; `silent`: nothing passes, nothing
 * closes) for less than the session timeout, so the session lives on. Meanwhile a foreign client
 * deletes A's node and another process B takes the lock (one node per caller) and uses the
 * store. Then the link is restored: at A's 'reconnected' (in the handler, or 2 ms after), A
 * acquires again (kept) or its holder releases to the queued local caller (coalesced). B lets go
 * once A's acquire settled or queued a node of A's (bounded), and A's acquire must then resolve.
 * The server tells A of the deletion only in its answer to the watches A's client sends again on
 * the new link: a grant made on what A knew before (the kept node, the local handoff) would hold
 * on a deleted node while B holds, with a LOWER fencing token than B's.
 *
 * Each call runs four cases (kept / coalesced × reset / silent; the moment alternates). The verdict
 * is the run's: from each holder's own view no two holders of the case's lock overlap while
 * neither signal has aborted (lock 'kept', counted with the mutex), successive holders' tokens
 * grow (fencing token inversions), the store accepts no operation from a lower token after a
 * higher one and, for this fault, rejects none either (each would have been a violation: every
 * holder here reads and writes at once while its signal is live). Each case's overlap and tokens
 * are in the fault's evidence. A's coalesced holder, whose node the foreign client deleted, is
 * excused from the promise (like foreign-set's).
 */
let calls = 0;
/** How long a silent cut lasts: well within the client's own receive timeout (2/3 T) and the library's deadline (4/5 T). */
const SILENT_MS = Math.round(opts.sessionTimeoutMs * 0.4);
/** How long a reset cut lasts (A noticed it at once; the foreign delete and B's grant come within it). */
const RESET_MS = Math.round(opts.sessionTimeoutMs * 0.3);

export async function keptNodeDelete() {
  const call = calls++;
  const record = { fault: 'foreign delete of a kept / coalesced node during a partition, acquire at reconnect', at: now() };
  const foreign = await startForeign();
  if (!foreign) return { ...record, observed: false, evidence: 'the foreign client did not connect' };
  const cases = [];
  const before = { rejected: store.kept.lowerRejected, accepted: store.kept.lowerAccepted };
  try {
    for (const [i, [mode, cut]] of [['kept', 'reset'], ['coalesced', 'reset'], ['kept', 'silent'], ['coalesced', 'silent']].entries()) {
      const moment = (call + i + (i >> 1)) % 2 === 0 ? 'handler' : 'after';
      const one = await keptCase(foreign, `${BASE}/kept-${call}-${i}`, mode, cut, moment, call + i);
      cases.push(one);
      log(`kept-node-delete ${mode}/${cut}/${moment}: ${one.summary}`);
    }
  } finally {
    await foreign.exit();
  }
  await settle('after the kept-node deletes');
  const rejected = store.kept.lowerRejected - before.rejected;
  const accepted = store.kept.lowerAccepted - before.accepted;
  Object.assign(record, {
    target: [...new Set(cases.map((c) => c.target).filter(Boolean))].join(', '),
    cases: cases.map(({ summary, ...c }) => c),
    overlapMs: Math.round(cases.reduce((n, c) => n + (c.overlapMs ?? 0), 0) * 10) / 10,
    lowerTokenGrants: cases.filter((c) => c.lowerToken).length,
    storeLowerRejected: rejected,
    storeLowerAccepted: accepted,
  });
  record.observed = cases.every((c) => c.observed);
  record.evidence =
    `${cases.length} cases; A's grant overlapped B's hold with both signals live for ${record.overlapMs} ms in ` +
    `${cases.filter((c) => c.overlapMs > 0).length}; A granted a token lower than B's in ${record.lowerTokenGrants}; ` +
    `store operations from a lower token: ${accepted} accepted, ${rejected} rejected (would have been violations). ` +
    cases.map((c) => `[${c.mode}/${c.cut}/${c.moment}] ${c.summary}`).join('; ');
  return record;
}

/** One case: see keptNodeDelete. */
async function keptCase(foreign, path, mode, cut, moment, pick) {
  const one = { mode, cut, moment, path, observed: false };
  const live = liveSlots().filter((s) => s.ready && s.state === 'connected');
  if (live.length < 2) return { ...one, summary: 'fewer than two connected workers' };
  const a = live[pick % live.length];
  const b = live[(pick + 1) % live.length];
  one.target = `slot ${a.slot} (pid ${a.pid})`;
  one.other = `slot ${b.slot} (pid ${b.pid})`;
  const replies = [];
  const listen = (slot) => {
    const child = slot.child;
    const handler = (/** @type {any} */ m) => m?.t === 'kept' && m.path === path && replies.push({ ...m, pid: child.pid });
    child.on('message', handler);
    return () => child.off('message', handler);
  };
  const unlisten = [listen(a), listen(b)];
  const reply = (what, slot, timeoutMs) => until(`slot ${slot.slot}'s kept-node ${what}`, () => replies.find((r) => r.what === what && r.pid === slot.pid), timeoutMs);
  const proxies = [...a.proxies.values()];
  let restored = false;
  try {
    a.child.send({ cmd: 'kept-prepare', mode, path });
    const ready = await reply('ready', a, 30_000);
    if (!ready?.node) return { ...one, summary: `A did not ${mode === 'kept' ? 'keep' : 'hold'} a node` };
    one.reused = ready.reused;
    // Its node's deletion watched on the server A is connected to (any of them).
    const watching = await untilWatched(ready.node, a.sessionId, 15_000);
    if (!watching) log(`kept-node-delete: no server lists a watch of ${ready.node} by A's session (going on)`);
    await sleep(100);
    a.child.send({ cmd: 'kept-arm', path, moment });
    if (!(await reply('armed', a, 10_000))) return { ...one, summary: 'A was not armed' };

    const cutAt = now();
    if (cut === 'reset') {
      for (const proxy of proxies) proxy.cut();
      await until(`slot ${a.slot} to notice the cut`, () => a.state !== 'connected' || undefined, 10_000);
    } else {
      for (const proxy of proxies) proxy.blackhole({ holdCloses: true });
    }
    const deletion = await foreign.ask({ cmd: 'delete', path: ready.node });
    one.deletion = deletion?.outcome;
    if (mode === 'coalesced' && ready.holdId && holds.get(ready.holdId)) holds.get(ready.holdId).foreignDeleted = true;
    b.child.send({ cmd: 'kept-other', path });
    const otherHeld = await reply('other-held', b, Math.max(500, (cut === 'silent' ? SILENT_MS : RESET_MS) - (now() - cutAt) - 100));
    const other = otherHeld && holds.get(otherHeld.holdId);
    one.otherHeldMs = other ? ms(cutAt, other.acquiredAt) : undefined;
    await sleep(Math.max(0, cutAt + (cut === 'silent' ? SILENT_MS : RESET_MS) - now()));
    for (const proxy of proxies) proxy.restore();
    restored = true;
    const restoredAt = now();
    one.cutMs = ms(cutAt, restoredAt);
    one.stillHeldAtRestore = Boolean(other && other.end === 'open');
    const acted = await reply('acted', a, opts.sessionTimeoutMs + 10_000);
    one.actedMs = acted ? ms(restoredAt, acted.at) : undefined;
    const grantOf = () => [...holds.values()].find((h) => h.lock === 'kept' && h.lockPath === path && h.pid === a.pid && h.acquiredAt > cutAt);
    // B lets go once A's acquire settled or A queued a node (bounded: it may also wait without one).
    if (acted) {
      await until(undefined, () => {
        if (grantOf()) return true;
        const snapshot = observer.snapshot;
        if (!snapshot || snapshot.at <= acted.at || !a.sessionId) return undefined;
        return [...snapshot.nodes].some(([p, s]) => p.startsWith(`${path}/`) && s === sid(a.sessionId)) || undefined;
      }, 15_000);
    }
    b.child.send({ cmd: 'kept-other-release' });
    const grant = acted && (await until(`A's grant on ${path}`, grantOf, 30_000));
    if (grant) await until(undefined, () => grant.end !== 'open' || undefined, 15_000);
    await until(undefined, () => !other || other.end !== 'open' || undefined, 10_000);
    Object.assign(one, judge(grant, other));
    one.grantMs = grant ? ms(restoredAt, grant.acquiredAt) : undefined;
    one.observed = Boolean(deletion?.outcome === 'deleted' && other && acted && grant);
    one.summary =
      `A (${one.target}) ${mode === 'kept' ? `kept ${ready.node}${ready.reused ? '' : ' (NOT handed over)'}` : `held ${ready.node} with a local caller queued`}; ` +
      `${cut} cut ${one.cutMs} ms; foreign delete: ${one.deletion ?? 'not done'}; B (${one.other}) held after ${one.otherHeldMs ?? '-'} ms${one.stillHeldAtRestore ? '' : ' (NOT holding at the restore)'}; ` +
      `A acted ${one.actedMs ?? '- (no reconnected event)'} ms after the restore, granted after ${one.grantMs ?? '- (NOT granted)'} ms; ` +
      `overlap with both signals live: ${one.overlapMs ?? '-'} ms; tokens A ${one.tokenA ?? '-'} vs B ${one.tokenB ?? '-'}${one.lowerToken ? ' (A LOWER)' : ''}` +
      `${one.grantAbortedAfterMs !== undefined ? `; A's signal aborted ${one.grantAbortedAfterMs} ms after its grant (${one.grantLostReason})` : ''}`;
    return one;
  } finally {
    if (!restored) for (const proxy of proxies) proxy.restore();
    b.child.send({ cmd: 'kept-other-release' });
    for (const off of unlisten) off();
  }
}

/** From each holder's own view: how long A's grant and B's hold overlapped while neither had been told, and their tokens. */
function judge(grant, other) {
  if (!grant || !other) return {};
  const end = (h) => h.endAt ?? h.lostAt ?? Infinity;
  const overlap = Math.min(end(grant), end(other)) - Math.max(grant.acquiredAt, other.acquiredAt);
  return {
    overlapMs: Math.max(0, Math.round(overlap * 10) / 10),
    tokenA: grant.token,
    tokenB: other.token,
    lowerToken: BigInt(grant.token) < BigInt(other.token),
    grantEnd: grant.end,
    grantLostReason: grant.lostReason,
    /** How long after A's grant its own signal aborted (if it did before A let go): how long it would have held on a deleted node. */
    grantAbortedAfterMs: grant.lostAt === undefined ? undefined : Math.round((grant.lostAt - grant.acquiredAt) * 10) / 10,
  };
}

/** Resolves true once a server's `wchp` lists a watch of `node` by the session `sessionHex`, or undefined after `timeoutMs`. */
async function untilWatched(node, sessionHex, timeoutMs) {
  if (!sessionHex) return undefined;
  const session = sid(sessionHex);
  for (const deadline = now() + timeoutMs; now() < deadline; await sleep(100)) {
    for (const id of SERVER_IDS) {
      const text = await ZK.fourLetter(id, 'wchp', 2000).catch(() => '');
      let current;
      for (const raw of text.split('\n')) {
        const line = raw.trim();
        if (line.startsWith('/')) current = line;
        else if (line.startsWith('0x') && current === node && sid(line) === session) return true;
      }
    }
  }
  return undefined;
}
