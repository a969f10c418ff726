/** ZooKeeper's C client return codes, by name (zookeeper.h). */
const CODE_NAMES: Record<number, string> = {
  [-1]: 'SYSTEMERROR',
  [-2]: 'RUNTIMEINCONSISTENCY',
  [-3]: 'DATAINCONSISTENCY',
  [-4]: 'CONNECTIONLOSS',
  [-5]: 'MARSHALLINGERROR',
  [-6]: 'UNIMPLEMENTED',
  [-7]: 'OPERATIONTIMEOUT',
  [-8]: 'BADARGUMENTS',
  [-9]: 'INVALIDSTATE',
  [-12]: 'UNKNOWNSESSION',
  [-13]: 'NEWCONFIGNOQUORUM',
  [-14]: 'RECONFIGINPROGRESS',
  [-15]: 'SSLCONNECTIONERROR',
  [-1000]: 'NOTAPPLIED',
  [-1001]: 'REPLYTOOLARGE',
  [-100]: 'APIERROR',
  [-101]: 'NONODE',
  [-102]: 'NOAUTH',
  [-103]: 'BADVERSION',
  [-108]: 'NOCHILDRENFOREPHEMERALS',
  [-110]: 'NODEEXISTS',
  [-111]: 'NOTEMPTY',
  [-112]: 'SESSIONEXPIRED',
  [-113]: 'INVALIDCALLBACK',
  [-114]: 'INVALIDACL',
  [-115]: 'AUTHFAILED',
  [-116]: 'CLOSING',
  [-117]: 'NOTHING',
  [-118]: 'SESSIONMOVED',
  [-119]: 'NOTREADONLY',
  [-120]: 'EPHEMERALONLOCALSESSION',
  [-121]: 'NOWATCHER',
  [-122]: 'REQUESTTIMEOUT',
  [-123]: 'RECONFIGDISABLED',
  [-124]: 'SESSIONCLOSEDREQUIRESASLAUTH',
  [-125]: 'QUOTAEXCEEDED',
  [-127]: 'THROTTLEDOP',
};

/**
 * The codes a ZooKeeper server sends (KeeperException.Code in 3.8 and 3.9); INVALIDSTATE, CLOSING,
 * NOTHING and NOT_APPLIED are the clients' own. A reply with any other code is not from a correct
 * server: the client drops the link as for a broken frame.
 */
const SERVER_CODES: ReadonlySet<number> = new Set([
  0, -1, -2, -3, -4, -5, -6, -7, -8, -12, -13, -14, -100, -101, -102, -103, -108, -110, -111, -112, -113, -114, -115, -118, -119, -120, -121,
  -122, -123, -124, -125, -127,
]);

export function isServerCode(code: number): boolean {
  return SERVER_CODES.has(code);
}

export const ZkCode = {
  OK: 0,
  /**
   * The C client met a reply it did not expect and dropped the connection: every request in
   * flight fails with it, outcome unknown (a connection error).
   */
  RUNTIMEINCONSISTENCY: -2,
  /**
   * Ours, not ZooKeeper's: a batched write that was not applied because another write of its
   * multi request failed (see WriteBatcher); its caller sends it again.
   */
  NOT_APPLIED: -1000,
  /**
   * Ours, not ZooKeeper's: the server answered, but its reply was over the client's maxReplyBytes
   * and was skipped unread (the request rejects with ReplyTooLargeError; the link lives on).
   */
  REPLY_TOO_LARGE: -1001,
  CONNECTIONLOSS: -4,
  OPERATIONTIMEOUT: -7,
  BADARGUMENTS: -8,
  INVALIDSTATE: -9,
  NONODE: -101,
  NOAUTH: -102,
  BADVERSION: -103,
  NODEEXISTS: -110,
  NOTEMPTY: -111,
  SESSIONEXPIRED: -112,
  AUTHFAILED: -115,
  CLOSING: -116,
  SESSIONMOVED: -118,
  THROTTLEDOP: -127,
} as const;

/**
 * Every failed ZooKeeper operation rejects with this one class; `codeName` is ZooKeeper's own
 * name for the code (NONODE, CONNECTIONLOSS, ...).
 * @publicApi
 */
export class ZkError extends Error {
  override readonly name = 'ZkError';
  readonly codeName: string;

  constructor(
    readonly code: number,
    readonly operation: string,
    readonly path?: string,
  ) {
    const codeName = CODE_NAMES[code] ?? `UNKNOWN(${code})`;
    super(`ZooKeeper ${operation}${path === undefined ? '' : ` ${path}`} failed: ${codeName}`);
    this.codeName = codeName;
  }

  /** The outcome is unknown and the session may still be alive: retry after reconnecting. */
  get isConnectionError(): boolean {
    return (
      this.code === ZkCode.CONNECTIONLOSS ||
      this.code === ZkCode.RUNTIMEINCONSISTENCY ||
      this.code === ZkCode.OPERATIONTIMEOUT ||
      this.code === ZkCode.THROTTLEDOP ||
      this.code === ZkCode.SESSIONMOVED
    );
  }

  /** The session this operation was sent on is gone (expired, closed or never opened). */
  get isSessionGone(): boolean {
    return (
      this.code === ZkCode.SESSIONEXPIRED ||
      this.code === ZkCode.INVALIDSTATE ||
      this.code === ZkCode.CLOSING ||
      this.code === ZkCode.AUTHFAILED
    );
  }
}

export function isZkCode(error: unknown, code: number): boolean {
  return error instanceof ZkError && error.code === code;
}
