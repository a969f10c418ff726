import { InvalidLockNameError } from '../../lib/core/errors.js';
import {
  ancestorsOf,
  newProtectedPrefix,
  resolveLockPath,
  sequenceOf,
  sortChildren,
  sortKey,
  validateZkPath,
} from '../../lib/core/paths.js';

describe('resolveLockPath', () => {
  it('puts relative names under the base path and keeps absolute ones', () => {
    expect(resolveLockPath('/locks', 'orders')).toBe('/locks/orders');
    expect(resolveLockPath('/locks', 'event:42')).toBe('/locks/event:42');
    expect(resolveLockPath('/', 'x')).toBe('/x');
    expect(resolveLockPath('/locks', '/curator/shared')).toBe('/curator/shared');
  });

  it.each([
    ['', 'is empty'],
    ['   ', 'is empty'],
    ['a/', 'must not end with "/"'],
    ['a//b', 'empty segment'],
    ['./a', '"." segment'],
    ['a/../b', '".." segment'],
    ['a\u0000b', 'U+0000'],
    ['a\u0007b', 'U+0007'],
    ['a\u0085b', 'U+0085'],
    ['a\ud800b', 'U+D800'],
    ['a\ue000b', 'U+E000'],
    ['a\ufff5b', 'U+FFF5'],
    ['/zookeeper/quota', 'reserves'],
    ['/', 'root'],
    ['x'.repeat(2000), 'at most 1024'],
  ])('rejects %j with a typed error that quotes the name', (name, problem) => {
    const error = (() => {
      try {
        resolveLockPath('/locks', name);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(InvalidLockNameError);
    expect((error as InvalidLockNameError).lockName).toBe(name);
    expect((error as Error).message).toContain(JSON.stringify(name));
    expect((error as Error).message).toContain(problem);
  });

  it('rejects non-strings from untyped callers', () => {
    expect(() => resolveLockPath('/locks', 42 as unknown as string)).toThrow(InvalidLockNameError);
    expect(() => resolveLockPath('/locks', undefined as unknown as string)).toThrow(/expected a string/);
  });

  it('accepts other BMP unicode; emoji (surrogate pairs) are in the range ZooKeeper forbids', () => {
    expect(resolveLockPath('/locks', 'café-билет-票')).toBe('/locks/café-билет-票');
    expect(() => resolveLockPath('/locks', 'ticket-🎫')).toThrow(/U\+D83C/);
    expect(validateZkPath('/a/b c/d')).toBeUndefined();
  });
});

describe('Curator child ordering', () => {
  it('sorts by the text after the last "lock-", whole name otherwise (stable, code-unit order)', () => {
    const children = [
      '_c_b0000000-0000-4000-8000-000000000000-lock-0000000003',
      'zzz',
      '_c_a0000000-0000-4000-8000-000000000000-lock-0000000001',
      '0',
      '3b289fdffbd04887b5995951c70eeae6__lock__0000000000', // kazoo: no "lock-", sorts by whole name
      'lock-0000000002', // metamx/zk-lock
    ];
    expect(sortChildren(children, ['lock-'])).toEqual([
      '0',
      '_c_a0000000-0000-4000-8000-000000000000-lock-0000000001',
      'lock-0000000002',
      '_c_b0000000-0000-4000-8000-000000000000-lock-0000000003',
      '3b289fdffbd04887b5995951c70eeae6__lock__0000000000',
      'zzz',
    ]);
  });

  it('sorts readers and writers by their shared sequence and keeps ties stable', () => {
    const children = ['_c_1-__WRIT__0000000005', '_c_2-__READ__0000000004', '_c_3-__READ__0000000005'];
    expect(sortKey('_c_3-__READ__0000000005', ['__READ__', '__WRIT__'])).toBe('0000000005');
    expect(sortChildren(children, ['__READ__', '__WRIT__'])).toEqual([
      '_c_2-__READ__0000000004',
      '_c_1-__WRIT__0000000005',
      '_c_3-__READ__0000000005',
    ]);
  });

  it('uses the last marker occurrence when a prefix contains it too', () => {
    expect(sortKey('_c_x-lock-foo-lock-0000000007', ['lock-'])).toBe('0000000007');
  });
});

describe('protected prefix', () => {
  it('is _c_ + a v4 UUID + "-" (40 characters), new every time', () => {
    const a = newProtectedPrefix();
    expect(a).toMatch(/^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-$/);
    expect(a).toHaveLength(40);
    expect(newProtectedPrefix()).not.toBe(a);
  });

  it('reads the server-assigned sequence', () => {
    expect(sequenceOf('_c_79e08f9b-cf92-4ebf-8c8e-f6526c063154-lock-0000000042')).toBe(42);
    expect(sequenceOf('zzz')).toBeUndefined();
    expect(sequenceOf('0000000007')).toBe(7);
    const one = ['_c_x-lock-0000000001'];
    expect(sortChildren(one, ['lock-'])).toEqual(one);
    expect(sortChildren(one, ['lock-'])).not.toBe(one);
    expect(sortChildren([], ['lock-'])).toEqual([]);
    expect(sequenceOf('lock-000000007')).toBeUndefined();
    expect(sequenceOf('lock-00000x0007')).toBeUndefined();
    expect(sequenceOf('lock-12345678901')).toBe(2345678901);
  });
});

describe('ancestorsOf', () => {
  it('lists the parents to create, root-most first', () => {
    expect(ancestorsOf('/locks/a/b')).toEqual(['/locks', '/locks/a']);
    expect(ancestorsOf('/x')).toEqual([]);
  });
});
