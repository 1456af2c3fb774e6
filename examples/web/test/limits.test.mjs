// The example server's limits from the second security round (#38, items 9-12): each test turns the
// probe's reproduction into a check that failed before the fix.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { join } from 'node:path';
import { addressKey, start } from '../server.mjs';
import { requester } from './support.mjs';
import { binary, env, temporaryDirectory, token, userA, eventually } from '../../../clients/node/test/support.mjs';

async function app(t, limits = {}) {
  const dir = temporaryDirectory(t);
  const server = await start({ port: 0, dataDir: join(dir, 'data'), binary, serviceToken: token({ role: 'service_role' }), env, log: () => {}, limits });
  t.after(() => server.close());
  return { server, request: requester(server) };
}

/** A raw connection (from `localAddress`, any 127/8 address here) with what it receives and when it closes. */
function open(server, { localAddress, bytes } = {}) {
  const { hostname, port } = new URL(server.url);
  const socket = connect({ port: Number(port), host: hostname, ...(localAddress ? { localAddress } : {}) });
  const state = { socket, received: '', closed: false, closedAt: 0 };
  socket.on('data', (chunk) => { state.received += chunk; });
  socket.on('error', () => {});
  socket.on('close', () => { state.closed = true; state.closedAt = Date.now(); });
  if (bytes !== undefined) socket.write(bytes);
  return state;
}

const notification = (length) => `POST /functions/v1/app-store-notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`;

