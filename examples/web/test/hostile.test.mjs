// The example server against hostile and careless clients (issue "Security and robustness defects found
// by an adversarial probe", items 1-6): each test is named after the defect it keeps fixed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { join } from 'node:path';
import { start, EventStream } from '../server.mjs';
import { requester } from './support.mjs';
import { binary, env, shortToken, temporaryDirectory, token, userA, userB, day, eventually } from '../../../clients/node/test/support.mjs';

async function app(t, options = {}) {
  const dir = temporaryDirectory(t);
  const server = await start({ port: 0, dataDir: join(dir, 'data'), binary, serviceToken: token({ role: 'service_role' }), env, log: () => {}, ...options });
  t.after(() => server.close());
  const request = requester(server);
  return { server, request };
}

/** Sends raw bytes on a new connection and resolves with everything the server answered before closing. */
function rawHTTP(url, bytes, { waitMs = 2000 } = {}) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    let answer = '';
    const done = () => { socket.destroy(); resolve(answer); };
    const timer = setTimeout(done, waitMs);
    socket.on('data', (chunk) => { answer += chunk; });
    socket.on('error', () => {});
    socket.on('close', () => { clearTimeout(timer); resolve(answer); });
    socket.write(bytes);
  });
}

const healthy = async (request) => assert.equal((await request('GET', '/healthz')).status, 200, 'the server serves on');

