// DOM helpers. Text always goes in as text (textContent / text nodes),
// never as HTML: nothing the API returns can become markup or script.

const SVG = 'http://www.w3.org/2000/svg';

function fill(el, props, children) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.setAttribute('class', value);
    else if (key === 'text') el.textContent = String(value);
    else if (key === 'data') for (const [k, v] of Object.entries(value)) el.dataset[k] = String(v);
    else if (key === 'style') Object.assign(el.style, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h('a', {href: '#/x', class: 'y'}, 'text', child…). */
export function h(tag, props, ...children) {
  return fill(document.createElement(tag), props, children);
}

/** An SVG element, same shape as `h`. */
export function s(tag, props, ...children) {
  return fill(document.createElementNS(SVG, tag), props, children);
}

/** Replaces everything inside `el`. */
export function put(el, ...children) {
  el.replaceChildren();
  return fill(el, {}, children);
}

/** A link to another view of the inspector. */
export function link(hash, text, props = {}) {
  return h('a', { href: hash, ...props }, text);
}

/** `#/view/arg?k=v` with empty values left out. */
export function route(view, arg, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') query.set(k, v);
  const q = query.toString();
  return `#/${view}${arg ? '/' + encodeURIComponent(arg) : ''}${q ? '?' + q : ''}`;
}

/** A timestamp as the person's local date and time, to the minute. */
export function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toISOString().slice(0, 16).replace('T', ' ') + 'Z';
}

/** A link to a turn: `session:seq`, landing on the turn in its transcript. */
export function turnLink(session, seq, text) {
  return link(route('sessions', session, { turn: seq }), text ?? `${session}:${seq}`, { class: 'turn-link', data: { session, seq } });
}

/** A link to an entry of the memory log. */
export function entryLink(id, text) {
  return link(route('memory', id), text ?? id, { class: 'entry-link mono' });
}

/** A small labelled value. */
export function badge(text, kind = '') {
  return h('span', { class: `badge ${kind}`.trim() }, text);
}

/** A table from column names and rows of cells. */
export function table(columns, rows, props = {}) {
  return h('table', props,
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, rows));
}

/** The message a failed read shows in place of its content. */
export function failure(err) {
  const code = err && err.code ? err.code : 'error';
  return h('div', { class: 'failure', role: 'alert', data: { code, status: err?.status ?? '' } },
    h('strong', {}, `${err?.status ?? ''} ${code}`.trim()), ': ', err?.message ?? String(err));
}

/** Previous / next buttons for a list read `limit` at a time from `offset`. */
export function pager(offset, limit, shown, go, [back, on] = ['← previous', 'next →']) {
  return h('div', { class: 'pager' },
    h('button', { type: 'button', class: 'prev', disabled: offset === 0, onclick: () => go(Math.max(0, offset - limit)) }, back),
    h('span', { class: 'muted' }, shown ? `${offset + 1}–${offset + shown}` : 'none'),
    h('button', { type: 'button', class: 'next', disabled: shown < limit, onclick: () => go(offset + limit) }, on));
}
