/**
 * `nestjs-zk-lock top`: the locks under a path, refreshed. Reads only (the same listing as
 * `locks`); what it adds is memory across refreshes: which holder took a lock since the last one
 * (handoffs per second) and when a waiter became the holder (held for).
 */
// cli.ts imports this module and this module imports cli.ts's formatting: a cycle ES modules allow,
// since neither uses the other's functions while loading.
import { ConnectionClosedError, ReplyTooLargeError, SessionWaitAbortedError } from './core/errors.js';
import { ZkError } from './core/client/zk-error.js';
import type { ContenderInfo, LockInfo } from './core/inspect.js';
import { describeHolder, formatAge, kindOf, printable } from './cli.js';

/** One lock in a frame of `top`. */
export interface TopRow {
  readonly lock: LockInfo;
  /** The holder that has held longest (the only one of a mutex), if anyone holds. */
  readonly holder: ContenderInfo | undefined;
  /** How long `holder` has held: since the refresh that saw it take over from a wait, else its node's age. */
  readonly heldMs: number | undefined;
  /** Waiters; for an election, the candidates behind the leader. */
  readonly waiting: number;
  /** The age of the oldest waiter's node (undefined without waiters, and for elections: their candidates wait by design). */
  readonly longestWaitMs: number | undefined;
  /** New holder nodes per second over the last refreshes (undefined at the first). */
  readonly handoffsPerSecond: number | undefined;
}

/** How far back the handoff rate looks. */
const RATE_WINDOW_MS = 10_000;

/**
 * Turns successive listings into rows. A handoff is a holder node that did not hold the same
 * lock at the previous refresh; several handoffs between two refreshes count as one per holder
 * seen, so the rate is a lower bound when the holders change faster than the refreshes.
 */
export class TopTracker {
  private previous: Map<string, { holders: Set<string>; waiters: Set<string> }> | undefined;
  private firstAt: number | undefined;
  /** Holder node → the refresh that first saw it hold after it had been seen waiting. */
  private readonly heldSince = new Map<string, number>();
  /** Lock path → the refreshes that saw new holders, and how many. */
  private readonly handoffs = new Map<string, { at: number; count: number }[]>();

  constructor(private readonly windowMs = RATE_WINDOW_MS) {}

  /** The rows of a listing read at `at` (ms), sorted by longest wait, most waiters, longest held, path. */
  update(locks: readonly LockInfo[], at: number): TopRow[] {
    const previous = this.previous;
    const current = new Map<string, { holders: Set<string>; waiters: Set<string> }>();
    const holding = new Set<string>();
    for (const lock of locks) {
      const holders = new Set(lock.holders.map((h) => h.path));
      current.set(lock.path, { holders, waiters: new Set(lock.waiting.map((w) => w.path)) });
      if (previous === undefined) continue;
      const before = previous.get(lock.path);
      let taken = 0;
      for (const h of holders) {
        holding.add(h);
        if (before?.holders.has(h)) continue;
        taken++;
        if (before?.waiters.has(h)) this.heldSince.set(h, at);
      }
      if (taken > 0) this.events(lock.path).push({ at, count: taken });
    }
    for (const node of this.heldSince.keys()) if (!holding.has(node)) this.heldSince.delete(node);
    for (const [path, events] of this.handoffs) {
      while (events.length > 0 && events[0]!.at <= at - this.windowMs) events.shift();
      if (events.length === 0 && !current.has(path)) this.handoffs.delete(path);
    }
    this.previous = current;
    this.firstAt ??= at;
    const spanMs = Math.min(this.windowMs, at - this.firstAt);
    return locks.map((lock) => this.row(lock, at, previous === undefined || spanMs <= 0 ? undefined : spanMs)).sort(byUrgency);
  }

  private events(path: string): { at: number; count: number }[] {
    let events = this.handoffs.get(path);
    if (!events) this.handoffs.set(path, (events = []));
    return events;
  }

