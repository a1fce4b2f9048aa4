// The right column: the session's task list, the files it changed (with their patches), the
// git state (the project's, and a worktree session's with Merge and Discard) and the project's
// file tree (read one level at a time, when a folder is opened).
import { api, problemText as sentence } from '/api.js';
import { h, byId, formatSize, pressable, plural, confirmAction, focusIsShown, toast } from '/dom.js';
import { renderFileDiff, counts, statusLetter, shownView, viewToggle, SPLIT_MEDIA } from '/diff.js';

const TODO_MARKS = { pending: '○', in_progress: '◐', done: '●' };
// The worktree's buttons, by their class: the one that had the keyboard keeps it when drawn again.
const KEPT_FOCUS = ['worktree-merge', 'worktree-discard'];
const GIT_LETTERS = { modified: 'M', added: 'A', deleted: 'D', renamed: 'R', copied: 'C', typechange: 'T',
  untracked: 'U', conflict: '!' };

export function renderTodos(items) {
  const list = byId('todos');
  list.replaceChildren(...items.map((item) => h('li', { className: item.status },
    h('span', { className: 'mark', 'aria-hidden': 'true' }, TODO_MARKS[item.status] || '○'),
    h('span', null, item.text))));
  if (!items.length) list.append(h('li', { className: 'empty' }, 'No tasks'));
}

// The Git panel: the project folder's branch and changes; for a session that works in a git
// worktree, its branch against the project's, its uncommitted changes, Merge and Discard (each
// asked first, saying what it will do); and the worktrees that removed sessions left behind
// because they held work, each with a Discard (asked first). A refused merge stays shown, with
// its reason and files, until the next try or another session.
export class GitPanel {
  // onOpen(path): a changed file was chosen (its diff opens in the Changes panel).
  // onRead(folder, worktree): Projects|git (null when it failed) and the worktree's Sessions|git.
  // onMerged(result), onDiscarded(session): a worktree action went through.
  constructor({ onOpen, onRead, onMerged, onDiscarded }) {
    Object.assign(this, { onOpen, onRead, onMerged, onDiscarded });
    this.box = byId('git');
    this.project = null;
    this.session = null;
    this.folder = null; // Projects|git, or {error}
    this.worktree = null; // Sessions|git of a worktree session, or {error}
    this.note = null; // {sessionid, kind: refused|error|merged, text, files}
    this.running = false;
    this.busy = false; // a merge or a discard is under way
    this.reading = 0; // only the answer to the latest read is shown
  }

  async load(project, session) {
    if (session?.id !== this.session?.id) this.note = null;
    this.project = project ?? null;
    this.session = project ? session ?? null : null;
    const reading = ++this.reading;
    if (!project) {
      this.folder = this.worktree = null;
      this.box.replaceChildren();
      this.onRead?.(null, null);
      return;
    }
    const failed = (error) => ({ error });
    const [folder, worktree] = await Promise.all([
      api('projects_git', { id: project.id }).catch(failed),
      this.session?.worktree ? api('sessions_git', { id: this.session.id }).catch(failed) : null,
    ]);
    if (reading !== this.reading) return;
    this.folder = folder;
    this.worktree = worktree;
    this.onRead?.(folder.error ? null : folder, worktree && !worktree.error ? worktree : null);
    this.paint();
  }

  reload() {
    return this.load(this.project, this.session);
  }

  // Merge and Discard wait while the session runs (the server refuses them then).
  setRunning(running) {
    this.running = running;
    for (const button of this.box.querySelectorAll('.worktree-actions button')) {
      button.disabled = running || this.busy || button.dataset.nothing === 'true';
    }
  }

  // The git state is read again on many events: a button that had the keyboard is found again
  // in the new drawing and keeps it, or Enter pressed a moment later would reach nothing.
  paint() {
    const inWorktree = !!this.session?.worktree;
    const active = document.activeElement;
    const kept = this.box.contains(active) ? KEPT_FOCUS.find((name) => active.classList.contains(name)) : null;
    this.box.replaceChildren(...[
      inWorktree ? this.worktreeBlock() : null,
      ...this.folderBlock(inWorktree),
      this.folder?.leftover?.length ? this.leftoverBlock(this.folder.leftover) : null,
    ].filter(Boolean));
    if (kept) this.box.querySelector(`.${kept}`)?.focus();
  }

