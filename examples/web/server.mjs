#!/usr/bin/env node
// An HTTP server that serves the seed apps' REST routes through one spawned healthkernel, plus a live
// dashboard. Node built-ins only. Start it with `scripts/web` (builds the kernel first) or
//   HEALTHKERNEL_BIN=.build/release/healthkernel node examples/web/server.mjs
// With `--connect unix:PATH` (or KERNEL_SOCKET=PATH) it uses a kernel already serving on that socket
// (`healthkernel serve --listen unix:PATH`, as the Debian package's unit runs it) instead of spawning one.
// Env: PORT (3002), HOST (127.0.0.1), DATA_DIR (./data), HEALTHKERNEL_BIN, HEALTHKERNEL_CONFIG,
// BODY_LIMIT (bytes, 1 MiB; /ingest/healthkit takes 16 MiB), SERVICE_TOKEN (required: the server refuses to
// start without one, except with DEMO=1, which mints a one-day token from the data dir),
// and the limits in `limitDefaults` below (protocol/rest-routes.md, "Limits"). Put a reverse proxy in front of
// it on a public network: these limits keep one process alive, they are no defence against a flood.
import { createServer } from 'node:http';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Kernel, KernelError, KernelTimeoutError } from '../../clients/node/index.mjs';
import { openapiDocument } from './openapi.mjs';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

/** A setting the server cannot start without is missing (the command line exits 2, as the kernel does for its configuration). */
export class StartError extends Error {}

/** HTTP status for a JSON-RPC error code (protocol/rest-routes.md). */
export function httpStatus(code, reason) {
  if (reason === 'line_too_long') return 413;
  return { [-32700]: 400, [-32600]: 400, [-32602]: 400, [-32001]: 401, [-32003]: 403, [-32004]: 404, [-32009]: 409,
           [-32010]: 422, [-32029]: 429, [-32050]: 503 }[code] ?? 500;
}

/** A request without a token, refused as the kernel would refuse it (so routes answer it in the seed's words). */
const missingToken = new KernelError({ code: -32001, message: 'Missing bearer token', data: { reason: 'missing_token' } });

/** The example server's own limits; each can be set by the environment variable of the same name. */
export const limitDefaults = {
  MAX_CONNECTIONS: 1024,            // open HTTP connections; more are refused by the socket
  CONNECTIONS_PER_ADDRESS: 64,      // open HTTP connections from one client address; more are closed at once
  IDLE_CONNECTION_MS: 5_000,        // a new connection that has not sent a request within this is closed
  HEADERS_TIMEOUT_MS: 10_000,       // a request's headers must arrive within this (408 and closed)
  BODY_IDLE_MS: 10_000,             // a body that sends nothing for this long is answered 408 and closed
  REQUEST_TIMEOUT_MS: 120_000,      // a whole request (headers and body) must arrive within this
  BODY_BYTES_IN_FLIGHT: 64 << 20,   // request body bytes buffered at once, counted as they arrive, all requests together: past it, 503
  BODY_BYTES_PER_ADDRESS: 24 << 20, // of those, bytes from one client address: past it, 429
  STREAMS_PER_USER: 4,              // open /api/events streams per user: past it, 429
  STREAM_BUFFER_BYTES: 256 << 10,   // unsent bytes of one events stream before it is dropped
  STREAM_COALESCE_MS: 250,          // changes within this window reach a stream as one event per entity
  UNAUTHENTICATED_PER_MINUTE: 30,   // requests to routes without a token, per client address
  UNAUTHENTICATED_BURST: 10,
  TOKEN_CACHE_ENTRIES: 10_000,      // access tokens the kernel accepted, kept until they expire or the kernel refuses them
  STREAM_RECHECK_MS: 30_000,        // how often an open events stream asks the kernel whether its session still stands
  TICKET_SECONDS: 60,               // how long an /api/events ticket may wait for its stream (used once)
  TICKETS_MAX: 10_000,              // unused tickets kept at once: past it, the oldest is forgotten
};

/** An answer the route handler chose: status, JSON body, headers. */
class Reply {
  constructor(status, body, headers = {}) { this.status = status; this.body = body; this.headers = headers; }
}

/** Errors thrown before the kernel is asked (bad body, body too large). */
class HttpError extends Error {
  constructor(status, message, extra = {}, headers = {}) {
    super(message);
    this.status = status;
    this.extra = extra;
    this.headers = headers;
  }
}

const bearer = (req) => {
  const match = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization || '');
  return match ? match[1] : undefined;
};

/** The params of a user method: the body's members plus the bearer token as `auth`. */
const withAuth = (req, body) => ({ ...body, ...(bearer(req) ? { auth: bearer(req) } : {}) });

/**
 * Renames body members (seed names to kernel names); unknown members pass through for the kernel to refuse.
 * Own-property lookups and fromEntries only: a member named `__proto__` stays a plain member.
 */
function rename(body, names) {
  return Object.fromEntries(Object.entries(body).map(([k, v]) => [Object.hasOwn(names, k) ? names[k] : k, v]));
}

/**
 * `GET /api/sync/changes`'s query: `since`, `limit`, `entities` (comma-separated), `includeData`. A value
 * that is not of its kind is passed on as the string it is, for the kernel to refuse with its field.
 */
const syncQuery = {
  names: ['since', 'limit', 'entities', 'includeData'],
  read(url) {
    const q = url.searchParams, params = {};
    if (q.has('since')) params.since = q.get('since');
    if (q.has('limit')) params.limit = /^\d{1,9}$/.test(q.get('limit')) ? Number(q.get('limit')) : q.get('limit');
    if (q.has('entities')) params.entities = q.get('entities').split(',');
    if (q.has('includeData')) params.includeData = { true: true, false: false }[q.get('includeData')] ?? q.get('includeData');
    for (const name of q.keys()) if (!this.names.includes(name)) params[name] = q.get(name);
    return params;
  },
};

