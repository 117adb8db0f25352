// The console across an orchestrator restart, in a real browser (Debian's
// Chromium driven by playwright-core). Run by tests/tests/console.rs, which
// passes CONSOLE_URL, ADMIN_KEY, TASK_ID, ARTIFACTS, CHROMIUM and
// CHORUS_TEST_NODE_MODULES, and talks to it by lines: this script prints
// "ready" once a task page and the task list follow live, and "noticed"
// once both show the break; the test writes "restarted" when the new
// orchestrator serves, then changes the task. Prints the reconnect time and
// "ok" when both pages caught up by themselves (no reload), with every event
// shown once; otherwise the step that failed, and exits 1.
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

const modules = process.env.CHORUS_TEST_NODE_MODULES;
if (!modules) throw new Error('CHORUS_TEST_NODE_MODULES is not set (where playwright-core is)');
const { chromium } = createRequire(join(modules, 'noop.js'))('playwright-core');
const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const url = env('CONSOLE_URL');
const artifacts = env('ARTIFACTS');
const task = env('TASK_ID');
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const heard = async (expected) => {
  const { value } = await lines.next();
  if (value !== expected) throw new Error(`the test said ${value}, not ${expected}`);
};

const browser = await chromium.launch({
  executablePath: env('CHROMIUM'),
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let step = 'start';
const pages = [];
const errors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  const open = async (hash) => {
    const page = await context.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    page.setDefaultTimeout(60_000);
    await page.goto(url);
    await page.fill('input[name=key]', env('ADMIN_KEY'));
    await page.click('#sign-in button');
    await page.waitForSelector('#task-rows', { state: 'attached' });
    await page.evaluate((h) => { location.hash = h; }, hash);
    pages.push(page);
    return page;
  };

  step = 'follow a task and the task list';
  const detail = await open(`#/task/${task}`);
  await detail.waitForSelector('#task-head [data-status=planned]');
  await detail.waitForSelector('span.live[data-state=live]');
  await detail.evaluate(() => { window.__notReloaded = true; });
  const list = await open('#/tasks');
  await list.waitForSelector(`tr[data-task="${task}"] [data-status=planned]`);
  await list.waitForSelector('span.live[data-state=live]');
  await list.evaluate(() => { window.__notReloaded = true; });
  console.log('ready');

  step = 'the break is shown';
  for (const page of [detail, list]) await page.waitForSelector('span.live[data-state=retry]');
  await detail.screenshot({ path: `${artifacts}/reconnect-1-broken.png`, fullPage: true });
  console.log('noticed');

  step = 'both pages reconnect by themselves';
  await heard('restarted');
  const restarted = Date.now();
  // Live again — or already over: the cancel may come before the page.
  await detail.waitForSelector('span.live[data-state=live], span.live[data-state=ended]');
  const reconnected = Date.now() - restarted;
  await list.waitForSelector('span.live[data-state=live]');

  step = 'what happened meanwhile is shown, once';
  await detail.waitForSelector('#task-head [data-status=canceled]');
  await detail.waitForSelector('#timeline li[data-kind=status_changed] >> text=canceled');
  await list.waitForSelector(`tr[data-task="${task}"] [data-status=canceled]`);
  if (await detail.$('[data-action=PlanTask], #start')) throw new Error('the canceled task still offers Plan or Start');
  const sequences = await detail.$$eval('#timeline li[data-sequence]', (items) => items.map((i) => Number(i.dataset.sequence)));
  const seen = new Set(sequences);
  if (seen.size !== sequences.length) throw new Error(`an event was shown twice: ${sequences}`);
  // Every status change of the task's history has its row (the timeline
  // leaves some kinds out by design).
  const history = await detail.evaluate(async (id) => {
    const response = await fetch('/api/GetHistory', {
      method: 'POST',
      headers: { authorization: `Bearer ${sessionStorage.getItem('chorus.key')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ taskId: id, limit: 1000 }),
    });
    return (await response.json()).events.map((e) => [Number(e.sequence), e.kind]);
  }, task);
  for (const [sequence, kind] of history) {
    if (['task_created', 'status_changed'].includes(kind) && !seen.has(sequence)) {
      throw new Error(`event ${sequence} (${kind}) is missing: shown ${sequences}`);
    }
  }
  for (const page of pages) {
    if (!(await page.evaluate(() => window.__notReloaded))) throw new Error('a page was reloaded');
  }
  await detail.screenshot({ path: `${artifacts}/reconnect-2-caught-up.png`, fullPage: true });
  if (errors.length) throw new Error(`a page threw: ${errors.join('\n')}`);
  console.log(`reconnect_ms=${reconnected}`);
  console.log('ok');
} catch (error) {
  console.error(`step "${step}" failed: ${error.message}`);
  if (errors.length) console.error(`page errors: ${errors.join('\n')}`);
  for (const [i, page] of pages.entries()) {
    await page.screenshot({ path: `${artifacts}/reconnect-failed-${i}.png`, fullPage: true }).catch(() => {});
  }
  process.exitCode = 1;
} finally {
  await browser.close();
  process.exit();
}
