// `healthkernel serve --listen unix:PATH`: several hosts share one live kernel.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { statSync, existsSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { join } from 'node:path';
import { Kernel } from '../index.mjs';
import { binary, env, temporaryDirectory, token, userA, eventually, openSocket } from './support.mjs';

const open = (path) => openSocket(path);

const call = (args) => new Promise((resolve) => execFile(binary, ['call', ...args], { env: { ...process.env, ...env } },
  (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr })));

test('socket connections are streams of their own beside stdio, sharing data and events', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'kernel.sock');
  const k = await Kernel.spawn({ binary, env, args: ['serve', '--data-dir', join(dir, 'data'), '--listen', `unix:${path}`] });
  t.after(() => k.close());
  assert.equal(statSync(path).mode & 0o777, 0o600, 'only the owner may connect');
  const auth = token({ user: userA });
  const service = token({ role: 'service_role' });
  const a = await open(path);
  const b = await open(path);
  t.after(() => { a.socket.destroy(); b.socket.destroy(); });

  // Each connection answers its own ids, in its own order.
  a.send({ id: 1, method: 'screentime.claim', params: { auth, date: '2025-01-02', minutes: 30 } }, { id: 2, method: 'no.such' });
  b.send({ id: 1, method: 'events.subscribe', params: { auth: service, topics: ['screentime.day'] } });
  assert.equal((await a.answer(1)).result.status, 'unverified');
  assert.equal((await a.answer(2)).error.code, -32601);
  assert.equal((await b.answer(1)).result.subscribed, true);

  // A write through stdio is seen on the sockets and announced to the subscribed socket, and the reverse.
  const stdioChanges = [];
  k.on('events.changed', (c) => stdioChanges.push(c));
  await k.call('events.subscribe', { auth: service, topics: ['screentime.day'] });
  await k.call('screentime.claim', { auth, date: '2025-01-03', minutes: 10 });
  await eventually(() => b.lines.some((l) => l.method === 'events.changed' && l.params.id === '2025-01-03'), 5000, 'the event on socket b');
  a.send({ id: 3, method: 'screentime.history', params: { auth, from: '2025-01-01', to: '2025-01-31' } });
  assert.deepEqual((await a.answer(3)).result.days.map((d) => d.date), ['2025-01-02', '2025-01-03']);
  a.send({ id: 4, method: 'screentime.claim', params: { auth, date: '2025-01-04', minutes: 5 } });
  await a.answer(4);
  await eventually(() => stdioChanges.some((c) => c.id === '2025-01-04'), 5000, 'the event on stdio');
  assert.equal(a.lines.filter((l) => l.method).length, 0, 'a connection that did not subscribe gets no events');

  // `call --connect` goes through the live kernel; opening the held data dir is refused.
  const viaSocket = await call(['screentime.day', '{"date":"2025-01-04"}', '--token', auth, '--connect', `unix:${path}`]);
  assert.equal(viaSocket.code, 0, viaSocket.stderr);
  assert.equal(JSON.parse(viaSocket.stdout).claimedMinutes, 5);
  const direct = await call(['screentime.day', '{"date":"2025-01-04"}', '--token', auth, '--data-dir', join(dir, 'data')]);
  assert.equal(direct.code, 4);

  await k.close();
  assert.equal(existsSync(path), false, 'the socket file is removed at exit');
});

test('a connection that stops reading is cut at its limit; the others go on', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'kernel.sock');
  const k = await Kernel.spawn({ binary, env, args: ['serve', '--memory-only', '--listen', `unix:${path}`, '--max-unread-bytes', '65536'] });
  t.after(() => k.close());
  const cut = [];
  k.on('stderr', (line) => { if (/connection cut/.test(line)) cut.push(line); });
  const auth = token({ user: userA });
  const stalled = await open(path);
  stalled.send({ id: 1, method: 'events.subscribe', params: { auth: token({ role: 'service_role' }) } });
  await stalled.answer(1);
  stalled.socket.pause(); // stops reading: its events pile up in the kernel
  const busy = await open(path);
  t.after(() => { busy.socket.destroy(); stalled.socket.destroy(); });
  const count = 6000;
  const start = Date.UTC(2000, 0, 1);
  for (let i = 0; i < count; i++) {
    const date = new Date(start + i * 86_400_000).toISOString().slice(0, 10);
    busy.send({ id: i, method: 'screentime.claim', params: { auth, date, minutes: 1 } });
  }
  await eventually(() => busy.lines.length >= count, 60_000, 'every answer on the busy connection');
  assert.ok(busy.lines.every((l) => l.result), 'the busy connection was never held up');
  await eventually(() => cut.length === 1, 10_000, 'the stalled connection to be cut');
  stalled.socket.resume();
  await stalled.ended;
  assert.ok(stalled.lines.length < count + 1, 'it did not receive every event');
  assert.equal((await k.call('kernel.info')).name, 'healthkernel', 'stdio still serves');
});

