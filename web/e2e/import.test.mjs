// Import (issue 34 part 5; API.md "Sign-in, search, sharing and export"):
// a chat exported as JSON from its tools menu is imported with the
// sidebar's "Import chat…" and opens as a new chat with the same messages;
// a file that is not an export is refused under the button. At desktop
// width (light) and at 390 px (dark).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

const noSideScroll = (page) => page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth);

/** Clicks "Import chat…" and gives the file chooser `file` (`{name, mimeType, buffer}`). */
async function importFile(page, file) {
  await h.openSidebar(page);
  const chooser = page.waitForEvent('filechooser');
  await h.byId(page, 'import-chat').click();
  await (await chooser).setFiles(file);
}

for (const [label, options] of [['desktop, light', { colorScheme: 'light' }], ['390 px, dark', { ...h.PHONE, colorScheme: 'dark' }]]) {
  test(`export a chat as JSON, import it as a new chat; a wrong file is refused (${label})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    const { token } = await h.createUser('import');
    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page, token);
      const id = await h.createChat(page, 'keep this chat');
      await h.expectMessageTexts(page, 'assistant', ['echo: keep this chat'], { timeout: h.SLOW_WAIT });
      await h.expectStatus(page, 'waiting');
      const download = page.waitForEvent('download');
      await h.chatMenu(page, 'export-json');
      const path = await (await download).path();
      const exported = JSON.parse(readFileSync(path, 'utf8'));
      assert.equal(exported.format, 'chatd.chat');

      // Not JSON: said under the button; nothing imported.
      await importFile(page, { name: 'notes.json', mimeType: 'application/json', buffer: Buffer.from('not json at all') });
      await h.expectText(h.byId(page, 'import-error'), '“notes.json” is not a chatd JSON export (it is not JSON).');
      // JSON, not an export: the server's refusal.
      await importFile(page, { name: 'other.json', mimeType: 'application/json', buffer: Buffer.from('{"format":"something else","version":1}') });
      await h.until('the refusal', () => h.textOf(h.byId(page, 'import-error')), { accept: (s) => s.startsWith('Import failed:') });
      assert.ok(await noSideScroll(page), 'the sidebar with the error fits');

      await importFile(page, { name: 'chat.json', mimeType: 'application/json', buffer: readFileSync(path) });
      const imported = await h.until('the imported chat to open', () => page.evaluate(() => location.hash), {
        accept: (hash) => /^#\/chats\/[0-9a-f-]{36}$/.test(hash) && !hash.endsWith(id),
      });
      const newId = imported.slice('#/chats/'.length);
      await page.locator(`[data-testid="chat-view"][data-chat-id="${newId}"]`).waitFor();
      await h.expectMessageTexts(page, 'user', ['keep this chat']);
      await h.expectMessageTexts(page, 'assistant', ['echo: keep this chat']);
      assert.equal(await h.byId(page, 'import-error').isVisible(), false);
      await h.openSidebar(page);
      await h.chatItem(page, newId).waitFor();
      assert.ok(await noSideScroll(page), 'the chat list fits');
    }, options);
  });
}
