// Questions that wait for the person: permission asks and the ask tool's questions.
//
// Every session of the open project is subscribed, so a question arrives wherever it waits; the
// ones of the session on screen are shown as cards above the prompt, the others as a mark in
// the session list (onChange tells the page to repaint it).
//
// An answer is only ever a deliberate act of the person. A question never takes the focus by
// itself: a person typing in the prompt, a pattern field or the terminal would answer it with
// the next letter (the "n" of "notes" rejects, a "y" or Enter allows). It is announced and marked
// instead, and the keyboard reaches it with Alt+Q (a chord, never typed as text), Tab or a click.
// Its keys act only while the card itself (or one of its choices) has the focus; "always" is a
// button and a confirmation, never a key; and a card that cannot be seen (under a drawer of a
// narrow screen, scrolled away) has its buttons disabled until it is in view.
import { api } from '/api.js';
import { h, reveal, showValue, toast, confirmAction } from '/dom.js';
import { renderFileDiff } from '/diff.js';
import { plainReason } from '/words.js';

export const REACH_KEY = 'Alt+Q';
const SHOWN_SHARE = 0.95; // of a card's buttons row inside the screen, for the card to count as seen

// The chord that moves the keyboard to the questions. Alt+Q on any layout (event.code is the key's
// place, for a Mac's Option+Q that types "œ"); never with Ctrl or Meta (the browser's own keys).
export function reachesQuestions(event) {
  return event.altKey && !event.ctrlKey && !event.metaKey
    && (event.code === 'KeyQ' || event.key === 'q' || event.key === 'Q');
}

export class Questions {
  // drawerOver(box): the name of an open drawer that lies over this box of the screen, or null.
  // announcer: a live region that reads a new question out.
  constructor(root, { onChange, drawerOver = () => null, announcer = null }) {
    this.root = root;
    this.onChange = onChange;
    this.drawerOver = drawerOver;
    this.announcer = announcer;
    this.waiting = new Map(); // sessionid -> Map(id -> card element)
    this.current = null;
    this.seen = new WeakMap(); // card -> whether its buttons row is in view (IntersectionObserver)
    this.returnTo = null; // where the focus was before it came to the questions
    this.observer = new IntersectionObserver((entries) => this.sight(entries), { threshold: [0, SHOWN_SHARE, 1] });
    root.addEventListener('focusin', (event) => {
      const from = event.relatedTarget;
      // Not from a dialog: the one of "always" hands the focus back to its button when it closes.
      if (!root.contains(from) && !from?.closest('dialog')) this.returnTo = from;
      event.target.closest('.ask')?.classList.remove('unvisited');
    });
    window.addEventListener('resize', () => this.recheck()); // a drawer may start or stop covering
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
    card.classList.add('unvisited'); // marked until the person goes to it
    cards.set(id, card);
    this.changed(sessionid);
    // Shown and read out, never focused: the focus stays where the person is typing.
    if (sessionid === this.current && card.isConnected) {
      card.scrollIntoView({ block: 'nearest' });
      this.announce(`${card.dataset.announce ?? card.getAttribute('aria-label')} ${REACH_KEY} moves to it.`);
    }
  }

  announce(text) {
    if (!this.announcer) return;
    // The same words twice are read again only if the region's text changes.
    this.announcer.textContent = this.announcer.textContent === text ? `${text}\u00a0` : text;
  }

  // The person asked for the questions (Alt+Q): the next card on screen takes the focus.
  enter() {
    const cards = [...this.root.querySelectorAll('.ask')];
    if (!cards.length) return false;
    const at = cards.findIndex((card) => card.contains(document.activeElement));
    const card = cards[(at + 1) % cards.length];
    card.scrollIntoView({ block: 'nearest' });
    card.focus({ preventScroll: true });
    return true;
  }

  remove(sessionid, id) {
    const cards = this.waiting.get(sessionid);
    const card = cards?.get(id);
    if (!card) return;
    const hadFocus = card.contains(document.activeElement) || card.dataset.focused === 'true';
    cards.delete(id);
    this.drop(card);
    if (!cards.size) this.waiting.delete(sessionid);
    this.changed(sessionid);
    // Answered from the keyboard or a click: the keyboard goes back where the person was.
    if (hadFocus && this.returnTo?.isConnected && !this.root.contains(this.returnTo)) {
      this.returnTo.focus({ preventScroll: true });
    }
  }

