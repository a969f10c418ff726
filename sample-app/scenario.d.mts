// Types of scenario.mjs (for the e2e test, which is TypeScript).
import type { ChildProcess } from 'node:child_process';

export declare const ROOT: string;
export declare function build(options?: { library?: boolean; sampleApp?: boolean }): void;

export interface Instance {
  name: string;
  pid: number;
  port: number;
  url: string;
  logFile: string;
  child: ChildProcess;
  exited: Promise<number | string | null>;
}

export interface StartOptions {
  count?: number;
  /** Instead of `count`: the instances' names (INSTANCE), e.g. to restart one under its name. */
  names?: string[];
  zkConnect: string;
  databaseFile: string;
  logDir: string;
  locks?: boolean;
  lockWaitMs?: number;
  basePath?: string;
  env?: Record<string, string>;
  readyTimeoutMs?: number;
}
export declare function startInstances(options: StartOptions): Promise<Instance[]>;
export declare function stopInstances(instances: Pick<Instance, 'child' | 'exited'>[], options?: { graceMs?: number }): Promise<void>;
export declare function stopAllInstances(options?: { graceMs?: number }): Promise<void>;
export declare function http(method: string, url: string, body?: unknown, timeoutMs?: number): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: any }>;
export declare function getJson(url: string): Promise<any>;

export interface Counts {
  201: number;
  409: number;
  410: number;
  other: number;
}
export interface Progress {
  done: number;
  total: number;
  counts: Counts;
}

/** One contender of GET /locks (a ContenderInfo of LockService.inspect(), as JSON). */
export interface LockContender {
  node: string;
  path: string;
  mode: 'lock' | 'read' | 'write' | 'lease' | 'other';
  sequence?: number;
  holds: boolean;
  holder: { host?: string; pid?: number; app?: string; instance?: string; createdAt?: string };
  sessionId: string;
  createdAt: string;
  ageMs: number;
}

/** One lock of GET /locks (a LockInfo of LockService.inspect(), as JSON, plus its name). */
export interface LockView {
  name: string;
  path: string;
  kind: 'mutex' | 'read-write' | 'semaphore' | 'idle';
  holders: LockContender[];
  waiting: LockContender[];
  leases?: number;
  permits?: number;
}

export interface LockSnapshot {
  from: string;
  error?: string;
  basePath?: string;
  locks?: LockView[];
}

export interface ScenarioResult {
  label: string;
  locks: boolean;
  instances: { name: string; pid: number; port: number }[];
  buyers: number;
  concurrency: number;
  seats: number;
  sold: number;
  oversold: number;
  ok: number;
  conflict: number;
  soldOut: number;
  other: number;
  otherSamples: string[];
  p50: number;
  p99: number;
  saleMs: number;
  cron: { ticksInWindow: number; ticksObserved: number; maxRunsPerTick: number; ticks: { tick: number; runs: number; instances: string[] }[] };
  reportRebuilds: number;
  lockSnapshot?: LockSnapshot;
  logDir: string;
  totalMs: number;
}

export interface ScenarioOptions {
  zkConnect: string;
  workDir: string;
  locks?: boolean;
  instances?: number;
  buyers?: number;
  seats?: number;
  concurrency?: number;
  lockWaitMs?: number;
  basePath?: string;
  minTicks?: number;
  env?: Record<string, string>;
  signal?: AbortSignal;
  label?: string;
  onProgress?: (progress: Progress) => void;
  onInstances?: (instances: Instance[]) => void;
}
export declare function runScenario(options: ScenarioOptions): Promise<ScenarioResult>;
export declare function progressBar(progress: Progress, width?: number): string;
export declare function describeLockSnapshot(snapshot: LockSnapshot | undefined): string;
export declare function comparisonTable(runs: ScenarioResult[]): string;
export declare function verdict(runs: ScenarioResult[]): string;
