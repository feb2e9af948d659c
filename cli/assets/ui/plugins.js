// Plugins: each policy world's serving generation, its breaker, the
// generations seen deciding (the hot-swap history the decision log keeps),
// and the decision log with filters, a page at a time. These are the
// admin's routes: a workspace token sees the refusal the API gives it.

import { h, put, when, badge, table, pager, failure } from './dom.js';
import { api } from './api.js';

const PAGE = 50;
const WORLDS = ['', 'significance-gate', 'topic-directive', 'memory-policy'];
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/** The time a ULID (a decision id) was made at. */
function ulidTime(id) {
  let ms = 0;
  for (const c of String(id).slice(0, 10).toUpperCase()) {
    const v = CROCKFORD.indexOf(c);
    if (v < 0) return null;
    ms = ms * 32 + v;
  }
  return new Date(ms).toISOString();
}

export async function render(el, { params, go }) {
  put(el, h('h1', {}, 'Plugins'));
  let listing;
  try {
    listing = await api('/v1/plugins');
  } catch (err) {
    el.append(failure(err), h('p', { class: 'muted' }, 'Plugins and the decision log are the admin token’s to read.'));
    return;
  }
  const offset = Number(params.offset) || 0;
  const query = { world: params.world, faults_only: params.faults === 'true' ? 'true' : undefined, limit: PAGE + offset };
  const log = await api('/v1/plugins/log', { query }).catch((err) => err);
  const records = log instanceof Error ? [] : log.slice(offset, offset + PAGE);
  el.append(h('div', { class: 'grid' }, listing.plugins.map((p) => world(p, records))), writer(listing.decision_log));
  const worldSelect = h('select', { id: 'log-world', onchange: () => go('', { ...params, world: worldSelect.value, offset: 0 }) },
    WORLDS.map((w) => h('option', { value: w, selected: (params.world || '') === w }, w || 'every world')));
  const faults = h('input', { type: 'checkbox', id: 'log-faults', checked: params.faults === 'true', onchange: () => go('', { ...params, faults: faults.checked ? 'true' : '', offset: 0 }) });
  el.append(h('div', { class: 'card', id: 'decisions' }, h('h2', {}, 'Decision log (newest first)'),
    h('div', { class: 'filters' }, h('label', {}, 'World ', worldSelect), h('label', {}, faults, ' faults and open breakers only')),
    log instanceof Error ? failure(log) : [
      pager(offset, PAGE, records.length, (o) => go('', { ...params, offset: o }), ['← newer', 'older →']),
      table(['When', 'World', 'Generation', 'Outcome', 'Decision', 'µs', 'Fuel', 'Workspace'], records.map((r) =>
        h('tr', { class: r.outcome && r.outcome.kind !== 'plugin' ? 'fault' : '' },
          h('td', {}, when(ulidTime(r.decision_id))), h('td', {}, r.world), h('td', { class: 'mono' }, r.generation),
          h('td', {}, badge(r.outcome ? r.outcome.kind : '?', r.outcome && r.outcome.kind === 'plugin' ? 'in' : 'out')),
          h('td', { class: 'mono clip', title: JSON.stringify(r.output) }, decision(r.output)),
          h('td', { class: 'num' }, r.duration ? Math.round(r.duration.secs * 1e6 + r.duration.nanos / 1e3) : ''),
          h('td', { class: 'num' }, r.fuel_consumed ?? ''), h('td', {}, r.workspace || '—'))))]));
}

/** The decision in a few words: its reason codes and main fields. */
function decision(output) {
  const d = output && output.decision;
  if (!d || typeof d !== 'object') return JSON.stringify(output ?? '');
  const codes = d.reason_codes ? d.reason_codes.join(',') : '';
  const main = Object.entries(d).filter(([k, v]) => k !== 'reason_codes' && k !== 'note' && typeof v !== 'object').map(([k, v]) => `${k}=${v}`);
  return [codes, ...main].filter(Boolean).join(' · ');
}

function world(p, records) {
  const seen = [...new Set(records.filter((r) => r.world === p.world).map((r) => r.generation))];
  return h('div', { class: 'card world', data: { world: p.world } },
    h('h2', {}, p.world, ' ', p.breaker_open ? badge('breaker open', 'out') : badge('breaker closed', 'in'), p.held ? badge('held closed', 'out') : ''),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Serving'), h('dd', { class: 'mono' }, p.generation),
      h('dt', {}, 'Plugin'), h('dd', {}, `${p.plugin}${p.builtin ? ' (built in)' : ''}, ${(p.size_bytes / 1024).toFixed(0)} KiB`),
      h('dt', {}, 'Installed'), h('dd', {}, when(p.installed_at)),
      h('dt', {}, 'Decisions'), h('dd', {}, `${p.decisions} (${p.faults} faults, ${p.consecutive_faults} in a row)`),
      h('dt', {}, 'Last fault'), h('dd', {}, p.last_fault ? JSON.stringify(p.last_fault) : '—'),
      p.held ? [h('dt', {}, 'Held'), h('dd', {}, String(p.held))] : '',
      h('dt', {}, 'Generations seen'), h('dd', { class: 'mono' }, seen.length ? seen.join(' → ') : 'none on this page of the log')));
}

function writer(w) {
  if (!w) return '';
  return h('p', { class: 'meta' }, `Decision log: ${w.written} written, ${w.kept} kept, ${w.dropped} dropped, ${w.write_errors} write errors; writer ${w.writer_running ? 'running' : 'stopped'}; ${(w.file_bytes / 1024).toFixed(0)} KiB.`);
}
