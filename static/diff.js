// Diffs shown with colour: a file's header (path, status, +N −M) and its patch, unified (one
// element per line) or split (old lines on the left, new on the right, each with its number). The patch is text from the files and the model: it goes in as text only,
// with the characters a person cannot see written out (reveal), so that what is approved is
// what is seen.
import { h, reveal } from '/dom.js';

const MAX_LINES = 3000; // a longer patch is cut: the rest is counted, not drawn
const HUNK = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/;
const HUNK_STARTS = /^@@ -(\d+)(?:,\d+)? \+(\d+)/;
const STATUS_LETTERS = { added: 'A', modified: 'M', deleted: 'D' };
const VIEW_KEY = 'totem.diffview';
// Below this width (the phone layout of style.css) two columns of code would be too narrow to
// read: split falls back to unified there.
export const SPLIT_MEDIA = '(max-width: 700px)';

// The kind of each line of a unified diff: meta (file headers, "\ No newline"), hunk, add, del
// or ctx. Inside a hunk its header's counts tell where it ends, so that a removed line that
// starts with "--" is never taken for a file header.
export function patchLines(patch) {
  const lines = String(patch ?? '').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  let oldLeft = 0;
  let newLeft = 0;
  return lines.map((line) => {
    if (oldLeft > 0 || newLeft > 0) {
      if (line.startsWith('+')) { newLeft -= 1; return ['add', line]; }
      if (line.startsWith('-')) { oldLeft -= 1; return ['del', line]; }
      if (line.startsWith('\\')) return ['meta', line];
      oldLeft -= 1;
      newLeft -= 1;
      return ['ctx', line];
    }
    const hunk = HUNK.exec(line);
    if (hunk) {
      oldLeft = hunk[1] === undefined ? 1 : Number(hunk[1]);
      newLeft = hunk[2] === undefined ? 1 : Number(hunk[2]);
      return ['hunk', line];
    }
    return ['meta', line];
  });
}

export function renderPatch(patch) {
  const lines = patchLines(patch);
  const code = h('code', null, lines.slice(0, MAX_LINES).map(([kind, line]) =>
    h('span', { className: `diff-line diff-${kind}` }, reveal(line) || ' ')));
  if (lines.length > MAX_LINES) {
    code.append(h('span', { className: 'diff-line diff-meta' }, `… ${lines.length - MAX_LINES} more lines`));
  }
  return h('pre', { className: 'diff' }, code);
}

// The view chosen for diffs ('unified' or 'split'), kept across reloads.
export function chosenView() {
  return localStorage.getItem(VIEW_KEY) === 'split' ? 'split' : 'unified';
}

export function chooseView(view) {
  localStorage.setItem(VIEW_KEY, view === 'split' ? 'split' : 'unified');
}

export function splitFits() {
  return !window.matchMedia(SPLIT_MEDIA).matches;
}

// The view a diff is drawn in now: the one chosen, unless split does not fit the screen.
export function shownView() {
  return chosenView() === 'split' && splitFits() ? 'split' : 'unified';
}

// The rows of a split view: ['full', kind, line] for a hunk or meta line across both columns, or
// ['pair', old, new] where each side is null or { kind, number, text }. Within a change, the
// removed lines and the added ones that follow them are paired in order, so that a changed line
// faces its new version; unchanged context is on both sides.
export function splitRows(patch) {
  const rows = [];
  let oldNumber = 0;
  let newNumber = 0;
  let removed = [];
  let added = [];
  const flush = () => {
    for (let i = 0; i < Math.max(removed.length, added.length); i += 1) {
      rows.push(['pair', removed[i] ?? null, added[i] ?? null]);
    }
    removed = [];
    added = [];
  };
  for (const [kind, line] of patchLines(patch)) {
    if (kind === 'del') {
      if (added.length) flush(); // a removal after additions starts a new change
      removed.push({ kind, number: oldNumber++, text: line.slice(1) });
    } else if (kind === 'add') {
      added.push({ kind, number: newNumber++, text: line.slice(1) });
    } else {
      flush();
      if (kind === 'ctx') {
        rows.push(['pair', { kind, number: oldNumber++, text: line.slice(1) }, { kind, number: newNumber++, text: line.slice(1) }]);
      } else {
        const starts = kind === 'hunk' ? HUNK_STARTS.exec(line) : null;
        if (starts) { oldNumber = Number(starts[1]); newNumber = Number(starts[2]); }
        rows.push(['full', kind, line]);
      }
    }
  }
  flush();
  return rows;
}

const SIGNS = { del: '-', add: '+', ctx: ' ' };

