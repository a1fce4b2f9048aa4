// The conversation of the open session: messages and their parts, kept live from events.
//
// Streamed deltas only append to a part's text; the DOM is painted once per animation frame for
// the parts that changed, so a fast stream or a 2,000-part session never re-renders the list.
//
// Every message has its actions (Copy: its text; Undo: take it and the later ones back, with
// their file changes; Fork: a new session up to it); an undone message is shown dimmed until a
// new prompt removes it. An answer shows the tokens it used (usage.js). A prompt sent while a run
// went on is marked queued, with Remove, until it runs; one sent with Steer is marked so. A tool
// call that changed files names them, each opening its diff; a code block of a finished answer
// can be saved as a file (saveas.js handles its button, and asks validationOf() first).
//
// Parts of their own: the starts of the project's MCP servers (an answer marked `servers`, its
// `mcp-start` tool parts) read as one line each; a `task` call links to its sub-agent's session;
// in a Total.js project a prompt may carry the Forge documentation it was given (`knowledge`,
// collapsed, its page shown as text only) and an answer the problems its code was checked for
// (`validation`).
import { h, showValue, formatSize, plural } from '/dom.js';
import { renderMarkdownInto } from '/markdown.js';
import { plainReason } from '/words.js';
import { addSaveButtons } from '/saveas.js';
import { messageUsage } from '/usage.js';

const BIG_TEXT_CHARS = 40000; // above this, a streaming part is repainted at most every PAINT_GAP_MS
const PAINT_GAP_MS = 250;
const STICK_PX = 48;
const COPIED_MS = 1500;
const STATUS_WORDS = {
  pending: 'pending', running: 'running', done: 'done', denied: 'denied', error: 'error',
  aborted: 'aborted', streaming: 'streaming',
};

export class Conversation {
  // onUndo(messageid), onFork(messageid), onUnqueue(messageid), onOpenChange(path): the actions
  // of messages and tools; sessionHref(sessionid): the address of a session of the project (a
  // sub-agent's). jump: the "Jump to latest" button, shown while a run goes on and the view is
  // scrolled up.
  constructor(root, { onLoadEarlier, onUndo, onFork, onUnqueue, onOpenChange, onRetry, onProviders, sessionHref, jump }) {
    this.root = root;
    this.actions = { onUndo, onFork, onUnqueue, onOpenChange, onRetry, onProviders, sessionHref };
    this.list = h('div', { className: 'messages' });
    this.earlier = h('button', { type: 'button', className: 'earlier', hidden: true, onclick: onLoadEarlier },
      'Load earlier messages');
    this.working = h('div', { className: 'working', hidden: true }, h('span', { className: 'spinner' }), 'Working…');
    this.errors = h('div', { className: 'run-errors' });
    root.replaceChildren(this.earlier, this.list, this.errors, this.working);
    this.stuck = true;
    this.running = false;
    this.jump = jump ?? null;
    this.jump?.addEventListener('click', () => this.follow());
    this.autoTop = 0; // where scrollToBottom put the view last
    // Messages drawn late (content-visibility, images) grow the list after a scroll: follow them.
    new ResizeObserver(() => this.keepBottom()).observe(this.list);
    root.addEventListener('scroll', () => {
      // Content added between our own scroll and its event leaves the view above the bottom:
      // it still follows unless the person scrolled up from where we put it.
      const bottom = root.scrollTop + root.clientHeight >= root.scrollHeight - STICK_PX;
      this.stuck = bottom || (this.stuck && root.scrollTop >= this.autoTop - 2);
      this.paintJump();
    }, { passive: true });
    this.reset();
  }

  reset() {
    this.jobStates = new Map(); // job id -> the job as the Jobs panel last read it
    this.messages = new Map(); // id -> {message, element, partsElement}
    this.parts = new Map(); // id -> view (see renderPart)
    this.pending = new Set();
    this.frame = 0;
    this.stale = false; // a delta arrived for a part we never saw: reload when the run ends
    this.oldest = null;
    this.list.replaceChildren();
    this.errors.replaceChildren();
    this.earlier.hidden = true;
    this.setRunning(false);
  }

  // The stored state of a session (Sessions|messages), replacing what is shown.
  load(messages, more) {
    this.reset();
    const fragment = document.createDocumentFragment();
    for (const message of messages) fragment.append(this.renderMessage(message));
    this.list.append(fragment);
    this.oldest = messages[0]?.id ?? null;
    this.earlier.hidden = !more;
    this.stuck = true;
    this.scrollToBottom();
  }

