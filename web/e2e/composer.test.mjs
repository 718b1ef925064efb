// The composer: Enter sends, Shift+Enter is a new line, an IME's Enter
// never sends; long pastes collapse (in the composer and in the sent
// message); the model picker works on every message and is remembered per
// chat.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

const OTHER_MODEL = 'Other (fake)';
let fakeModelId;
let otherModelId;

before(async () => {
  // A second model config on the same fake provider, so that there is a
  // choice (admin API; idempotent).
  const configs = await h.api('GET', '/api/v2/chats/model-configs');
  const fake = configs.find((m) => m.display_name === 'Fake model');
  assert.ok(fake, JSON.stringify(configs));
  fakeModelId = fake.id;
  const other = configs.find((m) => m.display_name === OTHER_MODEL)
    ?? (await h.api('POST', '/api/v2/chats/model-configs', {
      provider_id: fake.provider_id,
      model: 'fake-model-other',
      display_name: OTHER_MODEL,
      context_limit: 100000,
    }));
  otherModelId = other.id;
});

test('Enter sends, Shift+Enter adds a line, and an Enter that ends an IME composition does not send', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    // The first message, sent with Enter from the new-chat form.
    await h.openSidebar(page);
    await h.byId(page, 'new-chat').click();
    const input = h.byId(page, 'composer-input');
    await input.fill('first by enter');
    await input.press('Enter');
    await h.byId(page, 'chat-view').waitFor();
    await h.expectMessageTexts(page, 'assistant', ['echo: first by enter']);
    await h.expectStatus(page, 'waiting');

    // Shift+Enter is a new line in the field, not a send.
    await input.focus();
    await page.keyboard.type('line one');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('line two');
    assert.equal(await input.inputValue(), 'line one\nline two');
    assert.deepEqual(await h.messageTexts(page, 'user'), ['first by enter']);

    // An Enter that confirms an IME composition (isComposing, keyCode 229)
    // belongs to the IME.
    const prevented = await input.evaluate((el) => {
      const composing = new KeyboardEvent('keydown', { key: 'Enter', code: 'Enter', isComposing: true, bubbles: true, cancelable: true });
      el.dispatchEvent(composing);
      const legacy = new KeyboardEvent('keydown', { key: 'Enter', code: 'Enter', keyCode: 229, bubbles: true, cancelable: true });
      el.dispatchEvent(legacy);
      return [composing.defaultPrevented, legacy.defaultPrevented];
    });
    assert.deepEqual(prevented, [false, false]);
    assert.equal(await input.inputValue(), 'line one\nline two');

    // Enter sends what is there, once.
    await input.press('Enter');
    await h.expectMessageTexts(page, 'user', ['first by enter', 'line one\nline two']);
    // (The answer is Markdown: a single newline is a line break.)
    await h.expectRenderedTexts(page, 'assistant', ['echo: first by enter', 'echo: line one\nline two']);
    assert.equal(await input.inputValue(), '');
    await h.expectStatus(page, 'waiting');
    assert.equal((await h.messageTexts(page, 'user')).length, 2);
  });
});

test('a long paste is collapsed into a block in the composer and the sent message is collapsed with "show all"', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'paste target');
    await h.expectStatus(page, 'waiting');
    const log = Array.from({ length: 60 }, (_, i) => `log line ${i + 1}: something happened`).join('\n');
    await page.evaluate((text) => navigator.clipboard.writeText(text), log);
    const input = h.byId(page, 'composer-input');
    await input.focus();
    await page.keyboard.press('ControlOrMeta+V');

    const block = h.byId(page, 'pasted-block');
    await block.waitFor();
    assert.equal(await input.inputValue(), '', 'the paste went into the block, not the field');
    assert.equal(await h.textOf(block.getByTestId('pasted-size')), `60 lines · ${log.length.toLocaleString('en-US')} characters`);
    const pasted = block.getByTestId('pasted-text');
    const clipped = () => pasted.evaluate((el) => el.scrollHeight > el.clientHeight + 1);
    assert.ok(await clipped(), 'collapsed to its first lines');
    const toggle = block.getByTestId('pasted-toggle');
    assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
    await toggle.click();
    assert.equal(await h.byId(page, 'pasted-toggle').getAttribute('aria-expanded'), 'true');
    await h.expectText(h.byId(page, 'pasted-toggle'), 'Collapse');

    // A short paste goes into the field as usual.
    await page.evaluate(() => navigator.clipboard.writeText('what went wrong?'));
    await input.focus();
    await page.keyboard.press('ControlOrMeta+V');
    assert.equal(await input.inputValue(), 'what went wrong?');
    await h.expectCount(h.byId(page, 'pasted-block'), 1);

    // Sent: the pasted block, then the typed text.
    await input.press('Enter');
    const sent = `${log}\n\nwhat went wrong?`;
    await h.expectMessageTexts(page, 'user', ['paste target', sent]);
    await h.expectCount(h.byId(page, 'pasted-block'), 0);
    await h.expectRenderedTexts(page, 'assistant', ['echo: paste target', `echo: ${sent}`]);

    // In the conversation the long user message is collapsed; "Show all"
    // opens it. (The assistant's echo is Markdown and not collapsed.)
    const message = h.messages(page, 'user').last();
    const text = message.getByTestId('message-text');
    assert.ok(await text.evaluate((el) => el.scrollHeight > el.clientHeight + 1), 'collapsed');
    const expand = message.getByTestId('message-expand');
    assert.equal(await expand.textContent(), 'Show all');
    await expand.click();
    await h.expectText(expand, 'Show less');
    assert.equal(await expand.getAttribute('aria-expanded'), 'true');
    assert.ok(await text.evaluate((el) => el.scrollHeight <= el.clientHeight + 1), 'shown in full');
    // A short message has no toggle.
    assert.equal(await h.messages(page, 'user').first().getByTestId('message-expand').count(), 0);

    // "Remove" drops a pasted block.
    await page.evaluate((text) => navigator.clipboard.writeText(text), log);
    await input.focus();
    await page.keyboard.press('ControlOrMeta+V');
    await h.byId(page, 'pasted-block').waitFor();
    await h.byId(page, 'pasted-remove').click();
    await h.expectCount(h.byId(page, 'pasted-block'), 0);
  }, { permissions: ['clipboard-read', 'clipboard-write'] });
});

