// Sessions: a timeline per work context (sessions as bars, sub-agents
// under their parents, phase changes and the entries captured from each
// session as marks), paged; and one session's transcript, paged, landing
// on a turn when the link names one.

import { h, s, put, link, route, when, badge, table, entryLink, turnLink, pager, failure } from './dom.js';
import { api, ws, reader, seg } from './api.js';

const PAGE = 50;
const TURNS = 50;

export async function render(el, { arg, params, go }) {
  if (arg) return transcript(el, arg, params, go);
  return timeline(el, params, go);
}

async function timeline(el, params, go) {
  const offset = Number(params.offset) || 0;
  const context = params.work_context || '';
  const [sessions, recent] = await Promise.all([
    api(ws('/sessions'), { query: { ...reader({ destination: undefined }), work_context: context, offset, limit: PAGE } }),
    api(ws('/entries'), { query: { ...reader(), work_context: context, limit: 200 } }),
  ]);
  put(el,
    h('h1', {}, 'Sessions'),
    h('p', { class: 'muted' }, context
      ? ['Work context ', h('strong', {}, context), ' · ', link(route('sessions'), 'all work contexts')]
      : 'Every work context; each bar is a session from its start to its last turn. Sub-agents sit under their parent.'),
    pager(offset, PAGE, sessions.length, (o) => go('', { ...params, offset: o })));
  const byContext = new Map();
  for (const session of sessions) {
    if (!byContext.has(session.work_context)) byContext.set(session.work_context, []);
    byContext.get(session.work_context).push(session);
  }
  for (const [wc, list] of byContext) {
    const entries = recent.filter((v) => v.work_context === wc);
    el.append(h('div', { class: 'card context', data: { context: wc } },
      h('h2', {}, link(route('sessions', '', { work_context: wc }), wc)),
      chart(ordered(list), entries),
      sessionTable(ordered(list))));
  }
  if (!sessions.length) el.append(h('p', { class: 'muted' }, 'No sessions on this page.'));
}

/** Sessions with each sub-agent right after its parent (as far as the page holds both). */
function ordered(list) {
  const ids = new Set(list.map((s) => s.id));
  const children = new Map();
  for (const session of list) {
    const parent = session.parent && ids.has(session.parent) ? session.parent : '';
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(session);
  }
  const out = [];
  const walk = (parent, depth) => {
    for (const session of (children.get(parent) || []).sort((a, b) => a.created_at.localeCompare(b.created_at))) {
      out.push({ ...session, depth });
      walk(session.id, depth + 1);
    }
  };
  walk('', 0);
  return out;
}