  // An older page, put above what is shown without moving the view.
  prepend(messages, more) {
    const before = this.root.scrollHeight;
    const fragment = document.createDocumentFragment();
    for (const message of messages) if (!this.messages.has(message.id)) fragment.append(this.renderMessage(message));
    this.list.prepend(fragment);
    this.oldest = messages[0]?.id ?? this.oldest;
    this.earlier.hidden = !more;
    this.root.scrollTop += this.root.scrollHeight - before;
  }

  // Back to the newest output, and staying there as it grows (a prompt sent, the jump button).
  follow() {
    this.stuck = true;
    this.scrollToBottom();
    this.paintJump();
  }

  paintJump() {
    if (this.jump) this.jump.hidden = this.stuck || !this.running;
  }

  setRunning(running) {
    if (running && this.working.hidden) this.errors.replaceChildren(); // a new run starts clean
    this.running = running;
    this.paintJump();
    this.working.hidden = !running;
    this.root.classList.toggle('running', running); // nothing is undone while a run goes on
  }

  hasReverted() {
    return !!this.list.querySelector('.msg.reverted');
  }

  hasQueued() {
    return !!this.list.querySelector('.msg.queued');
  }

  // After an abort the queued prompts stay in the conversation as said, not run.
  clearQueued() {
    for (const element of this.list.querySelectorAll('.msg.queued')) {
      const entry = this.messages.get(element.dataset.id);
      if (!entry) continue;
      entry.message.data = { ...entry.message.data, queued: false };
      this.repaintMessage(entry);
    }
  }

  // The words of a prompt (a user message), or null for an answer or an unknown message.
  promptOf(messageid) {
    if (this.messages.get(messageid)?.message.role !== 'user') return null;
    const text = this.promptText(messageid);
    return text.trim() ? text : null;
  }

  promptText(messageid) {
    return [...this.parts.values()].filter((view) => view.part.messageid === messageid && view.kind === 'text')
      .map((view) => view.text).join('');
  }

  // The words of the newest prompt that ran (not a queued one), for Retry; null without one.
  lastPrompt() {
    const prompts = [...this.messages.values()].filter(({ message }) => message.role === 'user'
      && !message.data?.queued && !message.reverted);
    const last = prompts.at(-1)?.message;
    if (!last) return null;
    const text = this.promptText(last.id);
    return text.trim() ? text : null;
  }

  removeMessage(messageid) {
    const entry = this.messages.get(messageid);
    if (!entry) return;
    for (const part of entry.partsElement.querySelectorAll('[data-part]')) this.parts.delete(part.dataset.part);
    entry.element.remove();
    this.messages.delete(messageid);
  }

  // Stored messages read again (the end of a run): the tokens of the answers shown are theirs.
  refresh(messages) {
    for (const message of messages) {
      const entry = this.messages.get(message.id);
      if (!entry) continue;
      // Why a run stopped is known whole once it is stored (the live event has only the words).
      const ended = message.data?.errorkind !== entry.message.data?.errorkind;
      if (message.role !== 'assistant') {
        if (!ended) continue;
        entry.message.data = message.data;
        this.repaintMessage(entry);
        continue;
      }
      const summary = !!message.data?.compaction !== !!entry.message.data?.compaction;
      entry.message.data = message.data;
      entry.message.model = message.model;
      if (summary || ended) { // known only once the answer is stored whole
        this.repaintMessage(entry);
        continue;
      }
      const foot = entry.element.querySelector(':scope > .msg-foot');
      const usage = messageUsage(message);
      foot?.querySelector(':scope > .msg-usage')?.remove();
      if (foot && usage) foot.prepend(usage);
    }
  }

  // The tokens of the newest answer that has them, with its model: {tokens, model} or null.
  lastUsage() {
    const answers = [...this.messages.values()].filter(({ message }) => message.role === 'assistant'
      && typeof message.data?.tokens?.input === 'number' && !message.reverted);
    const last = answers[answers.length - 1]?.message;
    return last ? { tokens: last.data.tokens, model: last.model } : null;
  }

  // The validation part of an answer ({problems, blocking}), or null when its code was not
  // found to need review (or it was not checked).
  validationOf(messageid) {
    const entry = this.messages.get(messageid);
    if (!entry) return null;
    // A check of the step's edited files (`kind: 'check'`) says nothing of the answer's own code.
    const found = [...entry.partsElement.querySelectorAll(':scope > [data-kind=validation]')]
      .filter((element) => this.parts.get(element.dataset.part)?.part.data?.kind !== 'check').pop();
    const data = found ? this.parts.get(found.dataset.part)?.part.data : null;
    return data && typeof data === 'object' ? data : null;
  }

