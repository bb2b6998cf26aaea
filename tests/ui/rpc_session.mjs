// Drives the Perfetto UI against a trace processor served on 127.0.0.1 (memq serve), tab by tab, as a
// person would, and reports what happened as one JSON object on stdout.
// usage: node rpc_session.mjs PLAN.json
// PLAN: {allowed: [url prefixes], served: {origin: dir}, grants: {origin: [permission]},
//        flags: {origin: {flag: state}}, timeoutMs, steps: [step, ...]} (see chromium.mjs); each step names its tab:
//   {open: TAB, url}                      a new tab on `url`
//   {accept: TAB}                          click 'YES, use loaded trace' when the UI asks
//   {tracks: TAB, expect: [names]}         wait until these track titles are on screen
//   {query: TAB, sql, wait: true|false}    the query page: type `sql`, Run Query, (wait for) the result table
//   {modal: TAB, contains: text}           wait for a dialog containing `text`
//   {sleep: ms}, {close: TAB}, {screenshot: TAB, path}
// The report: {steps: [{...step, ok, ms, result}], pageErrors, consoleErrors, failedRequests, httpErrors,
//              externalRequests, elapsedMs}; the run stops at the first step that fails.
import {readFileSync} from 'node:fs';
import {launch, newReport, pageState} from './chromium.mjs';

const plan = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const timeoutMs = plan.timeoutMs ?? 90000;
const report = {...newReport(), steps: []};
const started = Date.now();
// Flags the UI keeps in localStorage, set per origin before the UI starts (as a person would in Flags).
const initScript = `(() => {
  const flags = ${JSON.stringify(plan.flags ?? {})}[location.origin];
  if (flags) localStorage.setItem('perfettoFeatureFlags', JSON.stringify(flags));
})();`;
const browser = await launch({allowed: plan.allowed, served: plan.served ?? {}, grants: plan.grants ?? {}, report,
                              initScript});
const tabs = {};

async function until(check, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function runQuery(page, sql, wait) {
  await page.locator('a[href="#!/query"]').first().click();
  const editor = page.locator('.cm-content').first();
  await editor.click();
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Delete');
  await page.keyboard.insertText(sql);
  const before = await page.locator('.pf-data-grid__table').count();
  await page.getByRole('button', {name: 'Run Query'}).click();
  if (!wait) return {};
  return until(() => page.evaluate((before) => {
    const error = document.querySelector('.query-error, .pf-query-error, .pf-query-page__error');
    if (error) return {error: error.innerText.trim()};
    const grids = document.querySelectorAll('.pf-data-grid__table');
    if (grids.length <= before && before > 0) return undefined;
    const grid = grids[grids.length - 1];
    if (!grid) return undefined;
    const headers = [...grid.querySelectorAll('thead .pf-grid-cell__content')].map((e) => e.textContent.trim());
    const rows = [...grid.querySelectorAll('tbody tr')].map((tr) => [...tr.querySelectorAll('td')].map(
        (td) => td.innerText.trim()));
    return headers.length ? {headers, rows} : undefined;
  }, before), 'the query result');
}

const actions = {
  open: async (step) => {
    const page = browser.watch(await browser.context.newPage());
    tabs[step.open] = page;
    await page.goto(step.url);
  },
  accept: async (step) => {
    const page = tabs[step.accept];
    const button = page.getByRole('button', {name: 'YES, use loaded trace'});
    await button.waitFor({timeout: timeoutMs});
    const dialog = (await pageState(page)).modals;
    await button.click();
    await until(async () => !(await pageState(page)).modals.some((m) => m.startsWith(dialog[0]?.split('\n')[0])),
                'the dialog to close');
    return {dialog};
  },
  tracks: async (step) => {
    const page = tabs[step.tracks];
    const t0 = Date.now();
    let dialogSince = null;
    const s = await until(async () => {
      const st = await pageState(page, step.expect);
      if (st.modals.length === 0) dialogSince = null;
      else if (dialogSince === null) dialogSince = Date.now();
      else if (Date.now() - dialogSince > 2000) throw new Error(`a dialog opened: ${st.modals.join(' | ')}`);
      return st.missing.length === 0 && st.titles.length > 0 ? st : undefined;
    }, `tracks ${step.expect}`);
    return {titles: s.titles, ms: Date.now() - t0};
  },
  query: async (step) => runQuery(tabs[step.query], step.sql, step.wait !== false),
  modal: async (step) => {
    const page = tabs[step.modal];
    const modals = await until(async () => {
      const m = (await pageState(page)).modals;
      return m.some((t) => t.includes(step.contains)) ? m : undefined;
    }, `a dialog with "${step.contains}"`);
    return {modals};
  },
  sleep: async (step) => { await new Promise((r) => setTimeout(r, step.sleep)); },
  close: async (step) => { await tabs[step.close].close(); delete tabs[step.close]; },
  screenshot: async (step) => { await tabs[step.screenshot].screenshot({path: step.path}); },
};

try {
  for (const step of plan.steps) {
    const kind = Object.keys(actions).find((k) => k in step);
    const t0 = Date.now();
    const entry = {...step, ok: false};
    report.steps.push(entry);
    try {
      entry.result = await actions[kind](step);
      entry.ok = true;
    } catch (e) {
      entry.error = String(e);
      const page = tabs[step[kind]];
      if (page) entry.modals = (await pageState(page).catch(() => ({modals: []}))).modals;
      break;
    } finally {
      entry.ms = Date.now() - t0;
    }
  }
} finally {
  report.elapsedMs = Date.now() - started;
  await browser.close();
}
process.stdout.write(JSON.stringify(report) + '\n');
