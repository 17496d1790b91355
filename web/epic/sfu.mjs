// Opens Epic's frontend test page in N tabs against an SFU and drives the
// SFU checks of issue 14; prints one JSON line. Usage:
//   node sfu.mjs PAGE_URL TABS TIMEOUT_MS
// Each tab must play (framesReceived > 0) at the highest layer, tab 0 then
// picks Low and must decode a narrower frame while the others keep theirs,
// and each tab's input ("tab-<i>") must come back echoed to that tab.
import { launch, waitFor } from '../browsertest/chromium.mjs';

const [url, tabsArg = '3', timeoutArg = '60000'] = process.argv.slice(2);
const tabs = Number(tabsArg);
const timeout = Number(timeoutArg);
const { context, close } = await launch(['--disable-features=WebRtcHideLocalIpsWithMdns', '--autoplay-policy=no-user-gesture-required']);
const out = { ok: false, tabs: [], console: [] };
const state = () => {
  const e = window.epic;
  if (!e) return { ok: false };
  return { ok: e.framesReceived > 0 && e.frameWidth > 0, events: e.events, framesReceived: e.framesReceived,
    frameWidth: e.frameWidth, responses: e.responses, subscribeFailed: e.subscribeFailed, errors: e.errors };
};
try {
  const pages = [];
  for (let i = 0; i < tabs; i++) {
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') out.console.push(`tab${i}: ${m.text()}`); });
    page.on('pageerror', (e) => out.console.push(`tab${i} pageerror: ${e.message}`));
    await page.goto(url);
    pages.push(page);
  }
  // 1. Every tab plays.
  for (let i = 0; i < tabs; i++) {
    out.tabs[i] = { playing: await waitFor(pages[i], state, null, timeout) };
  }
  const widths = out.tabs.map((t) => (t.playing && t.playing.frameWidth) || 0);
  const high = Math.max(...widths);
  out.high = high;
  // 2. Tab 0 asks for Low: its decoded width drops; the others keep theirs.
  await pages[0].evaluate(() => window.setQuality('Low'));
  out.tabs[0].low = await waitFor(pages[0], (h) => {
    const e = window.epic;
    return { ok: e.frameWidth > 0 && e.frameWidth < h, frameWidth: e.frameWidth };
  }, high, timeout);
  for (let i = 1; i < tabs; i++) {
    // Fresh stats after tab 0 switched: the page refreshes them every second.
    await pages[i].waitForTimeout(2500);
    out.tabs[i].after = await pages[i].evaluate(() => ({ frameWidth: window.epic.frameWidth, framesReceived: window.epic.framesReceived }));
  }
  // 3. Input from each tab comes back to that tab.
  for (let i = 0; i < tabs; i++) {
    out.tabs[i].echo = await waitFor(pages[i], (text) => {
      const e = window.epic;
      const hit = e.responses.find((r) => r.includes(text));
      if (hit) return { ok: true, response: hit };
      window.sendInput(text); // again until it arrives: channels open asynchronously
      return { ok: false, responses: e.responses };
    }, `tab-${i}`, timeout);
  }
  out.ok = out.tabs.every((t) => t.playing && t.playing.ok && t.echo && t.echo.ok) && out.tabs[0].low && out.tabs[0].low.ok;
} finally {
  await close();
}
console.log(JSON.stringify(out));
process.exit(0);
