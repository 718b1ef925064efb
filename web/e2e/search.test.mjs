// Search inside messages (issue 34 part 5; API.md "Sign-in, search,
// sharing and export"): Ctrl+K (or the sidebar's "Search messages") opens
// the search; hits come best first with the chat's title and the snippet,
// whose matches are <mark> and whose other text stays text (an HTML tag in
// a message is shown, never parsed); "Load more" pages with `next`; opening
// a hit opens the chat, loads the omitted middle of a long chat until the
// message is there, scrolls to it and highlights it. The long chat is made
// by an import (160 messages: the window shows the first 20 and the last
// 100). At desktop width (light) and at 390 px (dark).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();
const PAIRS = 80;
const TARGET_PAIR = 15; // message 30 of 160: in the omitted middle (20..59)

/** A chatd JSON export of a long chat; every user message says `pelican`, one also `word`. */
function longExport(title, word) {
  const messages = [];
  for (let i = 0; i < PAIRS; i++) {
    const text = i === TARGET_PAIR
      ? `Round ${i}: the pelican met a ${word} <img src=x onerror="window.__xss=1"> by the sea.`
      : `Round ${i}: the pelican flew over the harbour and counted the boats one by one.`;
    messages.push({ role: 'user', content: [{ type: 'text', text }] });
    messages.push({ role: 'assistant', content: [{ type: 'text', text: `Answer ${i}: noted.` }], finish_reason: 'stop' });
  }
  return { format: 'chatd.chat', version: 1, exported_at: new Date().toISOString(), chat: { title, labels: {} }, messages };
}

const noSideScroll = (page) => page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth);

for (const [label, options] of [['desktop, light', { colorScheme: 'light' }], ['390 px, dark', { ...h.PHONE, colorScheme: 'dark' }]]) {
  test(`search: ranked hits with marked snippets, load more, a hit opens its message in a long chat (${label})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    const { token } = await h.createUser('search');
    const word = `quokka${Math.random().toString(36).slice(2, 8)}`;
    const imported = await h.apiAs(token, 'POST', '/api/v2/chats/import', longExport('Harbour notes', word));
    assert.equal(imported.status, 201, JSON.stringify(imported.body));
    const chat = imported.body;
    const { messages: all } = (await h.apiAs(token, 'GET', `/api/v2/chats/${chat.id}/messages?limit=200`)).body;
    const target = all[TARGET_PAIR * 2];
    assert.match(target.content[0].text, new RegExp(word));

    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page, token);
      if (options.isMobile) {
        await h.openSidebar(page);
        await h.byId(page, 'open-search').click();
      } else {
        await page.keyboard.press('Control+k');
      }
      const dialog = h.byId(page, 'search-dialog');
      await dialog.waitFor();
      assert.equal(await h.byId(page, 'search-input').evaluate((el) => el === document.activeElement), true);

      // One hit: the chat's title and the snippet with the word marked.
      await h.byId(page, 'search-input').fill(word);
      await h.expectCount(h.byId(page, 'search-hit'), 1);
      const hit = h.byId(page, 'search-hit');
      assert.equal(await hit.getAttribute('data-message-id'), String(target.id));
      assert.equal(await h.textOf(hit.getByTestId('search-hit-title')), 'Harbour notes');
      const snippet = hit.getByTestId('search-hit-snippet');
      assert.deepEqual(await snippet.locator('mark').allTextContents(), [word]);
      // The tag in the message is text: no element but the marks.
      assert.deepEqual(await snippet.evaluate((el) => [...el.querySelectorAll('*')].map((x) => x.tagName)), ['MARK']);
      assert.equal(await page.evaluate(() => window.__xss), undefined);
      assert.ok(await noSideScroll(page), 'the search dialog fits');

      // Many hits: a page, then "Load more".
      await h.byId(page, 'search-input').fill('pelican');
      await h.expectCount(h.byId(page, 'search-hit'), 20);
      await h.byId(page, 'search-more').click();
      await h.until('a second page of hits', () => h.byId(page, 'search-hit').count(), { accept: (n) => n > 20 });
      const ids = await h.byId(page, 'search-hit').evaluateAll((els) => els.map((el) => el.dataset.messageId));
      assert.equal(new Set(ids).size, ids.length, 'no hit twice');

      // Opening the hit: the chat, the message loaded from the omitted middle, in view, highlighted.
      await h.byId(page, 'search-input').fill(word);
      await h.expectCount(h.byId(page, 'search-hit'), 1);
      await h.byId(page, 'search-hit-link').click();
      await page.locator(`[data-testid="chat-view"][data-chat-id="${chat.id}"]`).waitFor();
      const found = page.locator(`[data-message-id="${target.id}"]`);
      await found.waitFor();
      await h.until('the message highlighted', () => found.getAttribute('data-search-hit'), { accept: (v) => v === 'true' });
      const inView = await found.evaluate((el) => {
        const box = el.getBoundingClientRect();
        const area = el.closest('.scroller').getBoundingClientRect();
        return box.bottom > area.top && box.top < area.bottom;
      });
      assert.equal(inView, true, 'the message is in view');
      assert.equal(await dialog.count(), 0, 'the search dialog closed');
      assert.ok(await noSideScroll(page), 'the chat fits');
    }, options);
  });
}
