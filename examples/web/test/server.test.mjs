// The example server's REST routes, end to end: HTTP -> client -> real kernel binary.
import { test } from 'node:test';
import { once } from 'node:events';
import assert from 'node:assert/strict';
import { spawn, execFile, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { start, httpStatus } from '../server.mjs';
import { requester, fixtures } from './support.mjs';
import { binary, env, root, shortToken, temporaryDirectory, token, userA, userB, day, eventually } from '../../../clients/node/test/support.mjs';

async function app(t) {
  const dir = temporaryDirectory(t);
  const f = fixtures(dir);
  const server = await start({ port: 0, dataDir: join(dir, 'data'), binary, serviceToken: token({ role: 'service_role' }), env: { ...env, HEALTHKERNEL_CONFIG: f.configPath }, log: () => {} });
  t.after(() => server.close());
  const request = requester(server);
  return { ...f, server, request };
}

test('JSON-RPC error codes map to HTTP statuses', () => {
  assert.deepEqual([-32602, -32001, -32003, -32004, -32009, -32010, -32029, -32050, -32603, -32601].map(httpStatus),
    [400, 401, 403, 404, 409, 422, 429, 503, 500, 500]);
});

test('seed 000: Screen Time connection and upload, with the seed bodies and statuses', async (t) => {
  const { request } = await app(t);
  const auth = token({ user: userA });
  const initial = await request('GET', '/api/verification/ios/connection', { auth });
  assert.deepEqual([initial.status, initial.body], [200, { enabled: false, timezone: 'UTC', lastSyncAt: null, selection: null }]);
  const date = day(-1);
  let r = await request('POST', '/api/verification/ios/upload', { auth, body: { date, verifiedMinutes: 42 } });
  assert.equal(r.status, 403);
  assert.deepEqual(r.body, { error: r.body.error, reason: 'connection_disabled' });
  r = await request('PATCH', '/api/verification/ios/connection', { auth, body: { enabled: true, timezone: 'America/Los_Angeles', selection: { apps: ['a'] } } });
  assert.equal(r.status, 200);
  assert.deepEqual(r.body, { enabled: true, timezone: 'America/Los_Angeles', lastSyncAt: null, selection: { apps: ['a'] } });
  await request('POST', '/api/verification/claim', { auth, body: { date, minutes: 30 } });
  r = await request('POST', '/api/verification/ios/upload', { auth, body: { date, verifiedMinutes: 42, raw: { optional: 'provider payload' } } });
  assert.deepEqual([r.status, r.body], [200, { date, status: 'mismatch', deltaMinutes: 12, penaltyPoints: 7 }]);
  // Repeating the upload is safe: the same verdict, no second penalty.
  assert.deepEqual((await request('POST', '/api/verification/ios/upload', { auth, body: { date, verifiedMinutes: 42 } })).body.penaltyPoints, 7);
  r = await request('POST', '/api/verification/ios/upload', { auth, body: { date, verifiedMinutes: 42, userId: userB } });
  assert.deepEqual([r.status, r.body.reason, r.body.field], [400, 'unknown_field', 'userId']);
  r = await request('POST', '/api/verification/ios/upload', { auth, body: { date, verifiedMinutes: 'lots' } });
  assert.deepEqual([r.status, r.body.reason, r.body.field], [400, 'wrong_type', 'verifiedMinutes']);
  r = await request('POST', '/api/verification/ios/upload', { body: { date, verifiedMinutes: 1 } });
  assert.deepEqual([r.status, r.body.reason], [401, 'missing_token']);
  r = await request('POST', '/api/verification/ios/upload', { auth: 'not-a-token', body: { date, verifiedMinutes: 1 } });
  assert.equal(r.status, 401);
  assert.equal(typeof r.body.error, 'string');
});

test('bad requests: invalid JSON 400, non-object 400, oversized 413, unknown route 404, wrong method 405', async (t) => {
  const { request } = await app(t);
  const auth = token({ user: userA });
  assert.equal((await request('POST', '/api/verification/ios/upload', { auth, raw: '{"date":' })).status, 400);
  assert.equal((await request('POST', '/api/verification/ios/upload', { auth, raw: '[1,2]' })).status, 400);
  const big = await request('POST', '/api/verification/ios/upload', { auth, raw: JSON.stringify({ raw: 'x'.repeat(2 * 1024 * 1024) }) });
  assert.equal(big.status, 413);
  assert.match(big.body.error, /larger than/);
  assert.deepEqual(await request('GET', '/nope').then((r) => [r.status, r.body]), [404, { error: 'Not found' }]);
  const wrong = await request('DELETE', '/api/verification/ios/connection', { auth });
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get('allow'), 'GET, PATCH');
  const health = await request('GET', '/healthz');
  assert.deepEqual([health.status, health.body.ok], [200, true]);
});

