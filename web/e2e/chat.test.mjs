// Sign-in, a new chat with a streamed reply, sign-out.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

test('signs in with a token, creates a chat and streams the echo of its first message', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const text = 'hello from the browser';
    const reply = `echo: ${text}`;
    const id = await h.createChat(page, text);
    assert.match(id, /^[0-9a-f-]{36}$/);

    // The reply streams in ~10 parts over ~1 s: the preview shows a part of
    // it before the committed message replaces it.
    await h.expectPartialPreview(page, reply);
    await h.expectMessageTexts(page, 'assistant', [reply]);
    await h.expectMessageTexts(page, 'user', [text]);
    await h.expectStatus(page, 'waiting');
    await h.expectSeenInOrder(page, 'chat-status', ['running', 'waiting']);
    await h.byId(page, 'message-preview').waitFor({ state: 'hidden' });
    await h.expectConnection(page, 'live');
    assert.equal(await h.byId(page, 'chat-view').getAttribute('data-chat-id'), id);

    // The live view authenticates with the `chatd.bearer.<token>`
    // subprotocol (browsers cannot set headers), never in the URL, and the
    // server answers with `chatd`.
    const sockets = await h.openedSockets(page);
    const live = sockets.filter((s) => s.url.includes(`/api/v2/chats/${id}/stream`));
    assert.ok(live.length >= 1, JSON.stringify(sockets));
    for (const s of live) {
      assert.ok(s.protocols.includes(`chatd.bearer.${h.CHATD_TOKEN}`), JSON.stringify(s.protocols));
      assert.ok(!s.url.includes(h.CHATD_TOKEN), s.url);
    }
    assert.equal(live.at(-1).protocol, 'chatd');

    // The chat list shows it, waiting, with the title the fake model wrote.
    await h.expectListStatus(page, id, 'waiting');
    await h.expectText(h.chatItem(page, id).getByTestId('chat-title'), 'A chat with the fake model');
  });
});

test('a chat on a chosen model: a second message is answered, the status goes running then waiting, usage adds up', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'one', { model: 'Fake model' });
    const chat = await h.api('GET', `/api/v2/chats/${id}`);
    const models = await h.api('GET', '/api/v2/chats/models');
    const fake = models.find((m) => m.display_name === 'Fake model');
    assert.ok(fake, JSON.stringify(models));
    assert.equal(chat.last_model_config_id, fake.id);
    await h.expectMessageTexts(page, 'assistant', ['echo: one']);
    await h.expectStatus(page, 'waiting');

    await h.send(page, 'two');
    await h.expectMessageTexts(page, 'user', ['one', 'two']);
    await h.expectMessageTexts(page, 'assistant', ['echo: one', 'echo: two']);
    await h.expectStatus(page, 'waiting');
    await h.expectSeenInOrder(page, 'chat-status', ['running', 'waiting', 'running', 'waiting']);
    // The fake reports 10 input and 5 output tokens per answer.
    await h.expectText(h.byId(page, 'usage'), 'This chat: 20 in · 10 out');
  });
});

test('signing out forgets the token and shows the sign-in form again', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.byId(page, 'sign-out').click();
    await h.byId(page, 'token-input').waitFor({ state: 'visible' });
    await page.reload();
    await h.byId(page, 'token-input').waitFor({ state: 'visible' });
    assert.equal(await page.evaluate(() => localStorage.getItem('chatd.token')), null);
  });
});
