// Totem's page: projects, sessions and their messages, kept live over the WebSocket.
import { EVENTS, CLIENT } from '/events.js';

const state = { projects: [], sessions: [], project: null, session: null, socket: null, retry: 0 };
const $ = (id) => document.getElementById(id);

async function api(name, { id, query, body } = {}) {
  let url = `/api/${name}${id ? `/${encodeURIComponent(id)}` : ''}`;
  if (query) url += `?${new URLSearchParams(query)}`;
  const options = body === undefined ? {} : {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  };
  const response = await fetch(url, options);
  if (response.status === 401) {
    location.href = '/login';
    throw new Error('signed out');
  }
  const data = await response.json();
  if (!response.ok) throw new Error(data.map((p) => (p.name ? `${p.name}: ${p.error}` : p.error)).join('; '));
  return data;
}

function notice(text) {
  $('notice').textContent = text || '';
  $('notice').hidden = !text;
}

function item(label, status, active, onClick) {
  const li = document.createElement('li');
  const name = document.createElement('span');
  name.textContent = label;
  li.append(name);
  if (status) {
    const badge = document.createElement('span');
    badge.className = 'status';
    badge.textContent = status;
    li.append(badge);
  }
  if (active) li.classList.add('active');
  li.addEventListener('click', onClick);
  return li;
}

function renderProjects() {
  $('projects').replaceChildren(...state.projects.map((p) =>
    item(p.name, '', state.project?.id === p.id, () => selectProject(p))));
  $('new-session').disabled = !state.project;
}

function renderSessions() {
  $('sessions').replaceChildren(...state.sessions.map((s) =>
    item(s.name, s.status, state.session?.id === s.id, () => selectSession(s))));
}

async function loadProjects() {
  state.projects = await api('projects');
  renderProjects();
}

async function selectProject(project) {
  state.project = project;
  state.session = null;
  renderProjects();
  state.sessions = await api('sessions', { query: { projectid: project.id } });
  renderSessions();
}

async function selectSession(session) {
  if (state.session) send({ type: CLIENT.UNSUBSCRIBE, sessionid: state.session.id });
  state.session = session;
  renderSessions();
  $('session-title').textContent = session.name;
  $('session-title').classList.remove('muted');
  const { messages } = await api('sessions_messages', { id: session.id });
  $('messages').replaceChildren(...messages.map((m) => {
    const li = document.createElement('li');
    li.textContent = `${m.role}: ${m.parts.map((p) => p.text).join('')}`;
    return li;
  }));
  send({ type: CLIENT.SUBSCRIBE, sessionid: session.id });
}

function send(message) {
  if (state.socket?.readyState === WebSocket.OPEN) state.socket.send(JSON.stringify(message));
}

function onEvent(event) {
  if (event.type === EVENTS.SESSION_STATUS || event.type === EVENTS.SESSION_UPDATED) {
    const index = state.sessions.findIndex((s) => s.id === event.sessionid);
    const session = event.data.session;
    if (session?.removed) {
      if (index >= 0) state.sessions.splice(index, 1);
    } else if (index >= 0) {
      Object.assign(state.sessions[index], session || { status: event.data.status });
    } else if (session && session.projectid === state.project?.id) {
      state.sessions.unshift(session);
    }
    renderSessions();
  }
}

function connect() {
  const socket = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws/`);
  state.socket = socket;
  socket.addEventListener('open', () => {
    state.retry = 0;
    $('connection').textContent = 'connected';
    if (state.session) selectSession(state.session);
  });
  socket.addEventListener('message', (message) => onEvent(JSON.parse(message.data)));
  socket.addEventListener('close', () => {
    $('connection').textContent = 'reconnecting…';
    const delay = Math.min(10000, 500 * 2 ** state.retry++);
    setTimeout(connect, delay);
  });
}

$('open-project').addEventListener('submit', async (event) => {
  event.preventDefault();
  try {
    const project = await api('projects_open', { body: { path: $('project-path').value } });
    notice('');
    await loadProjects();
    await selectProject(project);
  } catch (error) {
    notice(error.message);
  }
});

$('new-session').addEventListener('click', async () => {
  try {
    const session = await api('sessions_create', { body: { projectid: state.project.id } });
    if (!state.sessions.some((s) => s.id === session.id)) state.sessions.unshift(session);
    await selectSession(session);
  } catch (error) {
    notice(error.message);
  }
});

loadProjects().catch((error) => notice(error.message));
connect();
