// A task's change in the console: its branch in a line, and its commits,
// files and diffs as GetTaskChange gives them. The page's helpers (el, show,
// api, showError) come from app.js.

// A task's branch in one line, or why it has none.
export function branchText(task) {
  const b = task.branch;
  if (!b) return task.branchNote ? `No branch of its own: ${task.branchNote}` : '';
  const landed = b.landedCommit ? ` as ${b.landedCommit.slice(0, 12)} by ${b.landedBy}` : '';
  return `Branch ${b.name} from ${b.base || 'the workspace\'s HEAD'} (${b.state})${landed}`;
}

// One file's patch, its lines coloured.
function patchView({ el }, patch) {
  return el('pre', { class: 'patch' }, patch.patch.split('\n').map((line) => {
    const kind = line.startsWith('+') && !line.startsWith('+++') ? 'add'
      : line.startsWith('-') && !line.startsWith('---') ? 'del'
        : line.startsWith('@@') ? 'hunk' : '';
    return el('span', { class: kind }, `${line}\n`);
  }), patch.truncated ? el('span', { class: 'muted' }, '(cut at 1 MiB)') : null);
}

// A task's change: its commits, its files with their counts, and each
// file's diff (a page of files at a time).
export async function changeView(ui, id) {
  const { el, show, api, showError } = ui;
  const first = await api('GetTaskChange', { taskId: id });
  const files = el('div', { id: 'change-files' });
  const more = el('div', {});
  const patches = new Map();
  const render = () => show(files, (first.files || []).map((f) => {
    const counts = f.additions === undefined ? 'binary' : `+${f.additions} −${f.deletions}`;
    const patch = patches.get(f.path);
    return el('details', { class: 'file', 'data-path': f.path, open: patches.size <= 5 },
      el('summary', {}, el('span', { class: 'mono' }, `${f.status} ${f.path}`),
        f.oldPath ? el('span', { class: 'muted' }, ` (from ${f.oldPath})`) : null,
        el('span', { class: 'muted' }, ` ${counts}${f.uncommitted ? ' · uncommitted' : ''}`)),
      patch ? patchView(ui, patch) : el('p', { class: 'muted' }, 'Its diff is on a later page.'));
  }));
  const add = (page) => {
    for (const p of page.patches || []) patches.set(p.path, p);
    render();
    show(more, page.nextPageToken ? el('button', { type: 'button', id: 'more-files', onclick: async () => {
      try { add(await api('GetTaskChange', { taskId: id, pageToken: page.nextPageToken })); } catch (error) { showError(more, error); }
    } }, 'More files') : null);
  };
  add(first);
  const commits = first.commits || [];
  return el('div', { id: 'change' },
    el('p', { class: 'muted' }, `${commits.length} commit(s) · ${(first.files || []).length} file(s) against ${String(first.baseCommit || '').slice(0, 12)}`),
    commits.length ? el('ul', {}, commits.map((c) => el('li', {}, el('span', { class: 'mono' }, String(c.id).slice(0, 12)), ` ${c.summary}`,
      el('span', { class: 'muted' }, ` — ${c.author}`)))) : null,
    files, more);
}
