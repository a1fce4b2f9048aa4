// The Schedules dialog of a project: prompts that run on their own every N minutes or daily at a
// time of the server's time zone, each run a new session (Schedules|list, save, remove, run).
//
// The server checks every field: its answer [{name, error}] is shown next to the field it
// names. The list shows when each runs next and how its last run went, with a way to its session.
import { api } from '/api.js';
import { h, byId, confirmButton, toast } from '/dom.js';
import { modelOptions } from '/composer.js';

const FIELDS = ['name', 'prompt', 'model', 'kind', 'interval', 'time', 'mode', 'autoaccept', 'maxcost', 'enabled'];
const REFRESH_GAP_MS = 1500; // after a run's status changed, or past a schedule's next time
const MAX_TIMER_MS = 60 * 60 * 1000;
const MINUTE_MS = 60 * 1000;

export class SchedulesDialog {
  // catalog(): Providers|catalog as the page read it; onOpenSession(sessionid); onChange(list).
  constructor({ catalog, onOpenSession, onChange }) {
    Object.assign(this, { catalog, onOpenSession, onChange });
    this.dialog = byId('schedules-dialog');
    this.listElement = byId('schedule-list');
    this.project = null;
    this.list = [];
    this.editing = null; // the schedule being changed, or null for a new one
    this.timer = 0;
    this.form = this.buildForm();
    byId('schedule-add').addEventListener('click', () => this.edit(null));
    this.dialog.addEventListener('close', () => clearTimeout(this.timer));
  }

  async show(project) {
    this.project = project;
    byId('schedules-dialog-title').textContent = `Schedules · ${project.name}`;
    this.list = [];
    this.form.element.hidden = true;
    this.paint();
    this.dialog.showModal();
    await this.refresh();
  }

  async refresh() {
    const project = this.project;
    if (!project) return;
    let list;
    try {
      list = await api('schedules', { query: { projectid: project.id } });
    } catch (error) {
      this.listElement.replaceChildren(h('li', { className: 'error' }, error.message));
      return;
    }
    if (this.project !== project) return;
    this.list = list;
    this.paint();
    this.onChange(list);
    this.refreshLater();
  }

  // While the dialog is open: read again just after the earliest next run.
  refreshLater(delay) {
    clearTimeout(this.timer);
    if (!this.dialog.open) return;
    const nexts = this.list.map((s) => s.next).filter(Boolean);
    const wait = delay ?? (nexts.length ? Math.min(...nexts) - Date.now() + REFRESH_GAP_MS : null);
    if (wait === null) return;
    this.timer = setTimeout(() => this.refresh(), Math.max(0, Math.min(wait, MAX_TIMER_MS)));
  }

  // A session's status changed: the last run of one of the schedules shown may be it.
  sessionChanged(sessionid) {
    if (this.dialog.open && this.list.some((s) => s.last?.sessionid === sessionid)) this.refreshLater(REFRESH_GAP_MS);
  }

  // -- the list -------------------------------------------------------------------------------

  paint() {
    this.listElement.replaceChildren(...this.list.map((schedule) => this.card(schedule)));
    if (!this.list.length) {
      this.listElement.append(h('li', { className: 'empty' }, 'No schedule yet: a new one runs a prompt every N minutes or daily.'));
    }
  }

