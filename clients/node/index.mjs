// A client for healthkernel: spawns `healthkernel serve` and speaks line-delimited JSON-RPC 2.0 over its
// stdin/stdout. Node built-ins only, so a host installs nothing.
import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { connect } from 'node:net';
import { EventEmitter } from 'node:events';
import { existsSync, lstatSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The kernel answered with a JSON-RPC error. `code` is the JSON-RPC code (a number). */
export class KernelError extends Error {
  constructor(error, method) {
    super(error?.message ?? 'kernel error');
    this.name = 'KernelError';
    this.code = error?.code;
    this.data = error?.data ?? null;
    this.reason = this.data?.reason ?? null;
    this.field = this.data?.field ?? null;
    this.method = method;
  }
}

/** The kernel process ended (crash, kill, exit) while the call was in flight or before it was sent. */
export class KernelExitError extends Error {
  constructor(method, exit, stderr) {
    const how = exit.socket ? 'closed the connection' : exit.signal ? `was killed by ${exit.signal}` : `exited with status ${exit.code}`;
    const tail = stderr.length ? `; last stderr: ${stderr.slice(-3).join(' | ')}` : '';
    super(`healthkernel ${how} before answering ${method}${tail}`);
    this.name = 'KernelExitError';
    this.code = 'KERNEL_EXITED';
    this.exitCode = exit.code;
    this.signal = exit.signal;
    this.method = method;
  }
}

/** No answer within the call's timeout. The request may still have been applied. */
export class KernelTimeoutError extends Error {
  constructor(method, timeout) {
    super(`healthkernel did not answer ${method} within ${timeout} ms`);
    this.name = 'KernelTimeoutError';
    this.code = 'KERNEL_TIMEOUT';
    this.method = method;
    this.timeout = timeout;
  }
}

/** The client was closed (or never started), so the call was not sent. */
export class KernelClosedError extends Error {
  constructor(method, why = '') {
    super(`healthkernel client is closed; ${method} was not sent${why}`);
    this.name = 'KernelClosedError';
    this.code = 'KERNEL_CLOSED';
    this.method = method;
  }
}

/**
 * Exit statuses after which a restart cannot help: 2, the configuration or the data dir is wrong (the
 * kernel's last stderr line says what); 3, the store is damaged (`healthkernel store repair`); 64, a
 * command-line usage error.
 */
export const fatalExitStatuses = [2, 3, 64];

/**
 * A service token for the kernel's own HS256 secret (`auth.jwtSecret`): what `healthkernel token --role
 * service_role` prints, made here so a long-lived host can renew its events subscription by itself.
 */
export function serviceToken(secret, { ttlSeconds = 3600, now = Date.now() } = {}) {
  const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const iat = Math.floor(now / 1000);
  const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ iss: 'healthkernel', role: 'service_role', iat, exp: iat + ttlSeconds })}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

/** The kernel refuses lines nested deeper than this (the request object is level 1). */
const maxDepth = 512;

/** A \u0000 or a lone-surrogate escape that is not itself escaped (JSON.stringify escapes both). */
const forbiddenEscape = /(?<!\\)(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/;

/** The deepest nesting of objects and arrays in a JSON text, strings skipped: O(length). */
function nestingDepth(text) {
  let depth = 0;
  let deepest = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 34) { // a string: skip to its closing quote
      for (i++; i < text.length && text.charCodeAt(i) !== 34; i++) if (text.charCodeAt(i) === 92) i++;
    } else if (c === 123 || c === 91) {
      depth += 1;
      if (depth > deepest) deepest = depth;
    } else if (c === 125 || c === 93) {
      depth -= 1;
    }
  }
  return deepest;
}

/** A call refused before it was sent: nothing was registered or written. */
function localError(method, reason, message) {
  return new KernelError({ code: -32600, message, data: { reason, local: true } }, method);
}

/**
 * The uid of the system user `healthkernel`, which the Debian package makes and runs its kernel as (only
 * root makes such a user), or undefined: its socket is trusted, so that members of its group connect.
 */
