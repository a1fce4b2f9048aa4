// The left column: projects (with the folder browser that opens one) and the sessions of the
// open project, with their live status and a mark where a question waits.
import { api, problemText } from '/api.js';
import { h, byId, pressable, toast } from '/dom.js';

export function renderProjects(projects, current, { onSelect, onForget }) {
  byId('projects').replaceChildren(...projects.map((project) => h('li', {
    className: project.id === current?.id ? 'active' : '', title: project.path, dataset: { id: project.id },
    ...pressable(() => onSelect(project)),
  },
  h('span', { className: 'name' }, project.name),
  h('span', { className: 'actions' },
    h('button', { type: 'button', className: 'icon forget', title: 'Forget this project (the folder stays)',
      'aria-label': 'Forget this project', onclick: (event) => { event.stopPropagation(); onForget(project); } }, '×')))));
  if (!projects.length) byId('projects').append(h('li', { className: 'empty' }, 'No project yet'));
}

// `more`: Sessions|list has older sessions; the last row reads them with onMore. A session run
// by a schedule has a clock mark (`schedules`: the project's, for the schedule's name); one that
// works in a git worktree has a branch mark. A sub-agent's session (`parent`: the session that
// handed it a task) is shown under its parent, indented and marked; one whose parent is not in
// the list keeps its place, still marked. The list itself (its order, its pages) is unchanged.
// A fork says it is one, and of which session while that one is listed: its name, which ends
// in "(fork)", is often cut before that.
function forkMark(original) {
  const title = original ? `A fork of “${original.name}”: its messages up to the fork, then its own` : 'A fork of another session';
  return h('span', { className: 'fork-mark', role: 'img', title, 'aria-label': title }, '⑂');
}

export function renderSessions(sessions, current, questions, { onSelect, onRename, onRemove, more, onMore, schedules = [] }) {
  const byIdMap = new Map(sessions.map((session) => [session.id, session]));
  byId('sessions').replaceChildren(...nested(sessions, byIdMap).map(({ session, depth }) => {
    const waiting = questions.count(session.id);
    const name = h('span', { className: 'name' }, session.name);
    const parent = session.parent ? byIdMap.get(session.parent) : null;
    const item = h('li', {
      className: `${session.id === current?.id ? 'active' : ''}${depth ? ` child depth-${Math.min(depth, 3)}` : ''}`.trim(),
      dataset: { id: session.id, status: session.status, ...(session.parent ? { parent: session.parent } : {}) },
      ...pressable(() => onSelect(session)),
    },
    depth ? h('span', { className: 'child-mark', 'aria-hidden': 'true' }, '↳') : null,
    h('span', { className: `dot ${session.status}`, title: session.status }),
    name,
    session.parent ? h('span', { className: 'subagent-label',
      title: parent ? `A sub-agent: it works on a task that “${parent.name}” handed it` : 'A sub-agent: it works on a task that another session handed it' },
    'sub-agent') : null,
    session.forkof ? forkMark(byIdMap.get(session.forkof)) : null,
    session.schedule ? scheduledMark(schedules.find((s) => s.id === session.schedule)) : null,
    session.worktree ? h('span', { className: 'worktree-mark', role: 'img', title: 'Works in a git worktree of its own',
      'aria-label': 'in a worktree' }, '⎇') : null,
    waiting ? h('span', { className: 'waiting', title: `${waiting} question${waiting > 1 ? 's' : ''} waiting` }, `? ${waiting}`) : null,
    h('span', { className: 'actions' },
      h('button', { type: 'button', className: 'icon', title: 'Rename', 'aria-label': 'Rename',
        onclick: (event) => { event.stopPropagation(); startRename(name, session, onRename); } }, '✎'),
      h('button', { type: 'button', className: 'icon remove', title: 'Remove this session', 'aria-label': 'Remove this session',
        onclick: (event) => { event.stopPropagation(); onRemove(session); } }, '×')));
    name.addEventListener('dblclick', (event) => { event.stopPropagation(); startRename(name, session, onRename); });
    return item;
  }));
  if (!sessions.length) byId('sessions').append(h('li', { className: 'empty' }, 'No session yet'));
  if (more) {
    byId('sessions').append(h('li', { className: 'more', dataset: { more: 'true' }, ...pressable(onMore) },
      h('span', { className: 'name' }, 'Older sessions…')));
  }
}

// The sessions in the list's order, each sub-agent's session right under its parent (when the
// parent is listed), with its depth.
function nested(sessions, byIdMap) {
  const children = new Map();
  const placed = (session) => session.parent && session.parent !== session.id && byIdMap.has(session.parent);
  for (const session of sessions) {
    if (!placed(session)) continue;
    if (!children.has(session.parent)) children.set(session.parent, []);
    children.get(session.parent).push(session);
  }
  const rows = [];
  const seen = new Set();
  const visit = (session, depth) => {
    if (seen.has(session.id)) return;
    seen.add(session.id);
    rows.push({ session, depth });
    for (const child of children.get(session.id) ?? []) visit(child, depth + 1);
  };
  for (const session of sessions) if (!placed(session)) visit(session, 0);
  for (const session of sessions) visit(session, 0); // a loop of parents, which the server never makes
  return rows;
}

function scheduledMark(schedule) {
  const title = schedule ? `Run by the schedule “${schedule.name}”` : 'Run by a schedule';
  return h('span', { className: 'scheduled', title, 'aria-label': title, role: 'img' });
}