test('1. one request cannot kill it: malformed request targets answer 400, and fuzzed request lines and headers leave it serving', async (t) => {
  const { server, request } = await app(t);
  for (const target of ['//[', 'http://[', '//:99999/x', '//user@[::1', 'http://a:b@[']) {
    const answer = await rawHTTP(server.url, `GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    assert.match(answer, /^HTTP\/1\.1 400 /, `GET ${target}`);
  }
  await healthy(request);
  // A bounded fuzz: random request lines and headers from pieces that broke servers before.
  const pieces = ['/', '//', '[', ']', '%', '%zz', '?', '#', '@', ':', '::', '\\', '..', '\u00ff', 'http://', '//:0', '/api/events', '/ingest/healthkit',
                  '/api/verification/ios/upload', '/functions/v1/refresh-subscriptions', '/dashboard', '\t', ' '];
  const methods = ['GET', 'POST', 'PATCH', 'PUT', 'DELETE', 'OPTIONS', 'X'];
  const headers = ['Content-Length: -1', 'Content-Length: 99999999999', 'Content-Length: abc', 'Transfer-Encoding: chunked',
                   'Content-Type: application/json', 'Content-Type: text/plain', 'Authorization: Bearer x.y.z', 'Authorization: Bearer',
                   'Authorization: Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.', 'Expect: 100-continue', 'Host: [', 'X: \u0001'];
  let seed = 24;
  const pick = (list) => list[(seed = (seed * 1103515245 + 12345) % 2147483648) % list.length];
  for (let i = 0; i < 200; i++) {
    const target = Array.from({ length: 1 + (i % 4) }, () => pick(pieces)).join('');
    const head = Array.from({ length: i % 4 }, () => pick(headers)).join('\r\n');
    const body = i % 3 === 0 ? '{"raw":[[[' : i % 3 === 1 ? '{"__proto__":{"x":1}}' : '';
    await rawHTTP(server.url, `${pick(methods)} ${target} HTTP/1.1\r\nHost: x\r\n${head}${head ? '\r\n' : ''}Connection: close\r\n\r\n${body}`, { waitMs: 300 });
  }
  await healthy(request);
});

test('2. a body that cannot be serialized is refused at once and leaves no call pending', async (t) => {
  const { server, request } = await app(t, { clientOptions: { timeout: 1000 } });
  const auth = token({ user: userA });
  await request('PATCH', '/api/verification/ios/connection', { auth, body: { enabled: true } });
  const raw = '{"raw":' + '['.repeat(20_000) + ']'.repeat(20_000) + '}';
  const started = Date.now();
  const r = await request('POST', '/api/verification/ios/upload', { auth, raw });
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.ok(Date.now() - started < 5000);
  assert.equal(server.kernel.pending, 0, 'nothing was registered');
  // Past the client's timeout, nothing fires: the server is still there.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  await healthy(request);
  // The client on its own: circular params reject with a local error and register nothing.
  const circular = {};
  circular.self = circular;
  await assert.rejects(server.kernel.call('kernel.info', circular), (e) => e.code === -32600 && e.reason === 'unserializable' && e.data.local);
  assert.equal(server.kernel.pending, 0);
});

test('3. bodies the kernel refuses unread answer 400 at once and never fill the pending calls', async (t) => {
  // 200 requests at once come from one address here: past the per-address connection share otherwise.
  const { server, request } = await app(t, { clientOptions: { maxPending: 50 }, limits: { CONNECTIONS_PER_ADDRESS: 1024 } });
  const auth = token({ user: userA });
  await request('PATCH', '/api/verification/ios/connection', { auth, body: { enabled: true } });
  const deep = '{"raw":' + '['.repeat(600) + ']'.repeat(600) + ',"date":"' + day(-1) + '","verifiedMinutes":1}';
  for (const raw of ['{"raw":"\\u0000"}', '{"raw":"\\ud800"}', '{"raw":"a\\udc00b"}', deep]) {
    const started = Date.now();
    const r = await request('POST', '/api/verification/ios/upload', { auth, raw });
    assert.equal(r.status, 400, raw.slice(0, 40));
    assert.ok(Date.now() - started < 2000, 'answered at once');
  }
  // 200 of them at once, with only 50 pending slots: every one answered, /healthz right after.
  const answers = await Promise.all(Array.from({ length: 200 }, () => request('POST', '/api/verification/ios/upload', { auth, raw: '{"raw":"\\u0000"}' })));
  assert.ok(answers.every((a) => a.status === 400));
  assert.equal(server.kernel.pending, 0);
  await healthy(request);
  // A valid pair of surrogates and an escaped backslash before "u0000" are fine.
  const fine = await request('POST', '/api/verification/ios/upload', { auth, body: { date: day(-1), verifiedMinutes: 5, raw: { s: '😀 \\u0000' } } });
  assert.equal(fine.status, 200, JSON.stringify(fine.body));
});

test('4. memory before auth: a body without a valid token is refused before it is read, and bodies in flight are bounded', async (t) => {
  const { server, request } = await app(t, { limits: { BODY_BYTES_IN_FLIGHT: 1 << 20 } });
  // Headers announcing 16 MiB and no body sent: the 401 comes without waiting for it.
  for (const authorization of ['', 'Authorization: Bearer not-a-token\r\n']) {
    const answer = await rawHTTP(server.url, `POST /ingest/healthkit HTTP/1.1\r\nHost: x\r\n${authorization}Content-Type: application/json\r\nContent-Length: 16777000\r\n\r\n`);
    assert.match(answer, /^HTTP\/1\.1 401 /, authorization || 'no token');
  }
  // Bytes count as they arrive: an accepted token that sends 700 KB of a declared 800 KB holds 700 KB
  // (a declared length alone holds nothing: round 2, item 9), and a second body passing the 1 MiB budget is 503.
  const auth = token({ user: userA });
  const { hostname, port } = new URL(server.url);
  const first = connect(Number(port), hostname);
  first.on('error', () => {});
  first.write(`POST /ingest/healthkit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${auth}\r\nContent-Type: application/json\r\nContent-Length: 800000\r\n\r\n{"samples":[` + ' '.repeat(700_000));
  t.after(() => first.destroy());
  await eventually(() => server.bodies.used >= 700_000, 10_000, 'the first body to take its share of the budget');
  const second = await rawHTTP(server.url, `POST /ingest/healthkit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${auth}\r\nContent-Type: application/json\r\nContent-Length: 800000\r\n\r\n` + ' '.repeat(400_000));
  assert.match(second, /^HTTP\/1\.1 503 /);
  assert.match(second, /retry-after: 1/i);
  first.destroy();
  await new Promise((resolve) => setTimeout(resolve, 200));
  // The budget is given back once a request ends, however it ended.
  const r = await request('POST', '/ingest/healthkit', { auth, body: { samples: [] } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
});

test('5. live streams: capped per user, one event per entity for a burst, closed when the token expires, dropped when unread', async (t) => {
  const { server, request } = await app(t, { limits: { STREAMS_PER_USER: 2, STREAM_COALESCE_MS: 300 } });
  const auth = token({ user: userA });
  const open = async (tok) => {
    const controller = new AbortController();
    const res = await fetch(`${server.url}/api/events`, { headers: { authorization: `Bearer ${tok}` }, signal: controller.signal });
    t.after(() => controller.abort());
    return { res, controller };
  };
  const a = await open(auth);
  const b = await open(auth);
  assert.equal(a.res.status, 200);
  assert.equal(b.res.status, 200);
  assert.equal((await open(auth)).res.status, 429, 'a third stream of the same user');
  assert.equal((await open(token({ user: userB }))).res.status, 200, 'another user is not affected');
  // A burst of 3,000 samples reaches the stream as a few events, each counting what it stands for.
  const reader = a.res.body.getReader();
  let text = '';
  const reading = (async () => { for (;;) { const { value, done } = await reader.read(); if (done) return; text += Buffer.from(value).toString(); } })().catch(() => {});
  const date = day(-1);
  const samples = Array.from({ length: 3000 }, (_, i) => ({ uuid: randomUUID(), type: 'HKQuantityTypeIdentifierStepCount', value: 1, unit: 'count',
    start: new Date(Date.parse(`${date}T00:00:00Z`) + i * 1000).toISOString(), end: new Date(Date.parse(`${date}T00:00:00Z`) + i * 1000 + 500).toISOString() }));
  assert.equal((await request('POST', '/ingest/healthkit', { auth, body: { timezone: 'UTC', samples } })).status, 200);
  await eventually(() => /"entity":"health.day"/.test(text) && /"entity":"health.sample"/.test(text), 10_000, 'coalesced events');
  await new Promise((resolve) => setTimeout(resolve, 500));
  const events = text.split('\n\n').filter((e) => e.startsWith('event: change')).map((e) => JSON.parse(e.split('data: ')[1]));
  assert.ok(events.length <= 4, `${events.length} events for one burst`);
  assert.equal(events.filter((e) => e.entity === 'health.sample').reduce((n, e) => n + e.count, 0), 3000);
  a.controller.abort();
  await reading;
  // A stream ends when its token expires.
  const brief = shortToken(userB, -58); // taken 60 s past its exp, as the kernel takes it: 2 s left
  const c = await open(brief);
  assert.equal(c.res.status, 200);
  const started = Date.now();
  const reader2 = c.res.body.getReader();
  for (;;) { const { done } = await reader2.read(); if (done) break; }
  assert.ok(Date.now() - started < 6000, 'closed at expiry');
  // A stream whose client does not read is dropped once its unsent bytes pass the limit.
  let destroyed = false;
  const fake = { writableLength: 0, write() { this.writableLength += 100_000; }, end() {}, destroy() { destroyed = true; }, on() {} };
  let ended = false;
  const stream = new EventStream(fake, userA, { coalesceMs: 1, maxBuffer: 250_000, expiresAt: Date.now() + 60_000, onEnd: () => { ended = true; } });
  for (let i = 0; i < 10 && !ended; i++) { stream.push({ entity: `e${i}`, id: 'x' }); stream.flush(); }
  assert.ok(destroyed && ended, 'the unread stream was dropped');
});

test('6. rough edges: 415 for a non-JSON body, 413 past the line limit, __proto__ named, 504 on timeout, unauthenticated routes limited per address', async (t) => {
  const { request } = await app(t, { limits: { UNAUTHENTICATED_BURST: 3, UNAUTHENTICATED_PER_MINUTE: 1 }, clientOptions: { maxLineBytes: 4096 } });
  const auth = token({ user: userA });
  let r = await request('POST', '/api/sessions', { auth, raw: '{}', headers: { 'content-type': 'text/plain' } });
  assert.equal(r.status, 415);
  r = await request('POST', '/api/sessions', { auth, body: { session_start_time: new Date().toISOString(), duration_seconds: 60, pad: 'x'.repeat(5000) } });
  assert.equal(r.status, 413, JSON.stringify(r.body));
  r = await request('POST', '/api/sessions', { auth, raw: '{"__proto__":{"x":1},"session_start_time":"2026-01-01T00:00:00Z","duration_seconds":60}' });
  assert.equal(r.status, 400);
  assert.equal(r.body.field, '__proto__');
  assert.equal(r.body.reason, 'unknown_field');
  const statuses = [];
  for (let i = 0; i < 5; i++) statuses.push((await request('POST', '/api/auth/google', { body: { googleToken: 'x' } })).status);
  assert.deepEqual(statuses.slice(3), [429, 429], statuses.join());
  const limited = await request('POST', '/api/auth/google', { body: { googleToken: 'x' } });
  assert.ok(Number(limited.headers.get('retry-after')) >= 1);
  assert.ok(limited.body.retryAfterMs > 0);
});

test('6. a call that times out answers 504 and says the write may have been applied', async (t) => {
  const { server, request } = await app(t, { clientOptions: { timeout: 500 } });
  const auth = token({ user: userA });
  const body = { session_start_time: new Date(Date.now() - 3_600_000).toISOString(), duration_seconds: 60 };
  assert.equal((await request('POST', '/api/sessions', { auth, body })).status, 201); // the token is now known
  process.kill(server.kernel.pid, 'SIGSTOP');
  t.after(() => { try { process.kill(server.kernel.pid, 'SIGCONT'); } catch {} });
  const r = await request('POST', '/api/sessions', { auth, body });
  process.kill(server.kernel.pid, 'SIGCONT');
  assert.equal(r.status, 504);
  assert.match(r.body.error, /may have been applied/);
});

test('7. no token in URLs: the live stream opens with a one-time ticket fetched with the bearer header', async (t) => {
  const { server, request } = await app(t, { limits: { TICKET_SECONDS: 1 } });
  const auth = token({ user: userA });
  const streams = [];
  const open = async (query, headers = {}) => {
    const controller = new AbortController();
    t.after(() => controller.abort());
    const res = await fetch(`${server.url}/api/events${query}`, { headers, signal: controller.signal });
    streams.push(controller);
    return res;
  };
  assert.equal((await request('POST', '/api/events/ticket', {})).status, 401, 'a ticket needs a bearer token');
  assert.equal((await request('POST', '/api/events/ticket', { auth: 'not-a-token' })).status, 401);
  const refusedInUrl = await open(`?access_token=${encodeURIComponent(auth)}`);
  assert.equal(refusedInUrl.status, 400);
  assert.equal((await refusedInUrl.json()).reason, 'token_in_url');

  const { status, body } = await request('POST', '/api/events/ticket', { auth });
  assert.equal(status, 200);
  assert.match(body.ticket, /^[A-Za-z0-9_-]{32}$/);
  assert.ok(!body.ticket.includes(auth.split('.')[1]), 'the ticket is not the token');
  const first = await open(`?ticket=${body.ticket}`);
  assert.equal(first.status, 200, 'the ticket opens the stream');
  assert.equal((await open(`?ticket=${body.ticket}`)).status, 401, 'once');
  assert.equal((await open('?ticket=made-up')).status, 401);

  const late = (await request('POST', '/api/events/ticket', { auth })).body.ticket;
  await new Promise((resolve) => setTimeout(resolve, 1200));
  assert.equal((await open(`?ticket=${late}`)).status, 401, 'a ticket not used within TICKET_SECONDS has expired');
  for (const controller of streams) controller.abort();
});