  // Forget what waits (in one session, or everywhere before subscribing again).
  forget(sessionid) {
    for (const [id, cards] of this.waiting) {
      if (sessionid === undefined || id === sessionid) for (const card of cards.values()) this.drop(card);
    }
    if (sessionid === undefined) this.waiting.clear();
    else this.waiting.delete(sessionid);
    this.changed(sessionid);
  }

  show(sessionid) {
    this.current = sessionid;
    const cards = [...(this.waiting.get(sessionid)?.values() ?? [])];
    const arriving = cards.filter((card) => !card.isConnected);
    this.root.replaceChildren(...cards);
    this.root.hidden = !cards.length;
    for (const card of arriving) this.watch(card);
  }

  changed(sessionid) {
    if (sessionid === undefined || sessionid === this.current) this.show(this.current);
    this.onChange();
  }

  // -- whether a card can be seen, hence answered -------------------------------------------

  // A card put on screen counts as unseen until the observer has looked at it.
  watch(card) {
    const row = card.querySelector('.actions');
    this.seen.set(card, false);
    this.observer.unobserve(row);
    this.observer.observe(row); // always reports once, at once
    this.paint(card);
  }

  drop(card) {
    this.observer.unobserve(card.querySelector('.actions'));
    this.seen.delete(card);
  }

  sight(entries) {
    for (const entry of entries) {
      const card = entry.target.closest('.ask');
      if (!card || !this.seen.has(card)) continue;
      this.seen.set(card, entry.isIntersecting && entry.intersectionRatio >= SHOWN_SHARE);
      this.paint(card);
    }
  }

  // A drawer opened or closed, or the window changed size: which cards are covered now.
  recheck() {
    for (const card of this.root.querySelectorAll('.ask')) this.paint(card);
  }

  // Why the card cannot be answered now, in words ('' when it can).
  hiddenReason(card) {
    if (!card.isConnected || !this.seen.has(card)) return 'This question is not on screen.';
    const drawer = this.drawerOver(card.getBoundingClientRect());
    if (drawer) return `This question is under ${drawer}: close it to answer.`;
    if (!this.seen.get(card)) return 'This question is not wholly in view: scroll to it to answer.';
    return '';
  }

  // The buttons work only while the card is seen and no answer of it is under way; the fields
  // only wait for an answer under way (disabling a field would take it from a person typing).
  paint(card) {
    const busy = card.dataset.busy === 'true';
    const reason = busy ? '' : this.hiddenReason(card);
    const why = card.querySelector('.ask-why');
    why.textContent = reason;
    card.classList.toggle('unseen', !!reason);
    for (const button of card.querySelectorAll('button')) {
      button.disabled = busy || !!reason;
      if (reason) {
        button.title = reason;
        button.setAttribute('aria-describedby', why.id);
      } else {
        button.removeAttribute('title');
        button.removeAttribute('aria-describedby');
      }
    }
    for (const input of card.querySelectorAll('input')) input.disabled = busy;
  }

  async answer(card, name, id, body) {
    if (card.dataset.busy === 'true' || this.hiddenReason(card)) return; // its buttons say why
    card.dataset.focused = String(card.contains(document.activeElement)); // before disabling drops it
    card.dataset.busy = 'true';
    this.paint(card);
    try {
      await api(name, { id, body });
      this.remove(card.dataset.session, id);
    } catch (error) {
      if (error.status === 404) this.remove(card.dataset.session, id); // answered elsewhere, or the run ended
      else {
        delete card.dataset.busy;
        this.paint(card);
      }
      toast(error.message);
    }
  }

