// Totem's page: wires the REST API, the WebSocket and the parts of the screen together.
//
// State lives here; the modules render. Every session of the open project is subscribed, so the
// session list is live and a question that waits anywhere is seen. After a reconnect the page
// reloads the stored state (sessions, the open conversation) and only then subscribes again.
import { EVENTS } from '/events.js';
import { api } from '/api.js';
import { h, byId, toast, confirmAction, focusIsShown, plural } from '/dom.js';
import { Socket } from '/socket.js';
import { Conversation } from '/conversation.js';
import { Composer } from '/composer.js';
import { Questions, reachesQuestions } from '/questions.js';
import { renderProjects, renderSessions, FolderBrowser, WorktreeForm, forgetProject } from '/sidebar.js';
import { renderTodos, GitPanel, FileTree, ChangesPanel, JobsPanel, ServersPanel } from '/panels.js';
import { ProvidersDialog, RulesDialog, SettingsDialog } from '/settings.js';
import { TerminalPanel } from '/terminal.js';
import { SchedulesDialog } from '/schedules.js';
import { enableCopyButtons } from '/markdown.js';
import { enableSaveAs } from '/saveas.js';
import { paintSessionUsage } from '/usage.js';
import { enableExports } from '/exports.js';
import { Attention } from '/attention.js';

const MESSAGE_PAGE = 200;
const SESSION_PAGE = 100;
const GIT_REFRESH_MS = 600;
const TERMINAL_QUIET_MS = 2000; // the shell's output stopped this long: the files are read again
const CHANGES_REFRESH_MS = 250;
const SERVERS_REFRESH_MS = 150; // after the start of an MCP server was decided
const USAGE_PAGE = 50; // the newest messages read again when a run ends, for their tokens
const LAST_PROJECT_KEY = 'totem.project';

// held: while the shown session's stored state is read, {sessionid, events} that came meanwhile.
// hearing: maps (sessionid -> status) that collect the statuses announced while a snapshot is read.
// sessionsMore: Sessions|list has a page after the one read last, which ended at sessionsCursor.
// changing: undos and redos of this page under way (each reads the conversation again itself).
// schedules: the open project's schedules, for the names of the session list's scheduled marks.
const state = {
  projects: [], project: null, sessions: [], session: null, catalog: { providers: [], models: [] },
  held: null, hearing: new Set(), sessionsMore: false, sessionsCursor: null, changing: 0, schedules: [],
  touches: 0, // the person's clicks and keys: a reading that ends after one leaves the focus alone
};
let connectionLost = false;
let gitTimer = 0;
let gitOnlyTimer = 0;
let changesTimer = 0;
let serversTimer = 0;

const conversation = new Conversation(byId('conversation'), {
  onLoadEarlier: loadEarlier, onUndo: (messageid) => undo(messageid), onFork: fork, onOpenChange: openChange,
  onUnqueue: unqueue, onRetry: retry, onProviders: () => providers.show(), jump: byId('jump-latest'), sessionHref,
});
const changes = new ChangesPanel();
const jobs = new JobsPanel({ onJobs: (list) => conversation.setJobs(list) });
const servers = new ServersPanel();
const questions = new Questions(byId('questions'), {
  onChange: () => { paintSessions(); paintTitle(); }, drawerOver, announcer: byId('questions-live'),
});
const composer = new Composer({ onSend: sendPrompt, onAbort: abort, onNewSession: newSession });
const tree = new FileTree({
  onPick: (path) => composer.insert(path),
  worktreeOf: () => (state.session?.worktree ? state.session.id : null), // a worktree session's own files
});
const folders = new FolderBrowser({ onOpen: openFolder });
const providers = new ProvidersDialog({ onChange: loadCatalog });
const rules = new RulesDialog();
const settings = new SettingsDialog({ context: () => ({ project: state.project, session: state.session }) });
const git = new GitPanel({ onOpen: openChange, onRead: paintGitState, onMerged: worktreeMerged, onDiscarded: worktreeDiscarded });
const worktreeForm = new WorktreeForm({ onCreate: newWorktreeSession });
const terminal = new TerminalPanel();
const schedules = new SchedulesDialog({ catalog: () => state.catalog, onOpenSession: openSessionById,
  onChange: (list) => { state.schedules = list; paintSessions(); } });
const socket = new Socket({ onEvent, onOpen: resync, onState: paintConnection });
const attention = new Attention({
  onChange: () => paintTitle(),
  onOpen: (sessionid) => {
    const session = state.sessions.find((s) => s.id === sessionid);
    if (session) selectSession(session);
  },
});
enableCopyButtons(byId('conversation'));
enableSaveAs(byId('conversation'), { sessionid: () => state.session?.id,
  validation: (messageid) => conversation.validationOf(messageid) });

// -- rendering -------------------------------------------------------------------------------

function paintProjects() {
  renderProjects(state.projects, state.project, { onSelect: (p) => selectProject(p), onForget: forget });
}

function paintSessions() {
  renderSessions(state.sessions, state.session, questions, {
    onSelect: (s) => selectSession(s), onRename: rename, onRemove: removeSession,
    more: state.sessionsMore, onMore: loadMoreSessions, schedules: state.schedules,
  });
}

function paintTitle() {
  const waiting = questions.total();
  const mark = byId('toggle-side-waiting'); // the Sessions toggle says it too, on a phone
  mark.hidden = !waiting;
  mark.textContent = waiting ? `? ${waiting}` : '';
  document.title = `${attention.mark()}${waiting ? `(${waiting}) ` : ''}${state.session ? `${state.session.name} · ` : ''}Totem`;
}

