// Drives the operator page's controls in headless Chromium, as an operator
// would. On a dev edge: the page mints its own operator token, draws its
// charts (time axes, whole numbers for counts, distinguishable series),
// lists the live session SESSION, arms, freezes, unfreezes and halves the
// waiting room with its buttons, arms one region, and revokes SESSION. On a
// prod edge: the page asks for a token, takes PROD_TOKEN typed into its
// form, and arms the room.
// Usage: node opscontrols.mjs DEV_ADMIN_URL SESSION SCREENSHOT PROD_ADMIN_URL PROD_TOKEN
import { launch, waitFor } from './chromium.mjs';

const [dev, session, shot, prod, prodToken] = process.argv.slice(2);
const { context, close } = await launch();
const out = { steps: {} };
const step = async (page, name, fn, timeout = 20000) => {
  const r = await waitFor(page, fn, session, timeout);
  out.steps[name] = r;
  if (!r || !r.ok) throw new Error(`${name}: ${JSON.stringify(r)}`);
  return r;
};
const click = (page, sel) => page.click(sel, { timeout: 10000 });

try {
  const page = await context.newPage();
  await page.setViewportSize({ width: 1500, height: 1400 });
  await page.goto(`${dev}/ops/?interval=500`);
  await step(page, 'loaded', (sid) => {
    const s = window.opsState;
    const withData = Object.values(s.charts).filter((c) => c.points > 1).length;
    const listed = !!s.sessions && s.sessions.sessions.some((x) => x.session_id === sid);
    return { ok: s.token === 'dev' && s.roomPolls > 0 && listed && s.polls >= 4 && withData >= 3, token: s.token, roomPolls: s.roomPolls, listed, polls: s.polls, withData, errors: s.errors };
  }, 30000);

  // Charts: a clock on every time axis, whole numbers on count charts,
  // series of one chart told apart by dash and marker, not colour alone.
  await step(page, 'charts', () => {
    const s = window.opsState;
    const bad = [];
    for (const [id, c] of Object.entries(s.charts)) {
      if (c.xTicks.length !== 5 || !c.xTicks.every((t) => /^\d\d:\d\d:\d\d$/.test(t))) bad.push(id + ' time axis ' + c.xTicks);
      if (c.int && !c.yTicks.every((t) => /^\d+$/.test(t))) bad.push(id + ' y ticks ' + c.yTicks);
      if (c.int && !c.legend.every((l) => /: \d+$/.test(l))) bad.push(id + ' legend ' + c.legend);
      const seen = new Set(c.styles.map((x) => x.dash + '|' + x.marker));
      if (seen.size !== c.styles.length) bad.push(id + ' styles repeat');
    }
    const multi = Object.entries(s.charts).filter(([, c]) => c.series >= 2).map(([id]) => id);
    const sessions = s.charts.sessions || { legend: [] };
    return { ok: !bad.length && multi.length > 0 && sessions.legend.some((l) => /^websocket: [1-9]\d*$/.test(l)), bad, multi, sessions: sessions.legend };
  });

  // The waiting room's controls.
  await click(page, 'button[data-op="arm"][data-value="true"]');
  await step(page, 'armed', () => ({ ok: !!window.opsState.room?.armedGlobal && !!document.querySelector('[data-flag="armed (global)"][data-on="true"]'), room: window.opsState.room }));
  await click(page, 'button[data-op="freeze"][data-value="true"]');
  await step(page, 'frozen', () => ({ ok: window.opsState.room?.frozen === true, room: window.opsState.room }));
  await click(page, 'button[data-op="freeze"][data-value="false"]');
  await step(page, 'unfrozen', () => ({ ok: window.opsState.room?.frozen === false, room: window.opsState.room }));
  await page.fill('#reason', 'drill from the operator page');
  await click(page, 'button[data-op="halve"][data-value="true"]');
  await step(page, 'halved', () => ({ ok: window.opsState.room?.halved === true && !!document.querySelector('[data-flag="halved"][data-on="true"]'), room: window.opsState.room }));
  const region = await page.evaluate(() => [...document.querySelectorAll('#region option')].map((o) => o.value).find((v) => v));
  await page.selectOption('#region', region);
  await click(page, 'button[data-op="arm"][data-value="true"]');
  await step(page, 'region armed', () => ({ ok: (window.opsState.room?.armedRegions || []).length > 0, room: window.opsState.room }));
  out.region = region;
  await step(page, 'rates shown', () => {
    const rows = [...document.querySelectorAll('#rates tr[data-region]')];
    return { ok: rows.length > 0 && rows.every((r) => /^\d+$/.test(r.children[1].textContent)), rows: rows.map((r) => r.textContent) };
  });

  // Revoke the live session from its row.
  await click(page, `button[data-revoke="${session}"]`);
  await step(page, 'revoked', (sid) => {
    const s = window.opsState;
    const gone = !!s.sessions && !s.sessions.sessions.some((x) => x.session_id === sid);
    return { ok: gone && s.actions.some((a) => a.op === 'revoke' && a.status === 200), actions: s.actions };
  });
  await page.screenshot({ path: shot, fullPage: true });

  // Prod: no dev token; the page asks, the operator pastes one.
  const p2 = await context.newPage();
  await p2.goto(`${prod}/ops/?interval=500`);
  await step(p2, 'prod asks for a token', () => ({
    ok: window.opsState.token === 'needed' && getComputedStyle(document.getElementById('tokenform')).display !== 'none' && window.opsState.room === null,
    token: window.opsState.token }));
  await p2.fill('#token', prodToken);
  await click(p2, '#usetoken');
  await step(p2, 'prod token taken', () => ({ ok: window.opsState.token === 'pasted' && window.opsState.roomPolls > 0 && !!window.opsState.sessions, s: window.opsState.token }));
  await click(p2, 'button[data-op="arm"][data-value="true"]');
  await step(p2, 'prod armed', () => ({ ok: !!window.opsState.room?.armedGlobal, room: window.opsState.room }));
  out.ok = true;
} catch (e) {
  out.ok = false;
  out.error = String(e);
} finally {
  await close();
}
console.log(JSON.stringify(out));
