// The dashboard in headless Chromium: data seeded through the REST routes shows up in its charts, a new
// upload reaches the open page through events.changed and server-sent events, and each state of the page
// (no token, a refused one, a month of data) is drawn whole and kept as a screenshot (HK_SCREENSHOTS=DIR).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { start } from '../server.mjs';
import { Browser, findChromium } from './chromium.mjs';
import { binary, env, shortToken, temporaryDirectory, token, userA, userB, day } from '../../../clients/node/test/support.mjs';

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

/** Texts of every chart with their boxes in viewBox units, the y ticks, and each chart's size. */
const layout = `Object.fromEntries([...document.querySelectorAll('svg')].map((svg) => [svg.id, {
  width: svg.viewBox.baseVal.width, height: svg.viewBox.baseVal.height, empty: svg.dataset.empty === 'true',
  texts: [...svg.querySelectorAll('text')].map((t) => { const b = t.getBBox(); return { cls: t.getAttribute('class'), text: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height }; }),
  ticks: [...svg.querySelectorAll('text.axis.y')].map((t) => Number(t.dataset.value)),
  max: Math.max(0, ...[...svg.querySelectorAll('rect.bar')].map((r) => Number(r.dataset.value))),
}]))`;

test('dashboard states, each in a screenshot: no token, a bad token, an expired one, a month of data, a token that expires while open', async (t) => {
  const chromium = findChromium();
  assert.ok(chromium, 'Chromium is not installed (scripts/deps.sh installs Debian\'s chromium package)');
  const dir = temporaryDirectory(t);
  const shots = process.env.HK_SCREENSHOTS ?? join(dir, 'screenshots');
  mkdirSync(shots, { recursive: true });
  const server = await start({ port: 0, dataDir: join(dir, 'data'), binary, serviceToken: token({ role: 'service_role' }), env, log: () => {} });
  t.after(() => server.close());
  const browser = await Browser.launch(chromium);
  t.after(() => browser.close());
  const shoot = async (page, name) => {
    const png = await page.screenshot();
    assert.deepEqual([...png.subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47], `${name}: a PNG`);
    assert.ok(png.length > 10_000, `${name}: ${png.length} bytes is no screenshot of a page`);
    writeFileSync(join(shots, `${name}.png`), png);
  };
  const formState = (page) => page.evaluate(`({ state: document.body.dataset.state,
    form: getComputedStyle(document.getElementById('login')).display !== 'none',
    charts: getComputedStyle(document.getElementById('charts')).display !== 'none',
    error: document.getElementById('login-error').hidden ? null : document.getElementById('login-error').textContent })`);

  // No token: the form alone, no empty chart cards under it.
  const empty = await browser.open(`${server.url}/dashboard`);
  await empty.waitFor(`document.body.dataset.state === 'no-token'`);
  assert.deepEqual(await formState(empty), { state: 'no-token', form: true, charts: false, error: null });
  await shoot(empty, '1-no-token');

  // A bad token and an expired one: the form again, saying why.
  for (const [name, bad] of [['2-bad-token', 'not-a-token'], ['3-expired-token', shortToken(userA, -120)]]) {
    const page = await browser.open(`${server.url}/dashboard#token=${bad}`);
    await page.waitFor(`document.body.dataset.state === 'refused'`);
    const shown = await formState(page);
    assert.equal(shown.form, true, name);
    assert.equal(shown.charts, false, name);
    assert.match(shown.error, /Paste another token/, name);
    if (name === '3-expired-token') assert.match(shown.error, /expired/i);
    await shoot(page, name);
  }

  // A month of data: penalties on neighbouring days with wide labels, steps near 10,000, 9 hours asleep.
  const auth = token({ user: userB });
  const post = async (path, body, method = 'POST') => {
    const res = await fetch(server.url + path, { method, headers: { authorization: `Bearer ${auth}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    assert.ok(res.ok, `${path}: ${res.status} ${await res.text()}`);
  };
  await post('/api/verification/ios/connection', { enabled: true }, 'PATCH');
  const samples = [], sleep = [];
  for (let i = -29; i <= 0; i++) {
    const date = day(i);
    await post('/api/verification/claim', { date, minutes: 30 });
    await post('/api/verification/ios/upload', { date, verifiedMinutes: i % 3 === 0 ? 30 : 150 + (i % 7) * 11 });
    samples.push({ uuid: randomUUID(), type: 'HKQuantityTypeIdentifierStepCount', value: 9993 - (i % 5) * 997, unit: 'count', start: `${date}T09:00:00Z`, end: `${date}T10:00:00Z` });
    sleep.push({ uuid: randomUUID(), stage: 'asleepCore', start: `${date}T00:00:00Z`, end: `${date}T0${7 + (i % 3 === 0 ? 2 : 0)}:00:00Z` });
  }
  await post('/ingest/healthkit', { timezone: 'UTC', samples, sleep });
  const page = await browser.open(`${server.url}/dashboard#token=${auth}`);
  await page.waitFor(`document.body.dataset.state === 'shown' && document.getElementById('live').textContent === 'live'`);
  const charts = await page.evaluate(layout);
  for (const [id, chart] of Object.entries(charts)) {
    for (const box of chart.texts) {
      assert.ok(box.x >= -0.5 && box.x + box.w <= chart.width + 0.5 && box.y >= -0.5 && box.y + box.h <= chart.height + 0.5,
        `${id}: "${box.text}" (${box.cls}) reaches outside the chart: ${JSON.stringify(box)}`);
    }
    if (chart.empty) { assert.equal(id, 'meditation', 'only the chart this user has no data for is empty'); continue; }
    const xLabels = chart.texts.filter((b) => b.cls === 'axis x').map((b) => b.text);
    assert.equal(xLabels.at(-1), day(0).slice(5), `${id}: the last date is whole`);
    const step = chart.ticks[1] - chart.ticks[0];
    const mantissa = step / 10 ** Math.floor(Math.log10(step));
    assert.ok([1, 2, 5].some((m) => Math.abs(mantissa - m) < 1e-9), `${id}: ticks ${chart.ticks} step by 1, 2 or 5 times a power of ten`);
    assert.equal(chart.ticks[0], 0);
    chart.ticks.forEach((v, k) => assert.ok(Math.abs(v - k * step) < 1e-9, `${id}: ticks ${chart.ticks} are evenly spaced`));
    assert.ok(chart.ticks.at(-1) >= chart.max, `${id}: the top tick ${chart.ticks.at(-1)} covers ${chart.max}`);
    assert.ok(chart.ticks.length <= 6, `${id}: ${chart.ticks.length} ticks`);
  }
  const penalties = charts.screentime.texts.filter((b) => b.cls === 'penalty');
  assert.ok(penalties.length >= 19, `${penalties.length} penalty labels`);
  for (const [i, a] of penalties.entries()) {
    for (const b of penalties.slice(i + 1)) {
      assert.ok(a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y || b.y + b.h <= a.y, `penalty labels ${a.text} and ${b.text} overlap`);
    }
  }
  assert.equal(await page.evaluate(`document.getElementById('membership').textContent`), 'none');
  assert.match(await page.evaluate(`document.getElementById('membership-meaning').textContent`), /No App Store subscription/);
  await shoot(page, '4-month');
  assert.ok(!(await page.evaluate('location.href')).includes(auth), 'the token left the address bar');
  assert.deepEqual(browser.requests.filter((url) => url.includes(auth.split('.')[2]) || url.includes('access_token')), [],
    'no request carries a token in its URL');
  assert.ok(browser.requests.some((url) => url.includes('/api/events?ticket=')), 'the stream opened with a ticket');

  // A token that expires while the page is open: the stream ends, the page asks for another token.
  const brief = await browser.open(`${server.url}/dashboard#token=${shortToken(userB, -57)}`);
  await brief.waitFor(`document.body.dataset.state === 'shown'`);
  await brief.waitFor(`document.body.dataset.state === 'refused'`, 20_000);
  assert.equal((await formState(brief)).charts, false);
  await shoot(brief, '5-expired-while-open');

  // #51 item 20: a new user at a phone's width: every chart says "No data yet", the page is no wider
  // than the screen, and counts agree with their nouns.
  const fresh = token({ user: 'cccccccc-0000-4000-8000-000000000003' });
  const phone = await browser.open(`${server.url}/dashboard#token=${fresh}`, { width: 390, mobile: true });
  await phone.waitFor(`document.body.dataset.state === 'shown'`);
  const shown = await phone.evaluate(`({ width: document.documentElement.scrollWidth,
    empty: [...document.querySelectorAll('svg')].map((s) => [s.id, s.dataset.empty, s.textContent]),
    streak: document.getElementById('streak').textContent })`);
  assert.ok(shown.width <= 390, `the page is ${shown.width} px wide at 390 px`);
  for (const [id, empty, text] of shown.empty) assert.ok(empty === 'true' && text === 'No data yet', `${id}: ${empty} ${text}`);
  assert.equal(shown.streak, 'streak 0 days (longest 0) · 0 sessions');
  await shoot(phone, '6-new-user-on-a-phone');
  await fetch(`${server.url}/api/sessions`, { method: 'POST', headers: { authorization: `Bearer ${fresh}`, 'content-type': 'application/json' },
    body: JSON.stringify({ session_start_time: new Date().toISOString(), duration_seconds: 600 }) });
  await phone.waitFor(`document.getElementById('streak').textContent === 'streak 1 day (longest 1) · 1 session'`);
  assert.deepEqual(browser.messages.filter((m) => !/Failed to load resource/.test(m)), [], 'no console errors');
  process.stderr.write(`dashboard screenshots: ${shots}\n`);
});
