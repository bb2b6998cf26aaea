// A `memq report` page in headless Chromium with no network: what went wrong (console errors, page errors,
// requests outside the file), the figures the page states (every [data-figure] and the findings' rows), and a
// screenshot of the first screen and of the whole page.
// Usage: node report_page.mjs FILE.html SCREENSHOT.png   (prints one JSON object)
import {launch, newReport} from './chromium.mjs';
import {pathToFileURL} from 'node:url';

const [file, screenshot] = process.argv.slice(2);
const url = pathToFileURL(file).href;
const report = newReport();
const {context, watch, close} = await launch({allowed: [url], report});
try {
  const page = watch(await context.newPage());
  await page.setViewportSize({width: 1280, height: 900});
  const started = Date.now();
  await page.goto(url, {waitUntil: 'load'});
  report.elapsedMs = Date.now() - started;
  Object.assign(report, await page.evaluate(() => {
    const figures = {};
    for (const e of document.querySelectorAll('[data-figure]')) {
      const section = e.closest('section[data-trace]');
      const key = `${section ? section.dataset.trace : ''}:${e.dataset.figure}`;
      figures[key] = {value: e.dataset.value ?? null, text: e.textContent.trim()};
    }
    const findings = [...document.querySelectorAll('tr[data-finding]')].map((r) => ({
      trace: r.closest('section[data-trace]').dataset.trace, rank: Number(r.dataset.finding), kind: r.dataset.kind,
      gain: Number(r.dataset.gain), bytes: Number(r.dataset.bytes), count: Number(r.dataset.count),
      buffers: r.dataset.buffers ? r.dataset.buffers.split(' ').map(Number) : [], text: r.innerText}));
    const plots = [...document.querySelectorAll('figure[data-plot]')].map((f) => ({
      plot: f.dataset.plot, rank: f.dataset.rank ?? null, svg: !!f.querySelector('svg'),
      series: [...f.querySelectorAll('[data-series]')].map((s) => ({name: s.dataset.series,
                                                                    peak: Number(s.dataset.peak)})),
      bars: [...f.querySelectorAll('rect[data-class]')].map((b) => ({cls: b.dataset.class,
                                                                      value: Number(b.dataset.value)}))}));
    const firstScreen = document.body.innerText.slice(0, 4000);
    const q = [...document.querySelectorAll('.card')].map((c) => {
      const r = c.getBoundingClientRect();
      return {id: c.id, bottom: r.bottom};
    });
    return {figures, findings, plots, firstScreen, cards: q, scripts: document.scripts.length,
            title: document.title};
  }));
  await page.screenshot({path: screenshot});
  await page.screenshot({path: screenshot.replace(/\.png$/, '.full.png'), fullPage: true});
} finally {
  await close();
}
console.log(JSON.stringify(report));
