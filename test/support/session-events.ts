import type { SessionEvents } from '../../lib/core/client/session.js';

/** SessionEvents that count what a bare session told them (connects, disconnects, closes with their codes). */
export function recordingEvents(): SessionEvents & { connected: number; connecting: number; closed: number[] } {
  const events = {
    connected: 0,
    connecting: 0,
    closed: [] as number[],
    onConnected: () => void events.connected++,
    onConnecting: () => void events.connecting++,
    onClosed: (code: number) => void events.closed.push(code),
  };
  return events;
}
