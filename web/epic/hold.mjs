// Plays the Epic-frontend test page and holds it open across a jump of
// the edge's clock. Usage: node hold.mjs PAGE_URL
// Prints {"playing":...} once frames arrive, then waits for a line on
// stdin (the test moved the edge's clock), watches the stream for
// WATCH_MS more and prints the final JSON: ok when frames kept arriving and
// the frontend saw no disconnect.
import { createInterface } from 'node:readline';
import { launch, waitFor } from '../browsertest/chromium.mjs';

const WATCH_MS = 4000;
const [url] = process.argv.slice(2);
const { context, close } = await launch(['--disable-features=WebRtcHideLocalIpsWithMdns', '--autoplay-policy=no-user-gesture-required']);
let r = { ok: false };
const rl = createInterface({ input: process.stdin });
const read = () => new Promise((resolve) => rl.once('line', resolve));
try {
  const page = await context.newPage();
  const consoleLines = [];
  page.on('console', (m) => consoleLines.push(m.text()));
  const status = () => {
    const e = window.epic || { events: {} };
    return { events: e.events, framesReceived: e.framesReceived, framesDecoded: e.framesDecoded, closes: e.closes || [] };
  };
  await page.goto(url);
  const playing = await waitFor(page, () => {
    const e = window.epic;
    return { ok: !!e && !!e.events.webRtcConnected && e.framesReceived > 0, frames: e && e.framesReceived };
  }, null, 30000);
  console.log(JSON.stringify({ playing }));
  if (playing.ok) {
    await read();
    const before = await page.evaluate(status);
    // The broker's idle clock ticks every second: an edge that would cut
    // the stream at 150 s has done so within this window.
    await new Promise((res) => setTimeout(res, WATCH_MS));
    const after = await page.evaluate(status);
    r = {
      ok: after.framesReceived > before.framesReceived && !after.events.webRtcDisconnected && after.closes.length === 0,
      before, after,
    };
  }
  r.console = consoleLines.slice(-15);
} finally {
  await close();
}
console.log(JSON.stringify(r));
rl.close();
process.exit(r.ok ? 0 : 1);
