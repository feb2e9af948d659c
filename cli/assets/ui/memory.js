// Memory: the live log (or its whole history) by kind and subject, a page
// at a time, each entry with provenance links to its turns; one entry with
// its `replaces` chain, its decay and archive state, the turns it came
// from and the maintenance runs that touched it.

import { h, put, link, route, when, badge, table, entryLink, turnLink, pager, failure } from './dom.js';
import { api, ws, reader, seg } from './api.js';

const PAGE = 50;
const KINDS = ['', 'decision', 'fact', 'task', 'open_question', 'preference', 'handoff', 'work_phase_change', 'note'];

export async function render(el, { arg, params, go }) {
  if (arg) return detail(el, arg);
  return list(el, params, go);
}

function provenance(e) {
  const p = e.provenance;
  if (!p) return h('span', { class: 'muted' }, '—');
  const turns = [];
  for (let seq = p.from_seq; seq <= p.to_seq && turns.length < 6; seq++) {
    turns.push(turnLink(p.session, seq, seq === p.from_seq ? `${p.session}:${seq}` : `:${seq}`), ' ');
  }
  if (p.to_seq - p.from_seq >= 6) turns.push(h('span', { class: 'muted' }, `… :${p.to_seq}`));
  return h('span', { class: 'provenance' }, turns);
}

/** Live, replaced (by what), expired or archived (by which maintenance run), and decay. */
function state(v) {
  const st = v.status || { state: 'live' };
  const parts = [badge(st.state, `status-${st.state}`)];
  if (st.by) parts.push(' by ', entryLink(st.by));
  if (st.at) parts.push(h('span', { class: 'muted' }, ` ${when(st.at)}`));
  if (st.run) parts.push(' run ', h('span', { class: 'mono', data: { run: st.run } }, st.run));
  if (v.decay_at) parts.push(h('span', { class: 'muted' }, ` decays ${when(v.decay_at)}`));
  return parts;
}

async function list(el, params, go) {
  const offset = Number(params.offset) || 0;
  const query = { kind: params.kind, subject: params.subject, work_context: params.work_context, all: params.all === 'true' ? 'true' : undefined };
  const [views, subjects] = await Promise.all([
    api(ws('/entries'), { query: { ...reader(), ...query, offset, limit: PAGE } }),
    api(ws('/subjects')).catch(() => []),
  ]);
  const kind = h('select', { id: 'kind', onchange: () => go('', { ...params, kind: kind.value, offset: 0 }) },
    KINDS.map((k) => h('option', { value: k, selected: (params.kind || '') === k }, k || 'every kind')));
  const subject = h('select', { id: 'subject', onchange: () => go('', { ...params, subject: subject.value, offset: 0 }) },
    h('option', { value: '' }, 'every subject'),
    subjects.map((sub) => h('option', { value: sub.slug, selected: params.subject === sub.slug }, sub.display || sub.slug)));
  const all = h('input', { type: 'checkbox', id: 'all', checked: params.all === 'true', onchange: () => go('', { ...params, all: all.checked ? 'true' : '', offset: 0 }) });
  put(el,
    h('h1', {}, 'Memory'),
    h('div', { class: 'filters' }, h('label', {}, 'Kind ', kind), h('label', {}, 'Subject ', subject),
      h('label', {}, all, ' with history (replaced and expired)'),
      params.work_context ? h('span', {}, 'work context ', h('strong', {}, params.work_context)) : ''),
    pager(offset, PAGE, views.length, (o) => go('', { ...params, offset: o }), ['← newer', 'older →']),
    table(['Entry', 'Kind', 'Content', 'Subject', 'Work context', 'From turns', 'State', 'Recorded'], views.map((v) => {
      const e = v;
      return h('tr', { data: { entry: e.id }, class: v.status && v.status.state !== 'live' ? 'faded' : '' },
        h('td', {}, entryLink(e.id, e.id.length > 14 ? `${e.id.slice(0, 12)}…` : e.id)),
        h('td', {}, badge(e.kind, e.kind)),
        h('td', { class: 'content' }, e.content, e.replaces ? h('div', { class: 'muted' }, 'replaces ', entryLink(e.replaces)) : ''),
        h('td', {}, e.subject ? link(route('memory', '', { ...params, subject: e.subject, offset: 0 }), e.subject) : '—'),
        h('td', {}, link(route('memory', '', { work_context: e.work_context }), e.work_context)),
        h('td', {}, provenance(e)),
        h('td', {}, state(v)),
        h('td', {}, when(e.recorded_at)));
    }), { class: 'entries' }));
}

