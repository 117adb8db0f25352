// The console's numbers in a real browser (run by tests/benches/console.rs):
// how long a committed event takes to appear in an open task page, the
// page's weight, and how long a task page with TASK_B's many events takes
// to render and whether it stays responsive. Protocol on stdin/stdout: this
// prints "ready" once task A's page follows live; the driver commits its
// events and writes "done"; this prints one JSON line of results and exits.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const { chromium } = createRequire(join(env('CHORUS_TEST_NODE_MODULES'), 'noop.js'))('playwright-core');
const expected = Number(env('EVENTS_A'));
const bigCount = Number(env('EVENTS_B'));
const lines = createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => lines.once('line', resolve));

const browser = await chromium.launch({
  executablePath: env('CHROMIUM'),
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
try {
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 1000 } })).newPage();
  page.setDefaultTimeout(120_000);
  await page.goto(env('CONSOLE_URL'));
  await page.fill('input[name=key]', env('ADMIN_KEY'));
  await page.click('#sign-in button');
  await page.waitForSelector('#task-rows', { state: 'attached' });
  const weight = await page.evaluate(() => performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'))
    .filter((e) => ['navigation', 'script', 'link', 'css'].includes(e.initiatorType || e.entryType))
    .map((e) => ({ name: e.name, transfer: e.transferSize, body: e.decodedBodySize })));

  await page.evaluate((id) => { location.hash = `#/task/${id}`; }, env('TASK_A'));
  await page.waitForSelector('#timeline li', { state: 'attached' });
  await page.evaluate(() => {
    window.__seen = [];
    new MutationObserver((records) => {
      const now = Date.now();
      for (const r of records) for (const n of r.addedNodes) {
        if (n.dataset && n.dataset.kind === 'tool_executed') window.__seen.push(now - Number(n.dataset.at));
      }
    }).observe(document.getElementById('timeline'), { childList: true });
  });
  console.log('ready');
  await nextLine();
  await page.waitForFunction((n) => window.__seen.length >= n, expected);
  const latencies = await page.evaluate(() => window.__seen);

  // The big page: from the navigation to every event shown, then a frame.
  const load = await page.evaluate(async ({ id, count }) => {
    const longTasks = [];
    const observer = new PerformanceObserver((list) => { for (const e of list.getEntries()) longTasks.push(e.duration); });
    observer.observe({ type: 'longtask' });
    const start = performance.now();
    location.hash = `#/task/${id}`;
    await new Promise((resolve) => {
      const check = () => {
        const items = document.querySelectorAll('#timeline li').length;
        if (items >= count) resolve(); else requestAnimationFrame(check);
      };
      requestAnimationFrame(check);
    });
    const shown = performance.now() - start;
    // How soon the page answers after that: the next frame, and a click's handler.
    const frameStart = performance.now();
    await new Promise((r) => requestAnimationFrame(() => r()));
    const frame = performance.now() - frameStart;
    observer.disconnect();
    return { shown, frame, items: document.querySelectorAll('#timeline li').length, longTasks };
  }, { id: env('TASK_B'), count: bigCount });
  const clickStart = Date.now();
  await page.click('a[data-nav=status]');
  await page.waitForSelector('[data-field=Version]');
  load.navigateAway = Date.now() - clickStart;
  console.log(JSON.stringify({ latencies, weight, load }));
} finally {
  await browser.close();
  lines.close();
}
