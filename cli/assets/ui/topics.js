// Topics: each topic's collection and the gate's tiers per turn (`why`),
// and its proposals. Approve and reject are offered to a token that may
// write only; the server refuses them to a read token whatever a page
// sends.

import { h, put, link, route, when, badge, table, turnLink, failure } from './dom.js';
import { api, ws, reader, seg, whoami } from './api.js';

const TIERS = { pattern: 1, lexical: 2, policy: 3 };

export async function render(el, { arg, params }) {
  if (arg) return detail(el, arg, params);
  const topics = await api(ws('/topics'));
  put(el, h('h1', {}, 'Topics'),
    topics.length ? table(['Topic', 'About', 'Triggers', 'Activation', 'Priority', 'Generation', 'Updated'], topics.map((t) =>
      h('tr', { data: { topic: t.name } },
        h('td', {}, link(route('topics', t.name), t.name, { class: 'mono' })),
        h('td', {}, t.description || ''),
        h('td', {}, triggers(t)),
        h('td', {}, badge(t.activation), t.paused ? badge('paused', 'warn') : ''),
        h('td', {}, t.priority),
        h('td', { class: 'num' }, t.generation),
        h('td', {}, when(t.updated_at)))))
      : h('p', { class: 'muted' }, 'No topics in this workspace.'));
}

function triggers(t) {
  return (t.triggers || []).map((x) => `${x.kind}${x.value !== undefined ? ' ' + x.value : ''}`).join(', ');
}

function turnOf(ref) {
  return typeof ref === 'string' ? { session: ref.slice(0, ref.lastIndexOf('/')), seq: Number(ref.slice(ref.lastIndexOf('/') + 1)) } : ref;
}

async function detail(el, name, params) {
  const limit = Number(params.limit) || 20;
  const [details, proposals, access] = await Promise.all([
    api(ws(`/topics/${seg(name)}`), { query: { ...reader(), limit } }),
    api(ws(`/topics/${seg(name)}/proposals`), { query: reader({ all: 'true' }) }).catch((err) => err),
    whoami().catch(() => ({ scope: 'read' })),
  ]);
  const t = details.topic;
  const why = h('div', { id: 'why-turn' });
  put(el,
    h('h1', {}, 'Topic ', h('span', { class: 'mono' }, t.name)),
    h('p', { class: 'meta' }, t.description || '', ` · ${triggers(t)} · generation ${t.generation} · activation ${t.activation} · priority ${t.priority}`),
    h('div', { class: 'two' },
      h('div', { class: 'card' }, h('h2', {}, `Collected (${details.members.length}${details.members.length >= limit ? '+' : ''})`),
        details.members.length >= limit ? link(route('topics', name, { limit: limit * 2 }), 'show more') : '',
        table(['Turn', 'Tier', 'Score', 'Snippet', ''], details.members.map((m) => {
          const turn = turnOf(m.turn);
          return h('tr', {},
            h('td', {}, turnLink(turn.session, turn.seq)),
            h('td', {}, badge(`${TIERS[m.tier] ?? ''} ${m.tier}`.trim(), `gate-${m.tier}`)),
            h('td', { class: 'num' }, Number(m.score).toFixed(2)),
            h('td', {}, m.snippet, m.low_trust ? badge('low trust', 'warn') : ''),
            h('td', {}, h('button', { type: 'button', class: 'why-button', onclick: () => explain(why, name, turn) }, 'why')));
        }))),
      h('div', { class: 'card' }, h('h2', {}, 'Why a turn was collected'), why,
        h('p', { class: 'muted' }, 'Pick “why” on a turn: every gate record, tier by tier.'))),
    h('div', { class: 'card', id: 'proposals' }, h('h2', {}, 'Proposals'),
      proposals instanceof Error ? failure(proposals) : proposalTable(el, name, proposals, access)));
}

async function explain(target, name, turn) {
  put(target, h('p', { class: 'muted' }, 'Reading…'));
  try {
    const records = await api(ws(`/topics/${seg(name)}/why/${seg(turn.session)}/${turn.seq}`), { query: reader() });
    put(target, h('p', {}, 'Turn ', turnLink(turn.session, turn.seq)),
      table(['Outcome', 'Tier', 'Score', 'Threshold', 'Reasons', 'Policy', 'Decided'], records.map((r) =>
        h('tr', {}, h('td', {}, badge(r.outcome, r.outcome)), h('td', {}, `${TIERS[r.tier] ?? ''} ${r.tier}`),
          h('td', { class: 'num' }, Number(r.score).toFixed(2)), h('td', { class: 'num' }, Number(r.threshold).toFixed(2)),
          h('td', {}, (r.reasons || []).join(', ')), h('td', { class: 'mono' }, r.policy_generation || '—'), h('td', {}, when(r.decided_at))))));
  } catch (err) {
    put(target, failure(err));
  }
}

function proposalTable(el, name, proposals, access) {
  if (!proposals.length) return h('p', { class: 'muted' }, 'No proposals.');
  const mayWrite = access.scope === 'write';
  const status = h('div', { id: 'decide-status' });
  const decide = async (turn, approve) => {
    try {
      await api(ws(`/topics/${seg(name)}/proposals/decide`), { method: 'POST', body: { turn: `${turn.session}/${turn.seq}`, approve } });
      put(status, h('p', { class: 'ok' }, `${approve ? 'Approved' : 'Rejected'} ${turn.session}/${turn.seq}.`));
      window.dispatchEvent(new HashChangeEvent('hashchange'));
    } catch (err) {
      put(status, failure(err));
    }
  };
  return h('div', {},
    mayWrite ? '' : h('p', { class: 'muted', id: 'read-only-note' }, 'This token may read only: approving and rejecting need a write token.'),
    table(['Turn', 'Tier', 'Score', 'Snippet', 'Status', ''], proposals.map((p) => {
      const m = p.membership;
      const turn = turnOf(m.turn);
      return h('tr', { class: 'proposal', data: { turn: `${turn.session}/${turn.seq}`, status: p.status } },
        h('td', {}, turnLink(turn.session, turn.seq)),
        h('td', {}, m.tier), h('td', { class: 'num' }, Number(m.score).toFixed(2)), h('td', {}, m.snippet),
        h('td', {}, badge(p.status, p.status), p.decided_at ? h('span', { class: 'muted' }, ` ${when(p.decided_at)}`) : ''),
        h('td', {}, mayWrite && p.status === 'pending' ? [
          h('button', { type: 'button', class: 'approve', onclick: () => decide(turn, true) }, 'approve'), ' ',
          h('button', { type: 'button', class: 'reject', onclick: () => decide(turn, false) }, 'reject')] : ''));
    })), status);
}