async function detail(el, id) {
  const [view, history, runs] = await Promise.all([
    api(ws(`/entries/${seg(id)}`), { query: reader() }),
    api(ws(`/entries/${seg(id)}/history`), { query: reader() }).catch((err) => err),
    api(ws('/maintain/runs')).catch((err) => err),
  ]);
  const e = view;
  const p = e.provenance;
  const source = p
    ? await api(ws(`/sessions/${seg(p.session)}/transcript`), { query: { ...reader(), from: p.from_seq, limit: Math.min(20, p.to_seq - p.from_seq + 1) } }).catch((err) => err)
    : null;
  const touched = runs instanceof Error ? runs : runs.filter((run) => JSON.stringify(run.changes).includes(JSON.stringify(e.id)));
  put(el,
    h('h1', {}, badge(e.kind, e.kind), ' ', h('span', { class: 'mono' }, e.id)),
    h('div', { class: 'card' },
      h('p', { class: 'big' }, e.content),
      e.detail ? h('p', { class: 'muted' }, e.detail) : '',
      h('dl', { class: 'facts' },
        h('dt', {}, 'State'), h('dd', {}, state(view)),
        h('dt', {}, 'Subject'), h('dd', {}, e.subject ? link(route('memory', '', { subject: e.subject }), e.subject) : '—'),
        h('dt', {}, 'Work context'), h('dd', {}, link(route('sessions', '', { work_context: e.work_context }), e.work_context)),
        h('dt', {}, 'Provenance'), h('dd', {}, p ? [`session ${p.session}, turns ${p.from_seq}–${p.to_seq}: `, provenance(e)] : 'none (written directly)'),
        h('dt', {}, 'Replaces'), h('dd', {}, e.replaces ? entryLink(e.replaces) : '—'),
        h('dt', {}, 'Task status'), h('dd', {}, e.task_status || '—'),
        h('dt', {}, 'Happened'), h('dd', {}, when(e.timestamp)),
        h('dt', {}, 'Recorded'), h('dd', {}, when(e.recorded_at)),
        h('dt', {}, 'Gate generation'), h('dd', { class: 'mono' }, e.gate_generation || '—'))),
    h('div', { class: 'two' },
      h('div', { class: 'card' }, h('h2', {}, 'History (the replaces chain)'),
        history instanceof Error ? failure(history) : h('ol', { class: 'history' }, history.map((v) => h('li', { class: v.id === e.id ? 'current' : '' },
          entryLink(v.id), ' ', state(v), ' ', v.content,
          h('span', { class: 'muted' }, ` (recorded ${when(v.recorded_at)})`))))),
      h('div', { class: 'card' }, h('h2', {}, 'Source turns'),
        !source ? h('p', { class: 'muted' }, 'No provenance.') : source instanceof Error ? failure(source)
          : h('ol', { class: 'transcript' }, source.map((t) => h('li', { class: `turn ${t.role}` },
            h('div', { class: 'turn-head' }, turnLink(t.session, t.seq), ' ', badge(t.role, t.role)),
            h('div', { class: 'content' }, t.content)))))),
    h('div', { class: 'card' }, h('h2', {}, 'Maintenance runs that touched it'),
      touched instanceof Error ? failure(touched) : touched.length
        ? h('ul', { class: 'plain' }, touched.map((run) => h('li', {}, h('span', { class: 'mono' }, run.id), ` ${run.trigger} at ${when(run.at)}`,
          run.undone ? ' (undone)' : '', ': ',
          run.changes.filter((c) => JSON.stringify(c).includes(JSON.stringify(e.id))).map((c) => c.action || c.kind || JSON.stringify(c).slice(0, 80)).join(', '))))
        : h('p', { class: 'muted' }, 'None.')));
}
