// Health: the process (status, problems, workers, panics), the index
// backlog (the admin's `GET /v1/stats/index`) and the workspace's
// maintenance runs, the numbers `cairn doctor` reports about a live server.

import { h, put, badge, table, failure, when } from './dom.js';
import { api, ws } from './api.js';

export async function render(el) {
  const [health, stats, runs] = await Promise.all([
    api('/healthz'),
    api('/v1/stats/index').catch((err) => err),
    api(ws('/maintain/runs')).catch((err) => err),
  ]);
  put(el, h('h1', {}, 'Health'),
    h('div', { class: 'card', id: 'process' },
      h('h2', {}, 'This server ', badge(health.status, health.status === 'ok' ? 'in' : 'out')),
      h('p', { class: 'meta' }, `cairn ${health.version} · ${health.panics} panics caught since start`),
      health.problems.length ? h('ul', { class: 'plain problems' }, health.problems.map((p) => h('li', {}, p))) : h('p', { class: 'muted' }, 'No problems.'),
      table(['Worker', 'Running', 'Passes', 'Panics', 'Last panic', 'Set aside'], health.workers.map((w) =>
        h('tr', { class: w.running ? '' : 'faded' }, h('td', { class: 'mono' }, w.name), h('td', {}, w.running ? 'yes' : 'no'),
          h('td', { class: 'num' }, w.passes), h('td', { class: 'num' }, w.panics), h('td', {}, w.last_panic || '—'),
          h('td', {}, (w.quarantined || []).join(', ') || '—'))))),
    h('div', { class: 'card', id: 'index' }, h('h2', {}, 'Search index'),
      stats instanceof Error ? [failure(stats), h('p', { class: 'muted' }, 'The index statistics are the admin token’s to read.')]
        : h('dl', { class: 'facts' },
          h('dt', {}, 'Turns indexed'), h('dd', {}, stats.indexed), h('dt', {}, 'Turn backlog'), h('dd', {}, stats.backlog),
          h('dt', {}, 'Entries indexed'), h('dd', {}, stats.entries), h('dt', {}, 'Entry backlog'), h('dd', {}, stats.entry_backlog),
          h('dt', {}, 'Vectors'), h('dd', {}, stats.vectors), h('dt', {}, 'Embeddings'), h('dd', {}, stats.embeddings ? `on (${stats.embedded} embedded, ${stats.reused} reused)` : 'off (lexical only)'),
          h('dt', {}, 'Workspaces'), h('dd', {}, stats.workspaces))),
    h('div', { class: 'card', id: 'runs' }, h('h2', {}, 'Maintenance runs'),
      runs instanceof Error ? failure(runs) : runs.length
        ? table(['Run', 'Trigger', 'At', 'Changes', 'Undone'], runs.slice(-50).reverse().map((r) =>
          h('tr', {}, h('td', { class: 'mono' }, r.id), h('td', {}, String(r.trigger)), h('td', {}, when(r.at)),
            h('td', { class: 'num' }, r.changes.length), h('td', {}, r.undone ? 'yes' : '—'))))
        : h('p', { class: 'muted' }, 'No maintenance run yet.')));
}
