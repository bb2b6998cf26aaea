// Opens a Perfetto UI URL in the system Chromium (headless), waits until the trace is
// on screen, and reports what a person would see, as one JSON object on stdout:
//   {trackTitles, missing, modals, firstSeenMs: {name: ms}, firstTrackMs, pageErrors, consoleErrors,
//    failedRequests, httpErrors, externalRequests, elapsedMs, startedAt}   (times in ms from startedAt, the
//    script's start, a Unix time in ms)
// usage: node load_trace.mjs URL SCREENSHOT.png '["track name", ...]' [timeout_ms]
import {launch, newReport, pageState} from './chromium.mjs';

const [url, screenshot, expectedJson, timeoutArg] = process.argv.slice(2);
const expected = JSON.parse(expectedJson);
const timeoutMs = Number(timeoutArg ?? 60000);
const STAYING_DIALOG_MS = 2000;

const report = {...newReport(), trackTitles: [], missing: expected, modals: [], firstSeenMs: {}, firstTrackMs: null};
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
  report.trackTitles = s.titles;
  report.missing = s.missing;
  report.modals = s.modals;
  await page.screenshot({path: screenshot});
} finally {
  report.elapsedMs = Date.now() - started;
  await browser.close();
}
process.stdout.write(JSON.stringify(report) + '\n');
