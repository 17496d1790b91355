// Drives headless Chromium (fake microphone) through voice.html: join
// voice, then poll getStats until inbound audio RTP packets arrive.
// Usage: node chromium.cjs <page url> <token> <session id> <slots>
// Prints one JSON line; exit 0 when packetsReceived > 0.
const { chromium } = require('playwright-core');
const fs = require('fs');
const os = require('os');
const path = require('path');

(async () => {
  const [url, token, session, slots] = process.argv.slice(2);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'egbe-voice-'));
  let ctx;
  const out = { packets: 0 };
  try {
    ctx = await chromium.launchPersistentContext(dir, {
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
        '--disable-component-update', '--disable-sync', '--no-first-run',
        '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream'],
    });
    const page = ctx.pages()[0] || await ctx.newPage();
    page.on('console', (m) => process.stderr.write('page: ' + m.text() + '\n'));
    await page.goto(url);
    out.peer = await page.evaluate(([t, s, k]) => joinVoice(t, s, k), [token, session, Number(slots)]);
    const deadline = Date.now() + 15000;
    while (Date.now() < deadline) {
      Object.assign(out, await page.evaluate(() => inboundAudio()));
      if (out.packets > 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (e) {
    out.error = String(e && e.stack || e);
  } finally {
    if (ctx) await ctx.close().catch(() => {});
    fs.rmSync(dir, { recursive: true, force: true });
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(out.packets > 0 ? 0 : 1);
})();
