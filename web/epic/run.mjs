// Loads the Epic-frontend test page once and prints, as one JSON line,
// what the frontend reported. Usage: node run.mjs PAGE_URL [TIMEOUT_MS]
// Exit status 0 when webRtcConnected, videoInitialized and
// statsReceived.framesReceived > 0 were all seen.
import { launch, waitFor } from '../browsertest/chromium.mjs';

const [url, timeout = '30000'] = process.argv.slice(2);
// Chromium hides host candidates behind mDNS names by default; the
// streamer is on this host, so use plain addresses.
const { context, close } = await launch(['--disable-features=WebRtcHideLocalIpsWithMdns', '--autoplay-policy=no-user-gesture-required']);
let r = {};
try {
  const page = await context.newPage();
  const consoleLines = [];
  page.on('console', (m) => consoleLines.push(m.text()));
  page.on('pageerror', (e) => consoleLines.push('pageerror: ' + e.message));
  await page.goto(url);
  r = await waitFor(page, () => {
    const e = window.epic;
    if (!e) return { ok: false };
    const ok = !!e.events.webRtcConnected && !!e.events.videoInitialized && e.framesReceived > 0;
    return { ok, events: e.events, at: e.at, framesReceived: e.framesReceived, framesDecoded: e.framesDecoded,
      stats: e.stats, codec: e.codec, subscribeFailed: e.subscribeFailed, errors: e.errors };
  }, null, Number(timeout));
  r = r || { ok: false };
  r.console = consoleLines.slice(-15);
} finally {
  await close();
}
console.log(JSON.stringify(r));
process.exit(r.ok ? 0 : 1);
