import { Module } from '@nestjs/common';
import { TicketsController } from './tickets.controller.js';
import { TicketsService } from './tickets.service.js';

// A feature module: it does not import ZkLockModule (the module is global, as ORM modules are).
@Module({ controllers: [TicketsController], providers: [TicketsService] })
export class TicketsModule {}
