// Opens the edge's player page (Epic's stock player UI) and waits until it
// plays: WebRTC connected and video frames received. Prints, as one JSON
// line, what the page reported (window.egbePlayer) and the page's console.
// Usage: node pxplayer.mjs PAGE_URL [TIMEOUT_MS]
// Exit status 0 when it played.
import { launch, waitFor } from './chromium.mjs';

const [url, timeout = '40000'] = process.argv.slice(2);
// Chromium hides host candidates behind mDNS names by default; the
// streamers are on this host, so use plain addresses. No click is needed
// to play (a newcomer's page autoplays muted; headless has no user).
const { context, close } = await launch(['--disable-features=WebRtcHideLocalIpsWithMdns', '--autoplay-policy=no-user-gesture-required']);
let r = {};
try {
  const page = await context.newPage();
  const consoleLines = [];
  page.on('console', (m) => consoleLines.push(m.text()));
  page.on('pageerror', (e) => consoleLines.push('pageerror: ' + e.message));
  await page.goto(url);
  r = await waitFor(page, () => {
    const p = window.egbePlayer;
    if (!p) return { ok: false };
    const ok = !!p.events.webRtcConnected && p.framesReceived > 0;
    const video = document.querySelector('video');
    return { ok, mode: p.mode, match: p.match && { streamer_id: p.match.streamer_id, session_id: p.match.session_id },
      streamers: p.streamers, picked: p.picked, events: p.events, framesReceived: p.framesReceived,
      localCandidateType: p.localCandidateType, iceServersAdded: p.iceServersAdded, errors: p.errors,
      videoWidth: video ? video.videoWidth : 0, hasUI: !!document.getElementById('playerUI') };
  }, null, Number(timeout));
  r = r || { ok: false };
  r.console = consoleLines.slice(-20);
} finally {
  await close();
}
console.log(JSON.stringify(r));
