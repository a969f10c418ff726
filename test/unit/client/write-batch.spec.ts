// The WriteBatcher's order and grouping rules, as pure logic: what goes to the addon, in which
// order and in which multi requests. The batches' effect on a real ZooKeeper (atomicity, failed
// multis, lost replies, locks) is tested in test/integration/client/write-batch.spec.ts.
import { MultiOpType, WriteBatcher, type MultiOp, type QueuedRequest } from '../../../lib/core/client/write-batch.js';
import { ZkCode } from '../../../lib/core/client/zk-error.js';

type Answer = (rc: number, results?: { rc: number; path?: string }[]) => void;

/** A batcher over a recording addon: `sent` lists what went out ("multi[a,b]", "read p", "write p"). */
function harness() {
  const sent: string[] = [];
  const pending: Answer[] = [];
  const batcher = new WriteBatcher(
    (ops, cb) => {
      sent.push(`multi[${ops.map((o) => o.path).join(',')}]`);
      pending.push((rc, results) => cb(rc, '', results ?? ops.map(() => ({ rc }))));
      return ZkCode.OK;
    },
    () => undefined,
  );
  const outcomes = new Map<string, number>();
  const request = (label: string, fields: Partial<QueuedRequest>): QueuedRequest => ({
    send: (done) => {
      sent.push(label);
      pending.push((rc) => done(rc));
      return ZkCode.OK;
    },
    done: (rc) => outcomes.set(label, rc),
    ...fields,
  });
  const create = (path: string, sequential = true): QueuedRequest =>
    request(`write ${path}`, { write: { type: MultiOpType.CREATE, path, data: Buffer.alloc(0), flags: sequential ? 3 : 1 } as MultiOp });
  const del = (path: string): QueuedRequest => request(`write ${path}`, { write: { type: MultiOpType.DELETE, path, version: -1 } });
  const read = (path: string): QueuedRequest => request(`read ${path}`, { reads: path });
  const other = (label: string): QueuedRequest => request(label, {});
  /** Lets the batcher's setImmediate flush run. */
  const turn = () => new Promise((resolve) => setImmediate(resolve));
  /** Answers the oldest request (or multi) in flight. */
  const answer = (rc = 0, results?: { rc: number; path?: string }[]) => pending.shift()!(rc, results);
  return { batcher, sent, outcomes, create, del, read, other, turn, answer };
}