  folderBlock(titled) {
    const state = this.folder;
    const title = titled ? h('h3', { className: 'git-title' }, 'Project folder') : null;
    if (!state) return [];
    if (state.error) return [title, h('p', { className: 'error' }, state.error.message)];
    if (!state.repository) return [title, h('p', { className: 'muted' }, 'Not a git repository')];
    if (state.refused) { // the repository's config names programs: Totem did not run git
      return [title, h('p', { className: 'muted git-refused' }, state.refused)];
    }
    const list = state.files.length ? changeList(state.files, this.onOpen)
      : h('p', { className: 'muted' }, 'No changes');
    return [title,
      h('div', { className: 'branch' }, h('span', { className: 'muted' }, 'branch '), h('strong', null, state.branch || '(detached)')),
      list, state.more ? h('p', { className: 'muted' }, 'More changes are not shown') : null];
  }

  worktreeBlock() {
    const state = this.worktree;
    const box = h('div', { className: 'worktree', title: this.session.worktree },
      h('h3', { className: 'git-title' }, 'Worktree of this session'));
    if (!state) return box;
    if (state.error) {
      box.append(h('p', { className: 'error worktree-error' }, problemText(state.error)));
      return box;
    }
    const changed = uniquePaths(state.changes);
    Object.assign(box.dataset, { branch: state.branch ?? '', into: state.into, ahead: String(state.ahead),
      behind: String(state.behind), changed: String(changed.length) });
    // After a merge (or before any work) there is nothing to merge: the button says so, and waits.
    const nothing = !changed.length && !state.ahead;
    const merge = h('button', { type: 'button', className: 'small primary worktree-merge',
      dataset: { nothing: String(nothing) },
      title: nothing ? `Nothing to merge: the branch has no change that ${state.into} does not have`
        : `Commit what is uncommitted in the worktree and merge its branch into ${state.into}`,
      onclick: () => this.merge() }, 'Merge');
    const discard = h('button', { type: 'button', className: 'small danger worktree-discard',
      title: 'Delete the worktree and its branch, with their work', onclick: () => this.discard() }, 'Discard');
    merge.disabled = nothing || this.running || this.busy;
    discard.disabled = this.running || this.busy;
    box.append(...[
      h('div', { className: 'worktree-branch' },
        h('strong', { className: 'wt-branch' }, state.branch || '(detached)'),
        h('span', { className: 'muted' }, ' into '), h('strong', { className: 'wt-into' }, state.into)),
      h('div', { className: 'worktree-counts' },
        h('span', { className: 'wt-ahead', title: `Commits of the branch that ${state.into} does not have` },
          `${plural(state.ahead, 'commit')} ahead`),
        h('span', { className: 'muted' }, ' · '),
        h('span', { className: 'wt-behind', title: `Commits of ${state.into} that the branch does not have` },
          `${state.behind} behind`)),
      state.changes.length ? changeList(state.changes, this.onOpen, 'wt-changes')
        : h('p', { className: 'muted wt-clean' }, 'No uncommitted change'),
      h('div', { className: 'worktree-actions' }, merge, discard),
      this.noteElement(),
    ].filter(Boolean));
    return box;
  }

  noteElement() {
    const note = this.note;
    if (!note || note.sessionid !== this.session?.id) return null;
    if (note.kind === 'refused') {
      return h('div', { className: 'worktree-refused worktree-note', role: 'alert', tabIndex: -1 },
        h('strong', null, 'Merge refused'),
        h('p', { className: 'refused-reason' }, note.text),
        note.files.length ? h('ul', { className: 'refused-files' },
          note.files.map((file) => h('li', { dataset: { path: file } }, h('code', null, file)))) : null,
        h('p', { className: 'muted' }, 'Nothing was changed: not the project, not the worktree.'));
    }
    return h('p', { className: `${note.kind === 'merged' ? 'worktree-merged' : 'error worktree-error'} worktree-note`, role: 'status',
      tabIndex: -1 }, note.text);
  }

  leftoverBlock(items) {
    return h('div', { className: 'leftover' },
      h('h3', { className: 'git-title' }, 'Left-over worktrees'),
      h('p', { className: 'muted leftover-note' }, 'Kept from removed sessions because they held work.'),
      h('ul', { className: 'leftover-list' }, items.map((item) => h('li', { dataset: { path: item.path } },
        h('div', { className: 'leftover-text' },
          h('strong', { className: 'wt-branch' }, item.branch || '(no branch)'),
          h('code', { className: 'muted leftover-path', title: item.path }, pathText(item.path))),
        h('button', { type: 'button', className: 'small danger', title: 'Delete this worktree and its branch',
          onclick: () => this.discardLeftover(item) }, 'Discard')))));
  }

