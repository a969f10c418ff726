/**
 * - `connecting`: no session yet (before the first connect, or between a lost session and its successor)
 * - `connected`: the session is usable
 * - `suspended`: disconnected; the session may still live on the server (we cannot be sure)
 * - `lost`: the session is gone (expired, or disconnected longer than its timeout); a new one is being opened
 * - `closed`: closed by us, for good
 */
export type ConnectionState = 'connecting' | 'connected' | 'suspended' | 'lost' | 'closed';
export type SessionLostReason = 'session-expired' | 'session-timeout';
