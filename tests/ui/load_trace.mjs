// Opens a Perfetto UI URL in the system Chromium (headless), waits until the trace is
// on screen, and reports what a person would see, as one JSON object on stdout:
//   {trackTitles, visibleTitles, scrollers, settings, missing, modals, firstSeenMs: {name: ms}, firstTrackMs,
//    pageErrors, consoleErrors, failedRequests, httpErrors, externalRequests, elapsedMs, startedAt}
// Times in ms from startedAt (the script's start, a Unix time in ms). visibleTitles: track titles wholly on
// screen without scrolling (inside the window and every scrolling area that holds them); scrollers: each
// scrolling area with track titles, how far it could scroll (overflow px) and its titles; settings: the UI's
// stored settings (localStorage).
// usage: node load_trace.mjs URL SCREENSHOT.png '["track name", ...]' [timeout_ms]
import {launch, newReport, pageState} from './chromium.mjs';

const [url, screenshot, expectedJson, timeoutArg] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const timeoutMs = Number(timeoutArg ?? 60000);
const STAYING_DIALOG_MS = 2000;

const report = {...newReport(), trackTitles: [], visibleTitles: [], scrollers: [], settings: null, missing: expected,
                modals: [], firstSeenMs: {}, firstTrackMs: null};
const started = Date.now();
report.startedAt = started;
// No internet, as on an HPC login node: everything but the UI's own origin fails.
const browser = await launch({allowed: [new URL(url).origin], report});
try {
  const page = browser.watch(browser.context.pages()[0] ?? await browser.context.newPage());
  await page.goto(url);
  // Done when every expected track title is shown, or an error dialog opens, or time runs out.
  const seen = (st) => {
    if (st.titles.length > 0 && report.firstTrackMs === null) report.firstTrackMs = Date.now() - started;
    for (const n of expected) {
      if (!st.missing.includes(n) && !(n in report.firstSeenMs)) report.firstSeenMs[n] = Date.now() - started;
    }
  };
  // A dialog that stays up stops the wait; one answered at once (memq open answers the UI's question about
  // the loaded trace itself) may still be on screen for a moment.
  let s = await pageState(page, expected);
  let dialogSince = null;
  seen(s);
  while (Date.now() - started < timeoutMs && (s.missing.length > 0 || s.titles.length === 0)) {
    if (s.modals.length === 0) dialogSince = null;
    else if (dialogSince === null) dialogSince = Date.now();
    else if (Date.now() - dialogSince > STAYING_DIALOG_MS) break;
    await page.waitForTimeout(250);
    s = await pageState(page, expected);
    seen(s);
  }
  await page.waitForTimeout(1000);  // let the canvases paint before the screenshot
  s = await pageState(page, expected);
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
  await browser.close();
}
process.stdout.write(JSON.stringify(report) + '\n');
