// `healthkernel serve --listen unix:PATH`: several hosts share one live kernel.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { statSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
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
  const start = Date.UTC(2018, 0, 1); // Screen Time's date floor; 3,000 days, each claimed twice with other minutes
  for (let i = 0; i < count; i++) {
    const date = new Date(start + (i % 3000) * 86_400_000).toISOString().slice(0, 10);
    busy.send({ id: i, method: 'screentime.claim', params: { auth, date, minutes: 1 + Math.floor(i / 3000) } });
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
  const started = Date.now();
  const refused = await call(['kernel.info', '--connect', join(dir, 'missing.sock'), '--connect-wait', '0.3']);
  assert.equal(refused.code, 1, 'no kernel there: the call failed (2 is for configuration errors)');
  assert.match(refused.stderr, /cannot connect to .*missing\.sock: No such file or directory \(is a kernel serving/);
  assert.ok(Date.now() - started >= 300, 'it kept trying for --connect-wait');
});

test('call --connect waits for a socket that is about to appear (a kernel started on the line before)', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'late.sock');
  const caller = call(['kernel.info', '--connect', `unix:${path}`]);
  await new Promise((resolve) => setTimeout(resolve, 700));
  const k = spawn(binary, ['serve', '--memory-only', '--listen', `unix:${path}`], { env: { ...process.env, ...env }, stdio: ['pipe', 'ignore', 'ignore'] });
  t.after(() => { k.stdin.end(); });
  const answered = await caller;
  assert.equal(answered.code, 0, answered.stderr);
  assert.equal(JSON.parse(answered.stdout).name, 'healthkernel');
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
  { stdio: ['ignore', 'pipe', 'inherit'], detached: true });
  // runuser keeps its child in a session of its own: end the whole process group, or node waits on it.
  t.after(() => { try { process.kill(-squatter.pid, 'SIGKILL'); } catch {} });
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

/** Resident memory of a process, in bytes. */
const rss = (pid) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
/** Memory a process has mapped, resident or not (a buffer kept but not touched counts here only). */
const mapped = (pid) => Number(/VmSize:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) * 1024;
/** CPU time a process has used, in clock ticks (1/100 s). */
const cpuTicks = (pid) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return Number(f[11]) + Number(f[12]); };

// Issue "Security and robustness defects", item 9.
test('socket memory: unfinished lines of all connections are bounded, and a long line\'s buffer is released', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'kernel.sock');
  const child = spawn(binary, ['serve', '--memory-only', '--no-stdin', '--listen', `unix:${path}`, '--max-input-bytes', String(16 << 20)],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let stderr = '';
  child.stderr.on('data', (c) => { stderr += c; });
  await eventually(() => existsSync(path), 10_000, 'the socket');
  const before = rss(child.pid);
  // Eight connections each send 3 MiB of a line they never end: 24 MiB against a 16 MiB budget.
  const hogs = await Promise.all(Array.from({ length: 8 }, () => open(path)));
  for (const h of hogs) h.socket.on('error', () => {}); // cut: ECONNRESET, EPIPE
  const closed = hogs.map((h) => new Promise((resolve) => h.socket.on('close', resolve)));
  for (const h of hogs) h.socket.write('{"jsonrpc":"2.0","id":1,"method":"kernel.info","params":{"x":"' + 'x'.repeat(3 << 20));
  await eventually(() => (stderr.match(/unfinished request line/g) ?? []).length >= 3, 10_000, 'connections over the budget to be cut');
  const settled = await Promise.race([Promise.any(closed).then(() => true), new Promise((r) => setTimeout(r, 5000, false))]);
  assert.ok(settled, 'a cut connection is closed');
  // The kernel serves on, and a connection within the budget still finishes its line.
  const fresh = await open(path);
  fresh.send({ id: 2, method: 'kernel.info' });
  assert.equal((await fresh.answer(2)).result.name, 'healthkernel');
  for (const h of hogs) h.socket.destroy();
  // One 12 MiB line, answered; its buffer is not kept for the connection's lifetime.
  const settledRSS = rss(child.pid);
  const settledSize = mapped(child.pid);
  fresh.socket.write(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'kernel.info', params: { x: 'y'.repeat(12 << 20) } }) + '\n');
  assert.equal((await fresh.answer(3)).error.data.reason, 'unknown_field');
  // The memory goes back on a parser thread at nice 19 after the answer: on a busy machine that can
  // take a while, so the test waits for it (a buffer kept for the connection's life never goes back).
  const released = () => mapped(child.pid) < settledSize + (1 << 20) && rss(child.pid) < settledRSS + (8 << 20);
  await eventually(released, 20_000, 'the long line\'s memory to be released').catch(() => {});
  assert.ok(mapped(child.pid) < settledSize + (1 << 20), `mapped ${mapped(child.pid) >> 20} MiB after the long line, ${settledSize >> 20} MiB before it`);
  assert.ok(rss(child.pid) < settledRSS + (8 << 20), `resident ${rss(child.pid) >> 20} MiB after the long line, ${settledRSS >> 20} MiB before it`);
  fresh.socket.destroy();
});