  // -- the actions ----------------------------------------------------------------------------

  setNote(session, note) {
    this.note = note ? { sessionid: session.id, files: [], ...note } : null;
  }

  // The worktree's state of now: what the question says is what the action does.
  async fresh(session) {
    try {
      const state = await api('sessions_git', { id: session.id });
      this.worktree = state;
      return state;
    } catch (error) {
      this.setNote(session, { kind: 'error', text: problemText(error) });
      this.paint();
      return null;
    }
  }

  // A question answered No gives the keyboard back to the button that asked it, as the browser
  // does, also when the git state was read and the button drawn again while the question was
  // open: the browser then finds the old button gone and leaves the keyboard in the closed dialog.
  giveBackFocus(selector) {
    if (!focusIsShown()) this.box.querySelector(selector)?.focus();
  }

  async merge() {
    const session = this.session;
    if (!session?.worktree || this.busy) return;
    const state = await this.fresh(session);
    if (!state || this.session?.id !== session.id) return;
    const changed = uniquePaths(state.changes);
    const branch = state.branch || 'the branch';
    if (!changed.length && !state.ahead) {
      this.setNote(session, { kind: 'error', text: `Nothing to merge: ${branch} has no change that ${state.into} does not have.` });
      this.paint();
      return;
    }
    const question = changed.length
      ? `Commit the ${plural(changed.length, 'changed file')} and merge ${branch} into ${state.into}?`
      : `Merge ${branch} (${plural(state.ahead, 'commit')}) into ${state.into}?`;
    const author = authorForm(state.author);
    const yes = await confirmAction({ title: 'Merge the worktree', question, action: 'Merge', details: [
      changed.length ? h('ul', { className: 'confirm-files' }, changed.slice(0, MAX_LISTED).map((path) => h('li', null, h('code', null, path))),
        changed.length > MAX_LISTED ? h('li', { className: 'muted' }, `and ${changed.length - MAX_LISTED} more`) : null) : null,
      author.element,
      h('p', { className: 'muted' }, `${changed.length && !author.element ? `The commit is named “${session.name}”, by the repository's user.name and user.email. ` : ''}`
        + `The merge is a new commit on ${state.into} in the project folder. If it would conflict, or change a file `
        + 'with uncommitted changes there, nothing is changed.'),
    ] });
    if (!yes) return this.giveBackFocus('.worktree-merge');
    // Merge pressed from the keyboard: the button is drawn again (disabled) while it merges, so
    // the keyboard goes to the outcome's note instead of falling to the page's start.
    const fromKeyboard = this.box.contains(document.activeElement);
    const body = author.body();
    if (author.element && !body) {
      this.setNote(session, { kind: 'error', text: 'Not merged: the commit needs an author. Give a name and an email address, then Merge again.' });
      this.paint();
      return;
    }
    this.busy = true;
    this.setRunning(this.running);
    let result;
    try {
      result = await api('sessions_worktreemerge', { id: session.id, body: body ?? {} });
    } catch (error) {
      this.setNote(session, refusal(error));
      return;
    } finally {
      this.busy = false;
      if (this.session?.id === session.id) await this.reload();
      if (fromKeyboard) this.box.querySelector('.worktree-note')?.focus();
    }
    const files = result.files ?? [];
    this.setNote(session, { kind: 'merged', text: `Merged ${branch} into ${result.into}: ${plural(files.length, 'file')}`
      + `${files.length ? ` (${files.slice(0, MAX_LISTED).join(', ')}${files.length > MAX_LISTED ? ', …' : ''})` : ''}`
      + `, commit ${String(result.commit).slice(0, 10)}.` });
    this.paint();
    if (fromKeyboard) this.box.querySelector('.worktree-note')?.focus();
    this.onMerged?.(result, session);
  }