  permissionCard(data) {
    // One group of choices per subject that needs an answer (bash: each simple command that
    // asks); "always" stores a rule for the pattern chosen in each group.
    const commands = data.commands?.length ? data.commands
      : [{ command: '', patterns: data.patterns || [] }];
    const bash = data.tool === 'bash';
    const start = data.tool === 'mcp-start';
    // A server's start is stored under name@<sha256>: the choice says what that covers instead.
    const words = start && typeof data.input?.approval === 'string' ? data.input.approval : '';
    const groups = commands.map((item, group) => this.patternChoices(data.id, group, item, commands.length > 1, words));
    const description = bash && typeof data.input?.description === 'string' ? data.input.description : '';
    const [title, header] = askTitle(data);
    const card = h('section', { className: `ask permission${start ? ' mcp-start' : ''}`, tabIndex: -1,
      dataset: { session: data.sessionid ?? '', id: data.id, tool: data.tool },
      'aria-label': `Permission question: ${title}?`, 'aria-keyshortcuts': 'Enter Y N Escape' },
      h('header', null, header, '?'),
      description ? h('p', { className: 'ask-description' }, reveal(description)) : null,
      data.reason ? h('p', { className: 'ask-reason' }, reveal(plainReason(data.reason))) : null,
      bash && data.folder ? h('div', { className: 'ask-folder' }, 'in ', h('code', null, data.folder)) : null,
      bash && data.input?.background === true ? h('p', { className: 'ask-background' },
        'It runs as a background job: it keeps running after this answer, until it ends or you stop it (Jobs).') : null,
      inputView(data),
      // Nothing "always" could store (the server says once_only): no pattern to choose, no Always.
      data.once_only ? h('p', { className: 'ask-once muted' }, 'Answer once or reject: no rule can be stored for this.')
        : [h('div', { className: 'label' }, alwaysLabel(start, commands)), groups.map((choices) => choices.element)],
      h('div', { className: 'actions' },
        h('button', { type: 'button', className: 'primary', dataset: { reply: 'once' }, 'aria-keyshortcuts': 'Enter Y',
          onclick: () => once() }, 'Allow once', key('Enter/Y')),
        // No key: a rule that outlives this question is stored only by this button and its confirmation.
        data.once_only ? null : h('button', { type: 'button', dataset: { reply: 'always' }, onclick: () => always() }, 'Always allow…'),
        h('button', { type: 'button', className: 'danger', dataset: { reply: 'reject' }, 'aria-keyshortcuts': 'N Escape',
          onclick: () => reject() }, 'Reject', key('N/Esc')),
        // A Reject holds for this session; this one for every session, until the definition changes.
        start && !data.once_only ? h('button', { type: 'button', className: 'danger', dataset: { reply: 'never' },
          onclick: () => never() }, 'Never start…') : null),
      keysHint(data.once_only ? 'Y or Enter allows once, N or Escape rejects'
        : 'Y or Enter allows once, N or Escape rejects; Always allow has no key'),
      whyElement(data.id));
    const once = () => this.answer(card, 'permissions_reply', data.id, { reply: 'once' });
    const reject = () => this.answer(card, 'permissions_reply', data.id, { reply: 'reject' });
    const never = async () => {
      if (this.hiddenReason(card)) return;
      const patterns = groups.map((choices) => choices.chosen()).filter(Boolean);
      if (await confirmNever(data, words)) this.answer(card, 'permissions_reply', data.id, { reply: 'reject', patterns });
    };
    const always = async () => {
      if (this.hiddenReason(card)) return;
      const patterns = groups.map((choices) => choices.chosen());
      if (patterns.some((pattern) => !pattern)) { toast('Choose or type a pattern to always allow'); return; }
      if (await confirmAlways(data, patterns, words)) this.answer(card, 'permissions_reply', data.id, { reply: 'always', patterns });
    };
    onKeys(card, (event) => {
      const k = event.key.length === 1 ? event.key.toLowerCase() : event.key;
      if (k === 'Enter' || k === 'y') return once;
      if (k === 'n' || k === 'Escape') return reject;
      return null; // "a" is a letter like any other: "always" is never one key
    });
    return card;
  }

