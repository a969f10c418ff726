// A side-by-side figure, not a test of speed (no timing assertion): serial create+delete pairs per
// second through the C addon (NativeZkSession) and the TypeScript wire client (WireZkSession), in
// one run against the same server. Printed with console.log.
import { randomUUID } from 'node:crypto';
import { CreateMode, NativeZkSession, type SessionEvents, type ZkSession } from '../../lib/core/zk-session.js';
import { WireZkSession } from '../../lib/core/zookeeper/session.js';
import { eventually, zkConnectString } from '../support/helpers.js';

const EMPTY = Buffer.alloc(0);
const SERIAL_PAIRS = 1000;
const PARALLEL_PAIRS = 5000;
const quiet: SessionEvents = { onConnected: () => undefined, onConnecting: () => undefined, onClosed: () => undefined };

async function measure(session: ZkSession, base: string): Promise<{ serial: number; parallel: number }> {
  await session.create(base, EMPTY, CreateMode.PERSISTENT);
  for (let i = 0; i < 100; i++) await session.delete(await session.create(`${base}/warm`, EMPTY, CreateMode.EPHEMERAL));
  let started = performance.now();
  for (let i = 0; i < SERIAL_PAIRS; i++) await session.delete(await session.create(`${base}/n`, EMPTY, CreateMode.EPHEMERAL));
  const serial = SERIAL_PAIRS / ((performance.now() - started) / 1000);
  started = performance.now();
  await Promise.all(
    Array.from({ length: PARALLEL_PAIRS }, async (_, i) => session.delete(await session.create(`${base}/p${i}`, EMPTY, CreateMode.EPHEMERAL))),
  );
  const parallel = PARALLEL_PAIRS / ((performance.now() - started) / 1000);
  await session.delete(base);
  return { serial: Math.round(serial), parallel: Math.round(parallel) };
}

it('prints create+delete pairs per second: C addon vs. wire client', async () => {
  const native = new NativeZkSession({ connectString: zkConnectString(), sessionTimeoutMs: 10_000 }, quiet);
  const wire = new WireZkSession({ connectString: zkConnectString(), sessionTimeoutMs: 10_000 }, quiet);
  try {
    await eventually(() => native.isConnectedNatively && wire.isConnectedNatively, 10_000, 10);
    const results: Record<string, { serial: number; parallel: number }> = {};
    // Twice each, alternating, so that neither only runs on a cold server.
    for (const round of [1, 2]) {
      results[`addon #${round}`] = await measure(native, `/throughput-${randomUUID().slice(0, 8)}`);
      results[`wire #${round}`] = await measure(wire, `/throughput-${randomUUID().slice(0, 8)}`);
    }
    console.log(
      `create+delete pairs/s (serial ${SERIAL_PAIRS}; ${PARALLEL_PAIRS} at once)\n` +
        Object.entries(results)
          .map(([name, r]) => `  ${name.padEnd(9)} serial ${String(r.serial).padStart(6)}   parallel ${String(r.parallel).padStart(6)}`)
          .join('\n'),
    );
    for (const r of Object.values(results)) expect(r.serial).toBeGreaterThan(0);
  } finally {
    native.close();
    wire.close();
  }
});
