// Small DOM helpers. Text always goes in as text nodes or textContent, never as HTML.

// h('button', { className: 'x', onclick: fn, dataset: { id } }, 'label', child, ...)
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key in el && !key.includes('-')) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child); // a string becomes a Text node
  }
}

export const byId = (id) => document.getElementById(id);

// A classic script of this server (a library under /vendor/), added to the page when first
// needed rather than with it: one load however many ask (the CSP's script-src 'self' allows it).
const scripts = new Map(); // src -> the promise of its load
export function loadScript(src) {
  if (!scripts.has(src)) {
    scripts.set(src, new Promise((resolve, reject) => {
      const script = h('script', { src });
      script.addEventListener('load', () => resolve(), { once: true });
      script.addEventListener('error', () => reject(new Error(`${src} did not load`)), { once: true });
      document.head.append(script);
    }));
  }
  return scripts.get(src);
}

// A list row that acts as a button: focusable, and Enter or Space chooses it.
export function pressable(action) {
  return {
    tabIndex: 0,
    onclick: action,
    onkeydown: (event) => {
      if ((event.key === 'Enter' || event.key === ' ') && event.target === event.currentTarget) {
        event.preventDefault();
        action();
      }
    },
  };
}

// A button that asks to be pressed twice: the first press arms it for a few seconds.
export function confirmButton(label, confirmLabel, action, props = {}) {
  let timer = 0;
  const button = h('button', { type: 'button', ...props }, label);
  button.addEventListener('click', (event) => {
    event.stopPropagation();
    if (!button.classList.contains('armed')) {
      button.classList.add('armed');
      button.textContent = confirmLabel;
      timer = setTimeout(() => { button.classList.remove('armed'); button.textContent = label; }, 3000);
      return;
    }
    clearTimeout(timer);
    button.classList.remove('armed');
    button.textContent = label;
    action();
  });
  return button;
}

// A short message in the corner: errors stay longer than confirmations.
export function toast(text, kind = 'error') {
  const box = byId('toasts');
  const item = h('div', { className: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
  box.append(item);
  setTimeout(() => item.remove(), kind === 'error' ? 8000 : 3000);
}

export function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(bytes < 10240 ? 1 : 0)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

// A JSON value shown to a person: strings as they are, the rest pretty-printed and cut.
export function showValue(value, limit = 4000) {
  const text = typeof value === 'string' ? value : JSON.stringify(value, null, 2) ?? '';
  return text.length > limit ? `${text.slice(0, limit)}\n… (${text.length - limit} more characters)` : text;
}

// Characters a person cannot see (zero-width, bidirectional controls, tags, odd spaces), as the
// server's shellwords.reveal() writes them: <U+202E>. Tab, newline and the space stay as they are.
const HIDDEN = /[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}\u{FE00}-\u{FE0F}\u{E0100}-\u{E01EF}\u115F\u1160\u3164\uFFA0]/gu;

export function reveal(text) {
  return String(text).replace(HIDDEN, (ch) => (ch === ' ' || ch === '\t' || ch === '\n') ? ch
    : `<U+${ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}>`);
}

// "1 file", "2 files": a count with its noun.
export function plural(count, noun, many = `${noun}s`) {
  return `${count} ${count === 1 ? noun : many}`;
}

// Whether the keyboard is somewhere a person can see: not on the page's start, nor on an element
// that is hidden (a closed dialog's button, where the browser leaves it when the opener is gone).
export function focusIsShown() {
  const active = document.activeElement;
  return Boolean(active && active !== document.body && active.checkVisibility());
}

// Ask before an action that cannot be taken back, in the page's own dialog (#confirm-dialog):
// `question` says what will happen, `details` (text or elements) what it touches; resolves to
// true only when the person presses the `action` button (Escape, Cancel or × answer false).
export function confirmAction({ title = 'Are you sure?', question, details = [], action = 'OK', danger = false }) {
  const dialog = byId('confirm-dialog');
  const ok = byId('confirm-ok');
  if (dialog.open) return Promise.resolve(false); // one question at a time
  byId('confirm-title').textContent = title;
  byId('confirm-question').textContent = question;
  byId('confirm-details').replaceChildren(...[details].flat().filter(Boolean));
  ok.textContent = action;
  ok.className = danger ? 'danger armed' : 'primary';
  return new Promise((resolve) => {
    const done = (answer) => {
      ok.removeEventListener('click', accept);
      dialog.removeEventListener('close', refuse);
      resolve(answer);
    };
    const accept = () => {
      done(true);
      dialog.close();
    };
    const refuse = () => done(false);
    ok.addEventListener('click', accept);
    dialog.addEventListener('close', refuse);
    dialog.showModal();
    byId('confirm-cancel').focus(); // Enter alone never confirms
  });
}
