// Shared harness of the browser tests: the server under test, Chromium, a
// fresh browser context per test with failure artifacts, and waits that poll
// with a deadline (playwright-core has no `expect`).
//
// The tests run against a `chatd serve` started by scripts/e2e.sh, which
// passes:
//   CHATD_URL           base URL of the server (http://127.0.0.1:PORT)
//   CHATD_TOKEN         a token of the admin user (CHATD_BOOTSTRAP_ADMIN_TOKEN)
//   CHATD_PID_FILE      optional: file holding the pid of the running chatd,
//                       which e2e.sh restarts when it exits (restart test)
//   E2E_ARTIFACTS_DIR   where a failing test leaves a screenshot and its
//                       browser log (default: a new directory under $TMPDIR)
//   E2E_TIMEOUT_SCALE   optional factor for every deadline (slow machines)
// The fake LLM runs in `--mode scripted` (crates/chatd-testkit/src/bin/fake-llm.rs):
// `echo: <text>` in ~1 s, `slow` messages over ~10 s, `call NAME JSON` calls a
// tool, a tool result is answered `tool said: <result>`, `fail` is a 400,
// `overloaded` a 503 every time; an echo of a text with `truncate` finishes
// with `length`, with `filtered` with `content_filter`.

import { mkdirSync, mkdtempSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { chromium } from 'playwright-core';

export const CHATD_URL = requiredEnv('CHATD_URL').replace(/\/$/, '');
export const CHATD_TOKEN = requiredEnv('CHATD_TOKEN');
export const CHATD_PID_FILE = process.env.CHATD_PID_FILE || '';

const SCALE = Number(process.env.E2E_TIMEOUT_SCALE || '1') || 1;
/** A deadline in ms, scaled by E2E_TIMEOUT_SCALE. */
export const ms = (n) => Math.round(n * SCALE);
/** Default deadline of one wait. */
export const WAIT = ms(15_000);
/** Deadline of waits that outlast a `slow` answer (~10 s). */
export const SLOW_WAIT = ms(40_000);
/** Per-test timeout for node:test. */
export const TEST_TIMEOUT = ms(120_000);

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

let artifactsRoot = process.env.E2E_ARTIFACTS_DIR || '';

function requiredEnv(name) {
  const value = process.env[name];
  if (!value) {
    throw new Error(`${name} is not set: run the browser tests with scripts/e2e.sh`);
  }
  return value;
}

/** Launches headless Chromium (one browser per test file). */
export async function launchBrowser() {
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true });
}

/**
 * Registers `before`/`after` hooks that launch one browser for the calling
 * test file and close it at the end; returns a getter for it.
 */
export function sharedBrowser() {
  let browser;
  before(async () => {
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
  });
  return () => browser;
}

// Records, in the page, every successive text of the elements the tests
// watch, so that a test can assert a value that was shown only briefly
// (`running` before `waiting`, a growing preview) without racing the UI.
// `window.__e2eSeen[testid]` is the list of distinct successive values of
// the first element with that testid (`null` while there is none).
const RECORDER = `(() => {
  const watched = ['chat-status', 'message-preview', 'connection', 'queue', 'live-status', 'usage', 'retry-banner'];
  const seen = {};
  window.__e2eSeen = seen;
  // The chat's status and the connection show words (or nothing) on
  // screen; their raw values are in data-status and data-state.
  const read = (id) => {
    const el = document.querySelector('[data-testid="' + id + '"]');
    if (!el) return null;
    if (id === 'chat-status' && el.dataset.status !== undefined) return el.dataset.status;
    if (id === 'connection' && el.dataset.state !== undefined) return el.dataset.state;
    return el.textContent;
  };
  const sample = () => {
    for (const id of watched) {
      const value = read(id);
      const list = seen[id] || (seen[id] = []);
      if (list.length === 0 || list[list.length - 1] !== value) list.push(value);
    }
  };
  const start = () => {
    sample();
    new MutationObserver(sample).observe(document.documentElement, {
      subtree: true, childList: true, characterData: true, attributes: true,
    });
  };
  if (document.documentElement) start();
  else document.addEventListener('DOMContentLoaded', start);
  // Every WebSocket the page opens: url, requested subprotocols, and the
  // one the server chose (once open).
  const sockets = [];
  window.__e2eSockets = sockets;
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(url, protocols) {
      super(url, protocols);
      const entry = { url: String(url), protocols: [].concat(protocols ?? []), protocol: null };
      sockets.push(entry);
      this.addEventListener('open', () => { entry.protocol = this.protocol; });
    }
  };
})();`;

