// Tests of the ZooKeeper test helper itself (scripts/zookeeper.sh via zk-server.ts). No lib/ import.
import { existsSync, readFileSync } from 'node:fs';
import { fourLetter, startEnsemble, waitFor, type ZkEnsembleHandle } from './zk-server.js';

/** True while `pid` is a live process (a zombie, which an orphaned server may stay as, is dead). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

describe('global-setup ZooKeeper', () => {
  it('answers imok on the port in ZK_CONNECT', async () => {
    const connect = process.env.ZK_CONNECT;
    expect(connect).toMatch(/^[^,]+:\d+(,|$)/);
    const port = Number(connect!.split(',')[0].split(':').pop());
    await expect(fourLetter(port, 'ruok')).resolves.toBe('imok');
  });
});

describe('ZooKeeper ensemble helper', () => {
  let zk: ZkEnsembleHandle | undefined;

  afterAll(async () => {
    await zk?.stop();
  });

  it('elects one leader, fails over when it is killed, and takes it back as follower', async () => {
    zk = await startEnsemble();
    const servers = zk.servers;
    expect(servers.map((s) => s.id)).toEqual([1, 2, 3]);
    expect(zk.connectString).toBe(servers.map((s) => `127.0.0.1:${s.port}`).join(','));
    for (const s of servers) {
      expect(alive(s.pid)).toBe(true);
      await expect(zk.fourLetter(s.id, 'ruok')).resolves.toBe('imok');
    }

    const modes = await Promise.all(servers.map((s) => zk!.mode(s.id)));
    expect(modes.filter((m) => m === 'leader')).toHaveLength(1);
    expect(modes.filter((m) => m === 'follower')).toHaveLength(2);
    const leader = servers[modes.indexOf('leader')];

    await zk.stopServer(leader.id, 'SIGKILL');
    expect(alive(leader.pid)).toBe(false);
    expect(zk.server(leader.id).pid).toBe(0);
    await expect(zk.mode(leader.id)).resolves.toBe('down');
    const newLeader = await zk.waitForLeader([leader.id]);
    expect(newLeader).not.toBe(leader.id);

    await zk.restartServer(leader.id);
    const restarted = zk.server(leader.id);
    expect(restarted.pid).not.toBe(leader.pid);
    expect(alive(restarted.pid)).toBe(true);
    await expect(zk.mode(leader.id)).resolves.toBe('follower');
    await expect(zk.leaders()).resolves.toEqual([newLeader]);

    // a paused follower stops answering; resumed, it serves again
    const follower = servers.find((s) => s.id !== newLeader)!.id;
    zk.pause(follower);
    await expect(zk.mode(follower, 500)).resolves.toBe('down');
    zk.resume(follower);
    await waitFor('the resumed follower', async () => ((await zk!.mode(follower)) === 'follower' ? true : undefined));

    const pids = zk.servers.map((s) => s.pid);
    const dir = zk.dir;
    await zk.stop();
    zk = undefined;
    expect(pids.filter(alive)).toEqual([]);
    expect(existsSync(dir)).toBe(false);
  }, 120_000);
});
