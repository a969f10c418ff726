// The simulated network between the client and the servers: one Link per TCP connection, each
// direction in order (a TCP stream), with the path's latency at the time of sending. A silent
// path holds what is sent until it heals (TCP retransmits: it arrives late, in order, unless a
// side closed meanwhile); a reset closes both ends and loses what was in flight.
import { EventEmitter } from 'node:events';

/** The state of the path from one client to one server. */
export class Path {
  latencyMs = 0.3;
  /** Nothing passes either way until then (held, not lost). */
  silentUntil = 0;
}

/**
 * One TCP connection: `socket` is the client's end (what WireZkSession uses through its Dial seam);
 * the server's end is the model's `onData` / `onClose`.
 */
export class Link {
  /** @type {'connecting' | 'open' | 'closed'} */
  state = 'connecting';
  /** @private */
  toServerAt = 0;
  /** @private */
  toClientAt = 0;
  /** Called with each frame the client wrote, at its arrival. @type {(frame: Buffer) => void} */
  onData = () => undefined;
  /** Called when the client's close arrives (or the link is reset). */
  onClose = () => undefined;
  /** Called with each frame the client writes, when it writes it (the simulation's triggers). @type {(frame: Buffer, index: number) => void} */
  onClientWrite = () => undefined;
  /** @private */
  written = 0;

  /**
   * @param {import('./virtual-clock.mjs').VirtualClock} clock
   * @param {Path} path
   * @param {boolean} accepting whether a server listens at the other end
   * @param {number} client the client (process) at this end
   */
  constructor(clock, path, accepting, client) {
    this.clock = clock;
    this.path = path;
    this.client = client;
    this.socket = new SimSocket(this);
    const arrival = this.arrival('toClient') + this.path.latencyMs; // SYN, SYN-ACK
    clock.at(
      arrival,
      () => {
        if (this.state !== 'connecting') return;
        if (!accepting) return this.closeClientSide(new Error('connect ECONNREFUSED'));
        this.state = 'open';
        this.socket.emit('connect');
      },
      client,
    );
  }

  /**
   * When something sent now in `direction` arrives: after the path's latency and silence, never
   * before what was sent earlier the same way.
   * @private
   * @param {'toServer' | 'toClient'} direction
   */
  arrival(direction) {
    const at = Math.max(this.clock.now + this.path.latencyMs, this.path.silentUntil + this.path.latencyMs, this[`${direction}At`]);
    this[`${direction}At`] = at;
    return at;
  }

  /** The client wrote a frame. @param {Buffer} frame */
  clientWrite(frame) {
    if (this.state !== 'open') return;
    this.onClientWrite(frame, this.written++);
    this.clock.at(this.arrival('toServer'), () => this.state === 'open' && this.onData(frame));
  }

  /** The client closed its end: the server hears of it after what was sent before. */
  clientDestroy() {
    if (this.state === 'closed') return;
    const wasOpen = this.state === 'open';
    this.state = 'closed';
    if (wasOpen) this.clock.at(this.arrival('toServer'), () => this.onClose());
    this.clock.at(this.clock.now, () => this.socket.emit('close'), this.client);
  }

  /** The server sends a frame. @param {Buffer} frame */
  serverSend(frame) {
    if (this.state !== 'open') return;
    this.clock.at(this.arrival('toClient'), () => !this.socket.destroyed && this.socket.emit('data', frame), this.client);
  }

  /** The server closes the connection: the client hears of it after what was sent before. */
  serverClose() {
    if (this.state !== 'open') return;
    this.state = 'closed';
    this.clock.at(this.arrival('toClient'), () => this.closeClientSide(), this.client);
  }

  /** A reset (a server process killed, a RST): both ends close now, what was in flight is lost. */
  reset() {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.toClientAt = Infinity; // nothing in flight arrives any more
    this.clock.at(this.clock.now + this.path.latencyMs, () => this.closeClientSide(new Error('read ECONNRESET')), this.client);
    this.onClose();
  }

  /** @private @param {Error} [error] */
  closeClientSide(error) {
    this.state = 'closed';
    if (this.socket.destroyed) return;
    this.socket.destroyed = true;
    if (error) this.socket.emit('error', error);
    this.socket.emit('close');
  }
}

/** The client's end of a Link, as WireZkSession's LinkSocket. */
class SimSocket extends EventEmitter {
  destroyed = false;
  writableCorked = 0;
  /** @param {Link} link */
  constructor(link) {
    super();
    this.link = link;
  }
  /** @param {Buffer} data */
  write(data) {
    if (!this.destroyed) this.link.clientWrite(data);
    return true;
  }
  destroy() {
    if (this.destroyed) return this;
    this.destroyed = true;
    this.link.clientDestroy();
    return this;
  }
  cork() {}
  uncork() {}
  setNoDelay() {
    return this;
  }
}
