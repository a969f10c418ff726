import { Body, Controller, Param, Post } from '@nestjs/common';
import { WithLock } from 'nestjs-zk-lock';
import { lockWaitMs } from '../config.js';
import { SalesService, type SaleView } from './sales.service.js';
import { EventIdPipe, PurchasePipe, type PurchaseDto } from './validation.pipes.js';

// Decorator options are fixed when the class is defined, before ConfigService exists: read the
// environment here (ConfigModule validates the same variable at bootstrap).
const LOCK_WAIT_MS = lockWaitMs(process.env);

@Controller('events')
export class PurchaseController {
  constructor(private readonly sales: SalesService) {}

  /**
   * One purchase at a time per event, across all instances: the lock `event:<id>` (ZooKeeper node
   * <basePath>/event:<id>) is taken after the pipes validated the id and body, and released when
   * the handler settles. Not acquired within LOCK_WAIT_MS: LockNotAcquiredError, which
   * ZkLockModule answers with 409 Conflict, Retry-After and reason `lock-timeout`.
   */
  @Post(':id/purchase')
  @WithLock((id: number) => `event:${id}`, { waitMs: LOCK_WAIT_MS })
  purchase(@Param('id', EventIdPipe) id: number, @Body(PurchasePipe) dto: PurchaseDto): Promise<SaleView> {
    return this.sales.purchase(id, dto);
  }
}
