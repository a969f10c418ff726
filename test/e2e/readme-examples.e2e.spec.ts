import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * Every ```ts block of README.md must type-check against the built package (`npm test` builds
 * dist/ first), as a Nest user's project would compile it. Blocks are fragments: each becomes a
 * module that imports the names it mentions, plus a small prelude of names it uses undefined.
 */

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

/** Where each exported name comes from; the package's own exports are read from its typings. */
const packageEntryPoints = ['nestjs-zk-lock', 'nestjs-zk-lock/testing', 'nestjs-zk-lock/terminus', 'nestjs-zk-lock/metrics'];
const otherModules: Record<string, string[]> = {
  '@nestjs/common': ['Module', 'Injectable', 'Controller', 'Get', 'Post', 'Param', 'Body'],
  '@nestjs/config': ['ConfigModule', 'ConfigService'],
  '@nestjs/schedule': ['Cron', 'Interval'],
  '@nestjs/testing': ['Test'],
  rxjs: ['Observable'],
};

/** Names the fragments use without defining them (a global script, so every block sees them). */
const prelude = `
declare const locks: import('nestjs-zk-lock').LockService;
declare const signal: AbortSignal;
declare class PurchaseDto {}
declare class SalesService {}   // defined in "Use it", used again in "Testing your own code"
`;

/** A Nest user's settings (ESM, like Nest 12), so decorators and top-level await compile. */
const compilerOptions: ts.CompilerOptions = {
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

interface Block {
  /** README line of the block's first code line. */
  firstLine: number;
  code: string;
}

function typeScriptBlocks(markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  let fence: { isTs: boolean; start: number } | undefined;
  lines.forEach((line, i) => {
    if (!line.startsWith('```')) return;
    if (!fence) fence = { isTs: /^```(ts|typescript)\s*$/.test(line), start: i + 1 };
    else {
      if (fence.isTs) blocks.push({ firstLine: fence.start + 1, code: lines.slice(fence.start, i).join('\n') });
      fence = undefined;
    }
  });
  return blocks;
}

/** A project folder whose node_modules has this checkout as `nestjs-zk-lock` and its dependencies. */
function makeProject(): string {
  const dir = mkdtempSync(join(tmpdir(), 'readme-examples-'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
  mkdirSync(join(dir, 'node_modules'));
  for (const entry of readdirSync(join(repoRoot, 'node_modules'))) {
    if (!entry.startsWith('.')) symlinkSync(join(repoRoot, 'node_modules', entry), join(dir, 'node_modules', entry));
  }
  symlinkSync(repoRoot, join(dir, 'node_modules', 'nestjs-zk-lock'));
  return dir;
}

/** Name -> module for every name the package's entry points export (the first entry point wins). */
function packageExports(dir: string): { exports: Map<string, string>; program: ts.Program } {
  const probe = join(dir, 'probe.ts');
  writeFileSync(probe, packageEntryPoints.map((entry, i) => `import * as entry${i} from '${entry}';`).join('\n'));
  const program = ts.createProgram([probe], compilerOptions);
  const checker = program.getTypeChecker();
  const exports = new Map<string, string>();
  for (const statement of program.getSourceFile(probe)!.statements) {
    const specifier = (statement as ts.ImportDeclaration).moduleSpecifier as ts.StringLiteral;
    const moduleSymbol = checker.getSymbolAtLocation(specifier);
    if (!moduleSymbol) throw new Error(`${specifier.text} does not resolve: build the package first (npm run build)`);
    for (const symbol of checker.getExportsOfModule(moduleSymbol)) {
      if (!exports.has(symbol.name)) exports.set(symbol.name, specifier.text);
    }
  }
  return { exports, program };
}

/** One line of imports for the exported names the block mentions, so block lines keep a fixed offset. */
function importLine(code: string, exports: Map<string, string>): string {
  const namesByModule = new Map<string, string[]>();
  for (const [name, from] of exports) {
    if (new RegExp(`\\b${name}\\b`).test(code)) namesByModule.set(from, [...(namesByModule.get(from) ?? []), name]);
  }
  return ['export {};', ...[...namesByModule].map(([from, names]) => `import { ${names.join(', ')} } from '${from}';`)].join(' ');
}

describe('README.md', () => {
  let dir: string;
  beforeAll(() => {
    dir = makeProject();
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('has TypeScript blocks that compile against the built package', () => {
    const blocks = typeScriptBlocks(readFileSync(join(repoRoot, 'README.md'), 'utf8'));
    expect(blocks.length).toBeGreaterThan(0);

    const { exports, program: probeProgram } = packageExports(dir);
    for (const [from, names] of Object.entries(otherModules)) names.forEach((name) => exports.set(name, from));

    const files = new Map<string, Block>();
    writeFileSync(join(dir, 'prelude.d.ts'), prelude);
    for (const block of blocks) {
      const file = join(dir, `readme-line-${block.firstLine}.ts`);
      writeFileSync(file, `${importLine(block.code, exports)}\n${block.code}\n`);
      files.set(file, block);
    }

    const program = ts.createProgram([join(dir, 'prelude.d.ts'), ...files.keys()], compilerOptions, undefined, probeProgram);
    const problems = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
      const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
      const block = diagnostic.file && files.get(diagnostic.file.fileName);
      if (!diagnostic.file || diagnostic.start === undefined) return `TS${diagnostic.code}: ${message}`;
      const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
      // Line 0 of a block's file is the generated import line.
      const where = block ? `README.md:${block.firstLine + line - 1}` : `${diagnostic.file.fileName}:${line + 1}`;
      return `${where}: TS${diagnostic.code}: ${message}`;
    });
    expect(problems).toEqual([]);
  });
});
