// Usage at a glance: tokens in and out of each answer and of the session, the context the last
// answer used against the model's window, and the cost where the provider's prices give one.
//
// A figure the provider did not count (Totem estimated it from the text's length) is marked "~",
// as is a window that the provider does not state (the kind's default is assumed).
import { h } from '/dom.js';

// 950 -> "950", 1234 -> "1.2K", 128000 -> "128K", 1047576 -> "1M"; a window counted in powers
// of two is named as its model names it (32768 -> "32K", 131072 -> "128K").
export function formatTokens(count) {
  const n = Math.max(0, Math.round(Number(count) || 0));
  const unit = n >= 1024 && (n & (n - 1)) === 0 ? 1024 : 1000; // a power of two
  if (n < unit) return String(n);
  if (n < 10 * unit) return `${(n / unit).toFixed(1).replace(/\.0$/, '')}K`;
  if (n < unit * unit) return `${Math.round(n / unit)}K`;
  return `${(n / unit / unit).toFixed(1).replace(/\.0$/, '')}M`;
}

// US dollars: in cents from a cent up, else the first two significant digits ($0.0012).
export function formatCost(usd) {
  const value = Number(usd);
  if (!Number.isFinite(value) || value < 0) return '';
  if (value === 0) return '$0';
  if (value >= 0.01) return `$${value.toFixed(2)}`;
  return `$${value.toPrecision(2)}`;
}

// The cost of an answer or a session, when the provider's prices gave one (else null).
function costOf(tokens, data) {
  const cost = tokens?.cost ?? data?.cost;
  return typeof cost === 'number' && Number.isFinite(cost) ? cost : null;
}

// "~1.2K in · 56 out · $0.0012" for {input, output, estimated, cost?}; null without figures.
export function tokensText(tokens, data) {
  if (!tokens || typeof tokens.input !== 'number' || typeof tokens.output !== 'number') return null;
  const mark = tokens.estimated ? '~' : '';
  const cost = costOf(tokens, data);
  const cached = cachedShare(tokens);
  return [`${mark}${formatTokens(tokens.input)} in${cached === null ? '' : ` (${cached}% cached)`}`,
    `${mark}${formatTokens(tokens.output)} out`, cost === null ? null : formatCost(cost)].filter(Boolean).join(' · ');
}

// The share of the input that the provider's prompt cache served, in percent (null: none said).
function cachedShare(tokens) {
  return typeof tokens.cached === 'number' && tokens.cached > 0 && tokens.input > 0
    ? Math.round((tokens.cached / tokens.input) * 100) : null;
}

function tokensTitle(tokens, data, what) {
  const cost = costOf(tokens, data);
  return `${what}: ${tokens.input.toLocaleString()} tokens in, ${tokens.output.toLocaleString()} out`
    + `${tokens.estimated ? ' (estimated from the length of the text: the provider gave no count)' : ''}`
    + `${cachedShare(tokens) === null ? '' : `, ${tokens.cached.toLocaleString()} of them from the provider's prompt cache`}`
    + `${cost === null ? '' : `; ${formatCost(cost)} at the provider's prices`}`;
}

// The usage line of one answer (its message's data.tokens), or null when it has none.
export function messageUsage(message) {
  const tokens = message.data?.tokens;
  const text = tokensText(tokens, message.data);
  if (!text) return null;
  return h('span', { className: 'msg-usage', title: tokensTitle(tokens, message.data, 'This answer') }, text);
}

// The session's figures beside its title: the sum of its answers, and the context the last
// answer used against the window of its model (`window`: {context, contextguessed} or null).
export function paintSessionUsage(element, { tokens, last, window }) {
  const total = tokens && (tokens.input || tokens.output) ? tokensText(tokens) : null;
  const used = last?.input;
  const parts = [];
  if (total) parts.push(h('span', { className: 'usage-total', title: tokensTitle(tokens, null, 'This session') }, total));
  if (typeof used === 'number') {
    const mark = last.estimated ? '~' : '';
    const size = window?.context;
    const guessed = window?.contextguessed ? '~' : '';
    const share = size ? Math.min(100, Math.round((used / size) * 100)) : null;
    const title = `The last answer used ${used.toLocaleString()} tokens of context`
      + (size ? ` out of the model's window of ${size.toLocaleString()}${guessed ? ' (assumed: the provider does not say)' : ''}` : '')
      + (last.estimated ? '; estimated from the length of the text' : '');
    parts.push(h('span', { className: 'usage-context', title },
      `context ${mark}${formatTokens(used)}${size ? ` / ${guessed}${formatTokens(size)}` : ''}`,
      share === null ? null : h('meter', { className: 'usage-meter', min: 0, max: 100, low: 60, high: 85, optimum: 0,
        value: share, 'aria-label': `${share}% of the context window` }),
      share === null ? null : ` ${share}%`));
  }
  element.replaceChildren(...parts.flatMap((part, index) => (index ? [h('span', { className: 'muted' }, ' · '), part] : [part])));
  element.hidden = !parts.length;
}
