// The prompt box: text, model, mode, auto-accept, reasoning level and attached files.
//
// Enter sends, Shift+Enter starts a new line; `/new` starts a new session (with the rest of the
// line as its first prompt). Files come from the picker, a paste or a drop, and travel as base64.
// While a run goes on, Send queues the prompt behind it, and Steer (Ctrl+Enter) hands it to the
// running step. The draft (text and files) belongs to its session: switching sessions keeps each.
// Typing `/` at the start lists the project's commands (Projects|commands); `/NAME arguments`
// sends that command, and the Agent picker chooses a project agent for the prompt.
import { api } from '/api.js';
import { h, byId, formatSize, toast } from '/dom.js';
import { ModelPicker } from '/picker.js';
import { formatTokens } from '/usage.js';

const MAX_FILES = 20;
const MAX_TOTAL_BYTES = 14 * 1024 * 1024; // base64 grows by a third; the body limit is 20 MB
const MAX_TEXTAREA_PX = 240;
const LAST_MODEL_KEY = 'totem.model';
const DRAFT_KEY = 'totem.draft.'; // + session id: the words of an unsent prompt, kept across reloads

// The browser's storage may be full or off: a draft then lives as long as the page.
function storeDraft(sessionid, text) {
  if (!sessionid) return;
  try {
    if (text) localStorage.setItem(DRAFT_KEY + sessionid, text);
    else localStorage.removeItem(DRAFT_KEY + sessionid);
  } catch {
    // kept in memory only
  }
}

function storedDraft(sessionid) {
  try {
    return sessionid ? localStorage.getItem(DRAFT_KEY + sessionid) ?? '' : '';
  } catch {
    return '';
  }
}
const COMMANDS_FRESH_MS = 5000; // the project's commands are read again after this, when used
const COMMANDS_PREFIX = '.totem/commands/';
const AGENTS_PREFIX = '.totem/agents/';
const TEXT_TYPES = /\.(txt|md|py|js|mjs|ts|tsx|jsx|json|ya?ml|toml|ini|cfg|css|html|sh|go|rs|c|h|cpp|java|rb|php|sql|csv|log)$/i;

