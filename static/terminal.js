// The Terminal panel: the person's own shell of the open session (Sessions|terminal), below the
// conversation. xterm.js (static/vendor/, classic scripts) draws it: loaded when a shell is first
// shown or started, not with the page (it is the page's largest script, and most visits open no
// terminal); what the shell printed meanwhile is held and written once it is there.
//
// Opening a session reattaches to its shell when one runs (the scrollback is written again);
// "Open terminal" starts one. Keystrokes and pastes go to Sessions|terminalinput as base64 of
// their UTF-8 bytes, one request at a time and in order (what is typed meanwhile travels with
// the next one); the size follows the panel (FitAddon, ResizeObserver, debounced). The shell's
// output comes as terminal.output events, its end as terminal.exit. Nothing else ever types
// into it: no tool and no event writes input.
//
// The page's Content-Security-Policy has no 'unsafe-inline' style: xterm 5.5's DOM renderer
// puts its theme and cell sizes in <style> elements and the colour of a 24-bit coloured cell
// in a style attribute, which the browser refuses. withAdoptedStyles() hands it constructed
// style sheets instead, and cellStyles() sets those colours through the CSSOM.
import { api } from '/api.js';
import { byId, loadScript } from '/dom.js';

const MAX_INPUT_BYTES = 64 * 1024; // the server's limit of one Sessions|terminalinput
const FIT_DELAY_MS = 60;
const RESIZE_DELAY_MS = 200;
const SIZE_KEY = 'totem.terminal.size';
const LIBRARY = ['/vendor/xterm/xterm.js', '/vendor/xterm-addon-fit/addon-fit.js'];
const THEME = {
  background: '#1f2328', foreground: '#e6edf3', cursor: '#e6edf3', selectionBackground: '#3b5b8a',
};

