// Two tabs of the demo page forced to relay (forceturn=1: relay
// candidates only, with the TURN credentials of the negotiate answer):
// each opens the WebRTC transport and joins voice in one squad with
// Chromium's fake microphone. Prints, per tab, the session, the voice
// audio received, the type of the selected local candidate of the data
// channel and voice peer connections (getStats), and the voice join's
// ice_servers. Usage: node relay.mjs BASE_URL
import { launch, waitFor } from './chromium.mjs';

const [base] = process.argv.slice(2);
const { context, close } = await launch(['--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream', '--autoplay-policy=no-user-gesture-required']);
const out = {};
try {
  const pages = [];
  for (const name of ['a', 'b']) {
    const page = await context.newPage();
    const lines = [];
    page.on('console', (m) => lines.push(m.text()));
    page.on('pageerror', (e) => lines.push('pageerror: ' + e.message));
    await page.goto(`${base}/?transport=webrtc&forceturn=1&auto=1&voice=1&squad=relay-squad`);
    pages.push({ name, page, lines });
  }
  for (const { name, page, lines } of pages) {
    const r = await waitFor(page, async () => {
      const e = window.egbe;
      const v = e.voice;
      const data = await e.selectedCandidateType(e.rtc);
      const voice = await e.selectedCandidateType(v.pc);
      const ok = e.state === 'connected' && e.transport === 'webrtc' && (e.counts.pong || 0) >= 2 &&
        v.state === 'joined' && v.inboundPackets > 0 && data !== '' && voice !== '';
      return { ok, state: e.state, transport: e.transport, forceTurn: e.forceTurn, sessionId: e.sessionId,
        pongs: e.counts.pong || 0, voiceState: v.state, inboundPackets: v.inboundPackets, voiceError: v.error,
        dataCandidate: data, voiceCandidate: voice, negotiated: e.iceServers.length, voiceIceServers: v.iceServers || null,
        errors: e.errors, log: e.log.slice(-6) };
    }, null, 40000);
    r.console = lines.slice(-10);
    out[name] = r;
  }
} finally {
  await close();
}
console.log(JSON.stringify(out));
