// The left column: projects (with the folder browser that opens one) and the sessions of the
// open project, with their live status and a mark where a question waits.
import { api } from '/api.js';
import { h, byId, confirmButton, pressable, toast } from '/dom.js';

export function renderProjects(projects, current, { onSelect, onForget }) {
  byId('projects').replaceChildren(...projects.map((project) => h('li', {
    className: project.id === current?.id ? 'active' : '', title: project.path, dataset: { id: project.id },
    ...pressable(() => onSelect(project)),
  },
  h('span', { className: 'name' }, project.name),
  h('span', { className: 'actions' },
    confirmButton('×', 'Forget?', () => onForget(project), { className: 'icon', title: 'Forget this project (the folder stays)' })))));
  if (!projects.length) byId('projects').append(h('li', { className: 'empty' }, 'No project yet'));
}

// `more`: Sessions|list has older sessions; the last row reads them with onMore. A session run
// by a schedule has a clock mark (`schedules`: the project's, for the schedule's name).
export function renderSessions(sessions, current, questions, { onSelect, onRename, onRemove, more, onMore, schedules = [] }) {
  byId('sessions').replaceChildren(...sessions.map((session) => {
    const waiting = questions.count(session.id);
    const name = h('span', { className: 'name' }, session.name);
    const item = h('li', {
      className: session.id === current?.id ? 'active' : '', dataset: { id: session.id, status: session.status },
      ...pressable(() => onSelect(session)),
    },
    h('span', { className: `dot ${session.status}`, title: session.status }),
    name,
    session.schedule ? scheduledMark(schedules.find((s) => s.id === session.schedule)) : null,
    waiting ? h('span', { className: 'waiting', title: `${waiting} question${waiting > 1 ? 's' : ''} waiting` }, `? ${waiting}`) : null,
    h('span', { className: 'actions' },
      h('button', { type: 'button', className: 'icon', title: 'Rename', 'aria-label': 'Rename',
        onclick: (event) => { event.stopPropagation(); startRename(name, session, onRename); } }, '✎'),
      confirmButton('×', 'Remove?', () => onRemove(session), { className: 'icon', title: 'Remove this session' })));
    name.addEventListener('dblclick', (event) => { event.stopPropagation(); startRename(name, session, onRename); });
    return item;
  }));
  if (!sessions.length) byId('sessions').append(h('li', { className: 'empty' }, 'No session yet'));
  if (more) {
    byId('sessions').append(h('li', { className: 'more', dataset: { more: 'true' }, ...pressable(onMore) },
      h('span', { className: 'name' }, 'Older sessions…')));
  }
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

// The folder browser of Folders|list: places on the left, the folders of `path` on the right.
export class FolderBrowser {
  constructor({ onOpen }) {
    this.dialog = byId('folder-dialog');
    this.onOpen = onOpen;
    this.path = '';
    this.parent = null;
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

  async go(path) {
    let answer;
    try {
      answer = await api('folders', { query: path ? { path } : {} });
    } catch (error) {
      this.error(error.message);
      return;
    }
    this.error('');
    const { sep } = answer;
    this.path = answer.path;
    const cut = answer.path.lastIndexOf(sep);
    this.parent = answer.path === sep ? null : answer.path.slice(0, cut) || sep;
    byId('folder-up').disabled = !this.parent;
    byId('folder-path').value = answer.path;
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
