// Password sign-in (issue 34 part 3; API.md "Sign-in, search, sharing and
// export"): the start screen's user name and password; a wrong password is
// said in the form (not a toast); the session is an HttpOnly cookie (no
// token in local storage), kept across a reload, and the UI's mutations
// carry the CSRF token (a chat is created and answered live over the
// cookie-authenticated WebSocket); "Change password" in the settings says
// a wrong current password next to its field; sign-out ends the session on
// the server. At desktop width (light) and at 390 px (dark).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();
const PASSWORD = 'correct horse battery';
const NEW_PASSWORD = 'staple and more staples';

/** Signs in with the password form; waits for the signed-in screen. */
async function passwordSignIn(page, username, password) {
  await page.goto(h.CHATD_URL + '/');
  await h.byId(page, 'signin-username').fill(username);
  await h.byId(page, 'signin-password').fill(password);
  await h.byId(page, 'password-sign-in').click();
  await h.byId(page, 'username').waitFor({ state: 'visible' });
}

const noSideScroll = (page) => page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth);

for (const [label, options] of [['desktop, light', { colorScheme: 'light' }], ['390 px, dark', { ...h.PHONE, colorScheme: 'dark' }]]) {
  test(`password sign-in, a wrong password in the form, change password, sign-out (${label})`, { timeout: h.TEST_TIMEOUT }, async (t) => {
    const { user } = await h.createUser('signin');
    await h.api('PUT', `/api/v2/users/${user.id}/password`, { password: PASSWORD });
    await h.withPage(browser(), t, async (page) => {
      await page.goto(h.CHATD_URL + '/');
      await h.byId(page, 'signin-username').waitFor();
      // The token sign-in stays, as the second way in.
      assert.equal(await h.byId(page, 'token-input').isVisible(), true);
      assert.ok(await noSideScroll(page), 'the sign-in screen fits');

      await h.byId(page, 'signin-username').fill(user.username);
      await h.byId(page, 'signin-password').fill('not the password');
      await h.byId(page, 'password-sign-in').click();
      const error = h.byId(page, 'password-signin-error');
      await h.expectText(error, 'Wrong user name or password.');
      assert.equal(await h.byId(page, 'signin-password').getAttribute('aria-invalid'), 'true');
      assert.equal(await page.locator('#toasts .toast').count(), 0, 'no toast');
      assert.equal(await h.byId(page, 'username').isVisible(), false);

      await h.byId(page, 'signin-password').fill(PASSWORD);
      await h.byId(page, 'password-sign-in').click();
      await h.expectText(h.byId(page, 'username'), user.username);
      assert.equal(await error.isVisible(), false);
      // The session is the HttpOnly cookie: nothing a script can read.
      assert.equal(await page.evaluate(() => localStorage.getItem('chatd.token')), null);
      assert.equal(await page.evaluate(() => document.cookie.includes('chatd_session')), false);

      // Mutations carry the CSRF token; the live view follows over the cookie.
      const id = await h.createChat(page, 'hello through a password session');
      await h.expectMessageTexts(page, 'assistant', ['echo: hello through a password session'], { timeout: h.SLOW_WAIT });
      await h.expectStatus(page, 'waiting');
      // A mutation without the CSRF header is refused (the UI always sends it).
      const bare = await page.evaluate(async (chat) => (await fetch(`/api/v2/chats/${chat}`, {
        method: 'PATCH', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ title: 'x' }),
      })).status, id);
      assert.equal(bare, 403);

      // A reload keeps the session.
      await page.reload();
      await h.expectText(h.byId(page, 'username'), user.username);
      await h.expectMessageTexts(page, 'assistant', ['echo: hello through a password session']);
      assert.ok(await noSideScroll(page), 'the chat fits');

      // Change password: a wrong current password is said at its field.
      await h.byId(page, 'open-settings').click();
      await h.byId(page, 'password-settings').waitFor();
      assert.ok(await noSideScroll(page), 'the settings dialog fits');
      await h.byId(page, 'current-password').fill('not it at all');
      await h.byId(page, 'new-password').fill(NEW_PASSWORD);
      await h.byId(page, 'repeat-password').fill(NEW_PASSWORD);
      await h.byId(page, 'change-password').click();
      await h.expectText(h.byId(page, 'current-password-error'), 'The current password is wrong.');
      assert.equal(await h.byId(page, 'current-password').getAttribute('aria-invalid'), 'true');
      // Too short: said before asking the server.
      await h.byId(page, 'current-password').fill(PASSWORD);
      await h.byId(page, 'new-password').fill('short');
      await h.byId(page, 'change-password').click();
      await h.expectText(h.byId(page, 'new-password-error'), 'Use at least 10 characters.');
      await h.byId(page, 'new-password').fill(NEW_PASSWORD);
      await h.byId(page, 'change-password').click();
      await h.byId(page, 'password-changed').waitFor({ state: 'visible' });
      await h.byId(page, 'settings-close').click();

      // Sign-out ends the session on the server.
      await h.byId(page, 'sign-out').click();
      await h.byId(page, 'signin-username').waitFor({ state: 'visible' });
      const after = await page.evaluate(async () => (await fetch('/api/v2/sessions/current')).status);
      assert.equal(after, 401);
      await page.reload();
      await h.byId(page, 'signin-username').waitFor({ state: 'visible' });
      assert.equal(await h.byId(page, 'username').isVisible(), false);

      // The old password no longer works; the new one does.
      await h.byId(page, 'signin-username').fill(user.username);
      await h.byId(page, 'signin-password').fill(PASSWORD);
      await h.byId(page, 'password-sign-in').click();
      await h.expectText(error, 'Wrong user name or password.');
      await h.byId(page, 'signin-password').fill(NEW_PASSWORD);
      await h.byId(page, 'password-sign-in').click();
      await h.expectText(h.byId(page, 'username'), user.username);
    }, options);
  });
}