// Bytes as base64. What is typed is encoded as UTF-8 first (TextEncoder): btoa alone takes a
// string of Latin-1 characters only.
function bytesBase64(bytes) {
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

export class TerminalPanel {
  constructor() {
    this.panel = byId('terminal-panel');
    this.screen = byId('terminal-screen');
    this.note = byId('terminal-note');
    this.status = byId('terminal-status');
    this.startButton = byId('terminal-start');
    this.stopButton = byId('terminal-stop');
    this.toggle = byId('terminal-toggle');
    this.sessionid = null;
    this.state = { status: 'none' };
    this.error = '';
    this.reading = 0; // only the answer to the latest Sessions|terminal is used
    this.held = null; // the shell's events while it is read: [{text} | {exit}]
    this.hidden = new Set(); // sessions whose panel the person closed
    this.unsent = []; // input typed while a request carries the one before
    this.sending = false;
    this.busy = false;
    this.starting = false;
    this.sent = null; // the size the shell was last told
    this.size = readSize();
    this.fitTimer = 0;
    this.resizeTimer = 0;
    this.term = null; // made once xterm.js is loaded (needTerminal), put on the page when first shown
    this.library = null; // the promise of that load
    this.libraryFailed = false;
    this.mounted = false;
    this.startButton.addEventListener('click', () => this.start());
    this.stopButton.addEventListener('click', () => this.stop());
    byId('terminal-hide').addEventListener('click', () => this.setShown(false));
    this.toggle.addEventListener('click', () => this.setShown(this.panel.hidden));
    this.paint();
  }

  // xterm.js loaded and the terminal made (once): it resolves either way, this.term says.
  needTerminal() {
    this.library ??= LIBRARY.reduce((loaded, src) => loaded.then(() => loadScript(src)), Promise.resolve())
      .catch(() => {}) // makeTerminal() finds no library then
      .then(() => {
        this.term = this.makeTerminal();
        this.libraryFailed = !this.term;
        this.paint();
      });
    return this.library;
  }

  makeTerminal() {
    if (!window.Terminal || !window.FitAddon) return null; // paint() says so
    const mono = getComputedStyle(document.documentElement).getPropertyValue('--mono').trim();
    const term = new window.Terminal({ cursorBlink: true, fontFamily: mono || 'monospace', fontSize: 13,
      scrollback: 5000, theme: THEME });
    this.fitter = new window.FitAddon.FitAddon();
    term.loadAddon(this.fitter);
    term.onData((data) => this.type(new TextEncoder().encode(data)));
    term.onBinary((data) => this.type(Uint8Array.from(data, (ch) => ch.charCodeAt(0) & 0xff)));
    term.onResize(({ cols, rows }) => this.resized(cols, rows));
    term.attachCustomKeyEventHandler((event) => leaveShortcut(event) && copyShortcut(term, event));
    return term;
  }

  // xterm measures its cells when it is put on the page: only once the screen is shown.
  mount() {
    if (this.mounted || !this.term || this.panel.hidden || this.screen.hidden) return this.mounted;
    withAdoptedStyles(() => this.term.open(this.screen));
    cellStyles(this.term);
    new ResizeObserver(() => this.fitSoon()).observe(this.screen);
    this.mounted = true;
    return true;
  }

  // -- the session ----------------------------------------------------------------------------

  // Show the shell of another session (null: none), and reattach when one runs.
  attach(sessionid) {
    if (sessionid !== this.sessionid) {
      this.sessionid = sessionid;
      this.state = { status: 'none' };
      this.unsent = [];
      this.sent = null;
      this.term?.reset();
      this.setShown(false, { remember: false });
    }
    this.paint();
    if (sessionid) this.open(false);
  }

  // Read the shell's state again (after a reconnect, output may have been missed).
  reattach() {
    if (this.sessionid) this.open(false);
  }

  async start() {
    if (!this.sessionid) return;
    await this.needTerminal();
    if (!this.term) return;
    this.starting = true; // the screen is shown and measured first: the shell starts at its size
    this.setShown(true);
    this.fitNow();
    try {
      await this.open(true);
    } finally {
      this.starting = false;
    }
    this.paint();
    if (this.state.status === 'running') this.term.focus();
  }

  async open(start) {
    const { sessionid } = this;
    const reading = ++this.reading;
    this.held = [];
    if (start) this.setBusy(true);
    let state = null;
    try {
      state = await api('sessions_terminal', { id: sessionid, body: { start, ...this.size } });
    } catch (error) {
      if (reading === this.reading) {
        this.held = null;
        this.error = error.message;
      }
    }
    if (start) this.busy = false;
    if (reading !== this.reading || sessionid !== this.sessionid) return;
    if (!state) {
      this.paint();
      return;
    }
    if (state.status !== 'none') {
      await this.needTerminal(); // the shell's events meanwhile are held
      if (reading !== this.reading || sessionid !== this.sessionid) return;
    }
    const held = this.held;
    this.held = null;
    this.error = '';
    this.state = state;
    this.sent = state.status === 'running' ? { ...this.size } : null;
    this.write(state.output, held);
    if (state.status !== 'none' && !this.hidden.has(sessionid)) this.setShown(true, { remember: false });
    this.paint();
  }

  // The scrollback, then what came while it was read and is not in it: the events published
  // before the answer was made are its tail, the others follow it.
  write(output, held) {
    const texts = held.filter((event) => 'text' in event).map((event) => event.text);
    let seen = texts.length;
    while (seen > 0 && !output.endsWith(texts.slice(0, seen).join(''))) seen -= 1;
    this.term?.reset();
    this.term?.write(output + texts.slice(seen).join(''));
    const exit = held.find((event) => 'exit' in event);
    if (exit && this.state.status === 'running') this.state = { status: 'exited', exit: exit.exit };
  }

  async stop() {
    const { sessionid } = this;
    this.setBusy(true);
    try {
      const state = await api('sessions_terminalstop', { id: sessionid, post: true });
      if (sessionid === this.sessionid && this.state.status === 'running') {
        this.state = { status: state.status, exit: state.exit };
        this.error = '';
      }
    } catch (error) {
      if (sessionid === this.sessionid) this.error = error.message;
    }
    this.setBusy(false);
  }

  // -- events of the socket -------------------------------------------------------------------

  output(sessionid, text) {
    if (sessionid !== this.sessionid) return;
    if (this.held) this.held.push({ text });
    else this.term?.write(text);
  }

  exited(sessionid, exit) {
    if (sessionid !== this.sessionid) return;
    if (this.held) {
      this.held.push({ exit });
      return;
    }
    if (this.state.status !== 'running') return;
    this.state = { status: 'exited', exit };
    this.unsent = [];
    this.paint();
  }

  // -- input ----------------------------------------------------------------------------------

  type(bytes) {
    if (this.state.status !== 'running' || !this.sessionid) return;
    this.unsent.push(bytes);
    this.flushInput();
  }

  async flushInput() {
    if (this.sending) return;
    this.sending = true;
    try {
      while (this.unsent.length) {
        const sessionid = this.sessionid;
        const chunk = takeBytes(this.unsent, MAX_INPUT_BYTES);
        try {
          await api('sessions_terminalinput', { id: sessionid, body: { data: bytesBase64(chunk) } });
        } catch (error) {
          this.unsent = [];
          if (sessionid === this.sessionid) {
            this.error = error.message;
            this.paint();
          }
        }
      }
    } finally {
      this.sending = false;
    }
  }

  // -- the panel and its size -----------------------------------------------------------------

  setShown(shown, { remember = true } = {}) {
    this.panel.hidden = !shown || !this.sessionid;
    this.toggle.setAttribute('aria-pressed', String(!this.panel.hidden));
    if (remember && this.sessionid) {
      if (shown) this.hidden.delete(this.sessionid);
      else this.hidden.add(this.sessionid);
    }
    this.paint();
  }

  fitNow() {
    if (!this.mounted || this.panel.hidden || this.screen.hidden || !this.screen.clientWidth) return;
    this.fitter.fit();
    this.resized(this.term.cols, this.term.rows);
  }

  fitSoon() {
    clearTimeout(this.fitTimer);
    this.fitTimer = setTimeout(() => this.fitNow(), FIT_DELAY_MS);
  }

  resized(columns, rows) {
    this.size = { columns, rows };
    this.screen.dataset.columns = String(columns);
    this.screen.dataset.rows = String(rows);
    localStorage.setItem(SIZE_KEY, JSON.stringify(this.size));
    clearTimeout(this.resizeTimer);
    this.resizeTimer = setTimeout(() => this.tellSize(), RESIZE_DELAY_MS);
  }

  async tellSize() {
    const { sessionid, size, sent } = this;
    if (this.state.status !== 'running' || (sent?.columns === size.columns && sent?.rows === size.rows)) return;
    this.sent = { ...size };
    try {
      await api('sessions_terminalresize', { id: sessionid, body: size });
    } catch (error) {
      if (sessionid !== this.sessionid) return;
      this.error = error.message;
      this.paint();
    }
  }

  // -- painting -------------------------------------------------------------------------------

  setBusy(busy) {
    this.busy = busy;
    this.paint();
  }

  paint() {
    const { status, exit } = this.state;
    this.toggle.hidden = !this.sessionid;
    this.panel.dataset.status = status;
    const error = this.libraryFailed ? 'the terminal library did not load' : this.error;
    this.status.classList.toggle('error', !!error);
    this.status.textContent = error
      || (status === 'running' ? 'running' : status === 'exited' ? exitText(exit) : 'no shell');
    this.startButton.textContent = status === 'exited' ? 'Start again' : 'Open terminal';
    this.startButton.hidden = status === 'running';
    this.stopButton.hidden = status !== 'running';
    this.startButton.disabled = this.stopButton.disabled = this.busy || this.libraryFailed;
    this.screen.hidden = status === 'none' && !this.starting;
    this.note.hidden = !this.screen.hidden;
    if (this.mount()) this.fitSoon();
  }
}

function exitText(exit) {
  if (typeof exit !== 'number') return 'exited';
  return exit < 0 ? `exited (signal ${-exit})` : `exited (status ${exit})`;
}

function readSize() {
  try {
    const size = JSON.parse(localStorage.getItem(SIZE_KEY) || 'null');
    if (Number.isInteger(size?.columns) && Number.isInteger(size?.rows)) return { columns: size.columns, rows: size.rows };
  } catch { /* a size of another version: the default */ }
  return { columns: 80, rows: 24 };
}

// Up to `limit` bytes from the front of a queue of byte arrays, as one array.
function takeBytes(queue, limit) {
  const parts = [];
  let total = 0;
  while (queue.length && total < limit) {
    const next = queue[0];
    const room = limit - total;
    if (next.length <= room) {
      parts.push(queue.shift());
      total += next.length;
    } else {
      parts.push(next.subarray(0, room));
      queue[0] = next.subarray(room);
      total += room;
    }
  }
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const part of parts) {
    bytes.set(part, at);
    at += part.length;
  }
  return bytes;
}