  private row(lock: LockInfo, at: number, spanMs: number | undefined): TopRow {
    const heldMsOf = (h: ContenderInfo) => {
      const since = this.heldSince.get(h.path);
      return since === undefined ? h.ageMs : at - since;
    };
    let holder: ContenderInfo | undefined;
    for (const h of lock.holders) if (holder === undefined || heldMsOf(h) > heldMsOf(holder)) holder = h;
    const election = lock.kind === 'leadership';
    const taken = (this.handoffs.get(lock.path) ?? []).reduce((sum, e) => sum + e.count, 0);
    return {
      lock,
      holder,
      heldMs: holder && heldMsOf(holder),
      waiting: lock.waiting.length,
      longestWaitMs: election || lock.waiting.length === 0 ? undefined : lock.waiting.reduce((max, w) => Math.max(max, w.ageMs), 0),
      handoffsPerSecond: spanMs === undefined ? undefined : (taken * 1000) / spanMs,
    };
  }
}

function byUrgency(a: TopRow, b: TopRow): number {
  return (
    (b.longestWaitMs ?? -1) - (a.longestWaitMs ?? -1) ||
    b.waiting - a.waiting ||
    (b.heldMs ?? -1) - (a.heldMs ?? -1) ||
    (a.lock.path < b.lock.path ? -1 : a.lock.path > b.lock.path ? 1 : 0)
  );
}

export interface TopHeader {
  /** The path searched. */
  readonly root: string;
  /** Where the view reads (the connection's description). */
  readonly server: string;
  readonly intervalMs: number;
  /** When the rows were read. */
  readonly at: Date;
  /** Shown under the header: why the rows may be old, what keys do. */
  readonly notes?: readonly string[];
}

const COLUMNS = ['LOCK', 'KIND', 'HOLDER', 'HELD', 'WAITING', 'LONGEST WAIT', 'HANDOFFS/S'];
/** The numeric columns, right-aligned. */
const RIGHT = new Set([3, 4, 5, 6]);

/**
 * A frame: two header lines, the notes, then one row per lock. With `size` (a terminal), cut to
 * its height (the last line says how many locks did not fit) and each line to its width.
 */
export function formatTopFrame(rows: readonly TopRow[] | undefined, header: TopHeader, size?: { columns: number; rows: number }): string[] {
  const time = header.at.toTimeString().slice(0, 8);
  const lines = [printable(`nestjs-zk-lock top  ${header.root} at ${header.server}  every ${formatAge(header.intervalMs)}  ${time}`)];
  if (rows !== undefined) lines.push(summary(rows));
  lines.push(...(header.notes ?? []).map(printable), '');
  if (rows === undefined) {
    lines.push('(reading…)');
  } else if (rows.length === 0) {
    lines.push(`No locks held under ${printable(header.root)}.`);
  } else {
    const cells = rows.map((row) => cellsOf(row).map(printable));
    const widths = COLUMNS.map((h, col) => Math.max(h.length, ...cells.map((r) => r[col]!.length)));
    const line = (r: readonly string[]) =>
      r
        .map((cell, col) => (RIGHT.has(col) ? cell.padStart(widths[col]!) : col === r.length - 1 ? cell : cell.padEnd(widths[col]!)))
        .join('  ')
        .trimEnd();
    const table = [line(COLUMNS), ...cells.map(line)];
    const room = size === undefined ? table.length : Math.max(2, size.rows - 1 - lines.length);
    if (table.length > room) {
      const hidden = table.length - (room - 1);
      table.splice(room - 1, table.length, `… ${hidden} more lock${hidden === 1 ? '' : 's'} (a taller terminal shows them)`);
    }
    lines.push(...table);
  }
  return size === undefined ? lines : lines.slice(0, Math.max(1, size.rows - 1)).map((l) => cut(l, size.columns));
}