  // The text of a message as Markdown: its text parts, in order.
  messageText(messageid) {
    const entry = this.messages.get(messageid);
    if (!entry) return '';
    return [...entry.partsElement.querySelectorAll(':scope > [data-kind=text]')]
      .map((element) => this.parts.get(element.dataset.part)?.text ?? '').filter((text) => text.trim()).join('\n\n');
  }

  async copyMessage(messageid, button) {
    try {
      await navigator.clipboard.writeText(this.messageText(messageid));
      button.textContent = 'Copied';
    } catch {
      button.textContent = 'Copy failed';
    }
    setTimeout(() => { button.textContent = 'Copy'; }, COPIED_MS);
  }

  showError(message, retry) {
    if (!retry) this.lastError = message;
    this.errors.append(h('div', { className: `run-error${retry ? ' retry' : ''}`, role: 'alert' },
      retry ? `${message}` : `Error: ${message}`));
    this.keepBottom();
  }

  addMessage(message) {
    if (this.messages.has(message.id)) return;
    if (message.role === 'user') this.errors.replaceChildren();
    else for (const notice of this.errors.querySelectorAll('.retry')) notice.remove(); // the retry is under way
    this.list.append(this.renderMessage(message));
    this.keepBottom();
  }

  addPart(part) {
    if (this.parts.has(part.id)) {
      // Sent again on subscribe: its text so far is the truth, the deltas go on from there.
      this.updatePart(part, { textSoFar: true });
      return;
    }
    const owner = this.messages.get(part.messageid);
    if (!owner) {
      this.stale = true;
      return;
    }
    owner.partsElement.append(this.renderPart(part, owner.message.role));
    this.markChanged(part);
    this.keepBottom();
  }

  delta(partid, text) {
    const view = this.parts.get(partid);
    if (!view) {
      this.stale = true;
      return;
    }
    view.text += text;
    this.pending.add(view);
    this.schedule();
  }

  updatePart(part, { textSoFar = false } = {}) {
    const view = this.parts.get(part.id);
    if (!view) {
      this.addPart(part);
      return;
    }
    // The stored text wins once the part is closed; until then the deltas are newer.
    const fromEvent = typeof part.text === 'string' && (textSoFar || (part.closed && part.text));
    const text = fromEvent ? part.text : view.text;
    const wasOpen = (view.details || view.element).open;
    const fresh = this.renderPart({ ...part, text }, view.role);
    const next = this.parts.get(part.id);
    if (wasOpen) (next.details || next.element).open = true;
    view.element.replaceWith(fresh);
    this.pending.delete(view);
    this.markChanged(part);
  }

  // A message whose tool calls changed files keeps its actions in sight.
  markChanged(part) {
    if (!part.data?.changed?.length) return;
    this.messages.get(part.messageid)?.element.classList.add('changed');
  }

  closePart(partid) {
    const view = this.parts.get(partid);
    if (!view) return;
    view.part.closed = view.part.closed || Date.now();
    if (view.part.status === 'streaming') view.part.status = 'done';
    view.element.classList.remove('streaming');
    this.pending.add(view);
    this.schedule();
    if (view.kind === 'reasoning') view.summary.textContent = 'Reasoning';
  }

