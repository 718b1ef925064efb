// The chat screen for people (issue 34): status only where it matters, the
// chat's tools in one menu, one primary action on a busy composer, honest
// token figures, the connection banner, the live retry countdown, the page
// of an unknown chat, a wrong token said in the form, copy message, scroll
// to bottom, one entry per model, the settings dialog (theme), export.
// Most tests run at desktop and phone (390 px) widths, in light and dark.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

/** Desktop and phone, light and dark. */
const VARIANTS = [
  { name: 'desktop, light', options: { colorScheme: 'light' } },
  { name: 'desktop, dark', options: { colorScheme: 'dark' } },
  { name: 'phone, light', options: { ...h.PHONE, colorScheme: 'light' } },
  { name: 'phone, dark', options: { ...h.PHONE, colorScheme: 'dark' } },
];
/** One desktop and one phone variant, for the slower tests. */
const TWO = [VARIANTS[0], VARIANTS[3]];

/** Words of the developer that the main screen must not show. */
const DEVELOPER_WORDS = /\b(waiting|live|not live|requires_action|interrupting|running)\b/;

/**
 * A switch in the page for the tests that take the server away: while
 * `window.__e2eCut` is set, every new WebSocket goes to a port where
 * nothing listens, and `__e2eCutSockets()` closes the open ones. (The REST
 * side is cut with `page.route`.)
 */
const SOCKET_SWITCH = `(() => {
  const Native = window.WebSocket;
  const open = [];
  window.__e2eCut = false;
  window.__e2eCutSockets = () => { for (const ws of open) ws.close(); };
  window.WebSocket = class extends Native {
    constructor(url, protocols) {
      // (Same origin, for the Content-Security-Policy: a path that is no
      // WebSocket, so the handshake fails.)
      super(window.__e2eCut ? String(url).split('/api/v2/')[0] + '/e2e-no-such-socket' : url, protocols);
      open.push(this);
    }
  };
})();`;

/** The page can no longer reach the server: REST requests fail, sockets close and cannot open. */
async function cutServer(page, { rest = true } = {}) {
  if (rest) await page.route('**/api/v2/**', (route) => route.abort('connectionrefused'));
  await page.evaluate(() => {
    window.__e2eCut = true;
    window.__e2eCutSockets();
  });
}

/** The server is reachable again. */
async function restoreServer(page) {
  await page.unroute('**/api/v2/**');
  await page.evaluate(() => {
    window.__e2eCut = false;
  });
}

/** Whether the page scrolls sideways. */
const scrollsSideways = (page) => page.evaluate(() => document.documentElement.scrollWidth > document.documentElement.clientWidth);

