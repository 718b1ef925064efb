// Steering and queue editing (API.md "Busy behaviours and the queue"): the
// composer's "Steer" beside "Queue" and "Send now" while a reply runs, the
// steer badge, steer messages answered before ordinary queued ones, editing
// a queued message in place, and dragging one to reorder the queue. `slow`
// messages make the fake model answer over ~10 s.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

test('a steer message sent while the reply runs is marked and answered before the ordinary queue', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'slow first');
    await h.expectStatus(page, 'running');
    // Stop is the one primary button; Steer is in the menu beside it, with "Send now".
    await h.until('the stop button', () => h.byId(page, 'interrupt').isVisible());
    await h.until('the steer item to be offered', () => h.byId(page, 'send-steer').evaluate((el) => !el.hidden));
    await h.byId(page, 'send-options').click();
    const steer = h.byId(page, 'send-steer');
    await h.until('the steer item to show', () => steer.isVisible());
    assert.ok(await h.byId(page, 'send-interrupt').isVisible(), 'beside "Send now"');

    await h.send(page, 'plain one', 'send-queue');
    await h.expectQueue(page, ['plain one']);
    await h.send(page, 'steer this way', 'send-steer');
    await h.expectQueue(page, ['plain one', 'steer this way']);
    await h.expectCount(h.queuedMessage(page, 'steer this way').getByTestId('queued-steer'), 1);
    await h.expectCount(h.queuedMessage(page, 'plain one').getByTestId('queued-steer'), 0);

    // The steer message goes first when the reply ends, then the queue.
    await h.expectMessageTexts(page, 'user', ['slow first', 'steer this way', 'plain one'], { timeout: h.SLOW_WAIT });
    await h.expectMessageTexts(page, 'assistant', ['echo: slow first', 'echo: steer this way', 'echo: plain one'], { timeout: h.SLOW_WAIT });
    await h.expectStatus(page, 'waiting');
    assert.equal(await steer.isVisible(), false, 'no steering an idle chat');
  });
});

test('a queued message can be edited in place and the queue reordered by dragging', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'slow start');
    await h.expectStatus(page, 'running');
    for (const text of ['one', 'two', 'three']) await h.send(page, text, 'send-queue');
    await h.expectQueue(page, ['one', 'two', 'three']);

    // Edit "two": the text and the steer flag; Escape would cancel.
    await h.queuedMessage(page, 'two').getByTestId('queue-edit').click();
    const input = h.byId(page, 'queue-edit-input');
    await input.fill('deux');
    await h.byId(page, 'queue-edit-save').click();
    await h.expectQueue(page, ['one', 'deux', 'three']);
    await h.queuedMessage(page, 'one').getByTestId('queue-edit').click();
    await h.byId(page, 'queue-edit-input').fill('discarded');
    await h.byId(page, 'queue-edit-input').press('Escape');
    await h.expectQueue(page, ['one', 'deux', 'three']);

    // Drag "three" onto "one": it becomes the next message.
    await h.queuedMessage(page, 'three').dragTo(h.queuedMessage(page, 'one'));
    await h.expectQueue(page, ['three', 'one', 'deux']);
    // The server has the same order.
    const chatId = new URL(page.url()).hash.split('/').pop();
    const page0 = await h.api('GET', `/api/v2/chats/${chatId}/messages?limit=1`);
    const texts = page0.queued_messages.map((q) => q.content[0].text);
    assert.deepEqual(texts, ['three', 'one', 'deux']);
    assert.deepEqual(page0.queued_messages.map((q) => q.position), [0, 1, 2]);

    await h.expectMessageTexts(page, 'user', ['slow start', 'three', 'one', 'deux'], { timeout: h.SLOW_WAIT * 2 });
    await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });
  });
});