// Ctrl+Shift+C copies the selection (Ctrl+C stays the shell's interrupt); pasting is xterm's
// own (Ctrl+Shift+V, the context menu, Cmd+V on a Mac; Ctrl+V is the shell's), sent as typed input.
// The terminal takes Tab and Escape (they are the shell's): Shift+Escape is the keyboard's way
// out, to the prompt box. Returns false when it took the key.
function leaveShortcut(event) {
  if (event.type !== 'keydown' || event.key !== 'Escape' || !event.shiftKey || event.ctrlKey || event.altKey) return true;
  event.preventDefault();
  byId('prompt').focus();
  return false;
}

function copyShortcut(term, event) {
  if (event.type !== 'keydown' || !event.ctrlKey || !event.shiftKey || event.code !== 'KeyC') return true;
  if (term.hasSelection()) navigator.clipboard?.writeText(term.getSelection()).catch(() => {});
  event.preventDefault();
  return false;
}

// Run fn (term.open) with document.createElement('style') answering a holder whose text goes to
// a constructed style sheet adopted by the document, rather than an inline <style> the CSP
// refuses. xterm makes both of its style elements in open() and only changes their text later.
function withAdoptedStyles(fn) {
  const create = Document.prototype.createElement;
  document.createElement = function createElement(tag, options) {
    if (String(tag).toLowerCase() !== 'style') return create.call(this, tag, options);
    return styleHolder(create.call(this, 'template'));
  };
  try {
    fn();
  } finally {
    delete document.createElement;
  }
}

function styleHolder(holder) {
  const sheet = new CSSStyleSheet();
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  let text = '';
  Object.defineProperty(holder, 'textContent', {
    get: () => text,
    set: (value) => {
      text = String(value ?? '');
      sheet.replaceSync(text);
    },
  });
  const remove = holder.remove.bind(holder);
  holder.remove = () => {
    document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
    remove();
  };
  holder.dataset.xtermStyle = '';
  return holder;
}

// The DOM renderer colours a 24-bit coloured cell with setAttribute('style'): the same
// declarations, set through the CSSOM (which the CSP allows).
function cellStyles(term) {
  const factory = term._core?._renderService?._renderer?.value?._rowFactory;
  if (!factory || typeof factory._addStyle !== 'function') return;
  factory._addStyle = (element, declarations) => {
    for (const declaration of String(declarations).split(';')) {
      const at = declaration.indexOf(':');
      if (at > 0) element.style.setProperty(declaration.slice(0, at).trim(), declaration.slice(at + 1).trim());
    }
  };
}
