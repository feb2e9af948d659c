// First paint of each inspector view on a big workspace: 100,000 turns
// (`cairn loadgen` in process, one workspace) and 10,000 more entries
// (the API, 500 a call, with provenance into the loadgen's sessions).
// Printed, never asserted (docs/BENCHMARKS.md, *Inspector first paint*).
// Run by inspector.test.mjs when CAIRN_BROWSER_BIG=1.

import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

const WS = 'lg-ws-0';
const TURNS = Number(process.env.CAIRN_BROWSER_BIG_TURNS || 100_000);
const ENTRIES = Number(process.env.CAIRN_BROWSER_BIG_ENTRIES || 10_000);
const KINDS = ['decision', 'fact', 'task', 'open_question'];

export async function bigPaint({ cairnBin, browser, serve, ok, root, shots, admin }) {
  // CAIRN_BROWSER_BIG_DIR: a data dir seeded by an earlier run, reused as it is.
  const reuse = process.env.CAIRN_BROWSER_BIG_DIR;
  const dir = reuse || path.join(root, 'big');
  // Lexical search only: the numbers are the pages', not the model's.
  const env = { ...process.env, CAIRN_EMBEDDING__DISCOVER: 'false', CAIRN_EMBEDDING__MODEL_DIR: '', CAIRN_EMBEDDING__ORT_DYLIB: '', RUST_LOG: 'error' };
  let started = Date.now();
  if (!reuse || !existsSync(dir)) {
    const run = spawnSync(cairnBin, ['--data-dir', dir, 'loadgen', '--workspaces', '1', '--work-contexts', '20', '--sessions', '200',
      '--topics', '4', '--rate', '0', '--concurrency', '32', '--duration', '3600', '--max-turns', String(TURNS), '--seed', '83', '--json'],
    { env, encoding: 'utf8', maxBuffer: 64 << 20 });
    // The seed is what matters here; loadgen's own verdict is its test's.
    if (run.status !== 0) console.log(`# cairn loadgen exited ${run.status}: ${(run.stderr || '').trim().split('\n').pop()}`);
    console.log(`# big workspace: ${TURNS} turns by cairn loadgen in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  }
  const s = await serve(dir, { CAIRN_EMBEDDING__DISCOVER: 'false', CAIRN_EMBEDDING__MODEL_DIR: '', CAIRN_EMBEDDING__ORT_DYLIB: '' });
  try {
    const sessions = await ok(s.base, 'GET', `/v1/workspaces/${WS}/sessions`);
    const turns = sessions.reduce((n, x) => n + x.next_seq, 0);
    started = Date.now();
    const before = (await ok(s.base, 'GET', `/v1/workspaces/${WS}/entries?all=true&limit=100000`)).length;
    for (let i = before >= ENTRIES ? ENTRIES : 0; i < ENTRIES; i += 500) {
      const entries = [];
      for (let j = i; j < Math.min(ENTRIES, i + 500); j++) {
        const from = sessions[j % sessions.length];
        const seq = from.next_seq ? j % from.next_seq : 0;
        entries.push({
          kind: KINDS[j % KINDS.length],
          content: `Synthetic ${KINDS[j % KINDS.length]} ${j} about wc ${from.work_context}: launch item ${j % 97}`,
          subject: `subject-${j % 40}`,
          work_context: from.work_context,
          provenance: from.next_seq ? { session: from.id, from_seq: seq, to_seq: seq } : undefined,
        });
      }
      await ok(s.base, 'POST', `/v1/workspaces/${WS}/entries`, { entries });
    }
    const entries = (await ok(s.base, 'GET', `/v1/workspaces/${WS}/entries?all=true&limit=100000`)).length;
    console.log(`# big workspace: ${sessions.length} sessions, ${turns} turns, ${entries} entries (${ENTRIES} added in ${((Date.now() - started) / 1000).toFixed(0)} s)`);
    const busiest = sessions.reduce((a, b) => (b.next_seq > a.next_seq ? b : a));
    const entry = (await ok(s.base, 'GET', `/v1/workspaces/${WS}/entries?limit=1`))[0].id;
    const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
    const page = await context.newPage();
    await page.goto(`${s.base}/ui`);
    await page.fill('#token', admin);
    await page.fill('#workspace', WS);
    await page.click('#signin button[type=submit]');
    await page.waitForSelector('body[data-ready]');
    const views = [
      ['sessions', 'sessions', '#/sessions'],
      ['transcript', 'sessions', `#/sessions/${busiest.id}?turn=${Math.floor(busiest.next_seq / 2)}`],
      ['memory', 'memory', '#/memory'],
      ['memory-entry', 'memory', `#/memory/${entry}`],
      ['why', 'why', `#/why?session=${busiest.id}&retrieval=lexical`],
      ['topics', 'topics', '#/topics'],
      ['plugins', 'plugins', '#/plugins'],
      ['compaction', 'compaction', `#/compaction/${busiest.id}`],
      ['health', 'health', '#/health'],
    ];
    const rows = [];
    for (const [name, view, hash] of views) {
      const runs = [];
      for (let i = 0; i < 3; i++) {
        await page.goto('about:blank');
        await page.goto(`${s.base}/ui${hash}`);
        await page.waitForSelector(`body[data-ready="${view}"]`);
        const paint = await page.evaluate(() => ({
          ready: window.cairnPaint.sincePageStart,
          fcp: performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? NaN,
        }));
        runs.push(paint);
      }
      await page.screenshot({ path: path.join(shots, `big-${name}.png`) });
      const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
      rows.push({ name, ready: median(runs.map((r) => r.ready)), fcp: median(runs.map((r) => r.fcp)) });
    }
    console.log('# first paint per view on the big workspace (median of 3 page loads, ms since the page started)');
    console.log('#   view                 shell painted   view drawn with its data');
    for (const r of rows) console.log(`#   ${r.name.padEnd(20)} ${r.fcp.toFixed(0).padStart(8)} ${r.ready.toFixed(0).padStart(12)}`);
    await context.close();
  } finally {
    await s.stop();
  }
}
