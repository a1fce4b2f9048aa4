// The Providers, Rules and Settings dialogs.
//
// A provider's key is write-only: the field is never filled from the server (the server never
// sends it); left empty it keeps the saved key, and "Remove the saved key" sends "".
import { api, problemText } from '/api.js';
import { h, byId, confirmButton, toast } from '/dom.js';
import { McpTokens } from '/mcptokens.js';

const SOURCES = { config: 'config.ini', all: 'all projects', project: 'this project', session: 'this session' };
const SCOPE_WORDS = { all: 'all projects', project: 'this project', session: 'this session' };
const BELOW = { all: 'config.ini', project: 'all projects (or config.ini)', session: 'the project (or all projects, or config.ini)' };
const FIELD_PROBLEMS = new Set(['value', 'key']);


function showError(id, text) {
  byId(id).textContent = text || '';
  byId(id).hidden = !text;
}

export class ProvidersDialog {
  constructor({ onChange }) {
    this.dialog = byId('providers-dialog');
    this.onChange = onChange;
    this.templates = [];
    this.editing = null; // the provider being changed, or null for a new one
    this.models = null; // the models seen with "See models"
    byId('provider-add').addEventListener('click', () => this.edit(null));
    byId('provider-cancel').addEventListener('click', () => { byId('provider-form').hidden = true; });
    byId('provider-detect').addEventListener('click', () => this.detect());
    byId('provider-check').addEventListener('click', () => this.checkModels());
    byId('provider-template').addEventListener('change', () => this.applyTemplate());
    byId('provider-form').addEventListener('submit', (event) => { event.preventDefault(); this.save(); });
  }

  // add: open the form for a new provider at once (the first run); detect: look for local servers.
  async show({ add = false, detect = false } = {}) {
    if (!this.dialog.open) this.dialog.showModal();
    byId('detected').hidden = true;
    byId('provider-form').hidden = true;
    if (!this.templates.length) {
      try {
        this.templates = await api('providers_templates');
      } catch (error) {
        toast(error.message);
      }
      byId('provider-template').replaceChildren(...this.templates.map((t) => h('option', { value: t.id }, t.name)));
    }
    await this.refresh();
    if (add) this.edit(null);
    if (detect) await this.detect();
  }

  // A kind by its name ("OpenAI-compatible"), as its template calls it.
  kindName(kind) {
    return this.templates.find((t) => t.kind === kind)?.name ?? kind;
  }

  async refresh() {
    let providers = [];
    try {
      providers = await api('providers');
    } catch (error) {
      toast(error.message);
    }
    byId('provider-list').replaceChildren(...providers.map((p) => h('li', { className: 'card', dataset: { id: p.id } },
      h('div', { className: 'grow' },
        h('strong', null, p.name), ' ', h('span', { className: 'muted provider-kind', dataset: { kind: p.kind } }, this.kindName(p.kind)),
        h('div', { className: 'muted ellipsis' }, p.url),
        h('div', { className: 'muted' }, [p.haskey ? 'key saved' : 'no key',
          p.models?.length ? `${p.models.length} chosen models` : 'every model'].join(' · '))),
      h('button', { type: 'button', onclick: () => this.edit(p) }, 'Change'),
      confirmButton('Remove', 'Remove?', () => this.remove(p), { className: 'danger' }))));
    if (!providers.length) byId('provider-list').append(h('li', { className: 'empty' }, 'No provider yet: add one, or detect a local server.'));
  }

  template(kind) {
    return this.templates.find((t) => t.kind === kind) || this.templates[0];
  }

  edit(provider, preset) {
    this.editing = provider;
    this.models = null;
    const values = provider || preset || {};
    const template = this.template(values.kind || this.templates[0]?.kind);
    byId('provider-form-title').textContent = provider ? `Change ${provider.name}` : 'Add a provider';
    byId('provider-template').value = template?.id ?? '';
    byId('provider-name').value = values.name || template?.name || '';
    byId('provider-url').value = values.url || template?.url || '';
    byId('provider-key').value = ''; // never filled: the server does not send keys
    byId('provider-key-clear').checked = false;
    byId('provider-key-clear-label').hidden = !provider?.haskey;
    this.keyHint(template);
    byId('provider-models').hidden = true;
    byId('provider-models-note').textContent = '';
    showError('provider-error', '');
    byId('provider-form').hidden = false;
    byId('provider-name').focus();
  }

