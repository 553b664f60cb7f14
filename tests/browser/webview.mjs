// Drives mur's web view in headless Chromium (Debian's, through playwright-core) and
// prints one JSON line of what a person would have seen. tests/all/webview.rs starts the
// capsule or server, runs this, and checks the line.
//
//   node webview.mjs capsule URL SCREENSHOT   a mur run capsule's page
//   node webview.mjs gap URL                  a capsule whose buffer lost frames
//   node webview.mjs busy URL                 a capsule that takes one task at a time
//   node webview.mjs fleet URL [SCREENSHOT]   mur serve's root; MUR_ADMIN_TOKEN and
//                                             MUR_CAPSULE_TOKEN in the environment
//   node webview.mjs door URL                 a mur run capsule behind its token;
//                                             MUR_CAPSULE_TOKEN in the environment
//   node webview.mjs formation URL            a formation's lead, which calls a worker
//
// Every wait is bounded; a failure prints {"error": ..., "stack": ..., "seen": ...}.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [scenario, url, screenshot] = process.argv.slice(2);
const WAIT = 20000;
const seen = { console: [] };

function print(value) {
  process.stdout.write(JSON.stringify(value) + '\n');
}

async function launch() {
  const profile = mkdtempSync(join(tmpdir(), 'mur-web-view-'));
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
    viewport: { width: 900, height: 1000 },
    timeout: WAIT,
  });
  context.setDefaultTimeout(WAIT);
  return { context, profile };
}

function watchConsole(page) {
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warning') {
      seen.console.push(message.type() + ': ' + message.text());
    }
  });
  page.on('pageerror', (error) => seen.console.push('pageerror: ' + error.message));
}

// What the page shows of each task, newest first.
async function tasks(page) {
  return page.$$eval('#tasks > li.task', (items) =>
    items.map((item) => ({
      id: item.dataset.task,
      state: item.querySelector('.badge').textContent,
      entries: Array.from(item.querySelectorAll('.timeline > li'), (li) => li.className),
      firstEntry: item.querySelector('.timeline > li .meta')?.textContent ?? null,
      replies: Array.from(item.querySelectorAll('.timeline > li.text .reply'), (p) => p.textContent),
      tools: Array.from(item.querySelectorAll('.timeline > li.tool'), (li) => ({
        name: li.querySelector('summary strong').textContent,
        content: li.querySelector('pre').textContent,
      })),
      asks: Array.from(item.querySelectorAll('.timeline > li.ask .reply'), (p) => p.textContent),
      answerBoxes: item.querySelectorAll('.timeline > li.ask form').length,
      answered: Array.from(item.querySelectorAll('.timeline > li.ask p.meta'), (p) => p.textContent),
      cancelVisible: !item.querySelector('header button').hidden,
    })),
  );
}

const live = (page) => page.waitForSelector('#conn[data-state="live"]');
const task = (page, n) => page.locator('#tasks > li.task').nth(n);