test('seed 004: Google sign-in gives an apiToken; sessions answer 201 with the seed body', async (t) => {
  const { request, googleToken } = await app(t);
  let r = await request('POST', '/api/auth/google', { body: { googleToken: googleToken({ sub: 'google-user-1', email: 'a@example.com', email_verified: true }) } });
  assert.equal(r.status, 200);
  const apiToken = r.body.apiToken;
  assert.match(apiToken, /^[\w-]+\.[\w-]+\.[\w-]+$/);
  r = await request('POST', '/api/auth/google', { body: { googleToken: googleToken({ sub: 'google-user-1', aud: 'someone-else' }) } });
  assert.deepEqual([r.status, r.body.error], [401, 'Invalid Google token/code']);
  r = await request('POST', '/api/auth/google', { body: {} });
  assert.deepEqual([r.status, r.body.field], [400, 'googleToken']);

  r = await request('POST', '/api/sessions', { auth: apiToken, body: { session_start_time: '2025-01-02T07:00:00Z', duration_seconds: 600 } });
  assert.equal(r.status, 201);
  assert.deepEqual(Object.keys(r.body), ['sessionId', 'message']);
  assert.equal(r.body.message, 'Session saved successfully');
  r = await request('POST', '/api/sessions', { auth: apiToken, body: { session_start_time: 'yesterday', duration_seconds: 600 } });
  assert.deepEqual([r.status, r.body.error, r.body.field], [400, 'Invalid session data format', 'session_start_time']);
  r = await request('POST', '/api/sessions', { auth: apiToken, body: { session_start_time: '2025-01-02T07:00:00Z', duration_seconds: 0 } });
  assert.deepEqual([r.status, r.body.field], [400, 'duration_seconds']);
  r = await request('POST', '/api/sessions', { body: { session_start_time: '2025-01-02T07:00:00Z', duration_seconds: 60 } });
  assert.deepEqual([r.status, r.body.error], [401, 'Invalid or missing API token']);
  // The same Google account signs in to the same user, who sees the session.
  r = await request('POST', '/api/auth/google', { body: { googleToken: googleToken({ sub: 'google-user-1' }) } });
  const again = r.body.apiToken;
  const { sub } = JSON.parse(Buffer.from(again.split('.')[1], 'base64url'));
  assert.equal(sub, JSON.parse(Buffer.from(apiToken.split('.')[1], 'base64url')).sub);
});

