// "Save as" on the code blocks of an answer: the person names a file of the project and the
// block's text is written there (Sessions|saveas). An existing file is replaced only after the
// person confirms it; a refusal (outside the project, .git, a secret file) is shown with the
// server's reason. The text saved is the block's own text, as shown, with its last line ended.
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

// One listener for every Save as button under `root`; sessionid() is the session shown.
export function enableSaveAs(root, { sessionid }) {
  root.addEventListener('click', (event) => {
    const button = event.target.closest('button.saveas');
    if (!button || !root.contains(button)) return;
    const block = button.closest('.codeblock');
    const message = button.closest('.msg');
    if (!block || !message) return;
    const open = block.querySelector('.saveas-form');
    if (open && !open.classList.contains('saveas-finished')) {
      open.querySelector('input').focus();
      return;
    }
    open?.remove();  // a finished save's note gives way to a new form at once
    const form = saveForm(block, { sessionid: sessionid(), messageid: message.dataset.id });
    block.querySelector('.codebar').after(form);
    form.querySelector('input').focus();
  });
}

function saveForm(block, { sessionid, messageid }) {
  const input = h('input', { type: 'text', className: 'saveas-path', placeholder: 'path/in/the/project',
    spellcheck: false, 'aria-label': 'Save as: the path in the project' });
  const message = h('div', { className: 'saveas-message', role: 'status' });
  const controls = h('span', { className: 'saveas-controls' },
    h('button', { type: 'submit', className: 'small primary' }, 'Save'),
    h('button', { type: 'button', className: 'small', onclick: () => form.remove() }, 'Cancel'));
  const form = h('form', { className: 'saveas-form' },
    h('label', null, 'Save as ', input), controls, message);
  const setBusy = (busy) => { for (const control of form.querySelectorAll('button, input')) control.disabled = busy; };
  const save = async (replace) => {
    const path = input.value.trim();
    if (!path) {
      showError(message, 'Type the path of the file to write, inside the project');
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
      if (error.status === 409 && !replace) confirmReplace(message, path, () => save(true), () => input.focus());
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

function confirmReplace(message, path, onReplace, onCancel) {
  message.className = 'saveas-message saveas-confirm';
  message.setAttribute('role', 'alert');
  message.replaceChildren(
    h('span', null, `${path} exists. Replace?`),
    h('button', { type: 'button', className: 'small danger', onclick: () => { message.replaceChildren(); onReplace(); } },
      'Replace'),
    h('button', { type: 'button', className: 'small', onclick: () => { message.replaceChildren(); onCancel(); } },
      'Keep it'));
}
