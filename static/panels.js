// The right column: the session's task list, the files it changed (with their patches), the
// project's git state and its file tree (read one level at a time, when a folder is opened).
import { api } from '/api.js';
import { h, byId, formatSize, pressable } from '/dom.js';
import { renderFileDiff, counts, statusLetter } from '/diff.js';

const TODO_MARKS = { pending: '○', in_progress: '◐', done: '●' };
const GIT_LETTERS = { modified: 'M', added: 'A', deleted: 'D', renamed: 'R', copied: 'C', typechange: 'T',
  untracked: 'U', conflict: '!' };

export function renderTodos(items) {
  const list = byId('todos');
  list.replaceChildren(...items.map((item) => h('li', { className: item.status },
    h('span', { className: 'mark', 'aria-hidden': 'true' }, TODO_MARKS[item.status] || '○'),
    h('span', null, item.text))));
  if (!items.length) list.append(h('li', { className: 'empty' }, 'No tasks'));
}

// onOpen(path): a changed file was chosen (its diff opens in the Changes panel).
export async function loadGit(projectid, { onOpen } = {}) {
  const box = byId('git');
  let state;
  try {
    state = await api('projects_git', { id: projectid });
  } catch (error) {
    box.replaceChildren(h('p', { className: 'error' }, error.message));
    return;
  }
  if (!state.repository) {
    box.replaceChildren(h('p', { className: 'muted' }, 'Not a git repository'));
    return;
  }
  if (state.refused) {  // the repository's config names programs: Totem did not run git
    box.replaceChildren(h('p', { className: 'muted git-refused' }, state.refused));
    return;
  }
  const files = state.files.map((file) => h('li', { title: `${file.status}${file.staged ? ', staged' : ''}`,
    dataset: { path: file.path }, ...(onOpen ? pressable(() => onOpen(file.path)) : {}) },
    h('span', { className: `git-status ${file.status}${file.staged ? ' staged' : ''}` }, GIT_LETTERS[file.status] || '?'),
    h('span', { className: 'path' }, file.path)));
  box.replaceChildren(
    h('div', { className: 'branch' }, h('span', { className: 'muted' }, 'branch '), h('strong', null, state.branch || '(detached)')),
    files.length ? h('ul', { className: 'changes' }, files) : h('p', { className: 'muted' }, 'No changes'));
  if (state.more) box.append(h('p', { className: 'muted' }, 'More changes are not shown'));
}

// The files the open session changed (Sessions|diff), each with its status and counts; the one
// chosen shows its patch below the list (and the column widens while it does).
export class ChangesPanel {
  constructor() {
    this.list = byId('diff-files');
    this.view = byId('diff-view');
    this.count = byId('diff-count');
    this.sessionid = null;
    this.files = [];
    this.chosen = null;
    this.reading = 0; // only the answer to the latest read is shown
    this.reset(null);
  }

  reset(sessionid) {
    this.sessionid = sessionid;
    this.files = [];
    this.chosen = null;
    this.reading += 1;
    this.read = false; // the files of this session were read once
    this.paint();
  }

  async load(sessionid = this.sessionid) {
    if (sessionid !== this.sessionid) this.reset(sessionid);
    if (!sessionid) return;
    const reading = ++this.reading;
    let files;
    try {
      files = await api('sessions_diff', { id: sessionid });
    } catch (error) {
      if (reading !== this.reading) return;
      this.read = true;
      this.list.replaceChildren(h('li', { className: 'error' }, error.message));
      return;
    }
    if (reading !== this.reading) return;
    this.files = files;
    this.read = true;
    this.paint();
  }

  // Show a file's patch: read again first, so that it is the disk of now.
  async show(path) {
    this.chosen = path;
    this.paint();
    await this.load();
    this.view.scrollIntoView({ block: 'nearest' });
  }

  close() {
    this.chosen = null;
    this.paint();
  }

  paint() {
    this.count.textContent = this.files.length ? String(this.files.length) : '';
    this.list.replaceChildren(...this.files.map((file) => h('li', {
      className: file.path === this.chosen ? 'active' : '', title: `${file.path} (${file.status})`,
      dataset: { path: file.path, status: file.status }, ...pressable(() => this.toggle(file.path)),
    },
    h('span', { className: `diff-status ${file.status}` }, statusLetter(file.status)),
    h('span', { className: 'path' }, file.path),
    counts(file))));
    if (!this.files.length) {
      this.list.append(h('li', { className: 'empty' }, this.sessionid ? 'No file changed in this session' : 'No session'));
    }
    this.paintView();
  }

  toggle(path) {
    if (this.chosen === path) this.close();
    else this.show(path);
  }

  paintView() {
    const { chosen } = this;
    this.view.hidden = !chosen;
    if (!chosen) {
      this.view.replaceChildren();
      return;
    }
    const entry = this.files.find((file) => file.path === chosen);
    const close = h('button', { type: 'button', className: 'icon diff-close', title: 'Close the diff',
      'aria-label': 'Close the diff', onclick: () => this.close() }, '×');
    this.view.replaceChildren(entry ? renderFileDiff(entry, { actions: close })
      : h('div', { className: 'file-diff' }, h('div', { className: 'diff-head' },
        h('code', { className: 'diff-path' }, chosen), close),
      h('p', { className: 'muted diff-note' }, this.read
        ? 'No change of this session in this file now (not changed by it, undone, or back as it was)' : 'Reading…')));
  }
}

// The lazy file tree; opened folders stay open across refreshes.
export class FileTree {
  constructor({ onPick }) {
    this.root = byId('tree');
    this.onPick = onPick;
    this.projectid = null;
    this.open = new Set();
  }

  async load(projectid) {
    if (projectid !== this.projectid) this.open.clear();
    this.projectid = projectid;
    this.root.replaceChildren(...await this.level(''));
  }

  async level(path) {
    let answer;
    try {
      answer = await api('projects_files', { id: this.projectid, query: { path } });
    } catch (error) {
      return [h('li', { className: 'error' }, error.message)];
    }
    const items = await Promise.all(answer.items.map((item) => this.item(item)));
    if (!items.length) items.push(h('li', { className: 'empty' }, 'Empty folder'));
    if (answer.more) items.push(h('li', { className: 'empty' }, 'More files are not shown'));
    return items;
  }

  async item(item) {
    if (item.type !== 'dir') {
      const title = item.type === 'outside' ? 'A link that leads outside the project' : `${formatSize(item.size)} · insert the path into the prompt`;
      return h('li', { className: `file ${item.type}`, title, dataset: { path: item.path },
        onclick: item.type === 'file' ? () => this.onPick(item.path) : null }, h('span', { className: 'name' }, item.name, item.protected ? h('span', { className: 'lock', title: 'A protected secret file: the agent asks before it reads one, search skips it' }, ' 🔒') : null));
    }
    const children = h('ul');
    const row = h('li', { className: 'dir', dataset: { path: item.path } });
    const label = h('span', { className: 'name' }, item.name);
    row.append(label, children);
    label.addEventListener('click', async () => {
      if (this.open.delete(item.path)) {
        row.classList.remove('open');
        children.replaceChildren();
        return;
      }
      this.open.add(item.path);
      row.classList.add('open');
      children.replaceChildren(...await this.level(item.path));
    });
    if (this.open.has(item.path)) {
      row.classList.add('open');
      children.replaceChildren(...await this.level(item.path));
    }
    return row;
  }
}
