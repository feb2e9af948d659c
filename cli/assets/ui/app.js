// The inspector's shell: sign-in, navigation, and a router over the
// location hash (`#/view/arg?params`), so every view is a link that can be
// bookmarked or followed from another view by id.

import { h, put, route } from './dom.js';
import { credentials, forget, signIn, signOut, whoami } from './api.js';
import * as sessions from './sessions.js';
import * as memory from './memory.js';
import * as why from './why.js';
import * as topics from './topics.js';
import * as plugins from './plugins.js';
import * as compaction from './compaction.js';
import * as health from './health.js';

const VIEWS = [
  ['sessions', 'Sessions', sessions],
  ['memory', 'Memory', memory],
  ['why', 'Why this block', why],
  ['topics', 'Topics', topics],
  ['plugins', 'Plugins', plugins],
  ['compaction', 'Compaction', compaction],
  ['health', 'Health', health],
];

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');

/** `#/view/arg?k=v` as `{view, arg, params}`. */
function parse(hash) {
  const [path, query = ''] = hash.replace(/^#\/?/, '').split('?');
  const [view = '', ...rest] = path.split('/');
  const arg = rest.length ? decodeURIComponent(rest.join('/')) : '';
  return { view, arg, params: Object.fromEntries(new URLSearchParams(query)) };
}

function drawNav(current) {
  put(nav, VIEWS.map(([name, title]) =>
    h('a', { href: route(name), class: name === current ? 'current' : '', 'aria-current': name === current ? 'page' : false }, title)));
}

function drawWho() {
  const c = credentials();
  if (!c) return put(who);
  put(who,
    h('span', { class: 'mono' }, c.workspace),
    c.asking ? h('span', { class: 'muted' }, ` as ${c.asking}`) : null,
    h('span', { id: 'scope', class: 'badge' }, '…'),
    h('button', { type: 'button', onclick: () => { signOut(); forget(); location.hash = '#/'; draw(); } }, 'Sign out'));
  whoami().then((a) => {
    const el = document.getElementById('scope');
    if (el) el.textContent = a.admin ? 'admin' : `${a.scope} token`;
  }).catch(() => {});
}

/** The sign-in form: a token (none on a local server without tokens), the
 *  workspace, and optionally the session to read as (a sub-agent's view). */
function drawSignIn(message) {
  drawNav('');
  put(who);
  const token = h('input', { id: 'token', type: 'password', autocomplete: 'off', placeholder: 'cairn_… (empty on a local server without tokens)' });
  const workspace = h('input', { id: 'workspace', value: 'default', required: true });
  const asking = h('input', { id: 'asking', placeholder: 'optional: a sub-agent or cron session id' });
  const error = h('div', { id: 'signin-error' });
  const form = h('form', {
    id: 'signin',
    class: 'card narrow',
    onsubmit: async (event) => {
      event.preventDefault();
      signIn({ token: token.value.trim(), workspace: workspace.value.trim(), asking: asking.value.trim() });
      forget();
      try {
        await whoami(true);
        draw();
      } catch (err) {
        signOut();
        put(error, h('p', { class: 'failure', role: 'alert' }, `${err.status ?? ''} ${err.code ?? ''}: ${err.message}`));
      }
    },
  },
  h('h1', {}, 'Sign in'),
  h('p', { class: 'muted' }, 'The inspector reads the JSON API with your token, under the same rules as any client: ' +
    'a read token sees, a write token may also decide proposals. The token stays in this tab only.'),
  h('label', {}, 'Token', token),
  h('label', {}, 'Workspace', workspace),
  h('label', {}, 'Read as session', asking),
  h('button', { type: 'submit' }, 'Open'),
  error);
  put(main, form);
  if (message) put(error, h('p', { class: 'failure', role: 'alert' }, message));
  token.focus();
}

let drawing = 0;

/** Draws the view the hash names; the newest navigation wins. */
async function draw() {
  const c = credentials();
  if (!c) return drawSignIn();
  const { view, arg, params } = parse(location.hash);
  const found = VIEWS.find(([name]) => name === view) || VIEWS[0];
  const [name, title, module] = found;
  drawNav(name);
  drawWho();
  const mine = ++drawing;
  const started = performance.now();
  document.title = `${title} · cairn inspector`;
  delete document.body.dataset.ready;
  const target = h('section', { class: 'view', id: `view-${name}` });
  put(main, target);
  try {
    await module.render(target, { arg, params, go: (a, p) => { location.hash = route(name, a, p); } });
  } catch (err) {
    if (err && err.status === 401) {
      signOut();
      forget();
      return drawSignIn(`${err.code}: ${err.message}`);
    }
    target.append(h('div', { class: 'failure', role: 'alert', data: { code: err?.code ?? 'error' } },
      `${err?.status ?? ''} ${err?.code ?? ''}: ${err?.message ?? err}`));
  }
  if (mine !== drawing) return;
  // The view has its first page of data on screen: what the browser
  // suite times (from the page's start, or from the navigation within it).
  const painted = performance.now();
  document.body.dataset.ready = name;
  window.cairnPaint = { view: name, sincePageStart: painted, sinceNavigation: painted - started };
}

window.addEventListener('hashchange', draw);
draw();