  // -- painting -------------------------------------------------------------------------------

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    const now = performance.now();
    let later = false;
    for (const view of this.pending) {
      if (view.text.length > BIG_TEXT_CHARS && now - view.painted < PAINT_GAP_MS && !view.part.closed) {
        later = true;
        continue;
      }
      this.paint(view);
      view.painted = now;
      this.pending.delete(view);
    }
    if (later) setTimeout(() => this.schedule(), PAINT_GAP_MS);
    this.keepBottom();
  }

  paint(view) {
    if (view.kind === 'text' && view.role === 'assistant') paintMarkdown(view);
    else if ((view.kind === 'tool' && !view.output) || view.kind === 'validation') return; // drawn whole from their data
    else if (view.kind === 'tool') {
      view.output.textContent = view.text || view.part.data?.output || '';
      view.outputLabel.hidden = view.output.hidden = !view.output.textContent;
    } else view.body.textContent = view.text;
  }

  keepBottom() {
    if (this.stuck) this.scrollToBottom();
  }

  scrollToBottom() {
    this.root.scrollTop = this.root.scrollHeight;
    this.autoTop = this.root.scrollTop;
  }

  // -- rendering ------------------------------------------------------------------------------

  renderMessage(message) {
    const partsElement = h('div', { className: 'parts' });
    const element = h('article', { dataset: { id: message.id } }, partsElement);
    const entry = { message, element, partsElement };
    this.messages.set(message.id, entry);
    for (const part of message.parts || []) {
      partsElement.append(this.renderPart(part, message.role));
      this.markChanged(part);
    }
    this.repaintMessage(entry);
    return element;
  }

  // What a message shows around its parts (marks, attachments, usage, actions), from its data.
  repaintMessage({ message, element, partsElement }) {
    const data = message.data || {};
    const queued = message.role === 'user' && !!data.queued;
    element.className = `msg ${message.role}${message.reverted ? ' reverted' : ''}${queued ? ' queued' : ''}`
      + `${data.compaction ? ' compaction' : ''}${data.servers ? ' servers' : ''}`
      + `${element.classList.contains('changed') ? ' changed' : ''}`;
    const files = data.attachments;
    element.replaceChildren(...[
      message.role === 'user' ? h('div', { className: 'who' }, 'You',
        queued ? h('span', { className: 'queued-note', title: 'Sent while a run goes on: it runs when that one ends' }, 'queued') : null,
        data.steer ? h('span', { className: 'steer-note', title: 'Sent into the running step: the agent read it at its next step' }, 'steered') : null)
        : null,
      message.role === 'assistant' && Array.isArray(data.instructions) ? instructionsNote(data.instructions) : null,
      data.compaction ? h('div', { className: 'compaction-note', title: 'The requests go on from this summary and your last message' },
        'Summary of the conversation so far') : null,
      message.reverted ? h('div', { className: 'undone-note', title: 'Taken back by an undo: Redo puts it back, a new prompt removes it' }, 'undone') : null,
      partsElement,
      endedNote(data, this.actions),
      files?.length ? renderAttachments(files) : null,
      h('div', { className: 'msg-foot' }, message.role === 'assistant' ? messageUsage(message) : null, this.messageActions(message)),
    ].filter(Boolean));
  }

  // The run stopped (aborted or failed): the mark goes on its last message, as the server
  // stores it there (data.ended, data.error), and the error leaves the notices below.
  markEnded(status) {
    const last = [...this.messages.values()].filter(({ message }) => !(message.role === 'user' && message.data?.queued)).at(-1);
    if (!last) return;
    const error = status === 'error' ? this.lastError : null;
    last.message.data = { ...last.message.data, ended: status, ...(error ? { error } : {}) };
    this.repaintMessage(last);
    if (error) for (const notice of this.errors.querySelectorAll('.run-error:not(.retry)')) notice.remove();
    this.lastError = null;
  }

  // Whether a message carries the mark of where its run stopped.
  hasEndMark() {
    return [...this.messages.values()].some(({ message }) => message.data?.ended);
  }

  messageActions(message) {
    const { onUndo, onFork, onUnqueue } = this.actions;
    const queued = message.role === 'user' && message.data?.queued;
    const copy = h('button', { type: 'button', className: 'link copy-message', title: 'Copy the text of this message (Markdown)' }, 'Copy');
    copy.addEventListener('click', () => this.copyMessage(message.id, copy));
    return h('div', { className: `msg-actions${queued ? ' shown' : ''}` },
      queued && onUnqueue ? h('button', { type: 'button', className: 'link unqueue',
        title: 'Take this prompt back: it is not sent', onclick: () => onUnqueue(message.id) }, 'Remove') : null,
      copy,
      !message.reverted && !queued && onUndo ? h('button', { type: 'button', className: 'link undo',
        title: 'Undo this message and the ones after it: the files they changed are restored',
        onclick: () => onUndo(message.id) }, 'Undo') : null,
      onFork && !queued ? h('button', { type: 'button', className: 'link fork',
        title: 'A new session with the conversation up to this message', onclick: () => onFork(message.id) }, 'Fork') : null);
  }

  // The background jobs of the session as last read: each call that started one says how it is.
  setJobs(jobs) {
    this.jobStates = new Map(jobs.map((job) => [job.id, job]));
    for (const view of this.parts.values()) if (view.jobNote) paintJobNote(view, this.jobStates);
  }

  renderPart(part, role) {
    const view = { part, role, kind: part.kind, text: part.text || '', painted: 0 };
    if (part.kind === 'tool' && part.data?.tool === 'mcp-start') renderServerStart(view);
    else if (part.kind === 'tool') {
      renderTool(view, this.actions);
      if (view.jobNote) paintJobNote(view, this.jobStates);
    } else if (part.kind === 'knowledge') renderKnowledge(view);
    else if (part.kind === 'validation') renderValidation(view);
    else if (part.kind === 'reasoning') {
      view.summary = h('summary', null, part.closed ? 'Reasoning' : 'Thinking…');
      view.body = h('div', { className: 'reasoning-text' }, view.text);
      view.element = h('details', { className: 'part reasoning' }, view.summary, view.body);
    } else if (part.kind === 'text') {
      view.body = h('div', { className: role === 'assistant' ? 'md' : 'plain' });
      if (role === 'assistant') paintMarkdown(view);
      else view.body.textContent = view.text;
      view.element = h('div', { className: 'part text' }, view.body);
    } else {
      view.body = h('div', { className: 'plain' }, view.text || showValue(part.data ?? ''));
      view.element = h('div', { className: `part other ${part.kind}` }, h('div', { className: 'label' }, part.kind), view.body);
    }
    if (!part.closed && part.status === 'streaming') view.element.classList.add('streaming');
    view.element.dataset.part = part.id;
    view.element.dataset.kind = part.kind;
    this.parts.set(part.id, view);
    return view.element;
  }
}

