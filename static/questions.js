// Questions that wait for the person: permission asks and the ask tool's questions.
//
// Every session of the open project is subscribed, so a question arrives wherever it waits; the
// ones of the session on screen are shown as cards above the prompt, the others as a mark in
// the session list (onChange tells the page to repaint it).
import { api } from '/api.js';
import { h, reveal, showValue, toast } from '/dom.js';
import { renderFileDiff } from '/diff.js';

export class Questions {
  constructor(root, { onChange }) {
    this.root = root;
    this.onChange = onChange;
    this.waiting = new Map(); // sessionid -> Map(id -> card element)
    this.current = null;
  }

  count(sessionid) {
    return this.waiting.get(sessionid)?.size ?? 0;
  }

  total() {
    let sum = 0;
    for (const cards of this.waiting.values()) sum += cards.size;
    return sum;
  }

  askPermission(sessionid, data) {
    this.add(sessionid, data.id, () => this.permissionCard(data));
  }

  askQuestion(sessionid, data) {
    this.add(sessionid, data.id, () => this.questionCard(data));
  }

  add(sessionid, id, build) {
    const cards = this.waiting.get(sessionid) ?? new Map();
    this.waiting.set(sessionid, cards);
    if (cards.has(id)) return; // sent again on subscribe
    cards.set(id, build());
    this.changed(sessionid);
  }

  remove(sessionid, id) {
    const cards = this.waiting.get(sessionid);
    if (!cards?.delete(id)) return;
    if (!cards.size) this.waiting.delete(sessionid);
    this.changed(sessionid);
  }

  // Forget what waits (in one session, or everywhere before subscribing again).
  forget(sessionid) {
    if (sessionid === undefined) this.waiting.clear();
    else this.waiting.delete(sessionid);
    this.changed(sessionid);
  }

  show(sessionid) {
    this.current = sessionid;
    const cards = [...(this.waiting.get(sessionid)?.values() ?? [])];
    this.root.replaceChildren(...cards);
    this.root.hidden = !cards.length;
  }

  changed(sessionid) {
    if (sessionid === undefined || sessionid === this.current) this.show(this.current);
    this.onChange();
  }

  async answer(card, name, id, body) {
    for (const control of card.querySelectorAll('button, input')) control.disabled = true;
    try {
      await api(name, { id, body });
      this.remove(card.dataset.session, id);
    } catch (error) {
      if (error.status === 404) this.remove(card.dataset.session, id); // answered elsewhere, or the run ended
      else for (const control of card.querySelectorAll('button, input')) control.disabled = false;
      toast(error.message);
    }
  }

  permissionCard(data) {
    // One group of choices per subject that needs an answer (bash: each simple command that
    // asks); "always" stores a rule for the pattern chosen in each group.
    const commands = data.commands?.length ? data.commands
      : [{ command: '', patterns: data.patterns || [] }];
    const groups = commands.map((item, group) => this.patternChoices(data.id, group, item, commands.length > 1));
    const bash = data.tool === 'bash';
    const description = bash && typeof data.input?.description === 'string' ? data.input.description : '';
    const card = h('section', { className: 'ask permission', dataset: { session: data.sessionid ?? '', id: data.id } },
      h('header', null, 'Allow ', h('strong', { className: 'ask-tool' }, data.tool), '?'),
      description ? h('p', { className: 'ask-description' }, reveal(description)) : null,
      data.reason ? h('p', { className: 'ask-reason' }, reveal(data.reason)) : null,
      bash && data.folder ? h('div', { className: 'ask-folder' }, 'in ', h('code', null, data.folder)) : null,
      inputView(data),
      h('div', { className: 'label' }, commands.length > 1 ? 'Always allow, for each command:' : 'Always allow this pattern:'),
      groups.map((choices) => choices.element),
      h('div', { className: 'actions' },
        h('button', { type: 'button', className: 'primary', dataset: { reply: 'once' },
          onclick: () => this.answer(card, 'permissions_reply', data.id, { reply: 'once' }) }, 'Allow once'),
        h('button', { type: 'button', dataset: { reply: 'always' }, onclick: () => {
          const patterns = groups.map((choices) => choices.chosen());
          if (patterns.some((pattern) => !pattern)) { toast('Choose or type a pattern to always allow'); return; }
          this.answer(card, 'permissions_reply', data.id, { reply: 'always', patterns });
        } }, 'Always allow'),
        h('button', { type: 'button', className: 'danger', dataset: { reply: 'reject' },
          onclick: () => this.answer(card, 'permissions_reply', data.id, { reply: 'reject' }) }, 'Reject')));
    return card;
  }

  patternChoices(id, group, item, titled) {
    const patterns = item.patterns || [];
    const name = `pattern-${id}-${group}`;
    const custom = h('input', { type: 'text', className: 'pattern-custom', placeholder: 'another pattern',
      'aria-label': 'Another pattern' });
    const element = h('div', { className: 'patterns' },
      titled ? h('code', { className: 'pattern-command' }, reveal(item.shown ?? item.command)) : null,
      patterns.map((pattern, index) => h('label', null,
        h('input', { type: 'radio', name, value: pattern, checked: index === 0 }), h('code', null, reveal(pattern)))),
      h('label', null, h('input', { type: 'radio', name, value: '', checked: !patterns.length, className: 'custom-choice' }),
        custom));
    custom.addEventListener('input', () => { element.querySelector('.custom-choice').checked = true; });
    const chosen = () => {
      const radio = element.querySelector('input[type=radio]:checked');
      return radio && radio.value ? radio.value : custom.value.trim();
    };
    return { element, chosen };
  }

  questionCard(data) {
    const other = h('input', { type: 'text', placeholder: 'Your answer', 'aria-label': 'Your answer' });
    const card = h('section', { className: 'ask question', dataset: { session: data.sessionid ?? '', id: data.id } },
      h('header', null, h('strong', null, 'Question')),
      h('p', { className: 'ask-text' }, data.text),
      h('div', { className: 'actions' }, (data.options || []).map((option) => h('button', { type: 'button',
        className: 'option', onclick: () => this.answer(card, 'questions_reply', data.id, { answer: option }) }, option))),
      h('form', { className: 'other', onsubmit: (event) => {
        event.preventDefault();
        if (other.value.trim()) this.answer(card, 'questions_reply', data.id, { answer: other.value.trim() });
      } }, other, h('button', { type: 'submit' }, 'Answer')));
    return card;
  }
}

// A file tool's call shows what it would change (write, edit, patch: the preview), its raw
// input a click away; any other call shows its input.
function inputView(data) {
  const input = h('pre', { className: 'ask-input' }, reveal(inputText(data.tool, data.input)));
  if (!Array.isArray(data.preview) || !data.preview.length) return input;
  return [
    h('div', { className: 'ask-preview' }, data.preview.map((entry) => renderFileDiff(entry))),
    h('details', { className: 'ask-details' }, h('summary', null, 'Details: the input of the call'), input),
  ];
}

function inputText(tool, input) {
  if (tool === 'bash' && typeof input?.command === 'string') return `$ ${input.command}`;
  return showValue(input ?? {}, 6000);
}
