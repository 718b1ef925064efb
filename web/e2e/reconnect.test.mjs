// The live view survives a page reload (restart.test.mjs: a server restart).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

test('a reload restores the open chat with all its messages', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'before the reload');
    await h.expectMessageTexts(page, 'assistant', ['echo: before the reload']);
    await h.expectStatus(page, 'waiting');
    await h.send(page, 'and more');
    await h.expectMessageTexts(page, 'assistant', ['echo: before the reload', 'echo: and more']);
    await h.expectStatus(page, 'waiting');
    assert.match(page.url(), new RegExp(`#/chats/${id}$`));

    await page.reload();
    // Still signed in (the token is in localStorage), same chat, same history.
    await h.expectConnection(page, 'live');
    assert.equal(await h.byId(page, 'chat-view').getAttribute('data-chat-id'), id);
    await h.expectMessageTexts(page, 'user', ['before the reload', 'and more']);
    await h.expectMessageTexts(page, 'assistant', ['echo: before the reload', 'echo: and more']);
    await h.expectStatus(page, 'waiting');

    // And it is live: a new message is answered.
    await h.send(page, 'after the reload');
    await h.expectMessageTexts(page, 'assistant', ['echo: before the reload', 'echo: and more', 'echo: after the reload']);
  });
});

test('a reload in the middle of a streamed reply picks the live stream up again', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const full = 'echo: slow and steady';
    const id = await h.createChat(page, 'slow and steady');
    await h.expectPartialPreview(page, full);

    await page.reload();
    assert.equal(await h.byId(page, 'chat-view').getAttribute('data-chat-id'), id);
    await h.expectStatus(page, 'running');
    // Parts keep arriving after the reload (the recorder starts afresh).
    await h.expectPartialPreview(page, full);
    await h.expectMessageTexts(page, 'assistant', [full], { timeout: h.SLOW_WAIT });
    await h.expectStatus(page, 'waiting');
  });
});
