import { Module, UseFilters, type INestApplication, type Provider, type Type } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { IoAdapter } from '@nestjs/platform-socket.io';
import { WsAdapter } from '@nestjs/platform-ws';
import { Test } from '@nestjs/testing';
import { MessageBody, SubscribeMessage, WebSocketGateway, type WsResponse } from '@nestjs/websockets';
import { io } from 'socket.io-client';
import WebSocket from 'ws';
import type { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { WithLock } from '../../lib/nest/with-lock.decorator.js';
import { ZkLockExceptionFilter } from '../../lib/nest/zk-lock-exception.filter.js';
import { ZkLockModule } from '../../lib/nest/zk-lock.module.js';
import { closeAll, connect, nextEvent, zkConnectString } from '../support/helpers.js';
import { TcpProxy } from '../support/tcp-proxy.js';

// A real WebSocket gateway whose handlers are @WithLock, with ZkLockModule and nothing else
// registered: a caller that meets a busy lock gets an `exception` event with statusCode 409, one
// whose key ZooKeeper cannot take 400 (without the key echoed), one that meets an unreachable
// ZooKeeper 503, each with its `reason`; the locked sections of one key never overlap. On both of
// Nest's WebSocket platforms: socket.io (whose `emit` reaches the client) and the native `ws` one
// (where an answer must be `send` as an `{ event, data }` frame, as Nest's own BaseWsExceptionFilter
// does).
//
// Nest applies no global filter to gateways (@nestjs/websockets' ExceptionFiltersContext
// .getGlobalMetadata() returns []), so the module answers there with a global interceptor; the
// last cases pin that, and that a gateway binding ZkLockExceptionFilter itself (as the docs once
// said to) still gets one answer.

interface Buy {
  seat: string;
  buyer: string;
}
interface Sold {
  seat: string;
  buyer: string;
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** What the handlers saw; reset by each test. */
const state = {
  /** Buyers whose handler body ran (the lock was acquired). */
  runs: [] as string[],
  /** Resolved when that buyer's body starts. */
  entered: new Map<string, { promise: Promise<void>; resolve: () => void }>(),
  /** The body waits on this (if set) before it answers: the test decides when the holder releases. */
  gates: new Map<string, { promise: Promise<void>; resolve: () => void }>(),
  inside: 0,
  maxInside: 0,
};

@WebSocketGateway()
class SalesGateway {
  // @SubscribeMessage above @WithLock (it sets metadata on the wrapper); try once.
  @SubscribeMessage('buy')
  @WithLock((buy: Buy) => `seat:${buy.seat}`)
  async buy(@MessageBody() buy: Buy): Promise<WsResponse<Sold>> {
    state.runs.push(buy.buyer);
    state.entered.get(buy.buyer)?.resolve();
    await state.gates.get(buy.buyer)?.promise;
    return { event: 'bought', data: { seat: buy.seat, buyer: buy.buyer } };
  }

  // @WithLock above @SubscribeMessage (the metadata is copied to the wrapper); waits its turn.
  @WithLock((buy: Buy) => `seat:${buy.seat}`, { waitMs: 60_000 })
  @SubscribeMessage('buy-queued')
  async buyQueued(@MessageBody() buy: Buy): Promise<WsResponse<Sold>> {
    state.runs.push(buy.buyer);
    state.inside++;
    state.maxInside = Math.max(state.maxInside, state.inside);
    try {
      // Stay inside across a few turns of the event loop, so unlocked sections would overlap.
      for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 2));
    } finally {
      state.inside--;
    }
    return { event: 'bought', data: { seat: buy.seat, buyer: buy.buyer } };
  }
}

/** The same try-once handler on a gateway that binds the filter itself. */
@WebSocketGateway()
@UseFilters(ZkLockExceptionFilter)
class OwnFilterGateway {
  @SubscribeMessage('buy')
  @WithLock((buy: Buy) => `seat:${buy.seat}`)
  async buy(@MessageBody() buy: Buy): Promise<WsResponse<Sold>> {
    state.runs.push(buy.buyer);
    state.entered.get(buy.buyer)?.resolve();
    await state.gates.get(buy.buyer)?.promise;
    return { event: 'bought', data: { seat: buy.seat, buyer: buy.buyer } };
  }
}

