import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * Every ```ts block of README.md and docs/*.md must type-check against the built package (`npm test`
 * builds dist/ first), as a Nest user's project would compile it. Each block becomes a module of its
 * own and starts with its own imports (a reader copies it as it is); a small prelude declares the
 * few names that fragments use undefined (the injected LockService, a signal, a DTO).
 * Every relative link of those pages must reach a file, and a `#anchor` a heading of its page.
 */

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

const packageEntryPoints = ['nestjs-zk-lock', 'nestjs-zk-lock/testing', 'nestjs-zk-lock/terminus', 'nestjs-zk-lock/metrics'];

/** Names the fragments use without defining them (a global script, so every block sees them). */
const prelude = `
declare const locks: import('nestjs-zk-lock').LockService;
declare const signal: AbortSignal;
declare class PurchaseDto {}
declare class SalesService {}   // defined in the README's "A first lock", used again in testing examples
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
  /** The page, relative to the repository (README.md, docs/locks.md, ...). */
  page: string;
  /** The page's line of the block's first code line. */
  firstLine: number;
  code: string;
}

/** README.md, CHANGELOG.md and every page of docs/, relative to the repository. */
function markdownPages(): string[] {
  const docs = readdirSync(join(repoRoot, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', 'CHANGELOG.md', ...docs];
}

function typeScriptBlocks(page: string, markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  let fence: { isTs: boolean; start: number } | undefined;
  lines.forEach((line, i) => {
    if (!line.startsWith('```')) return;
    if (!fence) fence = { isTs: /^```(ts|typescript)\s*$/.test(line), start: i + 1 };
    else {
      if (fence.isTs) blocks.push({ page, firstLine: fence.start + 1, code: lines.slice(fence.start, i).join('\n') });
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

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function headingAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of a page's headings (outside code fences), with GitHub's -1, -2 for repeats. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let inFence = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) inFence = !inFence;
    const heading = !inFence && /^#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const base = headingAnchor(heading[1]!);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/** `[text](target)` links outside code fences and inline code, with their line. */
function linksOf(markdown: string): { line: number; target: string }[] {
  const links: { line: number; target: string }[] = [];
  let inFence = false;
  markdown.split('\n').forEach((line, i) => {
    if (line.startsWith('```')) inFence = !inFence;
    if (inFence) return;
    const text = line.replace(/`[^`]*`/g, '');
    for (const match of text.matchAll(/\]\(([^)\s]+)\)/g)) links.push({ line: i + 1, target: match[1]! });
  });
  return links;
}

describe('README.md and docs/*.md', () => {
  let dir: string;
  beforeAll(() => {
    dir = makeProject();
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('have TypeScript blocks that compile against the built package', () => {
    const pages = markdownPages();
    const blocks = pages.flatMap((page) => typeScriptBlocks(page, readFileSync(join(repoRoot, page), 'utf8')));
    expect(blocks.length).toBeGreaterThan(0);
    // every page with code has it checked: the README and at least one docs page
    expect(new Set(blocks.map((block) => block.page)).size).toBeGreaterThan(1);

    const probeProgram = packageProgram(dir);

    const files = new Map<string, Block>();
    writeFileSync(join(dir, 'prelude.d.ts'), prelude);
    for (const block of blocks) {
      const file = join(dir, `${block.page.replace(/[/.]/g, '-')}-line-${block.firstLine}.ts`);
      writeFileSync(file, `${block.code}\nexport {};\n`);
      files.set(file, block);
    }

    const program = ts.createProgram([join(dir, 'prelude.d.ts'), ...files.keys()], compilerOptions, undefined, probeProgram);
    const problems = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
      const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
      const block = diagnostic.file && files.get(diagnostic.file.fileName);
      if (!diagnostic.file || diagnostic.start === undefined) return `TS${diagnostic.code}: ${message}`;
      const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
      const where = block ? `${block.page}:${block.firstLine + line}` : `${diagnostic.file.fileName}:${line + 1}`;
      return `${where}: TS${diagnostic.code}: ${message}`;
    });
    expect(problems).toEqual([]);
  });

  it('have relative links that reach a file, and anchors that reach a heading', () => {
    const problems: string[] = [];
    for (const page of markdownPages()) {
      const markdown = readFileSync(join(repoRoot, page), 'utf8');
      for (const { line, target } of linksOf(markdown)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
        const [path, anchor] = target.split('#') as [string, string | undefined];
        const file = path === '' ? join(repoRoot, page) : join(repoRoot, dirname(page), path);
        if (!existsSync(file)) {
          problems.push(`${page}:${line}: ${target}: no such file`);
          continue;
        }
        if (anchor !== undefined && file.endsWith('.md') && !anchorsOf(readFileSync(file, 'utf8')).has(anchor)) {
          problems.push(`${page}:${line}: ${target}: no heading with that anchor`);
        }
      }
    }
    expect(problems).toEqual([]);
  });
});
