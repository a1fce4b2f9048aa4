// The REST API: /api/{collection_verb}[/{id}], JSON in and out, errors as [{name, error}].

// How a field is named in a sentence, where the server's reason only says what is wrong with it
// ("must be ...", "is required"); any other field is "The <name>".
const FIELD_WORDS = {
  url: 'The URL', key: 'The key', text: 'The prompt', name: 'The name', model: 'The model', path: 'The path',
  pattern: 'The pattern', token: 'The token', messageid: 'The message', projectid: 'The project', id: 'The id',
};
const PREDICATE = /^(must|is|are|each|should|cannot|may|has|needs)\b/i;

// One problem of an error answer as a plain sentence: the server's reason, capitalized and
// ended, with the field's name only where the reason needs it ("The URL must be ...").
export function problemText({ name, error }) {
  let text = String(error ?? '').trim();
  if (!text) return '';
  if (name && name !== '$' && PREDICATE.test(text)) text = `${FIELD_WORDS[name] ?? `The ${name}`} ${text}`;
  else if (/^unknown field$/i.test(text) && name) text = `The field ${name} is not known`;
  text = text[0].toUpperCase() + text.slice(1);
  return /[.!?…)]$/.test(text) ? text : `${text}.`;
}

export class ApiError extends Error {
  constructor(status, problems) {
    super(problems.map(problemText).filter(Boolean).join(' ') || `The request failed (${status}).`);
    this.status = status;
    this.problems = problems;
  }
}

// api('sessions', { query: { projectid } }) reads; api('sessions_create', { body }) changes;
// api('sessions_abort', { id, post: true }) changes without a body.
export async function api(name, { id, query, body, post } = {}) {
  let url = `/api/${name}${id ? `/${encodeURIComponent(id)}` : ''}`;
  if (query) url += `?${new URLSearchParams(query)}`;
  const options = body !== undefined || post ? {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body ?? {}),
  } : {};
  let response;
  try {
    response = await fetch(url, options);
  } catch {
    throw new ApiError(0, [{ error: 'Totem cannot be reached' }]);
  }
  if (response.status === 401) {
    location.href = '/login';
    throw new ApiError(401, [{ error: 'Signed out' }]);
  }
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, Array.isArray(data) ? data : []);
  return data;
}