/** Browser context options of a phone (an iPhone 12's viewport, touch). */
export const PHONE = { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true };

/**
 * Runs `body(page, context)` in a fresh browser context (1280x900, unless
 * `options` says otherwise: any of Playwright's `newContext` options, e.g.
 * PHONE, `colorScheme`, `permissions`). When it throws, saves
 * `screenshot.png`, `page.html` and `browser.log` (console, page errors,
 * failed requests, WebSocket traffic) under the artifacts directory and
 * rethrows.
 */
export async function withPage(browser, t, body, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...options });
  await context.addInitScript(RECORDER);
  context.setDefaultTimeout(WAIT);
  const page = await context.newPage();
  const log = [];
  const stamp = () => new Date().toISOString().slice(11, 23);
  page.on('console', (m) => log.push(`${stamp()} console.${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => log.push(`${stamp()} pageerror: ${e.stack || e}`));
  page.on('requestfailed', (r) =>
    log.push(`${stamp()} requestfailed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`),
  );
  page.on('response', (r) => {
    if (r.status() >= 400) log.push(`${stamp()} http ${r.status()}: ${r.request().method()} ${r.url()}`);
  });
  page.on('websocket', (ws) => {
    log.push(`${stamp()} websocket open: ${ws.url()}`);
    ws.on('framereceived', (f) => log.push(`${stamp()} ws <- ${String(f.payload).slice(0, 400)}`));
    ws.on('close', () => log.push(`${stamp()} websocket closed: ${ws.url()}`));
  });
  try {
    await body(page, context);
  } catch (err) {
    await saveArtifacts(t.name, page, log).catch((e) => {
      console.error(`could not save the artifacts of ${t.name}: ${e}`);
    });
    throw err;
  } finally {
    await context.close().catch(() => {});
  }
}

async function saveArtifacts(name, page, log) {
  if (!artifactsRoot) {
    artifactsRoot = mkdtempSync(join(tmpdir(), 'chatd-e2e-'));
  }
  const dir = join(artifactsRoot, name.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 100));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'browser.log'), log.join('\n') + '\n');
  if (!page.isClosed()) {
    const seen = await page.evaluate(() => window.__e2eSeen).catch(() => null);
    writeFileSync(join(dir, 'seen.json'), JSON.stringify(seen, null, 2) + '\n');
    writeFileSync(join(dir, 'page.html'), await page.content().catch(() => ''));
    await page.screenshot({ path: join(dir, 'screenshot.png'), fullPage: true, timeout: 10_000 });
  }
  console.error(`artifacts of the failed test "${name}": ${dir}`);
}

/**
 * Polls `probe()` until `accept(value)` holds (by default: truthy) and
 * returns that value; throws after `timeout` ms naming `what` and the last
 * value seen (or the last error `probe` threw).
 */
export async function until(what, probe, { accept = Boolean, timeout = WAIT, every = 50 } = {}) {
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
    if (Date.now() >= deadline) {
      const detail = lastError ? `last error: ${lastError.message}` : `last value: ${JSON.stringify(last)}`;
      throw new Error(`timed out after ${timeout} ms waiting for ${what}; ${detail}`);
    }
    await new Promise((r) => setTimeout(r, every));
  }
}

/** Waits until `locator`'s (first) text content, trimmed, equals `expected`. */
export async function expectText(locator, expected, { timeout = WAIT } = {}) {
  return until(`text ${JSON.stringify(expected)} in ${locator}`, () => textOf(locator), {
    accept: (v) => v === expected,
    timeout,
  });
}

/** The trimmed text of `locator`'s first match, or null when there is none. */
export async function textOf(locator) {
  const first = locator.first();
  if ((await first.count()) === 0) return null;
  return ((await first.textContent({ timeout: 1000 })) ?? '').trim();
}

/** Waits until `locator` matches exactly `n` elements. */
export async function expectCount(locator, n, { timeout = WAIT } = {}) {
  return until(`${n} element(s) for ${locator}`, () => locator.count(), {
    accept: (c) => c === n,
    timeout,
  });
}

/** The successive values the page has shown for `testid` (see RECORDER). */
export async function seenValues(page, testid) {
  const seen = await page.evaluate(() => window.__e2eSeen || {});
  return (seen[testid] || []).map((v) => (v == null ? null : v.trim()));
}

/** The WebSockets the page opened: `[{url, protocols, protocol}]` (see RECORDER). */
export async function openedSockets(page) {
  return page.evaluate(() => window.__e2eSockets || []);
}

/** Waits until the page has shown, for `testid`, the values of `sequence` in that order. */
export async function expectSeenInOrder(page, testid, sequence, { timeout = WAIT } = {}) {
  return until(
    `${testid} to show ${JSON.stringify(sequence)} in order`,
    () => seenValues(page, testid),
    { accept: (values) => isSubsequence(sequence, values), timeout },
  );
}

function isSubsequence(wanted, values) {
  let i = 0;
  for (const v of values) {
    if (i < wanted.length && v === wanted[i]) i += 1;
  }
  return i === wanted.length;
}

// ---- the UI, by the selectors of web/README.md -------------------------

export const byId = (page, testid) => page.getByTestId(testid);

/**
 * Opens the UI and signs in with CHATD_TOKEN; waits for the chat list (at
 * phone width, where the list is behind the menu button, for that button).
 */
export async function signIn(page, token = CHATD_TOKEN) {
  await page.goto(CHATD_URL + '/');
  await byId(page, 'token-input').fill(token);
  await byId(page, 'sign-in').click();
  await byId(page, 'username').waitFor({ state: 'visible' });
  if (await byId(page, 'menu-toggle').isVisible()) return;
  await byId(page, 'chat-list').waitFor({ state: 'visible' });
}

/**
 * Starts a chat from the UI: `new-chat`, optional model (`new-chat-model`
 * option whose label contains `model`), optional `new-chat-tools` JSON, the
 * first message, `send-queue`. Waits for the chat view and returns its id.
 */
export async function createChat(page, text, { tools, model } = {}) {
  await openSidebar(page);
  await byId(page, 'new-chat').click();
  if (model !== undefined) {
    // The option whose label contains `model` (the list loads from the server).
    const select = byId(page, 'new-chat-model');
    const value = await until(`a model option labelled ${JSON.stringify(model)}`, () =>
      select.evaluate((el, wanted) => {
        const option = [...el.options].find((o) => o.textContent.includes(wanted));
        return option ? option.value : null;
      }, model),
    );
    await select.selectOption(value);
  }
  if (tools !== undefined) {
    await openAdvanced(page);
    await byId(page, 'new-chat-tools').fill(typeof tools === 'string' ? tools : JSON.stringify(tools));
  }
  await byId(page, 'composer-input').fill(text);
  await byId(page, 'send-queue').click();
  return until(
    'the new chat to open (chat-view with data-chat-id)',
    async () => {
      const view = byId(page, 'chat-view');
      if ((await view.count()) === 0) return null;
      return view.first().getAttribute('data-chat-id', { timeout: 1000 });
    },
    { timeout: WAIT },
  );
}

/** At phone width, opens the sidebar (behind the menu button) when it is closed. */
export async function openSidebar(page) {
  const toggle = byId(page, 'menu-toggle');
  if ((await toggle.isVisible()) && (await toggle.getAttribute('aria-expanded')) !== 'true') {
    await toggle.click();
    await byId(page, 'chat-list').waitFor({ state: 'visible' });
  }
}

/** Opens the new-chat form's "Advanced" section (system prompt, dynamic tools) when it is closed. */
export async function openAdvanced(page) {
  const advanced = byId(page, 'advanced');
  if (!(await advanced.evaluate((el) => el.open))) await byId(page, 'advanced-toggle').click();
}

/**
 * Types `text` into the composer and clicks `button` (send-queue,
 * send-interrupt or send-steer); while the chat works they are in the
 * `send-options` menu beside Stop, which is opened first.
 */
export async function send(page, text, button = 'send-queue') {
  await byId(page, 'composer-input').fill(text);
  await clickSendButton(page, button);
}

/** Clicks send button `button`, opening the `send-options` menu when it is in there. */
export async function clickSendButton(page, button) {
  const target = byId(page, button);
  const menu = byId(page, 'send-options-list');
  const inMenu = await target.evaluate((el) => el.closest('[role="menu"]') !== null);
  if (inMenu && !(await menu.isVisible())) await byId(page, 'send-options').click();
  await target.click();
}

/**
 * Clicks item `testid` of the open chat's menu (`chat-menu`: compact-now,
 * clear-context, plan-mode-toggle, export-markdown, export-json, archive,
 * unarchive), opening the menu first.
 */
export async function chatMenu(page, testid) {
  if (!(await byId(page, 'chat-menu-list').isVisible())) await byId(page, 'chat-menu').click();
  await byId(page, 'chat-menu-list').getByTestId(testid).click();
}

/** The raw status (`data-status`) of a status badge: `waiting`, `running`, ... */
export async function statusOf(locator) {
  const first = locator.first();
  if ((await first.count()) === 0) return null;
  return first.getAttribute('data-status', { timeout: 1000 });
}

/** Waits until the live view's connection (`connection`, `data-state`) is `state` (`live`, `reconnecting`). */
export async function expectConnection(page, state, { timeout = WAIT } = {}) {
  return until(`the connection to be ${state}`, () => byId(page, 'connection').first().getAttribute('data-state', { timeout: 1000 }), {
    accept: (v) => v === state,
    timeout,
  });
}

/** Committed messages of the open chat with `role` (all when omitted). */
export function messages(page, role) {
  const role_ = role ? `[data-role="${role}"]` : '';
  return byId(page, 'messages').locator(`[data-testid="message"]${role_}`);
}

/** The texts (`message-text`, trimmed) of the open chat's messages with `role`. */
export async function messageTexts(page, role) {
  const texts = await messages(page, role).evaluateAll((els) =>
    els.map((el) => {
      const t = el.querySelector('[data-testid="message-text"]');
      return (t ? t.textContent : '').trim();
    }),
  );
  return texts;
}

/**
 * The texts of the open chat's messages with `role` as rendered
 * (`innerText`: line breaks and paragraphs of Markdown kept), trimmed.
 */
export async function renderedTexts(page, role) {
  return messages(page, role).evaluateAll((els) =>
    els.map((el) => {
      const t = el.querySelector('[data-testid="message-text"]');
      return (t ? t.innerText : '').trim();
    }),
  );
}

/** Waits until the open chat's messages with `role` are rendered as exactly these texts. */
export async function expectRenderedTexts(page, role, expected, { timeout = WAIT } = {}) {
  return until(
    `${role} messages rendered as ${JSON.stringify(expected)}`,
    () => renderedTexts(page, role),
    { accept: (texts) => JSON.stringify(texts) === JSON.stringify(expected), timeout },
  );
}

/** Waits until the open chat's messages with `role` have exactly these texts. */
export async function expectMessageTexts(page, role, expected, { timeout = WAIT } = {}) {
  return until(
    `${role} messages ${JSON.stringify(expected)}`,
    () => messageTexts(page, role),
    { accept: (texts) => JSON.stringify(texts) === JSON.stringify(expected), timeout },
  );
}

/**
 * Waits until the open chat's status (`chat-status`: its `data-status`; on
 * screen it shows words, and nothing while `waiting`) is `status`.
 */
export async function expectStatus(page, status, { timeout = WAIT } = {}) {
  return until(`the chat's status to be ${status}`, () => statusOf(byId(page, 'chat-status')), {
    accept: (v) => v === status,
    timeout,
  });
}

