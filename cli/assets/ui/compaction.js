// Compaction: a session's summary DAG drawn as a tree (the compaction
// view's covers, each summary's children below it), each node expandable
// to the turns it stands for.

import { h, put, link, route, badge, turnLink, failure, when } from './dom.js';
import { api, ws, toolReader, seg } from './api.js';

export async function render(el, { arg }) {
  put(el, h('h1', {}, 'Compaction'));
  if (!arg) {
    const sessions = await api(ws('/sessions'), { query: { limit: 50 } });
    el.append(h('p', { class: 'muted' }, 'Pick a session:'),
      h('ul', { class: 'plain columns' }, sessions.map((x) => h('li', {}, link(route('compaction', x.id), x.id, { class: 'mono' }), ` (${x.next_seq} turns)`))));
    return;
  }
  const view = await api(ws(`/sessions/${seg(arg)}/compaction`), { query: toolReader() });
  el.append(h('p', { class: 'meta' }, 'Session ', link(route('sessions', arg), arg, { class: 'mono' }),
    ` · ${view.passes} compaction passes · covered to turn ${view.covered_to}`),
  h('div', { class: 'card' }, h('h2', {}, 'What the model sees of this session, oldest first'),
    view.items.length ? h('ul', { class: 'tree', id: 'dag' }, view.items.map((c) => cover(arg, c)))
      : h('p', { class: 'muted' }, 'Never compacted: every turn is raw.')));
}

function cover(session, c) {
  const kind = c.type || Object.keys(c)[0];
  const body = c.type ? c : c[kind];
  if (kind === 'summary' || kind === 'Summary') return summary(body.id);
  const from = body.from;
  const to = body.to;
  return h('li', { class: 'node raw' }, badge('raw'), ' turns ', turnLink(session, from, `${from}`), '–', turnLink(session, to, `${to}`));
}

/** A summary node: drawn closed; opening it reads its expansion (its text
 *  and children), and “turns” reads the exact originals. */
function summary(id) {
  const kids = h('ul', { class: 'tree' });
  const text = h('div', { class: 'summary-text' });
  const node = h('li', { class: 'node summary', data: { summary: id } });
  let open = false;
  const toggle = h('button', {
    type: 'button',
    class: 'expand',
    onclick: async () => {
      open = !open;
      toggle.textContent = open ? '▾' : '▸';
      if (!open) return put(kids), put(text);
      try {
        const e = await api(ws(`/summaries/${seg(id)}`), { query: toolReader() });
        const n = e.node;
        put(text, h('p', { class: 'muted' }, `level ${n.level} · ${n.method} · turns ${n.from_seq}–${n.to_seq} · ${n.tokens_before} → ${n.tokens_after} tokens · ${when(n.earliest)} – ${when(n.latest)}`),
          h('pre', { class: 'block' }, n.text),
          h('button', { type: 'button', class: 'turns', onclick: () => originals(kids, id) }, 'the turns it stands for'));
        put(kids, (e.children || []).map((child) => expanded(n.session, child)));
      } catch (err) {
        put(text, failure(err));
      }
    },
  }, '▸');
  return fill(node, toggle, ' ', badge('summary'), ' ', h('span', { class: 'mono' }, id), text, kids);
}

function expanded(session, child) {
  if (child.node) return summary(child.node.id);
  if (child.summary) return summary(child.summary.id || child.summary);
  if (child.id && child.level !== undefined) return summary(child.id);
  if (child.turns) return h('li', { class: 'node raw' }, child.turns.map((t) => [turnLink(t.session || session, t.seq), ' ']));
  if (child.type === 'turns' || child.from !== undefined) return h('li', { class: 'node raw' }, 'turns ', turnLink(session, child.from), '–', turnLink(session, child.to));
  if (child.seq !== undefined) return h('li', { class: 'node raw' }, turnLink(child.session || session, child.seq), ' ', child.content || '');
  return h('li', { class: 'node' }, JSON.stringify(child).slice(0, 200));
}

async function originals(target, id) {
  try {
    const t = await api(ws(`/summaries/${seg(id)}/turns`), { query: toolReader() });
    put(target, t.turns.map((turn) => h('li', { class: 'node raw' }, turnLink(turn.session, turn.seq), ' ', badge(turn.role, turn.role), ' ', turn.content)),
      t.truncated ? h('li', { class: 'muted' }, 'more turns: open the session') : '');
  } catch (err) {
    put(target, failure(err));
  }
}

function fill(el, ...children) {
  el.append(...children.map((c) => (typeof c === 'string' ? document.createTextNode(c) : c)));
  return el;
}
