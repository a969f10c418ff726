import { Body, Controller, Get, Param, Post } from '@nestjs/common';
import { SalesService, type EventView } from './sales.service.js';
import { CreateEventPipe, EventIdPipe, type CreateEventDto } from './validation.pipes.js';

@Controller('events')
export class EventsController {
  constructor(private readonly sales: SalesService) {}

  @Get()
  list(): EventView[] {
    return this.sales.list();
  }

  /** Seats, sold, remaining, oversold. */
  @Get(':id')
  get(@Param('id', EventIdPipe) id: number): EventView {
    return this.sales.get(id);
  }

  @Post()
  create(@Body(CreateEventPipe) dto: CreateEventDto): EventView {
    return this.sales.create(dto);
  }
}