function paintSession() {
  const { session, project } = state;
  byId('welcome').hidden = !!project;
  byId('sessions-section').hidden = !project;
  byId('panels').hidden = !project;
  byId('toggle-panels').hidden = !project;
  byId('composer').hidden = !project;
  byId('open-rules').disabled = !project;
  byId('open-schedules').disabled = !project;
  byId('session-settings').hidden = !session;
  byId('session-compact').hidden = !session;
  byId('session-export-menu').hidden = !session;
  byId('project-title').textContent = project ? project.path : '';
  byId('session-view').hidden = !project;
  byId('session-title').textContent = session ? session.name : 'New session';
  const status = byId('session-status');
  status.textContent = session ? session.status : '';
  status.className = `badge status-${session?.status ?? 'none'}`;
  status.hidden = !session;
  const running = session?.status === 'running';
  byId('session-compact').disabled = running;
  composer.setRunning(running);
  conversation.setRunning(running);
  git.setRunning(running);
  if (!session?.worktree) byId('session-branch').hidden = true;
  paintParent();
  const redoBar = byId('redo-bar');
  const holdsKeyboard = !redoBar.hidden && redoBar.contains(document.activeElement);
  redoBar.hidden = !session?.redo || running;
  // The bar gone with the keyboard on it (Redo pressed, and the session's event came after the
  // answer, or a redo from elsewhere): the keyboard goes on to the prompt box, not the page's start.
  if (holdsKeyboard && redoBar.hidden) composer.focus();
  paintUsage();
  paintTitle();
}

// A sub-agent's session links back to the session that handed it its task.
function paintParent() {
  const link = byId('session-parent');
  const parentid = state.session?.parent;
  link.hidden = !parentid;
  if (!parentid) return;
  const parent = state.sessions.find((s) => s.id === parentid);
  link.href = sessionHref(parentid);
  link.textContent = `↳ sub-agent of ${parent ? `“${parent.name}”` : 'another session'}`;
}

// The address of a session of the open project (the page follows it: see followAddress).
function sessionHref(sessionid) {
  return `#/${state.project?.id ?? ''}/${sessionid}`;
}

// The session's tokens (Sessions|read) and the context its last answer used against the window
// of that answer's model (from the catalog; before any answer, the session's model).
function paintUsage() {
  const { session } = state;
  const element = byId('session-usage');
  if (!session) {
    element.hidden = true;
    return;
  }
  const last = conversation.lastUsage();
  const model = state.catalog.models.find((m) => m.id === (last?.model ?? session.model)) ?? null;
  paintSessionUsage(element, { tokens: session.tokens, last: last?.tokens, window: model });
}

// A provider to start with: shown while none is saved.
function paintFirstRun() {
  const notice = byId('first-run');
  const had = notice.contains(document.activeElement);
  notice.hidden = state.catalog.providers.length > 0;
  if (had && notice.hidden) focusNextStep();
}

// The keyboard's place when what had it is gone (the first run's notice, a dialog opened from
// it): the prompt box, or the welcome's Open folder, rather than the page's start.
function focusNextStep() {
  [byId('prompt'), byId('welcome-open')].find((el) => el.checkVisibility())?.focus();
}

function paintConnection(connection) {
  const element = byId('connection');
  element.dataset.state = connection;
  element.textContent = { connecting: 'Connecting…', open: 'Connected', closed: 'Reconnecting…' }[connection];
  // A socket that keeps failing may mean a signed-out browser: api() goes to /login on a 401.
  if (connection === 'closed' && socket.attempt >= 3) api('account').catch(() => {});
  // The shell's output of while the socket was down is only in its scrollback: read it again.
  if (connection === 'closed') connectionLost = true;
  if (connection === 'open' && connectionLost) {
    connectionLost = false;
    terminal.reattach();
  }
}

function remember() {
  const { project, session } = state;
  const hash = project ? `#/${project.id}${session ? `/${session.id}` : ''}` : '';
  if (location.hash !== hash) history.replaceState(null, '', hash || location.pathname);
  if (project) localStorage.setItem(LAST_PROJECT_KEY, project.id);
}

// -- projects and sessions -------------------------------------------------------------------

async function openFolder(path) {
  const project = await api('projects_open', { body: { path } });
  state.projects = await api('projects');
  await selectProject(project);
}

async function selectProject(project, sessionid) {
  if (state.project?.id !== project.id) {
    socket.unsubscribeAll();
    questions.forget();
    worktreeForm.offer(false); // until Projects|git says it is a repository
  }
  state.project = project;
  state.session = null;
  if (state.schedules[0]?.projectid !== project.id) state.schedules = [];
  paintProjects();
  loadScheduleNames(project.id);
  try {
    await readFirstSessions(project.id, sessionid);
  } catch (error) {
    toast(error.message);
    state.sessions = [];
    state.sessionsMore = false;
  }
  for (const session of state.sessions) socket.subscribe(session.id);
  const session = state.sessions.find((s) => s.id === sessionid) ?? state.sessions[0];
  if (session) await selectSession(session);
  else showEmptySession();
  tree.load(project.id);
}

// A session.status announced while a snapshot is read is newer than the snapshot.
async function hearingStatuses(read) {
  const heard = new Map();
  state.hearing.add(heard);
  try {
    return { value: await read(), heard };
  } finally {
    state.hearing.delete(heard);
  }
}

