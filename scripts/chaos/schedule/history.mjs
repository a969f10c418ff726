// The history of one schedule, as the clients saw it (one clock: performance.now() for the
// real-time schedules, all clients in one process; the simulation's virtual clock), and its checks:
// - exclusion, from each holder's own view: no two holds of one lock whose intervals
//   [granted, min(signal aborted, released)] overlap (readers may overlap readers; a semaphore
//   may have `permits` at once; holds of one caller never conflict with each other: a downgrade).
//   Excused: a hold whose node the foreign client deleted after the hold began, from the delete
//   on (until its holder is told, which ends the interval anyway); one that began after the
//   delete's reply is not excused. A hold in a session the test killed, from the kill on, and any
//   hold granted in that session before its link was back (events from before the cut). In the
//   simulation (`sessionExcuses`): a hold whose process was stalled when its session's deadline
//   passed (one process stalls at a time), from that deadline on, since the process learns of the
//   loss only when it runs; and one whose session a re-attach shortened before the client could
//   read the answer (see docs/safety.md), from the expiry on. A hold granted on a node the
//   foreign client had deleted already (handed on locally, or granted on the head's deletion
//   event, before that node's own deletion event was read: docs/known-limitations.md) is excused,
//   but its token must be below every token of another node held meanwhile (fencing stops it).
// - fencing: of two holds of one lock that do not overlap, the later one's token is larger
//   (readers compared with writers only; a semaphore's slots only with permits 1);
// - no hang: every acquire settles within its waitMs + the session timeout + 5 s; none is left
//   pending at the end;
// - every hold ends (released or signal aborted).
// The orphan check (no ephemeral node left after the clients closed) is run-schedule.mjs's.

/**
 * @typedef {'exclusive' | 'read' | 'write' | 'slot'} HoldKind
 * @typedef {{
 *   id: number, owner: string, client: number, session: string, lock: string, kind: HoldKind, node: string,
 *   token: bigint, grantedAt: number, abortedAt?: number, abortReason?: string, releasedAt?: number,
 * }} Hold
 * @typedef {{ owner: string, client: number, lock: string, startedAt: number, waitMs: number | null, settledAt?: number, outcome?: string }} Acquire
 * @typedef {{ node: string, sentAt: number, repliedAt?: number, ok?: boolean }} Deletion
 * @typedef {{ session: string, client: number, from: number, restored?: number }} Kill
 * @typedef {{ session: string, from: number, why: string }} SessionExcuse
 */

export class History {
  /** @type {Hold[]} */ holds = [];
  /** @type {Acquire[]} */ acquires = [];
  /** @type {Deletion[]} */ deletions = [];
  /** @type {Kill[]} */ kills = [];
  /** @type {SessionExcuse[]} */ sessionExcuses = [];
  /** @type {Map<string, number>} lock path -> permits (semaphores) */ permits = new Map();
  /** @type {string[]} unexpected errors from the library (reported, and a failure) */ errors = [];
  /** @type {string[]} what happened, in order (for a failure's report) */ events = [];
  excused = { foreignDelete: 0, killedSession: 0 };
  nextId = 1;

  /** @param {() => number} [clock] where the time comes from (default performance.now(): every client of a real-time schedule is in this process) */
  constructor(clock = () => performance.now()) {
    this.clock = clock;
    this.t0 = clock();
  }

  /** ms since the schedule began. */
  now() {
    return this.clock() - this.t0;
  }

  /** @param {string} text */
  note(text) {
    this.events.push(`${this.now().toFixed(1).padStart(8)} ms ${text}`);
  }

  /**
   * A hold begins now; the signal's abort is recorded when it comes. Returns the hold (set its
   * releasedAt when the holder stops using it).
   * @param {Omit<Hold, 'id' | 'grantedAt'>} fields
   * @param {AbortSignal} signal
   */
  grant(fields, signal) {
    /** @type {Hold} */
    const hold = { id: this.nextId++, ...fields, grantedAt: this.now() };
    this.holds.push(hold);
    const onAbort = () => {
      hold.abortedAt ??= this.now();
      const reason = /** @type {{ reason?: string } | undefined} */ (signal.reason);
      hold.abortReason = reason?.reason ?? String(signal.reason);
      this.note(`#${hold.id} ${hold.owner} ${hold.kind} ${tail(hold.node)} signal aborted (${hold.abortReason})`);
    };
    this.note(`#${hold.id} ${hold.owner} granted ${hold.kind} ${tail(hold.node)} token ${hold.token} session ${hold.session}`);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    return hold;
  }

