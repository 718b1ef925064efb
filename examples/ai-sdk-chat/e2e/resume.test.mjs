// Browser tests of the AI SDK example against a real chatd: headless
// Chromium driven by playwright-core under `node --test`, the way web/e2e
// does. Run them with scripts/example-e2e.sh, which starts the fake LLM
// (scripted mode) and chatd, builds the app and serves it with
// `vite preview` (its proxy forwards /api to chatd), and passes:
//   APP_URL            the served app (http://127.0.0.1:PORT)
//   CHATD_TOKEN        a chatd token (the bootstrap admin's)
//   CHROMIUM_PATH      default /usr/bin/chromium
//   E2E_ARTIFACTS_DIR  where a failing test leaves a screenshot, the page
//                      HTML and the browser log (default: a temp dir)
//   E2E_TIMEOUT_SCALE  optional factor for every deadline
// The fake LLM answers `echo: <text>` in ~1 s, or over ~10 s in parts when
// the text has `slow`.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

const APP_URL = requiredEnv('APP_URL').replace(/\/$/, '');
const TOKEN = requiredEnv('CHATD_TOKEN');
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const SCALE = Number(process.env.E2E_TIMEOUT_SCALE || '1') || 1;
const ms = (n) => Math.round(n * SCALE);
const WAIT = ms(15_000);
const SLOW_WAIT = ms(40_000);
const TEST_TIMEOUT = ms(120_000);

function requiredEnv(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests with scripts/example-e2e.sh`);
  return value;
}

// Records in the page every successive state of the message list (roles and
// texts), so a test can assert what was shown only for a moment (a partial
// answer) and that there never were two assistant messages.
const RECORDER = `(() => {
  const seen = [];
  window.__seen = seen;
  let last = '';
  const sample = () => {
    const items = [...document.querySelectorAll('[data-testid="message"]')].map((el) => ({
      role: el.dataset.role,
      id: el.dataset.id,
      text: [...el.querySelectorAll('[data-testid="message-text"]')].map((t) => t.textContent).join(''),
    }));
    const key = JSON.stringify(items);
    if (key !== last) { last = key; seen.push(items); }
  };
  const start = () => {
    sample();
    new MutationObserver(sample).observe(document.documentElement, {
      subtree: true, childList: true, characterData: true,
    });
  };
  if (document.documentElement) start();
  else document.addEventListener('DOMContentLoaded', start);
})();`;

let browser;
let artifactsRoot = process.env.E2E_ARTIFACTS_DIR || '';
before(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});
after(async () => {
  await browser?.close();
});

/** Runs body(page, log) in a fresh context; saves artifacts when it throws. */
async function withPage(t, body) {
  const context = await browser.newContext({ viewport: { width: 1000, height: 800 } });
  await context.addInitScript(RECORDER);
  context.setDefaultTimeout(WAIT);
  const page = await context.newPage();
  const log = [];
  const stamp = () => new Date().toISOString().slice(11, 23);
  page.on('console', (m) => log.push(`${stamp()} console.${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => log.push(`${stamp()} pageerror: ${e.stack || e}`));
  page.on('requestfailed', (r) => log.push(`${stamp()} requestfailed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`));
  page.on('response', (r) => log.push(`${stamp()} http ${r.status()}: ${r.request().method()} ${r.url()}`));
  try {
    await body(page, log);
  } catch (err) {
    await saveArtifacts(t.name, page, log).catch((e) => console.error(`could not save artifacts: ${e}`));
    throw err;
  } finally {
    await context.close().catch(() => {});
  }
}

async function saveArtifacts(name, page, log) {
  if (!artifactsRoot) artifactsRoot = mkdtempSync(join(tmpdir(), 'ai-sdk-example-e2e-'));
  const dir = join(artifactsRoot, name.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 100));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'browser.log'), log.join('\n') + '\n');
  if (!page.isClosed()) {
    const seen = await page.evaluate(() => window.__seen).catch(() => null);
    writeFileSync(join(dir, 'seen.json'), JSON.stringify(seen, null, 2) + '\n');
    writeFileSync(join(dir, 'page.html'), await page.content().catch(() => ''));
    await page.screenshot({ path: join(dir, 'screenshot.png'), fullPage: true, timeout: 10_000 });
  }
  console.error(`artifacts of the failed test "${name}": ${dir}`);
}

/** Polls probe() until accept(value) holds; returns the value or throws naming `what`. */
async function until(what, probe, { accept = Boolean, timeout = WAIT, every = 50 } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  let lastError;
  for (;;) {
    try {
      last = await probe();
      lastError = undefined;
      if (accept(last)) return last;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      const detail = lastError ? `last error: ${lastError.message}` : `last value: ${JSON.stringify(last)}`;
      throw new Error(`timed out after ${timeout} ms waiting for ${what} (${detail})`);
    }
    await new Promise((r) => setTimeout(r, every));
  }
}

