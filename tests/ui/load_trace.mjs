// Opens a Perfetto UI URL in the system Chromium (headless), waits until the trace is
// on screen, and reports what a person would see, as one JSON object on stdout:
//   {trackTitles, visibleTitles, scrollers, settings, missing, modals, pageErrors, consoleErrors, failedRequests,
//    httpErrors, externalRequests, elapsedMs}
// visibleTitles: track titles wholly on screen without scrolling (inside the window and every scrolling
// area that holds them); scrollers: each scrolling area with track titles, how far it could scroll
// (overflow px) and its titles; settings: the UI's stored settings (localStorage).
// usage: node load_trace.mjs URL SCREENSHOT.png '["track name", ...]' [timeout_ms]
// The browser is never downloaded: playwright-core drives /usr/bin/chromium.
import {chromium} from 'playwright-core';
import {mkdtempSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';

const [url, screenshot, expectedJson, timeoutArg] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const timeoutMs = Number(timeoutArg ?? 60000);
const profile = mkdtempSync(join(tmpdir(), 'memq-chromium-'));
const origin = new URL(url).origin;

const report = {trackTitles: [], visibleTitles: [], scrollers: [], settings: null, missing: expected, modals: [], pageErrors: [], consoleErrors: [],
                failedRequests: [], httpErrors: [], externalRequests: [], firstSeenMs: {}, elapsedMs: 0};
const started = Date.now();
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.MEMQ_CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  viewport: {width: 1600, height: 1300},
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  // No internet, as on an HPC login node: everything but the UI's own origin fails.
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(origin) || u.startsWith('data:') || u.startsWith('blob:')) return route.continue();
    report.externalRequests.push(u);
    return route.abort('internetdisconnected');
  });
  const page = context.pages()[0] ?? await context.newPage();
  page.on('pageerror', (e) => report.pageErrors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') report.consoleErrors.push(m.text()); });
  page.on('response', (r) => { if (r.status() >= 400) report.httpErrors.push(`${r.status()} ${r.url()}`); });
  page.on('requestfailed', (r) => report.failedRequests.push(`${r.url()} ${r.failure()?.errorText}`));
  await page.goto(url);
  // Done when every expected track title is shown, or an error dialog opens, or time runs out.
  const state = async () => page.evaluate((names) => {
    const titles = [...document.querySelectorAll('.pf-track__title')].map((e) => e.textContent.trim());
    const text = document.body.innerText;
    const modals = [...document.querySelectorAll('.pf-modal-dialog')].map((e) => e.innerText.trim());
    return {titles, modals, missing: names.filter((n) => !titles.includes(n) && !text.includes(n))};
  }, expected);
  const seen = (st) => {
    for (const n of expected) {
      if (!st.missing.includes(n) && !(n in report.firstSeenMs)) report.firstSeenMs[n] = Date.now() - started;
    }
  };
  let s = await state();
  seen(s);
  while (Date.now() - started < timeoutMs && (s.missing.length > 0 || s.titles.length === 0) && s.modals.length === 0) {
    await page.waitForTimeout(250);
    s = await state();
    seen(s);
  }
  await page.waitForTimeout(1000);  // let the canvases paint before the screenshot
  s = await state();
  Object.assign(report, await page.evaluate(() => {
    // A title's text holds its name twice (the shown, ellipsized copy and the full one): keep one.
    const norm = (text) => {
      const t = text.replace(/\u00a0/g, ' ').trim();
      const half = t.slice(0, t.length / 2);
      return t.length % 2 === 0 && half + half === t ? half : t;
    };
    const scrolling = (el) => /(auto|scroll)/.test(getComputedStyle(el).overflowY);
    const visibleTitles = [];
    const scrollers = new Map();
    for (const el of document.querySelectorAll('.pf-track__title')) {
      const r = el.getBoundingClientRect();
      if (r.height === 0) continue;
      let shown = r.top >= 0 && r.bottom <= window.innerHeight;
      for (let p = el.parentElement; p; p = p.parentElement) {
        if (!scrolling(p)) continue;
        const box = p.getBoundingClientRect();
        shown = shown && r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
        if (!scrollers.has(p)) scrollers.set(p, {overflow: p.scrollHeight - p.clientHeight, titles: []});
        scrollers.get(p).titles.push(norm(el.textContent));
        break;  // the innermost scrolling area
      }
      if (shown) visibleTitles.push(norm(el.textContent));
    }
    return {visibleTitles, scrollers: [...scrollers.values()],
            settings: JSON.parse(localStorage.getItem('perfettoSettings') || 'null')};
  }));
  report.trackTitles = s.titles;
  report.missing = s.missing;
  report.modals = s.modals;
  await page.screenshot({path: screenshot});
} finally {
  report.elapsedMs = Date.now() - started;
  await context.close();
  rmSync(profile, {recursive: true, force: true});
}
process.stdout.write(JSON.stringify(report) + '\n');