async function capsule() {
  const { context, profile } = await launch();
  try {
    const page = context.pages()[0] || (await context.newPage());
    watchConsole(page);
    const response = await page.goto(url);
    seen.csp = response.headers()['content-security-policy'];
    await live(page);
    seen.title = await page.textContent('#title');

    // A task sent from the page asks for input; the answer resumes it.
    await page.fill('#send-input', 'Summarise a file');
    await page.click('#send-button');
    const first = task(page, 0);
    await first.locator('li.ask form textarea').waitFor();
    seen.askedState = await first.locator('.badge').textContent();
    await first.locator('li.ask form textarea').fill('README.md');
    await first.locator('li.ask form button').click();
    await first.locator('.badge', { hasText: 'completed' }).waitFor();
    await first.locator('li.ask form').waitFor({ state: 'detached' });
    seen.afterAnswer = await tasks(page);

    // A second task waits for input. The screenshot is taken while it waits, the
    // first task's text and artifact on screen below it. A reload replays the wait
    // without the frames that named the task's context, and the answer still goes to
    // the task.
    await page.fill('#send-input', 'Then wait');
    await page.click('#send-button');
    await page.locator('#tasks > li.task').nth(1).waitFor();
    await task(page, 0).locator('li.ask form textarea').waitFor();
    await task(page, 0).locator('li.ask form textarea').fill('(typing an answer…)');
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
    await page.reload();
    await live(page);
    const second = task(page, 0);
    await second.locator('li.ask form textarea').waitFor();
    await second.locator('li.ask form textarea').fill('Nothing, thanks');
    await second.locator('li.ask form button').click();
    await second.locator('.badge', { hasText: 'completed' }).waitFor();
    seen.afterReloadAnswer = await tasks(page);

    // A third task waits for input and is canceled from the page.
    await page.fill('#send-input', 'Then be canceled');
    await page.click('#send-button');
    await page.locator('#tasks > li.task').nth(2).waitFor();
    const third = task(page, 0);
    await third.locator('li.ask form textarea').waitFor();
    await third.locator('header button', { hasText: 'Cancel' }).click();
    await third.locator('.badge', { hasText: 'canceled' }).waitFor();
    seen.afterCancel = await tasks(page);

    // A dropped connection reconnects and replays without showing anything twice.
    const before = await page.evaluate(() => window.murView.connections());
    await page.evaluate(() => window.murView.drop());
    await page.waitForSelector('#conn[data-state="down"]');
    seen.lost = await page.textContent('#conn');
    await page.waitForFunction((n) => window.murView.connections() > n, before);
    await live(page);
    seen.reconnected = (await page.evaluate(() => window.murView.connections())) - before;
    await page.waitForTimeout(500);
    seen.afterDrop = await tasks(page);

    // A reload replays the capsule's buffer into a fresh page.
    await page.reload();
    await live(page);
    await page.locator('#tasks > li.task').nth(2).waitFor();
    await task(page, 2).locator('.badge', { hasText: 'completed' }).waitFor();
    await task(page, 1).locator('.badge', { hasText: 'completed' }).waitFor();
    await task(page, 0).locator('.badge', { hasText: 'canceled' }).waitFor();
    // Each task's start comes from the A2A door after the replay.
    for (const n of [0, 1, 2]) {
      await task(page, n).locator('.timeline > li:first-child.status').waitFor();
    }
    await page.waitForTimeout(300);
    seen.afterReload = await tasks(page);
    seen.dark = await darkBackground(context);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

// The page's background under a dark colour scheme: the view follows the system.
async function darkBackground(context) {
  const page = await context.newPage();
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.goto(url);
  const colour = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.close();
  return colour;
}

// A page opened after the capsule's buffer evicted a task's first frames.
async function gap() {
  const { context, profile } = await launch();
  try {
    const page = context.pages()[0] || (await context.newPage());
    watchConsole(page);
    await page.goto(url);
    await live(page);
    await page.locator('#tasks > li.task .badge', { hasText: 'completed' }).waitFor();
    seen.notice = (await page.isVisible('#notice')) ? await page.textContent('#notice') : null;
    seen.tasks = await tasks(page);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

// A capsule that takes one task at a time: a second task sent while the first waits
// is refused, and the page says so beside the box.
async function busy() {
  const { context, profile } = await launch();
  try {
    const page = context.pages()[0] || (await context.newPage());
    watchConsole(page);
    await page.goto(url);
    await live(page);
    await page.fill('#send-input', 'First');
    await page.click('#send-button');
    await task(page, 0).locator('li.ask form textarea').waitFor();
    await page.fill('#send-input', 'Second');
    await page.click('#send-button');
    await page.waitForFunction(() => document.querySelector('#send-note').textContent.startsWith('not sent'));
    seen.note = await page.textContent('#send-note');
    seen.kept = await page.inputValue('#send-input');
    seen.tasks = await tasks(page);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

async function fleet() {
  const { context, profile } = await launch();
  try {
    const page = context.pages()[0] || (await context.newPage());
    watchConsole(page);
    await page.goto(url);
    await page.waitForSelector('#token-box:not([hidden])');
    seen.askedFor = await page.textContent('#token-label');
    seen.listedBeforeToken = await page.$$eval('#capsules li', (items) => items.length);

    await page.fill('#token-input', 'not-the-token');
    await page.click('#token-form button');
    await page.waitForSelector('#token-box:not([hidden])');
    await page.waitForFunction(() => document.querySelector('#token-hint').textContent.startsWith('That token was refused'));
    seen.listedWithWrongToken = await page.$$eval('#capsules li', (items) => items.length);

    await page.fill('#token-input', process.env.MUR_ADMIN_TOKEN);
    await page.click('#token-form button');
    await page.waitForSelector('#capsules li a');
    seen.links = await page.$$eval('#capsules li a', (links) =>
      links.map((a) => ({ text: a.textContent, href: a.getAttribute('href') })),
    );

    // The token is kept for the tab: a reload lists again without asking.
    await page.reload();
    await page.waitForSelector('#capsules li a');
    seen.askedAfterReload = await page.isVisible('#token-box');
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });

    // The capsule's page asks for the capsule's own token.
    await page.click('#capsules li a');
    await page.waitForSelector('#token-box:not([hidden])');
    seen.capsuleAskedFor = await page.textContent('#token-label');
    seen.capsuleConnBeforeToken = await page.getAttribute('#conn', 'data-state');
    await page.fill('#token-input', process.env.MUR_CAPSULE_TOKEN);
    await page.click('#token-form button');
    await live(page);
    seen.capsuleTitle = await page.textContent('#title');
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

// A mur run capsule declaring network.authentication: its page asks for the token mur
// token prints, refuses a wrong one, goes live with the right one and sends with it.
async function door() {
  const { context, profile } = await launch();
  try {
    const page = context.pages()[0] || (await context.newPage());
    watchConsole(page);
    await page.goto(url);
    await page.waitForSelector('#token-box:not([hidden])');
    seen.askedFor = await page.textContent('#token-label');
    seen.hint = await page.textContent('#token-hint');
    seen.connBeforeToken = await page.getAttribute('#conn', 'data-state');

    await page.fill('#token-input', 'not-the-token');
    await page.click('#token-form button');
    await page.waitForFunction(() => document.querySelector('#token-hint').textContent.startsWith('That token was refused'));
    await page.waitForSelector('#token-box:not([hidden])');

    await page.fill('#token-input', process.env.MUR_CAPSULE_TOKEN);
    await page.click('#token-form button');
    await live(page);
    seen.title = await page.textContent('#title');
    await page.fill('#send-input', 'Hello through the door');
    await page.click('#send-button');
    await task(page, 0).locator('.badge', { hasText: 'completed' }).waitFor();
    seen.tasks = await tasks(page);

    // The token is kept for the tab: a reload goes live without asking.
    await page.reload();
    await live(page);
    seen.askedAfterReload = await page.isVisible('#token-box');
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

// A task sent to a formation's lead: its wait on the worker links to the worker's page.
async function formation() {
  const { context, profile } = await launch();
  try {
    const page = context.pages()[0] || (await context.newPage());
    watchConsole(page);
    await page.goto(url);
    await live(page);
    await page.fill('#send-input', 'Ask the worker');
    await page.click('#send-button');
    const lead = task(page, 0);
    const link = lead.locator('li.status a.peer');
    await link.waitFor();
    seen.link = { text: await link.textContent(), href: await link.getAttribute('href'), rel: await link.getAttribute('rel') };
    await lead.locator('.badge', { hasText: 'completed' }).waitFor();
    seen.state = await lead.locator('.badge').textContent();
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

const timer = setTimeout(() => {
  print({ error: 'the scenario did not end within 90 s', seen });
  process.exit(1);
}, 90000);

try {
  if (scenario === 'capsule') await capsule();
  else if (scenario === 'fleet') await fleet();
  else if (scenario === 'gap') await gap();
  else if (scenario === 'busy') await busy();
  else if (scenario === 'door') await door();
  else if (scenario === 'formation') await formation();
  else throw new Error('unknown scenario ' + scenario);
  print(seen);
  clearTimeout(timer);
} catch (error) {
  print({ error: String(error && error.message), stack: String(error && error.stack), seen });
  clearTimeout(timer);
  process.exitCode = 1;
}