// One page of Sessions|list ({sessions, more}), newest first, after the session `before`.
async function readSessions(projectid, before) {
  const query = { projectid, limit: SESSION_PAGE, ...(before ? { before } : {}) };
  const { value: page, heard } = await hearingStatuses(() => api('sessions', { query }));
  for (const session of page.sessions) if (heard.has(session.id)) session.status = heard.get(session.id);
  return page;
}

// The first page of sessions as the list; a session that `keep` names and that is further down
// (the one in the address, or the one shown) is read on its own and added at the end.
async function readFirstSessions(projectid, keep) {
  const page = await readSessions(projectid);
  state.sessions = page.sessions;
  state.sessionsMore = page.more;
  state.sessionsCursor = page.sessions.length ? page.sessions[page.sessions.length - 1].id : null;
  if (keep && page.more && !state.sessions.some((s) => s.id === keep)) {
    const session = await api('sessions_read', { id: keep }).catch(() => null);
    if (session && session.projectid === projectid) state.sessions.push(session);
  }
}

async function loadMoreSessions() {
  const { project, sessionsCursor } = state;
  if (!project || !sessionsCursor) return;
  let page;
  try {
    page = await readSessions(project.id, sessionsCursor);
  } catch (error) {
    toast(error.message);
    return;
  }
  if (state.project?.id !== project.id || state.sessionsCursor !== sessionsCursor) return;
  for (const session of page.sessions) {
    if (state.sessions.some((s) => s.id === session.id)) continue;
    state.sessions.push(session);
    socket.subscribe(session.id);
  }
  state.sessionsMore = page.more;
  if (page.sessions.length) state.sessionsCursor = page.sessions[page.sessions.length - 1].id;
  paintSessions();
}

// The schedules of the project, for the names of the session list's scheduled marks.
async function loadScheduleNames(projectid) {
  let list;
  try {
    list = await api('schedules', { query: { projectid } });
  } catch {
    return; // the marks say "a schedule" without its name
  }
  if (state.project?.id !== projectid) return;
  state.schedules = list;
  paintSessions();
}

// A session named by its id (the run of a schedule): from the list, else read and added.
async function openSessionById(sessionid) {
  let session = state.sessions.find((s) => s.id === sessionid);
  if (!session) {
    try {
      session = await api('sessions_read', { id: sessionid });
    } catch (error) {
      toast(error.message);
      return;
    }
    if (session.projectid !== state.project?.id) return;
    addSession(session);
  }
  await selectSession(session);
}

function showEmptySession() {
  state.session = null;
  terminal.attach(null);
  conversation.reset();
  changes.reset(null);
  jobs.show(null);
  servers.show(state.project?.id, null);
  clearNotice();
  questions.show(null);
  renderTodos([]);
  paintSessions();
  paintSession();
  remember();
  paintGit();
}

async function selectSession(chosen) {
  const touches = state.touches;
  // The list's own object, so that events that change it change what is shown.
  const session = state.sessions.find((s) => s.id === chosen.id) ?? chosen;
  if (state.session?.id !== session.id) {
    conversation.reset();
    changes.reset(session.id);
    clearNotice();
    byId('session-branch').hidden = true; // until its git state is read
  }
  const reloadTree = Boolean(session.worktree) !== Boolean(state.session?.worktree) || session.worktree;
  state.session = session;
  if (reloadTree && state.project) tree.load(state.project.id);
  jobs.show(session.id);
  servers.show(state.project?.id, session.id);
  terminal.attach(session.id);
  paintSessions();
  paintSession();
  composer.useSession(session);
  questions.show(session.id);
  remember();
  paintGit();
  await loadConversation();
  // The prompt, even when a question waits: the person goes to a question (Alt+Q, Tab, a click).
  if (state.session?.id === session.id && state.touches === touches) composer.focus();
}

// The shown session is usually subscribed already while its stored state is read, so events
// can arrive before the (older) answer: they are held and applied on top of it, never under it.
async function loadConversation() {
  const session = state.session;
  if (!session) return;
  const held = { sessionid: session.id, events: [] };
  state.held = held;
  changes.load(session.id);
  let loaded = null;
  try {
    const { value: [page, todos, fresh], heard } = await hearingStatuses(() => Promise.all([
      api('sessions_messages', { id: session.id, query: { limit: MESSAGE_PAGE } }),
      api('sessions_todos', { id: session.id }),
      api('sessions_read', { id: session.id }),
    ]));
    if (heard.has(session.id)) fresh.status = heard.get(session.id);
    loaded = { page, todos, fresh };
  } catch (error) {
    toast(error.message);
  }
  if (state.held === held) state.held = null;
  if (state.session?.id !== session.id) return; // another session was chosen meanwhile
  if (loaded) {
    Object.assign(session, loaded.fresh);
    conversation.load(loaded.page.messages, loaded.page.more);
    paintUsage();
    if (session.status === 'error' && session.error && !conversation.hasEndMark()) conversation.showError(session.error, false);
    renderTodos(loaded.todos.items);
  }
  for (const event of held.events) {
    // A run that is over is read with where it stopped and its error (on its last message, or
    // shown just above): an error heard while it was read is that one, and would show twice.
    if (event.type === EVENTS.ERROR && loaded && session.status !== 'running') continue;
    applyToConversation(event);
  }
  if (loaded && session.status === 'running') {
    // Stored text of a streaming part lags by up to a second: the server sends the open parts
    // again with their text so far, and the whole conversation is read again when the run ends.
    socket.resubscribe(session.id);
    conversation.stale = true;
  }
  paintSession();
}