const nullable = (type) => ({ type: [type, 'null'] });
/** The answer of `dashboard` (below). */
const dashboardSchema = {
  type: 'object', required: ['timezone', 'from', 'to', 'days', 'penalties', 'meditation', 'membership'],
  properties: {
    timezone: { type: 'string' }, from: { type: 'string', format: 'date' }, to: { type: 'string', format: 'date' },
    days: { type: 'array', items: { type: 'object',
      required: ['date', 'claimedMinutes', 'verifiedMinutes', 'status', 'penaltyPoints', 'meditationMinutes', 'steps', 'sleepMinutes'],
      properties: { date: { type: 'string', format: 'date' }, claimedMinutes: nullable('integer'), verifiedMinutes: nullable('integer'),
                    status: { type: 'string' }, penaltyPoints: { type: 'integer' }, meditationMinutes: { type: 'number' },
                    steps: nullable('number'), sleepMinutes: nullable('number') } } },
    penalties: { type: 'object', required: ['totalPoints'], properties: { totalPoints: { type: 'integer' } } },
    meditation: { type: 'object', required: ['currentStreakDays', 'longestStreakDays', 'totalSessions'],
                  properties: { currentStreakDays: { type: 'integer' }, longestStreakDays: { type: 'integer' }, totalSessions: { type: 'integer' } } },
    membership: { type: 'object', required: ['status'],
                  properties: { status: { type: 'string' }, productId: nullable('string'), currentPeriodEnd: nullable('string') } },
  },
};

/**
 * The routes. Each calls one kernel method (or a few), shaping params and answers like the seed's own
 * backend did. `errors` overrides the seed's status and message for some codes; `fields` maps kernel
 * param names back to the seed's body names in error answers.
 */
