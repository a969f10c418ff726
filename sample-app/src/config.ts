import { hostname } from 'node:os';
import { resolve } from 'node:path';

/** The service's settings, read from the environment (validated once, by ConfigModule). */
export interface AppConfig {
  /** ZooKeeper connect string, `host:port[,host:port...]`. */
  ZK_CONNECT: string;
  /** Parent of the lock nodes. */
  LOCK_BASE_PATH: string;
  /** HTTP port (0: any free port; the ready line on stdout names the one taken). */
  PORT: number;
  /** This instance's name: written into its lock nodes and its database rows. */
  INSTANCE: string;
  /** How long a purchase waits for its event's lock before answering 409. */
  LOCK_WAIT_MS: number;
  /** `false` with LOCKS=off: the demo's comparison run, the same routes and jobs without locks. */
  LOCKS: boolean;
  /** The SQLite database file shared by every instance on this machine. */
  DATABASE_FILE: string;
  /** The simulated payment call takes a random time in [PAYMENT_MIN_MS, PAYMENT_MAX_MS]. */
  PAYMENT_MIN_MS: number;
  PAYMENT_MAX_MS: number;
  /** `prometheus`: serve the library's OpenTelemetry metrics at GET /metrics; `off` (default): no metrics code runs. */
  METRICS: MetricsMode;
  /** `console` or `file:<path>` (JSON lines): trace requests and their locks with OpenTelemetry; `off` (default). */
  TRACES: TracesMode;
}

export type MetricsMode = 'off' | 'prometheus';
export type TracesMode = 'off' | 'console' | `file:${string}`;

function integer(env: Record<string, unknown>, key: string, fallback: number, min: number, max: number): number {
  const raw = env[key];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${key} must be an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

/** LOCKS=off (or false/0/no) disables locking; anything else but on/true/1/yes/empty is an error. */
export function locksEnabled(env: Record<string, unknown>): boolean {
  const raw = String(env.LOCKS ?? 'on').trim().toLowerCase();
  if (['', 'on', 'true', '1', 'yes'].includes(raw)) return true;
  if (['off', 'false', '0', 'no'].includes(raw)) return false;
  throw new Error(`LOCKS must be "on" or "off", got ${JSON.stringify(env.LOCKS)}`);
}

/** METRICS=prometheus exposes GET /metrics; unset, empty or off leaves metrics out; anything else is an error. */
export function metricsMode(env: Record<string, unknown>): MetricsMode {
  const raw = String(env.METRICS ?? '').trim().toLowerCase();
  if (raw === '' || raw === 'off') return 'off';
  if (raw === 'prometheus') return 'prometheus';
  throw new Error(`METRICS must be "prometheus" or "off", got ${JSON.stringify(env.METRICS)}`);
}

/** TRACES=console or file:<path> turns tracing on; unset, empty or off leaves it off; anything else is an error. */
export function tracesMode(env: Record<string, unknown>): TracesMode {
  const raw = String(env.TRACES ?? '').trim();
  if (raw === '' || raw.toLowerCase() === 'off') return 'off';
  if (raw.toLowerCase() === 'console') return 'console';
  if (raw.startsWith('file:') && raw.length > 'file:'.length) return raw as `file:${string}`;
  throw new Error(`TRACES must be "console", "file:<path>" or "off", got ${JSON.stringify(env.TRACES)}`);
}

/**
 * How long a purchase waits for its lock. @WithLock's options are fixed when the controller class
 * is defined, before Nest (and ConfigService) exist, so the controller reads this from the
 * environment itself; `validateConfig` checks the same variable with the same rules at bootstrap.
 */
export function lockWaitMs(env: Record<string, unknown>): number {
  return integer(env, 'LOCK_WAIT_MS', 3000, 0, 600_000);
}

/** ConfigModule's `validate`: throws (failing the bootstrap) on a bad value. */
export function validateConfig(env: Record<string, unknown>): AppConfig {
  const connect = String(env.ZK_CONNECT ?? '').trim();
  if (!connect) throw new Error('ZK_CONNECT is required (e.g. 127.0.0.1:2181)');
  const paymentMin = integer(env, 'PAYMENT_MIN_MS', 20, 0, 60_000);
  const paymentMax = integer(env, 'PAYMENT_MAX_MS', 40, paymentMin, 60_000);
  return {
    ZK_CONNECT: connect,
    LOCK_BASE_PATH: String(env.LOCK_BASE_PATH || '/locks'),
    PORT: integer(env, 'PORT', 3000, 0, 65_535),
    INSTANCE: String(env.INSTANCE || `${hostname()}-${process.pid}`),
    LOCK_WAIT_MS: lockWaitMs(env),
    LOCKS: locksEnabled(env),
    DATABASE_FILE: resolve(String(env.DATABASE_FILE || 'sample-app/data/tickets.db')),
    PAYMENT_MIN_MS: paymentMin,
    PAYMENT_MAX_MS: paymentMax,
    METRICS: metricsMode(env),
    TRACES: tracesMode(env),
  };
}