  /** @param {Hold} hold */
  released(hold) {
    hold.releasedAt ??= this.now();
    this.note(`#${hold.id} ${hold.owner} releases ${tail(hold.node)}`);
  }

  /** @param {string} owner @param {number} client @param {string} lock @param {number | null} waitMs @returns {Acquire} */
  acquiring(owner, client, lock, waitMs) {
    const a = { owner, client, lock, startedAt: this.now(), waitMs };
    this.acquires.push(a);
    return a;
  }

  /** @param {Acquire} a @param {string} outcome */
  settled(a, outcome) {
    a.settledAt = this.now();
    a.outcome = outcome;
  }

  /**
   * When the hold stops counting: its signal aborted, its holder released it, or an excuse began.
   * @param {Hold} h
   */
  end(h) {
    let end = Math.min(h.abortedAt ?? Infinity, h.releasedAt ?? Infinity);
    const excuse = this.excuseFrom(h);
    return excuse === undefined ? { end, excused: undefined } : excuse.at < end ? { end: excuse.at, excused: excuse.why } : { end, excused: undefined };
  }

  /** @param {Hold} h @returns {{ at: number, why: string } | undefined} */
  excuseFrom(h) {
    /** @type {{ at: number, why: string } | undefined} */
    let best;
    if (this.deletedBeforeGrant(h)) return { at: h.grantedAt, why: 'its node deleted by the foreign client before the grant' };
    for (const d of this.deletions) {
      if (d.node !== h.node || !d.ok) continue;
      // Began before the delete's reply: the delete may have come first, unknowable to the holder.
      if (h.grantedAt <= (d.repliedAt ?? Infinity) && (!best || d.sentAt < best.at)) best = { at: Math.max(h.grantedAt, d.sentAt), why: 'node deleted by the foreign client' };
    }
    for (const k of this.kills) {
      if (k.session !== h.session) continue;
      if (h.grantedAt <= (k.restored ?? Infinity) && (!best || k.from < best.at)) best = { at: Math.max(h.grantedAt, k.from), why: 'session killed by the test' };
    }
    for (const e of this.sessionExcuses) {
      if (e.session !== h.session || h.grantedAt > e.from) continue;
      if (!best || e.from < best.at) best = { at: e.from, why: e.why };
    }
    return best;
  }

  /** Whether the foreign client had deleted `h`'s node before `h` was granted. @param {Hold} h */
  deletedBeforeGrant(h) {
    return this.deletions.some((d) => d.node === h.node && d.ok && (d.repliedAt ?? Infinity) < h.grantedAt);
  }