// An answer's text as Markdown (built again only from its last block as it streams); once it is
// complete, its code blocks can be saved as files.
function paintMarkdown(view) {
  renderMarkdownInto(view.body, view.text, { complete: !!view.part.closed });
  if (view.part.closed) addSaveButtons(view.body);
}

function toolSubject(data) {
  let input = data.input;
  if (!input && data.arguments) {
    try { input = JSON.parse(data.arguments); } catch { return ''; }
  }
  if (!input || typeof input !== 'object') return '';
  if (data.tool === 'task' && typeof input.description === 'string') {
    return `${typeof input.agent === 'string' && input.agent ? input.agent : 'explore'}: ${input.description}`.slice(0, 120);
  }
  const value = input.command ?? input.path ?? input.pattern ?? input.question ?? input.name ?? input.url
    ?? (Array.isArray(input.items) ? `${input.items.length} items` : '');
  const text = typeof value === 'string' ? value : '';
  return text.length > 120 ? `${text.slice(0, 120)}…` : text;
}

// One sentence: the reason says who decided when it can ("denied by the project rule ..."), so
// it is not said twice ("Denied by a rule: denied by ...").
function decisionText(decision) {
  if (!decision) return '';
  const verb = decision.action === 'deny' ? 'Denied' : decision.action === 'allow' ? 'Allowed' : 'Asked';
  const reason = plainReason(decision.reason);
  if (decision.by === 'person') {
    return `${verb} by you (${decision.reply})${decision.action !== 'deny' && reason ? `: ${reason}` : ''}`;
  }
  if (/^(allowed|denied|approval required)\b/i.test(reason)) return reason[0].toUpperCase() + reason.slice(1);
  return reason ? `${verb}: ${reason}` : `${verb} by ${decision.by === 'rule' ? 'a rule' : 'Totem'}`;
}

// Which instruction files (AGENTS.md, CLAUDE.md, the person's own) the model was given here.
function instructionsNote(sources) {
  const named = (sources ?? []).filter((source) => typeof source === 'string' && source);
  if (!named.length) return null;
  return h('div', { className: 'instructions-note muted', title: 'Given to the model with this, as instructions' },
    `Instructions read: ${named.join(', ')}`);
}

