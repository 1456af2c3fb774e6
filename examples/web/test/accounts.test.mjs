// The routes of an app backend's accounts, deletions and change feed (#55 item 2), end to end through
// the real kernel: each a thin forward with the kernel's errors; and the server on a kernel it did not spawn.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { start } from '../server.mjs';
import { requester } from './support.mjs';
import { binary, env, root, temporaryDirectory, token, eventually } from '../../../clients/node/test/support.mjs';

async function app(t, options = {}) {
  const dir = temporaryDirectory(t);
  const server = await start({ port: 0, dataDir: join(dir, 'data'), binary, serviceToken: token({ role: 'service_role' }), env, log: () => {}, ...options });
  t.after(() => server.close());
  return { server, request: requester(server) };
}

const password = 'correct horse battery staple';

test('sign up, sign in, refresh, read the account, sign out, delete it: each route answers as its kernel method', async (t) => {
  // Routes without a token share the per-address limit (UNAUTHENTICATED_*): raised here, where one address does it all.
  const { request } = await app(t, { limits: { UNAUTHENTICATED_BURST: 100, UNAUTHENTICATED_PER_MINUTE: 6000 } });
  let r = await request('POST', '/api/auth/signup', { body: { email: 'ann@example.com', password } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.tokenType, 'bearer');
  const first = r.body;
  r = await request('POST', '/api/auth/signup', { body: { email: 'ann@example.com', password } });
  assert.equal(r.status, 409);
  assert.equal(r.body.reason, 'email_taken');
  r = await request('POST', '/api/auth/signup', { body: { email: 'bob@example.com', password: 'short' } });
  assert.equal(r.status, 400);
  assert.equal(r.body.field, 'password');
  // The address is the server's to say: a body that names one is refused, as any unknown member.
  r = await request('POST', '/api/auth/signup', { body: { email: 'eve@example.com', password, clientAddress: '10.0.0.1' } });
  assert.equal(r.status, 200, 'the server sets clientAddress itself');
  r = await request('POST', '/api/auth/signin', { body: { email: 'ann@example.com', password } });
  assert.equal(r.status, 200);
  const second = r.body;
  r = await request('POST', '/api/auth/signin', { body: { email: 'ann@example.com', password: 'wrong password!' } });
  assert.equal(r.status, 401);
  r = await request('POST', '/api/auth/refresh', { body: { refreshToken: second.refreshToken } });
  assert.equal(r.status, 200);
  assert.notEqual(r.body.refreshToken, second.refreshToken, 'rotated');
  r = await request('POST', '/api/auth/refresh', { body: { refreshToken: 'not-a-refresh-token' } });
  assert.equal(r.status, 401);
  r = await request('GET', '/api/auth/user', { auth: first.accessToken });
  assert.equal(r.status, 200);
  assert.equal(r.body.email, 'ann@example.com');
  assert.equal(r.body.id, first.user.id);
  r = await request('POST', '/api/auth/signout', { auth: first.accessToken });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  r = await request('GET', '/api/auth/user', { auth: first.accessToken });
  assert.equal(r.status, 401, 'signed out');
  r = await request('POST', '/api/auth/signin', { body: { email: 'ann@example.com', password } });
  const third = r.body;
  r = await request('DELETE', '/api/auth/user', { auth: third.accessToken });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  r = await request('POST', '/api/auth/signin', { body: { email: 'ann@example.com', password } });
  assert.equal(r.status, 401, 'the account is gone');
  r = await request('DELETE', '/api/auth/user');
  assert.equal(r.status, 401);
  assert.equal(r.body.reason, 'missing_token');
  r = await request('POST', '/api/auth/exchange', { body: { provider: 'apple', idToken: 'not.a.token' } });
  assert.ok(r.status === 401 || r.status === 422 || r.status === 400, `${r.status} ${JSON.stringify(r.body)}`);
});

test('health deletes and the change feed are one user\'s own; bad query values name their field', async (t) => {
  const { request } = await app(t);
  const [a, b] = [randomUUID(), randomUUID()];
  const [ta, tb] = [token({ user: a }), token({ user: b })];
  const uuid = randomUUID().toUpperCase();
  const sample = { uuid, type: 'HKQuantityTypeIdentifierStepCount', value: 10, unit: 'count', start: '2026-11-02T10:00:00Z', end: '2026-11-02T10:01:00Z' };
  let r = await request('POST', '/ingest/healthkit', { auth: ta, body: { samples: [sample], timezone: 'UTC' } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  r = await request('GET', '/api/sync/changes?limit=10', { auth: ta });
  assert.equal(r.status, 200);
  assert.ok(r.body.changes.some((c) => c.id === uuid.toLowerCase()), JSON.stringify(r.body));
  r = await request('GET', '/api/sync/changes?includeData=true&entities=health.sample', { auth: tb });
  assert.equal(r.status, 200);
  assert.equal(r.body.changes.length, 0, 'B sees nothing of A');
  // B deleting A's sample deletes nothing of A's.
  r = await request('POST', '/api/health/delete', { auth: tb, body: { uuids: [uuid] } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  r = await request('GET', '/api/sync/changes', { auth: ta });
  assert.ok(!r.body.changes.some((c) => c.op === 'delete'), 'A\'s sample stands');
  r = await request('POST', '/api/health/delete', { auth: ta, body: { uuids: [uuid] } });
  assert.equal(r.status, 200);
  r = await request('GET', '/api/sync/changes', { auth: ta });
  assert.ok(r.body.changes.some((c) => c.op === 'delete'), JSON.stringify(r.body));
  for (const [query, field] of [['limit=abc', 'limit'], ['limit=0', 'limit'], ['includeData=maybe', 'includeData'], ['userId=x', 'userId'], ['colour=red', 'colour']]) {
    r = await request('GET', `/api/sync/changes?${query}`, { auth: ta });
    assert.equal(r.status, 400, `${query}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.field, field, query);
  }
  r = await request('POST', '/api/health/delete', { auth: ta, body: { uuids: 'all' } });
  assert.equal(r.status, 400);
  assert.equal(r.body.field, 'uuids');
  r = await request('GET', '/api/sync/changes');
  assert.equal(r.status, 401);
});

test('GET / links the dashboard and the OpenAPI document', async (t) => {
  const { server } = await app(t);
  const res = await fetch(server.url + '/');
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/html/);
  const page = await res.text();
  assert.match(page, /href="\/dashboard"/);
  assert.match(page, /href="\/openapi.json"/);
});

test('--connect: the server uses a kernel already serving on a socket, and closing it leaves that kernel running', async (t) => {
  const dir = temporaryDirectory(t);
  const socket = join(dir, 'hk.sock');
  const kernel = spawn(binary, ['serve', '--memory-only', '--no-stdin', '--listen', `unix:${socket}`], { env: { ...process.env, ...env }, stdio: 'ignore' });
  t.after(() => kernel.kill('SIGKILL'));
  await eventually(() => existsSync(socket));
  const server = await start({ port: 0, connect: `unix:${socket}`, serviceToken: token({ role: 'service_role' }), log: () => {} });
  const request = requester(server);
  const r = await request('POST', '/api/auth/signup', { body: { email: 'cat@example.com', password } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  await server.close();
  assert.equal(kernel.exitCode, null, 'the kernel serves on');
  await assert.rejects(start({ port: 0, connect: `unix:${socket}`, serviceToken: undefined, log: () => {} }), /SERVICE_TOKEN/);
});

test('GET /openapi.json is protocol/rest-openapi.json, made from the route table: every route, each forward with its kernel method', async (t) => {
  const { server } = await app(t);
  const served = await (await fetch(server.url + '/openapi.json')).json();
  const kept = JSON.parse(readFileSync(join(root, 'protocol/rest-openapi.json'), 'utf8'));
  assert.deepEqual(served, kept, 'protocol/rest-openapi.json is stale: write it from GET /openapi.json (protocol/rest-routes.md says how)');
  const { routes } = await import('../server.mjs');
  for (const route of routes) {
    const op = served.paths[route.path]?.[route.method.toLowerCase()];
    assert.ok(op, `${route.method} ${route.path} is missing`);
    if (route.rpc) assert.equal(op['x-kernel-method'], route.rpc);
  }
  const signup = served.paths['/api/auth/signup'].post.requestBody.content['application/json'].schema;
  assert.deepEqual(signup.required, ['email', 'password']);
  assert.ok(!('clientAddress' in signup.properties), 'what the server sets is not the client\'s to send');
});

test('a password is reset and an email verified through the routes, the mail handed to the server\'s mail hook', async (t) => {
  const mails = [];
  const { request } = await app(t, { onMail: (mail) => mails.push(mail), limits: { UNAUTHENTICATED_BURST: 100, UNAUTHENTICATED_PER_MINUTE: 6000 } });
  let r = await request('POST', '/api/auth/signup', { body: { email: 'fay@example.com', password } });
  const access = r.body.accessToken;
  r = await request('POST', '/api/auth/password/reset-request', { body: { email: 'fay@example.com' } });
  assert.deepEqual([r.status, r.body], [200, { accepted: true }]);
  r = await request('POST', '/api/auth/password/reset-request', { body: { email: 'nobody-here@example.com' } });
  assert.deepEqual([r.status, r.body], [200, { accepted: true }], 'the same for an email with no account');
  await eventually(() => mails.length === 1, 10_000, 'the reset mail');
  assert.equal(mails[0].kind, 'password_reset');
  assert.equal(mails[0].email, 'fay@example.com');
  r = await request('POST', '/api/auth/password/reset', { body: { token: mails[0].token, password: 'a brand new password' } });
  assert.deepEqual([r.status, r.body], [200, { revoked: 1 }]);
  r = await request('POST', '/api/auth/password/reset', { body: { token: mails[0].token, password: 'a brand new password' } });
  assert.equal(r.status, 401, 'once');
  assert.equal(r.body.reason, 'invalid_token');
  r = await request('GET', '/api/auth/user', { auth: access });
  assert.equal(r.status, 401, 'every session ended');
  r = await request('POST', '/api/auth/signin', { body: { email: 'fay@example.com', password: 'a brand new password' } });
  assert.equal(r.status, 200);
  r = await request('POST', '/api/auth/signup', { body: { email: 'gus@example.com', password } });
  const gus = r.body.accessToken;
  r = await request('POST', '/api/auth/email/verify-request', { auth: gus });
  assert.deepEqual([r.status, r.body], [200, { accepted: true, mailed: true }]);
  await eventually(() => mails.length === 2, 10_000, 'the verification mail');
  r = await request('POST', '/api/auth/email/verify', { body: { token: mails[1].token } });
  assert.equal(r.status, 200);
  assert.equal(r.body.email, 'gus@example.com');
  r = await request('POST', '/api/auth/email/verify', { body: { token: 'hkm1.nonsense' } });
  assert.equal(r.status, 401);
  r = await request('POST', '/api/auth/password/reset', { body: { token: mails[1].token } });
  assert.equal(r.status, 400);
  assert.equal(r.body.field, 'password');
});