function packageUser() {
  if (packageUserCache === null) {
    packageUserCache = undefined;
    try {
      for (const line of readFileSync('/etc/passwd', 'utf8').split('\n')) {
        const [name, , id] = line.split(':');
        if (name === 'healthkernel' && /^\d+$/.test(id ?? '')) packageUserCache = Number(id);
      }
    } catch {}
  }
  return packageUserCache;
}
let packageUserCache = null;

/**
 * Refuses a socket another user could be listening on, since the client sends bearer tokens down it.
 * Node cannot ask the kernel for the peer's credentials (SO_PEERCRED) as `healthkernel call --connect`
 * does, so it checks what decides who listens: the socket file must belong to this user, root or the
 * package's healthkernel user, and
 * its folder too, with no write access for others unless the folder is sticky (as /tmp is), in which
 * case nobody else can replace the file between this check and the connect.
 */
export function checkSocketOwner(path) {
  const uid = process.getuid?.();
  if (uid === undefined) return;
  const trusted = (owner) => owner === uid || owner === 0 || owner === packageUser();
  let file;
  let folder;
  try {
    file = lstatSync(path);
    folder = lstatSync(dirname(path));
  } catch (error) {
    throw Object.assign(new Error(`cannot connect to ${path}: ${error.code ?? error.message}`), { code: error.code });
  }
  if (!file.isSocket()) throw Object.assign(new Error(`refusing ${path}: not a socket`), { code: 'EUNSAFE' });
  if (!trusted(file.uid)) {
    throw Object.assign(new Error(`refusing ${path}: the socket belongs to uid ${file.uid}, not to this user (uid ${uid}), root or the healthkernel user`), { code: 'EUNSAFE' });
  }
  const sticky = (folder.mode & 0o1000) !== 0;
  if (!trusted(folder.uid) || ((folder.mode & 0o022) !== 0 && !sticky)) {
    throw Object.assign(new Error(`refusing ${path}: its folder can be changed by other users`), { code: 'EUNSAFE' });
  }
}

/** Most bytes handed to the pipe in one write. */
const chunkBytes = 256 * 1024;

/**
 * The binary to run when none is given: $HEALTHKERNEL_BIN, else the one this package carries for this
 * platform (the npm tarball `scripts/package` builds carries `bin/linux-x64/healthkernel`), else
 * `healthkernel` on PATH (the Debian package, or the release tarball's binary put there).
 */
export function defaultBinary() {
  if (process.env.HEALTHKERNEL_BIN) return process.env.HEALTHKERNEL_BIN;
  const carried = fileURLToPath(new URL(`./bin/${process.platform}-${process.arch}/healthkernel`, import.meta.url));
  return existsSync(carried) ? carried : 'healthkernel';
}

/** What a spawn that found no binary rejects with: the three ways to get one. */
function missingBinary(binary, cause) {
  return Object.assign(new Error(
    `healthkernel: no binary at ${JSON.stringify(binary)}. Get one of three ways: install the npm tarball ` +
    '(dist/healthkernel-VERSION.tgz from scripts/package, which carries the linux-x64 binary), put the ' +
    'release tarball\'s binary (dist/healthkernel-VERSION-linux-x86_64.tar.gz) or the Debian package\'s on PATH, ' +
    'or build it from source (swift build -c release) and set HEALTHKERNEL_BIN to its path'), { code: 'ENOENT', cause });
}

const defaults = {
  binary: undefined,
  args: ['serve'],
  timeout: 30_000,
  maxPending: 10_000,
  maxLineBytes: 16 * 1024 * 1024,
  stderrLines: 50,
  ordering: 'completion',
};

