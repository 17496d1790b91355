// The waiting room's flow through the demo page: with the room armed the
// demo's hello is refused for a ticket, the page goes to /queue/, is
// admitted, comes back with the admission ticket and connects. Prints, as
// one JSON line, the pages visited and the demo's final state.
// Usage: node roomflow.mjs BASE_URL
import { launch, waitFor } from './chromium.mjs';

const [base] = process.argv.slice(2);
const { context, close } = await launch();
let r = {};
try {
  const page = await context.newPage();
  const visited = [];
  page.on('framenavigated', (f) => { if (f === page.mainFrame()) visited.push(new URL(f.url()).pathname); });
  await page.goto(`${base}/?transport=websocket&auto=1&interval=300`);
  r = await waitFor(page, () => {
    const e = window.egbe;
    if (!e) return { ok: false, at: location.pathname, queue: window.queueState && window.queueState.shown };
    return { ok: e.state === 'connected' && !!e.admissionTicketUsed, at: location.pathname, state: e.state,
      sessionId: e.sessionId, ticketUsed: !!e.admissionTicketUsed, errors: e.errors, log: e.log.slice(-8) };
  }, null, 30000);
  r.visited = visited;
} finally {
  await close();
}
console.log(JSON.stringify(r));
