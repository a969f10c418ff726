import { Controller, Get, ServiceUnavailableException } from '@nestjs/common';
import { ConnectionClosedError, LockService, ZkError, type LockInfo } from 'nestjs-zk-lock';

/** One lock as `LockService.inspect()` reports it, plus its name relative to the base path. */
export interface LockView extends LockInfo {
  name: string;
}

/**
 * Who holds and who waits on which lock under the base path, from the library's inspection API:
 * mutexes, read-write locks and semaphores (in this library's or Curator's layout), each contender
 * with its holder data (host, pid, app, instance), ZooKeeper session, sequence and age. A snapshot:
 * nodes come and go while it is read. Idle lock paths are left out.
 */
@Controller('locks')
export class LocksController {
  constructor(private readonly locks: LockService) {}

  @Get()
  async list(): Promise<{ basePath: string; locks: LockView[] }> {
    // inspect() waits for a connection instead of failing; an operator's request should not hang
    // while ZooKeeper is away. (inspect() checks the state in the same tick, so no race here.)
    const state = this.locks.state;
    if (state !== 'connected') throw new ServiceUnavailableException(`Not connected to ZooKeeper (${state})`);
    let found: LockInfo[];
    try {
      found = await this.locks.inspect();
    } catch (error) {
      if (isUnavailable(error)) throw new ServiceUnavailableException(`ZooKeeper unavailable: ${(error as Error).message}`);
      throw error;
    }
    const basePath = this.locks.basePath;
    return { basePath, locks: found.map((lock) => ({ name: nameOf(basePath, lock.path), ...lock })) };
  }
}

/** The connection dropped or the session ended during the walk, or the app is shutting down. */
function isUnavailable(error: unknown): boolean {
  if (error instanceof ConnectionClosedError) return true;
  return error instanceof ZkError && (error.isConnectionError || error.isSessionGone);
}

function nameOf(basePath: string, path: string): string {
  const prefix = basePath === '/' ? '/' : `${basePath}/`;
  return path.startsWith(prefix) ? path.slice(prefix.length) : path;
}
