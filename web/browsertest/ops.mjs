// Opens the operator page, waits until every chart has drawn data, and
// saves a screenshot. Usage: node ops.mjs ADMIN_BASE_URL SCREENSHOT_PATH
import { launch, waitFor } from './chromium.mjs';

const [base, shot] = process.argv.slice(2);
const { context, close } = await launch();
let r;
try {
  const page = await context.newPage();
  await page.setViewportSize({ width: 1400, height: 1100 });
  await page.goto(`${base}/ops/?interval=500`);
  r = await waitFor(page, () => {
    const s = window.opsState;
    const charts = Object.keys(s.charts).length;
    const withData = Object.values(s.charts).filter((c) => c.points > 1).length;
    return { ok: s.polls >= 4 && charts >= 9 && withData >= 3, polls: s.polls, charts, withData, detail: s.charts, errors: s.errors };
  }, null, 30000);
  await page.screenshot({ path: shot, fullPage: true });
} finally {
  await close();
}
console.log(JSON.stringify(r));
