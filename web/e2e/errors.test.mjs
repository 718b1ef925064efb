// Errors: a turn that fails (the fake answers HTTP 400 to messages with
// `fail`), retrying it, recovering with a new message; the toast of a
// request the server rejects.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

test('a failed turn shows the error banner; retry runs it again; a new message recovers', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'please fail');
    await h.expectStatus(page, 'error');
    const banner = h.byId(page, 'error-banner');
    await h.until('the error banner with the provider message', () => h.textOf(banner), {
      accept: (text) => text?.includes('fake LLM: told to fail by'),
    });
    await h.expectMessageTexts(page, 'user', ['please fail']);

    // Retry edits the last user message with its own content: the turn runs
    // again (and fails again, too fast for `running` to be on screen for
    // sure: the server's history version tells that it ran).
    const id = await h.byId(page, 'chat-view').getAttribute('data-chat-id');
    const before = await h.api('GET', `/api/v2/chats/${id}`);
    await banner.getByTestId('retry-button').click();
    await h.until('the server to have run the turn again', async () => {
      const chat = await h.api('GET', `/api/v2/chats/${id}`);
      return chat.history_version > before.history_version && chat.status === 'error';
    });
    await h.expectStatus(page, 'error');
    await h.until('the error banner again', () => h.textOf(banner), {
      accept: (text) => text?.includes('fake LLM: told to fail by'),
    });
    await h.expectMessageTexts(page, 'user', ['please fail']);

    await h.send(page, 'all good now');
    await h.expectMessageTexts(page, 'assistant', ['echo: all good now']);
    await h.expectStatus(page, 'waiting');
    await banner.waitFor({ state: 'hidden' });
  });
});

test('a request the server rejects shows its message in a toast', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'slow, do not archive me yet');
    await h.expectStatus(page, 'running');

    // Archiving a busy chat is a 409; the toast shows the server's message.
    await h.chatMenu(page, 'archive');
    const toast = await h.until('a toast', () => h.textOf(h.byId(page, 'toast')));
    const response = await fetch(`${h.CHATD_URL}/api/v2/chats/${id}`, {
      method: 'PATCH',
      headers: { Authorization: `Bearer ${h.CHATD_TOKEN}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ archived: true }),
    });
    assert.equal(response.status, 409);
    const { message } = await response.json();
    assert.ok(message && toast.includes(message), `toast ${JSON.stringify(toast)} has ${JSON.stringify(message)}`);
    assert.equal((await h.api('GET', `/api/v2/chats/${id}`)).archived, false);

    await h.byId(page, 'interrupt').click();
    await h.expectStatus(page, 'waiting');
  });
});
