// The model picker of the prompt box: a button that opens a searchable list of the models of
// Providers|catalog, grouped by provider, each with its context window and whether it calls
// tools. Typing filters (every word must match the model, its name or its provider); the arrow
// keys move, Enter chooses, Escape closes (and never stops a run).
import { h, byId } from '/dom.js';
import { formatTokens } from '/usage.js';

export class ModelPicker {
  // onChange(modelid): the person chose another model.
  constructor({ onChange }) {
    this.onChange = onChange;
    this.root = byId('model-picker');
    this.button = byId('model');
    this.popup = byId('model-popup');
    this.search = byId('model-search');
    this.list = byId('model-list');
    this.count = byId('model-count');
    this.catalog = { providers: [], models: [] };
    this.value = '';
    this.options = []; // the option elements shown, in order
    this.active = -1;

    this.button.addEventListener('click', () => (this.popup.hidden ? this.open() : this.close(true)));
    this.button.addEventListener('keydown', (event) => {
      if ((event.key === 'ArrowDown' || event.key === 'ArrowUp') && this.popup.hidden) {
        event.preventDefault();
        this.open();
      }
    });
    this.search.addEventListener('input', () => this.render());
    this.search.addEventListener('keydown', (event) => this.key(event));
    this.list.addEventListener('click', (event) => {
      const option = event.target.closest('[role=option]');
      if (option && option.getAttribute('aria-disabled') !== 'true') this.choose(option.dataset.value);
    });
    this.list.addEventListener('mousedown', (event) => event.preventDefault()); // the search keeps the focus
    document.addEventListener('pointerdown', (event) => {
      if (!this.popup.hidden && !this.root.contains(event.target)) this.close(false);
    });
    this.root.addEventListener('focusout', (event) => {
      if (!this.popup.hidden && event.relatedTarget && !this.root.contains(event.relatedTarget)) this.close(false);
    });
  }

  // Providers|catalog; the model shown is the one chosen before, else `preferred`, else the first.
  setCatalog(catalog, preferred) {
    this.catalog = catalog;
    const ids = catalog.models.map((m) => m.id);
    const wanted = [this.value, preferred].find((id) => id && ids.includes(id));
    this.value = wanted ?? ids[0] ?? '';
    this.paintButton();
    if (!this.popup.hidden) this.render();
  }

  // Show this model when the catalog offers it (a session's own model); false otherwise.
  select(modelid) {
    if (!this.catalog.models.some((m) => m.id === modelid)) return false;
    this.value = modelid;
    this.paintButton();
    return true;
  }

  model(modelid = this.value) {
    return this.catalog.models.find((m) => m.id === modelid) ?? null;
  }

  paintButton() {
    const model = this.model();
    this.button.replaceChildren(model ? h('span', { className: 'picker-name' }, model.name || model.model)
      : h('span', { className: 'picker-name muted' }, this.catalog.models.length ? 'Choose a model' : 'No model'));
    this.button.title = model ? `${model.provider.name} · ${model.model} · ${details(model).join(', ')}: click to change`
      : 'No model yet: add a provider in Providers';
    this.button.dataset.value = this.value;
  }

  open() {
    this.popup.hidden = false;
    this.button.setAttribute('aria-expanded', 'true');
    this.search.value = '';
    this.render();
    this.search.focus();
  }

  close(focusButton) {
    if (this.popup.hidden) return;
    this.popup.hidden = true;
    this.button.setAttribute('aria-expanded', 'false');
    this.search.removeAttribute('aria-activedescendant');
    if (focusButton) this.button.focus();
  }

  choose(modelid) {
    this.close(true);
    if (!modelid || modelid === this.value) return;
    this.value = modelid;
    this.paintButton();
    this.onChange?.(modelid);
  }

  key(event) {
    const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: 8, PageUp: -8 };
    if (event.key in moves) {
      event.preventDefault();
      this.setActive(Math.max(0, Math.min(this.options.length - 1, this.active + moves[event.key])));
    } else if (event.key === 'Enter') {
      event.preventDefault();
      const option = this.options[this.active];
      if (option) this.choose(option.dataset.value);
    } else if (event.key === 'Escape') {
      event.preventDefault();
      event.stopPropagation(); // closes the list; it does not stop the run
      this.close(true);
    }
  }

  setActive(index) {
    this.options[this.active]?.classList.remove('active');
    this.active = index;
    const option = this.options[index];
    if (!option) {
      this.search.removeAttribute('aria-activedescendant');
      return;
    }
    option.classList.add('active');
    this.search.setAttribute('aria-activedescendant', option.id);
    option.scrollIntoView({ block: 'nearest' });
  }

  render() {
    const words = this.search.value.toLowerCase().split(/\s+/).filter(Boolean);
    const matches = (model) => {
      const text = `${model.name ?? ''} ${model.model} ${model.provider.name}`.toLowerCase();
      return words.every((word) => text.includes(word));
    };
    this.options = [];
    const rows = [];
    for (const provider of this.catalog.providers) {
      const models = this.catalog.models.filter((m) => m.provider.id === provider.id && matches(m));
      if (!models.length && (words.length || !provider.error)) continue;
      rows.push(h('li', { className: 'picker-group', role: 'presentation' }, provider.name));
      if (provider.error) rows.push(h('li', { className: 'picker-error', role: 'presentation' }, `Unavailable: ${provider.error}`));
      for (const model of models) {
        const option = h('li', { role: 'option', id: `model-option-${this.options.length}`, className: 'picker-option',
          dataset: { value: model.id }, 'aria-selected': String(model.id === this.value) },
        h('span', { className: 'picker-name' }, model.name || model.model),
        h('span', { className: 'picker-details' }, details(model).map((text) => h('span', { className: 'picker-detail' }, text))));
        this.options.push(option);
        rows.push(option);
      }
    }
    if (!this.options.length) {
      rows.push(h('li', { className: 'picker-empty', role: 'presentation' },
        this.catalog.models.length ? 'No model matches' : 'No models yet: add a provider in Providers'));
    }
    this.list.replaceChildren(...rows);
    const total = this.catalog.models.length;
    this.count.textContent = words.length ? `${this.options.length} of ${total} models` : `${total} model${total === 1 ? '' : 's'}`;
    const chosen = this.options.findIndex((option) => option.dataset.value === this.value);
    this.active = -1;
    this.setActive(words.length || chosen < 0 ? 0 : chosen);
  }
}

// "128K context", "~32K context" (a window the provider does not state).
function contextText(model) {
  return `${model.contextguessed ? '~' : ''}${formatTokens(model.context)} context`;
}

function details(model) {
  return [
    model.context ? contextText(model) : null,
    model.tools === true ? 'tools' : model.tools === false ? 'no tools' : null,
    model.reasoning ? 'reasoning' : null,
    model.free ? 'free' : null,
  ].filter(Boolean);
}
