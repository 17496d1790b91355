// Shared headless-Chromium launcher for the browser tests: Debian's
// chromium driven by playwright-core, with the flags a root, offline
// sandbox needs, and a fresh profile every run.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export async function launch(extraArgs = []) {
  const profile = mkdtempSync(join(tmpdir(), 'egbe-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
      ...extraArgs,
    ],
  });
  return {
    context,
    async close() {
      await context.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// waitFor polls fn in the page until it returns a truthy value or the
// deadline passes; the last value is returned either way.
export async function waitFor(page, fn, arg, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await page.evaluate(fn, arg).catch((e) => ({ evalError: String(e) }));
    if (last && last.ok) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  return last;
}
