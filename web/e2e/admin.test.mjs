// The admin page (API.md "Limits, budgets and the token lifecycle"): every
// user with their usage against their limits; a limit changed and returned
// to the default (an emptied field sends null); a user disabled (their
// token answers 401) and enabled again; their tokens reached from their
// row; a user created. Members have no
// link to it and see that it is for admins.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();
const EN = { locale: 'en-US' };
const count = (n) => new Intl.NumberFormat('en-US').format(n);

const userRow = (page, id) => h.byId(page, 'user-list').locator(`[data-testid="user-row"][data-user-id="${id}"]`);

async function userOf(id) {
  const users = await h.api('GET', '/api/v2/users');
  return users.find((u) => u.id === id);
}

test('an admin changes a user’s limits, returns one to the default, and disables the user', { timeout: h.TEST_TIMEOUT }, async (t) => {
  const { user, token } = await h.createUser('target');
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.byId(page, 'nav-admin').click();
    await h.byId(page, 'admin-page').waitFor();
    const row = userRow(page, user.id);
    await row.waitFor();
    assert.equal(await h.textOf(row.getByTestId('user-name')), user.username);
    assert.equal(await h.textOf(row.getByTestId('user-role')), 'member');
    const limits = (await userOf(user.id)).limits;
    await h.expectText(row.getByTestId('user-running'), `0 of ${count(limits.max_running_chats)}`);
    await h.expectText(row.getByTestId('user-spent'), '$0.00');
    await h.expectText(row.getByTestId('user-tokens'), '0');
    assert.match(await h.textOf(row.getByTestId('user-storage')), /^0 B of /);

    // A token budget of 5,000.
    await row.getByTestId('user-edit-limits').click();
    const form = h.byId(page, 'user-limits-form');
    await form.waitFor();
    assert.equal(await row.getByTestId('user-edit-limits').getAttribute('aria-expanded'), 'true');
    assert.equal(await form.getByTestId('limit-max_running_chats').inputValue(), String(limits.max_running_chats));
    assert.equal(await form.getByTestId('limit-monthly_token_budget').inputValue(), '');
    await form.getByTestId('limit-monthly_token_budget').fill('5000');
    await form.getByTestId('limit-max_storage_bytes').fill('2');
    await form.getByTestId('user-limits-save').click();
    await form.waitFor({ state: 'detached' });
    await h.expectText(row.getByTestId('user-tokens'), '0 of 5,000');
    await h.expectText(row.getByTestId('user-storage'), '0 B of 2 MiB');
    await h.expectText(h.byId(page, 'live-status'), `Limits of ${user.username} saved.`);
    let now = await userOf(user.id);
    assert.equal(now.limits.monthly_token_budget, 5000);
    assert.equal(now.limits.max_storage_bytes, 2 * 1024 * 1024);
    // Fields left alone were not sent: the rest is as it was.
    assert.equal(now.limits.max_running_chats, limits.max_running_chats);
    assert.equal(now.limits.requests_per_minute, limits.requests_per_minute);
    assert.equal((await h.apiAs(token, 'GET', '/api/v2/users/me/usage')).body.limits.monthly_token_budget, 5000);

    // Emptied: back to the server's default (none here).
    await row.getByTestId('user-edit-limits').click();
    await form.getByTestId('limit-monthly_token_budget').fill('');
    await form.getByTestId('user-limits-save').click();
    await form.waitFor({ state: 'detached' });
    await h.expectText(row.getByTestId('user-tokens'), '0');
    now = await userOf(user.id);
    assert.equal(now.limits.monthly_token_budget, null);
    assert.equal(now.limits.max_storage_bytes, 2 * 1024 * 1024);

    // A value the server refuses is shown under the fields and changes nothing.
    await row.getByTestId('user-edit-limits').click();
    await form.getByTestId('limit-requests_per_minute').fill('-3');
    await form.getByTestId('user-limits-save').click();
    await h.until('the refusal', () => h.textOf(form.getByTestId('user-limits-error')), { accept: (v) => v?.startsWith('Requests per minute:') });
    await form.getByTestId('user-limits-cancel').click();
    assert.equal((await userOf(user.id)).limits.requests_per_minute, limits.requests_per_minute);

    // Disabled: the user's token answers 401; enabled again: it works.
    assert.equal((await h.apiAs(token, 'GET', '/api/v2/users/me')).status, 200);
    await row.getByTestId('user-disabled').check();
    await h.until('the user to be disabled', () => userOf(user.id), { accept: (u) => u.disabled === true });
    await h.until('the row to show it', () => row.getAttribute('class'), { accept: (c) => c?.includes('user-disabled') });
    assert.equal((await h.apiAs(token, 'GET', '/api/v2/users/me')).status, 401);
    await row.getByTestId('user-disabled').uncheck();
    await h.until('the user to be enabled', () => userOf(user.id), { accept: (u) => u.disabled === false });
    assert.equal((await h.apiAs(token, 'GET', '/api/v2/users/me')).status, 200);

    // The admin's own row cannot be disabled from here.
    const me = await h.api('GET', '/api/v2/users/me');
    assert.equal(await userRow(page, me.id).getByTestId('user-disabled').isDisabled(), true);

    // The user's tokens, from their row.
    await row.getByTestId('user-tokens-link').click();
    await h.byId(page, 'tokens-page').waitFor();
    await h.expectText(page.locator('#page-heading'), `API tokens of ${user.username}`);
    await h.expectCount(h.byId(page, 'token-row'), 1);
    assert.equal(await h.textOf(h.byId(page, 'token-row-name')), 'e2e');
  }, EN);
});

test('an admin creates a user; a member has no admin link and is told the page is for admins', { timeout: h.TEST_TIMEOUT }, async (t) => {
  const username = `new-${Math.random().toString(36).slice(2, 8)}`;
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await page.goto(`${h.CHATD_URL}/#/admin`);
    await h.byId(page, 'admin-new-username').fill(username);
    await h.byId(page, 'admin-new-role').selectOption('member');
    await h.byId(page, 'admin-create-user').click();
    const row = h.byId(page, 'user-list').locator(`[data-testid="user-row"][data-username="${username}"]`);
    await row.waitFor();
    const users = await h.api('GET', '/api/v2/users');
    const made = users.find((u) => u.username === username);
    assert.ok(made, `${username} in ${JSON.stringify(users.map((u) => u.username))}`);
    assert.equal(made.role, 'member');
    assert.equal(made.disabled, false);
    await h.expectText(row.getByTestId('user-tokens'), '0');

    // The same name again: refused under the form.
    await h.byId(page, 'admin-new-username').fill(username);
    await h.byId(page, 'admin-create-user').click();
    await h.until('the refusal', () => h.textOf(h.byId(page, 'admin-create-error')), { accept: Boolean });
    assert.equal((await h.api('GET', '/api/v2/users')).filter((u) => u.username === username).length, 1);
  }, EN);

  const { token } = await h.createUser('member');
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page, token);
    await h.byId(page, 'nav-tokens').waitFor();
    assert.equal(await h.byId(page, 'nav-admin').isVisible(), false);
    await page.goto(`${h.CHATD_URL}/#/admin`);
    await h.expectText(h.byId(page, 'admin-only'), 'Only admins can see this page.');
    assert.equal((await h.apiAs(token, 'GET', '/api/v2/users')).status, 403);
  });
});
