// Bad input from untyped (JavaScript) callers: lock names, connection options, recipe options and
// acquire options. Each must be refused with a typed error that names the bad input
// (InvalidLockNameError quoting the name, InvalidOptionError naming the option), before anything
// is sent to ZooKeeper. No server is needed: the engine's connection is never opened.
import { InvalidLockNameError, InvalidOptionError, LockUsageError } from '../../lib/core/errors.js';
import { resolveConnectionOptions, type ZkConnectionOptions } from '../../lib/core/connection/connection-options.js';
import { LockEngine } from '../../lib/core/lock-engine.js';
import { MAX_LOCK_PATH_LENGTH, resolveLockPath, validateZkPath } from '../../lib/core/paths.js';
import { MultiLock } from '../../lib/core/recipes/multi-lock.js';
import { Mutex } from '../../lib/core/recipes/mutex.js';
import { ReadWriteLock } from '../../lib/core/recipes/read-write-lock.js';
import { Semaphore } from '../../lib/core/recipes/semaphore.js';
import { ZkConnection } from '../../lib/core/connection/zk-connection.js';
import { prng } from '../support/prng.js';

const random = prng(0x5eed);
const int = (n: number) => Math.floor(random() * n);
const SAFE = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_:.@+=~ éжλ票';
/** A random valid name segment: a letter, then any allowed characters. */
const safeName = (length = int(12)) => SAFE[int(26)] + Array.from({ length }, () => SAFE[int(SAFE.length)]).join('');

/** ZooKeeper's PathUtils.validatePath refuses these code units. */
const FORBIDDEN_RANGES: readonly (readonly [number, number])[] = [
  [0x0000, 0x001f],
  [0x007f, 0x009f],
  [0xd800, 0xf8ff],
  [0xfff0, 0xffff],
];
/** The allowed neighbours of those ranges. */
const ALLOWED_EDGES = [0x0020, 0x007e, 0x00a0, 0xd7ff, 0xf900, 0xffef];
const hex = (c: number) => `U+${c.toString(16).toUpperCase().padStart(4, '0')}`;

/** The error `fn` throws (or undefined). */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

/** A one-line description of what went wrong with one input, or undefined when it was refused correctly. */
function nameProblem(name: unknown, expectFragment?: string): string | undefined {
  const error = thrown(() => resolveLockPath('/locks', name as string));
  const label = typeof name === 'string' ? JSON.stringify(name).slice(0, 60) : String(typeof name);
  if (!(error instanceof InvalidLockNameError)) return `${label}: ${error === undefined ? 'accepted' : `threw ${(error as Error)?.constructor?.name}: ${(error as Error)?.message}`}`;
  if (typeof name === 'string') {
    if (error.lockName !== name) return `${label}: lockName is ${JSON.stringify(error.lockName)}`;
    if (!error.message.includes(JSON.stringify(name))) return `${label}: message does not quote the name`;
  }
  if (expectFragment && !error.message.includes(expectFragment)) return `${label}: message ${JSON.stringify(error.message)} lacks ${expectFragment}`;
  return undefined;
}