async function loadEarlier() {
  const session = state.session;
  if (!session || !conversation.oldest) return;
  try {
    const page = await api('sessions_messages', { id: session.id, query: { before: conversation.oldest, limit: MESSAGE_PAGE } });
    if (state.session?.id === session.id) conversation.prepend(page.messages, page.more);
  } catch (error) {
    toast(error.message);
  }
}

async function newSession(firstPrompt) {
  if (!state.project) return;
  try {
    const session = await api('sessions_create', { body: { projectid: state.project.id } });
    addSession(session);
    setDrawer('side', false); // done with the list: the new session, and its questions, in view
    composer.carry = !!firstPrompt; // the new session takes the prompt box as it is
    await selectSession(session);
    if (firstPrompt) await sendPrompt(firstPrompt);
  } catch (error) {
    toast(error.message);
  } finally {
    composer.carry = false;
  }
}

// A session that works in a git worktree of its own, on a branch named after it.
async function newWorktreeSession(name) {
  if (!state.project) return;
  const session = await api('sessions_create', { body: { projectid: state.project.id, worktree: true, ...(name ? { name } : {}) } });
  addSession(session);
  setDrawer('side', false);
  await selectSession(session);
  toast(`“${session.name}” works in a worktree of its own`, 'info');
}

function addSession(session) {
  if (state.sessions.some((s) => s.id === session.id)) return;
  state.sessions.unshift(session);
  socket.subscribe(session.id);
  paintSessions();
}

async function rename(session, name) {
  try {
    Object.assign(session, await api('sessions_update', { id: session.id, body: { name } }));
  } catch (error) {
    toast(error.message);
  }
  paintSessions();
  paintSession();
}

// Asked first, in the page's dialog; a session that still runs a job, or whose file changes are
// still on disk, says so in the question.
async function removeSession(session) {
  const [jobs, diff] = await Promise.all([
    api('sessions_jobs', { id: session.id }).catch(() => []),
    api('sessions_diff', { id: session.id }).catch(() => []),
  ]);
  const running = jobs.filter((job) => job.status === 'running').length;
  const busy = [
    session.status === 'running' ? 'it is running now' : '',
    running ? `${plural(running, 'background job')} still running (stopped with it)` : '',
    diff.length ? `it changed ${plural(diff.length, 'file')} (the files stay as they are now)` : '',
  ].filter(Boolean);
  const confirmed = await confirmAction({
    title: 'Remove this session?',
    question: `Remove “${session.name}”${busy.length ? `: ${busy.join('; ')}` : ''}?`,
    details: [h('p', null, 'Its conversation is deleted; this cannot be undone.'),
      diff.length ? h('ul', { className: 'confirm-files' }, diff.slice(0, 20).map((file) => h('li', null, h('code', null, file.path)))) : null],
    action: 'Remove', danger: true,
  });
  if (!confirmed) return;
  try {
    await api('sessions_remove', { id: session.id, post: true });
  } catch (error) {
    toast(error.message);
    return;
  }
  dropSession(session.id);
}

function dropSession(sessionid) {
  state.sessions = state.sessions.filter((s) => s.id !== sessionid);
  socket.unsubscribe(sessionid);
  questions.forget(sessionid);
  if (state.session?.id === sessionid) {
    if (state.sessions[0]) selectSession(state.sessions[0]);
    else showEmptySession();
  } else paintSessions();
}

async function forget(project) {
  const confirmed = await confirmAction({
    title: 'Forget this project?', question: `Forget “${project.name}”?`,
    details: [h('p', null, 'Its sessions and their conversations are deleted; the folder ', h('code', null, project.path), ' stays as it is.')],
    action: 'Forget', danger: true,
  });
  if (!confirmed || !await forgetProject(project)) return;
  state.projects = state.projects.filter((p) => p.id !== project.id);
  if (state.project?.id === project.id) {
    socket.unsubscribeAll();
    questions.forget();
    state.project = null;
    state.sessions = [];
    state.sessionsMore = false;
    showEmptySession();
  }
  paintProjects();
}

// -- undo, redo and fork ---------------------------------------------------------------------

// Undo a message and the ones after it: their file changes are taken back; a file changed since
// (by hand, or by another session) is a conflict, left as it is unless `force`.
async function undo(messageid, force = false) {
  const session = state.session;
  if (!session) return;
  const prompt = conversation.promptOf(messageid); // read before the conversation is read again
  const box = composer.mark();
  const result = await changingFiles(session, () => api('sessions_undo', {
    id: session.id, body: { messageid, ...(force ? { force: true } : {}) } }));
  if (!result) return;
  report('Undo', result, () => undo(messageid, true));
  composer.offer(prompt, box); // an undone prompt comes back to the box, to change and send again
}

async function redo(force = false) {
  const session = state.session;
  if (!session) return;
  const result = await changingFiles(session, () => api('sessions_redo', {
    id: session.id, body: force ? { force: true } : {} }));
  if (result) report('Redo', result, () => redo(true)); // its bar hidden gives the keyboard on (paintSession)
}

// An undo or a redo, then the conversation read again; null when it failed or another
// session was chosen meanwhile.
async function changingFiles(session, call) {
  state.changing += 1;
  try {
    const result = await call();
    if (state.session?.id !== session.id) return null;
    await loadConversation();
    return result;
  } catch (error) {
    toast(error.message);
    return null;
  } finally {
    state.changing -= 1;
  }
}

