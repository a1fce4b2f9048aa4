// "Save as" on the code blocks of an answer: the person names a file of the project and the
// block's text is written there (Sessions|saveas). An existing file is replaced only after the
// person confirms it (for a file that an approved MCP server runs, the confirmation says so); a
// refusal (outside the project, .git, a secret file) is shown with the server's reason. The text
// saved is the block's own text, as shown, with its last line ended.
//
// An answer whose code was checked and found to need review (its `validation` part) is not saved
// as it is: with an error (`blocking`, or a part that does not say) Save as only says why, and
// nothing is written; with warnings only, Save shows them and writes after the person confirms.
// Nothing is ever saved without the person's Save.
import { api } from '/api.js';
import { h } from '/dom.js';

const DONE_MS = 4000;

// A Save as button on each code block under `root` (called once the answer is complete).
export function addSaveButtons(root) {
  for (const bar of root.querySelectorAll('.codebar')) {
    if (bar.querySelector('button.saveas')) continue;
    const copy = bar.querySelector('button.copy');
    const button = h('button', { type: 'button', className: 'saveas', title: 'Save this code as a file of the project' },
      'Save as');
    const buttons = h('span', { className: 'codebar-actions' }, button);
    if (copy) {
      copy.replaceWith(buttons);
      buttons.append(copy);
    } else bar.append(buttons);
  }
}

// One listener for every Save as button under `root`; sessionid() is the session shown,
// validation(messageid) the validation part of that answer ({problems, blocking}) or null.
export function enableSaveAs(root, { sessionid, validation = () => null }) {
  root.addEventListener('click', (event) => {
    const button = event.target.closest('button.saveas');
    if (!button || !root.contains(button)) return;
    const block = button.closest('.codeblock');
    const message = button.closest('.msg');
    if (!block || !message) return;
    const open = block.querySelector('.saveas-form');
    if (open && !open.classList.contains('saveas-finished')) {
      open.querySelector('input, button')?.focus();
      return;
    }
    open?.remove();  // a finished save's note gives way to a new form at once
    const checked = validation(message.dataset.id);
    const problems = Array.isArray(checked?.problems) ? checked.problems : [];
    const form = checked && checked.blocking !== false
      ? blockedNote(problems)
      : saveForm(block, { sessionid: sessionid(), messageid: message.dataset.id, warnings: checked ? problems : [] });
    block.querySelector('.codebar').after(form);
    form.querySelector('input, button')?.focus();
  });
}

// A problem in a sentence: "message (block 2, line 5)".
function problemText(problem) {
  const place = typeof problem.block === 'number'
    ? ` (block ${problem.block}${typeof problem.line === 'number' ? `, line ${problem.line}` : ''})` : '';
  return `${String(problem.message ?? problem.rule ?? 'a problem')}${place}`;
}

// Save as of an answer whose code has an error: why it is not offered, and nothing else.
function blockedNote(problems) {
  const errors = problems.filter((problem) => problem.severity === 'error');
  const listed = errors.length ? errors : problems;
  const note = h('div', { className: 'saveas-form saveas-blocked', role: 'alert' },
    h('div', { className: 'saveas-message saveas-error' },
      h('span', null, `This answer's code needs review: ${listed.length ? listed.map(problemText).join('; ') : 'its check found an error'}.`
        + ' Nothing was saved; ask for a corrected answer, or copy the code and check it yourself.')),
    h('span', { className: 'saveas-controls' },
      h('button', { type: 'button', className: 'small', onclick: () => note.remove() }, 'Close')));
  note.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') {
      event.preventDefault();
      event.stopPropagation();
      note.remove();
    }
  });
  return note;
}