/** A message the client received: socket.io's event name and argument, or ws's `{ event, data }` frame. */
interface Received {
  event: string;
  data: any;
}

/** One WebSocket client of either platform; it records everything it receives. */
interface TestClient {
  readonly received: Received[];
  send(event: string, data: unknown): void;
  /** Resolves with the first received message (already received or to come) that matches; rejects after `timeoutMs`. */
  waitFor(match: (message: Received) => boolean, timeoutMs?: number): Promise<Received>;
  readonly connected: boolean;
  close(): void;
}

abstract class RecordingClient {
  readonly received: Received[] = [];
  private readonly waiters = new Set<() => void>();

  protected record(message: Received): void {
    this.received.push(message);
    for (const check of [...this.waiters]) check();
  }

  waitFor(match: (message: Received) => boolean, timeoutMs = 20_000): Promise<Received> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const found = this.received.find(match);
        if (!found) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve(found);
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`no matching message within ${timeoutMs} ms; received ${JSON.stringify(this.received)}`));
      }, timeoutMs);
      this.waiters.add(check);
      check();
    });
  }
}

class SocketIoClient extends RecordingClient implements TestClient {
  private constructor(private readonly socket: ReturnType<typeof io>) {
    super();
    socket.onAny((event: string, data: unknown) => this.record({ event, data }));
  }

  static async open(url: string): Promise<SocketIoClient> {
    const socket = io(url, { transports: ['websocket'], reconnection: false, forceNew: true });
    const client = new SocketIoClient(socket);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('socket.io client did not connect')), 20_000);
      socket.once('connect', () => {
        clearTimeout(timer);
        resolve();
      });
      socket.once('connect_error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });
    return client;
  }

  send(event: string, data: unknown): void {
    this.socket.emit(event, data);
  }

  get connected(): boolean {
    return this.socket.connected;
  }

  close(): void {
    this.socket.disconnect();
  }
}

class NativeWsClient extends RecordingClient implements TestClient {
  private constructor(private readonly socket: WebSocket) {
    super();
    socket.on('message', (raw) => this.record(JSON.parse(raw.toString()) as Received));
  }

  static async open(url: string): Promise<NativeWsClient> {
    const socket = new WebSocket(url.replace(/^http/, 'ws'));
    const client = new NativeWsClient(socket);
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('ws client did not connect')), 20_000);
      socket.once('open', () => {
        clearTimeout(timer);
        resolve();
      });
      socket.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });
    return client;
  }

  send(event: string, data: unknown): void {
    this.socket.send(JSON.stringify({ event, data }));
  }

  get connected(): boolean {
    return this.socket.readyState === WebSocket.OPEN;
  }

  close(): void {
    this.socket.terminate();
  }
}

const busy = { status: 'error', statusCode: 409, error: 'Conflict', message: 'The resource is busy; retry later', reason: 'lock-timeout', retryAfterSeconds: 1 };
const unavailable = {
  status: 'error',
  statusCode: 503,
  error: 'Service Unavailable',
  message: 'The lock service is unavailable; retry later',
  reason: 'zookeeper-unavailable',
  retryAfterSeconds: 5,
};
const isException = (m: Received) => m.event === 'exception';
const boughtBy = (buyer: string) => (m: Received) => m.event === 'bought' && m.data?.buyer === buyer;

const platforms = [
  { name: 'socket.io', adapter: (app: INestApplication) => new IoAdapter(app), open: SocketIoClient.open },
  { name: 'ws', adapter: (app: INestApplication) => new WsAdapter(app), open: NativeWsClient.open },
] as const;

afterAll(closeAll);

