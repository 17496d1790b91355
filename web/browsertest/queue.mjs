// Opens the waiting-room page and reports what it shows once the room has
// answered. Usage: node queue.mjs BASE_URL
import { launch, waitFor } from './chromium.mjs';

const [base] = process.argv.slice(2);
const { context, close } = await launch();
let r;
try {
  const page = await context.newPage();
  await page.goto(`${base}/queue/?region=us-east&interval=300`);
  r = await waitFor(page, () => {
    const s = window.queueState;
    const fallback = document.getElementById('fallback');
    return { ok: s.polls >= 1 && !!s.status && !!fallback.href, polls: s.polls, status: s.status, errors: s.errors,
      title: document.getElementById('title').textContent, fallbackHref: fallback.getAttribute('href') };
  }, null, 20000);
} finally {
  await close();
}
console.log(JSON.stringify(r));