function saveForm(block, { sessionid, messageid, warnings = [] }) {
  const input = h('input', { type: 'text', className: 'saveas-path', placeholder: 'path/in/the/project',
    spellcheck: false, 'aria-label': 'Save as: the path in the project' });
  const message = h('div', { className: 'saveas-message', role: 'status' });
  const controls = h('span', { className: 'saveas-controls' },
    h('button', { type: 'submit', className: 'small primary' }, 'Save'),
    h('button', { type: 'button', className: 'small', onclick: () => form.remove() }, 'Cancel'));
  const form = h('form', { className: 'saveas-form' },
    h('label', null, 'Save as ', input), controls, message);
  const setBusy = (busy) => { for (const control of form.querySelectorAll('button, input')) control.disabled = busy; };
  let confirmed = !warnings.length; // the person saw the warnings and chose to save anyway
  const save = async (replace) => {
    const path = input.value.trim();
    if (!path) {
      showError(message, 'Type the path of the file to write, inside the project');
      return;
    }
    if (!confirmed) {
      confirmWarnings(message, warnings, () => { confirmed = true; save(false); }, () => input.focus());
      return;
    }
    // The fence's lines, each ended as in the answer's Markdown (the block shows them without the last end).
    const code = block.querySelector('pre code')?.textContent ?? '';
    const text = code && !code.endsWith('\n') ? `${code}\n` : code;
    setBusy(true);
    try {
      const saved = await api('sessions_saveas', { id: sessionid,
        body: { messageid, path, text, ...(replace ? { replace: true } : {}) } });
      message.className = 'saveas-message saveas-done';
      message.setAttribute('role', 'status');
      message.replaceChildren(`${saved.created ? 'Saved' : 'Replaced'} ${saved.path} (${saved.bytes} bytes)`);
      controls.hidden = true;
      input.readOnly = true;
      form.classList.add('saveas-finished');
      setTimeout(() => form.remove(), DONE_MS);
    } catch (error) {
      setBusy(false);
      if (error.status === 409 && !replace) {
        // A file that an approved MCP server runs: the server says so, and the confirmation shows it.
        const pinned = error.problems?.find((problem) => problem.name === 'pinned')?.error;
        confirmReplace(message, path, () => save(true), () => input.focus(), pinned);
      }
      else showError(message, error.message);
    }
  };
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    save(false);
  });
  form.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') {
      event.preventDefault();
      event.stopPropagation();
      form.remove();
    }
  });
  input.addEventListener('input', () => message.replaceChildren());
  return form;
}

function showError(message, text) {
  message.className = 'saveas-message saveas-error';
  message.setAttribute('role', 'alert');
  message.replaceChildren(text);
}

function confirmWarnings(message, warnings, onSave, onCancel) {
  message.className = 'saveas-message saveas-confirm saveas-warnings';
  message.setAttribute('role', 'alert');
  const answered = (then) => () => {
    message.className = 'saveas-message';
    message.replaceChildren();
    then();
  };
  message.replaceChildren(
    h('span', null, `This answer's code has ${warnings.length === 1 ? 'a warning' : `${warnings.length} warnings`}:`),
    h('ul', { className: 'saveas-warning-list' }, warnings.map((problem) => h('li', null, problemText(problem)))),
    h('span', null, 'Save it anyway?'),
    h('button', { type: 'button', className: 'small primary saveas-anyway', onclick: answered(onSave) }, 'Save anyway'),
    h('button', { type: 'button', className: 'small', onclick: answered(onCancel) }, 'Not now'));
}

function confirmReplace(message, path, onReplace, onCancel, pinned) {
  message.className = 'saveas-message saveas-confirm';
  message.setAttribute('role', 'alert');
  message.replaceChildren(
    pinned ? h('span', { className: 'saveas-pinned' }, `${pinned}.`) : null,
    h('span', null, `${path} exists. Replace?`),
    h('button', { type: 'button', className: 'small danger', onclick: () => { message.replaceChildren(); onReplace(); } },
      'Replace'),
    h('button', { type: 'button', className: 'small', onclick: () => { message.replaceChildren(); onCancel(); } },
      'Keep it'));
}