test('9. body bytes count as they arrive, per address too, and slow headers and bodies are timed out in seconds', async (t) => {
  const { server, request } = await app(t, { BODY_BYTES_IN_FLIGHT: 1 << 20, BODY_BYTES_PER_ADDRESS: 300_000, BODY_IDLE_MS: 500,
                                             HEADERS_TIMEOUT_MS: 1000, CONNECTIONS_PER_ADDRESS: 1024 });
  // The probe: connections that send only headers declaring 256 KiB to the notification route (no token)
  // took the whole budget, and every body route answered 503. Declared lengths now hold nothing.
  const idle = Array.from({ length: 20 }, () => open(server, { bytes: notification(262_144) }));
  t.after(() => idle.forEach((c) => c.socket.destroy()));
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(server.bodies.used, 0);
  const auth = token({ user: userA });
  assert.equal((await request('POST', '/ingest/healthkit', { auth, body: { samples: [] } })).status, 200, 'body routes still served');
  // ...and they are answered 408 and closed once they have sent nothing for BODY_IDLE_MS.
  await eventually(() => idle.every((c) => c.closed), 5000, 'the silent bodies to be closed');
  assert.match(idle[0].received, /^HTTP\/1\.1 408 /);

  // One address's share: 250 KB arriving on one connection, then 100 KB on another from the same
  // address passes its 300,000 bytes: 429. Another address is still served.
  const big = open(server, { bytes: notification(262_144) + ' '.repeat(250_000) });
  t.after(() => big.socket.destroy());
  await eventually(() => server.bodies.used >= 250_000, 5000, 'the first body to arrive');
  const second = open(server, { bytes: notification(262_144) + ' '.repeat(100_000) });
  await eventually(() => second.received.length > 0, 5000, 'an answer to the second body');
  assert.match(second.received, /^HTTP\/1\.1 429 /);
  const elsewhere = open(server, { localAddress: '127.0.0.2', bytes: notification(100) + ' '.repeat(100) });
  await eventually(() => elsewhere.received.length > 0, 5000, 'an answer to the other address');
  assert.doesNotMatch(elsewhere.received, /^HTTP\/1\.1 (429|503) /, 'another address has its own share');
  big.socket.destroy();
  second.socket.destroy();
  elsewhere.socket.destroy();

  // Headers that never finish are cut off within seconds (Node's default was 60 s, checked every 30 s).
  const started = Date.now();
  const slow = open(server, { bytes: 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ' });
  await eventually(() => slow.closed, 6000, 'unfinished headers to be cut off');
  assert.ok(slow.closedAt - started < 4000, `closed after ${slow.closedAt - started} ms`);
  await eventually(() => server.bodies.used === 0, 5000, 'every share given back');
});

test('10. one address cannot take every connection, and a connection that sends nothing is closed', async (t) => {
  const { server, request } = await app(t, { CONNECTIONS_PER_ADDRESS: 5, IDLE_CONNECTION_MS: 60_000 });
  const held = Array.from({ length: 5 }, () => open(server));
  t.after(() => held.forEach((c) => c.socket.destroy()));
  await new Promise((resolve) => setTimeout(resolve, 200));
  const sixth = open(server);
  await eventually(() => sixth.closed, 3000, 'the sixth connection of the address to be closed');
  assert.equal(sixth.received, '');
  assert.ok(held.every((c) => !c.closed), 'the five stay open');
  // Another address is served beside them.
  const other = open(server, { localAddress: '127.0.0.2', bytes: 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' });
  await eventually(() => other.closed, 5000, 'the other address to be answered');
  assert.match(other.received, /^HTTP\/1\.1 200 /);
  held.forEach((c) => c.socket.destroy());
  const served = async () => { try { return (await request('GET', '/healthz')).status === 200; } catch { return false; } };
  await eventually(served, 5000, 'the address to be served again once its connections close');

  const { server: quick } = await app(t, { IDLE_CONNECTION_MS: 500 });
  const started = Date.now();
  const silent = open(quick);
  await eventually(() => silent.closed, 5000, 'a silent connection to be closed');
  assert.ok(silent.closedAt - started < 3000, `closed after ${silent.closedAt - started} ms`);
});

test('11. the dashboard of a user with thousands of sessions costs what one with a few does', async (t) => {
  const { server, request } = await app(t, { CONNECTIONS_PER_ADDRESS: 1024 });
  const auth = token({ user: userA });
  // 3,000 sessions over the last 100 days, 30 a day, 5 minutes each.
  const now = Date.now();
  const calls = [];
  for (let i = 0; i < 3000; i++) {
    const start = new Date(now - (Math.floor(i / 30) * 86_400_000) - (i % 30) * 60_000 - 3_600_000).toISOString();
    calls.push(server.kernel.call('sessions.record', { auth, startTime: start, durationSeconds: 300 }));
  }
  await Promise.all(calls);
  const seen = [];
  const call = server.kernel.call.bind(server.kernel);
  server.kernel.call = (method, ...rest) => { seen.push(method); return call(method, ...rest); };
  t.after(() => { server.kernel.call = call; });
  const r = await request('GET', '/api/dashboard?days=366', { auth });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.ok(!seen.includes('sessions.list'), `the page listed sessions: ${seen.join(', ')}`);
  assert.ok(seen.length <= 8, `${seen.length} kernel calls for one page`);
  const minutes = r.body.days.reduce((sum, d) => sum + d.meditationMinutes, 0);
  assert.equal(Math.round(minutes), 3000 * 5, 'every session counted once, on its local day');
  assert.equal(r.body.meditation.totalSessions, 3000);
});

test('12. a signed-out session gets no ticket and no stream, and its open streams end', async (t) => {
  const { server, request } = await app(t, { STREAM_RECHECK_MS: 300 });
  const session = await server.kernel.call('auth.signUp', { email: 'streams@example.com', password: 'correct horse battery' });
  const other = await server.kernel.call('auth.signIn', { email: 'streams@example.com', password: 'correct horse battery' });
  const auth = session.accessToken;
  // Known to the server's cache first, as a page that has been open a while.
  assert.equal((await request('GET', '/api/verification/ios/connection', { auth })).status, 200);
  const controller = new AbortController();
  t.after(() => controller.abort());
  const stream = await fetch(`${server.url}/api/events`, { headers: { authorization: `Bearer ${other.accessToken}` }, signal: controller.signal });
  assert.equal(stream.status, 200);
  const ticket = (await request('POST', '/api/events/ticket', { auth })).body.ticket;
  assert.ok(ticket);

  await server.kernel.call('auth.signOut', { auth, scope: 'all' });
  assert.equal((await request('POST', '/api/events/ticket', { auth })).status, 401, 'no ticket for a signed-out token');
  const byTicket = await fetch(`${server.url}/api/events?ticket=${ticket}`);
  assert.equal(byTicket.status, 401, 'a ticket issued before the sign-out opens no stream');
  const byHeader = await fetch(`${server.url}/api/events`, { headers: { authorization: `Bearer ${auth}` } });
  assert.equal(byHeader.status, 401, 'nor does the token itself');
  assert.equal((await request('GET', '/api/verification/ios/connection', { auth })).status, 401);
  // The stream of the other session, opened before `signOut {scope: "all"}`, ends within a recheck.
  const started = Date.now();
  const reader = stream.body.getReader();
  for (;;) { const { done } = await reader.read(); if (done) break; }
  assert.ok(Date.now() - started < 5000, `ended after ${Date.now() - started} ms`);
});

// #51 item 10: the per-address limits were keyed on the whole IPv6 address, so one /64 (one customer) had
// 2^64 keys; they group as the kernel does: IPv4 as is, IPv6 by /56.
test('addresses are limited by IPv4 address or IPv6 /56, as the kernel counts them', () => {
  assert.equal(addressKey('203.0.113.9'), '203.0.113.9');
  assert.equal(addressKey('::ffff:203.0.113.9'), '203.0.113.9');
  assert.equal(addressKey('2001:db8:1:2:aaaa::1'), addressKey('2001:db8:1:2:bbbb:cccc:dddd:7'));
  assert.equal(addressKey('2001:db8:1:3::1'), addressKey('2001:db8:1:2::1'), 'two /64s of one /56');
  assert.equal(addressKey('2001:db8:1:ff::1'), '20010db8000100::/56');
  assert.notEqual(addressKey('2001:db8:1:100::1'), addressKey('2001:db8:1:ff::1'), 'the next /56');
  assert.equal(addressKey('2001:DB8:1:2::1%eth0'), addressKey('2001:db8:1:2::9'));
  assert.equal(addressKey('::1'), '00000000000000::/56');
  assert.equal(addressKey(undefined), '');
});