  keyHint(template) {
    const key = byId('provider-key');
    if (this.editing?.haskey) key.placeholder = 'saved · leave empty to keep it';
    else key.placeholder = template?.key === 'needed' ? 'needed' : 'optional';
  }

  applyTemplate() {
    const template = this.templates.find((t) => t.id === byId('provider-template').value);
    if (!template) return;
    const names = this.templates.map((t) => t.name);
    const urls = this.templates.map((t) => t.url);
    if (!byId('provider-name').value || names.includes(byId('provider-name').value)) byId('provider-name').value = template.name;
    if (!byId('provider-url').value || urls.includes(byId('provider-url').value)) byId('provider-url').value = template.url;
    this.keyHint(template);
  }

  formValues() {
    const template = this.templates.find((t) => t.id === byId('provider-template').value);
    const body = { name: byId('provider-name').value.trim(), kind: template?.kind, url: byId('provider-url').value.trim() };
    const key = byId('provider-key').value.trim();
    if (key) body.key = key;
    else if (byId('provider-key-clear').checked) body.key = '';
    return body;
  }

  async checkModels() {
    const values = this.formValues();
    const body = this.editing ? { id: this.editing.id, url: values.url, kind: values.kind } : { url: values.url, kind: values.kind };
    if (values.key !== undefined) body.key = values.key;
    byId('provider-models-note').textContent = 'Asking the provider…';
    showError('provider-error', '');
    try {
      this.models = await api('providers_available', { body });
    } catch (error) {
      byId('provider-models-note').textContent = '';
      showError('provider-error', error.message);
      return;
    }
    const chosen = new Set(this.editing?.models || []);
    byId('provider-models-note').textContent = `${this.models.length} model${this.models.length === 1 ? '' : 's'} · tick some to offer only those`;
    byId('provider-models').replaceChildren(...this.models.map((m) => h('li', null, h('label', { className: 'check' },
      h('input', { type: 'checkbox', value: m.id, checked: chosen.has(m.id) }),
      h('span', null, m.name || m.id),
      h('span', { className: 'muted' }, [m.context && `${Math.round(m.context / 1000)}K context`, m.tools && 'tools',
        m.reasoning && 'reasoning', m.free && 'free'].filter(Boolean).join(' · '))))));
    byId('provider-models').hidden = false;
  }

  async save() {
    const body = this.formValues();
    if (this.editing) body.id = this.editing.id;
    if (this.models) body.models = [...byId('provider-models').querySelectorAll('input:checked')].map((i) => i.value);
    try {
      await api('providers_save', { body });
    } catch (error) {
      showError('provider-error', error.message);
      return;
    }
    byId('provider-key').value = '';
    byId('provider-form').hidden = true;
    toast(`Saved ${body.name}`, 'info');
    await this.refresh();
    this.onChange();
  }

  async remove(provider) {
    try {
      await api('providers_remove', { id: provider.id, post: true });
    } catch (error) {
      toast(error.message);
    }
    await this.refresh();
    this.onChange();
  }

  async detect() {
    const box = byId('detected');
    box.hidden = false;
    box.replaceChildren(h('li', { className: 'empty' }, 'Looking for Ollama, llama.cpp and LM Studio on this computer…'));
    let found;
    try {
      found = await api('providers_detect');
    } catch (error) {
      box.replaceChildren(h('li', { className: 'error' }, error.message));
      return;
    }
    box.replaceChildren(...found.map((server) => h('li', { className: 'card' },
      h('div', { className: 'grow' }, h('strong', null, server.name), ' ', h('span', { className: 'muted' }, server.url),
        h('div', { className: 'muted ellipsis' }, `${server.models.length} models: ${server.models.slice(0, 6).map((m) => m.id).join(', ')}`)),
      server.providerid ? h('span', { className: 'muted' }, 'saved')
        : h('button', { type: 'button', onclick: () => this.edit(null, server) }, 'Add'))));
    if (!found.length) box.replaceChildren(h('li', { className: 'empty' }, 'No local server answered.'));
  }
}