test('--listen refuses a path another kernel listens on, and replaces a stale socket file', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'kernel.sock');
  const first = await Kernel.spawn({ binary, env, args: ['serve', '--memory-only', '--listen', `unix:${path}`] });
  const second = spawn(binary, ['serve', '--memory-only', '--listen', `unix:${path}`], { env: { ...process.env, ...env }, stdio: ['pipe', 'ignore', 'pipe'] });
  let stderr = '';
  second.stderr.on('data', (c) => { stderr += c; });
  const [code] = await once(second, 'exit');
  assert.equal(code, 2);
  assert.match(stderr, /another process \(pid \d+, uid \d+\) is listening/);
  process.kill(first.pid, 'SIGKILL'); // leaves its socket file behind
  await once(first, 'exit');
  assert.ok(existsSync(path));
  const third = await Kernel.spawn({ binary, env, args: ['serve', '--memory-only', '--listen', `unix:${path}`] });
  t.after(() => third.close());
  const c = await open(path);
  c.send({ id: 1, method: 'kernel.info' });
  assert.equal((await c.answer(1)).result.name, 'healthkernel');
  c.socket.destroy();
  writeFileSync(join(dir, 'plain'), 'not a socket');
  const plain = spawn(binary, ['serve', '--memory-only', '--listen', `unix:${join(dir, 'plain')}`], { env: { ...process.env, ...env }, stdio: ['pipe', 'ignore', 'pipe'] });
  let plainErr = '';
  plain.stderr.on('data', (c) => { plainErr += c; });
  assert.equal((await once(plain, 'exit'))[0], 2);
  assert.match(plainErr, /is not a socket/);
  const refused = await call(['kernel.info', '--connect', join(dir, 'missing.sock')]);
  assert.equal(refused.code, 1, 'no kernel there: the call failed (2 is for configuration errors)');
  assert.match(refused.stderr, /cannot connect to .*missing\.sock: No such file or directory \(is a kernel serving/);
});

test('Kernel.connect: several clients share one kernel through its socket', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'kernel.sock');
  const k = await Kernel.spawn({ binary, env, args: ['serve', '--data-dir', join(dir, 'data'), '--listen', `unix:${path}`] });
  t.after(() => k.close());
  const auth = token({ user: userA });
  const first = await Kernel.connect({ path: `unix:${path}` });
  const second = await Kernel.connect({ path });
  await first.call('screentime.claim', { auth, date: '2025-01-02', minutes: 30 });
  assert.equal((await second.call('screentime.day', { auth, date: '2025-01-02' })).claimedMinutes, 30);
  const answers = await Promise.all(Array.from({ length: 2000 }, (_, i) => (i % 2 ? first : second).call('kernel.info').then((r) => r.name)));
  assert.equal(answers.length, 2000);
  assert.deepEqual(await first.close(), { code: null, signal: null, socket: true });
  assert.equal((await second.call('screentime.day', { auth, date: '2025-01-02' })).claimedMinutes, 30, 'one client leaving does not affect the other');
  // The kernel going away rejects calls in flight on its connections.
  const exited = once(second, 'exit');
  process.kill(k.pid, 'SIGSTOP');
  const pending = second.call('kernel.info');
  process.kill(k.pid, 'SIGKILL');
  await assert.rejects(pending, (e) => e.code === 'KERNEL_EXITED' && /closed the connection/.test(e.message));
  await exited;
});

// Issue "Security and robustness defects", item 8: a local user listening first on the path must not
// receive a caller's tokens. Needs a second Unix user: run as root, the squatter runs as `nobody`.
test('socket squatting: call --connect and Kernel.connect refuse a socket another user serves; serve --listen names the squatter', async (t) => {
  if (process.getuid?.() !== 0 || !existsSync('/usr/sbin/runuser')) return t.skip('needs root and runuser to play a second user');
  const { chmodSync, mkdirSync } = await import('node:fs');
  const dir = temporaryDirectory(t);
  chmodSync(dir, 0o755);
  const shared = join(dir, 'shared');
  mkdirSync(shared);
  chmodSync(shared, 0o1777); // like /tmp: anyone may create a file, only its owner may remove it
  const path = join(shared, 'hk.sock');
  const squatter = spawn('/usr/sbin/runuser', ['-u', 'nobody', '--', process.execPath, '-e',
    `const s = require('net').createServer((c) => c.on('data', (d) => { process.stdout.write('GOT ' + d); c.end('{}\\n'); })).listen(${JSON.stringify(path)}, () => process.stdout.write('ready\\n'));`],
  { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => squatter.kill('SIGKILL'));
  let heard = '';
  squatter.stdout.on('data', (d) => { heard += d; });
  await eventually(() => heard.includes('ready'), 10_000, 'the squatter to listen');

  const auth = token({ user: userA });
  const viaCall = await call(['auth.user', '--token', auth, '--connect', path]);
  assert.equal(viaCall.code, 1);
  assert.match(viaCall.stderr, /refusing .*served by uid 65534/);
  await assert.rejects(Kernel.connect({ path, env }), (e) => e.code === 'EUNSAFE' && /belongs to uid 65534/.test(e.message));
  assert.ok(!heard.includes('GOT'), 'the squatter received nothing');

  const serve = await new Promise((resolve) => execFile(binary, ['serve', '--memory-only', '--no-stdin', '--listen', `unix:${path}`],
    { env: { ...process.env, ...env } }, (error, stdout, stderr) => resolve({ code: error?.code, stderr })));
  assert.equal(serve.code, 2);
  assert.match(serve.stderr, /another process \(pid \d+, uid 65534\) is listening on/);
});