  // `words`: what a suggested pattern covers, shown instead of it (the pattern in its title).
  patternChoices(id, group, item, titled, words = '') {
    const patterns = item.patterns || [];
    const name = `pattern-${id}-${group}`;
    const custom = h('input', { type: 'text', className: 'pattern-custom', placeholder: 'another pattern',
      'aria-label': 'Another pattern' });
    const element = h('div', { className: 'patterns' },
      titled ? h('code', { className: 'pattern-command' }, reveal(item.shown ?? item.command)) : null,
      patterns.map((pattern, index) => h('label', words ? { title: pattern } : null,
        h('input', { type: 'radio', name, value: pattern, checked: index === 0 }),
        words ? h('span', { className: 'pattern-words' }, reveal(words)) : h('code', null, reveal(pattern)))),
      // One exact definition has no other pattern to write.
      words ? null : h('label', null, h('input', { type: 'radio', name, value: '', checked: !patterns.length,
        className: 'custom-choice' }), custom));
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
    const card = h('section', { className: 'ask question', tabIndex: -1,
      dataset: { session: data.sessionid ?? '', id: data.id, announce: `Question: ${data.text}` },
      'aria-label': 'Question', 'aria-keyshortcuts': options.length ? `1-${Math.min(options.length, 9)}` : null },
      h('header', null, h('strong', null, 'Question')),
      h('p', { className: 'ask-text' }, data.text),
      h('div', { className: 'actions' }, options.map((option, index) => h('button', { type: 'button',
        className: 'option', 'aria-keyshortcuts': index < 9 ? String(index + 1) : null, onclick: pick(option) },
      option, index < 9 ? key(String(index + 1)) : null))),
      h('form', { className: 'other', onsubmit: (event) => {
        event.preventDefault();
        if (other.value.trim()) this.answer(card, 'questions_reply', data.id, { answer: other.value.trim() });
      } }, other, h('button', { type: 'submit' }, 'Answer')),
      keysHint(options.length ? 'a digit picks an option' : ''),
      whyElement(data.id));
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

// How the keyboard gets to a card and what its keys do there: the person goes to the question,
// it never comes to them.
function keysHint(keys) {
  return h('p', { className: 'keys-hint' }, h('kbd', null, REACH_KEY), ' moves the keyboard here',
    keys ? `; then ${keys}.` : '.');
}

// Read as the buttons' description while they are disabled because the card cannot be seen.
function whyElement(id) {
  return h('p', { className: 'ask-why sr-only', id: `ask-why-${id}` });
}

// "Always" stores a rule that answers every later question like this one: the page's dialog
// shows exactly what it stores, and only its own button (Enter alone presses Cancel) stores it.
function confirmAlways(data, patterns, words = '') {
  const start = data.tool === 'mcp-start';
  return confirmAction({
    title: 'Always allow?',
    question: start
      ? 'Store a rule of this project: this exact definition of the server starts without asking from now on (a change to it asks again).'
      : `Store a rule of this project: from now on ${data.tool} runs without asking when it matches ${patterns.length > 1 ? 'these patterns' : 'this pattern'}.`,
    details: words ? h('span', { className: 'always-pattern' }, reveal(words))
      : patterns.map((pattern) => h('code', { className: 'always-pattern' }, reveal(pattern))),
    action: 'Always allow',
  });
}

// "Never start" stores a deny rule for the server's exact definition: no session asks again
// until the definition or one of its files changes (Rules lists it, to be removed there).
function confirmNever(data, words) {
  return confirmAction({
    title: 'Never start this server?',
    question: 'Store a rule of this project: this exact definition of the server is refused from now on, in every session, without asking (a change to it asks again; remove the rule in Rules to be asked).',
    details: words ? h('span', { className: 'always-pattern' }, reveal(words)) : null,
    action: 'Never start',
    danger: true,
  });
}

// The card's keys answer it while the focus is on the card itself or one of its choices (never
// while typing a pattern or an answer, nor Enter on one of its buttons, which presses that one).
// The focus gets there only by the person's act (a question never takes it), a held key's
// repeats are no answer, and neither is a key while its buttons are disabled (not seen, or busy).
function onKeys(card, action) {
  card.addEventListener('keydown', (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing || event.repeat) return;
    const target = event.target;
    const onCard = target === card || (target.matches?.('input[type=radio]') ?? false);
    if (!onCard) return;
    const answer = action(event);
    if (!answer) return;
    event.preventDefault();
    event.stopPropagation(); // Escape here rejects the question, it does not stop the run
    if (!card.querySelector('button:disabled')) answer(); // disabled: not seen, or an answer under way
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

// The start of a project MCP server: its file, what changed since it was approved (when it was),
// then the exact command line, each variable with its value (a value that looks like a secret is
// never sent to the page: the server marks it masked) and a warning on those that make programs
// load code, and the project files whose content the approval covers, with what it does not
// cover; or the URL, the host it goes to and the names of its headers (their values may be keys).
function serverStartView(input) {
  const remote = input.transport && input.transport !== 'stdio';
  const list = (items, className, item) => (Array.isArray(items) && items.length
    ? h('ul', { className: `ask-names ${className}` }, items.map(item)) : null);
  const none = () => h('span', { className: 'muted' }, ' none');
  const line = (text) => h('li', null, reveal(String(text)));
  const code = (text) => h('li', null, h('code', null, reveal(String(text))));
  const changed = list(input.changed, 'ask-changed', line);
  const variables = Array.isArray(input.variables) ? input.variables
    : (Array.isArray(input.env) ? input.env : []).map((name) => ({ name, masked: true }));
  return h('div', { className: 'ask-server' },
    h('div', { className: 'ask-folder' }, 'from ', h('code', null, reveal(input.file ?? '?')),
      h('span', { className: 'muted' }, ` · ${input.transport ?? 'stdio'}`)),
    changed ? [h('div', { className: 'label ask-changed-label' }, 'What changed since it was approved'), changed] : null,
    remote ? [
      h('div', { className: 'label' }, 'URL'),
      h('pre', { className: 'ask-input ask-url' }, reveal(input.url ?? '')),
      h('div', { className: 'ask-host' }, 'It connects to the host ', h('code', null, reveal(input.host || '?'))),
      h('div', { className: 'label' }, 'Headers it sends (names only)'), list(input.headers, 'ask-headers', code) ?? none(),
    ] : [
      h('div', { className: 'label' }, 'Command line'),
      h('pre', { className: 'ask-input ask-command' }, `$ ${reveal(input.command ?? '')}`),
      h('div', { className: 'label' }, 'Variables it gets'), list(variables, 'ask-variables', variableItem) ?? none(),
      h('div', { className: 'label' }, 'Files of the project it runs (the approval covers their content)'),
      list(input.files, 'ask-files', code) ?? none(),
      list(input.left_out, 'ask-left-out', line),
    ]);
}

// One variable of a server's start: `NAME = value`, or its value hidden; a variable that makes
// programs load code carries a warning with the reason.
function variableItem(variable) {
  const name = String(variable?.name ?? '');
  const shown = variable?.masked || typeof variable?.value !== 'string'
    ? h('span', { className: 'ask-masked' }, 'hidden: it looks like a secret')
    : h('code', { className: 'ask-value' }, reveal(variable.value));
  return h('li', { className: variable?.loads ? 'ask-loads' : null, dataset: { name } },
    h('code', { className: 'ask-name' }, reveal(name)), ' = ', shown,
    variable?.loads ? h('div', { className: 'ask-flag' }, '⚠ loads code: ', reveal(String(variable.loads))) : null);
}

// A file tool's call shows what it would change (write, edit, patch: the preview), its raw
// input a click away; a server's start its definition; an MCP tool's call its arguments; any
// The words above the patterns "always" may store: one per command that asks, or one to write
// when none is suggested.
function alwaysLabel(start, commands) {
  if (start) return 'Always allow this exact definition (any change to it asks again):';
  if (commands.length > 1) return 'Always allow, for each command:';
  return commands[0]?.patterns?.length ? 'Always allow this pattern:' : 'Always allow, with a pattern you write:';
}

// other call shows its input.
function inputView(data) {
  return [reachView(data), callView(data)];
}

// What a command will be able to reach (the sandbox), or why nothing confines it.
function reachView(data) {
  const reach = data.reach && typeof data.reach === 'object' ? data.reach : null;
  if (!reach || !('confined' in reach)) return null;
  if (!reach.confined) {
    return h('div', { className: 'ask-reach', dataset: { confined: 'false' } },
      h('strong', null, 'Not confined'), ` (${reveal(String(reach.why ?? ''))}): it can do all you can.`);
  }
  const writes = (Array.isArray(reach.writes) ? reach.writes : []).map((folder) => h('code', null, reveal(String(folder))));
  const missing = reach.missing && typeof reach.missing === 'object' ? Object.keys(reach.missing) : [];
  return h('div', { className: 'ask-reach', dataset: { confined: 'true' } },
    'Sandboxed: writes only ', writes.flatMap((code, index) => (index ? [', ', code] : [code])),
    `; network ${reach.network ? 'on (never Totem\'s own port)' : 'off'}`,
    missing.length ? h('span', { className: 'ask-reach-missing' }, `; not held here: ${missing.join(', ')}`) : null);
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
