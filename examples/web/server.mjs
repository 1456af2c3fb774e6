#!/usr/bin/env node
// An HTTP server that serves the seed apps' REST routes through one spawned healthkernel, plus a live
// dashboard. Node built-ins only. Start it with `scripts/web` (builds the kernel first) or
//   HEALTHKERNEL_BIN=.build/release/healthkernel node examples/web/server.mjs
// Env: PORT (3002), HOST (127.0.0.1), DATA_DIR (./data), HEALTHKERNEL_BIN, HEALTHKERNEL_CONFIG,
// BODY_LIMIT (bytes, 1 MiB; /ingest/healthkit takes 16 MiB), SERVICE_TOKEN (default: minted from the data dir).
import { createServer } from 'node:http';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Kernel, KernelError } from '../../clients/node/index.mjs';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

/** HTTP status for a JSON-RPC error code (protocol/rest-routes.md). */
export function httpStatus(code) {
  return { [-32602]: 400, [-32001]: 401, [-32003]: 403, [-32004]: 404, [-32009]: 409, [-32010]: 422,
           [-32029]: 429, [-32050]: 503 }[code] ?? 500;
}

/** An answer the route handler chose: status, JSON body, headers. */
class Reply {
  constructor(status, body, headers = {}) { this.status = status; this.body = body; this.headers = headers; }
}

/** Errors thrown before the kernel is asked (bad body, body too large). */
class HttpError extends Error {
  constructor(status, message, extra = {}) { super(message); this.status = status; this.extra = extra; }
}

const bearer = (req) => {
  const match = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization || '');
  return match ? match[1] : undefined;
};

/** The params of a user method: the body's members plus the bearer token as `auth`. */
const withAuth = (req, body) => ({ ...body, ...(bearer(req) ? { auth: bearer(req) } : {}) });

/** Renames body members (seed names to kernel names); unknown members pass through for the kernel to refuse. */
function rename(body, names) {
  const out = {};
  for (const [k, v] of Object.entries(body)) out[names[k] ?? k] = v;
  return out;
}

/**
 * The routes. Each calls one kernel method (or a few), shaping params and answers like the seed's own
 * backend did. `errors` overrides the seed's status and message for some codes; `fields` maps kernel
 * param names back to the seed's body names in error answers.
 */