function splitSide(side, column) {
  if (!side) {
    return [h('td', { className: `diff-num split-${column} diff-empty` }),
      h('td', { className: `diff-sign split-${column} diff-empty` }),
      h('td', { className: `diff-text split-${column} diff-empty` })];
  }
  return [h('td', { className: `diff-num split-${column} diff-${side.kind}` }, String(side.number)),
    h('td', { className: `diff-sign split-${column} diff-${side.kind}`, 'aria-hidden': 'true' }, SIGNS[side.kind]),
    h('td', { className: `diff-text split-${column} diff-${side.kind}` }, reveal(side.text))];
}

// The patch side by side in a table: the old file's lines and numbers on the left, the new
// file's on the right; long lines wrap in their column rather than scroll the page sideways.
export function renderSplit(patch) {
  const rows = splitRows(patch);
  const body = h('tbody', null, rows.slice(0, MAX_LINES).map((row) => (row[0] === 'full'
    ? h('tr', { className: `split-full diff-${row[1]}` }, h('td', { colSpan: 6 }, reveal(row[2]) || ' '))
    : h('tr', { className: 'split-pair' }, splitSide(row[1], 'old'), splitSide(row[2], 'new')))));
  if (rows.length > MAX_LINES) {
    body.append(h('tr', { className: 'split-full diff-meta' }, h('td', { colSpan: 6 }, `… ${rows.length - MAX_LINES} more lines`)));
  }
  return h('div', { className: 'diff diff-split' }, h('table', null,
    h('colgroup', null, ['num', 'sign', 'text', 'num', 'sign', 'text'].map((name) => h('col', { className: `col-${name}` }))),
    h('thead', { className: 'sr-only' }, h('tr', null,
      h('th', { colSpan: 3, scope: 'col' }, 'Before'), h('th', { colSpan: 3, scope: 'col' }, 'After'))),
    body));
}

// The "Unified | Split" buttons: pressing one keeps the choice and calls onChange(view). Split is
// refused on a narrow screen, its title saying why.
export function viewToggle(onChange) {
  const shown = shownView();
  const fits = splitFits();
  const button = (view, label) => h('button', {
    type: 'button', className: 'small', dataset: { view }, 'aria-pressed': String(shown === view),
    'aria-disabled': view === 'split' && !fits ? 'true' : null,
    title: view === 'split' && !fits ? 'Split needs a wider screen: the diff is shown unified here' : `Show the diff ${view}`,
    onclick: () => {
      if (view === 'split' && !splitFits()) return;
      chooseView(view);
      onChange(view);
    },
  }, label);
  return h('div', { className: 'diff-mode', role: 'group', 'aria-label': 'Diff view',
    title: fits ? 'Diff view' : 'Diff view (split needs a wider screen: shown unified)' },
  button('unified', 'Unified'), button('split', 'Split'));
}

export function statusLetter(status) {
  return STATUS_LETTERS[status] || '?';
}

export function counts(entry) {
  return h('span', { className: 'diff-counts' },
    h('span', { className: 'plus' }, `+${entry.additions ?? 0}`), ' ',
    h('span', { className: 'minus' }, `−${entry.deletions ?? 0}`));
}

// One entry of a preview or of Sessions|diff: {path, status, additions, deletions, patch}, a
// protected file's {path, status, note} without its patch, or {error}.
// `view` is 'unified' (the default) or 'split'.
export function renderFileDiff(entry, { actions, view = 'unified' } = {}) {
  if (entry.error !== undefined && entry.path === undefined) {
    return h('div', { className: 'file-diff' }, h('p', { className: 'diff-error' }, reveal(entry.error)));
  }
  return h('div', { className: 'file-diff', dataset: { path: entry.path } },
    h('div', { className: 'diff-head' },
      h('span', { className: `diff-status ${entry.status}`, title: entry.status }, statusLetter(entry.status)),
      h('code', { className: 'diff-path', title: entry.path }, reveal(entry.path)),
      h('span', { className: 'muted diff-word' }, entry.status),
      entry.patch !== undefined && !entry.note ? counts(entry) : null,
      actions ?? null),
    entry.note ? h('p', { className: 'diff-note' }, reveal(entry.note)) : null,
    entry.error ? h('p', { className: 'diff-error' }, reveal(entry.error)) : null,
    entry.patch ? (view === 'split' ? renderSplit(entry.patch) : renderPatch(entry.patch)) : null,
    entry.patch === '' && !entry.note ? h('p', { className: 'muted diff-note' }, 'No line changed (a binary file, or only its mode)') : null);
}