async function fork(messageid) {
  const session = state.session;
  if (!session) return;
  try {
    const fresh = await api('sessions_fork', { id: session.id, body: { messageid } });
    addSession(fresh);
    await selectSession(fresh);
    toast(`Forked as “${fresh.name}”`, 'info');
  } catch (error) {
    toast(error.message);
  }
}

// What an undo or a redo restored; the files it left as they are stay listed above the prompt,
// with a way to restore the conflicting ones anyway (`retry`).
function report(what, { restored = [], conflicts = [], lost = [] }, retry) {
  if (!conflicts.length && !lost.length) {
    clearNotice();
    const count = restored.length;
    toast(count ? `${what}: ${count} file${count > 1 ? 's' : ''} restored` : `${what}: no file to restore`, 'info');
    return;
  }
  const notice = byId('change-notice');
  const left = conflicts.length + lost.length;
  const item = (kind) => (file) => h('li', { className: kind, dataset: { path: file.path } },
    h('code', null, file.path), ` — ${file.reason}`);
  notice.replaceChildren(
    h('div', null, h('strong', null, `${what} left ${left} file${left > 1 ? 's' : ''} as ${left > 1 ? 'they are' : 'it is'}`),
      restored.length ? ` (${restored.length} restored)` : ''),
    h('ul', null, conflicts.map(item('conflict')), lost.map(item('lost'))),
    h('div', { className: 'actions' },
      conflicts.length ? h('button', { type: 'button', className: 'small danger', onclick: () => { clearNotice(); retry(); } },
        'Restore anyway') : null,
      h('button', { type: 'button', className: 'small', onclick: clearNotice }, 'Dismiss')));
  notice.hidden = false;
}

function clearNotice() {
  const notice = byId('change-notice');
  notice.hidden = true;
  notice.replaceChildren();
}

function openChange(path) {
  if (state.session) changes.show(path);
}

// -- prompts ---------------------------------------------------------------------------------

async function sendPrompt(body, { fromComposer = true } = {}) {
  if (!body.model) {
    toast(state.catalog.providers.length ? 'Choose a model first' : 'Add a model provider first');
    providers.show({ add: !state.catalog.providers.length });
    return;
  }
  if (!state.session) {
    await newSession(body);
    return;
  }
  conversation.follow(); // your message, and the answer after it, in view
  attention.askOnce(); // the person's own click: the one moment to ask for notifications
  const sessionid = state.session.id;
  try {
    await api('sessions_prompt', { id: sessionid, body });
    localStorage.setItem('totem.model', body.model);
    if (fromComposer) composer.clear(sessionid); // a retry leaves what is being written
  } catch (error) {
    toast(error.message);
  }
}

// Retry of a failed run: its prompt sent again, with the model and mode chosen now (a model
// changed in Providers after the error is the one that runs).
async function retry() {
  const text = conversation.lastPrompt();
  if (!text) {
    toast('There is no prompt to send again: write one below');
    return;
  }
  await sendPrompt({ ...composer.choices(), text }, { fromComposer: false });
}

// A queued prompt taken back before it ran.
async function unqueue(messageid) {
  const session = state.session;
  if (!session) return;
  try {
    await api('sessions_unqueue', { id: session.id, body: { messageid } });
    if (state.session?.id === session.id) conversation.removeMessage(messageid);
  } catch (error) {
    toast(error.message);
    if (state.session?.id === session.id) loadConversation(); // it ran already, or was taken back elsewhere
  }
}

// Sessions|compact: the session's model summarizes the conversation now (a run of one step).
async function compact() {
  const session = state.session;
  if (!session || session.status === 'running') return;
  conversation.follow();
  try {
    await api('sessions_compact', { id: session.id, post: true });
  } catch (error) {
    toast(error.message);
  }
}

// After a run: the session's tokens and those of its newest answers, read again.
async function refreshUsage() {
  const session = state.session;
  if (!session) return;
  try {
    const [fresh, page] = await Promise.all([
      api('sessions_read', { id: session.id }),
      api('sessions_messages', { id: session.id, query: { limit: USAGE_PAGE } }),
    ]);
    if (state.session?.id !== session.id) return;
    session.tokens = fresh.tokens;
    conversation.refresh(page.messages);
    paintUsage();
  } catch {
    // the figures stay as they were until the session is read again
  }
}

async function abort() {
  if (state.session?.status !== 'running') return;
  try {
    await api('sessions_abort', { id: state.session.id, post: true });
  } catch (error) {
    if (error.status !== 400) toast(error.message); // 400: it had just ended
  }
}

async function loadCatalog() {
  try {
    state.catalog = await api('providers_catalog');
  } catch (error) {
    toast(error.message);
    return;
  }
  composer.setCatalog(state.catalog, state.session?.model);
  paintFirstRun();
  paintUsage();
}

// -- events ----------------------------------------------------------------------------------

