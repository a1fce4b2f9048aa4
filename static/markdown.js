// Model answers as Markdown: parsed by markdown-it (CommonMark, with GFM tables and
// strikethrough; static/vendor/markdown-it/), its token stream built into DOM nodes here. No HTML
// is ever parsed: raw HTML in an answer is text (`html: false`), and every piece of text becomes a
// Text node, so `<script>` or `<img onerror>` is shown as the characters it is.
//
// Links are made only for absolute http and https URLs (written as links, autolinks or bare
// URLs), opened in a new tab with rel=noopener; any other (javascript:, data:, mailto:, a relative
// path) is not a link and stays as it was written. An image is shown only from this server itself
// (an attachment, say: the CSP's img-src allows nothing else), another http(s) one becomes a link.
// A list item that starts with `[ ]` or `[x]` is a task. Code blocks get a bar with their
// language and a Copy button.
//
// While an answer streams, it is painted again at every frame; renderMarkdownInto() keeps the
// top-level blocks that can no longer change (every one before the last, see finalBlocks) and
// parses and builds again only from there, so a delta costs about the size of the last block,
// not of the answer.
//
// Code is highlighted by highlight.js (static/vendor/highlight/, a classic script that defines
// `hljs`) for the languages it knows, once its block is final (a block before the last, or the
// answer complete); its answer is read back as spans and text only (nothing else of it reaches
// the page), and without it code stays plain. The script is loaded when the first final block
// with a language is built, not with the page (it is a third of the page's script, and most
// pages show no code at first): the blocks built before it came are colored in place then.
import markdownit from '/vendor/markdown-it/markdown-it.esm.min.mjs';
import { h, loadScript } from '/dom.js';

const SAFE_PROTOCOLS = new Set(['http:', 'https:']);
const SCHEME = /^[a-z][a-z0-9+.-]*:/i;
const TASK = /^\[([ xX])\][ \t]+/;
const ALIGN = /text-align:\s*(left|center|right)/;
const MAX_HIGHLIGHT_CHARS = 50000; // a longer block stays plain: highlighting it would stall a frame
const HIGHLIGHT_CACHE = 64; // blocks whose highlighting is kept (a repaint finds them again)
const highlights = new Map(); // `${language}\n${code}` -> a fragment to clone
const HIGHLIGHTER = '/vendor/highlight/highlight.min.js';
const uncolored = new Set(); // {element, code, language} of the blocks built before it came

const md = markdownit('default', { html: false, linkify: true, typographer: false });
// Bare URLs only with their scheme (http://, https://): not "example.com" nor "a@b.c" guessed.
md.linkify.set({ fuzzyLink: false, fuzzyEmail: false, fuzzyIP: false });
for (const scheme of ['ftp:', 'mailto:', '//']) md.linkify.add(scheme, null);

// markdown-it asks validateLink about every destination; an image's may be a path of this server
// (shown as the image), a link's must be absolute http(s). The image rule says which it is asking
// for while it runs; a link rule around it (an image inside a link's text) restores the flag.
let parsingImage = false;
md.validateLink = (url) => (parsingImage && !SCHEME.test(url) ? true : safeUrl(url) !== null);
for (const [name, image] of [['link', false], ['image', true]]) {
  const rule = md.inline.ruler.__rules__.find((entry) => entry.name === name);
  if (!rule) throw new Error(`markdown-it has no inline rule "${name}"`);
  const parse = rule.fn;
  md.inline.ruler.at(name, (state, silent) => {
    const outer = parsingImage;
    parsingImage = image;
    try {
      return parse(state, silent);
    } finally {
      parsingImage = outer;
    }
  });
}

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

// `complete`: the text is whole (not streaming), so its last block is final too.
export function renderMarkdown(text, { complete = true } = {}) {
  const box = document.createElement('div');
  renderMarkdownInto(box, text, { complete });
  const fragment = document.createDocumentFragment();
  fragment.append(...box.childNodes);
  return fragment;
}

// -- incremental rendering ------------------------------------------------------------------

// element -> what was painted in it: the source of the kept blocks, each kept block (its source,
// nodes and text to look for labels in), the last block's nodes, the reference definitions of the
// kept source, and all those the painted blocks were built with.
const painted = new WeakMap();

function freshState() {
  return { kept: '', blocks: [], tail: [], keptRefs: {}, usedRefs: {} };
}

// Paint `text` into `element`, which holds only what an earlier call painted there (or nothing).
// The DOM is the same as a one-shot render of the text (renderMarkdown): a text that does not
// continue the last one is painted anew, and a kept block that may use a link definition that
// appeared, changed or went away is built again.
export function renderMarkdownInto(element, text, { complete = true } = {}) {
  const source = String(text).replace(/\r\n?/g, '\n').replace(/\0/g, '\uFFFD'); // as markdown-it reads it
  let state = painted.get(element);
  if (!state || !source.startsWith(state.kept)) state = restart(element);
  const parsed = parseTail(state, source);
  rebuildKeptBlocks(state, parsed.env.references);
  for (const node of state.tail) node.remove();
  const groups = topLevelBlocks(parsed.tokens);
  const keep = finalBlocks(parsed, groups);
  const kept = [];
  state.tail = [];
  groups.forEach((group, index) => {
    const nodes = build(parsed.tokens, group, { highlight: complete || index < keep });
    element.append(...nodes);
    if (index < keep) kept.push(nodes);
    else state.tail.push(...nodes);
  });
  if (keep > 0) keepBlocks(state, parsed, groups, kept);
  painted.set(element, state);
}