/**
 * One spawned kernel. Calls are pipelined: each is written at once (many share one write) and
 * answered by id, so any number may be in flight up to `maxPending`; beyond it `call` waits for a slot.
 *
 * Events: `events.changed` (params), `notification` ({method, params}), `stderr` (line),
 * `exit` ({code, signal, expected, fatal}), `restart` ({attempt, delay}), `spawn` ({pid}),
 * `unmatched` (an answer whose call had already timed out or been aborted), and for `subscribe`:
 * `events.renewed` ({endsAt}), `events.resubscribed` ({reason}: `restart` or `ended`; changes in
 * between are in each user's feed, `sync.changes` with `userId`), `events.ending` and `events.ended`
 * (the kernel's notifications) and `subscription-error` (a renewal that failed).
 */
export class Kernel extends EventEmitter {
  #options;
  #link = null;
  #state = 'new'; // new | running | restarting | closing | closed
  #pending = new Map();
  #nextId = 1;
  #outbox = [];
  #flushQueued = false;
  #blocked = false;
  #slotWaiters = [];
  #roomWaiters = [];
  #stderr = [];
  #partial = '';
  #exited = null; // resolves with {code, signal} when the current process is gone
  #restartTimer = null;
  #attempt = 0;
  #startedAt = 0;
  #lastExit = null;
  #closedWhy = '';
  #subscription = null; // {topics, token: () => Promise<string>} while subscribe() holds one

  /** Spawns the kernel and resolves once it answers `kernel.info` (so a bad flag or a locked data dir rejects here). */
  static async spawn(options = {}) {
    const kernel = new Kernel(options);
    await kernel.#start();
    if (options.ready !== false) {
      try {
        await kernel.call('kernel.info', undefined, { timeout: options.readyTimeout ?? 30_000 });
      } catch (error) {
        await kernel.close({ timeout: 1000 }).catch(() => {});
        throw error;
      }
    }
    return kernel;
  }

  /**
   * Connects to a kernel already serving on a Unix socket (`healthkernel serve --listen unix:PATH`),
   * shared with other hosts. `path` may carry the `unix:` prefix. With `restart`, reconnects with back-off.
   */
  static async connect(options = {}) {
    if (!options.path) throw new TypeError('connect needs the socket path');
    return Kernel.spawn({ ...options, path: options.path.replace(/^unix:/, '') });
  }