test('seed 003: verify-subscription answers the seed shape; refresh-subscriptions needs the service key', async (t) => {
  const { request, apple } = await app(t);
  const auth = token({ user: userA });
  let r = await request('POST', '/functions/v1/verify-subscription', { auth, body: { provider: 'apple', product_id: 'premium', receipt_or_token: 'a.b.c' } });
  assert.equal(r.status, 422);
  assert.equal(typeof r.body.error, 'string');
  r = await request('POST', '/functions/v1/verify-subscription', { auth, body: { provider: 'google', product_id: 'premium', receipt_or_token: 'a.b.c' } });
  assert.deepEqual([r.status, r.body.field], [400, 'provider']);
  let verified = 0;
  if (apple) {
    verified = 2;
    const now = Date.now();
    const transaction = { transactionId: '2000000000000001', originalTransactionId: '2000000000000001', bundleId: 'com.example',
      productId: 'premium', purchaseDate: now - 86_400_000, originalPurchaseDate: now - 86_400_000, expiresDate: now + 29 * 86_400_000,
      quantity: 1, type: 'Auto-Renewable Subscription', inAppOwnershipType: 'PURCHASED', signedDate: now - 86_400_000,
      environment: 'Sandbox', transactionReason: 'PURCHASE', storefront: 'USA' };
    r = await request('POST', '/functions/v1/verify-subscription', { auth, body: { provider: 'apple', product_id: 'premium', receipt_or_token: apple(transaction) } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual({ ...r.body, current_period_end: 'checked below' }, { status: 'active', product_id: 'premium',
      current_period_end: 'checked below', transaction_id: '2000000000000001', original_transaction_id: '2000000000000001' });
    assert.equal(Date.parse(r.body.current_period_end), transaction.expiresDate);
    const expired = { ...transaction, transactionId: '2000000000000002', originalTransactionId: '2000000000000002',
      purchaseDate: now - 60 * 86_400_000, expiresDate: now - 30 * 86_400_000, signedDate: now - 60 * 86_400_000 };
    r = await request('POST', '/functions/v1/verify-subscription', { auth: token({ user: userB }), body: { provider: 'apple', product_id: 'premium', receipt_or_token: apple(expired) } });
    assert.deepEqual([r.status, r.body.status, r.body.error], [200, 'inactive', 'expired']);
  } else {
    t.diagnostic('shared/testdata/appstore is not on this machine: the signed-receipt case was skipped');
  }
  r = await request('POST', '/functions/v1/refresh-subscriptions', { auth });
  assert.deepEqual([r.status, r.body.reason], [403, 'service_role_required']);
  r = await request('POST', '/functions/v1/refresh-subscriptions', { auth: token({ role: 'service_role' }) });
  assert.equal(r.status, 200);
  assert.equal(r.body.remaining, 0);
  assert.equal(r.body.checked, verified, 'a verify is not a refresh look: new memberships are due at once');
  r = await request('POST', '/functions/v1/refresh-subscriptions', { auth: token({ role: 'service_role' }) });
  assert.deepEqual([r.status, r.body.checked, r.body.remaining], [200, 0, 0], 'looked at just now: none is due');
});

test('app-store-notifications: 2xx for applied or duplicate, 4xx only for what can never be accepted, 5xx to be sent again', async (t) => {
  const { request, apple } = await app(t);
  let r = await request('POST', '/functions/v1/app-store-notifications', { body: { signedPayload: 'a.b.c' } });
  assert.equal(r.status, 422, 'a payload that is not a JWS is refused for good');
  r = await request('POST', '/functions/v1/app-store-notifications', { body: { other: 1 } });
  assert.equal(r.status, 400, 'no signedPayload');
  if (!apple) return t.diagnostic('shared/testdata/appstore is not on this machine: the signed cases were skipped');
  const uuid = randomUUID();
  const test = { notificationType: 'TEST', notificationUUID: uuid, signedDate: Date.now(), data: { bundleId: 'com.example', environment: 'Sandbox' } };
  r = await request('POST', '/functions/v1/app-store-notifications', { body: { signedPayload: apple(test) } });
  assert.deepEqual([r.status, r.body.ok, r.body.notification_type], [200, true, 'TEST']);
  const foreign = { ...test, notificationUUID: randomUUID(), data: { bundleId: 'com.other', environment: 'Sandbox' } };
  r = await request('POST', '/functions/v1/app-store-notifications', { body: { signedPayload: apple(foreign) } });
  assert.deepEqual([r.status, r.body.reason], [422, 'bundle_mismatch'], 'another app\'s notification is never accepted');
  r = await request('POST', '/functions/v1/app-store-notifications', { body: { signedPayload: apple(test) } });
  assert.equal(r.status, 200, 'the same notification again is still a success');
  // The 2025-2026 types, and one Apple has not invented yet: each acknowledged with 2xx (a 4xx would
  // have Apple send it again for days), whether or not a user of this kernel owns the purchase.
  const now = Date.now();
  const purchase = apple({ transactionId: '2000000000000009', originalTransactionId: '2000000000000009', bundleId: 'com.example',
    productId: 'premium', purchaseDate: now - 86_400_000, originalPurchaseDate: now - 86_400_000, expiresDate: now + 29 * 86_400_000,
    type: 'Auto-Renewable Subscription', inAppOwnershipType: 'PURCHASED', signedDate: now, environment: 'Sandbox' });
  const data = { bundleId: 'com.example', environment: 'Sandbox', signedTransactionInfo: purchase };
  const download = apple({ appTransactionId: '704289572311', bundleId: 'com.example', receiptType: 'Sandbox', signedDate: now });
  const kinds = [
    { notificationType: 'CONSUMPTION_REQUEST', data: { ...data, consumptionRequestReason: 'UNINTENDED_PURCHASE' } },
    { notificationType: 'RESCIND_CONSENT', appData: { bundleId: 'com.example', environment: 'Sandbox', signedAppTransactionInfo: download } },
    { notificationType: 'METADATA_UPDATE', data },
    { notificationType: 'MIGRATION', data },
    { notificationType: 'PRICE_CHANGE', subtype: 'PRICE_INCREASE', data },
    { notificationType: 'SOMETHING_APPLE_ADDS_IN_2027', data },
  ];
  for (const kind of kinds) {
    r = await request('POST', '/functions/v1/app-store-notifications', { body: { signedPayload: apple({ notificationUUID: randomUUID(), signedDate: now, version: '2.0', ...kind }) } });
    assert.deepEqual([r.status, r.body.ok, r.body.notification_type], [200, true, kind.notificationType], JSON.stringify(r.body));
  }
});

test('app-store-notifications: a kernel that cannot answer now gets 503, so that Apple sends it again', async (t) => {
  const dir = temporaryDirectory(t);
  const f = fixtures(dir);
  const server = await start({ port: 0, dataDir: join(dir, 'data'), binary, serviceToken: token({ role: 'service_role' }), env: { ...env, HEALTHKERNEL_CONFIG: f.configPath },
                               log: () => {}, clientOptions: { timeout: 1000 } });
  t.after(() => server.close());
  const request = requester(server);
  process.kill(server.kernel.pid, 'SIGSTOP');
  try {
    const r = await request('POST', '/functions/v1/app-store-notifications', { body: { signedPayload: 'a.b.c' } });
    assert.deepEqual([r.status, r.body.reason], [503, 'retry_later']);
  } finally {
    process.kill(server.kernel.pid, 'SIGCONT');
  }
});

test('seed 001: /ingest/healthkit ingests and validates like health.ingest', async (t) => {
  const { request } = await app(t);
  const auth = token({ user: userA });
  const date = day(-1);
  const sample = { uuid: randomUUID(), type: 'HKQuantityTypeIdentifierStepCount', value: 1234, unit: 'count',
                   start: `${date}T10:00:00Z`, end: `${date}T10:30:00Z` };
  let r = await request('POST', '/ingest/healthkit', { auth, body: { timezone: 'UTC', samples: [sample] } });
  assert.equal(r.status, 200);
  assert.deepEqual([r.body.accepted.samples, r.body.daysRecomputed], [1, [date]]);
  r = await request('POST', '/ingest/healthkit', { auth, body: { samples: [{ ...sample, value: -1 }] } });
  assert.deepEqual([r.status, r.body.field], [400, 'samples[0].value']);
  // A month of minute samples is over the default body limit but within this route's.
  const many = Array.from({ length: 20_000 }, (_, i) => ({ uuid: randomUUID(), type: 'HKQuantityTypeIdentifierHeartRate', value: 60 + (i % 40),
    unit: 'count/min', start: new Date(Date.parse(`${date}T00:00:00Z`) - i * 60_000).toISOString(), end: new Date(Date.parse(`${date}T00:00:00Z`) - i * 60_000).toISOString() }));
  r = await request('POST', '/ingest/healthkit', { auth, body: { samples: many } });
  assert.equal(r.status, 200);
  assert.equal(r.body.accepted.samples, 20_000);
});

test('scripts/test-ios-upload.mjs uploads through the server and prints the verdict', async (t) => {
  const { request, server } = await app(t);
  const auth = token({ user: userA });
  await request('PATCH', '/api/verification/ios/connection', { auth, body: { enabled: true } });
  const script = join(root, 'scripts/test-ios-upload.mjs');
  // The server runs in this process, so the script must run without blocking it.
  const run = (vars) => new Promise((resolve) => execFile(process.execPath, [script], { env: { ...process.env, BASE_URL: server.url, ...vars } },
    (error, stdout, stderr) => resolve({ error, stdout, stderr })));
  const ok = await run({ ACCESS_TOKEN: auth, DATE: '2025-01-02', MINUTES: '42' });
  assert.equal(ok.error, null, ok.stderr);
  assert.deepEqual(JSON.parse(ok.stdout.slice(ok.stdout.indexOf('{'))), { date: '2025-01-02', status: 'unclaimed', deltaMinutes: null, penaltyPoints: 0 });
  const failed = await run({ ACCESS_TOKEN: 'bad', DATE: '2025-01-02', MINUTES: '42' });
  assert.ok(failed.error, 'a refused upload exits non-zero');
  assert.match(failed.stderr, /401/);
  // #51 item 18: a fresh user's first upload was refused with no word of how to fix it, and the script
  // failed that way. The refusal names the route; the script turns verification on, as onboarding would.
  const fresh = token({ user: userB });
  const refused = await request('POST', '/api/verification/ios/upload', { auth: fresh, body: { date: '2025-01-02', verifiedMinutes: 42 } });
  assert.equal(refused.status, 403);
  assert.match(refused.body.error, /PATCH \/api\/verification\/ios\/connection/);
  const first = await run({ ACCESS_TOKEN: fresh, DATE: '2025-01-02', MINUTES: '42' });
  assert.equal(first.error, null, first.stderr);
  assert.match(first.stderr, /turning it on/);
  assert.equal(JSON.parse(first.stdout.slice(first.stdout.indexOf('{'))).status, 'unclaimed');
});

// #51 items 17 and 18: one word and one allowance for an expired token, the kernel's; and DEMO=1 twice
// leaves the same demo data (its sessions and samples carry keys of their day).
test('an expired token is expired_token a minute past exp, as the kernel says; demo data seeded twice is the same', async (t) => {
  const { request, server } = await app(t);
  const late = shortToken(userA, -30), gone = shortToken(userA, -90);
  assert.equal((await request('GET', '/api/verification/ios/connection', { auth: late })).status, 200, 'within the allowance');
  const r = await request('GET', '/api/verification/ios/connection', { auth: gone });
  assert.deepEqual([r.status, r.body.reason], [401, 'expired_token']);
  const auth = token({ user: userB });
  const { seedDemo } = await import('../demo.mjs');
  await seedDemo(server.url, auth, 3);
  const stats = async () => (await request('GET', '/api/dashboard?days=7', { auth })).body;
  const once = await stats();
  await seedDemo(server.url, auth, 3);
  assert.deepEqual(await stats(), once, 'seeding again changed nothing');
});

test('SIGTERM drains in-flight requests, then closes the kernel cleanly', async (t) => {
  const dir = temporaryDirectory(t);
  const dataDir = join(dir, 'data');
  const child = spawn(process.execPath, [fileURLToPath(new URL('../server.mjs', import.meta.url))], {
    env: { ...process.env, ...env, PORT: '0', DATA_DIR: dataDir, HEALTHKERNEL_BIN: binary, SERVICE_TOKEN: token({ role: 'service_role' }) }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c) => { stderr += c; });
  await eventually(() => /listening on (\S+)/.test(stderr), 20_000, 'the server to listen');
  const url = /listening on (\S+)/.exec(stderr)[1];
  const auth = token({ user: userA });
  const date = day(-1);
  const samples = Array.from({ length: 30_000 }, (_, i) => ({ uuid: randomUUID(), type: 'HKQuantityTypeIdentifierStepCount', value: 1,
    unit: 'count', start: new Date(Date.parse(`${date}T00:00:00Z`) + i * 1000).toISOString(), end: new Date(Date.parse(`${date}T00:00:00Z`) + i * 1000 + 500).toISOString() }));
  const slow = fetch(`${url}/ingest/healthkit`, { method: 'POST', headers: { authorization: `Bearer ${auth}`, 'content-type': 'application/json' }, body: JSON.stringify({ samples }) });
  await new Promise((r) => setTimeout(r, 150));
  child.kill('SIGTERM');
  const res = await slow;
  assert.equal(res.status, 200, 'the request in flight at SIGTERM is answered');
  assert.equal((await res.json()).accepted.samples, 30_000);
  const [code] = await new Promise((r) => child.once('exit', (...a) => r(a)));
  assert.equal(code, 0, stderr);
  assert.match(stderr, /kernel exit \{"code":0/);
  // The kernel released the data dir and kept the write.
  const summary = JSON.parse(execFileSync(binary, ['call', 'health.summary', JSON.stringify({ from: date, to: date }), '--token', auth, '--data-dir', dataDir], { env: { ...process.env, ...env } }));
  assert.equal(summary.days[0].metrics.HKQuantityTypeIdentifierStepCount.sum, 30_000);
});

test('the server refuses to start without a service token it was given (outside DEMO=1)', async (t) => {
  const dir = temporaryDirectory(t);
  const { SERVICE_TOKEN, DEMO, ...rest } = process.env;
  const child = spawn(process.execPath, [join(root, 'examples/web/server.mjs')],
    { env: { ...rest, ...env, PORT: '0', DATA_DIR: join(dir, 'data'), HEALTHKERNEL_BIN: binary }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (c) => { stderr += c; });
  const [code] = await once(child, 'exit');
  assert.equal(code, 2, stderr);
  assert.match(stderr, /SERVICE_TOKEN is not set/);
  assert.equal(existsSync(join(dir, 'data')), false, 'it stopped before starting a kernel');
});
