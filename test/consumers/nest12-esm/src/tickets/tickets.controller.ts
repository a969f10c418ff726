import { Body, Controller, Param, Post } from '@nestjs/common';
import { MessagePattern } from '@nestjs/microservices';
import { TicketsService } from './tickets.service.js';

@Controller('tickets')
export class TicketsController {
  constructor(private readonly tickets: TicketsService) {}

  @Post('seats')
  buySeat(@Body() dto: { seat: string }) {
    return this.tickets.holdSeat(dto.seat);
  }

  @Post(':eventId')
  sell(@Param('eventId') eventId: string) {
    return this.tickets.sell(eventId);
  }

  @MessagePattern('report')
  report(holdMs: number) {
    return this.tickets.report(holdMs);
  }
}