  /**
   * @param {{ slackMs: number, endAt: number }} bounds
   * @returns {{ violations: string[], stats: Record<string, number> }}
   */
  check({ slackMs, endAt }) {
    /** @type {string[]} */
    const violations = [];
    const byLock = new Map();
    for (const h of this.holds) {
      if (!byLock.has(h.lock)) byLock.set(h.lock, []);
      byLock.get(h.lock).push(h);
    }
    let excusedOverlaps = 0;
    for (const [lock, holds] of byLock) {
      const permits = this.permits.get(lock);
      /** @type {(Hold & { e: number, why?: string })[]} */
      const spans = holds.map((/** @type {Hold} */ h) => {
        const { end, excused } = this.end(h);
        return { ...h, e: Math.min(end, endAt), why: excused };
      });
      if (permits !== undefined) {
        // More than `permits` live slots at a grant.
        for (const h of spans) {
          const live = spans.filter((o) => o.grantedAt <= h.grantedAt && o.e > h.grantedAt);
          if (live.length > permits) violations.push(`${lock}: ${live.length} slots live at once (permits ${permits}) when ${describe(h)} was granted: ${live.map(describe).join('; ')}`);
        }
        const liveRaw = (/** @type {Hold} */ h) => spans.filter((o) => o.grantedAt <= h.grantedAt && rawEnd(o) > h.grantedAt).length;
        for (const h of spans) if (liveRaw(h) > permits && spans.filter((o) => o.grantedAt <= h.grantedAt && o.e > h.grantedAt).length <= permits) excusedOverlaps++;
      } else {
        for (let i = 0; i < spans.length; i++) {
          for (let j = i + 1; j < spans.length; j++) {
            const a = spans[i];
            const b = spans[j];
            if (a.owner === b.owner || !conflicting(a.kind, b.kind)) continue;
            const overlapRaw = a.grantedAt < rawEnd(b) && b.grantedAt < rawEnd(a);
            if (!overlapRaw) continue;
            // An empty span (aborted or excused at its grant: its holder saw the signal aborted) overlaps nothing.
            if (a.grantedAt < b.e && b.grantedAt < a.e && a.grantedAt < a.e && b.grantedAt < b.e) {
              violations.push(`${lock}: two holders with live signals: ${describe(a)} and ${describe(b)}`);
            } else excusedOverlaps++;
          }
        }
      }
      // Fencing tokens: a later hold that does not overlap an earlier one carries a larger token.
      // Not between a semaphore's slots when it has several permits: two slots live side by side
      // on the server, and which caller hears of its grant first is a race.
      if (permits !== undefined && permits > 1) continue;
      for (const b of holds) {
        if (this.deletedBeforeGrant(b)) {
          // Fencing must stop it: any other node's hold beside it carries a larger token.
          const beside = holds.filter((/** @type {Hold} */ o) => o.node !== b.node && o.grantedAt < rawEnd(b) && b.grantedAt < rawEnd(o) && !(b.token < o.token));
          if (beside.length > 0) violations.push(`${lock}: ${describe(b)} was granted on a node deleted before and its token is not below ${describe(beside[0])}: fencing would not stop it`);
          continue;
        }
        const above = holds.filter((/** @type {Hold} */ a) => a !== b && !(a.kind === 'read' && b.kind === 'read') && rawEnd(a) <= b.grantedAt && !(b.token > a.token));
        if (above.length === 0) continue;
        const top = above.reduce((/** @type {Hold} */ x, /** @type {Hold} */ y) => (y.token > x.token ? y : x));
        violations.push(`${lock}: token of ${describe(b)} is not above the tokens of ${above.length} earlier hold(s) that ended before it, e.g. ${describe(top)}`);
      }
    }
    for (const a of this.acquires) {
      const bound = (a.waitMs ?? 0) + slackMs;
      if (a.settledAt === undefined) violations.push(`acquire by ${a.owner} of ${a.lock} (waitMs ${a.waitMs}) never settled`);
      else if (a.waitMs !== null && a.settledAt - a.startedAt > bound) {
        violations.push(`acquire by ${a.owner} of ${a.lock} (waitMs ${a.waitMs}) settled after ${Math.round(a.settledAt - a.startedAt)} ms (${a.outcome}), past ${bound} ms`);
      }
    }
    for (const h of this.holds) {
      if (h.abortedAt === undefined && h.releasedAt === undefined) violations.push(`${describe(h)} never ended (neither released nor lost)`);
    }
    for (const e of this.errors) violations.push(`unexpected error: ${e}`);
    return {
      violations: dedupe(violations),
      stats: {
        holds: this.holds.length,
        acquires: this.acquires.length,
        lost: this.holds.filter((h) => h.abortedAt !== undefined && (h.releasedAt === undefined || h.abortedAt <= h.releasedAt)).length,
        deletions: this.deletions.filter((d) => d.ok).length,
        kills: this.kills.length,
        excusedOverlaps,
      },
    };
  }
}

/** @param {Hold} h */
function rawEnd(h) {
  return Math.min(h.abortedAt ?? Infinity, h.releasedAt ?? Infinity);
}

/** @param {string} a @param {string} b */
function conflicting(a, b) {
  return !(a === 'read' && b === 'read');
}

/** @param {string} node */
function tail(node) {
  return node.slice(node.lastIndexOf('/') + 1);
}

/** @param {Hold} h */
export function describe(h) {
  const r = (/** @type {number | undefined} */ t) => (t === undefined ? '-' : t.toFixed(1));
  return `#${h.id} ${h.owner} ${h.kind} ${tail(h.node)} token ${h.token} [${r(h.grantedAt)}, aborted ${r(h.abortedAt)}${h.abortReason ? ` (${h.abortReason})` : ''}, released ${r(h.releasedAt)}]`;
}

/** @param {string[]} list */
function dedupe(list) {
  return [...new Set(list)];
}
