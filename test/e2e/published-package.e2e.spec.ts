import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stripVTControlCharacters } from 'node:util';

// What `npm pack` publishes, as a user receives it (`npm test` builds dist first): a manifest npm 11
// installs without asking for script approval, a licence, where the project lives, and the
// documentation the README links to.
const root = fileURLToPath(new URL('../..', import.meta.url));

/** Scripts a consumer's package manager may run (or list for approval) when it installs or packs the package. */
const CONSUMER_LIFECYCLE = ['preinstall', 'install', 'postinstall', 'preprepare', 'prepare', 'postprepare', 'prepublish', 'prepack', 'postpack', 'dependencies'];

/** `npm_config_*` of an outer `npm test` (say `--silent`) would change what the inner npm prints. */
function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key)));
}

function run(command: string, args: string[], cwd: string): Promise<string> {
  return new Promise((done, fail) => {
    execFile(command, args, { cwd, env: cleanEnv(), timeout: 300_000, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      if (error) fail(new Error(`${command} ${args.join(' ')} failed in ${cwd}:\n${stdout}\n${stderr}`));
      else done(stripVTControlCharacters(`${stdout}\n${stderr}`));
    });
  });
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((file) => statSync(join(dir, file)).isFile());
}

/** The relative link targets in a Markdown text (inline and reference links), outside code. */
function relativeLinks(markdown: string): string[] {
  const prose = markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');
  const targets = [...prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g), ...prose.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm)].map((m) => m[1]);
  return targets.filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target) && !target.startsWith('#'));
}

let work: string;
let unpacked: string;
let tarball: string;
beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'zk-lock-package-'));
  await run('npm', ['pack', '--ignore-scripts', '--pack-destination', work], root);
  tarball = join(work, readdirSync(work).find((file) => file.endsWith('.tgz'))!);
  await run('tar', ['-xzf', tarball, '-C', work], work);
  unpacked = join(work, 'package');
}, 120_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe('the packed package', () => {
  it('has no script that runs (or asks for approval) when a consumer installs it, and nothing native to build', () => {
    const manifest = JSON.parse(readFileSync(join(unpacked, 'package.json'), 'utf8')) as { scripts?: Record<string, string>; gypfile?: boolean };
    expect(Object.keys(manifest.scripts ?? {}).filter((name) => CONSUMER_LIFECYCLE.includes(name))).toEqual([]);
    expect(manifest.gypfile).toBeUndefined();
    // npm runs `node-gyp rebuild` on install for any package with a binding.gyp at its root.
    expect(existsSync(join(unpacked, 'binding.gyp'))).toBe(false);
  });

  it('carries the MIT licence and says where the project lives', () => {
    const manifest = JSON.parse(readFileSync(join(unpacked, 'package.json'), 'utf8')) as Record<string, unknown>;
    expect(manifest.license).toBe('MIT');
    expect(readFileSync(join(unpacked, 'LICENSE'), 'utf8')).toMatch(/^MIT License\n\nCopyright \(c\) .+ The nestjs-zk-lock authors\n/);
    expect(manifest.repository).toMatchObject({ type: 'git', url: expect.stringMatching(/^git\+https:\/\/github\.com\/.+\.git$/) });
    expect(manifest.homepage).toEqual(expect.stringMatching(/^https:\/\//));
    expect(manifest.bugs).toMatchObject({ url: expect.stringMatching(/^https:\/\/.+\/issues$/) });
  });

  it('resolves every relative link of its Markdown files (README, CHANGELOG, docs) to a file it ships', () => {
    const markdown = filesUnder(unpacked).filter((file) => file.endsWith('.md'));
    expect(markdown).toEqual(expect.arrayContaining(['README.md', 'CHANGELOG.md', join('docs', 'configuration.md')]));
    const dead: string[] = [];
    for (const file of markdown) {
      for (const link of relativeLinks(readFileSync(join(unpacked, file), 'utf8'))) {
        const target = resolve(dirname(join(unpacked, file)), decodeURIComponent(link.replace(/[#?].*$/, '')));
        if (relative(unpacked, target).startsWith('..') || !existsSync(target)) dead.push(`${file}: ${link}`);
      }
    }
    expect(dead).toEqual([]);
  });

  it('installs into an empty project with npm without an install-script warning', async () => {
    const app = join(work, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
    const output = await run('npm', ['install', tarball, '--no-audit', '--no-fund', '--loglevel=warn'], app);
    expect(existsSync(join(app, 'node_modules/nestjs-zk-lock/package.json'))).toBe(true);
    expect(output.split('\n').filter((line) => /install-scripts|allowScripts|approve/i.test(line))).toEqual([]);
  }, 300_000);
});
