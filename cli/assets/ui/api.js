// The JSON API as the inspector calls it: the token the person typed in
// goes in `Authorization` (never in a URL or a cookie), every read names
// the destination `user_visible_ui` and, when one is set, the asking
// session, so the server applies the same guard, lineage rule and memory
// policy as for any client. The credentials live in this tab's
// sessionStorage: gone when the tab closes, never sent anywhere else.

const KEY = 'cairn.inspector';

/** `{token, workspace, asking}` of this tab, or null before sign-in. */
export function credentials() {
  try {
    const c = JSON.parse(sessionStorage.getItem(KEY) || 'null');
    return c && typeof c.workspace === 'string' ? c : null;
  } catch {
    return null;
  }
}

export function signIn({ token, workspace, asking }) {
  sessionStorage.setItem(KEY, JSON.stringify({ token: token || '', workspace, asking: asking || '' }));
}

export function signOut() {
  sessionStorage.removeItem(KEY);
}

/** A refused or failed call, with the API's error code. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Calls `path` (absolute, `/v1/…`) with `query` and a JSON `body`. */
export async function api(path, { method = 'GET', query = {}, body } = {}) {
  const c = credentials();
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, String(v));
  }
  const headers = { Accept: 'application/json' };
  if (c && c.token) headers.Authorization = `Bearer ${c.token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit',
    cache: 'no-store',
    redirect: 'error',
  });
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    throw new ApiError(res.status, (data && data.code) || `http_${res.status}`, (data && data.message) || text || res.statusText);
  }
  return data;
}

/** The path of a workspace route of the signed-in workspace. */
export function ws(rest) {
  const c = credentials();
  return `/v1/workspaces/${encodeURIComponent(c ? c.workspace : '')}${rest}`;
}

/** Reader parameters (`asking`, `destination`) of most reads. */
export function reader(extra = {}) {
  const c = credentials();
  return { asking: c && c.asking ? c.asking : undefined, destination: 'user_visible_ui', ...extra };
}

/** The same, for the memory-tool reads, which name the asking session `session`. */
export function toolReader(extra = {}) {
  const c = credentials();
  return { session: c && c.asking ? c.asking : undefined, destination: 'user_visible_ui', ...extra };
}

let access = null;

/** What the token may do here (`GET …/access`), asked once per sign-in. */
export async function whoami(refresh = false) {
  if (!access || refresh) access = await api(ws('/access'));
  return access;
}

export function forget() {
  access = null;
}

/** Encodes one path segment (session ids, entry ids, topic names). */
export function seg(value) {
  return encodeURIComponent(value);
}