  async discard() {
    const session = this.session;
    if (!session?.worktree || this.busy) return;
    const state = await this.fresh(session);
    if (!state || this.session?.id !== session.id) return;
    const changed = uniquePaths(state.changes);
    const branch = state.branch || 'its branch';
    const yes = await confirmAction({ title: 'Discard the worktree', action: 'Discard', danger: true,
      question: `Discard the worktree and the branch ${branch} with its ${plural(state.ahead, 'commit')} and ${plural(changed.length, 'uncommitted change')}?`,
      details: h('p', { className: 'muted' }, `Its folder ${session.worktree} is deleted with the branch: this cannot be undone. `
        + 'The session and its conversation stay, without a folder to work in.') });
    if (!yes) return this.giveBackFocus('.worktree-discard');
    this.busy = true;
    this.setRunning(this.running);
    let fresh;
    try {
      fresh = await api('sessions_worktreediscard', { id: session.id, body: {} });
    } catch (error) {
      this.setNote(session, { kind: 'error', text: problemText(error) });
      return;
    } finally {
      this.busy = false;
      if (this.session?.id === session.id) await this.reload();
    }
    this.onDiscarded?.(fresh, branch);
  }

  async discardLeftover(item) {
    const project = this.project;
    if (!project) return;
    const yes = await confirmAction({ title: 'Discard a left-over worktree', action: 'Discard', danger: true,
      question: `Discard the left-over worktree and the branch ${item.branch || '(none)'} with the work it holds?`,
      details: h('p', { className: 'muted' }, `Its folder ${item.path} is deleted with its uncommitted changes, and the branch `
        + 'with its commits: this cannot be undone.') });
    if (!yes) return;
    try {
      await api('projects_worktreediscard', { id: project.id, body: { path: item.path } });
      toast(`Discarded the worktree${item.branch ? ` of ${item.branch}` : ''}`, 'info');
    } catch (error) {
      toast(error.message);
    }
    if (this.project?.id === project.id) await this.reload();
  }
}

const MAX_LISTED = 20;

// A repository whose git config has no user.name or user.email cannot commit: the merge's
// question offers to set them in the repository, and shows the exact commands before they run.
// `element` is null when both are set; `body()` the merge's fields (null while one is empty).
function authorForm(found) {
  const missing = ['name', 'email'].filter((key) => !found?.[key]);
  if (!missing.length) return { element: null, body: () => ({}) };
  const field = (key, label, type, autocomplete) => {
    const input = h('input', { type, value: found?.[key] ?? '', autocomplete, required: true,
      className: `author-${key}`, 'aria-label': label });
    return [input, h('label', { className: 'author-field' }, h('span', null, label), input)];
  };
  const [name, nameLabel] = field('name', 'Your name (user.name)', 'text', 'name');
  const [email, emailLabel] = field('email', 'Your email (user.email)', 'email', 'email');
  const commands = h('pre', { className: 'author-commands' });
  const quote = (text) => `'${text.replaceAll("'", "'\\''")}'`;
  const paint = () => {
    commands.textContent = `git config user.name ${quote(name.value.trim())}\ngit config user.email ${quote(email.value.trim())}`;
  };
  name.addEventListener('input', paint);
  email.addEventListener('input', paint);
  paint();
  const element = h('div', { className: 'author-form' },
    h('p', null, `This repository has no ${missing.map((key) => `user.${key}`).join(' and no ')}, which git needs as the author `
      + 'of the commit. Merge sets them in this repository only (its .git/config), as these commands would:'),
    nameLabel, emailLabel, commands);
  const body = () => {
    const username = name.value.trim();
    const useremail = email.value.trim();
    return username && useremail ? { username, useremail } : null;
  };
  return { element, body };
}

function changeList(files, onOpen, extra = '') {
  return h('ul', { className: `changes${extra ? ` ${extra}` : ''}` }, files.map((file) => h('li', {
    title: `${file.status}${file.staged ? ', staged' : ''}`, dataset: { path: file.path, status: file.status },
    ...(onOpen ? pressable(() => onOpen(file.path)) : {}),
  },
  h('span', { className: `git-status ${file.status}${file.staged ? ' staged' : ''}` }, GIT_LETTERS[file.status] || '?'),
  h('span', { className: 'path' }, pathText(file.path)))));
}

// A path in a box that is cut at its start (direction: rtl, so the end stays in view), laid out
// left to right inside it: else the bidi rules move its leading and trailing punctuation
// (`.totem/` read as `/totem.`).
function pathText(path) {
  return h('bdi', { dir: 'ltr' }, path);
}

// What the server said, as sentences without the names of the fields (the panel says what was asked).
function problemText(error) {
  return error.problems?.length ? error.problems.map((p) => sentence({ error: p.error })).join(' ') : error.message;
}

