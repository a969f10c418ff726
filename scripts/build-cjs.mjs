// The CommonJS build (dist/cjs), made from the ES module build (dist) so that both come from one
// compile: each module is transpiled to CommonJS, `import.meta.url` becomes this file's URL, and
// the declarations are copied beside it (`dist/cjs/package.json` says "type": "commonjs", so
// TypeScript reads them as CommonJS declarations).
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const dist = fileURLToPath(new URL('../dist/', import.meta.url));
const out = join(dist, 'cjs');
rmSync(out, { recursive: true, force: true });

function* files(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (path !== out) yield* files(path);
    } else yield path;
  }
}

const withoutSourceMap = (text) => text.replace(/^\/\/# sourceMappingURL=.*$/m, '');
for (const file of files(dist)) {
  if (/^cli[.-]/.test(relative(dist, file))) continue; // the command line (cli.ts, cli-*.ts) runs the ES module build
  const target = join(out, relative(dist, file));
  if (file.endsWith('.d.ts')) {
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, withoutSourceMap(readFileSync(file, 'utf8')));
  } else if (file.endsWith('.js')) {
    const source = readFileSync(file, 'utf8').replaceAll('import.meta.url', "require('node:url').pathToFileURL(__filename).href");
    const { outputText } = ts.transpileModule(source, {
      fileName: file,
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
    });
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, withoutSourceMap(outputText));
  }
}
writeFileSync(join(out, 'package.json'), '{\n  "type": "commonjs"\n}\n');