describe('lock names: resolveLockPath', () => {
  it('refuses every code unit of ZooKeeper\'s forbidden ranges, at the start, middle and end of a name, relative and absolute', () => {
    const problems: string[] = [];
    for (const [from, to] of FORBIDDEN_RANGES) {
      for (let c = from; c <= to; c++) {
        const ch = String.fromCharCode(c);
        const base = safeName(4);
        const forms = [ch, `${ch}${base}`, `${base}${ch}`, `${base.slice(0, 2)}${ch}${base.slice(2)}`, `/abs/${base}${ch}`, `${base}/${ch}x`];
        for (const name of forms) {
          // The whitespace among the control characters is refused as "empty" when it is all there is.
          const problem = nameProblem(name, name.trim() === '' ? 'is empty' : hex(c));
          if (problem) problems.push(problem);
        }
      }
    }
    expect(problems.slice(0, 20)).toEqual([]);
  });

  it('accepts the allowed neighbours of those ranges', () => {
    for (const c of ALLOWED_EDGES) {
      const name = `a${String.fromCharCode(c)}b`;
      expect(resolveLockPath('/locks', name)).toBe(`/locks/${name}`);
    }
  });

  it('refuses a forbidden character hidden in a random name (500 seeded samples)', () => {
    const problems: string[] = [];
    for (let i = 0; i < 500; i++) {
      const [from, to] = FORBIDDEN_RANGES[int(FORBIDDEN_RANGES.length)]!;
      const c = from + int(to - from + 1);
      const left = safeName();
      const right = safeName();
      const name = `${random() < 0.3 ? '/' : ''}${left}${String.fromCharCode(c)}${right}`;
      const problem = nameProblem(name, hex(c));
      if (problem) problems.push(problem);
    }
    expect(problems.slice(0, 20)).toEqual([]);
  });

  it('accepts random names made of allowed characters (500 seeded samples) and maps them under the base path', () => {
    for (let i = 0; i < 500; i++) {
      const name = Array.from({ length: 1 + int(4) }, () => safeName())
        .join('/')
        .replace(/(^|\/)\.{1,2}(?=\/|$)/g, '$1x'); // "." and ".." segments are refused (tested below)
      const path = resolveLockPath('/locks', name);
      expect(path).toBe(`/locks/${name}`);
      expect(validateZkPath(path)).toBeUndefined();
    }
  });

  it.each([
    ['', 'is empty'],
    [' ', 'is empty'],
    ['   ', 'is empty'],
    ['\t', 'is empty'],
    ['\n', 'is empty'],
    ['\r\n', 'is empty'],
    ['\u00a0', 'is empty'],
    ['\u2028', 'is empty'],
    ['\u3000', 'is empty'],
    ['\ufeff', 'is empty'],
    [' \t ', 'is empty'],
    ['/', 'root'],
    ['//', 'must not end with "/"'],
    ['a/', 'must not end with "/"'],
    ['/a/', 'must not end with "/"'],
    ['a//b', 'empty segment'],
    ['//a', 'empty segment'],
    ['a///', 'must not end with "/"'],
    ['.', '"." segment'],
    ['..', '".." segment'],
    ['./a', '"." segment'],
    ['a/.', '"." segment'],
    ['a/./b', '"." segment'],
    ['../a', '".." segment'],
    ['a/..', '".." segment'],
    ['a/../b', '".." segment'],
    ['/..', '".." segment'],
    ['/.', '"." segment'],
    ['/zookeeper', 'reserves'],
    ['/zookeeper/config', 'reserves'],
    ['a\tb', 'U+0009'],
    ['line\nbreak', 'U+000A'],
    ['nul\u0000', 'U+0000'],
    ['del\u007f', 'U+007F'],
    ['emoji-🔒', 'U+D83D'],
    ['lone-\udfff', 'U+DFFF'],
    ['private-\ue123', 'U+E123'],
    ['bom-\ufffe', 'U+FFFE'],
    ['replacement-\ufffd', 'U+FFFD'],
  ])('refuses %j (%s)', (name, fragment) => {
    expect(nameProblem(name, fragment)).toBeUndefined();
  });

  it('accepts names ZooKeeper accepts even if unusual: "...", dots inside, inner spaces, nesting', () => {
    for (const name of ['...', 'a.b', '.hidden', 'trailing.', 'in ner', ' lead', 'a/b/c', 'x..y']) {
      expect(resolveLockPath('/locks', name)).toBe(`/locks/${name}`);
    }
  });

  it(`limits the path to ${MAX_LOCK_PATH_LENGTH} characters, relative and absolute`, () => {
    const room = MAX_LOCK_PATH_LENGTH - '/locks/'.length;
    expect(resolveLockPath('/locks', 'x'.repeat(room))).toHaveLength(MAX_LOCK_PATH_LENGTH);
    expect(nameProblem('x'.repeat(room + 1), `at most ${MAX_LOCK_PATH_LENGTH}`)).toBeUndefined();
    expect(resolveLockPath('/locks', `/${'y'.repeat(MAX_LOCK_PATH_LENGTH - 1)}`)).toHaveLength(MAX_LOCK_PATH_LENGTH);
    expect(nameProblem(`/${'y'.repeat(MAX_LOCK_PATH_LENGTH)}`, `at most ${MAX_LOCK_PATH_LENGTH}`)).toBeUndefined();
    expect(nameProblem(Array.from({ length: 400 }, () => 'seg').join('/'), 'at most')).toBeUndefined();
  });

  it('refuses a huge name (1 MB) quickly, with the limit in the message', () => {
    const started = performance.now();
    expect(nameProblem('z'.repeat(1 << 20), `at most ${MAX_LOCK_PATH_LENGTH}`)).toBeUndefined();
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it.each([
    ['a number', 42],
    ['NaN', Number.NaN],
    ['null', null],
    ['undefined', undefined],
    ['a boolean', true],
    ['a bigint', 10n],
    ['a symbol', Symbol('lock')],
    ['an object', { name: 'orders' }],
    ['an array', ['orders']],
    ['a function', () => 'orders'],
    ['a String object', new String('orders')],
    ['an object without a prototype', Object.create(null)],
    ['an object whose toString throws', { toString: () => { throw new Error('no'); } }],
  ])('refuses %s (untyped caller) with InvalidLockNameError', (_label, name) => {
    expect(nameProblem(name, 'expected a string')).toBeUndefined();
  });
});

// ---------------------------------------------------------------------------------------------

function optionProblem(options: unknown, option: string | readonly string[]): string | undefined {
  const error = thrown(() => resolveConnectionOptions(options as ZkConnectionOptions));
  return checkOptionError(error, option);
}

function checkOptionError(error: unknown, option: string | readonly string[]): string | undefined {
  const names = typeof option === 'string' ? [option] : option;
  if (!(error instanceof InvalidOptionError)) {
    return error === undefined ? 'accepted' : `threw ${(error as Error)?.constructor?.name}: ${(error as Error)?.message}`;
  }
  if (!names.includes(error.option)) return `named ${JSON.stringify(error.option)} instead of ${names.join(' or ')}`;
  if (!error.message.includes(`"${error.option}"`)) return `message ${JSON.stringify(error.message)} does not name the option`;
  return undefined;
}

/** Values no millisecond or count option may take. */
const BAD_NUMBERS: readonly [string, unknown][] = [
  ['-1', -1],
  ['-0.5', -0.5],
  ['0.5', 0.5],
  ['1.5', 1.5],
  ['NaN', Number.NaN],
  ['Infinity', Number.POSITIVE_INFINITY],
  ['-Infinity', Number.NEGATIVE_INFINITY],
  ['2^31 (over setTimeout)', 2 ** 31],
  ['1e12', 1e12],
  ['Number.MAX_VALUE', Number.MAX_VALUE],
  ['"5000"', '5000'],
  ['""', ''],
  ['null', null],
  ['true', true],
  ['{}', {}],
  ['[5000]', [5000]],
  ['5000n', 5000n],
];

describe('connection options: resolveConnectionOptions', () => {
  it.each([
    ['host without port', 'zk1'],
    ['empty port', 'zk1:'],
    ['letters for a port', 'zk1:abc'],
    ['no host', ':2181'],
    ['port 0', 'zk1:0'],
    ['negative port', 'zk1:-1'],
    ['port over 65535', 'zk1:65536'],
    ['six-digit port', 'zk1:000002'],
    ['trailing comma', 'zk1:2181,'],
    ['lone comma', ','],
    ['semicolons', 'zk1:2181;zk2:2181'],
    ['space in host', 'zk 1:2181'],
    ['non-ASCII host', 'zöo:2181'],
    ['scheme', 'zk://zk1:2181'],
    ['chroot suffix', 'zk1:2181/app'],
    ['control character', 'zk1:2181\u0000'],
    ['unbracketed IPv6', '::1:2181'],
    ['empty', ''],
    ['whitespace', ' \t '],
  ])('refuses connectString with %s (%j)', (_label, connectString) => {
    expect(optionProblem({ connectString }, 'connectString')).toBeUndefined();
  });

  it.each([['a number', 2181], ['null', null], ['an array', ['zk1:2181']], ['an object', { host: 'zk1', port: 2181 }]])(
    'refuses connectString as %s',
    (_label, connectString) => {
      expect(optionProblem({ connectString }, 'connectString')).toBeUndefined();
    },
  );

  it('refuses every bad number for both timeouts, naming the option', () => {
    const problems: string[] = [];
    for (const option of ['sessionTimeoutMs', 'connectTimeoutMs']) {
      for (const [label, value] of [...BAD_NUMBERS, ['0', 0] as [string, unknown]]) {
        const problem = optionProblem({ connectString: 'zk1:2181', [option]: value }, option);
        if (problem) problems.push(`${option}=${label}: ${problem}`);
      }
    }
    expect(problems).toEqual([]);
  });

  it.each([
    ['relative', 'app'],
    ['empty', ''],
    ['trailing slash', '/app/'],
    ['double slash', '/a//b'],
    ['dot segment', '/a/./b'],
    ['dot-dot segment', '/a/../b'],
    ['control character', '/a\u0001'],
    ['surrogate', '/a\ud800'],
    ['reserved', '/zookeeper'],
    ['a number', 42],
    ['null', null],
  ])('refuses chroot: %s', (_label, chroot) => {
    expect(optionProblem({ connectString: 'zk1:2181', chroot }, 'chroot')).toBeUndefined();
  });

  it.each([
    [{ connectString: 'zk1:2181', auth: 'user:pass' }, 'auth'],
    [{ connectString: 'zk1:2181', auth: null }, 'auth'],
    [{ connectString: 'zk1:2181', auth: 42 }, 'auth'],
    [{ connectString: 'zk1:2181', auth: { credentials: 42 } }, 'auth.credentials'],
    [{ connectString: 'zk1:2181', auth: { scheme: '', credentials: 'a:b' } }, 'auth.scheme'],
    [{ connectString: 'zk1:2181', auth: { scheme: 42, credentials: 'a:b' } }, 'auth.scheme'],
    [{ connectString: 'zk1:2181', auth: [{ credentials: 'a:b' }, null] }, 'auth[1]'],
    [{ connectString: 'zk1:2181', auth: [{ credentials: 'a:b' }, { credentials: 'nocolon' }] }, 'auth[1].credentials'],
  ])('refuses auth %j naming %s', (options, option) => {
    expect(optionProblem(options, option)).toBeUndefined();
  });

  it.each([
    ['undefined', undefined],
    ['null', null],
    ['a string', 'zk1:2181'],
    ['a number', 2181],
  ])('refuses the whole options as %s', (_label, options) => {
    expect(optionProblem(options, 'options')).toBeUndefined();
  });

  it('refuses an array or a function as the whole options (no connectString)', () => {
    expect(optionProblem([], ['options', 'connectString'])).toBeUndefined();
    expect(optionProblem(() => 'zk1:2181', ['options', 'connectString'])).toBeUndefined();
  });

  it('accepts the extremes that are valid', () => {
    expect(resolveConnectionOptions({ connectString: 'zk1:1', sessionTimeoutMs: 1, connectTimeoutMs: 2_147_483_647 })).toMatchObject({
      sessionTimeoutMs: 1,
      connectTimeoutMs: 2_147_483_647,
    });
    expect(resolveConnectionOptions({ connectString: '[::1]:65535', chroot: '/' }).chroot).toBeUndefined();
  });
});

// ---------------------------------------------------------------------------------------------

/** An engine over a connection that is never opened: every check must happen before ZooKeeper. */
function offlineEngine(): LockEngine {
  return new LockEngine(new ZkConnection({ connectString: '127.0.0.1:1' }));
}

describe('engine options: basePath, parentAcl, app, instance', () => {
  const connection = new ZkConnection({ connectString: '127.0.0.1:1' });
  it.each([
    ['relative', { basePath: 'locks' }, 'basePath'],
    ['empty', { basePath: '' }, 'basePath'],
    ['trailing slash', { basePath: '/locks/' }, 'basePath'],
    ['dot-dot', { basePath: '/a/..' }, 'basePath'],
    ['control character', { basePath: '/lo\u0007cks' }, 'basePath'],
    ['reserved', { basePath: '/zookeeper' }, 'basePath'],
    ['a number', { basePath: 42 }, 'basePath'],
    ['acl not a list', { parentAcl: { perms: 31, scheme: 'world', id: 'anyone' } }, 'parentAcl'],
    ['acl perms out of range', { parentAcl: [{ perms: 32, scheme: 'world', id: 'anyone' }] }, 'parentAcl'],
    ['acl perms NaN', { parentAcl: [{ perms: Number.NaN, scheme: 'world', id: 'anyone' }] }, 'parentAcl'],
    ['acl entry null', { parentAcl: [null] }, 'parentAcl'],
    ['app a number', { app: 42 }, 'app'],
    ['instance an object', { instance: {} }, 'instance'],
  ])('refuses %s', (_label, options, option) => {
    expect(checkOptionError(thrown(() => new LockEngine(connection, options as never)), option)).toBeUndefined();
  });
});

describe('recipe options: new Mutex / new Semaphore / new ReadWriteLock', () => {
  const engine = offlineEngine();

  it('refuses every bad leaseMs (and 0) on each recipe, naming leaseMs', () => {
    const problems: string[] = [];
    for (const [label, leaseMs] of [...BAD_NUMBERS, ['0', 0] as [string, unknown]]) {
      const recipes: [string, () => unknown][] = [
        ['Mutex', () => new Mutex(engine, 'm', '/locks/m', { leaseMs } as never)],
        ['Semaphore', () => new Semaphore(engine, 's', '/locks/s', { permits: 2, leaseMs } as never)],
        ['ReadWriteLock', () => new ReadWriteLock(engine, 'rw', '/locks/rw', { leaseMs } as never)],
      ];
      for (const [recipe, make] of recipes) {
        const problem = checkOptionError(thrown(make), 'leaseMs');
        if (problem) problems.push(`${recipe} leaseMs=${label}: ${problem}`);
      }
    }
    expect(problems).toEqual([]);
  });

  it('refuses every bad permit count (and 0) for a semaphore, naming permits', () => {
    const problems: string[] = [];
    for (const [label, permits] of [...BAD_NUMBERS, ['0', 0] as [string, unknown], ['undefined', undefined]]) {
      const problem = checkOptionError(thrown(() => new Semaphore(engine, 's', '/locks/s', { permits } as never)), 'permits');
      if (problem) problems.push(`permits=${label}: ${problem}`);
    }
    expect(problems).toEqual([]);
  });

  it.each([
    ['null', null],
    ['a string', 'fast'],
    ['a number', 2],
  ])('refuses Semaphore options given as %s', (_label, options) => {
    expect(checkOptionError(thrown(() => new Semaphore(engine, 's', '/locks/s', options as never)), ['permits', 'options'])).toBeUndefined();
  });

  it.each([
    ['null', null],
    ['a string', 'fast'],
    ['a number', 2],
  ])('refuses Mutex options given as %s', (_label, options) => {
    expect(checkOptionError(thrown(() => new Mutex(engine, 'm', '/locks/m', options as never)), 'options')).toBeUndefined();
  });

  it.each([
    ['null', null],
    ['a string', 'fast'],
  ])('refuses ReadWriteLock options given as %s', (_label, options) => {
    expect(checkOptionError(thrown(() => new ReadWriteLock(engine, 'rw', '/locks/rw', options as never)), 'options')).toBeUndefined();
  });

  it.each([
    ['fair', 'false'],
    ['fair', 0],
    ['fair', 'no'],
    ['fair', null],
    ['reentrant', 'false'],
    ['reentrant', 0],
    ['reentrant', 1],
    ['reentrant', null],
  ])('refuses the boolean Mutex option %s = %j (a JavaScript caller thinks it switched it)', (option, value) => {
    expect(checkOptionError(thrown(() => new Mutex(engine, 'm', '/locks/m', { [option]: value } as never)), option)).toBeUndefined();
  });

  it.each([
    ['relative', 'locks/m'],
    ['empty', ''],
    ['trailing slash', '/locks/m/'],
    ['NUL (the C client would cut the path there)', '/locks/m\u0000x'],
    ['reserved', '/zookeeper/m'],
    ['a number', 42],
  ])('refuses a recipe constructed directly on an invalid path: %s', (_label, path) => {
    for (const make of [
      () => new Mutex(engine, 'm', path as never),
      () => new Semaphore(engine, 's', path as never, { permits: 1 }),
      () => new ReadWriteLock(engine, 'rw', path as never),
    ]) {
      const error = thrown(make);
      expect(error instanceof InvalidLockNameError || error instanceof InvalidOptionError ? 'typed error' : `got ${String(error)}`).toBe('typed error');
    }
  });

  it('refuses multi-locks over nothing, over a non-list and over the same lock twice', () => {
    const a = new Mutex(engine, 'a', '/locks/a');
    expect(() => new MultiLock([])).toThrow(LockUsageError);
    expect(() => new MultiLock('a' as never)).toThrow(LockUsageError);
    expect(() => new MultiLock([a, new Mutex(engine, 'a', '/locks/a')])).toThrow(LockUsageError);
  });

  it.each([
    ['a lock name (core MultiLock takes lock objects)', 'a'],
    ['a number', 42],
    ['null', null],
  ])('refuses a multi-lock member that is %s', (_label, member) => {
    const a = new Mutex(engine, 'a', '/locks/a');
    const error = thrown(() => new MultiLock([a, member as never]));
    expect(error instanceof LockUsageError || error instanceof InvalidOptionError ? 'typed error' : `got ${String(error)}`).toBe('typed error');
  });
});

describe('acquire options (untyped callers), refused before any ZooKeeper request', () => {
  const engine = offlineEngine();
  const mutex = new Mutex(engine, 'm', '/locks/m');
  const semaphore = new Semaphore(engine, 's', '/locks/s', { permits: 2 });
  const rw = new ReadWriteLock(engine, 'rw', '/locks/rw');
  const recipes: [string, { acquire(options?: unknown): Promise<unknown> }][] = [
    ['mutex', mutex as never],
    ['semaphore', semaphore as never],
    ['read', rw.read as never],
    ['write', rw.write as never],
    ['multi-lock', new MultiLock([mutex, semaphore]) as never],
  ];

  async function rejection(work: () => Promise<unknown>): Promise<unknown> {
    // Anything but a prompt rejection counts as a failure (an accepted bad option would wait for the
    // never-opened connection).
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      work().then(
        () => 'resolved',
        (error: unknown) => error,
      ),
      new Promise((resolve) => (timer = setTimeout(() => resolve('still pending after 1 s'), 1000))),
    ]);
    clearTimeout(timer);
    return outcome;
  }

  it('refuses every bad waitMs on every recipe, naming waitMs', async () => {
    const problems: string[] = [];
    for (const [label, waitMs] of BAD_NUMBERS) {
      for (const [recipe, lock] of recipes) {
        const problem = checkOptionError(await rejection(() => lock.acquire({ waitMs })), 'waitMs');
        if (problem) problems.push(`${recipe} waitMs=${label}: ${problem}`);
      }
    }
    expect(problems).toEqual([]);
  });

  it.each([
    ['an object', {}],
    ['an AbortController', new AbortController()],
    ['a string', 'abort'],
    ['null', null],
    ['true', true],
  ])('refuses signal as %s on every recipe', async (_label, signal) => {
    for (const [, lock] of recipes) {
      expect(checkOptionError(await rejection(() => lock.acquire({ signal })), 'signal')).toBeUndefined();
    }
  });

  it.each([
    ['null', null],
    ['a string', 'now'],
    ['a number', 5000],
    ['true', true],
  ])('refuses options given as %s on every recipe', async (_label, options) => {
    for (const [, lock] of recipes) {
      expect(checkOptionError(await rejection(() => lock.acquire(options)), 'options')).toBeUndefined();
    }
  });

  it('refuses bad waitMs through withLock and never runs the callback', async () => {
    let ran = false;
    const fn = () => {
      ran = true;
    };
    expect(checkOptionError(await rejection(() => mutex.withLock(fn, { waitMs: -5 })), 'waitMs')).toBeUndefined();
    expect(ran).toBe(false);
  });

  it('refuses a semaphore request for 0, negative, fractional, too many or non-numeric permits', async () => {
    const problems: string[] = [];
    for (const [label, permits] of [...BAD_NUMBERS, ['0', 0] as [string, unknown], ['3 (> permits 2)', 3]]) {
      const problem = checkOptionError(await rejection(() => semaphore.acquire({ permits } as never)), 'permits');
      if (problem) problems.push(`permits=${label}: ${problem}`);
    }
    expect(problems).toEqual([]);
  });
});
