import { realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describeDiagnostics, makePackageProject, MODULE_KINDS, packageProgram, REPO_ROOT, userCompilerOptions } from '../support/package-project.js';

/**
 * The typings the package publishes (dist/, built with stripInternal): what the library's own
 * files share with each other is marked @internal and left out, so a user's autocomplete never
 * offers it; and what is left type-checks on its own (skipLibCheck off), so no declaration names
 * one that was left out. In an ES-module and in a CommonJS project (dist/ and dist/cjs/).
 */

/** Each line must fail to compile: `@ts-expect-error` fails the check when a member is there. */
const INTERNAL_MEMBERS = `
import { LeaderContext, LockContext, LockEngine, LockService, Mutex, MultiLock, ReadWriteLock, ZkConnection, type Lockable } from 'nestjs-zk-lock';

declare const locks: LockService;
declare const connection: ZkConnection;
declare const engine: LockEngine;
declare const mutex: Mutex;
declare const multi: MultiLock;
declare const lockable: Lockable;
declare const rw: ReadWriteLock;
declare const lease: Awaited<ReturnType<Mutex['acquire']>>;

// @ts-expect-error LockService.warn is internal
locks.warn('x');
// @ts-expect-error LockService.releaseAt is internal (@WithLock's minHoldMs)
locks.releaseAt(lease, 0);
// @ts-expect-error LockService.releaseHeldForMinimum is internal (shutdown)
locks.releaseHeldForMinimum();
// @ts-expect-error ZkConnection.keepAliveUntilSettled is internal
void connection.keepAliveUntilSettled(Promise.resolve());
// @ts-expect-error ZkConnection.onLinkUp is internal
connection.onLinkUp(connection.session!, () => undefined);
// @ts-expect-error ZkConnection.checkDeadline is internal
connection.checkDeadline();
// @ts-expect-error ZkConnection.links is internal
void connection.links;
// @ts-expect-error LockEngine.warn is internal (onWarning is public)
engine.warn('x');
// @ts-expect-error LockEngine.ops is internal
void engine.ops;
// @ts-expect-error LockEngine.track is internal
engine.track;
// @ts-expect-error LockEngine.localQueue is internal
engine.localQueue;
// @ts-expect-error LockEngine.background is internal
engine.background(Promise.resolve());
// @ts-expect-error LockEngine.onStop is internal
engine.onStop;
// @ts-expect-error LockEngine.onDisconnect is internal
engine.onDisconnect;
// @ts-expect-error Mutex.runHolding is internal
mutex.runHolding;
// @ts-expect-error Mutex.contextKey is internal
void mutex.contextKey;
// @ts-expect-error MultiLock.runHolding is internal
multi.runHolding;
// @ts-expect-error Lockable.runHolding is internal
lockable.runHolding;
// @ts-expect-error WriteLock.heldLease is internal
rw.write.heldLease();
// @ts-expect-error LockContext.run is internal
LockContext.run;
// @ts-expect-error LockContext.heldByChain is internal
LockContext.heldByChain;
// @ts-expect-error LeaderContext.run is internal
LeaderContext.run;

// What users call stays.
void locks.withLock('x', async (held) => held.fencingToken, { waitMs: 100 });
void locks.inspect({ signal: AbortSignal.timeout(2000) });
engine.onWarning(() => undefined);
void engine.shutdown();
LockContext.current()?.signal;
LeaderContext.current()?.fencingToken;
`;

describe.each(MODULE_KINDS)('the published typings, in a project of type %s', (kind) => {
  let dir: string;
  beforeAll(() => {
    dir = makePackageProject(kind);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('leave out the members marked @internal and type-check on their own (skipLibCheck off)', () => {
    const options = { ...userCompilerOptions, skipLibCheck: false };
    const seed = packageProgram(dir, options);
    const probe = join(dir, 'internal-members.ts');
    writeFileSync(probe, `${INTERNAL_MEMBERS}\nexport {};\n`);
    const program = ts.createProgram([...seed.getRootFileNames(), probe], options, undefined, seed);
    const dist = join(realpathSync(REPO_ROOT), 'dist');
    // The package's declarations and the probe; other packages' declarations are theirs to keep.
    const ours = ts.getPreEmitDiagnostics(program).filter((d) => !d.file || d.file.fileName === probe || realpathSync(d.file.fileName).startsWith(dist));
    expect(describeDiagnostics(ours)).toEqual([]);
    // The program read the declarations of the right build (ES modules or CommonJS).
    const read = program.getSourceFiles().map((file) => realpathSync(file.fileName));
    expect(read.some((file) => file.startsWith(join(dist, 'cjs')))).toBe(kind === 'commonjs');
  });
});