  card(schedule) {
    return h('li', { className: `card schedule${schedule.enabled ? '' : ' disabled'}`,
      dataset: { id: schedule.id, enabled: String(schedule.enabled) } },
    h('div', { className: 'grow' },
      h('div', { className: 'schedule-title' },
        h('strong', { className: 'schedule-name' }, schedule.name),
        schedule.enabled ? null : h('span', { className: 'badge' }, 'disabled'),
        h('span', { className: 'muted schedule-options', title: schedule.model },
          [schedule.mode === 'build' ? 'Build' : 'Plan', schedule.autoaccept ? 'auto-accept edits' : null,
            schedule.maxcost != null ? `at most $${schedule.maxcost} a run` : null, this.modelName(schedule.model)].filter(Boolean).join(' · '))),
      h('div', { className: 'schedule-when' }, whenText(schedule)),
      h('div', { className: 'schedule-next', dataset: { next: String(schedule.next ?? '') } },
        h('span', { className: 'muted' }, 'Next run: '),
        schedule.next ? timeElement(schedule.next) : h('span', null, schedule.enabled ? 'not planned' : 'none (disabled)')),
      this.lastRun(schedule.last)),
    h('div', { className: 'schedule-actions' },
      h('button', { type: 'button', className: 'small primary', title: 'Run the prompt now, in a new session',
        onclick: () => this.run(schedule) }, 'Run now'),
      h('button', { type: 'button', className: 'small', onclick: () => this.edit(schedule) }, 'Edit'),
      h('button', { type: 'button', className: 'small', onclick: () => this.setEnabled(schedule, !schedule.enabled) },
        schedule.enabled ? 'Disable' : 'Enable'),
      confirmButton('Remove', 'Remove?', () => this.remove(schedule),
        { className: 'small danger', title: 'Remove this schedule (the sessions of its runs stay)' })));
  }

  modelName(id) {
    const model = this.catalog().models.find((m) => m.id === id);
    return model ? `${model.provider.name} · ${model.name || model.model}` : id;
  }

  lastRun(last) {
    const box = h('div', { className: 'schedule-last' }, h('span', { className: 'muted' }, 'Last run: '));
    if (!last) {
      box.append(h('span', null, 'never yet'));
      return box;
    }
    const status = last.status || 'skipped';
    box.append(h('span', { className: `badge status-${status}` }, status));
    if (last.time) box.append(' ', timeElement(last.time));
    if (last.note) box.append(h('span', { className: 'schedule-note' }, ` — ${last.note}`));
    if (last.sessionid && status !== 'removed') {
      box.append(' ', h('button', { type: 'button', className: 'link open-run', title: 'Open the session of this run',
        onclick: () => this.openRun(last.sessionid) }, 'Open session'));
    }
    return box;
  }

  // -- the actions ----------------------------------------------------------------------------

  openRun(sessionid) {
    this.dialog.close();
    this.onOpenSession(sessionid);
  }

  async run(schedule) {
    let answer;
    try {
      answer = await api('schedules_run', { id: schedule.id, post: true });
    } catch (error) {
      toast(error.problems?.[0]?.error ?? error.message); // e.g. its previous run still goes on
      await this.refresh();
      return;
    }
    toast(`“${schedule.name}” runs now`, 'info');
    this.openRun(answer.sessionid);
  }

  async setEnabled(schedule, enabled) {
    const body = { id: schedule.id, projectid: schedule.projectid, enabled };
    for (const name of FIELDS) if (name !== 'enabled' && schedule[name] !== null && schedule[name] !== undefined) body[name] = schedule[name];
    if (body.kind === 'daily') delete body.interval;
    else delete body.time;
    try {
      await api('schedules_save', { body });
    } catch (error) {
      toast(error.message);
    }
    await this.refresh();
  }

  async remove(schedule) {
    try {
      await api('schedules_remove', { id: schedule.id, post: true });
    } catch (error) {
      toast(error.message);
    }
    if (this.editing?.id === schedule.id) this.form.element.hidden = true;
    await this.refresh();
  }

  // -- the form -------------------------------------------------------------------------------

