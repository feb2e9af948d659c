// Why this block: the block `POST …/assemble` builds for a session, budget,
// destination and query, beside every candidate it weighed (in or out,
// tier, tokens, rule, reason, the memory policy's decision), and the
// budget filling as a stacked bar by tier. The same call and the same
// trace as `cairn assemble --explain`.

import { h, s, put, route, badge, table, entryLink, turnLink, link } from './dom.js';
import { api, ws } from './api.js';

const DESTINATIONS = ['user_visible_ui', 'local_model', 'cloud_model', 'external_llm', 'subagent', 'share_link', 'task_runtime'];
const RETRIEVALS = ['hybrid', 'lexical', 'off'];

export async function render(el, { params, go }) {
  const session = h('input', { id: 'why-session', name: 'session', value: params.session || '', required: true, list: 'why-sessions', placeholder: 'session id' });
  const budget = h('input', { id: 'why-budget', name: 'budget', type: 'number', min: 1, value: params.budget || '', placeholder: 'default' });
  const destination = h('select', { id: 'why-destination', name: 'destination' },
    DESTINATIONS.map((d) => h('option', { value: d, selected: (params.destination || 'user_visible_ui') === d }, d)));
  const retrieval = h('select', { id: 'why-retrieval', name: 'retrieval' },
    RETRIEVALS.map((r) => h('option', { value: r, selected: (params.retrieval || 'hybrid') === r }, r)));
  const query = h('input', { id: 'why-query', name: 'query', value: params.query || '', placeholder: "default: the session's last user turn" });
  const options = h('datalist', { id: 'why-sessions' });
  const form = h('form', {
    class: 'card filters',
    id: 'why-form',
    onsubmit: (event) => {
      event.preventDefault();
      go('', { session: session.value.trim(), budget: budget.value, destination: destination.value, retrieval: retrieval.value, query: query.value });
    },
  },
  h('label', {}, 'Session ', session), options,
  h('label', {}, 'Budget ', budget),
  h('label', {}, 'Destination ', destination),
  h('label', {}, 'Retrieval ', retrieval),
  h('label', { class: 'wide' }, 'Query ', query),
  h('button', { type: 'submit' }, 'Assemble'));
  put(el, h('h1', {}, 'Why this block'), form);
  api(ws('/sessions'), { query: { limit: 50 } }).then((list) => {
    put(options, list.map((x) => h('option', { value: x.id })));
  }).catch(() => {});
  if (!params.session) {
    el.append(h('p', { class: 'muted' }, 'Pick a session to see the block its next model call would get, and why each candidate is in or out.'));
    return;
  }
  const body = {
    session: params.session,
    destination: params.destination || 'user_visible_ui',
    retrieval: params.retrieval || 'hybrid',
    trace: true,
  };
  if (params.budget) body.budget_tokens = Number(params.budget);
  if (params.query) body.query = params.query;
  const block = await api(ws('/assemble'), { method: 'POST', body });
  el.append(summary(block), bar(block),
    h('div', { class: 'two why' },
      h('div', { class: 'card' }, h('h2', {}, 'The block'), h('pre', { class: 'block', id: 'block-text' }, block.text)),
      h('div', { class: 'card scroll' }, h('h2', {}, `Every candidate (${block.trace.length}: ${block.trace.filter((t) => t.included).length} in)`), candidates(block))));
}

function summary(block) {
  const a = block.activity;
  const r = block.retrieval;
  return h('div', { class: 'card meta', id: 'why-summary' },
    h('strong', {}, `${block.tokens} of ${block.budget} tokens`), ` (${block.encoding}) for `, badge(block.destination),
    ` · policy ${block.policy_generations.join(', ') || '—'}`,
    ` · activity ${a.activity_type}${a.inherited ? ' (inherited)' : ''}: ${a.reason}`,
    ` · retrieval ${r.mode}${r.lexical_fallback ? ' (lexical fallback)' : ''}${r.index_catching_up ? ' (index catching up)' : ''}, ${r.candidates} candidates`);
}

/** What a bar segment is: a tier (`tier N tag`), or the section of untiered items. */
function group(item, tiers) {
  if (item.tier !== null && item.tier !== undefined) {
    const t = tiers.find((x) => x.tier === item.tier);
    return { key: `tier ${item.tier}`, label: `tier ${item.tier}${t ? ' ' + t.tag : ''}`, cls: `tier${item.tier}` };
  }
  return { key: item.section, label: item.section.replaceAll('_', ' '), cls: `sec-${item.section}` };
}