// How many of the blocks cannot change any more as text is appended: those before the last one
// that starts on a whole line. The last block may grow, and the text's last line, its newline not
// there yet, may still join the block before it ("2" becoming "2. item" continues a list).
function finalBlocks({ tail, tokens }, groups) {
  const partialLine = tail.endsWith('\n') ? Infinity : tail.split('\n').length - 1;
  for (let index = groups.length - 1; index >= 0; index -= 1) {
    if (tokens[groups[index].start].map[0] < partialLine) return index;
  }
  return 0;
}

function restart(element) {
  element.replaceChildren();
  return freshState();
}

// markdown-it's tokens of the text after the kept blocks, knowing the references defined in them.
function parseTail(state, source) {
  const env = { references: { ...state.keptRefs } };
  return { tail: source.slice(state.kept.length), tokens: md.parse(source.slice(state.kept.length), env), env };
}

// Build again, in place, the kept blocks that may use a reference definition that appeared,
// changed or went away since they were built (its label is in their text: a substring may be a
// use). Definitions usually come at the end of an answer, after the blocks that use them.
function rebuildKeptBlocks(state, references) {
  const changed = [...new Set([...Object.keys(references), ...Object.keys(state.usedRefs)])].filter((label) => (
    references[label]?.href !== state.usedRefs[label]?.href || references[label]?.title !== state.usedRefs[label]?.title));
  state.usedRefs = { ...references };
  if (!changed.length) return;
  for (const block of state.blocks) {
    if (!changed.some((label) => block.labels.includes(label))) continue;
    const tokens = md.parse(block.source, { references: { ...references } });
    const nodes = topLevelBlocks(tokens).flatMap((group) => build(tokens, group, { highlight: true }));
    block.nodes[0].before(...nodes);
    for (const node of block.nodes) node.remove();
    block.nodes = nodes;
  }
}

// Keep the first blocks of the tail, one entry each with its nodes (`kept`) and its source (from
// the end of the one before, through the lines it ends on); the reference definitions in that
// source are found by markdown-it's block parser alone.
function keepBlocks(state, parsed, groups, kept) {
  let start = 0;
  kept.forEach((nodes, index) => {
    const end = lineOffset(parsed.tail, parsed.tokens[groups[index].start].map[1]);
    const source = parsed.tail.slice(start, end);
    start = end;
    // Labels are matched normalised (case and runs of spaces folded), so the text is searched so.
    state.blocks.push({ source, labels: md.utils.normalizeReference(source), nodes });
  });
  const chunk = parsed.tail.slice(0, start);
  const env = { references: state.keptRefs };
  md.block.parse(chunk, md, env, []);
  state.keptRefs = env.references;
  state.kept += chunk;
}

// The offset in `text` of the start of line `line` (0-based), or its length past its last line.
function lineOffset(text, line) {
  let offset = 0;
  for (let i = 0; i < line; i += 1) {
    const next = text.indexOf('\n', offset);
    if (next < 0) return text.length;
    offset = next + 1;
  }
  return offset;
}

// The top-level blocks of a token stream: [{start, end}] ranges of token indexes.
function topLevelBlocks(tokens) {
  const groups = [];
  let start = -1;
  tokens.forEach((token, index) => {
    if (token.level !== 0) return;
    if (token.nesting === 1) start = index;
    else if (token.nesting === 0) groups.push({ start: index, end: index + 1 });
    else groups.push({ start, end: index + 1 });
  });
  return groups;
}

// -- building the DOM from tokens -----------------------------------------------------------

const BLOCK_TAGS = {
  blockquote_open: 'blockquote', bullet_list_open: 'ul', ordered_list_open: 'ol', list_item_open: 'li',
  thead_open: 'thead', tbody_open: 'tbody', tr_open: 'tr',
};
const INLINE_TAGS = { em_open: 'em', strong_open: 'strong', s_open: 'del' };

// The nodes of one top-level block.
function build(tokens, { start, end }, options) {
  const root = document.createDocumentFragment();
  const stack = [root];
  for (let i = start; i < end; i += 1) {
    const token = tokens[i];
    const parent = stack[stack.length - 1];
    if (token.nesting === -1) {
      stack.pop();
    } else if (token.nesting === 1) {
      const element = openBlock(token, tokens, i);
      if (element) parent.append(element.outer ?? element);
      stack.push(element?.inner ?? element ?? parent);
    } else if (token.type === 'inline') {
      inline(token.children, parent);
    } else if (token.type === 'fence' || token.type === 'code_block') {
      const language = md.utils.unescapeAll(token.info).trim().split(/\s+/)[0];
      parent.append(codeBlock(token.content.replace(/\n$/, ''), language, options));
    } else if (token.type === 'hr') {
      parent.append(h('hr'));
    } else if (token.content) {
      parent.append(token.content); // nothing else is made (html is off): text, to be sure
    }
  }
  return [...root.childNodes];
}