function onEvent(event) {
  const { type, sessionid, data } = event;
  const current = sessionid && sessionid === state.session?.id;
  switch (type) {
    case EVENTS.SESSION_STATUS: {
      for (const heard of state.hearing) heard.set(sessionid, data.status);
      schedules.sessionChanged(sessionid);
      const session = state.sessions.find((s) => s.id === sessionid);
      if (!session) return;
      if (session.status === 'running' && data.status !== 'running' && !session.parent) attention.runEnded(session, data.status);
      session.status = data.status;
      paintSessions();
      if (!current) return;
      paintSession();
      if (data.status === 'running') {
        clearNotice();
        if (conversation.hasQueued()) loadConversation(); // a queued prompt is the one that runs now
      } else {
        if (data.status === 'aborted') conversation.clearQueued(); // not run after an abort
        if (data.status === 'aborted' || data.status === 'error') conversation.markEnded(data.status);
        jobs.load();
        servers.load();
        refreshFiles();
        if (conversation.stale) loadConversation();
        else refreshUsage();
      }
      return;
    }
    case EVENTS.SESSION_UPDATED: {
      const { session } = data;
      if (session.removed) {
        if (state.sessions.some((s) => s.id === session.id)) dropSession(session.id);
        return;
      }
      const known = state.sessions.find((s) => s.id === session.id);
      const redoChanged = !!known && !!known.redo !== !!session.redo;
      const optionsChanged = !!known && (known.mode !== session.mode || known.autoaccept !== session.autoaccept);
      if (known) Object.assign(known, session);
      else if (session.projectid === state.project?.id) addSession(session);
      paintSessions();
      if (!current) return;
      paintSession();
      if (optionsChanged) composer.useSession(known); // a prompt from elsewhere (a schedule, a tab) ran with them
      if (session.worktree) refreshGit();
      // An undo or a redo (maybe in another tab) changed what is taken back; a new prompt
      // removed the messages an undo took back.
      if (!state.changing && (redoChanged || conversation.hasReverted())) loadConversation();
      return;
    }
    case EVENTS.DIFF_UPDATED: {
      if (!state.sessions.some((s) => s.id === sessionid)) return;
      refreshFiles(); // the files of the project changed, whichever session changed them
      if (current) refreshChanges();
      return;
    }
    case EVENTS.TERMINAL_OUTPUT: {
      terminal.output(sessionid, data.text);
      if (current) refreshFiles(TERMINAL_QUIET_MS); // what the person types may change files: read once it is quiet
      return;
    }
    case EVENTS.TERMINAL_EXIT: terminal.exited(sessionid, data.status); return;
    case EVENTS.PERMISSION_ASK:
      questions.askPermission(sessionid, { ...data, sessionid });
      attention.question(state.sessions.find((s) => s.id === sessionid), data.id, `Allow ${data.tool}? ${data.reason ?? ''}`.trim());
      return;
    case EVENTS.QUESTION_ASK:
      questions.askQuestion(sessionid, { ...data, sessionid });
      attention.question(state.sessions.find((s) => s.id === sessionid), data.id, data.text ?? '');
      return;
    case EVENTS.PERMISSION_REPLIED:
    case EVENTS.QUESTION_REPLIED: questions.remove(sessionid, data.id); return;
    default:
  }
  if (!current) return;
  if (state.held?.sessionid === sessionid) state.held.events.push(event);
  else applyToConversation(event);
}

function applyToConversation({ type, data }) {
  if ((type === EVENTS.PART_UPDATED || type === EVENTS.PART_CREATED) && data.part?.data?.background) jobs.load(); // a job started
  if ((type === EVENTS.PART_UPDATED || type === EVENTS.PART_CREATED) && data.part?.data?.tool === 'mcp-start'
      && ['done', 'denied', 'error'].includes(data.part.status)) refreshServers(); // a start was decided
  switch (type) {
    case EVENTS.MESSAGE_CREATED: conversation.addMessage(data.message); break;
    case EVENTS.PART_CREATED: conversation.addPart(data.part); break;
    case EVENTS.PART_DELTA: conversation.delta(data.partid, data.text); break;
    case EVENTS.PART_UPDATED: conversation.updatePart(data.part); break;
    case EVENTS.PART_CLOSED: conversation.closePart(data.partid); break;
    case EVENTS.TODO_UPDATED: renderTodos(data.items); break;
    case EVENTS.ERROR: conversation.showError(data.message, data.retry); break;
    default: // terminal events go to the Terminal panel (onEvent)
  }
}

function paintGit() {
  git.load(state.project, state.session);
}

// Projects|git read: a repository offers sessions in worktrees; a worktree's branch by the title.
function paintGitState(folder, worktree) {
  worktreeForm.offer(!!folder?.repository && !folder.refused);
  const badge = byId('session-branch');
  badge.hidden = !worktree || !state.session?.worktree;
  badge.textContent = worktree ? `⎇ ${worktree.branch || '(detached)'}` : '';
}

function worktreeMerged(result, session) {
  const count = result.files?.length ?? 0;
  toast(`Merged “${session.name}” into ${result.into}: ${count} file${count === 1 ? '' : 's'}`, 'info');
  if (state.project) tree.load(state.project.id);
  if (state.session?.id === session.id) changes.load(session.id);
}

function worktreeDiscarded(fresh, branch) {
  const known = state.sessions.find((s) => s.id === fresh.id);
  if (known) Object.assign(known, fresh);
  paintSessions();
  paintSession();
  toast(`Discarded the worktree and ${branch}`, 'info');
  if (state.session?.id === fresh.id) changes.load(fresh.id);
}

// Only the Git panel, once a burst of session updates has passed.
function refreshGit() {
  clearTimeout(gitOnlyTimer);
  gitOnlyTimer = setTimeout(paintGit, GIT_REFRESH_MS);
}

