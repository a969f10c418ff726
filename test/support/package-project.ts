// A throw-away TypeScript project that depends on this checkout as `nestjs-zk-lock` (its built
// dist/, through the package's exports), as a Nest user's project would: for checks that compile
// user code against the published typings.
import { mkdirSync, mkdtempSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** The package's entry points a user imports. */
export const PACKAGE_ENTRY_POINTS = ['nestjs-zk-lock', 'nestjs-zk-lock/core', 'nestjs-zk-lock/testing', 'nestjs-zk-lock/terminus', 'nestjs-zk-lock/metrics'];

/**
 * The two module kinds a Nest project comes in: `module` (ES modules, what `nest new` makes for
 * Nest 12) and `commonjs` (Nest 11's default: no "type" in package.json, `module: nodenext`).
 */
export type ModuleKind = 'module' | 'commonjs';
export const MODULE_KINDS: readonly ModuleKind[] = ['module', 'commonjs'];

/** A Nest user's compiler settings (decorators and their metadata); the package.json's "type" picks the module kind. */
export const userCompilerOptions: ts.CompilerOptions = {
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  strict: true,
  experimentalDecorators: true,
  emitDecoratorMetadata: true,
  skipLibCheck: true,
  noEmit: true,
  types: ['node'],
};

/** A project folder of `kind` whose node_modules has this checkout as `nestjs-zk-lock` and its dependencies. */
export function makePackageProject(kind: ModuleKind): string {
  const dir = mkdtempSync(join(tmpdir(), `package-project-${kind}-`));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: kind }));
  mkdirSync(join(dir, 'node_modules'));
  for (const entry of readdirSync(join(REPO_ROOT, 'node_modules'))) {
    if (!entry.startsWith('.')) symlinkSync(join(REPO_ROOT, 'node_modules', entry), join(dir, 'node_modules', entry));
  }
  symlinkSync(REPO_ROOT, join(dir, 'node_modules', 'nestjs-zk-lock'));
  return dir;
}

/**
 * A program over the package's entry points in `dir`: they must resolve (dist/ built). It also
 * seeds the program of the files a check compiles (`oldProgram`), so the package is read once.
 */
export function packageProgram(dir: string, options: ts.CompilerOptions = userCompilerOptions): ts.Program {
  const probe = join(dir, 'entry-points.ts');
  writeFileSync(probe, PACKAGE_ENTRY_POINTS.map((entry, i) => `import * as entry${i} from '${entry}';`).join('\n') + '\nexport {};\n');
  const program = ts.createProgram([probe], options);
  const checker = program.getTypeChecker();
  for (const statement of program.getSourceFile(probe)!.statements) {
    if (!ts.isImportDeclaration(statement)) continue;
    const specifier = statement.moduleSpecifier as ts.StringLiteral;
    if (!checker.getSymbolAtLocation(specifier)) throw new Error(`${specifier.text} does not resolve: build the package first (npm run build)`);
  }
  return program;
}

/** `file:line: TSnnnn: message` for each diagnostic, with `where` naming a file's place (default: its path). */
export function describeDiagnostics(diagnostics: readonly ts.Diagnostic[], where: (file: ts.SourceFile, line: number) => string = (file, line) => `${file.fileName}:${line + 1}`): string[] {
  return diagnostics.map((diagnostic) => {
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
    if (!diagnostic.file || diagnostic.start === undefined) return `TS${diagnostic.code}: ${message}`;
    const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
    return `${where(diagnostic.file, line)}: TS${diagnostic.code}: ${message}`;
  });
}
