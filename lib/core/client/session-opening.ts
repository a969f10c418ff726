// Opening sessions: which negotiated timeouts a server can grant, and how long to wait before the
// next new session, so that neither a broken or forged answer nor a run of dead sessions makes the
// client believe a deadline it does not have or open sessions without pause.

/**
 * Why a ConnectResponse's negotiated timeout cannot be a server's answer to what we asked, or
 * undefined when it can. A server grants clamp(asked, minSessionTimeout, maxSessionTimeout), so
 * more than asked only when its minSessionTimeout (2 × tickTime unless set) is above the ask; 0 is
 * its "expired" answer to a re-attach (not refused here), and a new session always gets more.
 */
export function refusedGrant(grantedMs: number, askedMs: number, newSession: boolean, serverTickTimeMs: number): string | undefined {
  if (grantedMs < 0 || (grantedMs === 0 && newSession)) {
    return `the server granted a session timeout of ${grantedMs} ms to ${newSession ? 'a new session' : 'a re-attach'} (a server grants more than 0)`;
  }
  const most = Math.max(askedMs, 2 * serverTickTimeMs);
  if (grantedMs <= most) return undefined;
  return (
    `the server granted a session timeout of ${grantedMs} ms for the ${askedMs} ms asked, more than a server grants ` +
    `(the ask, or up to its minSessionTimeout, which is 2 × tickTime = ${2 * serverTickTimeMs} ms by serverTickTimeMs): ` +
    `if the ensemble's minSessionTimeout is ${grantedMs} ms, raise sessionTimeoutMs to ${grantedMs} or more ` +
    `(or serverTickTimeMs to the ensemble's tickTime)`
  );
}

/** The pause before a new session after one that ended young (see ZkConnection.openSuccessor). */
const FIRST_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 5000;

/**
 * How long to wait before opening a new session, after `endedUnusable` sessions in a row ended
 * (or were refused) before they were usable, or lived less than their timeout: 20–100 ms after
 * the first, doubling with each up to 5 s. Jittered (`random`, in [0, 1)) so that the clients of a whole fleet
 * whose sessions ended together do not all come back at once.
 */
export function newSessionBackoffMs(endedUnusable: number, random: () => number): number {
  const ceiling = Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** Math.min(endedUnusable, 16));
  return ceiling * (0.2 + 0.8 * random());
}
