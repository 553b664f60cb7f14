// Opens one trace in Arize Phoenix's web UI in headless Chromium (Debian's, through
// playwright-core) and prints one JSON line of what a person would have seen.
// tests/all/otel.rs starts Phoenix, sends it a capsule's spans, runs this, and checks
// the line.
//
//   node phoenix.mjs trace URL SCREENSHOT SELECT SHOWN NAME...
//
// URL is the trace's page; the script waits until every NAME (a span name) shows, then
// clicks the span named SELECT and waits until its attributes show beside the tree
// (the text SHOWN, one of their values), and saves a screenshot to SCREENSHOT.
//
// Every wait is bounded; a failure prints {"error": ..., "stack": ..., "seen": ...}.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [scenario, url, screenshot, select, shown, ...names] = process.argv.slice(2);
const WAIT = 60000;
const seen = { console: [] };

function print(value) {
  process.stdout.write(JSON.stringify(value) + '\n');
}

// A whole run is bounded too, below the harness's limit.
const timer = setTimeout(() => {
  print({ error: 'the scenario did not finish within 100 s', seen });
  process.exit(1);
}, 100000);

async function trace() {
  const profile = mkdtempSync(join(tmpdir(), 'mur-phoenix-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.MUR_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: 1440, height: 900 },
    colorScheme: 'dark',
    timeout: WAIT,
  });
  context.setDefaultTimeout(WAIT);
  try {
    const page = context.pages()[0] || (await context.newPage());
    page.on('pageerror', (error) => seen.console.push('pageerror: ' + error.message));
    const response = await page.goto(url);
    seen.status = response.status();
    seen.names = [];
    for (const name of names) {
      await page.getByText(name, { exact: true }).first().waitFor();
      seen.names.push(name);
    }
    await page.getByText(select, { exact: true }).first().click();
    // The selected span's attributes, as its detail pane's Attributes tab shows them.
    const tab = page.getByRole('tab', { name: 'Attributes', exact: true });
    if (await tab.count()) await tab.first().click();
    await page.getByText(shown).first().waitFor();
    seen.selected = select;
    // Fonts and the tree's layout settle.
    await page.waitForTimeout(1000);
    seen.text = (await page.locator('body').innerText()).slice(0, 4000);
    await page.screenshot({ path: screenshot });
    seen.screenshot = screenshot;
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

try {
  if (scenario === 'trace') await trace();
  else throw new Error('unknown scenario ' + scenario);
  print(seen);
  clearTimeout(timer);
} catch (error) {
  print({ error: String(error && error.message), stack: String(error && error.stack), seen });
  clearTimeout(timer);
  process.exitCode = 1;
}