test('the model picker applies to every message and is remembered per chat', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'on the default model');
    await h.expectMessageTexts(page, 'assistant', ['echo: on the default model']);
    await h.expectStatus(page, 'waiting');
    const picker = h.byId(page, 'composer-model');
    await h.until('the picker to show the chat\'s model', () => picker.inputValue(), { accept: (v) => v === fakeModelId });

    await picker.selectOption({ label: OTHER_MODEL });
    await h.send(page, 'on the other model');
    await h.expectMessageTexts(page, 'assistant', ['echo: on the default model', 'echo: on the other model']);
    await h.expectStatus(page, 'waiting');
    let stored = await h.apiMessages(id);
    const answers = stored.filter((m) => m.role === 'assistant');
    assert.deepEqual(answers.map((m) => m.model_config_id), [fakeModelId, otherModelId]);
    assert.equal((await h.api('GET', `/api/v2/chats/${id}`)).last_model_config_id, otherModelId);
    // Each answer says which model wrote it.
    await h.until('the model names on the answers', () => h.messages(page, 'assistant').getByTestId('message-model').allTextContents(), {
      accept: (names) => JSON.stringify(names) === JSON.stringify(['Fake model', OTHER_MODEL]),
    });

    // The choice survives a reload, and the next message uses it.
    await page.reload();
    await h.expectStatus(page, 'waiting');
    await h.until('the remembered model', () => h.byId(page, 'composer-model').inputValue(), { accept: (v) => v === otherModelId });
    // Back to the default model for one message.
    await h.byId(page, 'composer-model').selectOption(fakeModelId);
    await h.send(page, 'back to the default');
    await h.expectMessageTexts(page, 'assistant', ['echo: on the default model', 'echo: on the other model', 'echo: back to the default']);
    stored = await h.apiMessages(id);
    assert.equal(stored.filter((m) => m.role === 'assistant').at(-1).model_config_id, fakeModelId);

    // Another chat keeps its own choice.
    await h.createChat(page, 'another chat');
    await h.expectStatus(page, 'waiting');
    await h.until('the new chat\'s own model', () => h.byId(page, 'composer-model').inputValue(), { accept: (v) => v === fakeModelId });
  });
});

test('the "Advanced" section is collapsed; its system prompt and tools go with the new chat, and bad tools JSON opens it with the error', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.openSidebar(page);
    await h.byId(page, 'new-chat').click();
    const advanced = h.byId(page, 'advanced');
    assert.equal(await advanced.evaluate((el) => el.open), false, 'collapsed at first');
    assert.equal(await h.byId(page, 'new-chat-tools').isVisible(), false);

    // Bad tools: nothing is created, the section opens on the error.
    await h.openAdvanced(page);
    await h.byId(page, 'new-chat-tools').fill('[{"name": "x"}]');
    await advanced.locator('summary').click();
    assert.equal(await advanced.evaluate((el) => el.open), false);
    let posts = 0;
    page.on('request', (r) => {
      if (r.method() === 'POST' && r.url().endsWith('/api/v2/chats')) posts += 1;
    });
    await h.byId(page, 'composer-input').fill('with bad tools');
    await h.byId(page, 'composer-input').press('Enter');
    await h.expectText(h.byId(page, 'new-chat-tools-error'), 'Tool 1 needs an "input_schema" object.');
    assert.equal(await advanced.evaluate((el) => el.open), true);
    assert.equal(await page.evaluate(() => document.activeElement?.dataset.testid), 'new-chat-tools');
    assert.equal(posts, 0);

    // Fixed, with a system prompt: both are sent.
    const tools = [{ name: 'lookup', description: 'Looks up a word', input_schema: { type: 'object' } }];
    await h.byId(page, 'new-chat-tools').fill(JSON.stringify(tools));
    await h.byId(page, 'new-chat-system-prompt').fill('Answer in French.');
    const request = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/api/v2/chats'));
    await h.byId(page, 'send-queue').click();
    const body = (await request).postDataJSON();
    assert.equal(body.system_prompt, 'Answer in French.');
    assert.deepEqual(body.dynamic_tools, tools);
    await h.byId(page, 'chat-view').waitFor();
    const id = await h.byId(page, 'chat-view').getAttribute('data-chat-id');
    assert.deepEqual((await h.api('GET', `/api/v2/chats/${id}`)).dynamic_tools, tools);
    await h.expectStatus(page, 'waiting');
  });
});
