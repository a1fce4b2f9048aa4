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
    const card = build();
    cards.set(id, card);
    this.changed(sessionid);
    // A new question on screen takes the focus, so that its keys answer it (not in a dialog).
    if (sessionid === this.current && card.isConnected && !document.querySelector('dialog[open]')) {
      card.focus({ preventScroll: true });
      card.scrollIntoView({ block: 'nearest' });
    }
  }

  // The first card on screen takes the focus (when a session with a waiting question is opened).
  focus() {
    const card = this.root.querySelector('.ask');
    if (card && !document.querySelector('dialog[open]')) card.focus({ preventScroll: true });
    return !!card;
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
    const start = data.tool === 'mcp-start';
    const description = bash && typeof data.input?.description === 'string' ? data.input.description : '';
    const [title, header] = askTitle(data);
    const card = h('section', { className: `ask permission${start ? ' mcp-start' : ''}`, tabIndex: -1,
      dataset: { session: data.sessionid ?? '', id: data.id, tool: data.tool },
      'aria-label': `Permission question: ${title}?`, 'aria-keyshortcuts': 'Enter Y A N Escape' },
      h('header', null, header, '?'),
      description ? h('p', { className: 'ask-description' }, reveal(description)) : null,
      data.reason ? h('p', { className: 'ask-reason' }, reveal(data.reason)) : null,
      bash && data.folder ? h('div', { className: 'ask-folder' }, 'in ', h('code', null, data.folder)) : null,
      inputView(data),
      h('div', { className: 'label' }, start ? 'Always allow this exact definition (any change to it asks again):'
        : commands.length > 1 ? 'Always allow, for each command:' : 'Always allow this pattern:'),
      groups.map((choices) => choices.element),
      h('div', { className: 'actions' },
        h('button', { type: 'button', className: 'primary', dataset: { reply: 'once' }, 'aria-keyshortcuts': 'Enter Y',
          onclick: () => once() }, 'Allow once', key('Enter/Y')),
        h('button', { type: 'button', dataset: { reply: 'always' }, 'aria-keyshortcuts': 'A', onclick: () => always() },
          'Always allow', key('A')),
        h('button', { type: 'button', className: 'danger', dataset: { reply: 'reject' }, 'aria-keyshortcuts': 'N Escape',
          onclick: () => reject() }, 'Reject', key('N/Esc'))));
    const once = () => this.answer(card, 'permissions_reply', data.id, { reply: 'once' });
    const reject = () => this.answer(card, 'permissions_reply', data.id, { reply: 'reject' });
    const always = () => {
      const patterns = groups.map((choices) => choices.chosen());
      if (patterns.some((pattern) => !pattern)) { toast('Choose or type a pattern to always allow'); return; }
      this.answer(card, 'permissions_reply', data.id, { reply: 'always', patterns });
    };
    onKeys(card, (event) => {
      const k = event.key.length === 1 ? event.key.toLowerCase() : event.key;
      if (k === 'Enter' || k === 'y') return once;
      if (k === 'a') return always;
      if (k === 'n' || k === 'Escape') return reject;
      return null;
    });
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
    const options = data.options || [];
    const pick = (option) => () => this.answer(card, 'questions_reply', data.id, { answer: option });
    const card = h('section', { className: 'ask question', tabIndex: -1, dataset: { session: data.sessionid ?? '', id: data.id },
      'aria-label': 'Question', 'aria-keyshortcuts': options.length ? `1-${Math.min(options.length, 9)}` : null },
      h('header', null, h('strong', null, 'Question')),
      h('p', { className: 'ask-text' }, data.text),
      h('div', { className: 'actions' }, options.map((option, index) => h('button', { type: 'button',
        className: 'option', 'aria-keyshortcuts': index < 9 ? String(index + 1) : null, onclick: pick(option) },
      option, index < 9 ? key(String(index + 1)) : null))),
      h('form', { className: 'other', onsubmit: (event) => {
        event.preventDefault();
        if (other.value.trim()) this.answer(card, 'questions_reply', data.id, { answer: other.value.trim() });
      } }, other, h('button', { type: 'submit' }, 'Answer')));
    onKeys(card, (event) => {
      const digit = /^[1-9]$/.test(event.key) ? Number(event.key) : 0;
      return digit && digit <= options.length ? pick(options[digit - 1]) : null;
    });
    return card;
  }
}

// A key's hint on a button; hidden from the button's name (aria-keyshortcuts says it).
function key(text) {
  return h('kbd', { 'aria-hidden': 'true' }, text);
}

