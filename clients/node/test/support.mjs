// Shared by the Node tests: the binary under test, fresh data dirs, tokens.
import { execFileSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { once } from 'node:events';
import { connect } from 'node:net';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('../../../', import.meta.url));

/** A secret every test kernel and token shares, so tokens can be minted without a data dir. */
export const secret = 'healthkernel-node-test-secret-0123456789abcdef';

/** The healthkernel binary: $HEALTHKERNEL_BIN, else the debug build (built here when missing). */
export const binary = (() => {
  if (process.env.HEALTHKERNEL_BIN) return process.env.HEALTHKERNEL_BIN;
  const path = join(root, '.build/debug/healthkernel');
  if (!existsSync(path)) execFileSync('swift', ['build', '--product', 'healthkernel'], { cwd: root, stdio: 'inherit' });
  return path;
})();

/** Environment for a kernel that signs with `secret`. */
export const env = { HEALTHKERNEL_JWT_SECRET: secret };

/** A fresh folder, removed when the test ends. */
export function temporaryDirectory(t, prefix = 'hk-node-') {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** An access token for `user` (a UUID), or a service token with role service_role. */
export function token({ user, role = 'authenticated' } = {}) {
  const args = ['token', '--memory-only', '--role', role, ...(user ? ['--user', user] : [])];
  return execFileSync(binary, args, { env: { ...process.env, ...env } }).toString().trim();
}

/** An HS256 access token for `user` that expires in `seconds`, or expired that long ago when negative (the CLI's shortest lives a minute). */
export function shortToken(user, seconds) {
  const b64url = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const input = `${b64url({ alg: 'HS256', typ: 'JWT' })}.${b64url({ sub: user, aud: 'authenticated', role: 'authenticated', iat: Math.min(now, now + seconds - 60), exp: now + seconds })}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

export const userA = 'aaaaaaaa-0000-4000-8000-000000000001';
export const userB = 'bbbbbbbb-0000-4000-8000-000000000002';

/** Today's date (UTC) moved by `days`, as YYYY-MM-DD. */
export function day(days = 0) {
  return new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
}

/** Resolves once `predicate()` is true, polling; rejects after `ms`. */
export async function eventually(predicate, ms = 10_000, what = 'condition') {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A raw JSON-RPC connection to a kernel's socket: send lines, collect parsed lines; `answer(id)` waits up to `timeout` ms. */
export async function openSocket(path, { timeout = 10_000 } = {}) {
  const socket = connect(path);
  await once(socket, 'connect');
  const lines = [];
  let partial = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop();
    for (const p of parts) if (p) lines.push(JSON.parse(p));
  });
  const ended = once(socket, 'end').catch(() => {});
  return {
    socket, lines, ended,
    send: (...messages) => socket.write(messages.map((m) => JSON.stringify({ jsonrpc: '2.0', ...m }) + '\n').join('')),
    answer: async (id) => {
      await eventually(() => lines.some((l) => l.id === id), timeout, `answer ${id}`);
      return lines.find((l) => l.id === id);
    },
  };
}
