// MCP-only tokens in the Settings dialog: an agent or editor that drives Totem over /$mcp/ gets
// one of these instead of the access token, which would also let it answer permission questions
// and change rules. A token is shown once, when it is made (the server keeps only its digest);
// the list shows names and dates, each with Remove.
import { api } from '/api.js';
import { h, byId } from '/dom.js';

export class McpTokens {
  constructor() {
    this.section = byId('mcp-tokens');
    this.list = byId('mcp-token-list');
    this.form = byId('mcp-token-form');
    this.name = byId('mcp-token-name');
    this.shown = byId('mcp-token-shown');
    this.error = byId('mcp-token-error');
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.make();
    });
  }

  // Shown with the "All projects" tab only: the tokens belong to this Totem, not to a project.
  async show(visible) {
    this.section.hidden = !visible;
    if (!visible) return;
    this.shown.replaceChildren();
    await this.refresh();
  }

  async refresh() {
    this.say('');
    let answer;
    try {
      answer = await api('mcptokens_list');
    } catch (error) {
      this.say(error.message);
      return;
    }
    const rows = answer.tokens.map((token) => h('li', { className: 'mcp-token', dataset: { id: token.id } },
      h('span', { className: 'mcp-token-name' }, token.name),
      h('span', { className: 'muted' }, ` made ${new Date(token.created).toLocaleString()}`),
      h('button', { type: 'button', className: 'small danger', onclick: () => this.remove(token) }, 'Remove')));
    if (answer.config) rows.push(h('li', { className: 'muted' }, 'and the mcptoken of config.ini'));
    this.list.replaceChildren(...(rows.length ? rows : [h('li', { className: 'muted' }, 'No MCP token yet.')]));
  }

  async make() {
    this.say('');
    let made;
    try {
      made = await api('mcptokens_create', { body: { name: this.name.value.trim() } });
    } catch (error) {
      this.say(error.message);
      return;
    }
    this.name.value = '';
    const value = h('input', { type: 'text', readOnly: true, value: made.token, className: 'mcp-token-value',
      'aria-label': `The MCP token ${made.name}` });
    const copy = h('button', { type: 'button', className: 'small', onclick: async () => {
      await navigator.clipboard?.writeText(made.token).catch(() => {});
      copy.textContent = 'Copied';
    } }, 'Copy');
    this.shown.replaceChildren(h('p', null, `The token “${made.name}”, shown this once: put it in the agent's `
      + 'configuration as Authorization: Bearer <token>. It opens the MCP route and nothing else.'),
    h('div', { className: 'row' }, value, copy));
    value.select();
    await this.refresh();
  }

  async remove(token) {
    try {
      await api('mcptokens_remove', { id: token.id, post: true });
    } catch (error) {
      this.say(error.message);
      return;
    }
    this.shown.replaceChildren();
    await this.refresh();
  }

  say(text) {
    this.error.textContent = text;
    this.error.hidden = !text;
  }
}
