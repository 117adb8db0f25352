// The Chorus console: one page, no framework, no build step. Every action is
// one call of the orchestrator's API through the console's JSON gateway
// (POST /api/<Method>, streams at /api/stream/<Method>), with the API key the
// person signed in with as the bearer. What a key's role may not do is not
// shown; the API refuses it anyway.

import { branchText, changeView } from '/change.js';
import { approvalCards, parseRules, ruleText } from '/approvals.js';

const KEY = 'chorus.key';
const main = document.getElementById('main');
let me = null;            // { name, role } of the signed-in key
let page = null;          // AbortController of the page shown (its streams)

class ApiError extends Error {
  constructor(error) {
    super(`${error.code}: ${error.message}`);
    this.code = error.code;
  }
}

function headers() {
  return { authorization: `Bearer ${sessionStorage.getItem(KEY) || ''}`, 'content-type': 'application/json' };
}

async function api(method, body = {}) {
  const response = await fetch(`/api/${method}`, { method: 'POST', headers: headers(), body: JSON.stringify(body) });
  const json = await response.json();
  if (!response.ok) throw new ApiError(json.error || { code: String(response.status), message: response.statusText });
  return json;
}

// Calls a server-streaming method; `onMessage` gets each message as it
// arrives, `onOpen` is called once the server has taken the call. Resolves
// when the stream ends; rejects on an error.
async function stream(method, body, onMessage, signal, onOpen = () => {}) {
  const response = await fetch(`/api/stream/${method}`, { method: 'POST', headers: headers(), body: JSON.stringify(body), signal });
  if (!response.ok) {
    const json = await response.json().catch(() => ({ error: { code: 'UNAVAILABLE', message: response.statusText } }));
    throw new ApiError(json.error);
  }
  onOpen();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffered += value;
    let end;
    while ((end = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
      if (!line) continue;
      const message = JSON.parse(line);
      if (message.error) throw new ApiError(message.error);
      onMessage(message);
    }
  }
}

// Errors a stream may be opened again after: the orchestrator restarted or
// shed load, the network dropped (a fetch error has no code).
const PASSING = ['UNAVAILABLE', 'UNKNOWN', 'INTERNAL', 'DEADLINE_EXCEEDED', 'RESOURCE_EXHAUSTED', 'ABORTED', 'CANCELLED'];
const BACKOFF_MS = [250, 500, 1000, 2000, 4000];

function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(timer); reject(new DOMException('left the page', 'AbortError')); }, { once: true });
  });
}

// Follows a stream for as long as the page shows it: when it breaks (the
// orchestrator restarted, the network dropped) it is opened again after a
// backoff (0.25 s, doubling to 4 s), with `body()` — the request resuming
// after the last message seen — so nothing is missed or shown twice.
// `onState` hears 'live' (taken), 'retry' (with the error and the wait) and
// 'ended'; an error that no retry mends (a key refused, a task gone) rejects.
async function follow(method, body, onMessage, signal, onState) {
  let failures = 0;
  for (;;) {
    try {
      await stream(method, body(), onMessage, signal, () => { failures = 0; onState('live'); });
      onState('ended');
      return;
    } catch (error) {
      if (error.name === 'AbortError') return;
      if (error.code && !PASSING.includes(error.code)) throw error;
      const wait = BACKOFF_MS[Math.min(failures, BACKOFF_MS.length - 1)];
      failures += 1;
      onState('retry', error, wait);
      await pause(wait, signal);
    }
  }
}

// What a live indicator says of a followed stream.
function liveText(live, state, error, wait) {
  live.dataset.state = state;
  live.title = state === 'retry' ? (error.message || String(error)) : '';
  if (state === 'live') live.textContent = '● live';
  else if (state === 'retry') live.textContent = `○ reconnecting in ${(wait / 1000).toFixed(1)} s (${error.code || 'connection lost'})`;
  else live.textContent = '■ ended';
}

