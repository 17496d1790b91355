// Two tabs of the demo page join voice in one squad with Chromium's fake
// microphone; prints whether each tab receives the other's audio (inbound
// RTP packets from getStats). Usage: node voice.mjs BASE_A [BASE_B]: tab a
// opens BASE_A, tab b BASE_B (default BASE_A); on two edges of a fleet one
// tab is told the room lives on the other edge and moves there.
import { launch, waitFor } from './chromium.mjs';

const [baseA, baseB = baseA] = process.argv.slice(2);
const { context, close } = await launch(['--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream', '--autoplay-policy=no-user-gesture-required']);
const out = {};
try {
  const pages = [];
  for (const [name, base] of [['a', baseA], ['b', baseB]]) {
    const page = await context.newPage();
    const lines = [];
    page.on('console', (m) => lines.push(m.text()));
    page.on('pageerror', (e) => lines.push('pageerror: ' + e.message));
    await page.goto(`${base}/?transport=websocket&auto=1&voice=1&squad=demo-squad`);
    pages.push({ name, page, lines });
  }
  for (const { name, page, lines } of pages) {
    const r = await waitFor(page, () => {
      const v = window.egbe.voice;
      return { ok: v.state === 'joined' && v.inboundPackets > 0, state: v.state, inboundPackets: v.inboundPackets,
        error: v.error, slots: v.slots, session: window.egbe.sessionId, apiBase: window.egbe.apiBase,
        resumes: window.egbe.resumes, log: window.egbe.log.slice(-5) };
    }, null, 30000);
    r.console = lines.slice(-10);
    out[name] = r;
  }
} finally {
  await close();
}
console.log(JSON.stringify(out));
