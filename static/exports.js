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

// session(), project(): the open ones; onImported(session): open the new one.
export function enableExports({ session, project, onImported }) {
  byId('session-export').addEventListener('click', () => { if (session()) exportSession(session(), 'json'); });
  byId('session-export-md').addEventListener('click', () => { if (session()) exportSession(session(), 'markdown'); });
  const input = byId('import-file');
  byId('import-session').addEventListener('click', () => { if (project()) input.click(); });
  input.addEventListener('change', () => {
    const [file] = input.files;
    input.value = ''; // the same file may be chosen again
    if (file && project()) importFile(file, project(), onImported);
  });
}