function renderTool(view, { onOpenChange, sessionHref } = {}) {
  const { part } = view;
  const data = part.data || {};
  const status = part.status;
  view.output = h('pre', { className: 'tool-output' }, view.text || (data.output ?? ''));
  view.outputLabel = h('div', { className: 'label' }, 'Output');
  view.outputLabel.hidden = view.output.hidden = !view.output.textContent;
  view.details = h('details', null,
    h('summary', null,
      h('span', { className: `badge status-${status}` }, STATUS_WORDS[status] || status),
      h('span', { className: 'tool-name' }, data.tool || 'tool'),
      typeof data.check === 'string' ? h('span', { className: 'badge tool-check', title: "One of the project's checks after the step's edits (.totem/checks.json)" }, `check ${data.check}`) : null,
      h('span', { className: 'tool-subject' }, toolSubject(data))),
    h('div', { className: 'tool-body' },
      h('div', { className: 'label' }, 'Input'),
      h('pre', { className: 'tool-input' }, showValue(data.input ?? data.arguments ?? '', 20000)),
      view.outputLabel, view.output,
      data.decision ? h('div', { className: 'decision' }, decisionText(data.decision)) : null));
  const note = (status === 'denied' || status === 'error') && data.error
    ? h('div', { className: 'tool-note' }, data.error) : null;
  // A bash call that started a job is done at once; the job goes on, and says so here.
  const job = data.result?.background && typeof data.result.job === 'string' ? data.result.job : null;
  view.jobNote = job ? h('div', { className: 'tool-job', dataset: { job } }) : null;
  view.element = h('div', { className: `part tool status-${status}` }, view.details, note, view.jobNote,
    instructionsNote(Array.isArray(data.instructions) ? data.instructions.map((item) => item?.source) : null),
    changedFiles(data.changed, onOpenChange),
    data.tool === 'task' ? subAgentLink(data.sessionid, sessionHref) : null);
}

const JOB_WORDS = {
  running: 'Job running in the background: it keeps running until it ends or you stop it (Jobs)',
  done: 'Background job ended', failed: 'Background job failed', timedout: 'Background job stopped at its time limit',
  stopped: 'Background job stopped',
};

function paintJobNote(view, jobStates) {
  const job = jobStates.get(view.jobNote.dataset.job);
  view.jobNote.dataset.status = job?.status ?? '';
  const exit = job?.status === 'failed' && job.exit_code !== null && job.exit_code !== undefined ? ` (exit ${job.exit_code})` : '';
  view.jobNote.textContent = job ? `${JOB_WORDS[job.status] ?? job.status}${exit}` : 'Started as a background job (see Jobs)';
}

// A task's sub-agent works in a session of its own (known once it starts): a link opens it.
function subAgentLink(sessionid, sessionHref) {
  if (typeof sessionid !== 'string' || !sessionid || !sessionHref) return null;
  return h('div', { className: 'tool-subagent' },
    h('a', { className: 'open-subagent', href: sessionHref(sessionid), dataset: { session: sessionid },
      title: 'The session in which the sub-agent works on this task' }, "Open the sub-agent's session"));
}

// One start of a project MCP server (an `mcp-start` tool part of an answer marked `servers`), or
// a problem of the servers' files: one line saying what became of it, its definition and what
// decided it a click away.
function renderServerStart(view) {
  const { part } = view;
  const data = part.data || {};
  const input = data.input && typeof data.input === 'object' ? data.input : {};
  const status = part.status;
  const name = String(input.server ?? '');
  const tools = /started with (\d+) tools?/.exec(String(data.output ?? ''));
  const reason = String(data.error ?? '').replace(/^Not started:\s*/i, '');
  let line;
  if (typeof input.error === 'string') { // a problem of the servers' files, not a start
    const problem = name && input.error.startsWith(`${name}: `) ? input.error.slice(name.length + 2) : input.error;
    line = name ? `MCP server ${name} cannot be used: ${problem} (${input.file})` : `MCP servers of ${input.file}: ${problem}`;
  } else if (status === 'done') line = `MCP server ${name} started${tools ? ` (${plural(Number(tools[1]), 'tool')})` : ''}`;
  else if (status === 'denied' || status === 'error') line = `MCP server ${name} not started${reason ? `: ${reason}` : ''}`;
  else if (status === 'running') line = `MCP server ${name} starting…`;
  else line = `MCP server ${name}: waiting for your answer`;
  const target = input.transport && input.transport !== 'stdio'
    ? [h('div', { className: 'label' }, 'URL'), h('pre', { className: 'tool-input' }, String(input.url ?? '')),
      h('div', { className: 'muted' }, `host ${input.host ?? '?'}${input.headers?.length ? ` · headers ${input.headers.join(', ')}` : ''}`)]
    : input.command !== undefined
      ? [h('div', { className: 'label' }, 'Command line'), h('pre', { className: 'tool-input' }, `$ ${input.command}`),
        input.env?.length ? h('div', { className: 'muted' }, `variables ${input.env.join(', ')}`) : null]
      : [h('pre', { className: 'tool-input' }, showValue(input, 4000))];
  view.details = h('details', null,
    h('summary', null,
      h('span', { className: `badge status-${status}` }, status === 'done' ? 'started' : STATUS_WORDS[status] || status),
      h('span', { className: 'server-line' }, line)),
    h('div', { className: 'tool-body' },
      input.file && input.transport ? h('div', { className: 'muted' }, `${input.file} · ${input.transport}`) : null,
      target,
      data.output ? [h('div', { className: 'label' }, 'Output'), h('pre', { className: 'tool-output' }, String(data.output))] : null,
      data.decision ? h('div', { className: 'decision' }, decisionText(data.decision)) : null));
  view.element = h('div', { className: `part tool server-start status-${status}`, dataset: { server: name } }, view.details);
}