export const routes = [
  // seed 000: Screen Time verification
  { method: 'GET', path: '/api/verification/ios/connection',
    handle: (k, req) => k.call('screentime.getConnection', withAuth(req, {})) },
  { method: 'PATCH', path: '/api/verification/ios/connection', body: true,
    handle: (k, req, body) => k.call('screentime.updateConnection', withAuth(req, body)) },
  { method: 'POST', path: '/api/verification/ios/upload', body: true,
    handle: (k, req, body) => k.call('screentime.upload', withAuth(req, body)) },
  // Not a seed route: the web app's own claim ("I used my phone N minutes"), which uploads verify.
  { method: 'POST', path: '/api/verification/claim', body: true,
    handle: (k, req, body) => k.call('screentime.claim', withAuth(req, body)) },

  // seed 004: meditation tracker
  { method: 'POST', path: '/api/auth/google', body: true,
    errors: { [-32010]: [401, 'Invalid Google token/code'], [-32001]: [401, 'Invalid Google token/code'],
              other: [500, 'Authentication processing failed'] },
    fields: { idToken: 'googleToken' },
    handle: async (k, req, body) => {
      if (body.googleAuthCode !== undefined && body.googleToken === undefined) {
        throw new HttpError(400, 'googleAuthCode is not supported: the kernel makes no network calls; send googleToken (an id token)');
      }
      const { googleToken, ...rest } = body;
      const session = await k.call('auth.exchange', { ...rest, provider: 'google', ...(googleToken === undefined ? {} : { idToken: googleToken }) });
      return { apiToken: session.accessToken, refreshToken: session.refreshToken, expiresIn: session.expiresIn };
    } },
  { method: 'POST', path: '/api/sessions', body: true,
    errors: { [-32602]: [400, 'Invalid session data format'], [-32001]: [401, 'Invalid or missing API token'],
              other: [500, 'Failed to save session'] },
    fields: { startTime: 'session_start_time', durationSeconds: 'duration_seconds', endTime: 'session_end_time' },
    handle: async (k, req, body) => {
      const params = rename(body, { session_start_time: 'startTime', duration_seconds: 'durationSeconds', session_end_time: 'endTime' });
      const session = await k.call('sessions.record', withAuth(req, params));
      return new Reply(201, { sessionId: session.sessionId, message: 'Session saved successfully' });
    } },

  // seed 003: in-app purchase (Supabase edge functions)
  { method: 'POST', path: '/functions/v1/verify-subscription', body: true,
    fields: { productId: 'product_id', receipt: 'receipt_or_token' },
    handle: async (k, req, body) => {
      const params = rename(body, { product_id: 'productId', receipt_or_token: 'receipt' });
      const m = await k.call('subscriptions.verify', withAuth(req, params));
      const active = m.status === 'active' || m.status === 'grace_period';
      return {
        status: active ? 'active' : 'inactive',
        product_id: m.productId,
        current_period_end: m.currentPeriodEnd,
        transaction_id: m.transactionId,
        original_transaction_id: m.originalTransactionId,
        ...(active ? {} : { error: m.error ?? m.status }),
      };
    } },
  { method: 'POST', path: '/functions/v1/refresh-subscriptions', body: 'optional',
    // The cron's service key is the caller's bearer token: the kernel checks its role.
    handle: async (k, req) => {
      const total = { checked: 0, expired: 0, renewed: 0, unchanged: 0, failed: 0, remaining: 0, mode: 'clock' };
      for (let round = 0; round < 10_000; round++) {
        const r = await k.call('subscriptions.refresh', withAuth(req, { limit: 500 }));
        for (const key of ['checked', 'expired', 'renewed', 'unchanged', 'failed']) total[key] += r[key];
        total.remaining = r.remaining;
        total.mode = r.mode;
        if (r.remaining === 0 || r.checked === 0) break;
      }
      return total;
    } },

  // seed 001: HealthGraphSync
  { method: 'POST', path: '/ingest/healthkit', body: true, limit: 16 * 1024 * 1024,
    handle: (k, req, body) => k.call('health.ingest', withAuth(req, body), { timeout: 120_000 }) },

  // the dashboard
  { method: 'GET', path: '/dashboard', handle: () => new Reply(200, dashboardPage, { 'content-type': 'text/html; charset=utf-8' }) },
  { method: 'GET', path: '/api/dashboard', handle: (k, req, _body, url) => dashboard(k, bearer(req), url) },
];

const dashboardPage = readFileSync(here('./dashboard.html'));

