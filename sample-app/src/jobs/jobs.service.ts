import { Injectable } from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import type { AppConfig } from '../config.js';
import { DatabaseService, fenceText } from '../database/database.service.js';

export const SNAPSHOT_JOB = 'sales-snapshot';
/** The leader-only job (HousekeepingJob). */
export const HOUSEKEEPING_JOB = 'housekeeping';
/** The report is rebuilt when it is older than this (by whichever instance gets there first). */
export const REPORT_EVERY_MS = 5000;

export interface TickRuns {
  tick: number;
  runs: number;
  instances: string[];
}

/** The work of the scheduled jobs, on the shared database. */
@Injectable()
export class JobsService {
  readonly instance: string;

  constructor(
    private readonly database: DatabaseService,
    config: ConfigService<AppConfig, true>,
  ) {
    this.instance = config.get('INSTANCE', { infer: true });
  }

  /** The second a cron run belongs to (a run that fires a little early or late still counts for its tick). */
  static tickOf(time = Date.now()): number {
    return Math.floor((time + 250) / 1000);
  }

  /** Records every event's sold count for this tick (the sales curve), and the run itself. */
  recordSnapshot(tick: number): void {
    const now = new Date().toISOString();
    this.database.db
      .transaction(() => {
        this.database.db
          .prepare('INSERT INTO sales_snapshots (tick, event_id, sold, instance) SELECT ?, id, sold, ? FROM events')
          .run(tick, this.instance);
        this.database.db
          .prepare('INSERT INTO cron_runs (job, tick, instance, ran_at) VALUES (?, ?, ?, ?)')
          .run(SNAPSHOT_JOB, tick, this.instance, now);
      })
      .immediate();
  }

  /**
   * Rebuilds the sales report (sales and tickets per event and instance) unless it is fresher than
   * REPORT_EVERY_MS: a check-then-act that only one instance at a time may run. Returns whether it
   * rebuilt.
   */
  rebuildReportIfStale(fencingToken: bigint | undefined): boolean {
    const db = this.database.db;
    const last = db.prepare<[], { rebuilt_at: string }>('SELECT rebuilt_at FROM report_runs ORDER BY id DESC LIMIT 1').get();
    if (last && Date.now() - Date.parse(last.rebuilt_at) < REPORT_EVERY_MS) return false;
    db.transaction(() => {
      db.prepare('DELETE FROM sales_report').run();
      const { changes } = db
        .prepare(
          `INSERT INTO sales_report (event_id, instance, sales, tickets)
           SELECT event_id, instance, count(*), sum(quantity) FROM sales GROUP BY event_id, instance`,
        )
        .run();
      db.prepare('INSERT INTO report_runs (instance, fence, rows, rebuilt_at) VALUES (?, ?, ?, ?)').run(
        this.instance,
        fencingToken === undefined ? null : fenceText(fencingToken),
        changes,
        new Date().toISOString(),
      );
    }).immediate();
    return true;
  }

  /** Records one run of `job` for `tick`. */
  recordRun(job: string, tick: number): void {
    this.database.db
      .prepare('INSERT INTO cron_runs (job, tick, instance, ran_at) VALUES (?, ?, ?, ?)')
      .run(job, tick, this.instance, new Date().toISOString());
  }

  cronRuns(sinceTick = 0, job = SNAPSHOT_JOB): TickRuns[] {
    return this.database.db
      .prepare<[string, number], { tick: number; runs: number; instances: string }>(
        `SELECT tick, count(*) AS runs, group_concat(instance) AS instances FROM cron_runs
         WHERE job = ? AND tick >= ? GROUP BY tick ORDER BY tick`,
      )
      .all(job, sinceTick)
      .map((r) => ({ tick: r.tick, runs: r.runs, instances: r.instances.split(',') }));
  }

  report(): { rebuilds: { instance: string; rows: number; rebuiltAt: string }[]; rows: unknown[] } {
    const db = this.database.db;
    return {
      rebuilds: db
        .prepare<[], { instance: string; rows: number; rebuiltAt: string }>(
          'SELECT instance, rows, rebuilt_at AS rebuiltAt FROM report_runs ORDER BY id',
        )
        .all(),
      rows: db.prepare('SELECT event_id AS eventId, instance, sales, tickets FROM sales_report ORDER BY event_id, instance').all(),
    };
  }
}