// The Forge documentation a prompt was given (`knowledge`): its title and source, any note (an
// old copy, a failure) in sight, the page's text collapsed. The page is untrusted: text only.
function renderKnowledge(view) {
  const data = view.part.data || {};
  const failed = !!data.failed;
  const source = String(data.source ?? '');
  const web = /^https?:\/\//i.test(source);
  view.body = h('div', { className: 'knowledge-text plain' }, view.text);
  view.details = h('details', null,
    h('summary', null, h('span', { className: 'knowledge-title' },
      `Forge documentation: ${data.title || (failed ? 'not read' : 'no matching page')}`),
    typeof data.chars === 'number' && data.chars ? h('span', { className: 'muted knowledge-size' }, ` · ${data.chars} characters`) : null),
    h('div', { className: 'knowledge-body' },
      source ? h('div', { className: 'knowledge-source' }, h('span', { className: 'muted' }, 'source '),
        web ? h('a', { href: source, target: '_blank', rel: 'noopener noreferrer' }, source) : h('code', null, source),
        data.indexed ? h('span', { className: 'muted' }, ` · index of ${data.indexed}`) : null) : null,
      view.body));
  view.element = h('div', { className: `part knowledge${failed ? ' failed' : ''}` }, view.details,
    data.note ? h('div', { className: 'knowledge-note', role: failed ? 'alert' : null }, String(data.note)) : null);
}

// The problems found in an answer's code (`validation`, after its text): each with its severity
// and where it is; `blocking` (an error) blocks its Save as.
function renderValidation(view) {
  const data = view.part.data || {};
  const problems = Array.isArray(data.problems) ? data.problems : [];
  const blocking = data.blocking !== false;
  view.body = h('ul', { className: 'validation-problems' }, problems.map((problem) => h('li', {
    className: `problem severity-${problem.severity === 'error' ? 'error' : 'warning'}`, dataset: { rule: String(problem.rule ?? '') } },
  h('span', { className: 'problem-severity' }, String(problem.severity ?? 'warning')),
  h('span', { className: 'problem-message' }, String(problem.message ?? '')),
  problemPlace(problem) ? h('span', { className: 'muted problem-place' }, problemPlace(problem)) : null,
  problem.rule ? h('code', { className: 'muted problem-rule' }, String(problem.rule)) : null)));
  view.element = h('div', { className: `part validation${blocking ? ' blocking' : ''}`, role: 'note' },
    h('div', { className: 'validation-head' }, data.kind === 'check' ? checkHead(data, problems) : blocking
      ? "This answer's code needs review: Save as is blocked"
      : `This answer's code has ${plural(problems.length, 'warning')}: Save as asks first`),
    view.body);
}

// The head of a check's validation after a step's edits (checks.py): the check and its files, or
// the project's checks file that has a problem.
function checkHead(data, problems) {
  if (typeof data.check !== 'string') return "The project's checks file (.totem/checks.json) has a problem";
  const files = Array.isArray(data.files) ? data.files.map(String).join(', ') : '';
  return [h('span', { className: 'badge tool-check', title: "One of the project's checks after the step's edits" },
    `check ${data.check}`), ` ${files}: ${problems.length ? plural(problems.length, 'problem') : 'passed'}`];
}

// "block 2, line 5" (the answer's fenced blocks counted from 1), "controllers/api.js, line 3"
// (a checked file), or "".
function problemPlace(problem) {
  const line = typeof problem?.line === 'number' ? `, line ${problem.line}` : '';
  if (typeof problem?.file === 'string') return `${problem.file}${line}`;
  if (typeof problem?.block !== 'number') return '';
  return `block ${problem.block}${line}`;
}

function changedFiles(paths, onOpenChange) {
  if (!Array.isArray(paths) || !paths.length) return null;
  return h('div', { className: 'tool-changed' }, h('span', { className: 'muted' }, 'Changed'),
    paths.map((path) => h('button', { type: 'button', className: 'link changed-file', dataset: { path },
      title: 'Show the diff of this file', onclick: () => onOpenChange?.(String(path)) }, String(path))));
}

