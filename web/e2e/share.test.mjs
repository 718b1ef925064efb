// Read-only sharing (issue 34 part 5; API.md "Sign-in, search, sharing and
// export"): the owner shares a chat from its tools menu ("Share…": an
// unknown user name is said in the dialog); bob (signed in with a
// password) sees it under "Shared with me", opens it read only (no
// composer, a note saying so, no tools that change it) and follows it
// live; after the owner revokes, bob's open chat shows the unknown-chat
// page and the chat leaves his list. At desktop width (light) and at
// 390 px (dark).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();
const PASSWORD = 'a password for bob';

const noSideScroll = (page) => page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth);

for (const [label, options] of [['desktop, light', { colorScheme: 'light' }], ['390 px, dark', { ...h.PHONE, colorScheme: 'dark' }]]) {
  test(`sharing: the owner shares with bob, bob reads it live and read only, a revoke ends it (${label})`, { timeout: h.ms(180_000) }, async (t) => {
    const owner = await h.createUser('owner');
    const bob = await h.createUser('bob');
    await h.api('PUT', `/api/v2/users/${bob.user.id}/password`, { password: PASSWORD });
    const created = await h.apiAs(owner.token, 'POST', '/api/v2/chats', { title: 'Trip plans', content: [{ type: 'text', text: 'first plan' }] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    await h.until('the first answer', async () => (await h.apiAs(owner.token, 'GET', `/api/v2/chats/${id}`)).body.status, { accept: (s) => s === 'waiting', timeout: h.SLOW_WAIT });

    await h.withPage(browser(), t, async (page) => {
      await h.signIn(page, owner.token);
      await page.goto(`${h.CHATD_URL}/#/chats/${id}`);
      await h.expectMessageTexts(page, 'assistant', ['echo: first plan']);
      await h.chatMenu(page, 'share-chat');
      const dialog = h.byId(page, 'share-dialog');
      await dialog.waitFor();
      await h.byId(page, 'share-empty').waitFor();
      assert.ok(await noSideScroll(page), 'the share dialog fits');
      // An unknown name: said in the dialog, nothing shared.
      await h.byId(page, 'share-username').fill('nobody-here-at-all');
      await h.byId(page, 'share-add').click();
      await h.expectText(h.byId(page, 'share-error'), 'There is no user named “nobody-here-at-all”.');
      assert.equal(await page.locator('#toasts .toast').count(), 0, 'no toast');
      await h.byId(page, 'share-username').fill(bob.user.username);
      await h.byId(page, 'share-add').click();
      await h.expectCount(h.byId(page, 'share-item'), 1);
      assert.equal(await h.textOf(h.byId(page, 'share-name')), bob.user.username);
      assert.equal(await h.byId(page, 'share-error').isVisible(), false);
      await h.byId(page, 'share-close').click();
      await dialog.waitFor({ state: 'detached' });

      await h.withPage(browser(), t, async (bobPage) => {
        await bobPage.goto(h.CHATD_URL + '/');
        await h.byId(bobPage, 'signin-username').fill(bob.user.username);
        await h.byId(bobPage, 'signin-password').fill(PASSWORD);
        await h.byId(bobPage, 'password-sign-in').click();
        await h.byId(bobPage, 'username').waitFor({ state: 'visible' });
        await h.openSidebar(bobPage);
        const item = h.byId(bobPage, 'shared-list').locator(`[data-chat-id="${id}"]`);
        await item.waitFor();
        assert.equal(await h.textOf(item.getByTestId('chat-title')), 'Trip plans');
        // Not among his own chats.
        assert.equal(await h.chatItem(bobPage, id).count(), 0);
        await item.getByTestId('shared-chat-link').click();
        await h.expectMessageTexts(bobPage, 'assistant', ['echo: first plan']);
        await h.expectText(h.byId(bobPage, 'read-only-note'), 'Shared with you — read only');
        assert.equal(await h.byId(bobPage, 'composer-input').isVisible(), false);
        assert.equal(await h.byId(bobPage, 'send-queue').isVisible(), false);
        assert.equal(await h.byId(bobPage, 'regenerate').count() > 0 && await h.byId(bobPage, 'regenerate').first().isVisible(), false);
        await h.byId(bobPage, 'chat-menu').click();
        const list = h.byId(bobPage, 'chat-menu-list');
        await list.waitFor();
        for (const hidden of ['compact-now', 'clear-context', 'plan-mode-toggle', 'archive', 'share-chat']) {
          assert.equal(await list.getByTestId(hidden).isVisible(), false, `${hidden} hidden`);
        }
        assert.equal(await list.getByTestId('export-json').isVisible(), true);
        await bobPage.keyboard.press('Escape');
        assert.ok(await noSideScroll(bobPage), 'the read-only chat fits');

        // Live: the owner's next message reaches bob.
        await h.send(page, 'second plan');
        await h.expectMessageTexts(bobPage, 'assistant', ['echo: first plan', 'echo: second plan'], { timeout: h.SLOW_WAIT });

        // The owner revokes: bob's view ends, the chat leaves his list.
        await h.chatMenu(page, 'share-chat');
        await h.expectCount(h.byId(page, 'share-item'), 1);
        await h.byId(page, 'share-revoke').click();
        await h.byId(page, 'share-empty').waitFor();
        await h.byId(bobPage, 'chat-not-found').waitFor({ timeout: h.SLOW_WAIT });
        await bobPage.reload();
        await h.byId(bobPage, 'chat-not-found').waitFor();
        await h.openSidebar(bobPage);
        assert.equal(await h.byId(bobPage, 'shared-list').locator(`[data-chat-id="${id}"]`).count(), 0);
        assert.equal(await h.byId(bobPage, 'shared-chats').isVisible(), false);
      }, options);
    }, options);
  });
}
