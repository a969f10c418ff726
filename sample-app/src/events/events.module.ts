import { Module } from '@nestjs/common';
import { EventsController } from './events.controller.js';
import { PaymentService } from './payment.service.js';
import { SalesService } from './sales.service.js';

@Module({
  controllers: [EventsController],
  providers: [SalesService, PaymentService],
  exports: [SalesService],
})
export class EventsModule {}
