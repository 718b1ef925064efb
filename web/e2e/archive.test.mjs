// Archiving a chat moves it to the archived list; unarchiving brings it back.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

test('an archived chat leaves the chat list and is found under show-archived', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'archive me');
    await h.expectMessageTexts(page, 'assistant', ['echo: archive me']);
    await h.expectStatus(page, 'waiting');
    await h.expectListStatus(page, id, 'waiting');
    await h.chatItem(page, id).click();
    await h.until('the chat to open', async () => (await h.byId(page, 'chat-view').getAttribute('data-chat-id')) === id);

    await h.chatMenu(page, 'archive');
    await h.until('the server to have the chat archived', async () => (await h.api('GET', `/api/v2/chats/${id}`)).archived);
    if (!(await h.byId(page, 'chat-list').isVisible())) await page.goto(h.CHATD_URL + '/#/');
    const showArchived = h.byId(page, 'show-archived');
    await showArchived.uncheck();
    await h.expectCount(h.chatItem(page, id), 0);

    await showArchived.check();
    await h.expectCount(h.chatItem(page, id), 1);
    await h.chatItem(page, id).click();
    await h.until('the archived chat to open', async () => (await h.byId(page, 'chat-view').getAttribute('data-chat-id')) === id);
    await h.expectMessageTexts(page, 'assistant', ['echo: archive me']);

    await h.chatMenu(page, 'unarchive');
    await h.until('the server to have the chat unarchived', async () => !(await h.api('GET', `/api/v2/chats/${id}`)).archived);
    if (!(await h.byId(page, 'chat-list').isVisible())) await page.goto(h.CHATD_URL + '/#/');
    await h.byId(page, 'show-archived').uncheck();
    await h.expectCount(h.chatItem(page, id), 1);
    assert.equal(await h.statusOf(h.chatItem(page, id).getByTestId('status-badge')), 'waiting');
  });
});
