import { holderDataWriter, parseHolderData, REVOKE_MARKER } from '../../../lib/core/operations/holder-data.js';
import { holderSpanContext } from '../../../lib/core/tracing.js';

const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

describe('holder data', () => {
  it('without extra fields, is one buffer per millisecond (shared by the nodes made in it)', () => {
    const write = holderDataWriter({ app: 'a', instance: 'i' });
    let first = write();
    let second = write();
    // A millisecond may turn between the two calls: then the next pair shares one.
    if (first !== second) [first, second] = [write(), write()];
    expect(second).toBe(first);
    expect(parseHolderData(first)).toMatchObject({ app: 'a', instance: 'i', pid: process.pid, createdAt: expect.any(String) });
  });

  it("appends an acquire's extra fields after the holder's own, in that node's data only", () => {
    const write = holderDataWriter({ app: 'a' });
    const traced = write({ traceparent: TRACEPARENT });
    expect(parseHolderData(traced)).toEqual({ host: expect.any(String), pid: process.pid, app: 'a', createdAt: expect.any(String), traceparent: TRACEPARENT });
    expect(traced).not.toBe(write({ traceparent: TRACEPARENT }));
    expect(parseHolderData(write({}))).not.toHaveProperty('traceparent');
    expect(parseHolderData(write())).not.toHaveProperty('traceparent');
  });

  it("still reads what older versions and Curator write: the fields without a trace context, a bare IP, the revoke marker", () => {
    const old = Buffer.from('{"host":"h","pid":1,"createdAt":"2026-01-01T00:00:00.000Z"}');
    expect(parseHolderData(old)).toEqual({ host: 'h', pid: 1, createdAt: '2026-01-01T00:00:00.000Z' });
    expect(holderSpanContext(old)).toBeUndefined();
    expect(parseHolderData(Buffer.from('10.0.0.7'))).toEqual({ host: '10.0.0.7' });
    expect(holderSpanContext(Buffer.from('10.0.0.7'))).toBeUndefined();
    expect(holderSpanContext(Buffer.from(REVOKE_MARKER))).toBeUndefined();
    expect(holderSpanContext(Buffer.alloc(0))).toBeUndefined();
  });

  it('names a span context only for a valid W3C traceparent', () => {
    const data = (traceparent: unknown) => Buffer.from(JSON.stringify({ host: 'h', pid: 1, traceparent }));
    expect(holderSpanContext(data(TRACEPARENT))).toEqual({ traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', traceFlags: 1, isRemote: true });
    for (const bad of [42, '', 'junk', TRACEPARENT.toUpperCase(), `01${TRACEPARENT.slice(2)}`, `00-${'0'.repeat(32)}-b7ad6b7169203331-01`, `00-0af7651916cd43dd8448eb211c80319c-${'0'.repeat(16)}-01`]) {
      expect(holderSpanContext(data(bad))).toBeUndefined();
    }
  });
});
