import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import Database from 'better-sqlite3';
import type { AppConfig } from '../config.js';

export interface EventRow {
  id: number;
  name: string;
  seats: number;
  sold: number;
}

/**
 * The event inventory: one SQLite file shared by every instance on the machine. WAL lets readers
 * run beside the one writer; busy_timeout makes a writer wait for another process's write instead
 * of failing with SQLITE_BUSY. better-sqlite3 is synchronous: each statement is atomic on its own,
 * and nothing of another request runs between two statements unless the code awaits in between.
 */
@Injectable()
export class DatabaseService implements OnApplicationShutdown {
  private readonly logger = new Logger(DatabaseService.name);
  readonly db: Database.Database;

  constructor(config: ConfigService<AppConfig, true>) {
    const file = config.get('DATABASE_FILE', { infer: true });
    mkdirSync(dirname(file), { recursive: true });
    this.db = new Database(file);
    this.db.pragma('busy_timeout = 10000'); // first: the next pragmas may have to wait for another instance
    this.enableWal();
    this.db.pragma('synchronous = NORMAL');
    this.db.pragma('foreign_keys = ON');
    this.migrate();
    this.logger.log(`SQLite database ${file} (WAL)`);
  }

  /**
   * Switching a new file to WAL upgrades a read lock to an exclusive one; instances starting
   * together on a new file can get SQLITE_BUSY there without the busy handler being called
   * (SQLite's deadlock avoidance: seen once in a loaded test run). Only then: try again shortly.
   */
  private enableWal(): void {
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        this.db.pragma('journal_mode = WAL');
        return;
      } catch (error) {
        if ((error as { code?: string }).code !== 'SQLITE_BUSY' || Date.now() > deadline) throw error;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10 + Math.random() * 40); // a synchronous pause (in a constructor)
      }
    }
  }

  private migrate(): void {
    // Every instance runs this at start-up; IMMEDIATE takes the write lock first, so two
    // instances starting together apply it one after the other.
    this.db.transaction(() => {
      this.db.exec(`
        CREATE TABLE IF NOT EXISTS events (
          id      INTEGER PRIMARY KEY,
          name    TEXT NOT NULL,
          seats   INTEGER NOT NULL CHECK (seats > 0),
          sold    INTEGER NOT NULL DEFAULT 0,
          -- highest fencing token of a lock holder that wrote here (zero-padded decimal text,
          -- so that text order is numeric order: tokens exceed 64 bits)
          fence   TEXT
        );
        CREATE TABLE IF NOT EXISTS sales (
          id         INTEGER PRIMARY KEY,
          event_id   INTEGER NOT NULL REFERENCES events (id),
          quantity   INTEGER NOT NULL,
          buyer      TEXT,
          instance   TEXT NOT NULL,
          fence      TEXT,
          created_at TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS sales_by_event ON sales (event_id);
        -- one row per run of the per-second cron job (the demo counts runs per tick)
        CREATE TABLE IF NOT EXISTS cron_runs (
          id       INTEGER PRIMARY KEY,
          job      TEXT NOT NULL,
          tick     INTEGER NOT NULL,
          instance TEXT NOT NULL,
          ran_at   TEXT NOT NULL
        );
        -- the sales curve: what the cron job records each second
        CREATE TABLE IF NOT EXISTS sales_snapshots (
          tick     INTEGER NOT NULL,
          event_id INTEGER NOT NULL,
          sold     INTEGER NOT NULL,
          instance TEXT NOT NULL
        );
        -- rebuilt by the report job
        CREATE TABLE IF NOT EXISTS sales_report (
          event_id    INTEGER NOT NULL,
          instance    TEXT NOT NULL,
          sales       INTEGER NOT NULL,
          tickets     INTEGER NOT NULL,
          PRIMARY KEY (event_id, instance)
        );
        CREATE TABLE IF NOT EXISTS report_runs (
          id         INTEGER PRIMARY KEY,
          instance   TEXT NOT NULL,
          fence      TEXT,
          rows       INTEGER NOT NULL,
          rebuilt_at TEXT NOT NULL
        );
      `);
    }).immediate();
  }

  onApplicationShutdown(): void {
    this.db.close();
  }
}

/** A fencing token as fixed-width decimal text (tokens are below 2^96, 29 digits). */
export function fenceText(token: bigint): string {
  return token.toString().padStart(30, '0');
}
