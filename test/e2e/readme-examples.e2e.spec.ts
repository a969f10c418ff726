import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import ts from 'typescript';
import { describeDiagnostics, makePackageProject, MODULE_KINDS, packageProgram, REPO_ROOT as repoRoot, userCompilerOptions } from '../support/package-project.js';

/**
 * Every ```ts block of README.md and docs/*.md must type-check against the built package (`npm test`
 * builds dist/ first) as pasted, in an ES-module project (Nest 12's default) and in a CommonJS one
 * (Nest 11's): so no top-level await, and no import of a reader's own file (whose path would need
 * `.js` in the one and, under Jest, none in the other). Each block becomes a module of its own and
 * starts with its own imports (a reader copies it as it is); a block may be a spec, seeing its test
 * runner's globals (`describe`, `it`, `expect`: Jest's, or Vitest's with `globals: true`). A block
 * may be a fragment that uses names the prelude declares (the injected LockService as `locks`, a
 * `signal`); nothing else may be left undefined.
 * Every relative link of those pages must reach a file, and a `#anchor` a heading of its page.
 */

/** Names fragments may use without defining them (a global script, so every block sees them). */
const prelude = `
declare const locks: import('nestjs-zk-lock').LockService;
declare const signal: AbortSignal;
`;

/** A Nest user's settings, in a spec: the test runner's globals are there too. */
const compilerOptions: ts.CompilerOptions = { ...userCompilerOptions, types: ['node', 'jest'] };

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

/** The type errors of `blocks` compiled in a project of `kind`, as `page:line: TSnnnn: message`. */
function blockProblems(kind: (typeof MODULE_KINDS)[number], blocks: Block[]): string[] {
  const dir = makePackageProject(kind);
  try {
    const probeProgram = packageProgram(dir, compilerOptions);
    const files = new Map<string, Block>();
    writeFileSync(join(dir, 'prelude.d.ts'), prelude);
    for (const block of blocks) {
      const file = join(dir, `${block.page.replace(/[/.]/g, '-')}-line-${block.firstLine}.ts`);
      writeFileSync(file, `${block.code}\nexport {};\n`);
      files.set(file, block);
    }
    const program = ts.createProgram([join(dir, 'prelude.d.ts'), ...files.keys()], compilerOptions, undefined, probeProgram);
    return describeDiagnostics(ts.getPreEmitDiagnostics(program), (file, line) => {
      const block = files.get(file.fileName);
      return block ? `${block.page}:${block.firstLine + line}` : `${file.fileName}:${line + 1}`;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('README.md and docs/*.md', () => {
  const blocks = () => markdownPages().flatMap((page) => typeScriptBlocks(page, readFileSync(join(repoRoot, page), 'utf8')));

  it('have TypeScript blocks', () => {
    expect(blocks().length).toBeGreaterThan(0);
    // every page with code has it checked: the README and at least one docs page
    expect(new Set(blocks().map((block) => block.page)).size).toBeGreaterThan(1);
  });

  it.each(MODULE_KINDS)('have TypeScript blocks that compile as pasted against the built package, in a project of type %s', (kind) => {
    expect(blockProblems(kind, blocks())).toEqual([]);
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