// The element a block's opening token makes ({outer, inner} when it is wrapped), or null for a
// tight list's paragraph, whose text goes in its item directly.
function openBlock(token, tokens, index) {
  if (token.type === 'paragraph_open') return token.hidden ? null : h('p');
  if (token.type === 'heading_open') return h(token.tag);
  if (token.type === 'table_open') {
    const table = h('table');
    return { outer: h('div', { className: 'table' }, table), inner: table };
  }
  if (token.type === 'th_open' || token.type === 'td_open') {
    const align = ALIGN.exec(token.attrGet('style') || '');
    return h(token.tag, align ? { className: `align-${align[1]}` } : null);
  }
  if (token.type === 'list_item_open') return listItem(tokens, index);
  const element = h(BLOCK_TAGS[token.type] || 'div');
  if (token.type === 'ordered_list_open' && token.attrGet('start') != null) element.start = Number(token.attrGet('start'));
  return element;
}

// A list item; one whose text starts with `[ ]` or `[x]` is a task, its box shown as a mark.
function listItem(tokens, index) {
  const item = h('li');
  const paragraph = tokens[index + 1];
  const first = tokens[index + 2]?.children?.[0];
  const task = paragraph?.type === 'paragraph_open' && first?.type === 'text' ? TASK.exec(first.content) : null;
  if (task) {
    first.content = first.content.slice(task[0].length);
    item.className = 'task';
    item.append(h('span', { className: `check${task[1] === ' ' ? '' : ' done'}`, 'aria-hidden': 'true' },
      task[1] === ' ' ? '☐' : '☑'), ' ');
  }
  return item;
}

function inline(tokens, parent) {
  const stack = [parent];
  for (const token of tokens || []) {
    const top = stack[stack.length - 1];
    if (token.nesting === -1) stack.pop();
    else if (token.type === 'link_open') {
      const url = safeUrl(token.attrGet('href') || '');
      const anchor = url ? link(token.attrGet('href'), null, null, token.attrGet('title')) : null;
      if (anchor) top.append(anchor);
      stack.push(anchor ?? top);
    } else if (token.nesting === 1) {
      const element = h(INLINE_TAGS[token.type] || 'span');
      top.append(element);
      stack.push(element);
    } else if (token.type === 'softbreak') top.append('\n');
    else if (token.type === 'hardbreak') top.append(h('br'));
    else if (token.type === 'code_inline') top.append(h('code', null, token.content));
    else if (token.type === 'image') top.append(image(token));
    else if (token.content) top.append(token.content);
  }
}

// An image of this server as an image; another http(s) one as a link to it, never loaded.
function image(token) {
  const src = token.attrGet('src') || '';
  const alt = altText(token.children);
  const local = localImageUrl(src);
  if (local) {
    return h('img', { src: local, alt, title: token.attrGet('title') || alt || null, className: 'md-image', loading: 'lazy' });
  }
  const url = safeUrl(src);
  if (url) return link(src, `image: ${alt || src}`, 'image-link', `Image, not loaded here: ${src}`);
  return alt; // not reached: markdown-it keeps no other destination
}

function altText(tokens) {
  return (tokens || []).map((token) => (token.type === 'image' ? altText(token.children)
    : token.type === 'softbreak' || token.type === 'hardbreak' ? '\n' : token.content)).join('');
}

function link(url, label, className, title) {
  return h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', className, title: title || url }, label);
}

// -- code blocks ----------------------------------------------------------------------------

export function codeBlock(code, language, { highlight = true } = {}) {
  const colored = highlight ? highlighted(code, language) : null;
  const element = colored ? coloredCode(colored) : h('code', null, code);
  if (highlight && !colored && language && !globalThis.hljs) colorWhenLoaded(element, code, language);
  return h('div', { className: 'codeblock' },
    h('div', { className: 'codebar' },
      h('span', null, language || 'text'),
      h('button', { type: 'button', className: 'copy', title: 'Copy to the clipboard' }, 'Copy')),
    h('pre', null, element));
}

function coloredCode(colored) {
  return h('code', { className: `hljs language-${colored.language}`, dataset: { highlighted: 'yes' } }, colored.nodes);
}

// A block built plain because highlight.js is not there yet: load it (once, see loadScript), then
// color the block in place. A block painted again meanwhile is built anew (colored then): coloring the
// one it replaced does no harm. The first block to wait asks for the load; the others join it.
function colorWhenLoaded(element, code, language) {
  if (!uncolored.size) loadScript(HIGHLIGHTER).then(colorTheWaiting, () => uncolored.clear());
  uncolored.add({ element, code, language });
}

function colorTheWaiting() {
  for (const { element, code, language } of uncolored) {
    const colored = highlighted(code, language);
    if (colored) element.replaceWith(coloredCode(colored));
  }
  uncolored.clear();
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