function startRename(nameElement, session, onRename) {
  const input = h('input', { className: 'rename', value: session.name, maxLength: 200, 'aria-label': 'Session name' });
  let done = false;
  const finish = (save) => {
    if (done) return;
    done = true;
    const value = input.value.trim();
    input.replaceWith(nameElement);
    if (save && value && value !== session.name) onRename(session, value);
  };
  input.addEventListener('click', (event) => event.stopPropagation());
  input.addEventListener('keydown', (event) => {
    event.stopPropagation();
    if (event.key === 'Enter') finish(true);
    if (event.key === 'Escape') finish(false);
  });
  input.addEventListener('blur', () => finish(true));
  nameElement.replaceWith(input);
  input.focus();
  input.select();
}

// "New session in a worktree": the form under the Sessions heading, offered only for a project
// that is a git repository (`offer`). The session's name makes its branch, totem/<name>; the
// server's refusal (not the top folder, no commit yet, a config that names programs) is shown in
// the form. onCreate(name) creates the session and opens it (it throws the ApiError).
export class WorktreeForm {
  constructor({ onCreate }) {
    this.onCreate = onCreate;
    this.button = byId('new-worktree');
    this.form = byId('worktree-form');
    this.name = byId('worktree-name');
    this.busy = false;
    this.button.addEventListener('click', () => (this.form.hidden ? this.open() : this.close()));
    byId('worktree-cancel').addEventListener('click', () => this.close());
    this.name.addEventListener('input', () => this.hint());
    this.name.addEventListener('keydown', (event) => { if (event.key === 'Escape') this.close(); });
    this.form.addEventListener('submit', (event) => { event.preventDefault(); this.create(); });
  }

  offer(offered) {
    this.button.hidden = !offered;
    if (!offered) this.close();
  }

  open() {
    this.name.value = '';
    this.error('');
    this.hint();
    this.form.hidden = false;
    this.button.setAttribute('aria-expanded', 'true');
    this.name.focus();
  }

  close() {
    this.form.hidden = true;
    this.button.setAttribute('aria-expanded', 'false');
  }

  hint() {
    byId('worktree-branch').textContent = `It works in a folder of its own on a new branch ${branchName(this.name.value)}, `
      + 'which you merge or discard; your project folder stays as it is until you merge.';
  }

  error(text) {
    byId('worktree-error').textContent = text;
    byId('worktree-error').hidden = !text;
  }

  async create() {
    if (this.busy) return;
    this.busy = true;
    this.error('');
    try {
      await this.onCreate(this.name.value.trim());
      this.close();
    } catch (error) {
      const problem = error.problems?.find((p) => p.name === 'worktree');
      this.error(problem ? problemText({ error: problem.error }) : error.message);
    } finally {
      this.busy = false;
    }
  }
}

// The branch the server makes of a session name (worktrees.branch_name); a taken name gets -2.
function branchName(name) {
  const slug = (name.trim() || 'New session').toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '')
    .slice(0, 40).replace(/-+$/, '');
  return `totem/${slug || '<session id>'}`;
}

// The folder browser of Folders|list: places on the left, the folders of `path` on the right.
export class FolderBrowser {
  constructor({ onOpen }) {
    this.dialog = byId('folder-dialog');
    this.onOpen = onOpen;
    this.path = '';
    this.parent = null;
    this.asked = 0; // Folders|list calls made: only the latest one's answer is shown
    byId('folder-path-form').addEventListener('submit', (event) => {
      event.preventDefault();
      this.go(byId('folder-path').value.trim());
    });
    byId('folder-up').addEventListener('click', () => { if (this.parent) this.go(this.parent); });
    byId('folder-open').addEventListener('click', async () => {
      try {
        await this.onOpen(this.path);
        this.dialog.close();
      } catch (error) {
        this.error(error.message);
      }
    });
  }

  async show(start) {
    this.dialog.showModal();
    await this.go(start || '');
  }

  error(text) {
    byId('folder-error').textContent = text || '';
    byId('folder-error').hidden = !text;
  }

  // The answers of two calls can come in either order (the first listing of a slow home folder
  // after a path the person typed and went to): an answer older than the latest call is dropped,
  // and one never writes over a path the person began typing while it was on its way.
  async go(path) {
    const call = ++this.asked;
    const input = byId('folder-path');
    const typed = input.value;
    let answer;
    try {
      answer = await api('folders', { query: path ? { path } : {} });
    } catch (error) {
      if (call === this.asked) this.error(error.message);
      return;
    }
    if (call !== this.asked) return;
    this.error('');
    const { sep } = answer;
    this.path = answer.path;
    const cut = answer.path.lastIndexOf(sep);
    this.parent = answer.path === sep ? null : answer.path.slice(0, cut) || sep;
    byId('folder-up').disabled = !this.parent;
    if (input.value === typed) input.value = answer.path;
    byId('folder-chosen').textContent = answer.path;
    byId('folder-places').replaceChildren(...answer.places.map((place) => h('li', {
      title: place.path, className: place.path === answer.path ? 'active' : '', ...pressable(() => this.go(place.path)),
    }, h('span', { className: 'name' }, place.name))));
    const join = (name) => (answer.path.endsWith(sep) ? answer.path + name : answer.path + sep + name);
    const items = answer.items.map((item) => h('li', { dataset: { name: item.name }, ...pressable(() => this.go(join(item.name))) },
      h('span', { className: 'folder-icon', 'aria-hidden': 'true' }, '▸'), h('span', { className: 'name' }, item.name)));
    if (!items.length) items.push(h('li', { className: 'empty' }, 'No folders here'));
    if (answer.more) items.push(h('li', { className: 'empty' }, 'More folders are not shown; type a path above.'));
    byId('folder-items').replaceChildren(...items);
    byId('folder-items').scrollTop = 0;
  }
}

export async function forgetProject(project) {
  try {
    await api('projects_remove', { id: project.id, post: true });
    return true;
  } catch (error) {
    toast(error.message);
    return false;
  }
}
