// A small Markdown renderer for model output that builds DOM nodes and never parses HTML.
//
// Every piece of text becomes a Text node, so `<script>` or `<img onerror>` in an answer is shown
// as the characters it is. Links are made only for http and https URLs (opened in a new tab with
// rel=noopener); an image is shown only from this server itself (an attachment, say: the CSP's
// img-src allows nothing else), any other becomes a link. Supported: headings, paragraphs, fenced
// code (highlighted, with a Copy button), lists (nested, task items), quotes, tables, rules, and
// inline code, bold, italic, strikethrough, links, images and bare URLs. Unclosed fences (a
// streaming answer) run to the end.
//
// Code is highlighted by highlight.js (static/vendor/highlight/, a classic script that defines
// `hljs`) for the languages it knows, once the block is complete; its answer is read back as
// spans and text only (nothing else of it reaches the page), and without it code stays plain.
import { h } from '/dom.js';

const MAX_DEPTH = 12;
const SAFE_PROTOCOLS = new Set(['http:', 'https:']);
const MAX_HIGHLIGHT_CHARS = 50000; // a longer block stays plain: highlighting it would stall a frame
const HIGHLIGHT_CACHE = 64; // blocks whose highlighting is kept (a streaming answer repaints them)
const highlights = new Map(); // `${language}\n${code}` -> a fragment to clone

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w.+#-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(?:[ \t]+|$)/;
const TABLE_SEPARATOR = /^\s*\|?\s*:?-{1,}:?\s*(?:\|\s*:?-{1,}:?\s*)*\|?\s*$/;
const TASK = /^\[([ xX])\]\s+/;

