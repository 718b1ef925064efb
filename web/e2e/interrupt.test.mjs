// Interrupting a reply, sending with interrupt, editing a user message.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

/** Asserts `text` is a non-empty start of `full`, cut short. */
function assertCutShort(text, full) {
  assert.ok(
    text.length > 0 && text.length < full.length && full.startsWith(text),
    `expected a cut-short start of ${JSON.stringify(full)}, got ${JSON.stringify(text)}`,
  );
}

test('interrupting a slow reply lands in waiting and keeps the text streamed so far', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const full = 'echo: slow reply please';
    await h.createChat(page, 'slow reply please');
    await h.expectStatus(page, 'running');
    await h.expectPartialPreview(page, full);

    const interrupt = h.byId(page, 'interrupt');
    await h.until('the interrupt button to be enabled', () => interrupt.isEnabled());
    await interrupt.click();
    await h.expectStatus(page, 'waiting');
    // Server behaviour (spec FinishInterruption): the partial step is kept
    // as the assistant message.
    const [kept] = await h.until('the interrupted reply', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts.length === 1,
    });
    assertCutShort(kept, full);
    await h.byId(page, 'message-preview').waitFor({ state: 'hidden' });
    await h.until('the interrupt button to be disabled', async () => !(await interrupt.isEnabled()));
    assert.deepEqual(await h.messageTexts(page, 'user'), ['slow reply please']);
  });
});

test('sending with interrupt cuts the slow reply short and answers the new message', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const full = 'echo: slow story';
    await h.createChat(page, 'slow story');
    await h.expectPartialPreview(page, full);

    await h.send(page, 'urgent', 'send-interrupt');
    const assistant = await h.until('the answer to the urgent message', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts.at(-1) === 'echo: urgent',
      timeout: h.SLOW_WAIT,
    });
    await h.expectStatus(page, 'waiting');
    await h.expectMessageTexts(page, 'user', ['slow story', 'urgent']);
    assert.equal(assistant.length, 2, JSON.stringify(assistant));
    assertCutShort(assistant[0], full);
  });
});

test('editing a user message drops the later messages and answers the edited text', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'first question');
    await h.expectMessageTexts(page, 'assistant', ['echo: first question']);
    await h.expectStatus(page, 'waiting');
    await h.send(page, 'second question');
    await h.expectMessageTexts(page, 'assistant', ['echo: first question', 'echo: second question']);
    await h.expectStatus(page, 'waiting');

    // Cancel leaves everything as it was.
    const firstUser = h.messages(page, 'user').first();
    await firstUser.getByTestId('edit-message').click();
    await h.byId(page, 'edit-input').fill('not this');
    await h.byId(page, 'edit-cancel').click();
    await h.byId(page, 'edit-input').waitFor({ state: 'hidden' });
    await h.expectMessageTexts(page, 'user', ['first question', 'second question']);

    await h.messages(page, 'user').first().getByTestId('edit-message').click();
    const input = h.byId(page, 'edit-input');
    assert.equal(await input.inputValue(), 'first question');
    await input.fill('edited question');
    await h.byId(page, 'edit-save').click();

    await h.expectMessageTexts(page, 'user', ['edited question']);
    await h.expectMessageTexts(page, 'assistant', ['echo: edited question']);
    await h.expectStatus(page, 'waiting');
    const all = await h.messageTexts(page);
    assert.ok(!all.some((m) => m.includes('second question')), JSON.stringify(all));
  });
});
