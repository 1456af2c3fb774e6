// The READMEs (the project's and the Node client's), run as a newcomer would run them: every ```sh and
// ```js block, in a fresh shell or Node process, with the test run's healthkernel first on PATH, from the
// repository's root. A block passes
// when it exits 0, prints exactly what the README shows for it, line by line and in order, and leaves
// nothing new in the repository (temporary files belong in a temporary folder). What a block shows is
// the ```output block after it, or else the comment lines right under its commands (`cmd` then
// `# {"id":1}` with no blank line between); in a shown line "…" stands for any text, and a line that is
// only "…" for any number of lines. A block that shows nothing must print nothing. Node blocks run in a temporary app that
// installed the client from its `npm pack` tarball, so `import ... from 'healthkernel'` is what another
// app would write. A ```json block marked `<!-- readme-test: config -->` must start a kernel as its
// config file. A block marked `<!-- readme-test: skip REASON -->` is not run; the reasons are printed.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const binary = resolve(process.env.HEALTHKERNEL_BIN ?? join(root, '.build/debug/healthkernel'));

/** The README's fenced blocks with what marks them. */
export function readmeBlocks(markdown) {
  const lines = markdown.split('\n');
  const blocks = [];
  let marker = null;
  for (let i = 0; i < lines.length; i++) {
    const fence = lines[i].match(/^```(\w*)\s*$/);
    const mark = lines[i].match(/^<!-- readme-test: (skip|config)\s*(.*?)\s*-->$/);
    if (mark) { marker = { kind: mark[1], reason: mark[2] }; continue; }
    if (!fence) { if (lines[i].trim() !== '') marker = null; continue; }
    const start = i;
    const body = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) body.push(lines[i]);
    const block = { lang: fence[1], code: body.join('\n') + '\n', line: start + 1, marker };
    if (block.lang === 'output' && blocks.length) blocks[blocks.length - 1].output = body;
    else blocks.push(block);
    marker = null;
  }
  return blocks;
}

/** Whether `expected` (with "…" for any text) is `line`. */
function matches(expected, line) {
  const pattern = expected.split('…').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*');
  return new RegExp(`^${pattern}$`).test(line);
}

/**
 * Lines the block says its commands print: the comment lines right under a command, up to the next blank
 * line or command (a comment after a blank line explains what follows instead).
 */
export function commentedOutput(code) {
  const out = [];
  let underCommand = false;
  for (const raw of code.split('\n')) {
    const line = raw.trim();
    if (line === '') { underCommand = false; continue; }
    if (line.startsWith('#')) {
      if (underCommand) out.push(line.replace(/^# ?/, ''));
      continue;
    }
    underCommand = true;
  }
  return out;
}

/** Where `printed` differs from `shown` (null when it is what the README shows). */
export function difference(shown, printed) {
  const memo = new Map();
  // Whether shown[i...] can stand for printed[j...]; "…" alone takes any number of lines.
  const fits = (i, j) => {
    const key = i * (printed.length + 1) + j;
    if (memo.has(key)) return memo.get(key);
    let ok;
    if (i === shown.length) ok = j === printed.length;
    else if (shown[i] === '…') ok = fits(i + 1, j) || (j < printed.length && fits(i, j + 1));
    else ok = j < printed.length && matches(shown[i], printed[j]) && fits(i + 1, j + 1);
    memo.set(key, ok);
    return ok;
  };
  if (fits(0, 0)) return null;
  let k = 0;
  while (k < shown.length && k < printed.length && shown[k] !== '…' && matches(shown[k], printed[k])) k++;
  return `line ${k + 1}: shown ${JSON.stringify(shown[k] ?? '(nothing more)')}, printed ${JSON.stringify(printed[k] ?? '(nothing more)')}`;
}

/** The repository's untracked and ignored entries outside build folders. */
function repositoryLeftovers() {
  const out = execFileSync('git', ['status', '--porcelain', '--ignored', '--untracked-files=normal'], { cwd: root }).toString();
  return new Set(out.split('\n').filter((l) => /^(\?\?|!!) /.test(l)).map((l) => l.slice(3))
    .filter((p) => !/^\.build[^/]*\/|^dist\/|node_modules\//.test(p)));
}

// The project's README and the Node client's, whose blocks are as much a promise.
const blocks = ['README.md', 'clients/node/README.md'].flatMap((file) =>
  readmeBlocks(readFileSync(join(root, file), 'utf8')).map((block) => ({ ...block, file })));
const scratch = mkdtempSync(join(tmpdir(), 'hk-readme-'));
chmodSync(scratch, 0o755);  // scripts/pg-server runs PostgreSQL as the postgres user, in a folder below it
const bin = join(scratch, 'bin');
const app = join(scratch, 'app');
const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, HEALTHKERNEL_BIN: binary, TMPDIR: scratch };
delete env.HEALTHKERNEL_JWT_SECRET;
delete env.HEALTHKERNEL_CONFIG;
process.on('exit', () => rmSync(scratch, { recursive: true, force: true }));

before(() => {
  mkdirSync(bin);
  symlinkSync(binary, join(bin, 'healthkernel'));
  // What the README's Node section tells another app to do: pack the client, install the tarball.
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'readme-app', private: true, type: 'module' }));
  const npm = (args, cwd) => execFileSync('npm', [...args, '--offline', '--no-audit', '--no-fund', '--loglevel=error'],
    { cwd, env: { ...process.env, npm_config_cache: join(scratch, 'npm-cache') } }).toString();
  const packed = JSON.parse(npm(['pack', join(root, 'clients/node'), '--pack-destination', scratch, '--json'], scratch))[0];
  npm(['install', join(scratch, packed.filename)], app);
});

test('the comparison itself: comments under commands are output, "…" stands for text or for lines', () => {
  assert.deepEqual(commentedOutput('# explains\ncmd\n# {"a":1}\n# 2\n\n# explains again\ncmd2 # trailing\n'), ['{"a":1}', '2']);
  assert.equal(difference(['a', '… b'], ['a', 'x b']), null);
  assert.equal(difference(['a', '…', 'z'], ['a', 'b', 'c', 'z']), null);
  assert.equal(difference(['a', '…', 'z'], ['a', 'z']), null);
  assert.match(difference(['a', 'b'], ['a', 'b', 'c']), /line 3/);
  assert.match(difference(['a', 'c'], ['a', 'b']), /line 2/);
  assert.match(difference(['b', 'a'], ['a', 'b']), /line 1/);
  assert.match(difference([], ['stray']), /line 1/);
});

test('every fixed socket path the READMEs name is the one the package serves', () => {
  const unit = readFileSync(join(root, 'packaging/healthkernel.service'), 'utf8');
  const served = /--listen unix:(\S+)/.exec(unit)[1];
  for (const file of ['README.md', 'clients/node/README.md']) {
    for (const [path] of readFileSync(join(root, file), 'utf8').matchAll(/\/(?:run|var)\/[\w/.-]*\.sock\b/g)) {
      if (path.startsWith('/run/app/')) continue;  // the README's example of an app's own socket
      assert.equal(path, served, `${file} names ${path}, but the package serves ${served}`);
    }
  }
});

test('the READMEs have runnable blocks, and say why they skip the others', () => {
  const runnable = blocks.filter((b) => (b.lang === 'sh' || b.lang === 'js') && b.marker?.kind !== 'skip');
  assert.ok(runnable.length >= 8, `only ${runnable.length} runnable blocks`);
  for (const b of blocks.filter((b) => b.marker?.kind === 'skip')) {
    assert.ok(b.marker.reason.length > 10, `${b.file} line ${b.line}: a skipped block needs a reason`);
    process.stderr.write(`${b.file} line ${b.line} (${b.lang}) skipped: ${b.marker.reason}\n`);
  }
  for (const b of blocks.filter((b) => b.lang === 'sh' || b.lang === 'js')) {
    assert.ok(!/\.\.\/shared\//.test(b.code), `${b.file} line ${b.line} uses ../shared, which a clone does not have`);
  }
});

for (const block of blocks) {
  if (block.marker?.kind === 'skip') continue;
  if (block.lang === 'json' && block.marker?.kind === 'config') {
    test(`${block.file} line ${block.line}: the configuration example starts a kernel`, () => {
      const dir = mkdtempSync(join(scratch, 'config-'));
      writeFileSync(join(dir, 'healthkernel.json'), block.code);
      const r = spawnSync(binary, ['call', 'kernel.info', '--memory-only', '--config', join(dir, 'healthkernel.json')],
        { env, cwd: dir, timeout: 60_000 });
      assert.equal(r.status, 0, r.stderr.toString());
    });
    continue;
  }
  if (block.lang !== 'sh' && block.lang !== 'js') continue;
  test(`${block.file} line ${block.line} (${block.lang}) runs as shown`, () => {
    const before = repositoryLeftovers();
    let r;
    if (block.lang === 'sh') {
      r = spawnSync('bash', ['-euo', 'pipefail', '-c', block.code], { cwd: root, env, timeout: 180_000 });
    } else {
      const file = join(app, `block-${block.line}.mjs`);
      writeFileSync(file, block.code);
      r = spawnSync(process.execPath, [file], { cwd: app, env, timeout: 120_000 });
    }
    const stdout = r.stdout.toString();
    const context = `\n--- stdout\n${stdout}--- stderr\n${r.stderr.toString().slice(-4000)}`;
    assert.equal(r.status, 0, `exit ${r.status ?? r.signal}${context}`);
    const printed = stdout.split('\n');
    if (printed.at(-1) === '') printed.pop();
    const shown = block.output ?? commentedOutput(block.code);
    const differs = difference(shown, printed);
    assert.equal(differs, null, `it printed other than the README shows (${differs})${context}`);
    const left = [...repositoryLeftovers()].filter((p) => !before.has(p));
    assert.deepEqual(left, [], 'the block left files in the repository');
  });
}
