// Opens the demo page once per transport and reports, as one JSON line on
// stdout, what each session saw. Usage: node demo.mjs BASE_URL transport...
import { launch, waitFor } from './chromium.mjs';

const [base, ...transports] = process.argv.slice(2);
const { context, close } = await launch();
const results = {};
try {
  for (const transport of transports) {
    const page = await context.newPage();
    const consoleLines = [];
    page.on('console', (m) => consoleLines.push(m.text()));
    page.on('pageerror', (e) => consoleLines.push('pageerror: ' + e.message));
    await page.goto(`${base}/?transport=${transport}&auto=1`);
    const r = await waitFor(page, () => {
      const e = window.egbe;
      const c = e.counts;
      const ok = e.state === 'connected' && (c.pong || 0) >= 2 && ((c.snapshot || 0) + (c.delta || 0)) >= 3 && e.inView > 0;
      return { ok, state: e.state, transport: e.transport, sessionId: e.sessionId, shardId: e.shardId,
        rttMs: e.rttMs, inView: e.inView, counts: c, errors: e.errors, log: e.log.slice(-5) };
    }, null, 20000);
    r.console = consoleLines.slice(-10);
    results[transport] = r;
    await page.close();
  }
} finally {
  await close();
}
console.log(JSON.stringify(results));
