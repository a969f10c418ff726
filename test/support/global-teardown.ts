// Jest globalTeardown: stops the ZooKeeper that global-setup.ts started (and nothing else).
export default async function globalTeardown(): Promise<void> {
  const server = globalThis.__ZK_TEST_SERVER__;
  globalThis.__ZK_TEST_SERVER__ = undefined;
  await server?.stop();
}
