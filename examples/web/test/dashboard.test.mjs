// The dashboard in headless Chromium: data seeded through the REST routes shows up in its charts, and a
// new upload reaches the open page through events.changed and server-sent events.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { start } from '../server.mjs';
import { Browser, findChromium } from './chromium.mjs';
import { binary, env, temporaryDirectory, token, userA, userB, day } from '../../../clients/node/test/support.mjs';

test('the dashboard draws the seeded days and updates live after an upload', async (t) => {
  const chromium = findChromium();
  assert.ok(chromium, 'Chromium is not installed (scripts/deps.sh installs Debian\'s chromium package)');
  const dir = temporaryDirectory(t);
  const server = await start({ port: 0, dataDir: join(dir, 'data'), binary, serviceToken: token({ role: 'service_role' }), env, log: () => {} });
  t.after(() => server.close());
  const post = async (path, body, auth, method = 'POST') => {
    const res = await fetch(server.url + path, { method, headers: { authorization: `Bearer ${auth}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    assert.ok(res.ok, `${path}: ${res.status} ${await res.text()}`);
  };
  const auth = token({ user: userA });
  const d3 = day(-3), d2 = day(-2), d1 = day(-1);
  await post('/api/verification/ios/connection', { enabled: true }, auth, 'PATCH');
  await post('/api/verification/claim', { date: d3, minutes: 30 }, auth);
  await post('/api/verification/ios/upload', { date: d3, verifiedMinutes: 50 }, auth); // 20 over: 15 penalty points
  await post('/api/verification/claim', { date: d2, minutes: 60 }, auth);
  await post('/api/verification/ios/upload', { date: d2, verifiedMinutes: 58 }, auth);
  await post('/api/sessions', { session_start_time: `${d2}T07:00:00Z`, duration_seconds: 900 }, auth);
  await post('/api/sessions', { session_start_time: `${d1}T07:00:00Z`, duration_seconds: 1200 }, auth);
  await post('/ingest/healthkit', {
    timezone: 'UTC',
    samples: [{ uuid: randomUUID(), type: 'HKQuantityTypeIdentifierStepCount', value: 8421, unit: 'count', start: `${d2}T09:00:00Z`, end: `${d2}T10:00:00Z` }],
    sleep: [{ uuid: randomUUID(), stage: 'asleepCore', start: `${d1}T00:00:00Z`, end: `${d1}T07:30:00Z` }],
  }, auth);
  // Another user's data must not show up.
  const other = token({ user: userB });
  await post('/api/verification/ios/connection', { enabled: true }, other, 'PATCH');
  await post('/api/verification/ios/upload', { date: d3, verifiedMinutes: 999 }, other);

  const browser = await Browser.launch(chromium);
  t.after(() => browser.close());
  const page = await browser.open(`${server.url}/dashboard#token=${auth}`);
  await page.waitFor(`document.getElementById('live').textContent === 'live' && document.querySelectorAll('rect.bar').length > 0`);
  const bars = () => page.evaluate(`Object.fromEntries([...document.querySelectorAll('rect.bar')]
    .map((r) => [r.dataset.series + ' ' + r.dataset.date, Number(r.dataset.value)]))`);
  const shown = await bars();
  assert.equal(shown[`claimed ${d3}`], 30);
  assert.equal(shown[`verified ${d3}`], 50);
  assert.equal(shown[`claimed ${d2}`], 60);
  assert.equal(shown[`verified ${d2}`], 58);
  assert.equal(shown[`meditation ${d2}`], 15);
  assert.equal(shown[`meditation ${d1}`], 20);
  assert.equal(shown[`steps ${d2}`], 8421);
  assert.equal(shown[`sleep ${d1}`], 7.5);
  assert.equal(await page.evaluate(`document.querySelector('text.penalty[data-date="${d3}"]').dataset.value`), '15');
  assert.equal(await page.evaluate(`document.querySelector('text.penalty[data-date="${d2}"]')`), null, 'a match has no penalty');
  assert.equal(await page.evaluate(`document.getElementById('streak').dataset.value`), '2');
  assert.equal(await page.evaluate(`document.getElementById('membership').textContent`), 'none');
  assert.equal(await page.evaluate(`document.querySelectorAll('svg#screentime rect.bar').length`), 4, 'only this user\'s days');
  assert.deepEqual(browser.messages, [], 'no console errors');

  // One more upload: the open page redraws from events.changed, without a reload.
  const updates = Number(await page.evaluate(`document.getElementById('updated').dataset.updates`));
  await post('/api/verification/ios/upload', { date: d1, verifiedMinutes: 77 }, auth);
  await page.waitFor(`document.querySelector('rect.bar[data-series="verified"][data-date="${d1}"]')?.dataset.value === '77'`);
  assert.ok(Number(await page.evaluate(`document.getElementById('updated').dataset.updates`)) > updates);
  assert.equal(await page.evaluate(`performance.getEntriesByType('navigation').length`), 1, 'the page was not reloaded');
});
