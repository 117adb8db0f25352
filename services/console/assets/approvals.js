// Calls that wait for a person's approval, in the console: a card per call
// with what it would do (its tool and arguments, whose rule asked, until
// when), and Approve, Approve for the task, Deny with a reason. The page's
// helpers (el, api, showError) come from app.js.

// A rule as people write it: `ask git.push`, `deny file.* path=deploy/**`.
export function ruleText(r) {
  const cond = ['command', 'path', 'remote', 'host'].filter((k) => r[k]).map((k) => ` ${k}=${r[k]}`).join('');
  return `${r.decision} ${r.tool}${cond}${r.deadlineSeconds ? ` deadline=${r.deadlineSeconds}` : ''}`;
}

// Rules written one a line, `DECISION TOOL [command=..|path=..|remote=..|host=..]
// [deadline=SECONDS]`, as the CLI's --rule takes them; the server checks them.
export function parseRules(text) {
  return text.split('\n').map((line) => line.trim()).filter(Boolean).map((line) => {
    const deadline = line.match(/\s+deadline=(\d+)\s*$/);
    const rest = deadline ? line.slice(0, deadline.index) : line;
    const [decision, tool, ...more] = rest.split(/\s+/);
    const rule = { decision: decision || '', tool: tool || '' };
    if (deadline) rule.deadlineSeconds = Number(deadline[1]);
    const condition = more.join(' ');
    const eq = condition.indexOf('=');
    if (eq > 0) rule[condition.slice(0, eq)] = condition.slice(eq + 1);
    return rule;
  });
}

// The cards of a task's waiting calls (null when none wait); `after` runs
// once an answer was taken. `operate`: whether the viewer may answer.
export function approvalCards(ui, task, operate, after) {
  const { el, api, showError } = ui;
  const waiting = task.waitingApprovals || [];
  const approved = task.taskRules || [];
  if (!waiting.length && !approved.length) return null;
  const section = el('section', { id: 'approvals' });
  const answer = async (button, body) => {
    button.disabled = true;
    try {
      await api('AnswerApproval', { taskId: task.id, ...body });
      await after();
    } catch (error) { showError(section, error); } finally { button.disabled = false; }
  };
  for (const a of waiting) {
    const reason = el('input', { name: 'reason', placeholder: 'why not (the agent reads it)', size: 40 });
    const button = (label, cls, body) => el('button', {
      type: 'button', class: cls, 'data-answer': label,
      onclick: (event) => answer(event.target, typeof body === 'function' ? body() : body),
    }, label);
    section.append(el('div', { class: 'needs approval', 'data-approval': a.id },
      el('strong', {}, 'Needs you: '), `${a.agent} asks to run `, el('code', {}, a.tool),
      el('span', { class: 'muted' }, ` · rule '${a.rule}'${a.ruleAgent && a.ruleAgent !== a.agent ? ` of ${a.ruleAgent}` : ''} · until ${new Date(Number(a.deadlineMs)).toLocaleTimeString()}`),
      el('pre', { class: 'arguments' }, JSON.stringify(a.arguments || {}, null, 2)),
      operate ? el('div', { class: 'inline' },
        button('Approve', '', { approvalId: a.id, approve: true }),
        button('Approve for the task', '', { approvalId: a.id, approve: true, forTask: true }),
        reason,
        button('Deny', 'danger', () => ({ approvalId: a.id, approve: false, reason: reason.value }))) : null));
  }
  if (approved.length) {
    section.append(el('p', { class: 'muted', id: 'task-rules' }, `Approved for this task: ${approved.map(ruleText).join('; ')}`));
  }
  return section;
}
