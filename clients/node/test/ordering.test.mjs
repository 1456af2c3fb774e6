// Slow work (password hashing) off the serving thread: completion order, read order, independent socket
// connections, concurrent refreshes, and no acknowledged write lost to kill -9 during a sign-in burst.
// Every check compares what was answered before what, never how long anything took.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Kernel, KernelExitError } from '../index.mjs';
import { binary, env, temporaryDirectory, token, userA, openSocket } from './support.mjs';

const password = (i) => `password-${i}-long-enough`;
const email = (i) => `user${i}@example.com`;

/** Creates `n` accounts through `k`; resolves with their sessions. */
function accounts(k, n, from = 0) {
  return Promise.all(Array.from({ length: n }, (_, i) => k.call('auth.signUp', { email: email(from + i), password: password(from + i) })));
}

/** Sends calls in one go and records the order their answers arrive in. */
async function arrivalOrder(k, calls) {
  const order = [];
  await Promise.all(calls.map(([name, method, params]) => k.call(method, params).then(() => order.push(name))));
  return order;
}

test('completion order (the client default): kernel.info behind 10 sign-ins is answered before the last of them', async (t) => {
  const k = await Kernel.spawn({ binary, env, args: ['serve', '--memory-only'] });
  t.after(() => k.close());
  await accounts(k, 10);
  const calls = Array.from({ length: 10 }, (_, i) => [`signIn${i}`, 'auth.signIn', { email: email(i), password: password(i) }]);
  const order = await arrivalOrder(k, [...calls, ['info', 'kernel.info']]);
  assert.ok(order.indexOf('info') < order.indexOf('signIn9'), order.join(' '));
  assert.equal(order[0], 'info', 'nothing that was read before it held kernel.info up');
});

test('read order: answers keep the order requests were read, under the same load', async (t) => {
  const k = await Kernel.spawn({ binary, env, args: ['serve', '--memory-only'], ordering: 'read' });
  t.after(() => k.close());
  await accounts(k, 10);
  const calls = Array.from({ length: 10 }, (_, i) => [`signIn${i}`, 'auth.signIn', { email: email(i), password: password(i) }]);
  const order = await arrivalOrder(k, [...calls, ['info', 'kernel.info']]);
  assert.deepEqual(order, [...calls.map((c) => c[0]), 'info']);
});

test('serve --ordering completion: stdout in completion order for a host that asks at start', async (t) => {
  const k = await Kernel.spawn({ binary, env, args: ['serve', '--memory-only', '--ordering', 'completion'], ordering: 'read' });
  t.after(() => k.close());
  await accounts(k, 4);
  const calls = Array.from({ length: 4 }, (_, i) => [`signIn${i}`, 'auth.signIn', { email: email(i), password: password(i) }]);
  const order = await arrivalOrder(k, [...calls, ['info', 'kernel.info']]);
  assert.equal(order[0], 'info');
});

const open = (path) => openSocket(path, { timeout: 60_000 });

test('two socket connections: B is answered while A\'s sign-ins still run; concurrent refreshes share one session', async (t) => {
  const dir = temporaryDirectory(t);
  const path = join(dir, 'kernel.sock');
  const k = await Kernel.spawn({ binary, env, args: ['serve', '--data-dir', join(dir, 'data'), '--listen', `unix:${path}`] });
  t.after(() => k.close());
  const sessions = await accounts(k, 20);
  const a = await open(path);
  const b = await open(path);
  t.after(() => { a.socket.destroy(); b.socket.destroy(); });

  // A reads in read order (the default), so its answers arrive together after the last sign-in.
  a.send(...sessions.map((_, i) => ({ id: i, method: 'auth.signIn', params: { email: email(i), password: password(i) } })));
  // Give A's line a head start (B only has to be answered before A's last sign-in; reading B first would pass too).
  await new Promise((r) => setTimeout(r, 50));
  b.send({ id: 'info', method: 'kernel.info' }, { id: 'day', method: 'screentime.day', params: { auth: token({ user: userA }), date: '2025-01-02' } });
  await b.answer('info');
  await b.answer('day');
  const answeredToA = a.lines.length;
  assert.ok(answeredToA < 20, `B was answered while A still waited (A had ${answeredToA} of 20)`);
  for (let i = 0; i < 20; i++) assert.ok((await a.answer(i)).result.accessToken);

  // The same refresh token on both connections at once (two tabs): both get the session the first created.
  const refreshToken = sessions[0].refreshToken;
  a.send({ id: 'r', method: 'auth.refresh', params: { refreshToken } });
  b.send({ id: 'r', method: 'auth.refresh', params: { refreshToken } });
  const [ra, rb] = [await a.answer('r'), await b.answer('r')];
  assert.ok(ra.result && rb.result, JSON.stringify([ra, rb]));
  assert.equal(ra.result.refreshToken, rb.result.refreshToken);
  for (const r of [ra, rb]) assert.equal((await k.call('auth.user', { auth: r.result.accessToken })).email, email(0));
});

test('kill -9 during a sign-in burst loses no acknowledged sign-up or write', async (t) => {
  const dataDir = temporaryDirectory(t);
  const k = await Kernel.spawn({ binary, env, args: ['serve', '--data-dir', dataDir] });
  const auth = token({ user: userA });
  const pid = k.pid;
  const signedUp = [];
  const claimed = [];
  const calls = [];
  for (let i = 0; i < 40; i++) {
    calls.push(k.call('auth.signUp', { email: email(i), password: password(i) }).then(() => {
      signedUp.push(i);
      if (signedUp.length === 8) process.kill(pid, 'SIGKILL');
    }, (e) => assert.ok(e instanceof KernelExitError, String(e))));
    for (let j = 0; j < 10; j++) {
      const date = new Date(Date.UTC(2025, 0, 1) + (i * 10 + j) * 86_400_000).toISOString().slice(0, 10);
      calls.push(k.call('screentime.claim', { auth, date, minutes: 30 }).then(() => claimed.push(date),
        (e) => assert.ok(e instanceof KernelExitError, String(e))));
    }
  }
  await Promise.all(calls);
  assert.ok(signedUp.length >= 8 && signedUp.length < 40, `killed mid-burst (${signedUp.length} sign-ups acknowledged)`);
  await k.close();

  const again = await Kernel.spawn({ binary, env, args: ['serve', '--data-dir', dataDir] });
  t.after(() => again.close());
  const signIns = await Promise.allSettled(signedUp.map((i) => again.call('auth.signIn', { email: email(i), password: password(i) })));
  signIns.forEach((s, n) => assert.equal(s.status, 'fulfilled', `acknowledged sign-up ${email(signedUp[n])} survived: ${s.reason?.message}`));
  const days = await Promise.all(claimed.map((date) => again.call('screentime.day', { auth, date })));
  days.forEach((d, n) => assert.equal(d.claimedMinutes, 30, `acknowledged claim ${claimed[n]} survived`));
});
