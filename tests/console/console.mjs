// The web console in a real browser (Debian's Chromium driven by
// playwright-core), as a person uses it. Run by tests/tests/console.rs, which
// starts the orchestrator and a fake model and passes, in the environment:
// CONSOLE_URL, ADMIN_KEY, MODEL_URL, ROOT (a directory for the workspace),
// ARTIFACTS (where screenshots go), CHROMIUM (the browser), and
// CHORUS_TEST_NODE_MODULES (where playwright-core is installed).
// Exits 0 when every step saw what it should; otherwise prints the step and
// exits 1.
import { createRequire } from 'node:module';
import { join } from 'node:path';

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
const LONG = 60_000;

const browser = await chromium.launch({
  executablePath: env('CHROMIUM'),
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let page;
let step = 'start';
const consoleErrors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
  page = await context.newPage();
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  page.setDefaultTimeout(LONG);
  const shot = (name) => page.screenshot({ path: `${artifacts}/${name}.png`, fullPage: true });

  step = 'a wrong key is refused';
  await page.goto(url);
  await page.fill('input[name=key]', 'chorus_not_a_key_at_all');
  await page.click('#sign-in button');
  await page.waitForSelector('#sign-in .error, .login .error');
  await shot('01-wrong-key');

  step = 'sign in with the admin key';
  await page.fill('input[name=key]', env('ADMIN_KEY'));
  await page.click('#sign-in button');
  await page.waitForSelector('#task-rows', { state: 'attached' });

  step = 'create a workspace';
  await page.click('a[data-nav=workspaces]');
  await page.fill('#new-workspace input[name=name]', 'demo');
  await page.fill('#new-workspace input[name=root]', env('ROOT'));
  await page.click('#new-workspace button');
  await page.waitForSelector('tr[data-workspace=demo]');

  step = 'create a provider and make it the planner\'s';
  await page.click('a[data-nav=providers]');
  await page.fill('#new-provider input[name=name]', 'model');
  await page.fill('#new-provider input[name=baseUrl]', env('MODEL_URL'));
  await page.fill('#new-provider input[name=model]', 'fake-model');
  await page.click('#new-provider button');
  await page.waitForSelector('tr[data-provider=model]');
  await page.selectOption('#system-provider select[name=provider]', 'model');
  await page.click('#system-provider button');
  await page.waitForSelector('#system-provider[data-current=model]');

  step = 'a CLI provider shows how its agents reach their tools, and it is changed';
  await page.fill('#new-provider input[name=name]', 'cli');
  await page.selectOption('#new-provider select[name=kind]', 'PROVIDER_KIND_CLAUDE_CODE');
  await page.fill('#new-provider input[name=baseUrl]', '');
  await page.fill('#new-provider input[name=model]', '');
  await page.click('#new-provider button');
  await page.waitForSelector('tr[data-provider=cli] form.transport[data-transport=TOOL_TRANSPORT_MCP]');
  await page.selectOption('tr[data-provider=cli] select[name=toolTransport]', 'TOOL_TRANSPORT_SHELL');
  await page.click('tr[data-provider=cli] form.transport button');
  await page.waitForSelector('tr[data-provider=cli] form.transport[data-transport=TOOL_TRANSPORT_SHELL]');

  step = 'create two agents';
  await page.click('a[data-nav=agents]');
  // The lead asks a person before it creates a file.
  for (const [name, tools, rules] of [['lead', 'file.create,file.read,handoff', 'ask file.create'], ['helper', 'file.read', '']]) {
    await page.fill('#new-agent input[name=name]', name);
    await page.fill('#new-agent input[name=tools]', tools);
    await page.fill('#new-agent textarea[name=rules]', rules);
    await page.click('#new-agent button');
    await page.waitForSelector(`tr[data-agent=${name}]`);
  }
  const leadRules = await page.textContent('tr[data-agent=lead]');
  if (!leadRules.includes('ask file.create')) throw new Error(`the lead's rules show: ${leadRules}`);
  step = 'the tools the agents form suggests are accepted';
  const suggested = await page.getAttribute('#new-agent input[name=tools]', 'placeholder');
  await page.fill('#new-agent input[name=name]', 'reader');
  await page.fill('#new-agent input[name=tools]', suggested);
  await page.click('#new-agent button');
  await page.waitForSelector('tr[data-agent=reader]');
  await shot('02-agents');

  step = 'create a task';
  await page.click('a[data-nav=tasks]');
  await page.fill('#new-task textarea[name=description]', 'Greet the world in hello.txt');
  await page.click('#new-task button');
  await page.waitForSelector('#task-head [data-status=pending]');
  // Set once: a reload would lose it.
  await page.evaluate(() => { window.__notReloaded = true; });

  step = 'plan it and answer the planner in the form';
  await page.click('[data-action=PlanTask]');
  await page.waitForSelector('#answers input[name=a0]');
  await page.waitForSelector('#needs-you');
  await shot('03-questions');
  await page.fill('#answers input[name=a0]', 'Hello');
  await page.click('#answers button');

  step = 'a second round of questions: the first stays, answered, above the new form';
  await page.waitForSelector('#answers >> text=Loud or quiet?');
  await page.waitForSelector('#task-head li >> text=Which greeting?');
  const earlier = await page.textContent('#task-head li:has-text("Which greeting?")');
  if (!earlier.includes('Hello')) throw new Error(`round 1 lost its answer: ${earlier}`);
  if (await page.$('#answers input[name=a1]')) throw new Error('round 1 is asked again');
  await shot('03b-second-round');
  await page.fill('#answers input[name=a0]', 'Quiet');
  await page.click('#answers button');
  await page.waitForSelector('#start select[name=agent]');

  step = 'start it and see its tool calls live';
  await page.selectOption('#start select[name=agent]', 'lead');
  await page.click('#start button');

  step = 'its file.create waits: approve it for the rest of the task from its card';
  await page.waitForSelector('#approvals [data-approval]');
  const card = await page.textContent('#approvals [data-approval]');
  if (!card.includes('file.create') || !card.includes('hello.txt') || !card.includes("ask file.create")) {
    throw new Error(`the approval card shows: ${card}`);
  }
  await page.waitForSelector('#timeline li[data-kind=approval_requested]');
  await shot('03c-approval');
  await page.click('#approvals [data-answer="Approve for the task"]');
  await page.waitForSelector('#timeline li[data-kind=approval_answered]');
  await page.waitForSelector('#task-rules');
  await page.waitForSelector('#timeline li[data-kind=tool_executed]');
  await page.waitForSelector('#timeline li[data-kind=agent_handoff_started]');
  await page.waitForSelector('#task-head [data-status=completed]');
  await page.waitForSelector('#timeline li[data-kind=completion_report_submitted]');
  await page.waitForSelector('#timeline li.denied');
  await page.waitForSelector('#runs li[data-run] li[data-run]');
  if (!(await page.evaluate(() => window.__notReloaded))) throw new Error('the page was reloaded');
  const tree = await page.textContent('#runs');
  if (!tree.includes('lead') || !tree.includes('helper')) throw new Error(`the run tree shows: ${tree}`);
  // What it spent: every model call of the tree, counted and marked unpriced
  // (no price table here), shown without a reload.
  await page.waitForFunction(() => /[1-9]\d* model calls/.test(document.getElementById('spent')?.textContent || ''));
  // At the end, the line is the task's final spending, not a figure of
  // some moment before.
  await page.waitForSelector('span.live[data-state=ended]');
  const calls = await page.evaluate(async () => {
    const response = await fetch('/api/GetTask', {
      method: 'POST',
      headers: { authorization: `Bearer ${sessionStorage.getItem('chorus.key')}`, 'content-type': 'application/json' },
      body: JSON.stringify({ taskId: location.hash.split('/')[2] }),
    });
    return Number((await response.json()).usage.modelCalls);
  });
  await page.waitForFunction((n) => (document.getElementById('spent')?.textContent || '').includes(` ${n} model calls`), calls);
  const spent = await page.textContent('#spent');
  if (!spent.includes('unpriced') || !spent.includes('limits: none')) throw new Error(`the task's spending shows: ${spent}`);
  await shot('04-completed');

  step = 'read the task\'s change and land it';
  await page.waitForSelector('#branch[data-state=open]');
  await page.waitForSelector('#change-files details[data-path="hello.txt"] .patch .add');
  const diff = await page.textContent('#change-files');
  if (!diff.includes('+hello') || !diff.includes('uncommitted')) throw new Error(`the change shows: ${diff}`);
  await shot('04b-change');
  await page.selectOption('#land select[name=mode]', 'LAND_MODE_SQUASH');
  await page.click('#land button');
  await page.waitForSelector('#branch[data-state=landed]');
  await page.waitForSelector('#timeline li[data-kind=task_landed]');
  if (await page.$('#land')) throw new Error('a landed task is offered landing again');

  step = 'cancel another task';
  await page.click('a[data-nav=tasks]');
  await page.fill('#new-task textarea[name=description]', 'Something to cancel');
  await page.click('#new-task button');
  await page.waitForSelector('#task-head [data-status=pending]');
  await page.click('[data-action=CancelTask]');
  await page.waitForSelector('#task-head [data-status=canceled]');
  await page.click('a[data-nav=tasks]');
  await page.waitForSelector('#task-rows [data-status=canceled]');
  await page.waitForSelector('#task-rows [data-status=completed]');
  await shot('05-tasks');

  step = 'make a viewer key';
  await page.click('a[data-nav=keys]');
  await page.fill('#new-key input[name=name]', 'watcher');
  await page.selectOption('#new-key select[name=role]', 'ROLE_VIEWER');
  await page.click('#new-key button');
  await page.waitForSelector('#secret');
  const secret = (await page.textContent('#secret .mono')).trim();

  step = 'a viewer sees no write action';
  await page.click('#sign-out');
  await page.fill('input[name=key]', secret);
  await page.click('#sign-in button');
  await page.waitForSelector('#task-rows [data-status=completed]');
  if (await page.$('#new-task')) throw new Error('a viewer is offered task creation');
  if (await page.isVisible('a[data-nav=keys]')) throw new Error('a viewer is offered the API keys page');
  await page.click('#task-rows tr:has([data-status=completed]) a');
  await page.waitForSelector('#timeline li[data-kind=tool_executed]');
  if (await page.$('#actions button, #actions form')) throw new Error('a viewer is offered task actions');
  await page.click('a[data-nav=workspaces]');
  await page.waitForSelector('tr[data-workspace=demo]');
  if (await page.$('#new-workspace')) throw new Error('a viewer is offered workspace creation');
  await shot('06-viewer');

  if (consoleErrors.length) throw new Error(`the page threw: ${consoleErrors.join('\n')}`);
  console.log('ok');
} catch (error) {
  console.error(`step "${step}" failed: ${error.message}`);
  if (consoleErrors.length) console.error(`page errors: ${consoleErrors.join('\n')}`);
  if (page) await page.screenshot({ path: `${artifacts}/failed.png`, fullPage: true }).catch(() => {});
  process.exitCode = 1;
} finally {
  await browser.close();
}