for (const v of VARIANTS) {
  test(`status shows only where it matters, with no developer words (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      const id = await h.createChat(page, 'slow status words');
      await h.expectStatus(page, 'running');
      // The header says the chat works, in words.
      await h.expectText(h.byId(page, 'chat-status'), 'Working');
      const header = page.locator('.chat-header');
      const busyHeight = (await header.boundingBox()).height;
      await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });
      // Idle: no badge in the header, none in the list, no "live".
      assert.equal(await h.byId(page, 'chat-status').isVisible(), false);
      assert.equal(await h.byId(page, 'connection').isVisible(), false);
      assert.doesNotMatch(await header.innerText(), DEVELOPER_WORDS);
      // The header keeps its height whatever the state.
      assert.equal((await header.boundingBox()).height, busyHeight);
      await h.openSidebar(page);
      const badge = h.chatItem(page, id).getByTestId('status-badge');
      await h.until('the list to know the chat is idle', () => h.statusOf(badge), { accept: (s) => s === 'waiting' });
      assert.equal(await badge.isVisible(), false, 'no badge on an idle chat');
      // The badges the list shows are words for people.
      const shownBadges = await h.byId(page, 'chat-list').getByTestId('status-badge').evaluateAll((els) =>
        els.filter((el) => el.getClientRects().length).map((el) => el.textContent));
      for (const text of shownBadges) assert.ok(['Working', 'Stopping', 'Needs your action', 'Error'].includes(text), text);
      // A chat that needs attention is marked in the list.
      const failed = await h.api('POST', '/api/v2/chats', { content: [{ type: 'text', text: 'fail please' }] });
      await h.expectApiStatus(failed.id, 'error', { timeout: h.SLOW_WAIT });
      await h.until('the failed chat in the list', () => h.textOf(h.chatItem(page, failed.id).getByTestId('status-badge')), {
        accept: (text) => text === 'Error',
        timeout: h.ms(20_000),
      });
      assert.ok(await h.chatItem(page, failed.id).getByTestId('status-badge').isVisible());
    }, v.options);
  });

  test(`the chat's tools are in one menu that fits the screen (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      const id = await h.createChat(page, 'menu please');
      await h.expectMessageTexts(page, 'assistant', ['echo: menu please']);
      await h.expectStatus(page, 'waiting');
      // Nothing of it in the header but the menu button.
      for (const testid of ['compact-now', 'clear-context', 'plan-mode-toggle', 'archive', 'export-markdown', 'export-json']) {
        assert.equal(await h.byId(page, testid).isVisible(), false, `${testid} hidden until the menu opens`);
      }
      await h.byId(page, 'chat-menu').click();
      const list = h.byId(page, 'chat-menu-list');
      await list.waitFor();
      assert.equal(await h.byId(page, 'chat-menu').getAttribute('aria-expanded'), 'true');
      const labels = await list.locator('[role^="menuitem"] .menu-item-label').allTextContents();
      assert.deepEqual(labels, ['Compact context', 'Clear context', 'Plan mode', 'Export as Markdown', 'Export as JSON', 'Share…', 'Archive']);
      // The open menu is on screen and the page does not scroll sideways.
      const box = await list.boundingBox();
      const width = page.viewportSize().width;
      assert.ok(box.x >= 0 && box.x + box.width <= width, `menu at ${JSON.stringify(box)} in ${width} px`);
      assert.equal(await scrollsSideways(page), false);
      // Escape closes it and gives the focus back to its button.
      await page.keyboard.press('Escape');
      await h.until('the menu to close', async () => !(await list.isVisible()));
      // Plan mode from the menu, as a checked item.
      await h.chatMenu(page, 'plan-mode-toggle');
      await h.until('plan mode on the server', async () => (await h.api('GET', `/api/v2/chats/${id}`)).plan_mode === 'plan');
      await h.until('the item checked', async () => (await h.byId(page, 'plan-mode-toggle').getAttribute('aria-checked')) === 'true');
      // While a reply runs, the context tools wait for it.
      await h.send(page, 'slow again');
      await h.expectStatus(page, 'running');
      await h.byId(page, 'chat-menu').click();
      assert.equal(await h.byId(page, 'compact-now').isDisabled(), true);
      assert.equal(await h.byId(page, 'clear-context').isDisabled(), true);
      assert.equal(await scrollsSideways(page), false);
      await page.keyboard.press('Escape');
    }, v.options);
  });

  test(`a busy composer has one primary action, Stop, and the other sends in a menu (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      await h.createChat(page, 'slow busy composer');
      await h.expectStatus(page, 'running');
      const stop = h.byId(page, 'interrupt');
      await h.until('Stop', () => stop.isVisible());
      // The primary buttons shown: Stop only, and the menu beside it.
      const shown = await page.locator('.composer-actions > button.btn-primary, .composer-actions > .btn-stop').evaluateAll((els) =>
        els.filter((el) => !el.hidden && el.getClientRects().length).map((el) => el.dataset.testid));
      assert.deepEqual(shown, ['interrupt']);
      for (const testid of ['send-queue', 'send-interrupt', 'send-steer']) {
        assert.equal(await h.byId(page, testid).isVisible(), false, `${testid} in the menu`);
      }
      await h.until('Steer offered', () => h.byId(page, 'send-steer').evaluate((el) => !el.hidden));
      await h.byId(page, 'send-options').click();
      const items = await h.byId(page, 'send-options-list').locator('[role="menuitem"]').evaluateAll((els) =>
        els.filter((el) => !el.hidden).map((el) => el.querySelector('.menu-item-label').textContent.trim()));
      assert.deepEqual(items, ['Queue', 'Send now', 'Steer']);
      const box = await h.byId(page, 'send-options-list').boundingBox();
      const width = page.viewportSize().width;
      assert.ok(box.x >= 0 && box.x + box.width <= width, `menu at ${JSON.stringify(box)} in ${width} px`);
      assert.equal(await scrollsSideways(page), false);
      await page.keyboard.press('Escape');
      // Queue from the menu.
      await h.send(page, 'queued from the menu', 'send-queue');
      await h.expectQueue(page, ['queued from the menu']);
      // Stop ends the reply; Send is the primary button again.
      await stop.click();
      await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });
      await h.until('Send back in the row', () => h.byId(page, 'send-queue').isVisible(), { timeout: h.SLOW_WAIT });
      assert.equal(await h.byId(page, 'send-options').isVisible(), false);
    }, v.options);
  });

  test(`token figures: each answer its own output, the header the context and the chat's spend (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      const id = await h.createChat(page, 'count me');
      await h.expectMessageTexts(page, 'assistant', ['echo: count me']);
      await h.expectStatus(page, 'waiting');
      const [answer] = (await h.apiMessages(id)).filter((m) => m.role === 'assistant');
      // The fake model reports 10 input and 5 output tokens per call.
      assert.equal(answer.usage.output_tokens, 5);
      await h.expectText(h.messages(page, 'assistant').first().getByTestId('message-usage'), '5 tokens out');
      await h.expectText(h.byId(page, 'usage'), 'This chat: 10 in · 5 out');
      assert.ok(await h.byId(page, 'usage').isVisible(), 'the spend shows at every width');
      const label = await h.until('the context label', () => h.textOf(h.byId(page, 'context-label')), { accept: (v) => /^Context \d+% of \d+(\.\d)?[kM]?$/.test(v || '') });
      assert.ok(label);
      assert.ok(await h.byId(page, 'context-meter').isVisible());
    }, v.options);
  });

  test(`a long answer with code fits the screen, and "scroll to bottom" comes back to the end (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      const lines = Array.from({ length: 60 }, (_, i) => `line ${i + 1} ${'word '.repeat(8)}`);
      const code = '```js\n' + `const x = "${'a very long line of code '.repeat(12)}";\n` + '```';
      const text = `${lines.join('\n\n')}\n\n${code}\n\n${'x'.repeat(300)}`;
      await h.createChat(page, text);
      await h.until('the long answer', async () => (await h.messageTexts(page, 'assistant')).length === 1, { timeout: h.SLOW_WAIT });
      await h.expectStatus(page, 'waiting');
      assert.equal(await scrollsSideways(page), false);
      const button = h.byId(page, 'scroll-bottom');
      assert.equal(await button.isVisible(), false, 'at the end: no button');
      await page.locator('.scroller').evaluate((el) => { el.scrollTop = 0; });
      await button.waitFor({ state: 'visible' });
      await button.click();
      await h.until('the end of the chat', () => page.locator('.scroller').evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight < 40));
      await button.waitFor({ state: 'hidden' });
    }, v.options);
  });
}

for (const v of TWO) {
  test(`copy message puts the answer's Markdown on the clipboard (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      await h.createChat(page, 'some **bold** and `code`');
      await h.expectMessageTexts(page, 'assistant', ['echo: some bold and code']);
      const copy = h.messages(page, 'assistant').first().getByTestId('copy-message');
      await copy.click();
      await h.expectText(copy, 'Copied');
      assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'echo: some **bold** and `code`');
      // A user message too.
      await h.messages(page, 'user').first().getByTestId('copy-message').click();
      await h.until('the user text on the clipboard', () => page.evaluate(() => navigator.clipboard.readText()), {
        accept: (text) => text === 'some **bold** and `code`',
      });
    }, { ...v.options, permissions: ['clipboard-read', 'clipboard-write'] });
  });

  test(`when the server is unreachable a banner says so and the actions wait (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page, context) => {
      await context.addInitScript(SOCKET_SWITCH);
      await h.signIn(page);
      await h.createChat(page, 'slow while the server goes away');
      await h.expectStatus(page, 'running');
      await h.expectConnection(page, 'live');
      const banner = h.byId(page, 'connection-banner');
      assert.equal(await banner.isVisible(), false);
      await cutServer(page);
      await banner.waitFor({ state: 'visible' });
      assert.equal(await h.textOf(banner), "Can't reach the server — retrying…");
      // Nothing can be sent, stopped or steered meanwhile.
      await h.until('Stop disabled', () => h.byId(page, 'interrupt').isDisabled());
      assert.equal(await h.byId(page, 'send-options').isDisabled(), true);
      assert.equal(await h.byId(page, 'chat-menu').isDisabled(), true);
      await h.byId(page, 'composer-input').fill('not now');
      await h.byId(page, 'composer-input').press('Enter');
      assert.equal(await h.byId(page, 'composer-input').inputValue(), 'not now', 'the text is kept, not sent');
      assert.equal(await scrollsSideways(page), false);
      // Back: the banner goes and the actions come back.
      await restoreServer(page);
      await banner.waitFor({ state: 'hidden', timeout: h.ms(30_000) });
      await h.expectConnection(page, 'live', { timeout: h.ms(30_000) });
      await h.until('the menu usable again', () => h.byId(page, 'chat-menu').isEnabled());
      await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });
      await h.byId(page, 'composer-input').press('Enter');
      await h.expectMessageTexts(page, 'user', ['slow while the server goes away', 'not now'], { timeout: h.SLOW_WAIT });
    }, v.options);
  });

  test(`the retry banner counts down live (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page, context) => {
      await context.addInitScript(SOCKET_SWITCH);
      await h.signIn(page);
      const id = await h.createChat(page, 'overloaded for a while');
      const banner = h.byId(page, 'retry-banner');
      await banner.waitFor({ timeout: h.SLOW_WAIT });
      assert.match(await h.textOf(banner.locator('.countdown')), /^retrying (in \d+ s|now…)$/);
      // No new events (the live view is cut; the list still loads): the
      // countdown runs on its own, second by second.
      await cutServer(page, { rest: false });
      await page.evaluate(() => {
        document.querySelector('[data-testid="retry-banner"] .countdown').dataset.until = new Date(Date.now() + 12_500).toISOString();
      });
      const first = await h.until('the countdown from 12 s', () => h.textOf(banner.locator('.countdown')), { accept: (v) => /^retrying in 1[0-3] s$/.test(v || '') });
      const later = await h.until('the countdown to go down', () => h.textOf(banner.locator('.countdown')), {
        accept: (v) => /^retrying in \d+ s$/.test(v || '') && Number(v.match(/\d+/)[0]) < Number(first.match(/\d+/)[0]),
        timeout: h.ms(5_000),
      });
      assert.ok(later);
      await restoreServer(page);
      await h.api('POST', `/api/v2/chats/${id}/interrupt`);
      await h.expectApiStatus(id, 'waiting');
    }, v.options);
  });

  test(`an unknown chat has a page that says so, with a way back (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      await page.goto(`${h.CHATD_URL}/#/chats/00000000-0000-4000-8000-000000000000`);
      const notFound = h.byId(page, 'chat-not-found');
      await notFound.waitFor();
      assert.match(await h.textOf(notFound), /This chat doesn't exist or you don't have access/);
      assert.equal(await h.byId(page, 'composer-input').count(), 0, 'no half-built chat');
      assert.equal(await h.byId(page, 'toast').count(), 0);
      assert.equal(await scrollsSideways(page), false);
      await h.byId(page, 'not-found-back').click();
      await h.until('the new-chat form', () => page.evaluate(() => location.hash === '#/'));
      await h.byId(page, 'composer-input').waitFor();
    }, v.options);
  });

  test(`a wrong token is said in the sign-in form (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await page.goto(h.CHATD_URL + '/');
      await h.byId(page, 'token-input').fill('chatd_not_a_real_token');
      await h.byId(page, 'sign-in').click();
      const error = h.byId(page, 'signin-error');
      await error.waitFor();
      assert.match(await h.textOf(error), /token was not accepted/);
      assert.equal(await h.byId(page, 'token-input').getAttribute('aria-invalid'), 'true');
      assert.equal(await h.byId(page, 'toast').count(), 0, 'no toast');
      // The right token then signs in, and the error goes.
      await h.signIn(page);
      assert.equal(await page.evaluate(() => document.querySelector('[data-testid="signin-error"]').hidden), true);
    }, v.options);
  });

  test(`the model picker lists each model once, with its whole name (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      await h.openSidebar(page);
      await h.byId(page, 'new-chat').click();
      const models = await h.api('GET', '/api/v2/chats/models');
      const select = h.byId(page, 'new-chat-model');
      const options = await h.until('the models', () => select.evaluate((el) => [...el.options].map((o) => ({ value: o.value, label: o.textContent }))), {
        accept: (list) => list.length === models.length,
      });
      assert.deepEqual(options.map((o) => o.value).sort(), models.map((m) => m.id).sort(), 'one option per model');
      assert.equal(new Set(options.map((o) => o.label)).size, options.length, 'no label twice');
      assert.ok(options.every((o) => !/default/i.test(o.label)), JSON.stringify(options));
      // The server's default model is the one picked.
      assert.equal(await select.inputValue(), models.find((m) => m.is_default).id);
      // The picked label is not cut off: its text is narrower than the field
      // (less the room of the arrow).
      const fit = await select.evaluate((el) => {
        const probe = document.createElement('span');
        probe.style.cssText = 'position:absolute;visibility:hidden;white-space:nowrap';
        probe.style.font = getComputedStyle(el).font;
        probe.textContent = el.options[el.selectedIndex].textContent;
        document.body.append(probe);
        const text = probe.getBoundingClientRect().width;
        probe.remove();
        return { text, field: el.clientWidth };
      });
      assert.ok(fit.text + 20 <= fit.field, `label ${fit.text} px in a ${fit.field} px field`);
    }, v.options);
  });

  test(`the settings dialog picks the theme, kept across a reload (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
      const system = await background();
      const other = v.options.colorScheme === 'dark' ? 'light' : 'dark';
      await h.byId(page, 'open-settings').click();
      await h.byId(page, 'settings-dialog').waitFor();
      assert.equal(await h.byId(page, 'theme-system').isChecked(), true);
      await h.byId(page, `theme-${other}`).check();
      await h.until('the other palette', async () => (await background()) !== system);
      assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), other);
      await h.byId(page, 'settings-close').click();
      await page.reload();
      await h.byId(page, 'username').waitFor({ state: 'visible' });
      assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), other);
      assert.notEqual(await background(), system);
      await h.byId(page, 'open-settings').click();
      assert.equal(await h.byId(page, `theme-${other}`).isChecked(), true);
      await h.byId(page, 'theme-system').check();
      await h.until('the system palette again', async () => (await background()) === system);
      await h.byId(page, 'settings-close').click();
    }, v.options);
  });

  test(`export as Markdown and as JSON download the chat (${v.name})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    const probe = await h.api('POST', '/api/v2/chats', { content: [{ type: 'text', text: 'export me' }] });
    await h.expectApiStatus(probe.id, 'waiting', { timeout: h.SLOW_WAIT });
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page);
      await page.goto(`${h.CHATD_URL}/#/chats/${probe.id}`);
      await h.expectMessageTexts(page, 'assistant', ['echo: export me']);
      for (const [testid, check] of [
        ['export-markdown', (text) => assert.match(text, /echo: export me/)],
        ['export-json', (text) => assert.ok(JSON.stringify(JSON.parse(text)).includes('echo: export me'))],
      ]) {
        const [download] = await Promise.all([page.waitForEvent('download'), h.chatMenu(page, testid)]);
        const stream = await download.createReadStream();
        const chunks = [];
        for await (const chunk of stream) chunks.push(chunk);
        check(Buffer.concat(chunks).toString('utf8'));
        // The name the server gives it (Content-Disposition): the title and the format's extension.
        assert.match(download.suggestedFilename(), testid === 'export-json' ? /\.json$/ : /\.md$/);
      }
    }, { ...v.options, acceptDownloads: true });
  });
}
