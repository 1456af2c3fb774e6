// Demo data for the dashboard, sent through the server's own REST routes as the apps would send it:
// 30 days of Screen Time claims and uploads, meditation sessions, steps and sleep for one user. Every item
// has a key of its day (a session's client id, a sample's UUID), so seeding twice leaves the same data.
import { createHash } from 'node:crypto';

/** A UUID made from `name`, so that seeding again sends the same items and changes nothing. */
function demoUUID(name) {
  const h = createHash('sha256').update(`healthkernel-demo:${name}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

export async function seedDemo(baseUrl, token, days = 30) {
  const send = async (method, path, body) => {
    const res = await fetch(new URL(path, baseUrl), { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${await res.text()}`);
  };
  await send('PATCH', '/api/verification/ios/connection', { enabled: true, timezone: 'UTC' });
  const samples = [];
  const sleep = [];
  for (let i = days; i >= 1; i--) {
    const date = new Date(Date.now() - i * 86_400_000).toISOString().slice(0, 10);
    const wave = Math.sin(i / 3);
    const claimed = Math.round(90 + 40 * wave);
    await send('POST', '/api/verification/claim', { date, minutes: claimed });
    await send('POST', '/api/verification/ios/upload', { date, verifiedMinutes: Math.max(0, claimed + Math.round(25 * Math.cos(i))), raw: { demo: true } });
    if (i % 4 !== 0) {
      await send('POST', '/api/sessions', { session_start_time: `${date}T06:30:00Z`, duration_seconds: 300 + 60 * ((i * 7) % 20),
                                            client_session_id: `demo-${date}` });
    }
    samples.push({ uuid: demoUUID(`steps-${date}`), type: 'HKQuantityTypeIdentifierStepCount', value: Math.round(7000 + 3000 * Math.cos(i / 2)),
                   unit: 'count', start: `${date}T08:00:00Z`, end: `${date}T20:00:00Z` });
    sleep.push({ uuid: demoUUID(`sleep-${date}`), stage: 'asleepCore', start: `${date}T00:00:00Z`, end: `${date}T0${6 + (i % 3)}:${i % 2 ? '15' : '45'}:00Z` });
  }
  await send('POST', '/ingest/healthkit', { timezone: 'UTC', samples, sleep });
}
