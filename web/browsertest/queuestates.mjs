// The waiting-room page in each state the room can answer. Usage:
//   node queuestates.mjs BASE_URL paused   the room is frozen: the page says paused, quotes no wait,
//                                          keeps polling; then its place is left elsewhere: it
//                                          shows the lost place and stops polling
//   node queuestates.mjs BASE_URL open     the room is not armed: no line, straight in
// Prints one JSON line.
import { launch, waitFor } from './chromium.mjs';

const [base, mode] = process.argv.slice(2);
const { context, close } = await launch();
const out = {};
const snap = () => ({
  shown: window.queueState.shown, polls: window.queueState.polls, stopped: window.queueState.stopped,
  title: document.getElementById('title').textContent, wait: document.getElementById('wait').textContent,
  held: document.getElementById('held').textContent, admittedVisible: !document.getElementById('admitted').hidden,
  rejoinVisible: !document.getElementById('rejoin').hidden, errors: window.queueState.errors,
});
try {
  const page = await context.newPage();
  await page.goto(`${base}/queue/?region=gb&interval=200`);
  if (mode === 'paused') {
    out.paused = await waitFor(page, () => {
      const s = window.queueState;
      return { ok: s.shown === 'paused' && s.polls >= 3, ...({ shown: s.shown, polls: s.polls }) };
    }, null, 20000);
    out.pausedView = await page.evaluate(snap);
    // Leave the line from elsewhere (another tab): this page's place is gone.
    await page.evaluate(async () => {
      const ticket = localStorage.getItem('egbe.queueTicket');
      await fetch('/api/v1/queue/leave', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ticket }) });
    });
    out.gone = await waitFor(page, () => ({ ok: window.queueState.shown === 'gone' }), null, 20000);
    const polls = await page.evaluate(() => window.queueState.polls);
    await new Promise((r) => setTimeout(r, 1500)); // a window in which a live page would poll ~7 times
    out.goneView = await page.evaluate(snap);
    out.pollsAfterGone = out.goneView.polls - polls;
  } else {
    out.open = await waitFor(page, () => ({ ok: window.queueState.shown === 'open' }), null, 20000);
    out.openView = await page.evaluate(snap);
  }
} finally {
  await close();
}
console.log(JSON.stringify(out));
