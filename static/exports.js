// Export a session (a JSON file to import in another Totem, or Markdown to read) and import one
// into the open project: Sessions|export and Sessions|import.
import { api } from '/api.js';
import { byId, toast } from '/dom.js';

// A file name from the session's name: letters, digits, - and _ kept, at most 80 of them.
function fileName(session, extension) {
  const base = session.name.replace(/[^\p{L}\p{N}_-]+/gu, '-').replace(/^-+|-+$/g, '').slice(0, 80) || 'session';
  return `${base}.${extension}`;
}

function download(text, name, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = Object.assign(document.createElement('a'), { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 0); // after the click has taken it
}

async function exportSession(session, format) {
  try {
    const answer = await api('sessions_export', { id: session.id, query: { format } });
    if (format === 'markdown') download(answer.markdown, fileName(session, 'md'), 'text/markdown');
    else download(JSON.stringify(answer, null, 1), fileName(session, 'json'), 'application/json');
  } catch (error) {
    toast(error.message);
  }
}

async function importFile(file, project, onImported) {
  let document;
  try {
    document = JSON.parse(await file.text());
  } catch {
    toast(`${file.name} is not a JSON export of a session.`);
    return;
  }
  try {
    const session = await api('sessions_import', { body: { projectid: project.id, session: document } });
    toast(`Imported “${session.name}”.`, 'info');
    onImported(session);
  } catch (error) {
    toast(error.message);
  }
}

// A button that opens a small menu under it: a click or Enter opens it with the focus on its
// first item, arrows move, Escape or a click elsewhere closes it. Returns its close().
function enableMenu(button, menu) {
  const items = () => [...menu.querySelectorAll('[role=menuitem]')];
  const close = (refocus = false) => {
    menu.hidden = true;
    button.setAttribute('aria-expanded', 'false');
    if (refocus) button.focus();
  };
  button.addEventListener('click', () => {
    if (!menu.hidden) { close(); return; }
    menu.hidden = false;
    button.setAttribute('aria-expanded', 'true');
    items()[0]?.focus();
  });
  menu.addEventListener('keydown', (event) => {
    const list = items();
    const at = list.indexOf(document.activeElement);
    if (event.key === 'Escape') { event.preventDefault(); close(true); }
    if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      event.preventDefault();
      list[(at + (event.key === 'ArrowDown' ? 1 : list.length - 1)) % list.length]?.focus();
    }
  });
  document.addEventListener('click', (event) => {
    if (!menu.hidden && !menu.contains(event.target) && event.target !== button) close();
  });
  return close;
}

// session(), project(): the open ones; onImported(session): open the new one.
export function enableExports({ session, project, onImported }) {
  const close = enableMenu(byId('session-export-open'), byId('session-export-items'));
  byId('session-export').addEventListener('click', () => { close(); if (session()) exportSession(session(), 'json'); });
  byId('session-export-md').addEventListener('click', () => { close(); if (session()) exportSession(session(), 'markdown'); });
  const input = byId('import-file');
  byId('import-session').addEventListener('click', () => { if (project()) input.click(); });
  input.addEventListener('change', () => {
    const [file] = input.files;
    input.value = ''; // the same file may be chosen again
    if (file && project()) importFile(file, project(), onImported);
  });
}