const INLINE = [
  /\\([\\`*_{}[\]()#+\-.!|~<>])/, // 1: an escaped character
  /(`+)([^`]|[^`][\s\S]*?[^`])\2(?!`)/, // 2, 3: code
  /!\[([^\]\n]*)\]\(\s*<?([^()\s<>]*)>?(?:\s+"[^"\n]*")?\s*\)/, // 4, 5: an image (never loaded)
  /\[((?:[^[\]\n]|\[[^\]\n]*\])+)\]\(\s*<?([^()\s<>]*)>?(?:\s+"[^"\n]*")?\s*\)/, // 6, 7: a link
  /<(https?:\/\/[^\s<>]+)>/, // 8: an autolink
  /(https?:\/\/[^\s<>()[\]"']*[^\s<>()[\]"'.,:;!?*_~])/, // 9: a bare URL
  /\*\*(?=\S)([\s\S]*?\S)\*\*/, // 10: bold
  /(?<![\p{L}\p{N}])__(?=\S)([\s\S]*?\S)__(?![\p{L}\p{N}])/, // 11: bold
  /\*(?=[^\s*])([\s\S]*?[^\s*])\*/, // 12: italic
  /(?<![\p{L}\p{N}_])_(?=[^\s_])([\s\S]*?[^\s_])_(?![\p{L}\p{N}_])/, // 13: italic
  /~~(?=\S)([\s\S]*?\S)~~/, // 14: strikethrough
].map((re) => re.source).join('|');

export function safeUrl(raw) {
  try {
    const url = new URL(raw);
    return SAFE_PROTOCOLS.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

// A same-origin image URL (absolute, or a path of this server), or null for any other.
export function localImageUrl(raw) {
  if (!raw.trim()) return null;
  try {
    const url = new URL(raw, location.href);
    return url.origin === location.origin && SAFE_PROTOCOLS.has(url.protocol) ? url.href : null;
  } catch {
    return null;
  }
}

// `complete`: the text is whole (not streaming), so a fence left open is finished too.
export function renderMarkdown(text, { complete = true } = {}) {
  const fragment = document.createDocumentFragment();
  blocks(String(text).replace(/\r\n?/g, '\n').split('\n'), fragment, 0, complete);
  return fragment;
}

const indentOf = (line) => line.length - line.trimStart().length;

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

function blocks(lines, parent, depth, complete = true) {
  if (depth > MAX_DEPTH) {
    parent.append(h('p', null, lines.join('\n')));
    return;
  }
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let match;
    if (!line.trim()) {
      i += 1;
    } else if ((match = FENCE.exec(line))) {
      const marker = match[1];
      const closing = new RegExp(`^ {0,3}\\${marker[0]}{${marker.length},}\\s*$`);
      const body = [];
      for (i += 1; i < lines.length && !closing.test(lines[i]); i += 1) body.push(lines[i]);
      const closed = i < lines.length;
      i += 1;
      parent.append(codeBlock(body.join('\n'), match[2], { highlight: closed || complete }));
    } else if ((match = HEADING.exec(line))) {
      const heading = h(`h${match[1].length}`);
      inline(match[2], heading, depth);
      parent.append(heading);
      i += 1;
    } else if (RULE.test(line)) {
      parent.append(h('hr'));
      i += 1;
    } else if (QUOTE.test(line)) {
      const inner = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i += 1) inner.push(lines[i].replace(QUOTE, ''));
      const quote = h('blockquote');
      blocks(inner, quote, depth + 1, complete);
      parent.append(quote);
    } else if (ITEM.test(line)) {
      i = list(lines, i, parent, depth, complete);
    } else if (line.includes('|') && i + 1 < lines.length && TABLE_SEPARATOR.test(lines[i + 1])
               && lines[i + 1].includes('-')) {
      i = table(lines, i, parent, depth);
    } else {
      const paragraph = [line];
      for (i += 1; i < lines.length && lines[i].trim() && !startsBlock(lines[i]); i += 1) paragraph.push(lines[i]);
      const p = h('p');
      inline(paragraph.join('\n'), p, depth);
      parent.append(p);
    }
  }
}

function list(lines, start, parent, depth, complete) {
  const first = ITEM.exec(lines[start]);
  const ordered = /\d/.test(first[2]);
  const element = h(ordered ? 'ol' : 'ul');
  if (ordered && parseInt(first[2], 10) !== 1) element.start = parseInt(first[2], 10);
  let i = start;
  while (i < lines.length) {
    const match = ITEM.exec(lines[i]);
    if (!match || /\d/.test(match[2]) !== ordered) break;
    const width = match[0].length;
    const body = [lines[i].slice(width)];
    for (i += 1; i < lines.length; i += 1) {
      const next = lines[i];
      if (!next.trim()) {
        let j = i + 1;
        while (j < lines.length && !lines[j].trim()) j += 1;
        if (j < lines.length && indentOf(lines[j]) >= 2) { body.push(''); continue; }
        break;
      }
      if (indentOf(next) >= 2) body.push(next.slice(Math.min(indentOf(next), width)));
      else if (startsBlock(next)) break;
      else body.push(next); // a lazy continuation line
    }
    const item = h('li');
    const task = TASK.exec(body[0]);
    if (task) {
      body[0] = body[0].slice(task[0].length);
      item.className = 'task';
      item.append(h('span', { className: `check${task[1] === ' ' ? '' : ' done'}`, 'aria-hidden': 'true' },
        task[1] === ' ' ? '☐' : '☑'), ' ');
    }
    blocks(body, item, depth + 1, complete);
    // An item without blank lines (a tight list) holds its text directly, without paragraphs.
    if (!body.includes('')) for (const p of item.querySelectorAll(':scope > p')) p.replaceWith(...p.childNodes);
    element.append(item);
  }
  parent.append(element);
  return i;
}

function cells(row) {
  let text = row.trim();
  if (text.startsWith('|')) text = text.slice(1);
  if (text.endsWith('|') && !text.endsWith('\\|')) text = text.slice(0, -1);
  return text.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, '|'));
}

function table(lines, start, parent, depth) {
  const aligns = cells(lines[start + 1]).map((cell) => (
    cell.startsWith(':') && cell.endsWith(':') ? 'center' : cell.endsWith(':') ? 'right' : ''));
  const row = (text, tag) => h('tr', null, cells(text).map((cell, index) => {
    const element = h(tag, aligns[index] ? { className: `align-${aligns[index]}` } : null);
    inline(cell, element, depth);
    return element;
  }));
  const body = h('tbody');
  let i = start + 2;
  for (; i < lines.length && lines[i].trim() && lines[i].includes('|'); i += 1) body.append(row(lines[i], 'td'));
  parent.append(h('div', { className: 'table' }, h('table', null, h('thead', null, row(lines[start], 'th')), body)));
  return i;
}

export function codeBlock(code, language, { highlight = true } = {}) {
  const colored = highlight ? highlighted(code, language) : null;
  return h('div', { className: 'codeblock' },
    h('div', { className: 'codebar' },
      h('span', null, language || 'text'),
      h('button', { type: 'button', className: 'copy', title: 'Copy to the clipboard' }, 'Copy')),
    h('pre', null, colored
      ? h('code', { className: `hljs language-${colored.language}`, dataset: { highlighted: 'yes' } }, colored.nodes)
      : h('code', null, code)));
}

// The block's code as highlight.js colors it (spans of hljs-* classes around text), or null for a
// language it does not know, a block too long, or a page without it.
function highlighted(code, language) {
  const hljs = globalThis.hljs;
  const known = language && hljs?.getLanguage?.(language);
  if (!known || !code || code.length > MAX_HIGHLIGHT_CHARS) return null;
  const name = language.toLowerCase();
  const key = `${name}\n${code}`;
  let fragment = highlights.get(key);
  if (fragment) {
    highlights.delete(key); // the most recently used last
  } else {
    let html;
    try {
      html = hljs.highlight(code, { language, ignoreIllegals: true }).value;
    } catch {
      return null;
    }
    fragment = document.createDocumentFragment();
    spans(new DOMParser().parseFromString(`<pre>${html}</pre>`, 'text/html').body.firstChild, fragment);
    if (fragment.textContent !== code) return null; // not the code as written: show it plain
    if (highlights.size >= HIGHLIGHT_CACHE) highlights.delete(highlights.keys().next().value);
  }
  highlights.set(key, fragment);
  return { language: name.replace(/[^\w-]/g, ''), nodes: fragment.cloneNode(true) };
}

// highlight.js's markup, parsed in an inert document, rebuilt as our own nodes: text, and spans
// with their hljs classes; anything else is reduced to its text.
function spans(source, parent) {
  for (const node of source.childNodes) {
    if (node.nodeType === Node.TEXT_NODE) parent.append(node.data);
    else if (node.nodeType === Node.ELEMENT_NODE && node.localName === 'span') {
      const classes = [...node.classList].filter((name) => /^(hljs-[\w-]+|[a-z]+_)$/.test(name));
      const span = h('span', classes.length ? { className: classes.join(' ') } : null);
      spans(node, span);
      parent.append(span);
    } else if (node.nodeType === Node.ELEMENT_NODE) parent.append(node.textContent);
  }
}

// Plain text with its line breaks.
function text(value, parent) {
  const lines = value.split('\n');
  lines.forEach((line, index) => {
    if (index) parent.append(h('br'));
    if (line) parent.append(line);
  });
}

function inline(source, parent, depth) {
  if (depth > MAX_DEPTH) {
    text(source, parent);
    return;
  }
  const pattern = new RegExp(INLINE, 'gu');
  let last = 0;
  let m;
  while ((m = pattern.exec(source))) {
    if (m.index > last) text(source.slice(last, m.index), parent);
    last = pattern.lastIndex;
    if (m[1] !== undefined) {
      parent.append(m[1]);
    } else if (m[2] !== undefined) {
      parent.append(h('code', null, m[3].replace(/\n/g, ' ')));
    } else if (m[4] !== undefined) {
      const local = localImageUrl(m[5]);
      const url = safeUrl(m[5]);
      if (local) parent.append(h('img', { src: local, alt: m[4], title: m[4] || null, className: 'md-image', loading: 'lazy' }));
      else if (url) parent.append(link(url, `image: ${m[4] || url}`, 'image-link', `Image, not loaded here: ${url}`));
      else text(m[0], parent);
    } else if (m[6] !== undefined) {
      const url = safeUrl(m[7]);
      if (url) {
        const anchor = link(url, null);
        inline(m[6], anchor, depth + 1);
        parent.append(anchor);
      } else {
        text(m[0], parent); // javascript:, data:, relative paths...: shown as they were written
      }
    } else if (m[8] !== undefined || m[9] !== undefined) {
      const raw = m[8] ?? m[9];
      const url = safeUrl(raw);
      parent.append(url ? link(url, raw) : raw);
    } else {
      const [tag, inner] = m[10] ?? m[11] ? ['strong', m[10] ?? m[11]]
        : m[12] ?? m[13] ? ['em', m[12] ?? m[13]] : ['del', m[14]];
      const element = h(tag);
      inline(inner, element, depth + 1);
      parent.append(element);
    }
  }
  if (last < source.length) text(source.slice(last), parent);
}

function link(url, label, className, title) {
  return h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', className, title: title || url }, label);
}

// One listener for every Copy button under `root`.
export function enableCopyButtons(root) {
  root.addEventListener('click', async (event) => {
    const button = event.target.closest('button.copy');
    if (!button) return;
    const code = button.closest('.codeblock').querySelector('code').textContent;
    try {
      await navigator.clipboard.writeText(code);
      button.textContent = 'Copied';
    } catch {
      button.textContent = 'Copy failed';
    }
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  });
}