function bar(block) {
  const groups = new Map();
  for (const item of block.trace.filter((t) => t.included)) {
    const g = group(item, block.tiers);
    if (!groups.has(g.key)) groups.set(g.key, { ...g, tokens: 0, items: 0 });
    const x = groups.get(g.key);
    x.tokens += item.tokens;
    x.items += 1;
  }
  // Widths in percent of the budget: the bar fills its card at any size.
  const budget = Math.max(block.budget, 1);
  const pct = (tokens) => (tokens / budget) * 100;
  const svg = s('svg', { class: 'budget', width: '100%', height: 34, role: 'img', 'aria-label': `budget: ${block.tokens} of ${block.budget} tokens` });
  svg.append(s('rect', { x: 0, y: 4, width: '100%', height: 26, rx: 4, class: 'free' }, s('title', {}, `budget ${block.budget} tokens`)));
  let x = 0;
  for (const g of groups.values()) {
    const w = pct(g.tokens);
    svg.append(s('rect', { x: `${x}%`, y: 4, width: `${Math.max(w, 0.2)}%`, height: 26, class: `seg ${g.cls}`, data: { group: g.key, tokens: g.tokens } },
      s('title', {}, `${g.label}: ${g.tokens} tokens, ${g.items} items`)));
    if (w > 9) svg.append(s('text', { x: `${x + 0.6}%`, y: 22, class: 'seg-label' }, `${g.label} ${g.tokens}`));
    x += w;
  }
  const legend = h('ul', { class: 'legend' }, [...groups.values()].map((g) =>
    h('li', {}, h('span', { class: `swatch ${g.cls}` }), `${g.label}: ${g.tokens} tok (${g.items})`)),
  h('li', {}, h('span', { class: 'swatch free' }), `free: ${Math.max(0, block.budget - block.tokens)} tok`));
  const tiers = table(['Tier', 'Tag', 'Fired', 'Tokens', 'Cap', 'Why'], block.tiers.map((t) =>
    h('tr', { class: t.fired ? '' : 'faded' }, h('td', {}, h('span', { class: `swatch tier${t.tier}` }), ` ${t.tier}`), h('td', {}, t.tag),
      h('td', {}, t.fired ? 'in' : 'out'), h('td', { class: 'num' }, t.tokens), h('td', { class: 'num' }, t.cap), h('td', {}, t.reason))),
  { class: 'tiers' });
  return h('div', { class: 'card', id: 'why-bar' }, h('h2', {}, 'The budget filling'), svg, legend, tiers);
}

/** A source as `cairn assemble --explain` prints it, and a link to it. */
function source(src) {
  switch (src.type) {
    case 'directive': return [`directive #${src.index}`, null];
    case 'turn': return [`turn ${src.session}:${src.seq}`, turnLink(src.session, src.seq, `turn ${src.session}:${src.seq}`)];
    case 'entry': return [`${src.kind} ${src.id}`, [`${src.kind} `, entryLink(src.id)]];
    case 'missing': return [`entry ${src.id}`, ['entry ', entryLink(src.id)]];
    case 'summary': return [`summary ${src.id}`, null];
    case 'topic': return [`topic ${src.topic} turn ${src.session}:${src.seq}`,
      ['topic ', link(route('topics', src.topic), src.topic), ' ', turnLink(src.session, src.seq, `turn ${src.session}:${src.seq}`)]];
    default: return [JSON.stringify(src), null];
  }
}

function candidates(block) {
  return table(['', 'Tier', 'Section', 'Source', 'Tokens', 'Rule', 'Reason', 'Score', 'Policy'], block.trace.map((item) => {
    const [label, linked] = source(item.source);
    const p = item.policy;
    return h('tr', { class: `candidate ${item.included ? 'in' : 'out'}`, data: { included: item.included, source: label } },
      h('td', {}, badge(item.included ? 'in' : 'out', item.included ? 'in' : 'out')),
      h('td', {}, item.tier ?? '—'),
      h('td', {}, item.section),
      h('td', { class: 'mono' }, linked || label),
      h('td', { class: 'num' }, item.tokens),
      h('td', { class: 'mono' }, item.rule),
      h('td', {}, item.reason),
      h('td', { class: 'num' }, item.score === null || item.score === undefined ? '' : item.score.toFixed(3)),
      h('td', { class: 'policy', title: p ? `policy generation ${p.generation}` : '' },
        p ? [badge(p.fidelity, `fidelity-${p.fidelity}`), ' ', h('span', { class: 'muted small' }, p.reason_codes.join(', '))] : '—'));
  }), { class: 'trace', id: 'trace' });
}