/** YYYY-MM-DD of `date` in time zone `zone`. */
function localDate(date, zone) {
  return new Intl.DateTimeFormat('en-CA', { timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit' }).format(date);
}

function addDays(date, days) {
  const [y, m, d] = date.split('-').map(Number);
  return new Date(Date.UTC(y, m - 1, d + days)).toISOString().slice(0, 10);
}

/** One user's last `days` days (default 30, at most 366) for the dashboard page, in their Screen Time zone. */
export async function dashboard(k, auth, url) {
  const count = Math.min(366, Math.max(1, Number(url.searchParams.get('days')) || 30));
  const connection = await k.call('screentime.getConnection', { auth });
  const zone = connection.timezone;
  const to = localDate(new Date(), zone);
  const from = addDays(to, 1 - count);
  const [history, penalties, stats, health, membership, sessions] = await Promise.all([
    k.call('screentime.history', { auth, from, to }),
    k.call('screentime.penalties', { auth, from, to }),
    k.call('sessions.stats', { auth, timezone: zone }),
    k.call('health.summary', { auth, from, to, types: ['HKQuantityTypeIdentifierStepCount'] }),
    k.call('subscriptions.status', { auth }),
    allSessions(k, auth, addDays(from, -1), addDays(to, 1)),
  ]);
  const days = [];
  for (let date = from; date <= to; date = addDays(date, 1)) {
    days.push({ date, claimedMinutes: null, verifiedMinutes: null, status: 'unclaimed', penaltyPoints: 0,
                meditationMinutes: 0, steps: null, sleepMinutes: null });
  }
  const byDate = new Map(days.map((d) => [d.date, d]));
  for (const h of history.days) {
    const d = byDate.get(h.date);
    if (d) Object.assign(d, { claimedMinutes: h.claimedMinutes, verifiedMinutes: h.verifiedMinutes, status: h.status, penaltyPoints: h.penaltyPoints });
  }
  for (const s of sessions) {
    const d = byDate.get(localDate(new Date(s.startTime), zone));
    if (d) d.meditationMinutes = Math.round((d.meditationMinutes + s.durationSeconds / 60) * 10) / 10;
  }
  for (const h of health.days) {
    const d = byDate.get(h.date);
    if (!d) continue;
    const steps = h.metrics.HKQuantityTypeIdentifierStepCount;
    if (steps) d.steps = steps.sum;
    if (h.sleep && h.sleep.asleep) d.sleepMinutes = Math.round(h.sleep.asleep / 6) / 10;
  }
  return {
    timezone: zone, from, to, days,
    penalties: { totalPoints: penalties.totalPoints },
    meditation: { currentStreakDays: stats.currentStreakDays, longestStreakDays: stats.longestStreakDays, totalSessions: stats.totalSessions },
    membership: { status: membership.status, productId: membership.productId, currentPeriodEnd: membership.currentPeriodEnd },
  };
}

async function allSessions(k, auth, from, to) {
  const out = [];
  let cursor;
  do {
    const page = await k.call('sessions.list', { auth, from, to, limit: 500, ...(cursor ? { cursor } : {}) });
    out.push(...page.sessions);
    cursor = page.nextCursor;
  } while (cursor);
  return out;
}

/** The user id of a token the kernel has just accepted (its signature is the kernel's to check). */
function subject(token) {
  try {
    return JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()).sub;
  } catch {
    return undefined;
  }
}

async function readBody(req, limit) {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) throw new HttpError(413, `Body larger than ${limit} bytes`);
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > limit) throw new HttpError(413, `Body larger than ${limit} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function parseBody(bytes, optional) {
  if (bytes.length === 0 && optional) return {};
  let body;
  try {
    body = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new HttpError(400, 'Invalid JSON body');
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new HttpError(400, 'The body must be a JSON object');
  return body;
}

function send(res, status, body, headers = {}) {
  const isBuffer = Buffer.isBuffer(body);
  const bytes = isBuffer ? body : Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': bytes.length, ...headers });
  res.end(bytes);
}

/** The answer for a failed route: the seed's `{error}` body, with the kernel's reason and the field. */
function errorReply(route, error) {
  if (error instanceof HttpError) return [error.status, { error: error.message, ...error.extra }];
  if (error instanceof KernelError) {
    const seed = route.errors?.[error.code] ?? (httpStatus(error.code) === 500 ? route.errors?.other : undefined);
    const [status, message] = seed ?? [httpStatus(error.code), error.message];
    const body = { error: message, reason: error.reason };
    if (error.field) {
      const name = error.field.replace(/^params\./, '');
      const top = name.split(/[.[]/)[0];
      body.field = route.fields?.[top] ? route.fields[top] + name.slice(top.length) : name;
    }
    return [status, body];
  }
  // The kernel is gone (restarting) or too slow: nothing is known to be stored, retry later.
  return [503, { error: 'The kernel is unavailable; retry later', reason: error.code ?? 'unavailable' }];
}

/**
 * Starts the kernel and the HTTP server. Resolves with {url, server, kernel, close}; `close` drains
 * in-flight requests, ends the event streams and closes the kernel cleanly.
 */
export async function start({
  port = Number(process.env.PORT ?? 3002), host = process.env.HOST ?? '127.0.0.1',
  dataDir = process.env.DATA_DIR ?? './data', binary = process.env.HEALTHKERNEL_BIN ?? here('../../.build/release/healthkernel'),
  kernelArgs = [], env = {}, serviceToken = process.env.SERVICE_TOKEN,
  bodyLimit = Number(process.env.BODY_LIMIT ?? 1024 * 1024), log = (line) => process.stderr.write(line + '\n'),
} = {}) {
  const kernelEnv = { ...env };
  const service = serviceToken ?? execFileSync(binary, ['token', '--role', 'service_role', '--ttl', '31536000', '--data-dir', dataDir],
    { env: { ...process.env, ...kernelEnv } }).toString().trim();
  const kernel = await Kernel.spawn({ binary, args: ['serve', '--data-dir', dataDir, ...kernelArgs], env: kernelEnv, restart: true });
  kernel.on('stderr', (line) => log(`kernel: ${line}`));

  // One subscription to the kernel's events fans out to every browser's event stream.
  const streams = new Set();
  const subscribe = () => kernel.call('events.subscribe', { auth: service }).catch((e) => log(`events.subscribe failed: ${e.message}`));
  await subscribe();
  kernel.on('spawn', () => { subscribe(); });
  kernel.on('events.changed', (change) => {
    const line = `event: change\ndata: ${JSON.stringify(change)}\n\n`;
    for (const stream of streams) if (stream.userId === change.userId) stream.res.write(line);
  });

  let inFlight = 0;
  let draining = null;
  const server = createServer(async (req, res) => {
    inFlight += 1;
    try {
      await serve(req, res);
    } finally {
      inFlight -= 1;
      if (inFlight === 0 && draining) draining();
    }
  });

  async function serve(req, res) {
    const url = new URL(req.url, 'http://localhost');
    if (req.method === 'GET' && url.pathname === '/healthz') {
      try {
        const info = await kernel.call('kernel.info', undefined, { timeout: 2000 });
        return send(res, 200, { ok: true, version: info.version, uptimeSeconds: info.uptimeSeconds });
      } catch (e) {
        return send(res, 503, { ok: false, error: e.message });
      }
    }
    if (req.method === 'GET' && url.pathname === '/api/events') return events(req, res, url);
    const matching = routes.filter((r) => r.path === url.pathname);
    if (matching.length === 0) return send(res, 404, { error: 'Not found' });
    const route = matching.find((r) => r.method === req.method);
    if (!route) return send(res, 405, { error: 'Method not allowed' }, { allow: matching.map((r) => r.method).join(', ') });
    try {
      const body = route.body ? parseBody(await readBody(req, route.limit ?? bodyLimit), route.body === 'optional') : {};
      const answer = await route.handle(kernel, req, body, url);
      if (answer instanceof Reply) return send(res, answer.status, answer.body, answer.headers);
      return send(res, 200, answer);
    } catch (error) {
      const [status, body] = errorReply(route, error);
      if (status === 413) res.setHeader('connection', 'close');
      return send(res, status, body);
    }
  }

  /** Server-sent events of one user's changes; EventSource cannot send headers, so the token may come as ?access_token=. */
  async function events(req, res, url) {
    const token = bearer(req) ?? url.searchParams.get('access_token') ?? undefined;
    try {
      await kernel.call('screentime.getConnection', { auth: token }); // the kernel checks the token
    } catch (error) {
      const [status, body] = errorReply({}, error);
      return send(res, status, body);
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    res.write(': connected\n\n');
    const stream = { userId: subject(token), res };
    streams.add(stream);
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), 15_000);
    await new Promise((resolve) => {
      res.on('close', resolve);
      stream.end = () => { res.end(); resolve(); };
    });
    clearInterval(keepAlive);
    streams.delete(stream);
  }

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address();
  const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;

  async function close() {
    server.close();
    for (const stream of [...streams]) stream.end();
    server.closeIdleConnections?.();
    if (inFlight > 0) await new Promise((resolve) => { draining = resolve; });
    return kernel.close();
  }
  return { url, server, kernel, close };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const app = await start();
  process.stderr.write(`healthkernel example listening on ${app.url}\n`);
  // A token for one user (DASHBOARD_USER, a UUID) opens that user's dashboard; DEMO=1 first fills it with a month of data.
  const user = process.env.DASHBOARD_USER ?? (process.env.DEMO === '1' ? '00000000-0000-4000-8000-00000000d0d0' : null);
  if (user) {
    const binary = process.env.HEALTHKERNEL_BIN ?? here('../../.build/release/healthkernel');
    const token = execFileSync(binary, ['token', '--user', user, '--ttl', '86400', '--data-dir', process.env.DATA_DIR ?? './data']).toString().trim();
    if (process.env.DEMO === '1') await (await import('./demo.mjs')).seedDemo(app.url, token);
    process.stderr.write(`dashboard: ${app.url}/dashboard#token=${token}\n`);
  } else {
    process.stderr.write(`dashboard: ${app.url}/dashboard#token=<access token> (or start with DEMO=1)\n`);
  }
  let stopping = false;
  for (const signal of ['SIGTERM', 'SIGINT']) {
    process.on(signal, async () => {
      if (stopping) return;
      stopping = true;
      const exit = await app.close();
      process.stderr.write(`stopped; kernel exit ${JSON.stringify(exit)}\n`);
      process.exit(exit?.code === 0 ? 0 : 1);
    });
  }
}