  buildForm() {
    const controls = {
      name: h('input', { id: 'schedule-name', maxLength: 200, spellcheck: false }),
      prompt: h('textarea', { id: 'schedule-prompt', rows: 4 }),
      model: h('select', { id: 'schedule-model' }),
      kind: h('select', { id: 'schedule-kind' },
        h('option', { value: 'interval' }, 'Every N minutes'), h('option', { value: 'daily' }, 'Daily at a time')),
      interval: h('input', { id: 'schedule-interval', type: 'number', min: 1, max: 7 * 24 * 60, step: 1, inputMode: 'numeric' }),
      time: h('input', { id: 'schedule-time', type: 'time' }),
      mode: h('select', { id: 'schedule-mode' },
        h('option', { value: 'plan' }, 'Plan (only reads)'), h('option', { value: 'build' }, 'Build (changes files)')),
      autoaccept: h('input', { id: 'schedule-autoaccept', type: 'checkbox' }),
      maxcost: h('input', { id: 'schedule-maxcost', type: 'number', min: 0, step: 'any', inputMode: 'decimal',
        placeholder: 'the setting' }),
      enabled: h('input', { id: 'schedule-enabled', type: 'checkbox' }),
    };
    const zone = h('span', { className: 'muted schedule-zone' });
    const fields = {
      name: field('name', 'Name', controls.name),
      prompt: field('prompt', 'Prompt', controls.prompt),
      model: field('model', 'Model', controls.model),
      kind: field('kind', 'Runs', controls.kind),
      interval: field('interval', 'Every', controls.interval, h('span', { className: 'muted' }, 'minutes')),
      time: field('time', 'At', controls.time, zone),
      mode: field('mode', 'Mode', controls.mode),
      autoaccept: checkField('autoaccept', controls.autoaccept, 'Auto-accept edits (nobody is there to approve; never .env files)'),
      maxcost: field('maxcost', 'Spending limit', controls.maxcost,
        h('span', { className: 'muted' }, 'US dollars a run may spend (empty: the Spending limit setting)')),
      enabled: checkField('enabled', controls.enabled, 'Enabled'),
    };
    const title = h('h3', { id: 'schedule-form-title' }, 'New schedule');
    const error = h('p', { id: 'schedule-error', className: 'error', hidden: true });
    const element = h('form', { id: 'schedule-form', className: 'form schedule-form', hidden: true, noValidate: true,
      autocomplete: 'off' },
    title,
    h('p', { className: 'muted schedule-hint' }, 'Each run is a new session. Nobody is there to answer: '
      + 'questions are refused, and only the permission rules (and auto-accept for edits) decide.'),
    FIELDS.map((name) => fields[name]), error,
    h('div', { className: 'row end' },
      h('button', { type: 'button', onclick: () => { element.hidden = true; } }, 'Cancel'),
      h('button', { type: 'submit', className: 'primary' }, 'Save')));
    element.addEventListener('submit', (event) => { event.preventDefault(); this.save(); });
    controls.kind.addEventListener('change', () => this.showKind());
    this.dialog.append(element);
    return { element, controls, fields, title, error, zone };
  }

  edit(schedule) {
    const { controls, title, zone } = this.form;
    this.editing = schedule;
    const values = schedule ?? { name: '', prompt: '', kind: 'interval', interval: 60, time: '09:00', mode: 'plan',
      autoaccept: false, enabled: true };
    title.textContent = schedule ? `Change ${schedule.name}` : 'New schedule';
    controls.name.value = values.name;
    controls.prompt.value = values.prompt;
    this.fillModels(values.model);
    controls.kind.value = values.kind;
    controls.interval.value = values.interval ?? 60;
    controls.time.value = values.time ?? '09:00';
    controls.mode.value = values.mode || 'plan';
    controls.autoaccept.checked = !!values.autoaccept;
    controls.maxcost.value = values.maxcost ?? '';
    controls.enabled.checked = values.enabled !== false;
    const timezone = schedule?.timezone ?? this.list[0]?.timezone;
    zone.textContent = timezone ? `the server's time: ${timezone}` : "in the server's time zone";
    this.showProblems([]);
    this.showKind();
    this.form.element.hidden = false;
    controls.name.focus();
  }

  // The models of the catalog; a schedule's model that is no longer offered stays chosen.
  fillModels(chosen) {
    const select = this.form.controls.model;
    const catalog = this.catalog();
    select.replaceChildren(...modelOptions(catalog));
    const ids = catalog.models.map((m) => m.id);
    if (chosen && !ids.includes(chosen)) select.prepend(h('option', { value: chosen }, `${chosen} (not offered now)`));
    const last = localStorage.getItem('totem.model'); // the composer's latest choice
    select.value = chosen || (ids.includes(last) ? last : ids[0] ?? '');
  }

  // Only the field that applies to the kind is shown (and sent).
  showKind() {
    const daily = this.form.controls.kind.value === 'daily';
    this.form.fields.interval.hidden = daily;
    this.form.fields.time.hidden = !daily;
  }