export class Composer {
  constructor({ onSend, onAbort, onNewSession }) {
    Object.assign(this, { onSend, onAbort, onNewSession });
    this.form = byId('composer');
    this.text = byId('prompt');
    this.model = new ModelPicker({ onChange: (modelid) => localStorage.setItem(LAST_MODEL_KEY, modelid) });
    this.mode = byId('mode');
    this.reasoning = byId('reasoning');
    this.autoaccept = byId('autoaccept');
    this.fileInput = byId('file-input');
    this.fileList = byId('files');
    this.sendButton = byId('send');
    this.stopButton = byId('stop');
    this.steerButton = byId('steer');
    this.files = [];
    this.running = false;
    this.busy = false;
    this.sessionid = null; // whose draft the box holds
    this.drafts = new Map(); // sessionid -> {text, files} of the sessions not shown
    this.cleared = 0; // prompts sent from the box (see mark)
    this.carry = false; // the next session shown takes the box as it is (a session made for it)

    this.form.addEventListener('submit', (event) => { event.preventDefault(); this.submit(); });
    this.stopButton.addEventListener('click', () => this.onAbort());
    this.steerButton.addEventListener('click', () => this.submit({ steer: true }));
    byId('attach').addEventListener('click', () => this.fileInput.click());
    this.text.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.submit({ steer: this.running && (event.ctrlKey || event.metaKey) });
      }
    });
    this.text.addEventListener('input', () => {
      this.fit();
      storeDraft(this.sessionid, this.text.value);
    });
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
    this.setupCommands();
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

  // While a run goes on, Send queues the prompt behind it and Steer sends it into the run.
  setRunning(running) {
    this.running = running;
    this.stopButton.hidden = !running;
    this.steerButton.hidden = !running;
    this.sendButton.textContent = running ? 'Queue' : 'Send';
    this.sendButton.title = running ? 'Send it after the current run (it waits in the conversation until then; you can take it back)' : '';
  }

  // The session shown (or null: none yet): its own choices, and its draft in the box.
  useSession(session) {
    const id = session?.id ?? null;
    if (id !== this.sessionid) {
      if (this.carry) this.carry = false; // the box goes with the new session
      else {
        this.keepDraft(this.sessionid);
        this.restoreDraft(id);
      }
      this.sessionid = id;
    }
    if (!session) return;
    this.mode.value = session.mode || 'build';
    this.autoaccept.checked = !!session.autoaccept;
    if (session.model) this.model.select(session.model);
  }

  // Words given back to the box (the prompt an undo took back), unless the person is writing.
  // What the box holds now, to offer a prompt later only if nothing was written or sent since
  // (an undo's answer may come after the person typed, or sent, something else).
  mark() {
    return { sessionid: this.sessionid, text: this.text.value, cleared: this.cleared };
  }

  offer(text, mark = this.mark()) {
    const untouched = mark.sessionid === this.sessionid && mark.text === this.text.value && mark.cleared === this.cleared;
    if (!untouched || this.text.value.trim() || !text) return false;
    this.text.value = text;
    storeDraft(this.sessionid, text);
    this.fit();
    this.text.focus();
    return true;
  }

  keepDraft(sessionid) {
    if (this.text.value || this.files.length) this.drafts.set(sessionid, { text: this.text.value, files: this.files });
    else this.drafts.delete(sessionid);
  }

  restoreDraft(sessionid) {
    const draft = this.drafts.get(sessionid);
    this.drafts.delete(sessionid);
    this.text.value = draft?.text ?? storedDraft(sessionid); // files are not kept across a reload
    this.files = draft?.files ?? [];
    this.showFiles();
    this.fit();
  }

  // Providers|catalog: the models by provider, searchable; a provider that failed says why.
  setCatalog(catalog, preferred) {
    this.model.setCatalog(catalog, this.model.value || preferred || localStorage.getItem(LAST_MODEL_KEY));
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

  // The prompt of this session was sent: its draft is done (in the box, or kept aside when
  // another session was chosen meanwhile).
  clear(sessionid = this.sessionid) {
    this.cleared += 1;
    storeDraft(sessionid, '');
    if (sessionid !== this.sessionid) {
      this.drafts.delete(sessionid);
      return;
    }
    this.text.value = '';
    while (this.files.length) this.dropFile(0);
    this.fit();
  }

  async submit({ steer = false } = {}) {
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
      if (text.trimStart().startsWith('/')) await this.loadCommands(); // a command typed before they came
      const body = this.body();
      if (steer && this.running) body.steer = true;
      await this.onSend(body);
    } finally {
      this.busy = false;
    }
  }

  // What is chosen for the next prompt, without its words, files or command.
  choices() {
    const choices = { model: this.model.value, mode: this.mode.value, autoaccept: this.autoaccept.checked };
    if (this.reasoning.value) choices.reasoning = this.reasoning.value;
    return choices;
  }

  body() {
    const body = { text: this.text.value, ...this.choices() };
    if (this.files.length) body.attachments = this.files.map(({ name, mime, data }) => ({ name, mime, data }));
    return this.applyCommand(body);
  }

  // -- the project's commands (`/`) and agents: Projects|commands ----------------------------

  setupCommands() {
    this.project = { key: null, at: 0, commands: [], agents: [], invalid: [] };
    this.loading = null;
    this.agent = h('select', { id: 'agent', 'aria-label': 'Agent', hidden: true,
      title: 'A project agent (.totem/agents) for the prompt: its instructions, model, mode and tools' },
    h('option', { value: '' }, 'Agent: none'));
    this.mode.after(this.agent);
    this.menu = h('ul', { id: 'command-menu', className: 'command-menu', role: 'listbox', 'aria-label': 'Commands', hidden: true });
    this.text.before(this.menu);
    this.menuItems = [];
    this.menuIndex = 0;
    this.text.addEventListener('focus', () => this.loadCommands());
    this.text.addEventListener('input', () => this.showMenu());
    this.text.addEventListener('blur', () => this.closeMenu());
    this.agent.addEventListener('focus', () => this.loadCommands());
    this.agent.addEventListener('change', () => this.useAgent());
    this.menu.addEventListener('mousedown', (event) => event.preventDefault()); // the prompt keeps the focus
    // Capture: the menu's keys come before the prompt's own (Enter sends) and the page's (Escape stops).
    this.form.addEventListener('keydown', (event) => this.menuKey(event), true);
  }

  // Projects|commands of the project (and session) in the page's address, read again when stale.
  loadCommands() {
    const [, projectid = '', sessionid = ''] = location.hash.split('/');
    if (!projectid) return Promise.resolve();
    const key = `${projectid}/${sessionid}`;
    if (this.project.key === key && (this.loading || Date.now() - this.project.at < COMMANDS_FRESH_MS)) {
      return this.loading ?? Promise.resolve();
    }
    this.project.key = key;
    const query = sessionid ? { sessionid: decodeURIComponent(sessionid) } : undefined;
    const loading = api('projects_commands', { id: decodeURIComponent(projectid), query }).then((listing) => {
      if (this.project.key !== key) return;
      Object.assign(this.project, listing, { at: Date.now() });
      this.showAgents();
      if (!this.menu.hidden) this.showMenu();
    }, (error) => {
      if (error.status !== 404) toast(error.message);
    }).finally(() => {
      if (this.loading === loading) this.loading = null;
    });
    this.loading = loading;
    return loading;
  }

  showAgents() {
    const chosen = this.agent.value;
    const invalid = this.project.invalid.filter((item) => item.file.startsWith(AGENTS_PREFIX));
    this.agent.replaceChildren(h('option', { value: '' }, 'Agent: none'),
      ...this.project.agents.map((agent) => h('option', { value: agent.name, title: agent.description || agent.file },
        `Agent: ${agent.name}`)),
      ...invalid.map((item) => h('option', { value: '', disabled: true, title: item.error },
        `${fileName(item.file, AGENTS_PREFIX)} (invalid)`)));
    this.agent.value = this.project.agents.some((agent) => agent.name === chosen) ? chosen : '';
    this.agent.hidden = !this.project.agents.length && !invalid.length;
  }

  // An agent chosen: its model and Plan mode are shown as the prompt's (the server narrows anyway).
  useAgent() {
    const agent = this.project.agents.find((item) => item.name === this.agent.value);
    if (!agent) return;
    if (agent.model) this.model.select?.(agent.model);
    if (agent.mode === 'plan') this.mode.value = 'plan';
  }

  showMenu() {
    const typed = /^\/(\S*)$/.exec(this.text.value);
    if (!typed) {
      this.closeMenu();
      return;
    }
    this.loadCommands();
    const prefix = typed[1].toLowerCase();
    const builtin = { name: 'new', description: 'Start a new session; the rest of the line is its first prompt' };
    this.menuItems = [builtin, ...this.project.commands].filter((item) => item.name.toLowerCase().startsWith(prefix));
    const invalid = this.project.invalid.filter((item) => item.file.startsWith(COMMANDS_PREFIX)
      && fileName(item.file, COMMANDS_PREFIX).toLowerCase().startsWith(prefix));
    if (!this.menuItems.length && !invalid.length) {
      this.closeMenu();
      return;
    }
    this.menuIndex = Math.min(this.menuIndex, Math.max(this.menuItems.length - 1, 0));
    this.menu.replaceChildren(
      ...this.menuItems.map((item, index) => h('li', { role: 'option', id: `command-option-${index}`,
        className: 'command-option', 'aria-selected': String(index === this.menuIndex), dataset: { name: item.name },
        onclick: () => this.chooseCommand(index) },
      h('span', { className: 'command-name' }, `/${item.name}`),
      item.description ? h('span', { className: 'command-description' }, item.description) : null,
      item.agent ? h('span', { className: 'command-agent' }, `agent: ${item.agent}`) : null)),
      ...invalid.map((item) => h('li', { role: 'option', className: 'command-option command-invalid', 'aria-disabled': 'true',
        title: item.file },
      h('span', { className: 'command-name' }, `/${fileName(item.file, COMMANDS_PREFIX)}`),
      h('span', { className: 'command-description' }, `invalid: ${item.error}`))));
    this.menu.hidden = false;
    if (this.menuItems.length) this.text.setAttribute('aria-activedescendant', `command-option-${this.menuIndex}`);
  }

  closeMenu() {
    this.menu.hidden = true;
    this.menuIndex = 0;
    this.text.removeAttribute('aria-activedescendant');
  }

  menuKey(event) {
    if (this.menu.hidden || event.target !== this.text || event.isComposing) return;
    const count = this.menuItems.length;
    if ((event.key === 'ArrowDown' || event.key === 'ArrowUp') && count) {
      event.preventDefault();
      this.menuIndex = (this.menuIndex + (event.key === 'ArrowDown' ? 1 : count - 1)) % count;
      this.showMenu();
    } else if (((event.key === 'Enter' && !event.shiftKey) || event.key === 'Tab') && count) {
      if (event.key === 'Enter' && this.text.value === `/${this.menuItems[this.menuIndex].name}`) {
        this.closeMenu(); // typed whole: Enter sends it
        return;
      }
      event.preventDefault();
      event.stopPropagation();
      this.chooseCommand(this.menuIndex);
    } else if (event.key === 'Escape') {
      event.preventDefault();
      event.stopPropagation();
      this.closeMenu();
    }
  }

  chooseCommand(index) {
    const item = this.menuItems[index];
    if (!item) return;
    this.text.value = `/${item.name} `;
    this.closeMenu();
    this.fit();
    this.focus();
  }

  // `/NAME arguments` of a command of the project is sent as that command (its model, when it
  // names one); the agent chosen goes with every prompt.
  applyCommand(body) {
    if (this.agent.value) body.agent = this.agent.value;
    const typed = /^\/(\S+)(?:\s+([\s\S]*))?$/.exec(body.text.trim());
    const command = typed && this.project.commands.find((item) => item.name === typed[1]);
    if (!command) return body;
    delete body.text;
    body.command = command.name;
    if (typed[2]?.trim()) body.arguments = typed[2].trim();
    if (command.model) body.model = command.model;
    return body;
  }
}

// The options of a model <select> from Providers|catalog (the schedules' form).
export function modelOptions(catalog) {
  const groups = catalog.providers.map((provider) => {
    const models = catalog.models.filter((m) => m.provider.id === provider.id);
    const group = h('optgroup', { label: provider.name });
    if (provider.error) group.append(h('option', { disabled: true, value: '' }, `unavailable: ${provider.error.slice(0, 80)}`));
    for (const m of models) {
      const notes = [m.context && `${m.contextguessed ? '~' : ''}${formatTokens(m.context)} context`,
        m.reasoning && 'reasoning', m.tools === false && 'no tools', m.free && 'free'].filter(Boolean);
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

// NAME of `.totem/commands/NAME.md`.
function fileName(file, prefix) {
  return file.slice(prefix.length).replace(/\.md$/, '');
}