function summary(rows: readonly TopRow[]): string {
  const held = rows.filter((r) => r.holder !== undefined).length;
  const waiting = rows.filter((r) => r.lock.kind !== 'leadership').reduce((sum, r) => sum + r.waiting, 0);
  const longest = rows.reduce((max, r) => Math.max(max, r.longestWaitMs ?? -1), -1);
  const rates = rows.map((r) => r.handoffsPerSecond);
  const rate = rates.some((r) => r === undefined) ? '-' : rates.reduce((s: number, r) => s + r!, 0).toFixed(1);
  const elections = rows.filter((r) => r.lock.kind === 'leadership').length;
  return (
    `${rows.length} lock${rows.length === 1 ? '' : 's'} (${elections} election${elections === 1 ? '' : 's'}), ${held} held, ` +
    `${waiting} waiting${longest >= 0 ? ` (longest ${formatAge(longest)})` : ''}, ${rate} handoffs/s`
  );
}

function cellsOf(row: TopRow): string[] {
  const others = row.lock.holders.length - 1;
  return [
    row.lock.path,
    kindOf(row.lock, row.holder),
    row.holder ? describeHolder(row.holder) + (others > 0 ? ` (+${others})` : '') : '(none)',
    row.heldMs === undefined ? '' : formatAge(row.heldMs),
    String(row.waiting),
    row.longestWaitMs === undefined ? '-' : formatAge(row.longestWaitMs),
    row.handoffsPerSecond === undefined ? '-' : row.handoffsPerSecond.toFixed(1),
  ];
}

/** `line` cut to `columns` characters (it holds no escape sequences: printable() saw to that). */
function cut(line: string, columns: number): string {
  const chars = [...line];
  return chars.length <= columns ? line : `${chars.slice(0, Math.max(0, columns - 1)).join('')}…`;
}

/** Where `top` draws and listens when they are terminals, and stdout. */
export interface TopTerminal {
  /** stdout, terminal or not: when its reader goes away (EPIPE: `top | head`), the view ends. */
  readonly stdout?: { on(event: 'error', listener: (error: Error) => void): unknown; off(event: 'error', listener: (error: Error) => void): unknown };
  /** stdout when it is a terminal: frames redraw in place, cut to its size. */
  readonly screen?: { readonly columns: number; readonly rows: number; on(event: 'resize', listener: () => void): unknown; off(event: 'resize', listener: () => void): unknown };
  /** stdin when it is a terminal: read in raw mode for `q` and Ctrl-C while the view runs. */
  readonly keys?: Pick<NodeJS.ReadStream, 'setRawMode' | 'isRaw' | 'on' | 'off' | 'resume' | 'pause'>;
}

export function processTerminal(): TopTerminal {
  return { stdout: process.stdout, screen: process.stdout.isTTY ? process.stdout : undefined, keys: process.stdin.isTTY ? process.stdin : undefined };
}

export interface TopRun {
  readonly root: string;
  readonly server: string;
  readonly intervalMs: number;
  readonly once: boolean;
  /** One listing; `signal` bounds the wait for a session. */
  readonly read: (signal: AbortSignal) => Promise<LockInfo[]>;
  /** `--once`: how long a listing waits for a session (the view waits one interval, then says so). */
  readonly sessionWaitMs: number;
  /** The connection's state, shown while a refresh fails. */
  readonly state: () => string;
}

/** Clear to the end of the line, to the end of the screen; hide and show the cursor. */
const CLEAR_LINE = '\x1b[K';
const CLEAR_BELOW = '\x1b[J';
const HOME = '\x1b[H';
const HIDE_CURSOR = '\x1b[?25l';
const SHOW_CURSOR = '\x1b[?25h';

/**
 * Runs the view until `q`, Ctrl-C, SIGINT, SIGTERM, SIGHUP or a closed pipe (resolves with 0), or an error the
 * next refresh cannot mend (rejects with it, the terminal restored). `--once`: two listings an
 * interval apart (the handoff rate needs both), one plain frame. Without a terminal on stdout:
 * plain frames one after another, a blank line between them.
 */
