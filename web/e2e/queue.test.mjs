// The queue: sending while the chat is busy, deleting and promoting queued
// messages. `slow` messages make the fake model answer over ~10 s.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

test('a message queued while the chat is busy waits in the queue and is answered after the current reply', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'slow first');
    await h.expectStatus(page, 'running');
    await h.expectPartialPreview(page, 'echo: slow first');

    await h.send(page, 'then this', 'send-queue');
    await h.expectQueue(page, ['then this']);
    // Still busy with the first reply: nothing committed from the model yet.
    assert.equal(await h.statusOf(h.byId(page, 'chat-status')), 'running');
    assert.deepEqual(await h.messageTexts(page, 'assistant'), []);

    await h.expectMessageTexts(page, 'assistant', ['echo: slow first', 'echo: then this'], { timeout: h.SLOW_WAIT });
    await h.expectMessageTexts(page, 'user', ['slow first', 'then this']);
    await h.expectQueue(page, []);
    await h.expectStatus(page, 'waiting');
  });
});

test('queued messages can be deleted, and promoting one interrupts the reply and answers it next', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const full = 'echo: slow start';
    await h.createChat(page, 'slow start');
    await h.expectStatus(page, 'running');
    await h.expectPartialPreview(page, full);

    await h.send(page, 'second', 'send-queue');
    await h.expectQueue(page, ['second']);
    await h.send(page, 'third', 'send-queue');
    await h.expectQueue(page, ['second', 'third']);
    const ids = await h.byId(page, 'queue').getByTestId('queued-message').evaluateAll((els) =>
      els.map((el) => el.getAttribute('data-queued-id')),
    );
    assert.equal(ids.length, 2);
    for (const id of ids) assert.match(id ?? '', /^[1-9][0-9]*$/);

    await h.queuedMessage(page, 'second').getByTestId('queue-delete').click();
    await h.expectQueue(page, ['third']);

    // Promote: the slow reply is interrupted (its partial text is kept) and
    // the promoted message is answered next.
    await h.queuedMessage(page, 'third').getByTestId('queue-promote').click();
    await h.expectQueue(page, []);
    await h.expectMessageTexts(page, 'user', ['slow start', 'third'], { timeout: h.SLOW_WAIT });
    const assistant = await h.until(
      'the answer to the promoted message',
      () => h.messageTexts(page, 'assistant'),
      { accept: (texts) => texts.at(-1) === 'echo: third', timeout: h.SLOW_WAIT },
    );
    await h.expectStatus(page, 'waiting');
    const earlier = assistant.slice(0, -1);
    assert.ok(earlier.length <= 1, `at most the interrupted reply before: ${JSON.stringify(assistant)}`);
    for (const text of earlier) {
      assert.ok(full.startsWith(text) && text.length < full.length, `a cut-short reply: ${JSON.stringify(text)}`);
    }
    assert.ok(!assistant.includes('echo: second'), `the deleted message was not answered: ${JSON.stringify(assistant)}`);
  });
});