  constructor(options = {}) {
    super();
    const restart = options.restart === true ? {} : options.restart || null;
    this.#options = {
      ...defaults,
      ...options,
      restart: restart && { retries: Infinity, minDelay: 100, maxDelay: 5000, stableAfter: 10_000, ...restart },
    };
  }

  /** The running process's pid (undefined between a crash and its restart). */
  get pid() { return this.#link?.pid; }

  /** Calls in flight (sent or queued, not yet answered). */
  get pending() { return this.#pending.size; }

  /** The last lines the kernel wrote to stderr. */
  get stderr() { return [...this.#stderr]; }

  /**
   * Sends one request; resolves with its result, rejects with a KernelError (the kernel's error), a
   * KernelTimeoutError, a KernelExitError, a KernelClosedError or the signal's abort reason.
   */
  async call(method, params, { timeout = this.#options.timeout, signal } = {}) {
    if (this.#pending.size >= this.#options.maxPending) await this.#slot(signal);
    this.#checkOpen(method);
    // The line is made and checked before the call is registered: params the kernel would refuse
    // unread (or that cannot be serialized at all) reject now and leave nothing pending.
    const id = this.#nextId++;
    const line = this.#encode({ jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) }, method);
    const { promise } = this.#register(method, timeout, signal, id);
    this.#send(line);
    return promise;
  }

  /** Sends a notification (never answered); resolves once it is queued for writing. */
  async notify(method, params) {
    while (this.#outbox.length >= this.#options.maxPending && this.#link) {
      await new Promise((resolve) => this.#roomWaiters.push(resolve));
    }
    this.#checkOpen(method);
    this.#send(this.#encode({ jsonrpc: '2.0', method, ...(params === undefined ? {} : { params }) }, method));
  }

  /**
   * Sends requests as one JSON-RPC batch. Each element is `{method, params, notify?}`. Resolves with one
   * entry per non-notification, in order: `{result}` or `{error: KernelError}`. Transport failures
   * (exit, timeout, abort) reject the whole batch.
   */
  async batch(requests, { timeout = this.#options.timeout, signal } = {}) {
    if (!Array.isArray(requests) || requests.length === 0) throw new TypeError('batch needs at least one request');
    const wanted = requests.filter((r) => !r.notify).length;
    while (this.#pending.size + wanted > this.#options.maxPending && this.#pending.size > 0) await this.#slot(signal);
    this.#checkOpen(requests[0].method);
    const ids = [];
    const messages = requests.map(({ method, params, notify }) => {
      const message = { jsonrpc: '2.0', method, ...(params === undefined ? {} : { params }) };
      if (notify) return message;
      const id = this.#nextId++;
      ids.push([id, method]);
      return { jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) };
    });
    const line = this.#encode(messages, requests[0].method);
    const answers = ids.map(([id, method]) => this.#register(method, timeout, signal, id).promise.then(
      (result) => ({ result }),
      (error) => { if (error instanceof KernelError) return { error }; throw error; }));
    this.#send(line);
    return Promise.all(answers);
  }

  /**
   * Ends stdin so the kernel finishes what it read, answers it and exits; sends SIGTERM if it has not
   * exited within `timeout` ms, then SIGKILL after another `timeout`. Resolves with {code, signal}.
   */
  async close({ timeout = 5000 } = {}) {
    clearTimeout(this.#restartTimer);
    if (this.#state === 'closed') return this.#lastExit;
    const link = this.#link;
    this.#state = 'closing';
    if (!link) {
      this.#finish();
      return this.#lastExit;
    }
    this.#flush();
    const exited = this.#exited;
    const within = (ms) => Promise.race([exited, new Promise((r) => setTimeout(r, ms, null).unref())]);
    let exit = await within(timeout);
    if (!exit) {
      link.stop('SIGTERM');
      exit = await within(timeout);
    }
    if (!exit) {
      link.stop('SIGKILL');
      exit = await exited;
    }
    return exit;
  }

  #checkOpen(method) {
    if (this.#state === 'closing' || this.#state === 'closed' || this.#state === 'new') throw new KernelClosedError(method, this.#closedWhy);
  }

  /**
   * Subscribes this stream to `events.changed` (of `topics`, default every change) and keeps it
   * subscribed: renews before the service token expires (on `events.ending`), subscribes again after
   * `events.ended` and after a restart. `token` is a service token, or a function returning one (a
   * token source, called for each renewal); without it the client mints tokens from `jwtSecret`
   * (the kernel's `auth.jwtSecret`, given to the constructor). With a plain token and no secret the
   * subscription ends with its token, as the kernel says (`events.ended`). Resolves with the
   * subscription's answer.
   */
  async subscribe({ topics, token, tokenTtlSeconds = 3600 } = {}) {
    const secret = this.#options.jwtSecret;
    const mint = secret ? () => serviceToken(secret, { ttlSeconds: tokenTtlSeconds }) : null;
    const renewal = typeof token === 'function' ? token : mint;
    const first = typeof token === 'string' ? () => token : renewal;
    if (!first) throw new TypeError('subscribe needs a service token, a token source or the jwtSecret option');
    const subscription = { topics, source: first, renewal };
    this.#subscription = subscription;
    if (!this.#listening) {
      this.#listening = true;
      this.on('events.ending', () => this.#renew());
      this.on('events.ended', () => this.#resubscribe('ended'));
    }
    return this.#subscribeNow(subscription);
  }

  /** Stops the managed subscription (and the stream's events). */
  async unsubscribe() {
    this.#subscription = null;
    return this.call('events.unsubscribe');
  }

  #listening = false;

  async #subscribeNow(subscription) {
    const auth = await (subscription.subscribed && subscription.renewal ? subscription.renewal : subscription.source)();
    subscription.subscribed = true;
    return this.call('events.subscribe', { auth, ...(subscription.topics ? { topics: subscription.topics } : {}) });
  }

  async #renew() {
    const subscription = this.#subscription;
    if (!subscription?.renewal) return;
    try {
      const answer = await this.call('events.renew', { auth: await subscription.renewal() });
      this.emit('events.renewed', { endsAt: answer.endsAt ?? null });
    } catch (error) {
      this.emit('subscription-error', error);
    }
  }

  async #resubscribe(reason) {
    const subscription = this.#subscription;
    if (!subscription || (reason === 'ended' && !subscription.renewal)) return;
    try {
      await this.#subscribeNow(subscription);
      this.emit('events.resubscribed', { reason });
    } catch (error) {
      this.emit('subscription-error', error);
    }
  }

  #register(method, timeout, signal, id) {
    this.#checkOpen(method);
    if (signal?.aborted) throw signal.reason;
    let entry;
    const promise = new Promise((resolve, reject) => { entry = { method, resolve, reject, timer: null, signal, onAbort: null }; });
    if (timeout > 0 && timeout !== Infinity) {
      entry.timer = setTimeout(() => this.#fail(id, new KernelTimeoutError(method, timeout)), timeout);
    }
    if (signal) {
      entry.onAbort = () => this.#fail(id, signal.reason);
      signal.addEventListener('abort', entry.onAbort, { once: true });
    }
    this.#pending.set(id, entry);
    return { id, promise };
  }

  /** Removes a pending call and rejects it. */
  #fail(id, error) {
    const entry = this.#take(id);
    if (entry) entry.reject(error);
  }

  #take(id) {
    const entry = this.#pending.get(id);
    if (!entry) return null;
    this.#pending.delete(id);
    clearTimeout(entry.timer);
    if (entry.onAbort) entry.signal.removeEventListener('abort', entry.onAbort);
    const waiter = this.#slotWaiters.shift();
    if (waiter) waiter();
    return entry;
  }

  /** Waits until a call settles (so the pending map stays within maxPending). */
  #slot(signal) {
    return new Promise((resolve, reject) => {
      const waiter = () => { signal?.removeEventListener('abort', onAbort); resolve(); };
      const onAbort = () => {
        const i = this.#slotWaiters.indexOf(waiter);
        if (i >= 0) this.#slotWaiters.splice(i, 1);
        reject(signal.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#slotWaiters.push(waiter);
    });
  }

  /**
   * The request line for `message`, checked against the rules the kernel reads lines by; throws a
   * KernelError (-32600, `data.local: true`) for a line the kernel would refuse without being able to
   * say which request it was: one that cannot be serialized, is longer than `maxLineBytes`, nests
   * deeper than the kernel's 512 levels, or holds a NUL character or a lone surrogate (which
   * JSON.stringify writes as \u escapes and the kernel's UTF-8 parser refuses).
   */
  #encode(message, method) {
    let line;
    try {
      line = JSON.stringify(message);
    } catch (error) {
      throw localError(method, 'unserializable', `params cannot be serialized as JSON: ${error.message}`);
    }
    const max = this.#options.maxLineBytes;
    if (line.length * 3 > max && Buffer.byteLength(line) > max) {
      throw localError(method, 'line_too_long', `Invalid Request: line longer than ${max} bytes`);
    }
    if (line.includes('\\u') && forbiddenEscape.test(line)) {
      throw localError(method, 'invalid_string', 'a string holds a NUL character or a lone surrogate, which the kernel refuses');
    }
    // A line shorter than twice the limit cannot nest deeper than it.
    if (line.length > 2 * maxDepth && nestingDepth(line) > maxDepth) {
      throw localError(method, 'too_deep', `params nest deeper than ${maxDepth} levels`);
    }
    return line;
  }

  #send(line) {
    this.#outbox.push(line);
    if (!this.#flushQueued) {
      this.#flushQueued = true;
      queueMicrotask(() => { this.#flushQueued = false; this.#flush(); });
    }
  }

  /**
   * Writes queued lines in chunks of about 256 KiB until the pipe says to wait for `drain`, so memory
   * outside the pipe stays with the queued calls themselves (bounded by maxPending).
   */
  #flush() {
    const link = this.#link;
    if (!link || this.#blocked) return;
    let taken = 0;
    while (taken < this.#outbox.length) {
      let bytes = 0;
      const start = taken;
      while (taken < this.#outbox.length && (taken === start || bytes < chunkBytes)) bytes += this.#outbox[taken++].length + 1;
      const ok = link.input.write(this.#outbox.slice(start, taken).join('\n') + '\n');
      if (!ok) {
        this.#blocked = true;
        link.input.once('drain', () => {
          if (link !== this.#link) return;
          this.#blocked = false;
          this.#flush();
        });
        break;
      }
    }
    this.#outbox = taken === this.#outbox.length ? [] : this.#outbox.slice(taken);
    if (this.#outbox.length < this.#options.maxPending) for (const resolve of this.#roomWaiters.splice(0)) resolve();
    if (!this.#blocked && this.#state === 'closing') link.input.end();
  }

  /** Lines waiting for the pipe to drain, and bytes handed to the pipe but not yet taken by the kernel. */
  get backlog() {
    return { lines: this.#outbox.length, bytes: this.#link?.input.writableLength ?? 0 };
  }

  /** Starts the kernel process (or connects to its socket) and wires its streams to this client. */
  async #start() {
    const restarted = this.#state === 'restarting';
    this.#blocked = false;
    this.#partial = '';
    let exitResolve;
    this.#exited = new Promise((resolve) => { exitResolve = resolve; });
    const link = this.#options.path ? this.#connectSocket(exitResolve) : this.#spawnProcess(exitResolve);
    this.#link = link;
    link.input?.on('error', () => {}); // EPIPE once the kernel is gone; 'close' reports it
    link.output?.setEncoding('utf8');
    link.output?.on('data', (chunk) => this.#read(chunk));
    await link.ready;
    // Answers are matched by id, so a slow call (a sign-in's password hash) need not hold up the ones
    // behind it: ask for completion order first thing on every new stream (a notification: no answer).
    if (this.#options.ordering === 'completion') {
      this.#outbox.unshift(JSON.stringify({ jsonrpc: '2.0', method: 'kernel.setOrdering', params: { mode: 'completion' } }));
    }
    this.#startedAt = Date.now();
    this.#state = 'running';
    this.emit('spawn', { pid: link.pid });
    this.#flush();
    // A new process (or connection) has no subscription: make it again, by itself.
    if (restarted && this.#subscription) this.#resubscribe('restart');
  }

  #spawnProcess(exitResolve) {
    const { args, env, cwd } = this.#options;
    const binary = this.#options.binary ?? defaultBinary();
    const child = spawn(binary, args, { env: env ? { ...process.env, ...env } : process.env, cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    const link = { input: child.stdin, output: child.stdout, pid: undefined, stop: (signal) => child.kill(signal) };
    let errLine = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      const lines = (errLine + chunk).split('\n');
      errLine = lines.pop();
      for (const line of lines) this.#stderrLine(line);
    });
    let spawnError = null;
    child.on('error', (error) => { spawnError = error.code === 'ENOENT' ? missingBinary(binary, error) : error; });
    child.on('close', (code, signal) => {
      if (errLine) this.#stderrLine(errLine);
      exitResolve({ code, signal });
      this.#onExit(link, { code, signal }, spawnError);
    });
    link.ready = new Promise((resolve, reject) => {
      child.once('spawn', () => { link.pid = child.pid; resolve(); });
      child.once('error', (error) => reject(error.code === 'ENOENT' ? missingBinary(binary, error) : error));
    });
    return link;
  }

  #connectSocket(exitResolve) {
    try {
      checkSocketOwner(this.#options.path);
    } catch (refused) {
      // Reported like a connection that failed, so `restart` tries again later.
      const link = { input: null, output: null, pid: undefined, stop: () => {}, ready: Promise.reject(refused) };
      link.ready.catch(() => {});
      queueMicrotask(() => {
        const exit = { code: null, signal: null, socket: true };
        exitResolve(exit);
        this.#onExit(link, exit, refused);
      });
      return link;
    }
    const socket = connect(this.#options.path);
    const link = { input: socket, output: socket, pid: undefined, stop: () => socket.destroy() };
    let error = null;
    socket.on('error', (e) => { error = e; });
    socket.on('close', () => {
      const exit = { code: null, signal: null, socket: true };
      exitResolve(exit);
      this.#onExit(link, exit, error);
    });
    link.ready = new Promise((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return link;
  }

  #stderrLine(line) {
    this.#stderr.push(line);
    if (this.#stderr.length > this.#options.stderrLines) this.#stderr.shift();
    this.emit('stderr', line);
  }

  #read(chunk) {
    let text = this.#partial + chunk;
    let start = 0;
    for (let end = text.indexOf('\n'); end >= 0; end = text.indexOf('\n', start)) {
      const line = text.slice(start, end);
      start = end + 1;
      if (line.length > 0) this.#line(line);
    }
    this.#partial = text.slice(start);
  }

  #line(line) {
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      this.emit('stderr', `unparseable line on stdout: ${line.slice(0, 200)}`);
      return;
    }
    if (Array.isArray(message)) for (const m of message) this.#message(m);
    else this.#message(message);
  }

  #message(m) {
    if (m === null || typeof m !== 'object') return;
    if ('id' in m && ('result' in m || 'error' in m)) {
      const entry = this.#take(m.id);
      if (!entry) {
        this.emit('unmatched', m);
      } else if ('error' in m) {
        entry.reject(new KernelError(m.error, entry.method));
      } else {
        entry.resolve(m.result);
      }
    } else if (typeof m.method === 'string') {
      this.emit('notification', { method: m.method, params: m.params });
      this.emit(m.method, m.params);
    }
  }

  #onExit(link, exit, spawnError) {
    if (link !== this.#link) return;
    this.#link = null;
    this.#lastExit = exit;
    const expected = this.#state === 'closing';
    const stderr = spawnError ? [...this.#stderr, String(spawnError.message)] : this.#stderr;
    // Every call in flight fails at once: its answer can no longer come.
    this.#outbox = [];
    for (const [id, entry] of [...this.#pending]) this.#fail(id, new KernelExitError(entry.method, exit, stderr));
    const restart = this.#options.restart;
    // A configuration error or a damaged store does not heal by itself: stop, and say the kernel's words.
    const fatal = !expected && exit.code != null && (restart?.stopOn ?? fatalExitStatuses).includes(exit.code);
    this.emit('exit', { ...exit, expected, fatal });
    if (expected || fatal || !restart || this.#state === 'new' || this.#attempt >= restart.retries) {
      if (!expected) this.#closedWhy = ` (the kernel exited with status ${exit.code ?? exit.signal}${stderr.length ? `: ${stderr[stderr.length - 1]}` : ''})`;
      this.#finish();
      return;
    }
    if (Date.now() - this.#startedAt >= restart.stableAfter) this.#attempt = 0;
    this.#attempt += 1;
    const delay = Math.min(restart.maxDelay, restart.minDelay * 2 ** (this.#attempt - 1));
    this.#state = 'restarting';
    this.emit('restart', { attempt: this.#attempt, delay });
    this.#restartTimer = setTimeout(() => {
      // A failed spawn also ends in 'close', which schedules the next attempt.
      this.#start().catch((error) => this.#stderrLine(`restart failed: ${error.message}`));
    }, delay);
  }

  #finish() {
    this.#state = 'closed';
    for (const [id, entry] of [...this.#pending]) this.#fail(id, new KernelClosedError(entry.method, this.#closedWhy));
    for (const waiter of this.#slotWaiters.splice(0)) waiter();
    for (const resolve of this.#roomWaiters.splice(0)) resolve();
  }
}

export default Kernel;