/** The texts of the queue panel's `queued-message`s, in order. */
export async function queueTexts(page) {
  return byId(page, 'queue')
    .getByTestId('queued-message')
    .evaluateAll((els) =>
      els.map((el) => {
        // The item's text without its buttons' labels.
        const clone = el.cloneNode(true);
        for (const b of clone.querySelectorAll('button, [data-testid^="queue-"]')) b.remove();
        return clone.textContent.trim();
      }),
    );
}

/**
 * Waits until the queue panel has exactly `expected.length` queued messages
 * and the i-th one's text contains `expected[i]`.
 */
export async function expectQueue(page, expected, { timeout = WAIT } = {}) {
  return until(
    `the queue ${JSON.stringify(expected)}`,
    () => queueTexts(page),
    {
      accept: (texts) =>
        texts.length === expected.length && texts.every((t, i) => t.includes(expected[i])),
      timeout,
    },
  );
}

/** The `queued-message` of the queue panel whose text contains `text`. */
export function queuedMessage(page, text) {
  return byId(page, 'queue').getByTestId('queued-message').filter({ hasText: text });
}

/** The chat's messages, from the API (ascending by id). */
export async function apiMessages(id) {
  return (await api('GET', `/api/v2/chats/${id}/messages?limit=200`)).messages;
}