  values() {
    const { controls } = this.form;
    const body = { projectid: this.project.id, name: controls.name.value, prompt: controls.prompt.value,
      model: controls.model.value, kind: controls.kind.value, mode: controls.mode.value,
      autoaccept: controls.autoaccept.checked, enabled: controls.enabled.checked };
    if (this.editing) body.id = this.editing.id;
    const maxcost = controls.maxcost.value.trim();
    if (maxcost !== '') body.maxcost = Number.isFinite(Number(maxcost)) ? Number(maxcost) : maxcost; // the server says what is wrong
    if (body.kind === 'daily') {
      if (controls.time.value) body.time = controls.time.value;
    } else if (controls.interval.value.trim() !== '') {
      body.interval = Number(controls.interval.value);
    }
    return body;
  }

  async save() {
    const body = this.values();
    let saved;
    try {
      saved = await api('schedules_save', { body });
    } catch (error) {
      this.showProblems(error.problems?.length ? error.problems : [{ error: error.message }]);
      return;
    }
    this.showProblems([]);
    this.form.element.hidden = true;
    this.editing = null;
    toast(`Saved “${saved.name}”`, 'info');
    await this.refresh();
  }

  // Each problem next to its field; the others (or a field not shown) above the buttons.
  showProblems(problems) {
    const { fields, error } = this.form;
    const general = [];
    for (const box of Object.values(fields)) {
      box.classList.remove('invalid');
      const message = box.querySelector('.field-error');
      message.textContent = '';
      message.hidden = true;
    }
    for (const problem of problems) {
      const box = fields[problem.name];
      if (!box || box.hidden) {
        general.push(problem.name && problem.name !== '$' ? `${problem.name}: ${problem.error}` : problem.error);
        continue;
      }
      const message = box.querySelector('.field-error');
      message.textContent = message.textContent ? `${message.textContent}; ${problem.error}` : problem.error;
      message.hidden = false;
      box.classList.add('invalid');
    }
    error.textContent = general.join('; ');
    error.hidden = !general.length;
    this.form.element.querySelector('.invalid input, .invalid textarea, .invalid select')?.focus();
  }
}

function field(name, label, control, ...after) {
  return h('div', { className: 'field', dataset: { field: name } },
    h('label', { htmlFor: control.id }, label),
    h('div', { className: 'field-control' }, control, ...after,
      h('p', { className: 'field-error', dataset: { errorFor: name }, role: 'alert', hidden: true })));
}

function checkField(name, control, label) {
  return h('div', { className: 'field', dataset: { field: name } },
    h('span'),
    h('div', { className: 'field-control' }, h('label', { className: 'check' }, control, label),
      h('p', { className: 'field-error', dataset: { errorFor: name }, role: 'alert', hidden: true })));
}

function whenText(schedule) {
  if (schedule.kind === 'daily') return `Daily at ${schedule.time}, ${schedule.timezone}`;
  const minutes = schedule.interval;
  if (minutes === 1) return 'Every minute';
  if (minutes % 1440 === 0) return `Every ${minutes / 1440 === 1 ? 'day' : `${minutes / 1440} days`} (${minutes} minutes)`;
  if (minutes % 60 === 0) return `Every ${minutes / 60 === 1 ? 'hour' : `${minutes / 60} hours`} (${minutes} minutes)`;
  return `Every ${minutes} minutes`;
}

// A time (ms) as this browser shows dates, with how far it is from now.
function timeElement(ms) {
  const date = new Date(ms);
  return h('time', { dateTime: date.toISOString(), title: date.toString() },
    `${date.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' })} (${relative(ms - Date.now())})`);
}

function relative(delta) {
  const minutes = Math.round(Math.abs(delta) / MINUTE_MS);
  const span = minutes < 1 ? 'less than a minute' : minutes < 90 ? `${minutes} min`
    : minutes < 36 * 60 ? `${Math.round(minutes / 60)} h` : `${Math.round(minutes / 1440)} days`;
  return delta >= 0 ? `in ${span}` : `${span} ago`;
}
