// Opens the demo page behind a test load balancer, waits for a live
// session, asks the balancer to kill the edge holding it (POST
// BASE/__test/kill-edge), and reports, as one JSON line on stdout, whether
// the page resumed the same session on another edge by itself.
// Usage: node resume.mjs BASE_URL
import { launch, waitFor } from './chromium.mjs';

const [base] = process.argv.slice(2);
const { context, close } = await launch();
let result;
try {
  const page = await context.newPage();
  const consoleLines = [];
  page.on('console', (m) => consoleLines.push(m.text()));
  page.on('pageerror', (e) => consoleLines.push('pageerror: ' + e.message));
  await page.goto(`${base}/?transport=websocket&auto=1`);
  const before = await waitFor(page, () => {
    const e = window.egbe;
    const updates = (e.counts.snapshot || 0) + (e.counts.delta || 0);
    return { ok: e.state === 'connected' && updates >= 3, state: e.state, sessionId: e.sessionId, shardId: e.shardId, updates };
  }, null, 20000);
  if (!before?.ok) {
    result = { phase: 'connect', before, console: consoleLines.slice(-10) };
  } else {
    const r = await fetch(`${base}/__test/kill-edge`, { method: 'POST' });
    if (!r.ok) throw new Error('kill-edge: HTTP ' + r.status);
    const after = await waitFor(page, (n) => {
      const e = window.egbe;
      const updates = (e.counts.snapshot || 0) + (e.counts.delta || 0);
      return { ok: e.state === 'connected' && e.resumes >= 1 && updates >= n + 3, state: e.state, sessionId: e.sessionId,
        shardId: e.shardId, resumes: e.resumes, updates, errors: e.errors, log: e.log.slice(-8) };
    }, before.updates, 30000);
    result = { phase: 'resume', before, after, console: consoleLines.slice(-10) };
  }
} finally {
  await close();
}
console.log(JSON.stringify(result));