export async function runTop(run: TopRun, out: (text: string) => void, terminal: TopTerminal): Promise<number> {
  const tracker = new TopTracker();
  if (run.once) {
    tracker.update(await run.read(AbortSignal.timeout(run.sessionWaitMs)), Date.now());
    await new Promise((resolve) => setTimeout(resolve, run.intervalMs));
    const rows = tracker.update(await run.read(AbortSignal.timeout(run.sessionWaitMs)), Date.now());
    out(`${formatTopFrame(rows, { ...run, at: new Date() }).join('\n')}\n`);
    return 0;
  }

  const stop = new AbortController();
  const { screen, keys, stdout } = terminal;
  const onKey = (data: Buffer | string) => {
    const text = String(data);
    if (text.includes('q') || text.includes('Q') || text.includes('\x03')) stop.abort();
  };
  const onSignal = () => stop.abort();
  const onOutputError = (error: Error) => (error as NodeJS.ErrnoException).code === 'EPIPE' && stop.abort();
  let frame: { rows: TopRow[] | undefined; at: Date; notes: string[] } = { rows: undefined, at: new Date(), notes: [] };
  const draw = () => {
    const hint = keys ? ['q quits'] : [];
    const header = { ...run, at: frame.at, notes: [...frame.notes, ...hint] };
    if (screen) out(HOME + formatTopFrame(frame.rows, header, screen).join(`${CLEAR_LINE}\n`) + CLEAR_LINE + CLEAR_BELOW);
    else out(`${formatTopFrame(frame.rows, header).join('\n')}\n\n`);
  };
  const restore = () => {
    if (keys?.isRaw) keys.setRawMode(false);
    if (screen) out(`${SHOW_CURSOR}\n`);
  };
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const s of signals) process.on(s, onSignal);
  process.on('exit', restore); // should anything end the process before the finally below
  keys?.setRawMode(true);
  keys?.on('data', onKey);
  keys?.resume();
  screen?.on('resize', draw);
  stdout?.on('error', onOutputError);
  try {
    if (screen) {
      out(HIDE_CURSOR + HOME + CLEAR_BELOW);
      draw(); // "(reading…)" until the first listing is in
    }
    while (!stop.signal.aborted) {
      const started = Date.now();
      try {
        // q during a listing quits at once; the listing ends with the connection.
        const locks = await unlessAborted(run.read(AbortSignal.any([stop.signal, AbortSignal.timeout(Math.max(run.intervalMs, 1000))])), stop.signal);
        if (locks === undefined) break;
        frame = { rows: tracker.update(locks, Date.now()), at: new Date(), notes: [] };
      } catch (error) {
        if (stop.signal.aborted) break;
        if (!isPassing(error)) throw error;
        const why = error instanceof SessionWaitAbortedError ? 'no session' : (error as Error).message;
        frame = { ...frame, notes: [`refresh failed (ZooKeeper ${run.state()}): ${why}; the rows are ${formatAge(Date.now() - frame.at.getTime())} old`] };
      }
      draw();
      await sleep(started + run.intervalMs - Date.now(), stop.signal);
    }
    return 0;
  } finally {
    screen?.off('resize', draw);
    stdout?.off('error', onOutputError);
    keys?.off('data', onKey);
    keys?.pause();
    for (const s of signals) process.off(s, onSignal);
    process.off('exit', restore);
    restore();
  }
}

/** Errors a later refresh may not meet: no session for now, a lost link, a listing too large right now. */
function isPassing(error: unknown): boolean {
  if (error instanceof ConnectionClosedError) return false;
  return error instanceof SessionWaitAbortedError || error instanceof ReplyTooLargeError || error instanceof ZkError;
}

/** What `work` resolves with, or undefined as soon as `signal` aborts (`work`'s end is then ignored). */
function unlessAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  work.catch(() => undefined);
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise<T | undefined>((resolve, reject) => {
    const onAbort = () => resolve(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    void work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0 || signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