test('a long line on one connection never holds a short one on another (#39 item 1): it is parsed on a parser thread', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'kernel.sock');
  const child = spawn(binary, ['serve', '--memory-only', '--no-stdin', '--listen', `unix:${path}`, '--max-line-bytes', String(64 << 20)],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
  t.after(() => child.kill('SIGKILL'));
  await eventually(() => existsSync(path), 10_000, 'the socket');
  const long = await open(path);
  const short = await open(path);
  t.after(() => { long.socket.destroy(); short.socket.destroy(); });
  // About 40 MB of small objects: parsing it takes a good part of a second.
  const pad = Array.from({ length: 700_000 }, (_, i) => ({ i, v: 'abcdefghij', n: [1, 2, 3] }));
  const text = JSON.stringify({ jsonrpc: '2.0', id: 'long', method: 'kernel.info', params: { pad } }) + '\n';
  // All of the long line but its newline, given time to be read; then the newline and the short line
  // together: the long one is complete first, and a kernel parsing it where it reads would answer it first.
  await new Promise((resolve) => long.socket.write(text.slice(0, -1), resolve));
  await new Promise((resolve) => setTimeout(resolve, 500));
  long.socket.write('\n');
  short.send({ id: 'short', method: 'kernel.info' });
  const shortAnswer = await short.answer('short');
  const longAnswered = long.lines.some((l) => l.id === 'long');
  assert.equal(shortAnswer.result.name, 'healthkernel');
  assert.equal(longAnswered, false, 'the short line was answered while the long one was still being parsed');
  assert.equal((await long.answer('long')).error.data.reason, 'unknown_field');
  // Lines of one connection keep their order behind a long one.
  long.socket.write(text.replace('"long"', '"long2"') + JSON.stringify({ jsonrpc: '2.0', id: 'after', method: 'kernel.info' }) + '\n');
  await long.answer('after');
  const order = long.lines.map((l) => l.id).filter((id) => id === 'long2' || id === 'after');
  assert.deepEqual(order, ['long2', 'after']);
});

test('descriptors exhausted: accept backs off with a log line instead of spinning, and recovers', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'kernel.sock');
  const child = spawn('/bin/sh', ['-c', `ulimit -n 24 && exec "$0" serve --memory-only --no-stdin --listen unix:${path}`, binary],
    { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let stderr = '';
  child.stderr.on('data', (c) => { stderr += c; });
  await eventually(() => existsSync(path), 10_000, 'the socket');
  const sockets = [];
  for (let i = 0; i < 40; i++) {
    const s = connect(path);
    s.on('error', () => {});
    sockets.push(s);
  }
  await eventually(() => /cannot accept socket connections: Too many open files/.test(stderr), 10_000, 'the log line');
  const start = cpuTicks(child.pid);
  await new Promise((r) => setTimeout(r, 1000));
  const used = cpuTicks(child.pid) - start;
  assert.ok(used < 40, `the kernel used ${used}/100 s of CPU in 1 s while descriptors were exhausted`);
  for (const s of sockets) s.destroy();
  await eventually(() => /accepting socket connections again/.test(stderr), 10_000, 'accepting again');
  const c = await open(path);
  c.send({ id: 1, method: 'kernel.info' });
  assert.equal((await c.answer(1)).result.name, 'healthkernel');
  c.socket.destroy();
});