export class RulesDialog {
  constructor() {
    this.dialog = byId('rules-dialog');
    this.project = null;
    this.names = null; // what a rule may name (Permissions|tools), read once
    byId('rule-form').addEventListener('submit', (event) => { event.preventDefault(); this.add(); });
    byId('rule-preset-sandboxed').addEventListener('click', () => this.save({
      scope: byId('rule-scope').value, tool: 'sandboxed', pattern: '*', action: 'allow' }));
  }

  async show(project) {
    this.project = project;
    byId('rules-dialog-title').textContent = `Permission rules · ${project.name}`;
    showError('rule-error', '');
    this.dialog.showModal();
    await Promise.all([this.fillChoices(), this.refresh()]);
  }

  // The tools and actions a rule may have come from the server's tool registry, never a list here.
  async fillChoices() {
    if (this.names) return;
    try {
      this.names = await api('permissions_tools');
    } catch (error) {
      showError('rule-error', error.message);
      return;
    }
    const tools = [...this.names.tools.map((tool) => tool.name), this.names.any];
    byId('rule-tool').replaceChildren(...tools.map((tool) => h('option', { value: tool }, tool)));
    byId('rule-action').replaceChildren(...this.names.actions.map((action) => h('option', { value: action }, action)));
  }

  async refresh() {
    let rules = [];
    try {
      rules = await api('permissions', { query: { projectid: this.project.id } });
    } catch (error) {
      showError('rule-error', error.message);
    }
    byId('rule-list').replaceChildren(...rules.map((rule) => h('tr', { className: `layer-${rule.layer}` },
      h('td', null, h('code', null, rule.tool)),
      // A server's start is stored as name@<sha256>: its words say what that covers.
      h('td', null, rule.described ? h('span', { className: 'rule-words', title: rule.pattern }, rule.described)
        : h('code', null, rule.pattern)),
      h('td', null, h('span', { className: `badge action-${rule.action}` }, rule.action)),
      h('td', { className: 'muted' }, rule.source || rule.layer),
      h('td', null, rule.removable && rule.id
        ? confirmButton('Remove', 'Remove?', () => this.remove(rule), { className: 'small danger' }) : null))));
  }

  async add() {
    if (await this.save({ scope: byId('rule-scope').value, tool: byId('rule-tool').value,
      pattern: byId('rule-pattern').value, action: byId('rule-action').value })) byId('rule-pattern').value = '';
  }

  // Returns whether the rule was stored (the server's refusal is shown otherwise).
  async save(body) {
    if (body.scope === 'project') body.projectid = this.project.id;
    try {
      await api('permissions_save', { body });
    } catch (error) {
      showError('rule-error', error.message);
      return false;
    }
    showError('rule-error', '');
    await this.refresh();
    return true;
  }

  async remove(rule) {
    try {
      await api('permissions_remove', { id: rule.id, post: true });
    } catch (error) {
      showError('rule-error', error.message);
    }
    await this.refresh();
  }
}

// The Settings dialog: the values a run reads (Settings|read), in layers config.ini < all
// projects < this project < this session. A tab per level where a value can be set: each key
// shows its effective value there, where it comes from, its description and range, and can be
// set or cleared at that level (Settings|save); the server's refusal is shown by the field.
export class SettingsDialog {
  // context(): {project, session} open in the page.
  constructor({ context }) {
    this.dialog = byId('settings-dialog');
    this.mcpTokens = new McpTokens();
    this.list = byId('settings-list');
    this.context = context;
    this.scope = 'all';
    this.project = null;
    this.session = null;
    this.rows = new Map(); // key -> {element, input, value, source, clear, error, item}
    this.reading = 0;
    for (const tab of this.tabs()) tab.addEventListener('click', () => this.choose(tab.dataset.scope));
    byId('settings-tabs').addEventListener('keydown', (event) => this.moveTab(event));
  }

  tabs() {
    return [...byId('settings-tabs').querySelectorAll('[role=tab]')];
  }

