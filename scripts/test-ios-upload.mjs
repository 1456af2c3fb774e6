#!/usr/bin/env node
// Uploads one day of verified Screen Time minutes to the upload route, as the iOS companion does, and
// prints the verdict. Works against examples/web/server.mjs (or any backend serving the seed's routes).
// Env: BASE_URL (default http://localhost:3002), ACCESS_TOKEN (required), DATE (default: yesterday, UTC),
// MINUTES (default 42).
const base = process.env.BASE_URL || 'http://localhost:3002';
const token = process.env.ACCESS_TOKEN;
if (!token) {
  console.error('set ACCESS_TOKEN to a user access token (for example: healthkernel token --user <uuid>)');
  process.exit(2);
}
const date = process.env.DATE || new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
const minutes = Number(process.env.MINUTES ?? 42);
const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
const upload = () => fetch(new URL('/api/verification/ios/upload', base), {
  method: 'POST', headers,
  body: JSON.stringify({ date, verifiedMinutes: minutes, raw: { source: 'test-ios-upload', at: new Date().toISOString() } }),
});
let res = await upload();
let text = await res.text();
// A fresh user has verification off, as the iOS companion's onboarding would turn it on: do that, once.
if (res.status === 403 && JSON.parse(text || '{}').reason === 'connection_disabled') {
  console.error('Screen Time verification was off for this user: turning it on (PATCH /api/verification/ios/connection), then uploading again');
  const on = await fetch(new URL('/api/verification/ios/connection', base), { method: 'PATCH', headers, body: JSON.stringify({ enabled: true }) });
  if (!on.ok) {
    console.error(`turning verification on failed: HTTP ${on.status} ${await on.text()}`);
    process.exit(1);
  }
  res = await upload();
  text = await res.text();
}
if (!res.ok) {
  console.error(`upload failed: HTTP ${res.status} ${text}`);
  process.exit(1);
}
console.log(`HTTP ${res.status}`);
console.log(text);