function chart(list, entries) {
  const times = list.flatMap((s) => [s.created_at, s.last_turn_at].filter(Boolean).map((t) => Date.parse(t)));
  for (const v of entries) times.push(Date.parse(v.timestamp));
  const start = Math.min(...times);
  const end = Math.max(...times, start + 60_000);
  const width = 900;
  const left = 170;
  const row = 22;
  const top = 26;
  const x = (t) => left + ((Date.parse(t) - start) / (end - start)) * (width - left - 20);
  const height = top + list.length * row + 10;
  const svg = s('svg', { class: 'timeline', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': 'session timeline' });
  svg.append(s('text', { x: left, y: 14, class: 'axis' }, when(new Date(start).toISOString())),
    s('text', { x: width - 20, y: 14, class: 'axis', 'text-anchor': 'end' }, when(new Date(end).toISOString())));
  const rowOf = new Map(list.map((session, i) => [session.id, i]));
  list.forEach((session, i) => {
    const y = top + i * row;
    const from = x(session.created_at);
    const to = Math.max(from + 4, x(session.last_turn_at || session.created_at));
    const label = s('a', { href: route('sessions', session.id) },
      s('text', { x: 8 + session.depth * 14, y: y + 14, class: 'label' }, `${session.depth ? '↳ ' : ''}${session.id}`));
    const bar = s('rect', { x: from, y: y + 4, width: to - from, height: 12, rx: 3, class: `bar ${session.kind}` },
      s('title', {}, `${session.id} (${session.kind}, ${session.state}): ${session.next_seq} turns, ${when(session.created_at)} – ${when(session.last_turn_at)}`));
    svg.append(label, bar);
    if (session.parent && rowOf.has(session.parent)) {
      const py = top + rowOf.get(session.parent) * row + 16;
      svg.append(s('path', { d: `M ${from} ${py} V ${y + 10}`, class: 'lineage' }));
    }
  });
  for (const e of entries) {
    const at = x(e.timestamp);
    if (e.kind === 'work_phase_change') {
      svg.append(s('path', { d: `M ${at} 18 l 5 5 l -5 5 l -5 -5 z`, class: 'phase' }, s('title', {}, `${when(e.timestamp)} ${e.content}`)));
      svg.append(s('line', { x1: at, x2: at, y1: 28, y2: height - 6, class: 'phase-line' }));
    } else if (e.provenance && rowOf.has(e.provenance.session)) {
      const y = top + rowOf.get(e.provenance.session) * row + 10;
      const mark = s('a', { href: route('memory', e.id) },
        s('circle', { cx: x(e.recorded_at || e.timestamp), cy: y, r: 4, class: `capture ${e.kind}` },
          s('title', {}, `${e.kind} captured ${when(e.recorded_at)} from turns ${e.provenance.from_seq}–${e.provenance.to_seq}: ${e.content}`)));
      svg.append(mark);
    }
  }
  return h('div', { class: 'scroll' }, svg);
}

function sessionTable(list) {
  return table(['Session', 'Kind', 'Parent', 'State', 'Turns', 'Started', 'Last turn', ''], list.map((session) =>
    h('tr', { data: { session: session.id } },
      h('td', {}, link(route('sessions', session.id), session.id, { class: 'mono' })),
      h('td', {}, badge(session.kind, session.kind)),
      h('td', {}, session.parent ? link(route('sessions', session.parent), session.parent, { class: 'mono' }) : '—'),
      h('td', {}, session.state),
      h('td', { class: 'num' }, session.next_seq),
      h('td', {}, when(session.created_at)),
      h('td', {}, when(session.last_turn_at)),
      h('td', {}, link(route('why', '', { session: session.id }), 'why'), ' · ', link(route('compaction', session.id), 'compaction')))));
}

async function transcript(el, id, params, go) {
  const target = params.turn !== undefined ? Number(params.turn) : null;
  const from = params.from !== undefined ? Number(params.from) : target !== null ? Math.max(0, target - 5) : 0;
  const [session, turns, entries] = await Promise.all([
    api(ws(`/sessions/${seg(id)}`), { query: reader({ destination: undefined }) }),
    api(ws(`/sessions/${seg(id)}/transcript`), { query: { ...reader(), from, limit: TURNS } }),
    api(ws('/entries'), { query: { ...reader(), session: id, limit: 20 } }).catch((err) => err),
  ]);
  put(el,
    h('h1', {}, 'Session ', h('span', { class: 'mono' }, session.id)),
    h('p', { class: 'meta' },
      badge(session.kind, session.kind), ' work context ', link(route('sessions', '', { work_context: session.work_context }), session.work_context),
      session.parent ? [' · parent ', link(route('sessions', session.parent), session.parent, { class: 'mono' })] : '',
      ` · ${session.state} · ${session.next_seq} turns · started ${when(session.created_at)}`,
      session.resets ? ` · ${session.resets} resets` : '',
      ' · ', link(route('why', '', { session: session.id }), 'why this block'),
      ' · ', link(route('compaction', session.id), 'compaction')));
  const rows = turns.map((t) => h('li', {
    id: `turn-${t.seq}`,
    class: `turn ${t.role}${t.seq === target ? ' target' : ''}`,
    data: { seq: t.seq, role: t.role },
  },
  h('div', { class: 'turn-head' },
    h('a', { href: route('sessions', id, { turn: t.seq }), class: 'mono' }, `#${t.seq}`), ' ', badge(t.role, t.role),
    t.tool_call_id ? h('span', { class: 'muted mono' }, ` ${t.tool_call_id}`) : '', ' ', h('span', { class: 'muted' }, when(t.timestamp))),
  h('div', { class: 'content' }, t.content)));
  el.append(
    h('div', { class: 'two' },
      h('div', { class: 'card' },
        h('h2', {}, 'Transcript'),
        pager(from, TURNS, turns.length, (o) => go(id, { from: o })),
        h('ol', { class: 'transcript' }, rows)),
      h('div', { class: 'card side' },
        h('h2', {}, 'Memory from this session'),
        entries instanceof Error ? failure(entries) : entries.length
          ? h('ul', { class: 'plain' }, entries.map((e) => h('li', {},
            badge(e.kind, e.kind), ' ', entryLink(e.id, e.content), ' ',
            e.provenance ? [h('span', { class: 'muted' }, 'turns '), turnLink(e.provenance.session, e.provenance.from_seq, `${e.provenance.from_seq}–${e.provenance.to_seq}`)] : '')))
          : h('p', { class: 'muted' }, 'Nothing recorded from this session yet.'))));
  if (target !== null) {
    const found = document.getElementById(`turn-${target}`);
    if (found) found.scrollIntoView({ block: 'center' });
  }
}
