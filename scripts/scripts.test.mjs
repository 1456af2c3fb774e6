// Every script the README names runs in the test command at least once, for real (#51 item 19:
// scripts/smoke-upload had a bash syntax error nothing noticed). Those that build use the test run's
// binary through HEALTHKERNEL_BIN. scripts/test is the test command itself; scripts/package,
// test-package, pg-server, fuzz and mcp-test run from it; test-ios-upload.mjs from the example server's
// tests; appstore-test-purchases from the README's blocks. scripts/sanitize runs its argument check
// here only: a sanitized build of the suite takes longer than the whole test command.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { binary, root } from '../clients/node/test/support.mjs';

const user = '3f0e9a52-3c1e-4b8e-9a54-0f6f3f6c2a11';

function temporary(t) {
  const dir = mkdtempSync(join(tmpdir(), 'hk-scripts-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const run = (file, args, env) => new Promise((resolve) => execFile(join(root, file), args, { env: { ...process.env, HEALTHKERNEL_BIN: binary, ...env } },
  (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr })));

test('scripts/smoke-upload turns the connection on and uploads one day through the kernel', async (t) => {
  const dataDir = join(temporary(t), 'data');
  const token = execFileSync(binary, ['token', '--user', user, '--data-dir', dataDir]).toString().trim();
  const r = await run('scripts/smoke-upload', [], { ACCESS_TOKEN: token, DATA_DIR: dataDir, ENABLE: '1', DATE: '2026-11-02', MINUTES: '42' });
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { date: '2026-11-02', status: 'unclaimed', deltaMinutes: null, penaltyPoints: 0 });
  const missing = await run('scripts/smoke-upload', [], { ACCESS_TOKEN: '', DATA_DIR: dataDir });
  assert.notEqual(missing.code, 0);
  assert.match(missing.stderr, /set ACCESS_TOKEN/);
});

test('scripts/run serves JSON-RPC on stdin and stdout over DATA_DIR', async (t) => {
  const dataDir = join(temporary(t), 'data');
  const child = spawn(join(root, 'scripts/run'), [], { env: { ...process.env, HEALTHKERNEL_BIN: binary, DATA_DIR: dataDir } });
  let out = '';
  child.stdout.on('data', (c) => { out += c; });
  child.stdin.end('{"jsonrpc":"2.0","id":1,"method":"kernel.info"}\n');
  const code = await new Promise((resolve) => child.on('close', resolve));
  assert.equal(code, 0);
  assert.equal(JSON.parse(out).result.name, 'healthkernel');
  assert.ok(readFileSync(join(dataDir, 'LOCK')), 'the data dir is DATA_DIR');
});

test('scripts/web starts the example server, DEMO=1 fills a dashboard, SIGTERM stops it cleanly', async (t) => {
  const dataDir = join(temporary(t), 'data');
  const child = spawn(join(root, 'scripts/web'), [], { env: { ...process.env, HEALTHKERNEL_BIN: binary, DATA_DIR: dataDir, PORT: '0', DEMO: '1' } });
  t.after(() => child.kill('SIGKILL'));
  let err = '';
  const link = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no dashboard link: ${err}`)), 60_000);
    child.stderr.on('data', (c) => {
      err += c;
      const m = /dashboard: (http\S+)\/dashboard#token=(\S+)/.exec(err);
      if (m) { clearTimeout(timer); resolve({ url: m[1], token: m[2] }); }
    });
  });
  const res = await fetch(`${link.url}/api/dashboard?days=7`, { headers: { authorization: `Bearer ${link.token}` } });
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.ok(JSON.stringify(body).length > 200, 'the demo user has data');
  child.kill('SIGTERM');
  const code = await new Promise((resolve) => child.on('close', resolve));
  assert.equal(code, 0, err);
});

test('scripts/set-version sets the release in every place it names', async (t) => {
  const copy = temporary(t);
  for (const file of ['scripts/set-version', 'Sources/Kernel/Version.swift', 'clients/node/package.json', 'protocol/openrpc.json',
                      'clients/node/scripts/gen-types.mjs']) {
    mkdirSync(dirname(join(copy, file)), { recursive: true });
    cpSync(join(root, file), join(copy, file));
  }
  const r = await new Promise((resolve) => execFile(join(copy, 'scripts/set-version'), ['9.8.7'], (error, stdout, stderr) => resolve({ error, stdout, stderr })));
  assert.equal(r.error, null, r.stderr);
  assert.match(readFileSync(join(copy, 'Sources/Kernel/Version.swift'), 'utf8'), /"9\.8\.7"/);
  assert.equal(JSON.parse(readFileSync(join(copy, 'clients/node/package.json'), 'utf8')).version, '9.8.7');
  assert.equal(JSON.parse(readFileSync(join(copy, 'protocol/openrpc.json'), 'utf8')).info.version, '9.8.7');
  assert.ok(readFileSync(join(copy, 'clients/node/index.d.ts'), 'utf8').length > 1000, 'the types were written');
  const bad = await new Promise((resolve) => execFile(join(copy, 'scripts/set-version'), ['nine'], (error, stdout, stderr) => resolve({ error, stderr })));
  assert.equal(bad.error?.code, 2);
});

test('scripts/sanitize checks its mode before doing anything', async () => {
  const r = await run('scripts/sanitize', ['nope'], {});
  assert.equal(r.code, 2);
  assert.match(r.stderr, /usage: scripts\/sanitize address\|thread/);
});

test('scripts/binary.sh: HEALTHKERNEL_BIN, else a binary here (built only when there is none), else the three ways to get one', (t) => {
  const dir = temporary(t);
  mkdirSync(join(dir, 'Sources'));
  const find = (env) => {
    try {
      const out = execFileSync('bash', ['-c', `. ${join(root, 'scripts/binary.sh')}; find_binary; echo "$HEALTHKERNEL_BIN"`],
        { cwd: dir, env: { PATH: '/usr/bin:/bin', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
      return { code: 0, out: out.toString().trim() };
    } catch (e) {
      return { code: e.status, out: e.stderr.toString() };
    }
  };
  assert.deepEqual(find({ HEALTHKERNEL_BIN: '/opt/hk' }), { code: 0, out: '/opt/hk' });
  // No binary and no Swift (PATH without the toolchain): exit 2, naming the three ways.
  const none = find({});
  if (none.code === 0) return t.skip(`healthkernel is on /usr/bin:/bin here (${none.out})`);
  assert.equal(none.code, 2);
  for (const way of [/release tarball/, /Debian package/, /npm tarball/]) assert.match(none.out, way);
  // A binary built here is used as it is when there is no Swift to build a newer one.
  mkdirSync(join(dir, '.build/release'), { recursive: true });
  cpSync(binary, join(dir, '.build/release/healthkernel'));
  assert.deepEqual(find({}), { code: 0, out: join(dir, '.build/release/healthkernel') });
});
