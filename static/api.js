// The REST API: /api/{collection_verb}[/{id}], JSON in and out, errors as [{name, error}].

export class ApiError extends Error {
  constructor(status, problems) {
    super(problems.map((p) => (p.name && p.name !== '$' ? `${p.name}: ${p.error}` : p.error)).join('; ')
      || `request failed (${status})`);
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
    throw new ApiError(401, [{ error: 'signed out' }]);
  }
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, Array.isArray(data) ? data : []);
  return data;
}