/** Waits until the chat's status, from the API, is `status`; returns the chat. */
export async function expectApiStatus(id, status, { timeout = WAIT } = {}) {
  return until(`chat ${id} to be ${status} on the server`, () => api('GET', `/api/v2/chats/${id}`), {
    accept: (chat) => chat.status === status,
    timeout,
  });
}

/**
 * Creates a chat through the API (no browser) and waits for its first
 * answer and for the title the server generates after it (which changes
 * `title` and `updated_at`); returns the chat as it is then.
 */
export async function apiChat(text) {
  const chat = await api('POST', '/api/v2/chats', { content: [{ type: 'text', text }] });
  await expectApiStatus(chat.id, 'waiting', { timeout: SLOW_WAIT });
  return until(`chat ${chat.id} to get its generated title`, () => api('GET', `/api/v2/chats/${chat.id}`), {
    accept: (c) => c.title !== 'New Chat',
  });
}

/** The `chat-item` of chat `id` in the chat list. */
export function chatItem(page, id) {
  return byId(page, 'chat-list').locator(`[data-testid="chat-item"][data-chat-id="${id}"]`);
}

/** A REST call as the test user (for set-up and checks, not for what the UI does). */
export async function api(method, path, body) {
  const response = await fetch(CHATD_URL + path, {
    method,
    headers: {
      Authorization: `Bearer ${CHATD_TOKEN}`,
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** The pid of the running chatd (from CHATD_PID_FILE), or null. */
export function chatdPid() {
  if (!CHATD_PID_FILE) return null;
  try {
    const pid = Number(readFileSync(CHATD_PID_FILE, 'utf8').trim());
    return pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

/**
 * Waits until the chat list shows chat `id` with status badge `status`
 * (opening the list at `#/` first when it is not on screen).
 */
export async function expectListStatus(page, id, status, { timeout = WAIT } = {}) {
  if (!(await chatItem(page, id).isVisible())) {
    await page.goto(CHATD_URL + '/#/');
  }
  return until(`chat ${id} listed as ${status}`, () => statusOf(chatItem(page, id).getByTestId('status-badge')), {
    accept: (v) => v === status,
    timeout,
  });
}

/**
 * Whether `shown` (a preview's or message's text) holds a proper, non-empty
 * part of `full` from its start: the text of a reply cut short or still
 * streaming. Returns the length of the longest prefix of `full` it contains.
 */
export function partialPrefixLength(shown, full) {
  if (!shown) return 0;
  let k = 0;
  while (k < full.length && shown.includes(full.slice(0, k + 1))) k += 1;
  return k;
}

/** Waits until `message-preview` has shown to show a part of `full` but not all of it. */
export async function expectPartialPreview(page, full, { timeout = WAIT } = {}) {
  return until(
    `a preview holding part of ${JSON.stringify(full)}`,
    () => seenValues(page, 'message-preview'),
    {
      accept: (values) =>
        values.some((v) => {
          const k = partialPrefixLength(v, full);
          return k >= Math.min(5, full.length - 1) && k < full.length;
        }),
      timeout,
    },
  );
}

/**
 * A REST call with another token (a member's): `{status, headers, body}`
 * (the JSON body, or null), whatever the status.
 */
export async function apiAs(token, method, path, body) {
  const response = await fetch(CHATD_URL + path, {
    method,
    headers: {
      Authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  return { status: response.status, headers: response.headers, body: json };
}

/**
 * Creates a user (`POST /users`, as the admin) named `<prefix>-<random>`
 * and a token for them (`POST /users/{id}/tokens`, named `e2e`): `{user,
 * token}`.
 */
export async function createUser(prefix, role = 'member') {
  const username = `${prefix}-${Math.random().toString(36).slice(2, 8)}`;
  const user = await api('POST', '/api/v2/users', { username, role });
  const { token } = await api('POST', `/api/v2/users/${user.id}/tokens`, { name: 'e2e' });
  return { user, token };
}