// A file both staged and changed again is one changed file.
function uniquePaths(changes) {
  return [...new Set(changes.map((change) => change.path))];
}

// A 409 of Sessions|worktreemerge: "<reason>: file1, file2" (nothing was changed); else the error.
function refusal(error) {
  const text = error.problems?.find((p) => p.name === 'worktree')?.error;
  if (error.status !== 409 || !text) return { kind: 'error', text: problemText(error) };
  const cut = text.indexOf(': ');
  if (cut < 0) return { kind: 'refused', text: sentence({ error: text }), files: [] };
  const files = text.slice(cut + 2).split(', ').filter((file) => file && file !== 'no file named');
  return { kind: 'refused', text: sentence({ error: text.slice(0, cut) }), files };
}

// The files the open session changed (Sessions|diff), each with its status and counts; the one
// chosen shows its patch below the list (and the column widens while it does), unified or split
// as chosen with the buttons in its head.
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
    // A screen turned or resized across the phone width: split appears or gives way to unified.
    window.matchMedia(SPLIT_MEDIA).addEventListener('change', () => this.paintView());
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
    const closed = this.chosen;
    const fromView = this.view.contains(document.activeElement);
    this.chosen = null;
    this.paint();
    // Closed from the keyboard: it goes back to the file's row rather than to the page's start.
    if (fromView) this.row(closed)?.focus();
  }

  row(path) {
    return [...this.list.children].find((item) => item.dataset.path === path) ?? null;
  }

  paint() {
    // The rows are drawn again: the one that had the keyboard keeps it.
    const active = document.activeElement;
    const focusedPath = active && this.list.contains(active) ? active.dataset.path : undefined;
    this.count.textContent = this.files.length ? String(this.files.length) : '';
    this.list.replaceChildren(...this.files.map((file) => h('li', {
      className: file.path === this.chosen ? 'active' : '', title: `${file.path} (${file.status})`,
      dataset: { path: file.path, status: file.status }, ...pressable(() => this.toggle(file.path)),
    },
    h('span', { className: `diff-status ${file.status}` }, statusLetter(file.status)),
    h('span', { className: 'path' }, pathText(file.path)),
    counts(file))));
    if (!this.files.length) {
      this.list.append(h('li', { className: 'empty' }, this.sessionid ? 'No file changed in this session' : 'No session'));
    }
    if (focusedPath !== undefined) this.row(focusedPath)?.focus();
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
    const toggle = viewToggle(() => this.paintView());
    const focused = this.focusedControl();
    this.view.replaceChildren(entry ? renderFileDiff(entry, { actions: [toggle, close], view: shownView() })
      : h('div', { className: 'file-diff' }, h('div', { className: 'diff-head' },
        h('code', { className: 'diff-path' }, chosen), close),
      h('p', { className: 'muted diff-note' }, this.read
        ? 'No change of this session in this file now (not changed by it, undone, or back as it was)' : 'Reading…')));
    if (focused) this.view.querySelector(focused)?.focus();
  }

  // The button of the view that has the keyboard, if one has: the view is drawn again at every
  // change of the files, and the keyboard must stay where it was rather than fall to the page.
  focusedControl() {
    const active = document.activeElement;
    if (!active || !this.view.contains(active)) return null;
    if (active.dataset.view) return `.diff-mode button[data-view="${active.dataset.view}"]`;
    return active.classList.contains('diff-close') ? '.diff-close' : null;
  }
}

// The lazy file tree; opened folders stay open across refreshes.
export class FileTree {
  constructor({ onPick, worktreeOf = () => null }) {
    this.root = byId('tree');
    this.onPick = onPick;
    this.worktreeOf = worktreeOf; // () => the shown session's id when it works in a worktree
    this.projectid = null;
    this.sessionid = null;
    this.open = new Set();
  }

  async load(projectid) {
    const sessionid = this.worktreeOf();
    if (projectid !== this.projectid || sessionid !== this.sessionid) this.open.clear();
    this.projectid = projectid;
    this.sessionid = sessionid;
    this.root.replaceChildren(...await this.level(''));
  }

