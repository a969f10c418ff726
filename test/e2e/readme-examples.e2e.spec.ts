import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * Every ```ts block of README.md must type-check against the built package (`npm test` builds
 * dist/ first), as a Nest user's project would compile it. Each block becomes a module of its own
 * and starts with its own imports (a reader copies it as it is); a small prelude declares the few
 * names that fragments use undefined (the injected LockService, a signal, a DTO).
 */

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

const packageEntryPoints = ['nestjs-zk-lock', 'nestjs-zk-lock/testing', 'nestjs-zk-lock/terminus', 'nestjs-zk-lock/metrics'];

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

/** A program over the package's entry points: they must resolve (dist/ built), and it seeds the blocks' program. */
function packageProgram(dir: string): ts.Program {
  const probe = join(dir, 'probe.ts');
  writeFileSync(probe, packageEntryPoints.map((entry, i) => `import * as entry${i} from '${entry}';`).join('\n'));
  const program = ts.createProgram([probe], compilerOptions);
  const checker = program.getTypeChecker();
  for (const statement of program.getSourceFile(probe)!.statements) {
    const specifier = (statement as ts.ImportDeclaration).moduleSpecifier as ts.StringLiteral;
    if (!checker.getSymbolAtLocation(specifier)) throw new Error(`${specifier.text} does not resolve: build the package first (npm run build)`);
  }
  return program;
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

    const probeProgram = packageProgram(dir);

    const files = new Map<string, Block>();
    writeFileSync(join(dir, 'prelude.d.ts'), prelude);
    for (const block of blocks) {
      const file = join(dir, `readme-line-${block.firstLine}.ts`);
      writeFileSync(file, `${block.code}\nexport {};\n`);
      files.set(file, block);
    }

    const program = ts.createProgram([join(dir, 'prelude.d.ts'), ...files.keys()], compilerOptions, undefined, probeProgram);
    const problems = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
      const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
      const block = diagnostic.file && files.get(diagnostic.file.fileName);
      if (!diagnostic.file || diagnostic.start === undefined) return `TS${diagnostic.code}: ${message}`;
      const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
      const where = block ? `README.md:${block.firstLine + line}` : `${diagnostic.file.fileName}:${line + 1}`;
      return `${where}: TS${diagnostic.code}: ${message}`;
    });
    expect(problems).toEqual([]);
  });
});
