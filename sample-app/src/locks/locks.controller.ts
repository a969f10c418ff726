import { Controller, Get, ServiceUnavailableException } from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import { parseHolderData, sortChildren, ZkConnection, type HolderInfo, type ZkSession } from 'nestjs-zk-lock';
import type { AppConfig } from '../config.js';

export interface Contender extends Partial<HolderInfo> {
  node: string;
}

export interface LockView {
  name: string;
  path: string;
  /** The lowest node: the holder. */
  holder: Contender | null;
  /** The others, in queue order. */
  waiting: Contender[];
}

const isNoNode = (error: unknown) => (error as { codeName?: string }).codeName === 'NONODE';

/**
 * Who holds and who waits on which lock, read straight from ZooKeeper: the children of each lock
 * path under the base path, in Curator's order (by sequence), with the JSON each contender wrote
 * into its node. A snapshot: nodes come and go while it is read (a vanished one is left out).
 */
@Controller('locks')
export class LocksController {
  private readonly basePath: string;

  constructor(
    private readonly connection: ZkConnection,
    config: ConfigService<AppConfig, true>,
  ) {
    this.basePath = config.get('LOCK_BASE_PATH', { infer: true });
  }

  @Get()
  async list(): Promise<{ basePath: string; locks: LockView[] }> {
    const session = this.connection.session;
    if (!session || this.connection.state !== 'connected') {
      throw new ServiceUnavailableException(`Not connected to ZooKeeper (${this.connection.state})`);
    }
    const names = (await children(session, this.basePath)).sort();
    const locks = await Promise.all(names.map((name) => this.lock(session, name)));
    return { basePath: this.basePath, locks: locks.filter((l) => l.holder !== null) };
  }

  private async lock(session: ZkSession, name: string): Promise<LockView> {
    const path = this.basePath === '/' ? `/${name}` : `${this.basePath}/${name}`;
    const nodes = sortChildren(await children(session, path), ['lock-']);
    const contenders = await Promise.all(
      nodes.map(async (node): Promise<Contender | undefined> => {
        try {
          const { data } = await session.getData(`${path}/${node}`);
          return { node, ...parseHolderData(data) };
        } catch (error) {
          if (isNoNode(error)) return undefined; // released meanwhile
          throw error;
        }
      }),
    );
    const [holder = null, ...waiting] = contenders.filter((c): c is Contender => c !== undefined);
    return { name, path, holder, waiting };
  }
}

async function children(session: ZkSession, path: string): Promise<string[]> {
  try {
    return (await session.getChildren(path)).children;
  } catch (error) {
    if (isNoNode(error)) return [];
    throw error;
  }
}