describe.each(platforms)('@WithLock on a WebSocket gateway ($name), with ZkLockModule alone', (platform) => {
  const basePath = `/e2e-ws-${process.pid}-${platform.name.replace('.', '')}`;
  const clients: TestClient[] = [];
  const open = async (url: string) => {
    const client = await platform.open(url);
    clients.push(client);
    return client;
  };

  async function start(
    lockModule: ReturnType<typeof ZkLockModule.forRoot>,
    gateway: Type<unknown> = SalesGateway,
    providers: Provider[] = [],
  ): Promise<{ app: INestApplication; url: string }> {
    @Module({
      imports: [lockModule],
      providers: [gateway, ...providers],
    })
    class AppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    const app = moduleRef.createNestApplication({ logger: false });
    app.useWebSocketAdapter(platform.adapter(app));
    await app.listen(0, '127.0.0.1');
    return { app, url: (await app.getUrl()).replace('[::1]', '127.0.0.1') };
  }

  beforeEach(() => {
    state.runs = [];
    state.entered.clear();
    state.gates.clear();
    state.inside = 0;
    state.maxInside = 0;
  });
  afterEach(() => {
    for (const gate of state.gates.values()) gate.resolve(); // a failed test leaves no handler waiting
    for (const client of clients.splice(0)) client.close();
  });

  describe('ZooKeeper reachable', () => {
    let app: INestApplication;
    let url: string;
    beforeAll(async () => {
      ({ app, url } = await start(ZkLockModule.forRoot({ connectString: zkConnectString(), basePath })));
    }, 30_000);
    afterAll(async () => {
      await app?.close();
    });

    it('a second client meeting the held lock gets an exception event with 409 and its handler does not run; the holder answers once released', async () => {
      const [alice, bob] = [await open(url), await open(url)];
      const releaseAlice = deferred();
      state.gates.set('alice', releaseAlice);
      const aliceIn = deferred();
      state.entered.set('alice', aliceIn);

      alice.send('buy', { seat: 'A1', buyer: 'alice' });
      await aliceIn.promise; // alice holds seat:A1 and waits on the gate
      bob.send('buy', { seat: 'A1', buyer: 'bob' });

      const exception = await bob.waitFor(isException, 10_000);
      expect(exception.data).toEqual(busy);
      expect(state.runs).toEqual(['alice']); // bob's body never ran
      expect(bob.received).toEqual([exception]); // and bob got nothing else
      expect(alice.received).toEqual([]); // alice is still inside

      releaseAlice.resolve();
      const sold = await alice.waitFor(boughtBy('alice'));
      expect(sold.data).toEqual({ seat: 'A1', buyer: 'alice' });
      expect(alice.received.filter(isException)).toEqual([]);

      // Free again: bob now gets the seat on the same connection.
      bob.send('buy', { seat: 'A1', buyer: 'bob' });
      await bob.waitFor(boughtBy('bob'));
      expect(state.runs).toEqual(['alice', 'bob']);
    }, 60_000);

    it('a 5 000-character key gets an exception event with 400 that says why without echoing the key', async () => {
      const frank = await open(url);
      frank.send('buy', { seat: 'k'.repeat(5_000), buyer: 'frank' });
      const exception = await frank.waitFor(isException, 10_000);
      expect(exception.data).toMatchObject({ status: 'error', statusCode: 400, reason: 'invalid-lock-key', message: expect.stringMatching(/characters long \(at most 1024\)$/) });
      expect(JSON.stringify(exception.data)).not.toContain('kkkk');
      expect(state.runs).toEqual([]);
    }, 60_000);

    it('concurrent messages for one key that wait their turn run their critical sections one at a time', async () => {
      const buyers = await Promise.all([open(url), open(url), open(url)]);
      const names: string[] = [];
      buyers.forEach((client, c) => {
        for (let i = 0; i < 4; i++) {
          const buyer = `c${c}-${i}`;
          names.push(buyer);
          client.send('buy-queued', { seat: 'B1', buyer });
        }
      });
      await Promise.all(
        buyers.flatMap((client, c) => names.filter((n) => n.startsWith(`c${c}-`)).map((buyer) => client.waitFor(boughtBy(buyer), 60_000))),
      );
      expect([...state.runs].sort()).toEqual([...names].sort()); // each ran exactly once
      expect(state.maxInside).toBe(1);
      for (const client of buyers) expect(client.received.filter(isException)).toEqual([]);
    }, 90_000);
  });

  describe('ZooKeeper unreachable for the app', () => {
    let app: INestApplication;
    let url: string;
    let proxy: TcpProxy;
    let connection: ZkConnection;
    beforeAll(async () => {
      proxy = await TcpProxy.start(zkConnectString());
      connection = await connect({ connectString: proxy.connectString, sessionTimeoutMs: 20_000 });
      ({ app, url } = await start(ZkLockModule.forRoot({ connection, basePath })));
    }, 30_000);
    afterEach(() => proxy.restore()); // a failed case leaves the link cut otherwise
    afterAll(async () => {
      await app?.close();
      await proxy?.close();
    });

    it('answers a buy with an exception event with 503, keeps the connection, and serves it once ZooKeeper is back', async () => {
      const carol = await open(url);
      carol.send('buy', { seat: 'C1', buyer: 'carol-before' });
      await carol.waitFor(boughtBy('carol-before')); // the app works through the proxy

      const suspended = nextEvent(connection, 'suspended');
      proxy.cut();
      await suspended;
      carol.send('buy', { seat: 'C1', buyer: 'carol-outage' });
      const exception = await carol.waitFor(isException, 10_000);
      expect(exception.data).toEqual(unavailable);
      expect(state.runs).toEqual(['carol-before']);
      expect(carol.connected).toBe(true);

      // The process is alive and the gateway still answers: back to normal after the outage.
      const reconnected = nextEvent(connection, 'reconnected');
      proxy.restore();
      await reconnected;
      carol.send('buy', { seat: 'C1', buyer: 'carol-after' });
      await carol.waitFor(boughtBy('carol-after'));
      expect(state.runs).toEqual(['carol-before', 'carol-after']);
      expect(carol.received.filter(isException)).toHaveLength(1);
    }, 60_000);
  });

  describe('answers once', () => {
    let app: INestApplication | undefined;
    afterEach(async () => {
      await app?.close();
      app = undefined;
    });

    async function busyAnswer(url: string, seat: string): Promise<{ exception: Received; erin: TestClient }> {
      const [dave, erin] = [await open(url), await open(url)];
      const releaseDave = deferred();
      state.gates.set(`dave-${seat}`, releaseDave);
      const daveIn = deferred();
      state.entered.set(`dave-${seat}`, daveIn);
      dave.send('buy', { seat, buyer: `dave-${seat}` });
      await daveIn.promise;
      erin.send('buy', { seat, buyer: `erin-${seat}` });
      const exception = await erin.waitFor(isException, 10_000);
      releaseDave.resolve();
      await dave.waitFor(boughtBy(`dave-${seat}`));
      return { exception, erin };
    }

    it('on a gateway that binds ZkLockExceptionFilter itself: one exception event', async () => {
      let url: string;
      ({ app, url } = await start(ZkLockModule.forRoot({ connectString: zkConnectString(), basePath }), OwnFilterGateway));
      const { exception, erin } = await busyAnswer(url, 'D1');
      expect(exception.data).toEqual(busy);
      // One connection keeps its order: a second answer to the first message would come before this one's.
      erin.send('buy', { seat: 'D1-free', buyer: 'erin-free' });
      const sold = await erin.waitFor(boughtBy('erin-free'));
      expect(erin.received).toEqual([exception, sold]);
    }, 60_000);

    // Pins Nest's behaviour, which is why the module answers gateways with an interceptor: if this
    // starts failing (Nest applies global filters to gateways), the interceptor's WebSocket part can go.
    it("with answerErrors: false, a ZkLockExceptionFilter registered as APP_FILTER does not reach the gateway: Nest's generic exception", async () => {
      let url: string;
      ({ app, url } = await start(ZkLockModule.forRoot({ connectString: zkConnectString(), basePath, answerErrors: false }), SalesGateway, [
        { provide: APP_FILTER, useClass: ZkLockExceptionFilter },
      ]));
      const { exception } = await busyAnswer(url, 'D2');
      expect(exception.data).toEqual({ status: 'error', message: 'Internal server error', cause: { pattern: 'buy', data: { seat: 'D2', buyer: 'erin-D2' } } });
    }, 60_000);
  });
});
