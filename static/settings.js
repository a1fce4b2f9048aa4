// The Providers and Rules dialogs.
//
// A provider's key is write-only: the field is never filled from the server (the server never
// sends it); left empty it keeps the saved key, and "Remove the saved key" sends "".
import { api } from '/api.js';
import { h, byId, confirmButton, toast } from '/dom.js';

const RULE_TOOLS = ['bash', 'read', 'write', 'edit', 'patch', 'glob', 'grep', 'fetch', 'skill', 'todo', 'ask', 'mcp', '*'];

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

  async show() {
    this.dialog.showModal();
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
        h('strong', null, p.name), ' ', h('span', { className: 'muted' }, p.kind),
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
    byId('rule-tool').replaceChildren(...RULE_TOOLS.map((tool) => h('option', { value: tool }, tool)));
    byId('rule-form').addEventListener('submit', (event) => { event.preventDefault(); this.add(); });
  }

  async show(project) {
    this.project = project;
    byId('rules-dialog-title').textContent = `Permission rules · ${project.name}`;
    showError('rule-error', '');
    this.dialog.showModal();
    await this.refresh();
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
      h('td', null, h('code', null, rule.pattern)),
      h('td', null, h('span', { className: `badge action-${rule.action}` }, rule.action)),
      h('td', { className: 'muted' }, rule.source || rule.layer),
      h('td', null, rule.removable && rule.id
        ? confirmButton('Remove', 'Remove?', () => this.remove(rule), { className: 'small danger' }) : null))));
  }

  async add() {
    const body = { scope: byId('rule-scope').value, tool: byId('rule-tool').value,
      pattern: byId('rule-pattern').value, action: byId('rule-action').value };
    if (body.scope === 'project') body.projectid = this.project.id;
    try {
      await api('permissions_save', { body });
    } catch (error) {
      showError('rule-error', error.message);
      return;
    }
    showError('rule-error', '');
    byId('rule-pattern').value = '';
    await this.refresh();
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