/** The messages on screen: [{role, id, text}]. */
function messages(page) {
  return page.evaluate(() =>
    [...document.querySelectorAll('[data-testid="message"]')].map((el) => ({
      role: el.dataset.role,
      id: el.dataset.id,
      text: [...el.querySelectorAll('[data-testid="message-text"]')].map((t) => t.textContent).join(''),
    })),
  );
}

const status = (page) => page.getAttribute('[data-testid="status"]', 'data-status');
const chatIdOf = (page) => new URL(page.url()).searchParams.get('chat');

/** Opens the app with the token (a new chat), waits for the composer. */
async function openApp(page) {
  await page.goto(`${APP_URL}/?token=${encodeURIComponent(TOKEN)}`);
  await page.locator('[data-testid="composer-input"]').waitFor();
  const id = chatIdOf(page);
  assert.ok(id, `the app put a chat id in the URL (${page.url()})`);
  assert.ok(!new URL(page.url()).searchParams.has('token'), 'the token was taken out of the URL');
  return id;
}

async function send(page, text) {
  await page.fill('[data-testid="composer-input"]', text);
  await page.click('[data-testid="send"]');
}

/** Waits until the chat shows exactly [user `text`, assistant `echo: text`] and is ready. */
async function expectAnswered(page, text, timeout) {
  const want = [
    { role: 'user', text },
    { role: 'assistant', text: `echo: ${text}` },
  ];
  await until(
    `the chat to show ${JSON.stringify(want)} and be ready`,
    async () => ({ shown: (await messages(page)).map(({ role, text: t }) => ({ role, text: t })), status: await status(page) }),
    { accept: (v) => v.status === 'ready' && JSON.stringify(v.shown) === JSON.stringify(want), timeout },
  );
}

test('send a message and see the answer; a reload shows the history', { timeout: TEST_TIMEOUT }, async (t) => {
  await withPage(t, async (page) => {
    const id = await openApp(page);
    const text = `hello from the AI SDK example ${Date.now()}`;
    await send(page, text);
    await expectAnswered(page, text, WAIT);
    const before = await messages(page);

    await page.reload();
    await page.locator('[data-testid="composer-input"]').waitFor();
    assert.equal(chatIdOf(page), id, 'the reload reopened the same chat');
    await expectAnswered(page, text, WAIT);
    const afterReload = await messages(page);
    assert.equal(afterReload[1].id, before[1].id, "the assistant message keeps chatd's id across the reload");
  });
});

test('reload during a slow answer: the answer continues and completes once', { timeout: TEST_TIMEOUT }, async (t) => {
  await withPage(t, async (page, log) => {
    const id = await openApp(page);
    const text = `slow answer to reload in the middle of, number ${Date.now()}, with enough words to stream in many parts`;
    const full = `echo: ${text}`;
    await send(page, text);

    // Part of the answer is on screen (some of the echoed text), not all of it.
    const partial = await until(
      'part of the answer',
      async () => (await messages(page)).find((m) => m.role === 'assistant')?.text ?? '',
      { accept: (s) => s.length > 'echo: '.length + 5 && full.startsWith(s) && s.length < full.length },
    );

    const streamRequests = [];
    page.on('response', (r) => {
      if (r.request().method() === 'GET' && new URL(r.url()).pathname.endsWith('/stream')) {
        streamRequests.push(r.status());
      }
    });
    await page.reload();
    await page.locator('[data-testid="composer-input"]').waitFor();
    assert.equal(chatIdOf(page), id, 'the reload reopened the same chat');

    await expectAnswered(page, text, SLOW_WAIT);

    // After the reload the answer was shown growing (resumed mid-answer, not
    // only loaded complete from the history), and there never were two
    // assistant messages nor a second user message.
    const seen = await page.evaluate(() => window.__seen);
    const assistantTexts = seen.map((items) => items.filter((m) => m.role === 'assistant').map((m) => m.text));
    for (const [i, texts] of assistantTexts.entries()) {
      assert.ok(texts.length <= 1, `state ${i} after the reload showed ${texts.length} assistant messages: ${JSON.stringify(seen[i])}`);
    }
    for (const [i, items] of seen.entries()) {
      assert.ok(items.filter((m) => m.role === 'user').length <= 1, `state ${i} showed the user message twice: ${JSON.stringify(items)}`);
    }
    const growing = assistantTexts.flat().filter((s) => s.length > 0 && s.length < full.length && full.startsWith(s));
    assert.ok(growing.length > 0, `a partial answer was shown after the reload (seen: ${JSON.stringify(assistantTexts)})`);
    assert.ok(streamRequests.includes(200), `useChat resumed with GET …/stream → 200 (got ${JSON.stringify(streamRequests)})`);
    t.diagnostic(`partial before the reload: ${partial.length}/${full.length} characters; after: ${growing.length} partial states`);
    void log;
  });
});