// Git and the file tree, read again once a burst of changes has passed.
function refreshFiles(quiet = GIT_REFRESH_MS) {
  clearTimeout(gitTimer);
  gitTimer = setTimeout(() => {
    if (!state.project) return;
    paintGit();
    tree.load(state.project.id);
  }, quiet);
}

function refreshServers() {
  clearTimeout(serversTimer);
  serversTimer = setTimeout(() => servers.load(), SERVERS_REFRESH_MS);
}

function refreshChanges() {
  clearTimeout(changesTimer);
  changesTimer = setTimeout(() => { if (state.session) changes.load(state.session.id); }, CHANGES_REFRESH_MS);
}

// After a reconnect: read the stored state again; the socket subscribes once this is done.
async function resync(reconnected) {
  if (!reconnected) return;
  questions.forget(); // the server sends the waiting ones again on subscribe
  try {
    state.projects = await api('projects');
    paintProjects();
    loadCatalog();
    if (!state.project) return;
    if (!state.projects.some((p) => p.id === state.project.id)) { // forgotten meanwhile
      socket.unsubscribeAll();
      state.project = null;
      state.sessions = [];
      state.sessionsMore = false;
      showEmptySession();
      paintProjects();
      return;
    }
    await readFirstSessions(state.project.id, state.session?.id);
    loadScheduleNames(state.project.id);
    for (const id of [...socket.subscriptions]) if (!state.sessions.some((s) => s.id === id)) socket.unsubscribe(id);
    for (const session of state.sessions) socket.subscribe(session.id);
    const fresh = state.sessions.find((s) => s.id === state.session?.id);
    if (fresh) {
      state.session = fresh;
      await loadConversation();
    } else if (state.session) {
      showEmptySession(); // removed meanwhile
    }
    paintSessions();
    paintSession();
    paintGit();
    tree.load(state.project.id);
  } catch (error) {
    toast(error.message);
  }
}

// -- drawers (narrow screens) ----------------------------------------------------------------

// Under 1000px the right column is a drawer, under 700px the left one too: each opens from its
// toggle in the top bar and closes from it again, with Escape, or (the left one) once a session
// or project is chosen or a new session made. On a wide screen the toggles are not shown and the classes do nothing.
function setDrawer(name, open) {
  const other = name === 'side' ? 'panels' : 'side';
  if (open) setDrawer(other, false);
  // Closed with the keyboard inside it (Escape, or an action that closes it): the keyboard goes
  // back to its toggle rather than to the page's start, the drawer's controls being hidden.
  if (!open && document.body.classList.contains(`show-${name}`) && byId(name).contains(document.activeElement)) {
    byId(`toggle-${name}`).focus();
  }
  document.body.classList.toggle(`show-${name}`, open);
  byId(`toggle-${name}`).setAttribute('aria-expanded', String(open));
  questions.recheck(); // a question under an open drawer cannot be answered
}

// The open drawer that lies over this box of the screen, by name (questions under it wait).
// Only a drawer that floats counts: on a wide screen the columns sit beside the conversation.
function drawerOver(box) {
  for (const [name, label] of [['side', 'the Sessions list'], ['panels', 'the panels']]) {
    const drawer = byId(name);
    if (!document.body.classList.contains(`show-${name}`) || getComputedStyle(drawer).position !== 'fixed') continue;
    const over = drawer.getBoundingClientRect();
    if (over.width && over.left < box.right && over.right > box.left && over.top < box.bottom && over.bottom > box.top) {
      return label;
    }
  }
  return null;
}
byId('toggle-side').addEventListener('click', () => setDrawer('side', !document.body.classList.contains('show-side')));
byId('toggle-panels').addEventListener('click', () => {
  const open = !document.body.classList.contains('show-panels');
  setDrawer('panels', open);
  if (open) servers.load(); // what the servers became meanwhile
});
// Under 700px the header's buttons are in a menu: it closes once one is chosen, with Escape,
// or with a click elsewhere.
function setMenu(open) {
  document.body.classList.toggle('show-menu', open);
  byId('toggle-menu').setAttribute('aria-expanded', String(open));
}
byId('toggle-menu').addEventListener('click', () => setMenu(!document.body.classList.contains('show-menu')));
byId('top-menu').addEventListener('click', (event) => { if (event.target.closest('button')) setMenu(false); });
document.addEventListener('pointerdown', (event) => {
  if (document.body.classList.contains('show-menu') && !event.target.closest('#top-menu, #toggle-menu')) setMenu(false);
});
byId('side').addEventListener('click', (event) => {
  if (event.target.closest('#sessions li:not(.more), #projects li') && !event.target.closest('button, input')) setDrawer('side', false);
}, { capture: true }); // before the row's own handler repaints the list

// -- keyboard and buttons --------------------------------------------------------------------

for (const type of ['pointerdown', 'keydown']) document.addEventListener(type, () => { state.touches += 1; }, true);

// Alt+Q moves the keyboard to the question that waits (the next one from a question), closing
// the drawers (one may lie over it). Caught before the page's fields and the terminal (whose shell would read
// Meta-q), and only while a question is on screen: otherwise the key is theirs.
document.addEventListener('keydown', (event) => {
  if (!reachesQuestions(event) || document.querySelector('dialog[open]') || !byId('questions').querySelector('.ask')) return;
  event.preventDefault();
  event.stopPropagation();
  setDrawer('side', false);
  setDrawer('panels', false);
  questions.enter();
}, true);