// The card's keys answer it while the focus is on the card itself or one of its choices (never
// while typing a pattern or an answer, nor Enter on one of its buttons, which presses that one).
function onKeys(card, action) {
  card.addEventListener('keydown', (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return;
    const target = event.target;
    const onCard = target === card || (target.matches?.('input[type=radio]') ?? false);
    if (!onCard || card.querySelector('button:disabled')) return;
    const answer = action(event);
    if (!answer) return;
    event.preventDefault();
    event.stopPropagation(); // Escape here rejects the question, it does not stop the run
    answer();
  });
}

// What the question asks, in words: [for the card's name, its header's content].
function askTitle(data) {
  const input = data.input && typeof data.input === 'object' ? data.input : {};
  if (data.tool === 'mcp-start' && typeof input.server === 'string') {
    return [`start the MCP server ${input.server}`,
      ['Start the MCP server ', h('strong', { className: 'ask-tool' }, reveal(input.server))]];
  }
  if (data.tool === 'mcp' && typeof input.server === 'string') {
    const subject = `${input.server}/${input.tool ?? ''}`;
    return [`allow the MCP tool ${subject}`, ['Allow the MCP tool ', h('strong', { className: 'ask-tool' }, reveal(subject))]];
  }
  return [`allow ${data.tool}`, ['Allow ', h('strong', { className: 'ask-tool' }, data.tool)]];
}

// The start of a project MCP server: its file, then the exact command line and the names of
// the variables it gets, or the URL, the host it goes to and the names of its headers (the
// values are never sent to the page: they may be keys).
function serverStartView(input) {
  const remote = input.transport && input.transport !== 'stdio';
  const names = (remote ? input.headers : input.env) ?? [];
  const nameList = Array.isArray(names) && names.length
    ? h('ul', { className: 'ask-names' }, names.map((name) => h('li', null, h('code', null, reveal(name)))))
    : h('span', { className: 'muted' }, ' none');
  return h('div', { className: 'ask-server' },
    h('div', { className: 'ask-folder' }, 'from ', h('code', null, reveal(input.file ?? '?')),
      h('span', { className: 'muted' }, ` · ${input.transport ?? 'stdio'}`)),
    remote ? [
      h('div', { className: 'label' }, 'URL'),
      h('pre', { className: 'ask-input ask-url' }, reveal(input.url ?? '')),
      h('div', { className: 'ask-host' }, 'It connects to the host ', h('code', null, reveal(input.host || '?'))),
      h('div', { className: 'label' }, 'Headers it sends (names only)'), nameList,
    ] : [
      h('div', { className: 'label' }, 'Command line'),
      h('pre', { className: 'ask-input ask-command' }, `$ ${reveal(input.command ?? '')}`),
      h('div', { className: 'label' }, 'Variables it gets (names only)'), nameList,
    ]);
}

// A file tool's call shows what it would change (write, edit, patch: the preview), its raw
// input a click away; a server's start its definition; an MCP tool's call its arguments; any
// other call shows its input.
function inputView(data) {
  return [reachView(data), callView(data)];
}

// What a command will be able to reach (the sandbox), or why nothing confines it.
function reachView(data) {
  const reach = data.reach && typeof data.reach === 'object' ? data.reach : null;
  if (!reach || !('confined' in reach)) return null;
  const once = data.once_only ? h('div', { className: 'muted' }, 'Answer once or reject: this is never stored as a rule.') : null;
  if (!reach.confined) {
    return h('div', { className: 'ask-reach', dataset: { confined: 'false' } },
      h('strong', null, 'Not confined'), ` (${reveal(String(reach.why ?? ''))}): it can do all you can.`, once);
  }
  const writes = (Array.isArray(reach.writes) ? reach.writes : []).map((folder) => h('code', null, reveal(String(folder))));
  const missing = reach.missing && typeof reach.missing === 'object' ? Object.keys(reach.missing) : [];
  return h('div', { className: 'ask-reach', dataset: { confined: 'true' } },
    'Sandboxed: writes only ', writes.flatMap((code, index) => (index ? [', ', code] : [code])),
    `; network ${reach.network ? 'on (never Totem\'s own port)' : 'off'}`,
    missing.length ? h('span', { className: 'ask-reach-missing' }, `; not held here: ${missing.join(', ')}`) : null, once);
}

function callView(data) {
  const given = data.input && typeof data.input === 'object' ? data.input : null;
  if (data.tool === 'mcp-start' && given) return serverStartView(given);
  if (data.tool === 'mcp' && given && 'arguments' in given) {
    return [h('div', { className: 'label' }, 'Arguments'),
      h('pre', { className: 'ask-input ask-arguments' }, reveal(showValue(given.arguments ?? {}, 6000)))];
  }
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