  // scope: all, project or session; by default the open project's level.
  async show(scope) {
    const { project, session } = this.context();
    this.project = project ?? null;
    this.session = project ? session ?? null : null;
    byId('settings-tab-project').disabled = !this.project;
    byId('settings-tab-session').disabled = !this.session;
    if (!this.dialog.open) this.dialog.showModal();
    await this.choose(scope ?? (this.project ? 'project' : 'all'));
  }

  moveTab(event) {
    if (event.key !== 'ArrowLeft' && event.key !== 'ArrowRight') return;
    const open = this.tabs().filter((tab) => !tab.disabled);
    const at = open.findIndex((tab) => tab.dataset.scope === this.scope);
    const next = open[(at + (event.key === 'ArrowRight' ? 1 : open.length - 1)) % open.length];
    event.preventDefault();
    next.focus();
    this.choose(next.dataset.scope);
  }

  ids(scope) {
    if (scope === 'project') return { projectid: this.project.id };
    if (scope === 'session') return { projectid: this.project.id, sessionid: this.session.id };
    return {};
  }

  async choose(wanted) {
    let scope = wanted;
    if ((scope === 'project' && !this.project) || (scope === 'session' && !this.session)) scope = 'all';
    this.scope = scope;
    for (const tab of this.tabs()) {
      const chosen = tab.dataset.scope === scope;
      tab.setAttribute('aria-selected', String(chosen));
      tab.classList.toggle('active', chosen);
      tab.tabIndex = chosen ? 0 : -1;
      if (chosen) byId('settings-panel').setAttribute('aria-labelledby', tab.id);
    }
    this.list.dataset.scope = scope;
    byId('settings-dialog-title').textContent = scope === 'session' ? `Session settings · ${this.session.name}`
      : scope === 'project' ? `Settings · ${this.project.name}` : 'Settings · all projects';
    byId('settings-scope-note').textContent = `${{
      all: 'Values for every project, over config.ini; a project or a session can set its own.',
      project: `Values for the project “${this.project?.name}”: they win over all projects; a session can set its own.`,
      session: `Values for the session “${this.session?.name}” only: they win over the project and all projects.`,
    }[scope]} A run reads them when it starts: a change applies from the next prompt.`;
    showError('settings-error', '');
    this.mcpTokens.show(scope === 'all');
    this.rows.clear();
    this.list.replaceChildren(h('li', { className: 'empty' }, 'Reading…'));
    const reading = ++this.reading;
    let values;
    try {
      values = await api('settings', { query: this.ids(scope) });
    } catch (error) {
      if (reading === this.reading) this.list.replaceChildren(h('li', { className: 'error' }, error.message));
      return;
    }
    if (reading !== this.reading) return;
    this.list.replaceChildren(...Object.entries(values).map(([key, item]) => this.row(key, item)));
  }