  async level(path) {
    let answer;
    const query = this.sessionid ? { path, sessionid: this.sessionid } : { path };
    try {
      answer = await api('projects_files', { id: this.projectid, query });
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

// The Jobs panel: the shown session's background commands (bash with `background`), each with
// its status, the tail of its output and, while it runs, Stop. Read when the session is shown,
// when one of its tool calls starts a job, and every JOBS_POLL_MS while one of them runs. A
// refused Stop (Plan mode: nothing is run or stopped) shows the server's reason.
const JOBS_POLL_MS = 1500;
const JOB_TAIL_CHARS = 2000;

export class JobsPanel {
  // onJobs(jobs): the jobs as last read, so that the calls that started them say how they are.
  constructor({ onJobs } = {}) {
    this.onJobs = onJobs ?? (() => {});
    this.list = byId('jobs');
    this.sessionid = null;
    this.jobs = [];
    this.timer = 0;
    this.reading = 0;
    byId('jobs-refresh').addEventListener('click', () => this.load());
    this.paint();
  }

  show(sessionid) {
    if (sessionid !== this.sessionid) {
      this.jobs = [];
      this.error('');
    }
    this.sessionid = sessionid;
    this.load();
  }

  async load() {
    clearTimeout(this.timer);
    const sessionid = this.sessionid;
    const reading = ++this.reading;
    if (!sessionid) {
      this.jobs = [];
      this.paint();
      return;
    }
    let jobs;
    try {
      jobs = await api('sessions_jobs', { id: sessionid });
    } catch (error) {
      if (reading === this.reading && error.status !== 404) this.error(error.message);
      return;
    }
    if (reading !== this.reading) return;
    this.jobs = jobs;
    this.paint();
    if (jobs.some((job) => job.status === 'running')) this.timer = setTimeout(() => this.load(), JOBS_POLL_MS);
  }

  error(text) {
    byId('jobs-error').textContent = text;
    byId('jobs-error').hidden = !text;
  }

  paint() {
    const running = this.jobs.filter((job) => job.status === 'running').length;
    byId('jobs-count').textContent = running ? String(running) : '';
    this.list.replaceChildren(...this.jobs.map((job) => {
      const output = job.output || '';
      const tail = output.length > JOB_TAIL_CHARS ? `…${output.slice(-JOB_TAIL_CHARS)}` : output;
      const pre = h('pre', { className: 'job-output' }, tail);
      const item = h('li', { className: `job ${job.status}`, dataset: { id: job.id, status: job.status } },
        h('div', { className: 'job-head' },
          h('span', { className: `badge status-${job.status}` },
            job.status === 'failed' && job.exit_code !== null ? `failed (${job.exit_code})` : job.status),
          h('code', { className: 'job-command', title: job.command }, job.command),
          job.status === 'running' ? h('button', { type: 'button', className: 'small danger job-stop',
            title: 'Stop this job (its whole process group)', onclick: (event) => this.stop(job, event.currentTarget) }, 'Stop') : null),
        pre);
      queueMicrotask(() => { pre.scrollTop = pre.scrollHeight; }); // the newest output in view
      return item;
    }));
    if (!this.jobs.length) this.list.append(h('li', { className: 'empty' }, 'No background jobs'));
    this.onJobs(this.jobs);
  }

  async stop(job, button) {
    button.disabled = true;
    this.error('');
    try {
      await api('sessions_jobstop', { id: this.sessionid, body: { job: job.id } });
    } catch (error) {
      button.disabled = false;
      this.error(`Stop: ${error.message}`);
      return;
    }
    this.load();
  }
}

// The Servers panel: the MCP servers the project defines (.totem/mcp.json, .mcp.json) and what
// became of each in the shown session (Projects|mcp): running with its tools, ended or failed
// with the error, refused, or not started; without a session, whether any session runs it. The
// definitions that cannot be used are listed with their file and error. Runs start the servers,
// each asked first; this panel only shows them. Read when a session is shown, when a run ends or
// a start is decided, when the panels open, and on ↻.
const SERVER_STATES = {
  running: 'running', ended: 'ended', failed: 'failed', refused: 'refused', 'not started': 'not started',
  stopped: 'not running',
};
const SERVER_TOOLS_SHOWN = 40;

export class ServersPanel {
  constructor() {
    this.list = byId('servers');
    this.count = byId('servers-count');
    this.projectid = null;
    this.sessionid = null;
    this.answer = null; // Projects|mcp, or null before it is read
    this.reading = 0;
    byId('servers-refresh').addEventListener('click', () => this.load());
    this.paint();
  }

  // The servers of a project as one of its sessions sees them (sessionid null: the project's).
  show(projectid, sessionid) {
    if (projectid !== this.projectid || sessionid !== this.sessionid) {
      this.answer = null;
      this.error('');
    }
    this.projectid = projectid ?? null;
    this.sessionid = sessionid ?? null;
    this.paint();
    return this.load();
  }

  async load() {
    const { projectid, sessionid } = this;
    const reading = ++this.reading;
    if (!projectid) {
      this.answer = null;
      this.paint();
      return;
    }
    let answer;
    try {
      answer = await api('projects_mcp', { id: projectid, query: sessionid ? { sessionid } : {} });
    } catch (error) {
      if (reading === this.reading) this.error(error.message);
      return;
    }
    if (reading !== this.reading) return;
    this.error('');
    this.answer = answer;
    this.paint();
  }

  error(text) {
    byId('servers-error').textContent = text;
    byId('servers-error').hidden = !text;
  }

  paint() {
    const servers = this.answer?.servers ?? [];
    const invalid = this.answer?.invalid ?? [];
    const running = servers.filter((server) => server.state === 'running').length;
    this.count.textContent = running ? String(running) : '';
    this.count.title = running ? `${plural(running, 'server')} running` : '';
    this.list.replaceChildren(...servers.map((server) => this.serverItem(server)),
      ...invalid.map((problem) => h('li', { className: 'server server-invalid', dataset: { file: problem.file } },
        h('div', { className: 'server-head' },
          h('span', { className: 'badge status-error' }, 'invalid'),
          h('code', { className: 'server-file' }, problem.file),
          problem.server ? h('strong', { className: 'server-name' }, problem.server) : null),
        h('p', { className: 'server-error' }, problem.error))));
    if (!this.answer) {
      this.list.append(h('li', { className: 'empty' }, this.projectid ? 'Reading…' : 'No project'));
    } else if (!servers.length && !invalid.length) {
      this.list.append(h('li', { className: 'empty' }, 'No MCP servers (.totem/mcp.json, .mcp.json)'));
    }
  }

  serverItem(server) {
    const state = server.state || 'not started';
    const remote = server.transport !== 'stdio';
    const names = remote ? server.headers : server.env;
    const tools = Array.isArray(server.tools) ? server.tools : [];
    const shownTools = tools.slice(0, SERVER_TOOLS_SHOWN);
    return h('li', { className: `server state-${state.replace(/\s+/g, '-')}`, dataset: { server: server.server, state } },
      h('div', { className: 'server-head' },
        h('strong', { className: 'server-name' }, server.server),
        h('span', { className: `badge server-state state-${state.replace(/\s+/g, '-')}` }, SERVER_STATES[state] ?? state),
        h('span', { className: 'muted server-transport' }, server.transport)),
      h('code', { className: 'server-file muted' }, server.file),
      remote
        ? h('div', { className: 'server-target' },
          h('code', { className: 'server-url', title: server.url }, server.url),
          h('div', { className: 'server-host' }, h('span', { className: 'muted' }, 'host '), h('code', null, server.host || '?')))
        : h('code', { className: 'server-command', title: server.command }, `$ ${server.command}`),
      Array.isArray(names) && names.length ? h('div', { className: 'server-names' },
        h('span', { className: 'muted' }, remote ? 'headers ' : 'variables '), h('code', null, names.join(', '))) : null,
      state === 'running' ? h('div', { className: 'server-tools' },
        h('span', { className: 'muted' }, `${plural(tools.length, 'tool')}${tools.length ? ': ' : ''}`),
        shownTools.map((name, index) => [index ? ', ' : '', h('code', { className: 'server-tool' }, name)]),
        tools.length > shownTools.length ? h('span', { className: 'muted' }, ` and ${tools.length - shownTools.length} more`) : null)
        : null,
      state === 'running' && server.skipped?.length ? h('div', { className: 'muted server-skipped' },
        `left out: ${server.skipped.join('; ')}`) : null,
      (state === 'ended' || state === 'failed') && server.error ? h('p', { className: 'server-error' }, server.error) : null,
      state === 'refused' ? h('p', { className: 'muted server-note' }, 'Refused in this session: it is not asked for again here.') : null,
      typeof server.sessions === 'number' && server.sessions ? h('p', { className: 'muted server-note' },
        `running in ${plural(server.sessions, 'session')}`) : null);
  }
}