export const routes = [
  // seed 000: Screen Time verification
  { method: 'GET', path: '/api/verification/ios/connection', auth: 'user', rpc: 'screentime.getConnection',
    handle: (k, req) => k.call('screentime.getConnection', withAuth(req, {})) },
  { method: 'PATCH', path: '/api/verification/ios/connection', body: true, auth: 'user', rpc: 'screentime.updateConnection',
    handle: (k, req, body) => k.call('screentime.updateConnection', withAuth(req, body)) },
  { method: 'POST', path: '/api/verification/ios/upload', body: true, auth: 'user', rpc: 'screentime.upload',
    handle: async (k, req, body) => {
      try {
        return await k.call('screentime.upload', withAuth(req, body));
      } catch (error) {
        // A fresh user's first upload: say how to fix it in this server's words.
        if (error instanceof KernelError && error.reason === 'connection_disabled') {
          error.message = 'Uploads are refused while Screen Time verification is off for this user: turn it on with '
            + 'PATCH /api/verification/ios/connection {"enabled": true, "timezone": "<IANA zone>"}';
        }
        throw error;
      }
    } },
  // Not a seed route: the web app's own claim ("I used my phone N minutes"), which uploads verify.
  { method: 'POST', path: '/api/verification/claim', body: true, auth: 'user', rpc: 'screentime.claim',
    handle: (k, req, body) => k.call('screentime.claim', withAuth(req, body)) },

  // seed 004: meditation tracker
  { method: 'POST', path: '/api/auth/google', body: true, auth: 'none', operationId: 'googleSignIn',
    errors: { [-32010]: [401, 'Invalid Google token/code'], [-32001]: [401, 'Invalid Google token/code'],
              other: [500, 'Authentication processing failed'] },
    fields: { idToken: 'googleToken' }, rpc: 'auth.exchange', serverSets: ['provider'],
    summary: 'Signs in with a Google id token (seed 004): the kernel verifies it against Google\'s keys.',
    response: { type: 'object', required: ['apiToken', 'refreshToken', 'expiresIn'],
                properties: { apiToken: { type: 'string' }, refreshToken: { type: 'string' }, expiresIn: { type: 'integer' } } },
    handle: async (k, req, body) => {
      if (body.googleAuthCode !== undefined && body.googleToken === undefined) {
        throw new HttpError(400, 'googleAuthCode is not supported: the kernel makes no network calls; send googleToken (an id token)');
      }
      const { googleToken, ...rest } = body;
      const session = await k.call('auth.exchange', { ...rest, provider: 'google', ...(googleToken === undefined ? {} : { idToken: googleToken }) });
      return { apiToken: session.accessToken, refreshToken: session.refreshToken, expiresIn: session.expiresIn };
    } },
  { method: 'POST', path: '/api/sessions', body: true, auth: 'user',
    errors: { [-32602]: [400, 'Invalid session data format'], [-32001]: [401, 'Invalid or missing API token'],
              other: [500, 'Failed to save session'] },
    fields: { startTime: 'session_start_time', durationSeconds: 'duration_seconds', endTime: 'session_end_time', clientSessionId: 'client_session_id' },
    rpc: 'sessions.record', status: 201, summary: 'Saves a meditation session (seed 004).',
    response: { type: 'object', required: ['sessionId', 'message'], properties: { sessionId: { type: 'string' }, message: { type: 'string' } } },
    handle: async (k, req, body) => {
      // client_session_id (optional) makes a retried save the same session, as sessions.record's clientSessionId does.
      const params = rename(body, { session_start_time: 'startTime', duration_seconds: 'durationSeconds', session_end_time: 'endTime',
                                    client_session_id: 'clientSessionId' });
      const session = await k.call('sessions.record', withAuth(req, params));
      return new Reply(201, { sessionId: session.sessionId, message: 'Session saved successfully' });
    } },

  // seed 003: in-app purchase (Supabase edge functions)
  { method: 'POST', path: '/functions/v1/verify-subscription', body: true, auth: 'user',
    fields: { productId: 'product_id', receipt: 'receipt_or_token' }, rpc: 'subscriptions.verify',
    summary: 'Verifies an App Store purchase to Apple\'s root and answers the membership (seed 003).',
    response: { type: 'object', required: ['status'], properties: {
      status: { enum: ['active', 'inactive'] }, product_id: { type: ['string', 'null'] }, current_period_end: { type: ['string', 'null'] },
      transaction_id: { type: ['string', 'null'] }, original_transaction_id: { type: ['string', 'null'] }, error: { type: 'string' } } },
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
  // App Store Server Notifications V2: Apple posts {signedPayload} with no token (the kernel checks the
  // signature to Apple's root). Apple retries a notification after any answer but 2xx and 4xx, so a 4xx
  // is kept for one that can never be accepted (a bad signature, another app's, not a notification), and
  // anything the kernel could not store now is a 5xx. Applying one twice changes nothing (notificationUUID).
  { method: 'POST', path: '/functions/v1/app-store-notifications', body: true, auth: 'signed', limit: 256 << 10, rpc: 'subscriptions.notify',
    summary: 'App Store Server Notifications V2: {signedPayload}, signed by Apple (no token).',
    response: { type: 'object', required: ['ok'], properties: { ok: { const: true }, notification_type: { type: 'string' }, duplicate: { type: 'boolean' } } },
    handle: async (k, req, body, url, { service }) => {
      try {
        const r = await k.call('subscriptions.notify', { auth: service, signedPayload: body.signedPayload });
        return { ok: true, notification_type: r.notificationType, duplicate: r.duplicate };
      } catch (error) {
        if (error instanceof KernelError && (error.code === -32602 || error.code === -32010)) throw error;
        throw new HttpError(503, 'The notification could not be stored now; Apple will send it again', { reason: 'retry_later' });
      }
    } },
  { method: 'POST', path: '/functions/v1/refresh-subscriptions', body: 'optional', auth: 'service', operationId: 'refreshSubscriptions',
    summary: 'The daily re-check of every membership (a cron with a service token), run to the end.',
    request: { type: 'object', additionalProperties: false, properties: {} },
    response: { type: 'object', required: ['checked', 'expired', 'renewed', 'unchanged', 'failed', 'remaining', 'mode'],
                properties: { checked: { type: 'integer' }, expired: { type: 'integer' }, renewed: { type: 'integer' }, unchanged: { type: 'integer' },
                              failed: { type: 'integer' }, remaining: { type: 'integer' }, mode: { type: 'string' }, consumption: { type: 'object' } } },
    // The cron's service key is the caller's bearer token: the kernel checks its role.
    handle: async (k, req) => {
      const total = { checked: 0, expired: 0, renewed: 0, unchanged: 0, failed: 0, remaining: 0, mode: 'clock', consumption: { sent: 0, failed: 0 } };
      for (let round = 0; round < 10_000; round++) {
        const r = await k.call('subscriptions.refresh', withAuth(req, { limit: 500 }));
        for (const key of ['checked', 'expired', 'renewed', 'unchanged', 'failed']) total[key] += r[key];
        for (const key of ['sent', 'failed']) total.consumption[key] += r.consumption?.[key] ?? 0;
        total.remaining = r.remaining;
        total.mode = r.mode;
        if (r.remaining === 0 || r.checked === 0) break;
      }
      return total;
    } },

  // seed 001: HealthGraphSync
  { method: 'POST', path: '/ingest/healthkit', body: true, auth: 'user', limit: 16 * 1024 * 1024, rpc: 'health.ingest',
    handle: (k, req, body) => k.call('health.ingest', withAuth(req, body), { timeout: 120_000 }) },

  // An app backend's accounts (protocol/rest-routes.md, "Accounts"): each a thin forward to the kernel
  // method named by `rpc`, with its params as the JSON body and its errors as they are. The end user's
  // address goes to the kernel's sign-in throttle as the server saw it, never as the body says.
  { method: 'POST', path: '/api/auth/signup', body: true, auth: 'none', rpc: 'auth.signUp', serverSets: ['clientAddress'],
    handle: (k, req, body) => k.call('auth.signUp', { ...body, clientAddress: addressKey(req.socket.remoteAddress) }) },
  { method: 'POST', path: '/api/auth/signin', body: true, auth: 'none', rpc: 'auth.signIn', schema: 'Session', serverSets: ['clientAddress'],
    handle: (k, req, body) => k.call('auth.signIn', { ...body, clientAddress: addressKey(req.socket.remoteAddress) }) },
  { method: 'POST', path: '/api/auth/refresh', body: true, auth: 'none', rpc: 'auth.refresh', schema: 'Session',
    handle: (k, req, body) => k.call('auth.refresh', body) },
  { method: 'POST', path: '/api/auth/signout', body: 'optional', auth: 'user', rpc: 'auth.signOut',
    handle: (k, req, body) => k.call('auth.signOut', withAuth(req, body)) },
  // Sign in with Apple or Google: {provider, idToken}; with a bearer token, links the identity to that account.
  { method: 'POST', path: '/api/auth/exchange', body: true, auth: 'none', rpc: 'auth.exchange', schema: 'Session',
    handle: (k, req, body) => k.call('auth.exchange', withAuth(req, body)) },
  // Accounts that recover (protocol/auth.md): the kernel makes the mail, `onMail` (below) sends it.
  { method: 'POST', path: '/api/auth/password/reset-request', body: true, auth: 'none', rpc: 'auth.requestPasswordReset', serverSets: ['clientAddress'],
    handle: (k, req, body) => k.call('auth.requestPasswordReset', { ...body, clientAddress: addressKey(req.socket.remoteAddress) }) },
  { method: 'POST', path: '/api/auth/password/reset', body: true, auth: 'none', rpc: 'auth.resetPassword',
    handle: (k, req, body) => k.call('auth.resetPassword', body) },
  { method: 'POST', path: '/api/auth/email/verify-request', body: 'optional', auth: 'user', rpc: 'auth.requestEmailVerification',
    handle: (k, req, body) => k.call('auth.requestEmailVerification', withAuth(req, body)) },
  { method: 'POST', path: '/api/auth/email/verify', body: true, auth: 'none', rpc: 'auth.verifyEmail',
    handle: (k, req, body) => k.call('auth.verifyEmail', body) },
  { method: 'GET', path: '/api/auth/user', auth: 'user', rpc: 'auth.user',
    handle: (k, req) => k.call('auth.user', withAuth(req, {})) },
  { method: 'DELETE', path: '/api/auth/user', auth: 'user', rpc: 'auth.deleteUser',
    handle: (k, req) => k.call('auth.deleteUser', withAuth(req, {})) },

  // HealthKit deletions and the change feed a device syncs from.
  { method: 'POST', path: '/api/health/delete', body: true, auth: 'user', rpc: 'health.delete',
    handle: (k, req, body) => k.call('health.delete', withAuth(req, body)) },
  { method: 'GET', path: '/api/sync/changes', auth: 'user', rpc: 'sync.changes', query: syncQuery,
    handle: (k, req, _body, url) => k.call('sync.changes', withAuth(req, syncQuery.read(url))) },

  // Served by the server itself (`raw`: a handler of `start`'s, before any token or body is read).
  { method: 'GET', path: '/healthz', raw: 'health', summary: 'Whether the kernel answers: its version and uptime (503 when it does not).',
    response: { type: 'object', required: ['ok'], properties: { ok: { type: 'boolean' }, version: { type: 'string' }, uptimeSeconds: { type: 'number' }, error: { type: 'string' } } } },
  { method: 'GET', path: '/openapi.json', raw: 'openapi', summary: 'This document.', response: { type: 'object' } },
  { method: 'POST', path: '/api/events/ticket', raw: 'ticket', auth: 'user', operationId: 'eventsTicket',
    summary: 'A one-use ticket (TICKET_SECONDS) to open GET /api/events?ticket= with: EventSource sends no Authorization header.',
    response: { type: 'object', required: ['ticket', 'expiresIn'], properties: { ticket: { type: 'string' }, expiresIn: { type: 'integer' } } } },
  { method: 'GET', path: '/api/events', raw: 'events', operationId: 'events', summary: 'Server-sent events of the user\'s changes (?ticket= from POST /api/events/ticket).',
    parameters: [{ name: 'ticket', in: 'query', required: false, schema: { type: 'string' } }], html: 'text/event-stream' },

  // the dashboard
  { method: 'GET', path: '/', auth: 'none', html: true, operationId: 'home', summary: 'A page linking the dashboard and this document.', handle: () => new Reply(200, homePage, { 'content-type': 'text/html; charset=utf-8' }) },
  { method: 'GET', path: '/dashboard', auth: 'none', html: true, summary: 'The live dashboard page (open it with #token=ACCESS_TOKEN).', handle: () => new Reply(200, dashboardPage, { 'content-type': 'text/html; charset=utf-8' }) },
  { method: 'GET', path: '/api/dashboard', auth: 'user', operationId: 'dashboard', summary: 'What the dashboard shows of the user: the last ?days= days (1 to 366, default 30) to today in their time zone.',
    parameters: [{ name: 'days', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 366, default: 30 } }],
    response: dashboardSchema, handle: (k, req, _body, url) => dashboard(k, bearer(req), url) },
];