document.addEventListener('keydown', (event) => {
  if (event.key === 'Escape' && document.body.classList.contains('show-menu') && !document.querySelector('dialog[open]')) {
    event.preventDefault();
    setMenu(false);
    byId('toggle-menu').focus();
    return;
  }
  const drawer = document.body.classList.contains('show-side') ? 'side' : document.body.classList.contains('show-panels') ? 'panels' : null;
  if (event.key === 'Escape' && drawer && !document.querySelector('dialog[open]')) {
    event.preventDefault();
    setDrawer(drawer, false);
    return;
  }
  if (event.key === 'Escape' && !document.querySelector('dialog[open]') && state.session?.status === 'running'
      && !event.target.closest?.('#terminal-panel')) { // Escape in the terminal is the shell's
    event.preventDefault();
    abort();
  }
});
// A dialog gives the keyboard back to what opened it; when that is gone (the first run's button,
// hidden once a provider is saved), to the next step instead of the page's start.
for (const dialog of document.querySelectorAll('dialog')) {
  dialog.addEventListener('close', () => setTimeout(() => {
    // After the browser has given the focus back (a task later): only when it found nothing
    // to give it to, or left it on a hidden element.
    if (focusIsShown()) return;
    focusNextStep();
  }));
}
for (const id of ['open-folder', 'welcome-open']) {
  byId(id).addEventListener('click', () => folders.show(state.project?.path));
}
byId('new-session').addEventListener('click', () => newSession());
byId('open-providers').addEventListener('click', () => providers.show());
byId('open-rules').addEventListener('click', () => { if (state.project) rules.show(state.project); });
byId('open-settings').addEventListener('click', () => settings.show());
byId('session-settings').addEventListener('click', () => { if (state.session) settings.show('session'); });
byId('open-schedules').addEventListener('click', () => { if (state.project) schedules.show(state.project); });
byId('git-refresh').addEventListener('click', paintGit);
byId('diff-refresh').addEventListener('click', () => { if (state.session) changes.load(state.session.id); });
byId('redo').addEventListener('click', () => redo());
byId('session-compact').addEventListener('click', compact);
enableExports({ session: () => state.session, project: () => state.project,
  onImported: (session) => openSessionById(session.id) });
byId('first-run-add').addEventListener('click', () => providers.show({ add: true }));
byId('first-run-detect').addEventListener('click', () => providers.show({ detect: true }));
// Back to this page after working elsewhere (an editor, a shell): files may have changed.
window.addEventListener('focus', () => { if (state.project) refreshFiles(); });
byId('files-refresh').addEventListener('click', () => { if (state.project) tree.load(state.project.id); });
byId('sign-out').addEventListener('click', async () => {
  await api('logout', { post: true }).catch(() => {});
  location.href = '/login';
});

// -- the address -----------------------------------------------------------------------------

// The page's address is #/<projectid>/<sessionid>: a link to another session (a sub-agent's, its
// parent's) or Back and Forward open what it names. remember() replaces the address without an event.
async function followAddress() {
  const [, projectid, sessionid] = location.hash.split('/');
  if (!projectid) return;
  if (projectid === state.project?.id) {
    if (sessionid && sessionid !== state.session?.id) await openSessionById(sessionid);
    return;
  }
  const project = state.projects.find((p) => p.id === projectid);
  if (project) await selectProject(project, sessionid);
}
window.addEventListener('hashchange', () => { followAddress().catch((error) => toast(error.message)); });

// -- start -----------------------------------------------------------------------------------

// The header's mark of the sandbox of commands: which protections hold (Account|read).
function paintSandbox(status) {
  const mark = byId('sandbox-mark');
  if (!status) return;
  if (status.probing) { // the first seconds after a start: what holds is known once the probe ends
    mark.dataset.state = 'checking';
    mark.textContent = 'Sandbox: checking…';
    mark.title = 'Totem is finding out which protections this machine offers.';
    mark.hidden = false;
    api('account', { query: { wait: 'sandbox' } }).then((account) => paintSandbox(account.sandbox))
      .catch((error) => toast(error.message));
    return;
  }
  const missing = Object.entries(status.missing ?? {});
  mark.dataset.state = status.mode === 'off' ? 'off' : missing.length ? 'partial' : 'full';
  mark.textContent = status.mode === 'off' ? 'Sandbox off' : missing.length ? 'Sandbox: partial' : 'Sandboxed';
  mark.title = status.mode === 'off' ? 'sandbox = off in config.ini: commands run with all your rights'
    : [`Commands run under ${(status.layers ?? []).join(' + ') || 'nothing'} (sandbox = ${status.mode}).`,
      `Holds: ${(status.holds ?? []).join(', ') || 'nothing'}.`,
      ...missing.map(([name, why]) => `Not held: ${name} (${why}).`)].join('\n');
  mark.hidden = false;
}

async function start() {
  const account = await api('account');
  byId('sign-out').hidden = !account.token;
  paintSandbox(account.sandbox);
  socket.connect();
  const [projects] = await Promise.all([api('projects'), loadCatalog()]);
  state.projects = projects;
  paintProjects();
  const [, projectid, sessionid] = location.hash.split('/');
  const wanted = projectid || localStorage.getItem(LAST_PROJECT_KEY);
  const project = state.projects.find((p) => p.id === wanted) ?? state.projects[0];
  if (project) await selectProject(project, sessionid);
  else paintSession();
}

start().catch((error) => toast(error.message));
