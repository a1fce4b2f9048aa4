// The prompt box: text, model, mode, auto-accept, reasoning level and attached files.
//
// Enter sends, Shift+Enter starts a new line; `/new` starts a new session (with the rest of the
// line as its first prompt). Files come from the picker, a paste or a drop, and travel as base64.
import { h, byId, formatSize, toast } from '/dom.js';

const MAX_FILES = 20;
const MAX_TOTAL_BYTES = 14 * 1024 * 1024; // base64 grows by a third; the body limit is 20 MB
const MAX_TEXTAREA_PX = 240;
const LAST_MODEL_KEY = 'totem.model';
const TEXT_TYPES = /\.(txt|md|py|js|mjs|ts|tsx|jsx|json|ya?ml|toml|ini|cfg|css|html|sh|go|rs|c|h|cpp|java|rb|php|sql|csv|log)$/i;

export class Composer {
  constructor({ onSend, onAbort, onNewSession }) {
    Object.assign(this, { onSend, onAbort, onNewSession });
    this.form = byId('composer');
    this.text = byId('prompt');
    this.model = byId('model');
    this.mode = byId('mode');
    this.reasoning = byId('reasoning');
    this.autoaccept = byId('autoaccept');
    this.fileInput = byId('file-input');
    this.fileList = byId('files');
    this.sendButton = byId('send');
    this.stopButton = byId('stop');
    this.files = [];
    this.running = false;
    this.busy = false;

    this.form.addEventListener('submit', (event) => { event.preventDefault(); this.submit(); });
    this.stopButton.addEventListener('click', () => this.onAbort());
    this.text.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit();
      }
    });
    this.text.addEventListener('input', () => this.fit());
    this.text.addEventListener('paste', (event) => {
      const files = [...(event.clipboardData?.files ?? [])];
      if (files.length) {
        if (!event.clipboardData.getData('text/plain')) event.preventDefault();
        this.addFiles(files);
      }
    });
    this.fileInput.addEventListener('change', () => {
      this.addFiles([...this.fileInput.files]);
      this.fileInput.value = '';
    });
    // A file dropped anywhere on the page is attached (and never opened by the browser).
    window.addEventListener('dragover', (event) => {
      if (!event.dataTransfer?.types?.includes('Files')) return;
      event.preventDefault();
      this.form.classList.add('dropping');
    });
    window.addEventListener('dragleave', (event) => {
      if (!event.relatedTarget) this.form.classList.remove('dropping');
    });
    window.addEventListener('drop', (event) => {
      if (!event.dataTransfer?.files?.length) return;
      event.preventDefault();
      this.form.classList.remove('dropping');
      if (!this.form.hidden) this.addFiles([...event.dataTransfer.files]);
    });
    this.model.addEventListener('change', () => localStorage.setItem(LAST_MODEL_KEY, this.model.value));
  }

  fit() {
    this.text.style.height = 'auto';
    this.text.style.height = `${Math.min(this.text.scrollHeight + 2, MAX_TEXTAREA_PX)}px`;
  }

  focus() {
    this.text.focus();
  }

  insert(snippet) {
    const { selectionStart: start, selectionEnd: end, value } = this.text;
    this.text.value = value.slice(0, start) + snippet + value.slice(end);
    this.text.selectionStart = this.text.selectionEnd = start + snippet.length;
    this.fit();
    this.focus();
  }

  setRunning(running) {
    this.running = running;
    this.sendButton.hidden = running;
    this.stopButton.hidden = !running;
  }

  // The session's own choices, when it has them.
  useSession(session) {
    if (!session) return;
    this.mode.value = session.mode || 'build';
    this.autoaccept.checked = !!session.autoaccept;
    if (session.model && [...this.model.options].some((o) => o.value === session.model)) this.model.value = session.model;
  }

  // Providers|catalog: models grouped by provider; a provider that failed says why.
  setCatalog(catalog, preferred) {
    const previous = this.model.value || preferred || localStorage.getItem(LAST_MODEL_KEY);
    this.model.replaceChildren(...modelOptions(catalog));
    const ids = catalog.models.map((m) => m.id);
    this.model.value = ids.includes(previous) ? previous : ids[0] ?? '';
  }

  async addFiles(files) {
    for (const file of files) {
      if (this.files.length >= MAX_FILES) {
        toast(`At most ${MAX_FILES} files per prompt`);
        break;
      }
      const total = this.files.reduce((sum, f) => sum + f.size, 0) + file.size;
      if (total > MAX_TOTAL_BYTES) {
        toast(`${file.name} is too large: a prompt carries at most ${formatSize(MAX_TOTAL_BYTES)} of files`);
        continue;
      }
      const data = await readBase64(file);
      const mime = (file.type || (TEXT_TYPES.test(file.name) ? 'text/plain' : 'application/octet-stream')).toLowerCase();
      this.files.push({ name: file.name || 'pasted', mime, data, size: file.size,
        preview: mime.startsWith('image/') ? URL.createObjectURL(file) : null });
    }
    this.showFiles();
  }

  showFiles() {
    this.fileList.replaceChildren(...this.files.map((file, index) => h('span', { className: 'chip', title: file.mime },
      file.preview ? h('img', { src: file.preview, alt: '' }) : null,
      h('span', null, `${file.name} · ${formatSize(file.size)}`),
      h('button', { type: 'button', className: 'icon', title: `Remove ${file.name}`, 'aria-label': `Remove ${file.name}`,
        onclick: () => { this.dropFile(index); } }, '×'))));
    this.fileList.hidden = !this.files.length;
  }

  dropFile(index) {
    const [file] = this.files.splice(index, 1);
    if (file?.preview) URL.revokeObjectURL(file.preview);
    this.showFiles();
  }

  clear() {
    this.text.value = '';
    while (this.files.length) this.dropFile(0);
    this.fit();
  }

  async submit() {
    const text = this.text.value;
    const command = /^\/new(?:\s+([\s\S]*))?$/.exec(text.trim());
    if (command) {
      this.text.value = command[1] || '';
      this.fit();
      await this.onNewSession(command[1]?.trim() ? this.body() : null);
      return;
    }
    if (!text.trim() && !this.files.length) return;
    if (this.busy) return;
    this.busy = true;
    try {
      await this.onSend(this.body());
    } finally {
      this.busy = false;
    }
  }

  body() {
    const body = { text: this.text.value, model: this.model.value, mode: this.mode.value, autoaccept: this.autoaccept.checked };
    if (this.reasoning.value) body.reasoning = this.reasoning.value;
    if (this.files.length) body.attachments = this.files.map(({ name, mime, data }) => ({ name, mime, data }));
    return body;
  }
}

// The options of a model <select> from Providers|catalog (the composer's, the schedules').
export function modelOptions(catalog) {
  const groups = catalog.providers.map((provider) => {
    const models = catalog.models.filter((m) => m.provider.id === provider.id);
    const group = h('optgroup', { label: provider.name });
    if (provider.error) group.append(h('option', { disabled: true, value: '' }, `unavailable: ${provider.error.slice(0, 80)}`));
    for (const m of models) {
      const notes = [m.reasoning && 'reasoning', m.tools === false && 'no tools', m.free && 'free'].filter(Boolean);
      group.append(h('option', { value: m.id }, `${m.name || m.model}${notes.length ? ` · ${notes.join(', ')}` : ''}`));
    }
    return group;
  });
  if (!catalog.models.length) groups.unshift(h('option', { value: '', disabled: true }, 'No models: add a provider'));
  return groups;
}

function readBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(',', 2)[1] ?? '');
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}