const dashboardPage = readFileSync(here('./dashboard.html'));

/** `GET /`: what this server is, and where its dashboard and API description are. */
const homePage = Buffer.from(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>healthkernel example server</title></head>
<body><h1>healthkernel example server</h1>
<p>The REST routes of an app backend, each forwarded to a healthkernel.</p>
<ul><li><a href="/dashboard">Dashboard</a> (open it with <code>#token=ACCESS_TOKEN</code>)</li>
<li><a href="/openapi.json">OpenAPI document</a> of the routes</li>
<li><a href="/healthz">Health check</a></li></ul>
</body></html>
`);

/** A date formatter per time zone, made once: building one costs more than a dashboard's other work. */
const dateFormats = new Map();

/** YYYY-MM-DD of `date` in time zone `zone`. */
function localDate(date, zone) {
  let format = dateFormats.get(zone);
  if (!format) {
    format = new Intl.DateTimeFormat('en-CA', { timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit' });
    if (dateFormats.size >= 1000) dateFormats.delete(dateFormats.keys().next().value);
    dateFormats.set(zone, format);
  }
  return format.format(date);
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
  // Every part is bounded by the days asked for: the kernel totals the sessions of each day, so a user
  // with 100,000 sessions costs the page what one with ten does.
  const [history, penalties, stats, health, membership] = await Promise.all([
    k.call('screentime.history', { auth, from, to }),
    k.call('screentime.penalties', { auth, from, to }),
    k.call('sessions.stats', { auth, timezone: zone, from, to }),
    k.call('health.summary', { auth, from, to, types: ['HKQuantityTypeIdentifierStepCount'] }),
    k.call('subscriptions.status', { auth }),
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
  for (const s of stats.days) {
    const d = byDate.get(s.date);
    if (d) d.meditationMinutes = Math.round(s.seconds / 6) / 10;
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

/** The claims of a token the kernel has just accepted (its signature is the kernel's to check). */
function payload(token) {
  try {
    return JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());
  } catch {
    return undefined;
  }
}

/**
 * Bytes of request bodies buffered at once: all requests together, and per client address. A request
 * takes its share chunk by chunk as bytes arrive (a declared length costs nothing until it is sent)
 * and gives it back when its answer is sent.
 */
class BodyBudget {
  constructor(limit, perAddress) { this.limit = limit; this.perAddress = perAddress; this.used = 0; this.byAddress = new Map(); }
  take(bytes, address) {
    const mine = this.byAddress.get(address) ?? 0;
    if (mine + bytes > this.perAddress) {
      throw new HttpError(429, 'Too many request bodies in flight from this address; retry later', { reason: 'busy' }, { 'retry-after': '1' });
    }
    if (this.used + bytes > this.limit) {
      throw new HttpError(503, 'Too many request bodies in flight; retry later', { reason: 'busy' }, { 'retry-after': '1' });
    }
    this.used += bytes;
    this.byAddress.set(address, mine + bytes);
  }
  give(bytes, address) {
    if (bytes === 0) return;
    this.used -= bytes;
    const left = (this.byAddress.get(address) ?? 0) - bytes;
    if (left > 0) this.byAddress.set(address, left); else this.byAddress.delete(address);
  }
}

/**
 * Reads a body of at most `limit` bytes, counting each chunk against `budget` for `held.address` as it
 * arrives (`held.bytes`: what it took). A body that sends nothing for `idleMs` is answered 408 and its
 * connection closed, so a slow sender holds neither memory nor a socket for long.
 */
async function readBody(req, res, limit, budget, held, idleMs) {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) throw new HttpError(413, `Body larger than ${limit} bytes`);
  const chunks = [];
  let size = 0;
  let timer;
  const idle = () => {
    send(res, 408, { error: `No body bytes for ${idleMs} ms`, reason: 'body_timeout' }, { connection: 'close' });
    res.once('finish', () => req.destroy());
  };
  try {
    timer = setTimeout(idle, idleMs);
    for await (const chunk of req) {
      clearTimeout(timer);
      timer = setTimeout(idle, idleMs);
      size += chunk.length;
      if (size > limit) throw new HttpError(413, `Body larger than ${limit} bytes`);
      budget.take(chunk.length, held.address);
      held.bytes = size;
      chunks.push(chunk);
    }
  } finally {
    clearTimeout(timer);
  }
  return Buffer.concat(chunks);
}

/** Whether a content-type header names JSON (application/json, or a +json type). */
const isJSONType = (type) => /^application\/(?:[\w.-]+\+)?json\s*(?:;|$)/i.test(type ?? '');

function parseBody(bytes, optional, type) {
  if (bytes.length === 0 && optional) return {};
  if (!isJSONType(type)) throw new HttpError(415, 'The body must be application/json');
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
  if (res.headersSent || res.destroyed) return;
  const isBuffer = Buffer.isBuffer(body);
  const bytes = isBuffer ? body : Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': bytes.length, ...headers });
  res.end(bytes);
}

/** The answer for a failed route: the seed's `{error}` body, with the kernel's reason and the field. */
function errorReply(route, error) {
  if (error instanceof HttpError) return [error.status, { error: error.message, ...error.extra }];
  if (error instanceof KernelError) {
    const own = (table, key) => (table && Object.hasOwn(table, key) ? table[key] : undefined);
    const status = httpStatus(error.code, error.reason);
    const seed = own(route.errors, error.code) ?? (status === 500 ? own(route.errors, 'other') : undefined);
    const [code, message] = seed ?? [status, error.message];
    const body = { error: message, reason: error.reason };
    if (error.field) {
      const name = error.field.replace(/^params\./, '');
      const top = name.split(/[.[]/)[0];
      const seedName = own(route.fields, top);
      body.field = seedName ? seedName + name.slice(top.length) : name;
    }
    return [code, body];
  }
  if (error instanceof KernelTimeoutError) {
    return [504, { error: 'The kernel did not answer in time; the request may have been applied', reason: 'timeout' }];
  }
  // The kernel is gone (restarting): the request was not answered, retry later.
  return [503, { error: 'The kernel is unavailable; retry later', reason: error.code ?? 'unavailable' }];
}

/** The settings in `limitDefaults`, each from the environment when set there, then from `overrides`. */
function limitSettings(overrides) {
  const out = {};
  for (const [name, value] of Object.entries(limitDefaults)) {
    const env = process.env[name];
    out[name] = overrides[name] ?? (env !== undefined && env !== '' ? Number(env) : value);
  }
  return out;
}

/**
 * Access tokens the kernel has accepted, with their expiry, so a request is refused before its body is
 * read and the kernel is asked once per token, not once per request. Bounded: the oldest entry goes first.
 */
/** Seconds past `exp` a token is still taken, as the kernel takes it. */
export const clockSkewSeconds = 60;

class TokenCache {
  constructor(kernel, size) { this.kernel = kernel; this.size = size; this.entries = new Map(); }

  /**
   * {userId, expiresAt} of a token the kernel accepts; rejects with the kernel's error otherwise. `fresh`
   * asks the kernel even for a cached token: a signed-out session ends there, not at the token's `exp`.
   */
  async check(token, { fresh = false } = {}) {
    const now = Date.now();
    const hit = this.entries.get(token);
    if (hit && hit.expiresAt > now && !fresh) return hit;
    this.entries.delete(token);
    await this.kernel.call('screentime.getConnection', { auth: token }, { timeout: 5000 }); // the kernel verifies it
    const claims = payload(token);
    // One allowance for clock skew with the kernel (AuthService.clockSkewSeconds): a token is good until a
    // minute past its `exp` here too, and refused past it with the kernel's word, `expired_token`.
    const entry = { userId: claims?.sub, expiresAt: (Number(claims?.exp) + clockSkewSeconds) * 1000 };
    if (!(entry.expiresAt > now)) throw new KernelError({ code: -32001, message: 'The token has expired', data: { reason: 'expired_token' } });
    if (this.entries.size >= this.size) this.entries.delete(this.entries.keys().next().value);
    this.entries.set(token, entry);
    return entry;
  }

  /** Forgets a token the kernel has just refused (its session ended): the next request asks again. */
  forget(token) { this.entries.delete(token); }
}

/**
 * The key a client address is limited under, as the kernel counts addresses (`Throttle.addressKey`): an
 * IPv4 address as it is (an IPv4-mapped IPv6 one too), an IPv6 address by the /56 it lies in, since one
 * customer is handed a /64 at least and commonly a /56: keyed by whole address, one /64 was unlimited.
 */
export function addressKey(raw) {
  const text = String(raw ?? '');
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(text);
  if (mapped) return mapped[1];
  if (!text.includes(':')) return text;
  const zone = text.indexOf('%');
  const bare = zone >= 0 ? text.slice(0, zone) : text;
  const [head, tail] = bare.split('::');
  const part = (s) => (s ? s.split(':') : []);
  const left = part(head), right = tail === undefined ? [] : part(tail);
  const groups = [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  const hex = groups.slice(0, 4).map((g) => g.padStart(4, '0').toLowerCase()).join('');
  return `${hex.slice(0, 14)}::/56`;
}

/** Token buckets per client address for routes that take no token (account creation among them). */
class AddressLimiter {
  constructor(perMinute, burst, maxAddresses = 100_000) {
    this.rate = perMinute / 60_000;
    this.burst = burst;
    this.maxAddresses = maxAddresses;
    this.buckets = new Map();
  }

  /** Milliseconds to wait before `address` may try again, or 0 when it may go now (and a token is spent). */
  take(address) {
    if (this.rate <= 0) return 0;
    const now = Date.now();
    let bucket = this.buckets.get(address);
    if (!bucket) {
      if (this.buckets.size >= this.maxAddresses) this.buckets.delete(this.buckets.keys().next().value);
      bucket = { tokens: this.burst, at: now };
      this.buckets.set(address, bucket);
    }
    bucket.tokens = Math.min(this.burst, bucket.tokens + (now - bucket.at) * this.rate);
    bucket.at = now;
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.ceil((1 - bucket.tokens) / this.rate);
  }
}

/**
 * One browser's stream of one user's changes (server-sent events). Changes are gathered for
 * `coalesceMs` and sent as one event per entity (the latest change, with how many it stands for), so a
 * burst of 30,000 ingested samples is a handful of events; a stream whose unsent bytes pass `maxBuffer`
 * (a client that does not read) is dropped, and so is one whose token expires.
 */
export class EventStream {
  constructor(res, userId, { coalesceMs, maxBuffer, expiresAt, onEnd, recheck, recheckMs = 30_000 }) {
    this.res = res;
    this.userId = userId;
    this.coalesceMs = coalesceMs;
    this.maxBuffer = maxBuffer;
    this.pending = new Map();
    this.timer = null;
    this.onEnd = onEnd;
    this.ended = false;
    this.keepAlive = setInterval(() => this.write(': keep-alive\n\n'), 15_000);
    this.expiry = setTimeout(() => this.end(), Math.min(2 ** 31 - 1, Math.max(0, expiresAt - Date.now())));
    // Whether the session behind the stream still stands (signed out: the kernel says no): asked every
    // `recheckMs`, and the stream ends on a no.
    this.recheck = recheck && setInterval(async () => {
      if (!(await recheck().catch(() => true))) this.end();
    }, recheckMs);
    res.on('close', () => this.end());
  }

  push(change) {
    const previous = this.pending.get(change.entity);
    this.pending.set(change.entity, { ...change, count: (previous?.count ?? 0) + 1 });
    this.timer ??= setTimeout(() => this.flush(), this.coalesceMs);
  }

  flush() {
    this.timer = null;
    const changes = [...this.pending.values()];
    this.pending.clear();
    for (const change of changes) this.write(`event: change\ndata: ${JSON.stringify(change)}\n\n`);
  }

  write(text) {
    if (this.ended) return;
    if (this.res.writableLength > this.maxBuffer) return this.end(true);
    this.res.write(text);
  }

  end(drop = false) {
    if (this.ended) return;
    this.ended = true;
    clearInterval(this.keepAlive);
    clearInterval(this.recheck);
    clearTimeout(this.expiry);
    clearTimeout(this.timer);
    this.pending.clear();
    if (drop) this.res.destroy(); else this.res.end();
    this.onEnd(this);
  }
}

/**
 * The mail hook of development: logs the mail, its link token included, so that a developer can follow
 * it. A deployment passes its own `onMail` (its mail provider's API); with NODE_ENV=production this one
 * logs only that a mail went unsent.
 */
function developmentMail(log) {
  return (mail) => {
    if (process.env.NODE_ENV === 'production') return log(`mail: a ${mail.kind} mail for user ${mail.userId} was not sent: start the server with an onMail hook`);
    log(`mail to ${mail.email} (${mail.kind}, until ${mail.expiresAt}): token ${mail.token}`);
  };
}

/**
 * Starts the kernel and the HTTP server. Resolves with {url, server, kernel, close, limits, bodies}
 * (`bodies.used`: request body bytes buffered now); `close` drains
 * in-flight requests, ends the event streams and closes the kernel cleanly. `limits` overrides
 * `limitDefaults`.
 */
export async function start({
  port = Number(process.env.PORT ?? 3002), host = process.env.HOST ?? '127.0.0.1',
  dataDir = process.env.DATA_DIR ?? './data', binary = process.env.HEALTHKERNEL_BIN ?? here('../../.build/release/healthkernel'),
  kernelArgs = [], env = {}, serviceToken = process.env.SERVICE_TOKEN, demo = process.env.DEMO === '1',
  bodyLimit = Number(process.env.BODY_LIMIT ?? 1024 * 1024), log = (line) => process.stderr.write(line + '\n'),
  limits: limitOverrides = {}, clientOptions = {}, connect = process.env.KERNEL_SOCKET, onMail = developmentMail(log),
} = {}) {
  const limits = limitSettings(limitOverrides);
  const kernelEnv = { ...env };
  if (connect && !serviceToken) {
    throw new StartError('SERVICE_TOKEN is not set: with a running kernel (--connect, KERNEL_SOCKET), mint one where that kernel\'s\n' +
      'secret is (healthkernel token --role service_role --ttl SECONDS --config /etc/healthkernel/healthkernel.json)');
  }
  if (!serviceToken && !demo) {
    throw new StartError('SERVICE_TOKEN is not set: give the server a service token, minted with\n' +
      '  healthkernel token --role service_role --ttl SECONDS --data-dir DATA_DIR\n' +
      '(or with the deployment\'s jwtSecret), and mint a new one before it expires; DEMO=1 mints a one-day token itself');
  }
  // A demo's token lives a day: long enough to look around, short enough that a forgotten demo is no standing key.
  const service = serviceToken || execFileSync(binary, ['token', '--role', 'service_role', '--ttl', '86400', '--data-dir', dataDir],
    { env: { ...process.env, ...kernelEnv } }).toString().trim();
  // A kernel of its own, or (`connect`: a socket path, `unix:` optional) one already serving, as the
  // Debian package's systemd unit runs it; closing then closes the connection, not that kernel.
  const kernel = connect
    ? await Kernel.connect({ path: connect, restart: true, ...clientOptions })
    : await Kernel.spawn({ binary, args: ['serve', '--data-dir', dataDir, ...kernelArgs], env: kernelEnv, restart: true, ...clientOptions });
  kernel.on('stderr', (line) => log(`kernel: ${line}`));
  // The OpenAPI 3.1 document of the routes (examples/web/openapi.mjs), from the route table and what the
  // kernel serving them says of its methods: protocol/rest-openapi.json keeps it.
  const openapi = openapiDocument(routes, await kernel.call('rpc.discover'));
  const tokens = new TokenCache(kernel, limits.TOKEN_CACHE_ENTRIES);
  const tickets = new Map(); // ticket -> {userId, expiresAt, validUntil}, in the order issued
  const unauthenticated = new AddressLimiter(limits.UNAUTHENTICATED_PER_MINUTE, limits.UNAUTHENTICATED_BURST);
  const bodies = new BodyBudget(limits.BODY_BYTES_IN_FLIGHT, limits.BODY_BYTES_PER_ADDRESS);

  // One subscription to the kernel's events fans out to every browser's event stream.
  const streams = new Map(); // userId -> Set<EventStream>
  const subscribe = () => kernel.call('events.subscribe', { auth: service }).catch((e) => log(`events.subscribe failed: ${e.message}`));
  await subscribe();
  kernel.on('spawn', () => { subscribe(); });
  kernel.on('events.changed', (change) => {
    for (const stream of streams.get(change.userId) ?? []) stream.push(change);
    // A mail the kernel made (a password reset, an email verification): read it, and hand it to the mail hook.
    if (change.entity === 'auth.mail' && change.op === 'upsert') {
      kernel.call('auth.mail', { auth: service, userId: change.userId, id: change.id })
        .then((mail) => onMail(mail), (e) => { if (!(e instanceof KernelError && e.code === -32004)) log(`auth.mail failed: ${e.message}`); });
    }
  });

  let inFlight = 0;
  let draining = null;
  // Node checks the header and request timeouts every `connectionsCheckingInterval`: each second, so
  // that they hold within a second, not within its default 30.
  const server = createServer({ connectionsCheckingInterval: 1000 }, async (req, res) => {
    inFlight += 1;
    try {
      await serve(req, res);
    } catch (error) {
      // The last resort: whatever a request does, the process serves on.
      log(`request ${req.method} ${JSON.stringify(req.url).slice(0, 200)} failed: ${error?.stack ?? error}`);
      if (!res.headersSent) send(res, 500, { error: 'Internal server error' });
      else res.destroy();
    } finally {
      inFlight -= 1;
      if (inFlight === 0 && draining) draining();
    }
  });
  server.maxConnections = limits.MAX_CONNECTIONS;
  server.headersTimeout = limits.HEADERS_TIMEOUT_MS;
  server.requestTimeout = limits.REQUEST_TIMEOUT_MS;
  // Connections per client address, and a deadline for a new one's first request: one address cannot
  // take every connection, nor hold them open sending nothing.
  const connections = new Map(); // address -> open connections
  server.on('connection', (socket) => {
    const address = addressKey(socket.remoteAddress);
    const open = (connections.get(address) ?? 0) + 1;
    if (open > limits.CONNECTIONS_PER_ADDRESS) return socket.destroy();
    connections.set(address, open);
    socket.idleUntilRequest = setTimeout(() => socket.destroy(), limits.IDLE_CONNECTION_MS);
    socket.once('close', () => {
      clearTimeout(socket.idleUntilRequest);
      const left = connections.get(address) - 1;
      if (left > 0) connections.set(address, left); else connections.delete(address);
    });
  });
  server.on('request', (req) => clearTimeout(req.socket.idleUntilRequest));

  async function serve(req, res) {
    let url;
    try {
      url = new URL(req.url, 'http://localhost');
    } catch {
      return send(res, 400, { error: 'Bad request target' });
    }
    const matching = routes.filter((r) => r.path === url.pathname);
    if (matching.length === 0) return send(res, 404, { error: 'Not found' });
    const route = matching.find((r) => r.method === req.method);
    if (!route) return send(res, 405, { error: 'Method not allowed' }, { allow: matching.map((r) => r.method).join(', ') });
    if (route.raw) return raw[route.raw](req, res, url);
    const held = { bytes: 0, address: addressKey(req.socket.remoteAddress) };
    const token = bearer(req);
    try {
      // Who is asking is settled before a byte of the body is read: an anonymous flood costs no memory.
      if (route.auth === 'signed') {
        // No token: the body's signature is the proof, checked by the kernel. No address limit either: a 4xx
        // would make Apple drop the notification. Keep such routes behind a proxy that admits Apple's addresses.
      } else if (route.auth === 'none') {
        const wait = unauthenticated.take(held.address);
        if (wait > 0) {
          throw new HttpError(429, 'Too many requests from this address; retry later', { reason: 'rate_limited', retryAfterMs: wait },
            { 'retry-after': String(Math.ceil(wait / 1000)) });
        }
      } else if (!token) {
        throw missingToken;
      } else if (route.auth === 'user') {
        await tokens.check(token);
      }
      const body = route.body
        ? parseBody(await readBody(req, res, route.limit ?? bodyLimit, bodies, held, limits.BODY_IDLE_MS), route.body === 'optional',
                    req.headers['content-type'])
        : {};
      const answer = await route.handle(kernel, req, body, url, { service });
      if (answer instanceof Reply) return send(res, answer.status, answer.body, answer.headers);
      return send(res, 200, answer);
    } catch (error) {
      // The kernel refused the token (signed out, session ended): the cache must not vouch for it again.
      if (error instanceof KernelError && error.code === -32001 && token !== undefined) tokens.forget(token);
      const [status, body] = errorReply(route, error);
      // An unread body would be parsed as the next request: close the connection instead.
      const headers = { ...(error.headers ?? {}), ...(route.body && !req.complete ? { connection: 'close' } : {}) };
      return send(res, status, body, headers);
    } finally {
      bodies.give(held.bytes, held.address);
    }
  }

  /** The routes `start` serves itself (`raw` in the route table). */
  const raw = {
    async health(req, res) {
      try {
        const info = await kernel.call('kernel.info', undefined, { timeout: 2000 });
        return send(res, 200, { ok: true, version: info.version, uptimeSeconds: info.uptimeSeconds });
      } catch (e) {
        return send(res, 503, { ok: false, error: e.message });
      }
    },
    openapi: (req, res) => send(res, 200, openapi),
    ticket: (req, res) => issueTicket(req, res),
    events: (req, res, url) => events(req, res, url),
  };

  /**
   * A ticket for one /api/events stream: EventSource cannot send an Authorization header, and a token in
   * the URL would end up in access logs, so the page fetches a ticket with its bearer token and opens
   * the stream with `?ticket=`. A ticket is random, works once, within TICKET_SECONDS, and stands for
   * the token's session while it lasts: the kernel is asked when the ticket is issued and when the
   * stream opens, never the cache.
   */
  async function issueTicket(req, res) {
    try {
      const token = bearer(req);
      if (!token) throw missingToken;
      const identity = await tokens.check(token, { fresh: true });
      const ticket = randomBytes(24).toString('base64url');
      if (tickets.size >= limits.TICKETS_MAX) tickets.delete(tickets.keys().next().value);
      tickets.set(ticket, { ...identity, token, validUntil: Date.now() + limits.TICKET_SECONDS * 1000 });
      return send(res, 200, { ticket, expiresIn: limits.TICKET_SECONDS });
    } catch (error) {
      const [status, body] = errorReply({}, error);
      return send(res, status, body);
    }
  }

  /** Server-sent events of one user's changes, for a bearer token or a ticket (never a token in the URL). */
  async function events(req, res, url) {
    if (url.searchParams.has('access_token')) {
      return send(res, 400, { error: 'Tokens are not taken in URLs: POST /api/events/ticket with the bearer token, then open ?ticket=',
                              reason: 'token_in_url' });
    }
    let identity;
    let token = bearer(req);
    const ticket = url.searchParams.get('ticket');
    if (ticket !== null) {
      const issued = tickets.get(ticket);
      tickets.delete(ticket);
      if (!issued || issued.validUntil < Date.now() || issued.expiresAt <= Date.now()) {
        return send(res, 401, { error: 'Invalid or expired ticket', reason: 'invalid_ticket' });
      }
      token = issued.token;
    }
    // The session behind the stream is asked for now (signed out since the ticket: 401), and again
    // every STREAM_RECHECK_MS while the stream is open.
    try {
      if (!token) throw missingToken;
      identity = await tokens.check(token, { fresh: true });
    } catch (error) {
      const [status, body] = errorReply({}, error);
      return send(res, status, body);
    }
    const own = streams.get(identity.userId) ?? new Set();
    if (own.size >= limits.STREAMS_PER_USER) {
      return send(res, 429, { error: `At most ${limits.STREAMS_PER_USER} event streams per user`, reason: 'too_many_streams' });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    res.write(': connected\n\n');
    await new Promise((resolve) => {
      const stream = new EventStream(res, identity.userId, {
        coalesceMs: limits.STREAM_COALESCE_MS, maxBuffer: limits.STREAM_BUFFER_BYTES, expiresAt: identity.expiresAt,
        recheckMs: limits.STREAM_RECHECK_MS,
        // A no only when the kernel refuses the token; a kernel restarting or slow keeps the stream.
        recheck: () => tokens.check(token, { fresh: true }).then(() => true, (e) => !(e instanceof KernelError && e.code === -32001)),
        onEnd: (ended) => {
          own.delete(ended);
          if (own.size === 0) streams.delete(identity.userId);
          resolve();
        },
      });
      own.add(stream);
      streams.set(identity.userId, own);
    });
  }

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address();
  const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;

  async function close() {
    server.close();
    for (const own of [...streams.values()]) for (const stream of [...own]) stream.end();
    server.closeIdleConnections?.();
    if (inFlight > 0) await new Promise((resolve) => { draining = resolve; });
    // The kernel's last act is a snapshot (and finishing one under way): a large store needs more than
    // the client's default 5 s before SIGTERM and SIGKILL, which would leave a .tmp file behind.
    return kernel.close({ timeout: 60_000 });
  }
  return { url, server, kernel, close, limits, bodies };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // Nothing a client sends may end the process: a failure that escapes every handler is logged.
  process.on('unhandledRejection', (error) => process.stderr.write(`unhandled rejection: ${error?.stack ?? error}\n`));
  process.on('uncaughtException', (error) => process.stderr.write(`uncaught exception: ${error?.stack ?? error}\n`));
  let app;
  try {
    const at = process.argv.indexOf('--connect');
    if (at >= 0 && !process.argv[at + 1]) throw new StartError('--connect needs a socket: --connect unix:PATH');
    app = await start(at >= 0 ? { connect: process.argv[at + 1] } : {});
  } catch (error) {
    if (!(error instanceof StartError)) throw error;
    process.stderr.write(`healthkernel example: ${error.message}\n`);
    process.exit(2);
  }
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
