// Attachments (API.md "Files") and plan mode in the web UI: files attached
// with the picker or dropped on the composer are uploaded at once, shown as
// chips (images with a preview), and sent as file parts; the sent image is
// shown in the message and a text file reaches the model inline; the
// plan-mode toggles (new chat and chat header) set and clear `plan_mode`,
// and a dynamic tool marked `read_only` keeps the mark.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

// A 1×1 transparent PNG.
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
  'base64',
);

async function attachments(page) {
  return h.byId(page, 'attachments').locator('[data-testid="attachment"]');
}

async function expectReady(page, n) {
  await h.until(`${n} attachments uploaded`, async () => {
    const items = await attachments(page);
    const states = await items.evaluateAll((els) => els.map((el) => el.dataset.status));
    return states.length === n && states.every((s) => s === 'ready');
  });
}

test('files picked in the composer are uploaded with previews, sent, shown, and read by the model', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'first');
    await h.expectStatus(page, 'waiting');
    const chatId = await h.byId(page, 'chat-view').getAttribute('data-chat-id');

    await h.byId(page, 'file-input').setInputFiles([
      { name: 'dot.png', mimeType: 'image/png', buffer: PNG },
      { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('buy milk') },
    ]);
    await expectReady(page, 2);
    // The image has a preview; the text file has none.
    const preview = h.byId(page, 'attachment-preview');
    await h.expectCount(preview, 1);
    assert.equal(await preview.evaluate((img) => img.complete && img.naturalWidth), 1);

    // Removing one drops it from what is sent.
    await h.byId(page, 'file-input').setInputFiles([
      { name: 'extra.txt', mimeType: 'text/plain', buffer: Buffer.from('not sent') },
    ]);
    await expectReady(page, 3);
    await (await attachments(page)).filter({ hasText: 'extra.txt' }).getByTestId('attachment-remove').click();
    await expectReady(page, 2);

    await h.send(page, 'what are these?');
    await h.expectStatus(page, 'waiting');
    await h.expectCount(await attachments(page), 0);
    // The model read the text file inline (the fake LLM echoes the text).
    const echoes = await h.until('the echo of the message with files', async () => {
      const texts = await h.messageTexts(page, 'assistant');
      return texts.length === 2 ? texts : null;
    });
    assert.match(echoes[1], /what are these\?/);
    assert.match(echoes[1], /\[Attached file notes\.txt \(text\/plain\), 8 bytes\]/);
    assert.match(echoes[1], /buy milk/);
    assert.doesNotMatch(echoes[1], /not sent/);

    // The sent message shows the image, fetched with the token.
    const image = h.messages(page, 'user').nth(1).getByTestId('message-image');
    await h.until('the sent image to load', () =>
      image.evaluate((img) => img.complete && img.naturalWidth === 1));
    await h.expectText(h.messages(page, 'user').nth(1).getByTestId('message-file'), 'notes.txt (text/plain)');
    const sent = (await h.apiMessages(chatId)).filter((m) => m.role === 'user')[1];
    assert.deepEqual(sent.content.map((p) => [p.type, p.name ?? null, p.media_type ?? null]), [
      ['text', null, null],
      ['file', 'dot.png', 'image/png'],
      ['file', 'notes.txt', 'text/plain'],
    ]);
  });
});

test('files dropped on the composer are attached, and a message of only a file can be sent', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'drop target');
    await h.expectStatus(page, 'waiting');
    await page.evaluate((bytes) => {
      const transfer = new DataTransfer();
      transfer.items.add(new File([new Uint8Array(bytes)], 'dropped.png', { type: 'image/png' }));
      const composer = document.querySelector('[data-testid="composer"]');
      composer.dispatchEvent(new DragEvent('dragover', { dataTransfer: transfer, bubbles: true, cancelable: true }));
      composer.dispatchEvent(new DragEvent('drop', { dataTransfer: transfer, bubbles: true, cancelable: true }));
    }, [...PNG]);
    await expectReady(page, 1);
    await h.expectCount(h.byId(page, 'attachment-preview'), 1);
    await h.byId(page, 'send-queue').click();
    const image = h.messages(page, 'user').nth(1).getByTestId('message-image');
    await h.until('the dropped image in the sent message', () =>
      image.evaluate((img) => img.complete && img.naturalWidth === 1));
    await h.expectStatus(page, 'waiting');
  });
});

test('a file the server refuses is dropped with a toast naming it', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'refusals');
    await h.expectStatus(page, 'waiting');
    // Says PNG, is text: the server answers 415.
    await h.byId(page, 'file-input').setInputFiles([
      { name: 'fake.png', mimeType: 'image/png', buffer: Buffer.from('not an image') },
    ]);
    await h.until('a toast naming the file', async () => (await h.textOf(h.byId(page, 'toast')))?.includes('fake.png'));
    await h.expectCount(await attachments(page), 0);
  });
});

test('plan mode is switched on for a new chat and off and on again from the chat header', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.openSidebar(page);
    await h.byId(page, 'new-chat').click();
    await h.openAdvanced(page);
    await h.byId(page, 'new-chat-plan-mode').check();
    await h.byId(page, 'new-chat-tools').fill(JSON.stringify([
      { name: 'read_page', input_schema: { type: 'object' }, read_only: true },
      { name: 'write_page', input_schema: { type: 'object' } },
    ]));
    await h.byId(page, 'composer-input').fill('plan the trip');
    await h.byId(page, 'send-queue').click();
    await h.byId(page, 'chat-view').waitFor();
    const chatId = await h.byId(page, 'chat-view').getAttribute('data-chat-id');
    const toggle = h.byId(page, 'plan-mode-toggle');
    await h.until('the header toggle to show plan mode', () => toggle.isChecked());
    const created = await h.api('GET', `/api/v2/chats/${chatId}`);
    assert.equal(created.plan_mode, 'plan');
    // The client's read-only mark is kept: that tool is offered in plan mode.
    assert.deepEqual(created.dynamic_tools.map((t) => [t.name, t.read_only ?? false]), [
      ['read_page', true],
      ['write_page', false],
    ]);

    // The toggle is an item of the chat's menu (a menuitemcheckbox).
    await h.chatMenu(page, 'plan-mode-toggle');
    await h.until('plan mode off on the server', async () =>
      (await h.api('GET', `/api/v2/chats/${chatId}`)).plan_mode === null);
    await h.until('the toggle to show plan mode off', async () => !(await toggle.isChecked()));
    await h.chatMenu(page, 'plan-mode-toggle');
    await h.until('plan mode on on the server', async () =>
      (await h.api('GET', `/api/v2/chats/${chatId}`)).plan_mode === 'plan');
    await h.until('the toggle to show plan mode on', () => toggle.isChecked());
    // A reload shows the stored value.
    await page.reload();
    await h.byId(page, 'chat-view').waitFor();
    await h.until('the toggle after a reload', () => h.byId(page, 'plan-mode-toggle').isChecked());
  });
});