  row(key, item) {
    const id = `setting-${key}`;
    const integer = item.type === 'integer';
    const numeric = item.type === 'integer' || item.type === 'number';
    const input = numeric
      ? h('input', { id, type: 'number', className: 'setting-input', step: integer ? '1' : 'any',
        min: item.min, max: item.max, inputMode: integer ? 'numeric' : 'decimal', spellcheck: false,
        placeholder: item.nullable ? (item.none ?? '') : '', 'aria-describedby': `${id}-about` })
      : h('input', { id, type: 'text', className: 'setting-input', spellcheck: false, dataset: { kind: item.type },
        placeholder: item.type === 'paths' ? '/a/folder:/another' : 'true or false', 'aria-describedby': `${id}-about` });
    const value = h('strong', { className: 'setting-value' });
    const source = h('span', { className: 'setting-source', title: "config.ini, or Totem's own default where config.ini says nothing" });
    const clear = h('button', { type: 'button', className: 'small setting-clear', onclick: () => this.save(key, { clear: true }) }, 'Clear');
    const error = h('p', { className: 'field-error', id: `${id}-error`, dataset: { errorFor: key }, role: 'alert', hidden: true });
    const form = h('form', { className: 'setting-form', noValidate: true, autocomplete: 'off' },
      input,
      h('button', { type: 'submit', className: 'small primary setting-set' }, `Set for ${SCOPE_WORDS[this.scope]}`),
      clear);
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.save(key, { value: inputValue(input) });
    });
    const element = h('li', { className: 'card setting', dataset: { key } },
      h('div', { className: 'grow' },
        h('div', { className: 'setting-title' },
          h('label', { htmlFor: id }, h('strong', null, item.title || key), item.title ? h('code', { className: 'muted setting-key' }, key) : null),
          h('span', { className: 'muted setting-range' }, rangeText(item))),
        h('div', { id: `${id}-about`, className: 'muted setting-description' }, item.description),
        h('div', { className: 'setting-effective' }, h('span', { className: 'muted' }, 'Now '), value, ' ', source),
        form, error));
    this.rows.set(key, { element, input, value, source, clear, error, item });
    this.paintRow(key, item, true);
    return element;
  }

  paintRow(key, item, fill) {
    const row = this.rows.get(key);
    row.item = item;
    row.value.textContent = item.value === null || item.value === undefined ? (item.none ?? 'none')
      : Array.isArray(item.value) ? (item.value.join(':') || 'none') : String(item.value);
    row.source.textContent = `from ${SOURCES[item.source] ?? item.source}`;
    row.source.dataset.source = item.source;
    row.element.dataset.source = item.source;
    row.clear.hidden = item.source !== this.scope;
    row.clear.title = `Remove the value set for ${SCOPE_WORDS[this.scope]}: the one of ${BELOW[this.scope]} applies again`;
    if (fill) row.input.value = item.value === null || item.value === undefined ? ''
      : Array.isArray(item.value) ? item.value.join(':') : String(item.value);
  }

  fieldError(key, text) {
    const row = this.rows.get(key);
    if (!row) return;
    row.error.textContent = text;
    row.error.hidden = !text;
    row.element.classList.toggle('invalid', !!text);
    if (text) row.input.setAttribute('aria-errormessage', row.error.id);
    else row.input.removeAttribute('aria-errormessage');
    row.input.setAttribute('aria-invalid', String(!!text));
  }

  async save(key, change) {
    const scope = this.scope;
    const body = { scope, key, ...this.ids(scope), ...change };
    this.fieldError(key, '');
    showError('settings-error', '');
    let values;
    try {
      values = await api('settings_save', { body });
    } catch (error) {
      if (this.scope !== scope) return;
      const problems = error.problems?.length ? error.problems : [{ error: error.message }];
      this.fieldError(key, problems.filter((p) => FIELD_PROBLEMS.has(p.name)).map((p) => problemText({ error: p.error })).join(' '));
      const others = problems.filter((p) => !FIELD_PROBLEMS.has(p.name));
      showError('settings-error', others.map(problemText).join(' '));
      this.rows.get(key)?.input.focus();
      return;
    }
    if (this.scope !== scope) return;
    for (const [name, item] of Object.entries(values)) if (this.rows.has(name)) this.paintRow(name, item, name === key);
    toast(`${change.clear ? 'Cleared' : 'Set'} ${key} for ${SCOPE_WORDS[scope]}`, 'info');
  }
}

// An empty field is null: what the key says none means (its `none`) for a key that takes it (the server refuses
// it for the others); a number as a number.
function inputValue(input) {
  const text = input.value.trim();
  if (input.dataset.kind === 'paths') return text.split(':').map((part) => part.trim()).filter(Boolean);
  if (input.dataset.kind === 'boolean' && (text === 'true' || text === 'false')) return text === 'true';
  if (!text) return null;
  const number = Number(text);
  return Number.isFinite(number) ? number : text;
}

function rangeText(item) {
  const shown = (n) => String(n);
  if (item.type === 'boolean') return 'true or false';
  if (item.type === 'paths') return `at most ${shown(item.max)} absolute paths, separated by :`;
  return `${item.type === 'integer' ? 'an integer' : 'a number'} from ${shown(item.min)} to ${shown(item.max)}`
    + `${item.nullable ? `; empty: ${item.none ?? 'none'}` : ''}`;
}