function renderAttachments(files) {
  return h('div', { className: 'attachments' }, files.map((file) => {
    const url = `/attachments/${encodeURIComponent(file.id)}/`;
    const image = /^image\/(png|jpeg|gif|webp)$/.test(file.mime);
    return h('a', { className: 'file', href: url, target: '_blank', rel: 'noopener', title: `${file.name} (${formatSize(file.size)})` },
      image ? h('img', { src: url, alt: file.name, loading: 'lazy' }) : null,
      h('span', null, file.name));
  }));
}

// Where a run stopped, on its last message: aborted, or the error that ended it.
// A failed run says, in words, what to do about its kind of error (data.errorkind: a provider
// error's kind, or steps, cost, disk, internal), with the buttons for it: Retry sends the last prompt
// again, Providers opens the provider settings.
const PROVIDER_FIX = 'Check the provider in Providers (its key, its account, its address), or choose another model.';
const SERVER_FIX = 'Check that the model server is running and reachable from this computer, then retry.';
const ERROR_ADVICE = {
  auth: ['Open Providers and enter a valid API key for this provider, then retry.', ['providers', 'retry']],
  billing: ['Add credit or quota to the provider account, or choose another model, then retry.', ['providers', 'retry']],
  forbidden: [PROVIDER_FIX, ['providers', 'retry']],
  model_not_found: ['Choose a model that the provider has (Providers lists them), then retry.', ['providers', 'retry']],
  not_found: ['The provider\'s address looks wrong: correct it in Providers, then retry.', ['providers', 'retry']],
  redirect: ['Correct the provider\'s address in Providers, then retry.', ['providers', 'retry']],
  invalid_request: [PROVIDER_FIX, ['providers', 'retry']],
  tools_unsupported: ['Choose a model that supports tool calls, then retry.', ['providers', 'retry']],
  unsupported: [PROVIDER_FIX, ['providers', 'retry']],
  connection: [SERVER_FIX, ['retry', 'providers']],
  timeout: [SERVER_FIX, ['retry', 'providers']],
  server: [SERVER_FIX, ['retry', 'providers']],
  overloaded: ['The model server is busy or still loading the model: wait a moment, then retry.', ['retry']],
  rate_limit: ['The provider\'s rate limit was reached: wait a minute, then retry.', ['retry']],
  request_too_large: ['Wait a minute, or start a new session with a shorter prompt.', ['retry']],
  context_length: ['The conversation no longer fits the model: start a new session, or choose a model with a larger context window.', ['providers']],
  tool_use_failed: ['The model wrote a malformed tool call: retry, or choose another model.', ['retry', 'providers']],
  invalid_response: ['The provider answered something Totem could not read: retry, or choose another model.', ['retry', 'providers']],
  steps: ['Send a prompt to go on from here.', []],
  cost: ['Raise the spending limit (Spending limit per run, in Session settings), then send a prompt to go on.', []],
  disk: ['Free some space on the disk, then retry.', ['retry']],
  internal: ['The server log says what went wrong; retry once it is fixed.', ['retry']],
};
const FIX_BUTTONS = { retry: ['Retry', 'onRetry'], providers: ['Open Providers', 'onProviders'] };

function endedNote(data, actions = {}) {
  if (data.ended === 'aborted') {
    return h('div', { className: 'ended-note aborted', title: 'The run was stopped here; what came before is kept' },
      'Stopped here: the run was aborted');
  }
  if (data.ended !== 'error') return null;
  const [advice, fixes] = ERROR_ADVICE[data.errorkind] ?? ['Retry, or look at the server log if it happens again.', ['retry']];
  const buttons = fixes.filter((fix) => actions[FIX_BUTTONS[fix][1]]).map((fix) => h('button', {
    type: 'button', className: `small fix-${fix}`, onclick: () => actions[FIX_BUTTONS[fix][1]](),
  }, FIX_BUTTONS[fix][0]));
  return h('div', { className: 'ended-note error', role: 'note', dataset: { kind: data.errorkind ?? '' } },
    h('div', { className: 'ended-why' }, `The run stopped here with an error${data.error ? `: ${data.error}` : ''}`),
    h('div', { className: 'ended-advice' }, advice),
    buttons.length ? h('div', { className: 'ended-fixes' }, ...buttons) : null);
}