describe('WriteBatcher', () => {
  it('a read with nothing waiting goes at once; writes wait for the end of the turn and go as one multi', async () => {
    const h = harness();
    h.batcher.submit(h.read('/r'));
    expect(h.sent).toEqual(['read /r']);
    h.batcher.submit(h.create('/a/x-'));
    h.batcher.submit(h.del('/b/y'));
    expect(h.sent).toEqual(['read /r']);
    await h.turn();
    expect(h.sent).toEqual(['read /r', 'multi[/a/x-,/b/y]']);
  });

  it('a single write goes as itself', async () => {
    const h = harness();
    h.batcher.submit(h.del('/a/x'));
    await h.turn();
    expect(h.sent).toEqual(['write /a/x']);
  });

  it('group commit: writes asked for while a batch is unanswered wait for its answer, then go together', async () => {
    const h = harness();
    h.batcher.submit(h.del('/a/1'));
    await h.turn();
    h.batcher.submit(h.create('/b/x-'));
    h.batcher.submit(h.create('/c/x-'));
    await h.turn();
    expect(h.sent).toEqual(['write /a/1']);
    h.answer();
    await h.turn();
    expect(h.sent).toEqual(['write /a/1', 'multi[/b/x-,/c/x-]']);
  });

  it('a read of another path moves after the writes; a read a later write touches (the node or its parent) does not', async () => {
    const h = harness();
    h.batcher.submit(h.create('/p/x-'));
    h.batcher.submit(h.read('/p')); // its own create's listing: after it, as asked
    h.batcher.submit(h.create('/q/x-')); // cannot change /p's children: /p's read moves after it
    h.batcher.submit(h.read('/r'));
    h.batcher.submit(h.del('/r/n')); // changes /r's children: /r's read must go before it (then it goes alone)
    h.batcher.submit(h.read('/s/n'));
    h.batcher.submit(h.del('/s/n')); // the node read: the read goes before it
    await h.turn();
    expect(h.sent).toEqual(['multi[/p/x-,/q/x-]', 'read /p', 'read /r', 'write /r/n', 'read /s/n', 'write /s/n']);
  });

  it('a request that is neither a read nor a batchable write keeps its place', async () => {
    const h = harness();
    h.batcher.submit(h.create('/a/x-'));
    h.batcher.submit(h.other('setData /z'));
    h.batcher.submit(h.create('/b/x-'));
    await h.turn();
    expect(h.sent).toEqual(['write /a/x-', 'setData /z', 'write /b/x-']);
  });

  it('one node written twice goes in two batches; sequential creates of one path share one', async () => {
    const h = harness();
    h.batcher.submit(h.create('/a/x-'));
    h.batcher.submit(h.create('/a/x-'));
    h.batcher.submit(h.del('/a/n'));
    h.batcher.submit(h.del('/a/n'));
    await h.turn();
    expect(h.sent).toEqual(['multi[/a/x-,/a/x-,/a/n]', 'write /a/n']);
  });

  it('at most 64 ops and about 256 KiB per multi', async () => {
    const h = harness();
    for (let i = 0; i < 70; i++) h.batcher.submit(h.del(`/k/${i}`));
    const big = `/${'p'.repeat(100 * 1024)}`;
    for (let i = 0; i < 3; i++) h.batcher.submit(h.create(`${big}/x-`));
    await h.turn();
    // 64; the other 6 with two 100 KiB creates (a third would pass 256 KiB); the third alone.
    expect(h.sent.map((s) => (s.startsWith('multi[') ? s.slice(6, -1).split(',').length : 1))).toEqual([64, 8, 1]);
  });

  it('a refused multi: the failing op gets its code, the others NOT_APPLIED (ZooKeeper says OK for those before it); a lost one fails all with the connection error', async () => {
    const h = harness();
    for (const path of ['/a/1', '/a/2', '/a/3']) h.batcher.submit(h.del(path));
    await h.turn();
    h.answer(ZkCode.NONODE, [{ rc: 0 }, { rc: ZkCode.NONODE }, { rc: -2 }]);
    expect([...h.outcomes.values()]).toEqual([ZkCode.NOT_APPLIED, ZkCode.NONODE, ZkCode.NOT_APPLIED]);
    h.outcomes.clear();
    for (const path of ['/b/1', '/b/2']) h.batcher.submit(h.del(path));
    await h.turn();
    h.answer(ZkCode.CONNECTIONLOSS);
    expect([...h.outcomes.values()]).toEqual([ZkCode.CONNECTIONLOSS, ZkCode.CONNECTIONLOSS]);
  });

  it('an OK multi whose results do not answer it (one missing, a create without its path) fails every write as a connection error, never OK', async () => {
    for (const results of [[{ rc: 0, path: '/a/x-0000000001' }], [{ rc: 0, path: '/a/x-0000000001' }, { rc: 0 }]]) {
      const h = harness();
      h.batcher.submit(h.create('/a/x-'));
      h.batcher.submit(h.create('/b/x-'));
      await h.turn();
      h.answer(0, results);
      expect([...h.outcomes.values()]).toEqual([ZkCode.RUNTIMEINCONSISTENCY, ZkCode.RUNTIMEINCONSISTENCY]);
    }
  });

  it('a send that throws fails its request and leaves the batcher working', async () => {
    const h = harness();
    const throwing: QueuedRequest = { ...h.del('/a/1'), send: () => { throw new TypeError('bad argument'); } };
    h.batcher.submit(throwing);
    await h.turn();
    expect(h.outcomes.get('write /a/1')).toBe(-8); // BADARGUMENTS
    h.batcher.submit(h.del('/a/2'));
    await h.turn();
    expect(h.sent).toEqual(['write /a/2']);
  });

  it('closing fails what waits, and an addon without a_multi sends everything alone, as it comes', async () => {
    const h = harness();
    h.batcher.submit(h.del('/a/1'));
    h.batcher.failQueued(ZkCode.INVALIDSTATE);
    await h.turn();
    expect(h.sent).toEqual([]);
    expect(h.outcomes.get('write /a/1')).toBe(ZkCode.INVALIDSTATE);

    const sent: string[] = [];
    const plain = new WriteBatcher(undefined, () => undefined);
    for (const path of ['/a/1', '/a/2']) {
      plain.submit({ send: () => (sent.push(path), ZkCode.OK), write: { type: MultiOpType.DELETE, path, version: -1 }, done: () => undefined });
    }
    expect(sent).toEqual(['/a/1', '/a/2']);
  });
});
