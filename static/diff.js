// Unified diffs shown with colour: a file's header (path, status, +N −M) and its patch, one
// element per line. The patch is text from the files and the model: it goes in as text only,
// with the characters a person cannot see written out (reveal), so that what is approved is
// what is seen.
import { h, reveal } from '/dom.js';

const MAX_LINES = 3000; // a longer patch is cut: the rest is counted, not drawn
const HUNK = /^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@/;
const STATUS_LETTERS = { added: 'A', modified: 'M', deleted: 'D' };

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
export function renderFileDiff(entry, { actions } = {}) {
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
    entry.patch ? renderPatch(entry.patch) : null,
    entry.patch === '' && !entry.note ? h('p', { className: 'muted diff-note' }, 'No line changed (a binary file, or only its mode)') : null);
}