// el('a', {href: '#'}, 'text', child): an element; text is always text, never HTML.
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Replaces what `parent` shows; absent parts (null, false) are left out.
function show(parent, ...children) {
  parent.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

const can = {
  operate: () => me && (me.role === 'ROLE_ADMIN' || me.role === 'ROLE_OPERATOR'),
  admin: () => me && me.role === 'ROLE_ADMIN',
};

function time(ms) {
  const n = Number(ms);
  return n > 0 ? new Date(n).toLocaleString() : '';
}

function clock(ms) {
  const n = Number(ms);
  return n > 0 ? new Date(n).toLocaleTimeString() : '';
}

function duration(ms) {
  const n = Math.max(0, Number(ms));
  if (n < 1000) return `${n}ms`;
  if (n < 60000) return `${(n / 1000).toFixed(1)}s`;
  return `${Math.floor(n / 60000)}m${String(Math.floor((n % 60000) / 1000)).padStart(2, '0')}s`;
}

function badge(status) {
  return el('span', { class: `badge s-${status}`, 'data-status': status }, status);
}

function showError(where, error) {
  where.prepend(el('div', { class: 'error', role: 'alert' }, error.message || String(error)));
}

// A form whose submit runs `action`; errors are shown above it.
function form(attrs, fields, label, action) {
  const node = el('form', { class: 'inline', ...attrs }, fields, el('button', { class: 'primary', type: 'submit' }, label));
  node.addEventListener('submit', async (event) => {
    event.preventDefault();
    node.querySelectorAll('.error').forEach((e) => e.remove());
    const button = node.querySelector('button[type=submit]');
    button.disabled = true;
    try {
      await action(new FormData(node));
    } catch (error) {
      showError(node, error);
    } finally {
      button.disabled = false;
    }
  });
  return node;
}

function field(label, input) {
  return el('label', {}, label, input);
}

async function workspaces() {
  return (await api('ListWorkspaces')).workspaces;
}

function workspaceSelect(list, name = 'workspaceId', selected = '', any = false) {
  return el('select', { name },
    any ? el('option', { value: '' }, 'every workspace') : null,
    list.map((w) => el('option', { value: w.id, selected: w.id === selected }, w.name)));
}

// ---- signing in ---------------------------------------------------------

function signIn(message) {
  document.getElementById('top').hidden = true;
  const input = el('input', { type: 'password', name: 'key', autocomplete: 'off', placeholder: 'chorus_…', required: true, 'aria-label': 'API key' });
  show(main, el('div', { class: 'login' },
    el('h1', {}, 'Sign in to Chorus'),
    el('p', { class: 'muted' }, 'Paste an API key (the first admin key is the orchestrator\'s .chorus/admin.key; chorus key create makes others). It stays in this tab only.'),
    message ? el('div', { class: 'error', role: 'alert' }, message) : null,
    form({ id: 'sign-in' }, [input], 'Sign in', async (data) => {
      sessionStorage.setItem(KEY, data.get('key').trim());
      try {
        await start(true);
      } catch (error) {
        sessionStorage.removeItem(KEY);
        throw error;
      }
    })));
  input.focus();
}

async function start(fresh = false) {
  const status = await api('GetStatus');
  me = { name: status.caller ? status.caller.name : '', role: status.caller ? status.caller.role : '' };
  document.getElementById('top').hidden = false;
  document.getElementById('who').textContent = `${me.name} (${me.role.replace('ROLE_', '').toLowerCase()})`;
  document.querySelectorAll('[data-role=admin]').forEach((a) => { a.hidden = !can.admin(); });
  const here = location.hash.replace(/^#\//, '').split(/[/?]/)[0];
  const elsewhere = !here || fresh || (here === 'keys' && !can.admin());
  if (elsewhere && location.hash !== '#/tasks') location.hash = '#/tasks';
  else route();
}

document.getElementById('sign-out').addEventListener('click', () => {
  sessionStorage.removeItem(KEY);
  me = null;
  if (page) page.abort();
  signIn();
});

// ---- routing ------------------------------------------------------------

const pages = {
  tasks: tasksPage,
  task: taskPage,
  workspaces: workspacesPage,
  agents: agentsPage,
  providers: providersPage,
  keys: keysPage,
  status: statusPage,
};

async function route() {
  if (!me) return;
  if (page) page.abort();
  page = new AbortController();
  const [name, arg] = location.hash.replace(/^#\//, '').split('/');
  document.querySelectorAll('[data-nav]').forEach((a) => a.classList.toggle('active', a.dataset.nav === name || (name === 'task' && a.dataset.nav === 'tasks')));
  const render = pages[name] || tasksPage;
  show(main, el('p', { class: 'muted' }, 'Loading…'));
  try {
    await render(decodeURIComponent(arg || ''), page.signal);
  } catch (error) {
    if (error.name === 'AbortError') return;
    if (error.code === 'UNAUTHENTICATED') return signIn(error.message);
    show(main, );
    showError(main, error);
  }
}

window.addEventListener('hashchange', route);

// ---- tasks --------------------------------------------------------------

async function tasksPage(_, signal) {
  const all = await workspaces();
  const params = new URLSearchParams(location.hash.split('?')[1] || '');
  const ws = params.get('ws') || '';
  const status = params.get('status') || '';
  const names = Object.fromEntries(all.map((w) => [w.id, w.name]));
  const rows = new Map();
  const body = el('tbody', { id: 'task-rows' });
  const live = el('span', { class: 'live' });

  function row(task) {
    return el('tr', { 'data-task': task.id },
      el('td', { class: 'mono' }, el('a', { href: `#/task/${task.id}` }, task.id.slice(0, 8))),
      el('td', {}, badge(task.status)),
      el('td', {}, task.description.length > 100 ? `${task.description.slice(0, 100)}…` : task.description),
      el('td', {}, names[task.workspaceId] || ''),
      el('td', {}, task.currentAgent),
      el('td', {}, time(task.updatedMs)));
  }
  function put(task) {
    if (status && task.status !== status) {
      rows.get(task.id)?.remove();
      rows.delete(task.id);
      return;
    }
    const fresh = row(task);
    const old = rows.get(task.id);
    if (old) old.replaceWith(fresh); else body.prepend(fresh);
    rows.set(task.id, fresh);
  }

  const filters = el('form', { class: 'inline', id: 'filters' },
    field('Workspace', workspaceSelect(all, 'ws', ws, true)),
    field('Status', el('select', { name: 'status' }, ['', 'pending', 'planning', 'awaiting_input', 'planned', 'active', 'waiting', 'completed', 'failed', 'canceled']
      .map((s) => el('option', { value: s, selected: s === status }, s || 'any')))));
  filters.addEventListener('change', () => {
    const data = new FormData(filters);
    location.hash = `#/tasks?ws=${encodeURIComponent(data.get('ws'))}&status=${encodeURIComponent(data.get('status'))}`;
  });

  const create = can.operate() && all.length ? form({ id: 'new-task' }, [
    field('Workspace', workspaceSelect(all, 'workspaceId', ws || all[0].id)),
    field('Description', el('textarea', { name: 'description', required: true })),
  ], 'Create task', async (data) => {
    const task = await api('CreateTask', { workspaceId: data.get('workspaceId'), description: data.get('description'), source: { kind: 'web' } });
    location.hash = `#/task/${task.id}`;
  }) : null;

  show(main, el('h1', {}, 'Tasks ', live), filters, create,
    el('table', {}, el('thead', {}, el('tr', {}, ['Task', 'Status', 'Description', 'Workspace', 'Agent', 'Updated'].map((h) => el('th', {}, h)))), body));

  // Follow first, then list: no change between the two is missed. After a
  // break the feed resumes after the last change seen.
  let listed = false;
  let cursor = '';
  const pending = [];
  const following = follow('WatchTasks', () => ({ workspaceId: ws, afterCursor: cursor }), async (change) => {
    if (change.cursor) cursor = change.cursor;
    if (change.caughtUp) return;
    if (!listed) { pending.push(change); return; }
    await apply(change);
  }, signal, (state, error, wait) => liveText(live, state, error, wait));
  async function apply(change) {
    if (change.deleted) {
      rows.get(change.taskId)?.remove();
      rows.delete(change.taskId);
      return;
    }
    try {
      put(await api('GetTask', { taskId: change.taskId }));
    } catch (error) {
      if (error.code !== 'NOT_FOUND') throw error;
    }
  }
  let token = '';
  const tasks = [];
  do {
    const page = await api('ListTasks', { workspaceId: ws, status, pageSize: 500, pageToken: token });
    tasks.push(...page.tasks);
    token = page.nextPageToken;
  } while (token);
  for (const task of tasks) put(task);
  listed = true;
  for (const change of pending.splice(0)) await apply(change);
  following.catch((error) => {
    if (error.name === 'AbortError') return;
    live.textContent = '';
    showError(main, error);
  });
}

// The text of a timeline entry, and its class.
function describe(event, runs) {
  const d = event.data || {};
  const agent = d.agent || (runs.get(d.run_id) || {}).agent || '';
  const input = (value) => {
    if (!value || typeof value !== 'object') return '';
    for (const k of ['command', 'path', 'pattern', 'agent', 'text']) if (typeof value[k] === 'string') return value[k];
    return JSON.stringify(value).slice(0, 120);
  };
  switch (event.kind) {
    case 'task_created': return ['+', `created: ${d.description || ''}`];
    case 'status_changed': return ['●', `${d.from} → ${d.to}${d.reason ? `: ${d.reason}` : ''}`, 'status'];
    case 'planning_started': return ['…', 'the planner is planning'];
    case 'planning_completed': return ['✎', `plan: ${d.summary || ''} (${d.steps} steps, agent ${d.assigned_agent || '—'})`];
    case 'planning_questions_returned': return ['?', `the planner asks: ${(d.questions || []).map((q) => (typeof q === 'string' ? q : q.question)).join(' | ')}`];
    case 'planning_failed': return ['✗', `planning failed: ${d.reason || ''}`, 'failed'];
    case 'answers_submitted': return ['↩', 'answers submitted'];
    case 'agent_started': return ['▶', `${agent} started`];
    case 'agent_handoff_started': return ['↳', `${d.from_agent} hands off to ${agent}: ${(d.prompt || '').slice(0, 160)}`];
    case 'agent_handoff_completed': return ['↲', `${agent} handed back: ${d.outcome || ''}`];
    case 'tool_executed': return [d.status === 'ok' ? '✓' : '✗', `${agent} · ${d.tool} ${input(d.input)} · ${d.status} · ${duration(d.duration_ms || 0)}`, d.status === 'ok' ? 'tool' : 'failed', true];
    case 'tool_denied': return ['⛔', `DENIED ${d.tool} for ${agent}: ${d.reason || ''}`, 'denied', true];
    case 'agent_progress':
      if (d.kind === 'model_retry') return ['↻', `${agent}: model call retried (#${d.retry}) in ${duration(d.wait_ms || 0)}: ${d.reason || ''}`, 'failed'];
      if (d.kind === 'tool_use') return null;
      return ['│', `${agent}: ${d.kind === 'text' ? (d.text || '') : `${d.kind} ${d.tool || ''}`}`.slice(0, 300)];
    case 'comment_added': return ['💬', d.text || ''];
    case 'run_opened': case 'planner_output_submitted': case 'stage_changed': case 'planning_updated': return null;
    case 'completion_report_submitted': {
      const r = d.report || d;
      return ['■', `report (${r.status}): ${r.summary || ''}`, 'report'];
    }
    case 'agent_completed': {
      const u = d.usage || {};
      return ['✔', `${agent} finished: ${d.reason || ''} · ${u.input_tokens || 0} in / ${u.output_tokens || 0} out tokens${u.cost_usd ? ` · $${Number(u.cost_usd).toFixed(4)}` : ''}`];
    }
    case 'run_failed': case 'run_canceled': case 'run_interrupted':
      return ['✗', `${agent}: ${event.kind.replace('run_', '')} ${d.reason || ''}`, 'failed'];
    case 'budget_warning': return ['⚠', `budget: ${d.percent}% of its ${d.limit} limit (${d.spent} of ${d.limit_value})`, 'failed'];
    case 'budget_exceeded': return ['⛔', d.reason || `budget: its ${d.limit} limit was reached`, 'denied'];
    case 'budget_changed': return ['$', 'budget set'];
    case 'approval_requested': return ['?', `${agent} asks to run ${d.tool} ${input(d.input)} (rule '${d.rule}')`, 'denied', true];
    case 'approval_answered': return [String(d.outcome).startsWith('approved') ? '✓' : '⛔',
      `${d.tool} ${input(d.input)}: ${d.outcome} by ${d.by}${d.reason ? `: ${d.reason}` : ''}`, String(d.outcome).startsWith('approved') ? 'tool' : 'denied'];
    case 'branch_opened': return ['»', `worktree on ${d.branch} from ${d.base}${d.note ? ` — ${d.note}` : ''}`];
    case 'branch_kept': return ['«', `worktree removed, branch ${d.branch} kept: ${d.why || ''}`];
    case 'task_landed': return ['✔', `landed into ${d.base} as ${String(d.commit || '').slice(0, 12)} by ${d.by} (${d.mode})`, 'report'];
    case 'task_discarded': return ['✗', `change discarded by ${d.by}`, 'failed'];
    default: return ['·', event.kind, 'muted'];
  }
}

// What a task spent, and its limits, on one line.
function spentText(task) {
  const u = task.usage || {};
  const b = task.budget || {};
  const l = b.limits || {};
  const limits = [l.costUsd != null ? `$${Number(l.costUsd).toFixed(4)}` : null,
    l.tokens != null ? `${l.tokens} tokens` : null,
    l.toolCalls != null ? `${l.toolCalls} tool calls` : null].filter(Boolean);
  const unpriced = Number(u.unpricedCalls || 0) > 0 ? ` (${u.unpricedCalls} unpriced: the cost is a lower bound)` : '';
  return `Spent $${Number(u.costUsd || 0).toFixed(4)}${unpriced} · ${u.inputTokens || 0} in / ${u.outputTokens || 0} out tokens · ${u.modelCalls || 0} model calls · ${b.toolCalls || 0} tool calls — limits: ${limits.length ? limits.join(' · ') : 'none'}`;
}

function timelineItem(event, runs) {
  const described = describe(event, runs);
  if (!described) return null;
  const [icon, text, kind, details] = described;
  const d = event.data || {};
  const item = el('li', { class: kind || '', 'data-kind': event.kind, 'data-sequence': event.sequence, 'data-at': event.atMs },
    el('span', { class: 'muted' }, clock(event.atMs)), el('span', {}, icon),
    details ? el('details', {}, el('summary', {}, text),
      d.input !== undefined ? el('pre', {}, `input: ${JSON.stringify(d.input, null, 1)}`) : null,
      d.output_excerpt ? el('pre', {}, `output: ${d.output_excerpt}`) : null) : el('span', {}, text));
  return item;
}

function runTree(runs) {
  const children = (parent) => runs.filter((r) => (r.parentRunId || '') === parent);
  const list = (parent) => el('ul', { class: 'tree' }, children(parent).map((run) => {
    const u = run.usage || {};
    const end = Number(run.finishedMs) || Date.now();
    return el('li', { 'data-run': run.id },
      el('div', { class: 'run' },
        el('strong', {}, run.agent), badge(run.state), el('span', {}, duration(end - Number(run.startedMs))),
        el('span', { class: 'muted' }, `${u.inputTokens || 0} in / ${u.outputTokens || 0} out tokens`),
        u.costUsd ? el('span', { class: 'muted' }, `$${Number(u.costUsd).toFixed(4)}`) : null,
        run.endReason ? el('span', { class: 'muted' }, run.endReason) : null),
      children(run.id).length ? list(run.id) : null);
  }));
  return list('');
}

const NEXT = {
  awaiting_input: 'Answer the planner\'s questions below.',
  planned: 'Start it: choose an agent and press Start.',
  waiting: 'Start it again, or cancel it.',
};

async function taskPage(id, signal) {
  const task = await api('GetTask', { taskId: id });
  const agents = (await api('ListAgents', { workspaceId: task.workspaceId })).agents.filter((a) => a.kind !== 'AGENT_KIND_INTERNAL');
  const head = el('div', { id: 'task-head' });
  const tree = el('div', { id: 'runs' });
  const timeline = el('ol', { class: 'timeline', id: 'timeline' });
  const live = el('span', { class: 'live' });
  const runs = new Map();

  async function refreshRuns() {
    const list = (await api('ListRuns', { taskId: id })).runs;
    for (const run of list) runs.set(run.id, run);
    show(tree, list.length ? runTree(list) : el('p', { class: 'muted' }, 'No run yet.'));
  }

  function renderHead(task) {
    const planning = task.planning || {};
    const actions = el('div', { class: 'inline', id: 'actions' });
    const act = (label, method, body, cls, after) => el('button', {
      type: 'button', class: cls || '', 'data-action': method,
      onclick: async (event) => {
        event.target.disabled = true;
        try { await api(method, body()); if (after) await after(); } catch (error) { showError(head, error); } finally { event.target.disabled = false; }
      },
    }, label);
    // A landing or discarding comes after the task ended, its history's
    // stream with it: what it recorded is read, and the head again.
    const afterward = async () => { renderHead(await api('GetTask', { taskId: id })); await catchUp(); };
    if (can.operate()) {
      if (task.status === 'pending' || task.status === 'planned') actions.append(act('Plan', 'PlanTask', () => ({ taskId: id })));
      if (task.status === 'planned' || task.status === 'waiting') {
        actions.append(form({ id: 'start' }, [field('Agent', el('select', { name: 'agent' },
          agents.map((a) => el('option', { value: a.name, selected: a.name === planning.assignedAgent }, a.name))))], 'Start', async (data) => {
          await api('StartTask', { taskId: id, agent: data.get('agent') });
        }));
      }
      if (!['completed', 'failed', 'canceled'].includes(task.status)) {
        actions.append(act('Cancel', 'CancelTask', () => ({ taskId: id, reason: 'canceled from the console' }), 'danger'));
      }
    }
    const branch = task.branch;
    if (can.operate() && branch && ['open', 'kept'].includes(branch.state) && !branch.landedCommit
      && !['active', 'planning'].includes(task.status)) {
      actions.append(form({ id: 'land' }, [field('Land as', el('select', { name: 'mode' },
        [['LAND_MODE_UNSPECIFIED', 'the workspace\'s way'], ['LAND_MODE_FAST_FORWARD', 'fast-forward'],
          ['LAND_MODE_MERGE', 'merge'], ['LAND_MODE_SQUASH', 'squash']].map(([value, label]) => el('option', { value }, label))))],
      'Land', async (data) => {
        await api('LandTask', { taskId: id, mode: data.get('mode') });
        await afterward();
      }));
      actions.append(act('Discard', 'DiscardTask', () => ({ taskId: id }), 'danger', afterward));
    }
    if (can.admin() && ['completed', 'failed', 'canceled'].includes(task.status)) {
      actions.append(el('button', { type: 'button', class: 'danger', 'data-action': 'DeleteTask', onclick: async () => {
        try { await api('DeleteTask', { taskId: id }); location.hash = '#/tasks'; } catch (error) { showError(head, error); }
      } }, 'Delete'));
    }
    // Every round of questions stays; answers go to the latest round.
    const asked = planning.questions || [];
    const round = Math.max(0, ...asked.map((q) => q.round || 1));
    const open = asked.filter((q) => (q.round || 1) === round);
    const answered = (list) => el('ol', {}, list.map((q) => el('li', {}, q.question,
      el('span', { class: 'muted' }, ` → ${q.answer ?? '(not answered)'}`))));
    const questions = task.status === 'awaiting_input' && can.operate()
      ? el('div', {}, answered(asked.filter((q) => (q.round || 1) !== round)),
        form({ id: 'answers' }, open.map((q, i) => field(`${i + 1}. ${q.question}`,
          el('input', { name: `a${i}`, value: q.answer || '', required: true, size: 60 }))), 'Submit answers', async (data) => {
          await api('SubmitAnswers', { taskId: id, answers: open.map((_, i) => data.get(`a${i}`)) });
        }))
      : answered(asked);
    show(head, 
      el('h1', {}, task.description.split('\n')[0].slice(0, 140), ' ', badge(task.status)),
      el('p', { class: 'muted mono' }, `${task.id} · updated ${time(task.updatedMs)}${task.currentAgent ? ` · agent ${task.currentAgent}` : ''}`),
      task.statusReason ? el('p', {}, task.statusReason) : null,
      el('p', { class: 'muted', id: 'spent' }, spentText(task)),
      branchText(task) ? el('p', { class: 'muted', id: 'branch', 'data-state': task.branch ? task.branch.state : 'none' }, branchText(task)) : null,
      NEXT[task.status] ? el('div', { class: 'needs', id: 'needs-you' }, el('strong', {}, 'Needs you: '), NEXT[task.status]) : null,
      approvalCards({ el, api, showError }, task, can.operate(), afterward),
      actions,
      planning.summary ? el('div', {}, el('h2', {}, 'Plan'), el('p', {}, planning.summary),
        el('ol', {}, (planning.plan || []).map((s) => el('li', {}, s))),
        (planning.acceptanceCriteria || []).length ? el('p', { class: 'muted' }, `Done when: ${planning.acceptanceCriteria.join('; ')}`) : null,
        planning.assignedAgent ? el('p', { class: 'muted' }, `Agent: ${planning.assignedAgent}`) : null) : null,
      (planning.questions || []).length ? el('div', {}, el('h2', {}, 'Questions'), questions) : null,
      changeSection);
    // The change is read again when the task settles or a person asks.
    const b = task.branch;
    if (b && ['open', 'kept'].includes(b.state)) {
      const settledNow = !['active', 'planning'].includes(task.status);
      if (settledNow && changeFor !== task.updatedMs) { changeFor = task.updatedMs; loadChange(); }
      if (!settledNow && !changeSection.firstChild) {
        show(changeSection, el('h2', {}, 'Change'), el('button', { type: 'button', id: 'load-change', onclick: loadChange }, 'Show the change so far'));
      }
    } else {
      show(changeSection);
    }
  }
  const changeSection = el('section', { id: 'change-section' });
  let changeFor = null;
  async function loadChange() {
    try { show(changeSection, el('h2', {}, 'Change'), await changeView({ el, show, api, showError }, id)); } catch (error) { show(changeSection); showError(changeSection, error); }
  }

  renderHead(task);
  await refreshRuns();
  show(main, head, el('div', { class: 'grid2' },
    el('section', {}, el('h2', {}, 'History ', live), timeline),
    el('section', {}, el('h2', {}, 'Runs'), tree)));

  // Events arrive faster than a person reads: they are added once per frame,
  // rows built for at most FRAME_MS a frame, so a long history never blocks
  // the page (a task over 50 ms is a long task; a frame is 16.7 ms).
  const FRAME_MS = 8;
  let queue = [];
  let taken = 0;
  let scheduled = false;
  let refreshTask = false;
  const HEAD_MS = 500;
  let headAt = 0;
  let headTimer = null;
  let refreshTree = false;
  function flush() {
    scheduled = false;
    const start = performance.now();
    const fragment = document.createDocumentFragment();
    while (taken < queue.length && performance.now() - start < FRAME_MS) {
      const item = timelineItem(queue[taken++], runs);
      if (item) fragment.append(item);
    }
    if (taken === queue.length) { queue = []; taken = 0; } else { scheduled = true; requestAnimationFrame(flush); }
    timeline.append(fragment);
    if (refreshTask && !headTimer) {
      refreshTask = false;
      // At most twice a second, the last change always shown.
      const due = Math.max(0, headAt + HEAD_MS - performance.now());
      headTimer = setTimeout(() => {
        headTimer = null;
        headAt = performance.now();
        api('GetTask', { taskId: id }).then(renderHead).catch((e) => showError(head, e));
      }, due);
    }
    if (refreshTree) { refreshTree = false; refreshRuns().catch((e) => showError(tree, e)); }
  }
  const runKinds = ['agent_started', 'agent_completed', 'agent_handoff_started', 'agent_handoff_completed', 'run_failed', 'run_canceled', 'run_interrupted', 'run_opened'];
  // After a break the history resumes after the last event seen, and the
  // task and its runs are read again (what changed meanwhile shows at once).
  let lastSequence = 0;
  let broken = false;
  const refreshAll = () => {
    api('GetTask', { taskId: id }).then(renderHead).catch((e) => showError(head, e));
    refreshRuns().catch((e) => showError(tree, e));
  };
  // Events recorded after the stream ended (a landing), read once.
  async function catchUp() {
    const { events } = await api('GetHistory', { taskId: id, afterSequence: lastSequence, limit: 200 });
    for (const event of events || []) {
      if (Number(event.sequence) <= lastSequence) continue;
      lastSequence = Number(event.sequence);
      queue.push(event);
    }
    if (!scheduled) { scheduled = true; requestAnimationFrame(flush); }
  }
  follow('WatchTask', () => ({ taskId: id, afterSequence: lastSequence }), (event) => {
    if (Number(event.sequence) <= lastSequence) return;
    lastSequence = Math.max(lastSequence, Number(event.sequence));
    queue.push(event);
    // Model calls change what it spent with no event of their own: any
    // event of a run refreshes the head (once a frame at most).
    refreshTask = true;
    if (runKinds.includes(event.kind)) refreshTree = true;
    if (!scheduled) { scheduled = true; requestAnimationFrame(flush); }
  }, signal, (state, error, wait) => {
    liveText(live, state, error, wait);
    if (state === 'retry') broken = true;
    if (state === 'live' && broken) { broken = false; refreshAll(); }
    // Over: its last calls are recorded; what it spent is final.
    if (state === 'ended') refreshAll();
  }).catch((error) => {
    if (error.name === 'AbortError') return;
    live.textContent = '';
    showError(main, error);
  });
}

// ---- workspaces, agents, providers, keys, status ----------------------------

async function workspacesPage() {
  const list = await workspaces();
  const create = can.admin() ? form({ id: 'new-workspace' }, [
    field('Name', el('input', { name: 'name', required: true })),
    field('Root (absolute path)', el('input', { name: 'root', required: true, size: 40 })),
  ], 'Create workspace', async (data) => {
    const w = await api('CreateWorkspace', { name: data.get('name'), root: data.get('root') });
    route();
    for (const warning of w.warnings || []) showError(main, new Error(`Warning: ${warning}`));
  }) : null;
  show(main, el('h1', {}, 'Workspaces'), create, el('table', {},
    el('thead', {}, el('tr', {}, ['Name', 'Root', 'System provider', 'Warnings', ''].map((h) => el('th', {}, h)))),
    el('tbody', {}, list.map((w) => el('tr', { 'data-workspace': w.name },
      el('td', {}, w.name), el('td', { class: 'mono' }, w.root), el('td', {}, w.systemProvider || '—'),
      el('td', {}, (w.warnings || []).join(' ')),
      el('td', {}, el('a', { href: `#/agents/${w.id}` }, 'agents'), ' · ', el('a', { href: `#/providers/${w.id}` }, 'providers'), ' · ',
        el('a', { href: `#/tasks?ws=${w.id}` }, 'tasks')))))));
}

async function chooseWorkspace(kind, id) {
  const list = await workspaces();
  const chosen = id || (list[0] && list[0].id) || '';
  const picker = el('form', { class: 'inline' }, field('Workspace', workspaceSelect(list, 'ws', chosen)));
  picker.addEventListener('change', () => { location.hash = `#/${kind}/${new FormData(picker).get('ws')}`; });
  return { chosen, picker, list };
}

async function agentsPage(id) {
  const { chosen, picker, list } = await chooseWorkspace('agents', id);
  if (!chosen) { show(main, el('h1', {}, 'Agents'), el('p', {}, 'Create a workspace first.')); return; }
  const agents = (await api('ListAgents', { workspaceId: chosen })).agents;
  const providers = (await api('ListProviders', { workspaceId: chosen })).providers;
  const ws = list.find((w) => w.id === chosen);
  const create = can.admin() ? form({ id: 'new-agent' }, [
    field('Name', el('input', { name: 'name', required: true })),
    field('Allowed tools (comma-separated; @researcher, @developer, @reviewer too)', el('input', { name: 'tools', size: 40, placeholder: '@researcher,file.write' })),
    field('Provider', el('select', { name: 'provider' }, el('option', { value: '' }, `system (${ws.systemProvider || 'none'})`), providers.map((p) => el('option', { value: p.name }, p.name)))),
    field('Instructions', el('textarea', { name: 'instructions' })),
    field('Approval rules, one a line (ask git.push · allow bash command=cargo test · deny file.* path=deploy/**)',
      el('textarea', { name: 'rules', rows: 3 })),
  ], 'Create agent', async (data) => {
    await api('CreateAgent', {
      workspaceId: chosen, name: data.get('name'), provider: data.get('provider'), instructions: data.get('instructions'),
      allowedTools: data.get('tools').split(',').map((t) => t.trim()).filter(Boolean),
      approvalRules: parseRules(data.get('rules') || ''),
    });
    route();
  }) : null;
  show(main, el('h1', {}, 'Agents'), picker, create, el('table', {},
    el('thead', {}, el('tr', {}, ['Name', 'Kind', 'Provider', 'Allowed tools', 'Granted tools', 'Egress', 'Approval rules'].map((h) => el('th', {}, h)))),
    el('tbody', {}, agents.map((a) => el('tr', { 'data-agent': a.name },
      el('td', {}, a.name), el('td', {}, a.kind === 'AGENT_KIND_INTERNAL' ? 'internal' : 'user'), el('td', {}, a.provider || '(system)'),
      el('td', { class: 'mono' }, (a.allowedTools || []).join(', ')), el('td', { class: 'mono' }, (a.grantedTools || []).join(', ')),
      el('td', { class: 'mono' }, (a.egress || []).join(', ')),
      el('td', { class: 'mono' }, (a.approvalRules || []).map(ruleText).join('; ')))))));
}

async function providersPage(id) {
  const { chosen, picker, list } = await chooseWorkspace('providers', id);
  if (!chosen) { show(main, el('h1', {}, 'Providers'), el('p', {}, 'Create a workspace first.')); return; }
  const current = list.find((w) => w.id === chosen).systemProvider || '';
  const providers = (await api('ListProviders', { workspaceId: chosen })).providers;
  const create = can.admin() ? form({ id: 'new-provider' }, [
    field('Name', el('input', { name: 'name', required: true })),
    field('Kind', el('select', { name: 'kind' }, [['PROVIDER_KIND_OPENAI_COMPATIBLE', 'OpenAI-compatible API'], ['PROVIDER_KIND_CLAUDE_CODE', 'Claude Code'], ['PROVIDER_KIND_OPENCODE', 'OpenCode'], ['PROVIDER_KIND_A2A', 'Remote A2A agent']]
      .map(([v, t]) => el('option', { value: v }, t)))),
    field('Base URL', el('input', { name: 'baseUrl', size: 30 })),
    field('Model', el('input', { name: 'model' })),
    field('API key (write-only: the key, env:NAME or file:/path)', el('input', { name: 'apiKey', type: 'password', autocomplete: 'off' })),
    field('CLI agents reach their tools by', transportSelect('')),
  ], 'Create provider', async (data) => {
    await api('CreateProvider', { workspaceId: chosen, name: data.get('name'), kind: data.get('kind'), baseUrl: data.get('baseUrl'), model: data.get('model'), apiKey: data.get('apiKey'), toolTransport: data.get('toolTransport') });
    route();
  }) : null;
  // A CLI provider's transport, changed in place (admins).
  const transport = (p) => {
    if (!CLI_KINDS.includes(p.kind)) return '—';
    if (!can.admin()) return TRANSPORTS[p.toolTransport] || p.toolTransport;
    return form({ class: 'transport', 'data-transport': p.toolTransport }, [transportSelect(p.toolTransport)], 'Set', async (data) => {
      await api('UpdateProvider', { workspaceId: chosen, name: p.name, toolTransport: data.get('toolTransport') });
      route();
    });
  };
  const system = can.admin() ? form({ id: 'system-provider', 'data-current': current }, [field('The planner runs on', el('select', { name: 'provider' },
    el('option', { value: '' }, '(none)'), providers.map((p) => el('option', { value: p.name, selected: p.name === current }, p.name))))], 'Set system provider', async (data) => {
    await api('UpdateWorkspace', { id: chosen, systemProvider: data.get('provider') });
    route();
  }) : null;
  show(main, el('h1', {}, 'Providers'), picker, create, system, el('table', {},
    el('thead', {}, el('tr', {}, ['Name', 'Kind', 'Base URL', 'Model', 'API key', 'Tools reached by'].map((h) => el('th', {}, h)))),
    el('tbody', {}, providers.map((p) => el('tr', { 'data-provider': p.name },
      el('td', {}, p.name), el('td', {}, p.kind.replace('PROVIDER_KIND_', '').toLowerCase()), el('td', { class: 'mono' }, p.baseUrl),
      el('td', {}, p.model), el('td', {}, p.apiKeySet ? `set (${p.apiKeySource})` : 'none'),
      el('td', {}, transport(p)))))));
}

// How a CLI agent reaches its tools (providers' toolTransport).
const TRANSPORTS = {
  TOOL_TRANSPORT_MCP: 'MCP (native tools, no shell)',
  TOOL_TRANSPORT_SHELL: 'shell (chorus-tools through Bash)',
};
const CLI_KINDS = ['PROVIDER_KIND_CLAUDE_CODE', 'PROVIDER_KIND_OPENCODE'];

function transportSelect(current) {
  return el('select', { name: 'toolTransport' }, Object.entries(TRANSPORTS)
    .map(([value, text]) => el('option', { value, selected: value === (current || 'TOOL_TRANSPORT_MCP') }, text)));
}

async function keysPage() {
  const keys = (await api('ListApiKeys', { includeRevoked: true })).keys;
  const create = form({ id: 'new-key' }, [
    field('Name', el('input', { name: 'name', required: true })),
    field('Role', el('select', { name: 'role' }, ['ROLE_VIEWER', 'ROLE_OPERATOR', 'ROLE_ADMIN'].map((r) => el('option', { value: r }, r.replace('ROLE_', '').toLowerCase())))),
  ], 'Create key', async (data) => {
    const created = await api('CreateApiKey', { name: data.get('name'), role: data.get('role') });
    await keysPage();
    main.insertBefore(el('div', { class: 'notice', id: 'secret' }, el('strong', {}, 'Shown once — copy it now: '), el('span', { class: 'mono' }, created.secret)), main.children[1]);
  });
  show(main, el('h1', {}, 'API keys'), create, el('table', {},
    el('thead', {}, el('tr', {}, ['Id', 'Name', 'Role', 'Created', 'Revoked', ''].map((h) => el('th', {}, h)))),
    el('tbody', {}, keys.map((k) => el('tr', { 'data-key': k.name },
      el('td', { class: 'mono' }, k.id), el('td', {}, k.name), el('td', {}, k.role.replace('ROLE_', '').toLowerCase()),
      el('td', {}, time(k.createdMs)), el('td', {}, time(k.revokedMs)),
      el('td', {}, Number(k.revokedMs) ? '' : el('button', { type: 'button', class: 'danger', onclick: async () => {
        try { await api('RevokeApiKey', { id: k.id }); route(); } catch (error) { showError(main, error); }
      } }, 'Revoke')))))));
}

async function statusPage() {
  const s = await api('GetStatus');
  const sandbox = s.sandbox || {};
  const facts = [['Version', s.version], ['Replica', s.replica], ['Sandbox', sandbox.state], ['Tier', sandbox.tier],
    ['Why this tier', sandbox.tierReason], ['Runs as', sandbox.identity], ['Limits', sandbox.limits],
    ['Problems', (sandbox.problems || []).join('; ')], ['Embedded tool-exec', String(s.embeddedToolExec)], ['Live runs', s.liveRuns]];
  const replicas = (s.replicas || []).map((r) => el('tr', {},
    el('td', {}, r.id), el('td', {}, r.live ? 'yes' : 'no'), el('td', {}, time(r.startedMs)),
    el('td', {}, time(r.heartbeatMs)), el('td', {}, time(r.leaseExpiresMs)), el('td', {}, time(r.stoppedMs))));
  show(main, 
    el('h1', {}, 'Status'),
    el('table', {}, el('tbody', {}, facts.map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', { 'data-field': k }, v ?? ''))))),
    el('h2', {}, 'Replicas'),
    el('table', {},
      el('thead', {}, el('tr', {}, ['Replica', 'Live', 'Started', 'Heartbeat', 'Lease until', 'Stopped'].map((h) => el('th', {}, h)))),
      el('tbody', {}, replicas)));
}

// ---- start ----------------------------------------------------------------

if (sessionStorage.getItem(KEY)) {
  start().catch((error) => signIn(error.message));
} else {
  signIn();
}
