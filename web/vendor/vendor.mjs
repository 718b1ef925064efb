#!/usr/bin/env node
// Vendors the web UI's third-party browser libraries from the npm registry.
//
//   node web/vendor/vendor.mjs           # (re)write web/vendor/<name>-<version>/
//   node web/vendor/vendor.mjs --check   # compare them with the registry's; exit 1 on a difference
//
// It installs the exact versions of package.json, verified against the
// integrity hashes of package-lock.json (`npm ci --ignore-scripts`, in a
// temporary directory), and copies the files the UI loads (FILES below)
// with their licence files into one directory per package, named with
// the package's version, so that a new version is a new URL (the server
// serves them with a year of immutable caching). After a version change,
// update the import paths in web/app.js and web/markdown.js, the
// <link>s of web/index.html and the VENDOR table of
// crates/chatd-api/src/web.rs (its tests list what is missing).
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const check = process.argv.includes('--check');

// package -> { dir: the vendored directory's name before "-<version>",
// files: [[path in the package, name in web/vendor/<dir>-<version>/]] }.
const FILES = {
  marked: {
    dir: 'marked',
    files: [
      ['lib/marked.esm.js', 'marked.esm.js'],
      ['LICENSE', 'LICENSE'],
    ],
  },
  dompurify: {
    dir: 'dompurify',
    files: [
      ['dist/purify.min.js', 'purify.min.js'],
      // Dual-licensed: Apache-2.0 (LICENSE) or MPL-2.0 (LICENSE-MPL).
      ['LICENSE', 'LICENSE'],
      ['LICENSE-MPL', 'LICENSE-MPL'],
    ],
  },
  '@highlightjs/cdn-assets': {
    dir: 'highlight.js',
    files: [
      // The "common" build: the core and its 36 common languages, one ES module.
      // The a11y themes are designed for WCAG AA contrast.
      ['es/highlight.min.js', 'highlight.min.js'],
      ['styles/a11y-light.min.css', 'a11y-light.min.css'],
      ['styles/a11y-dark.min.css', 'a11y-dark.min.css'],
      ['LICENSE', 'LICENSE'],
    ],
  },
};

const manifest = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));
const work = mkdtempSync(join(tmpdir(), 'chatd-vendor-'));
let differences = 0;
try {
  for (const name of ['package.json', 'package-lock.json']) copyFileSync(join(here, name), join(work, name));
  execFileSync('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd: work,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  for (const [pkg, spec] of Object.entries(FILES)) {
    const version = manifest.dependencies[pkg];
    if (!version) throw new Error(`${pkg} is not in web/vendor/package.json`);
    const installed = JSON.parse(readFileSync(join(work, 'node_modules', pkg, 'package.json'), 'utf8')).version;
    if (installed !== version) throw new Error(`npm installed ${pkg}@${installed}, package.json pins ${version}`);
    const target = `${spec.dir}-${version}`;
    const dest = join(here, target);
    if (check) {
      for (const [from, to] of spec.files) {
        const want = readFileSync(join(work, 'node_modules', pkg, from));
        const path = join(dest, to);
        if (!existsSync(path) || !want.equals(readFileSync(path))) {
          console.error(`differs from ${pkg}@${version}/${from}: web/vendor/${target}/${to}`);
          differences += 1;
        }
      }
      continue;
    }
    // Drop other versions of this package, then write this one.
    for (const entry of readdirSync(here)) {
      if (entry.startsWith(`${spec.dir}-`) && entry !== target) rmSync(join(here, entry), { recursive: true });
    }
    rmSync(dest, { recursive: true, force: true });
    mkdirSync(dest, { recursive: true });
    for (const [from, to] of spec.files) copyFileSync(join(work, 'node_modules', pkg, from), join(dest, to));
    writeFileSync(join(dest, 'VERSION'), `${pkg}@${version}\n`);
    console.log(`web/vendor/${target}: ${spec.files.map(([, to]) => to).join(', ')}`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
if (check) {
  if (differences > 0) process.exit(1);
  console.log('web/vendor matches the pinned packages');
}
