import { Body, Controller, Param, Post } from '@nestjs/common';
import { SalesService, type SaleView } from './sales.service.js';
import { EventIdPipe, PurchasePipe, type PurchaseDto } from './validation.pipes.js';

/**
 * LOCKS=off only (the demo's comparison run): the same route as PurchaseController without
 * @WithLock. Concurrent purchases of one event then race between their read and their write.
 */
@Controller('events')
export class UnlockedPurchaseController {
  constructor(private readonly sales: SalesService) {}

  @Post(':id/purchase')
  purchase(@Param('id', EventIdPipe) id: number, @Body(PurchasePipe) dto: PurchaseDto): Promise<SaleView> {
    return this.sales.purchase(id, dto);
  }
}
