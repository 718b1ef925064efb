// The API tokens page (API.md "Limits, budgets and the token lifecycle"):
// a member lists their tokens, creates one (its clear value shown once, with
// a copy button and the warning, never again after Done or a reload),
// revokes one after a confirmation (it answers 401 at once and leaves the
// list); a lifetime over the members' maximum is refused under the field
// and creates nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();
const DAY = 86400;

const row = (page, name) => h.byId(page, 'token-list').getByTestId('token-row').filter({ has: page.getByTestId('token-row-name').getByText(name, { exact: true }) });

test('a token is created and shown once with a copy button, then revoked', { timeout: h.TEST_TIMEOUT }, async (t) => {
  const { user, token } = await h.createUser('tokens');
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page, token);
    await h.byId(page, 'nav-tokens').click();
    await h.byId(page, 'tokens-page').waitFor();
    assert.equal(await page.locator('#page-heading').evaluate((el) => el === document.activeElement), true);
    // The token this browser signed in with, made by createUser.
    await h.expectCount(h.byId(page, 'token-row'), 1);
    assert.equal(await h.textOf(h.byId(page, 'token-row-name')), 'e2e');

    await h.byId(page, 'token-name').fill('ci runner');
    await h.byId(page, 'token-lifetime').selectOption(String(7 * DAY));
    await h.byId(page, 'token-create').click();
    const panel = h.byId(page, 'token-created');
    await panel.waitFor();
    assert.match(await h.textOf(h.byId(page, 'token-warning')), /Copy it now: it will not be shown again\./);
    const value = await h.byId(page, 'token-value').inputValue();
    assert.match(value, /^\S{20,}$/);
    assert.equal(await h.byId(page, 'token-value').evaluate((el) => el === document.activeElement), true);
    // The new token works, as this user.
    const me = await h.apiAs(value, 'GET', '/api/v2/users/me');
    assert.equal(me.status, 200);
    assert.equal(me.body.id, user.id);

    await h.byId(page, 'token-copy').click();
    await h.expectText(h.byId(page, 'token-copy'), 'Copied');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), value);
    await h.expectText(h.byId(page, 'live-status'), 'Token copied to the clipboard.');

    // Listed with its dates, never with its value.
    const listed = row(page, 'ci runner');
    await listed.waitFor();
    const created = new Date(await listed.getByTestId('token-row-created').locator('time').getAttribute('datetime'));
    const expires = new Date(await listed.getByTestId('token-row-expires').locator('time').getAttribute('datetime'));
    assert.ok(Math.abs((expires - created) / 1000 - 7 * DAY) < 120, `expires ${expires.toISOString()} created ${created.toISOString()}`);
    await h.byId(page, 'token-created-done').click();
    await panel.waitFor({ state: 'detached' });
    assert.equal((await page.content()).includes(value), false);
    await page.reload();
    await listed.waitFor();
    assert.equal((await page.content()).includes(value), false);
    const api = await h.apiAs(token, 'GET', '/api/v2/users/me/tokens');
    assert.deepEqual(api.body.map((t) => t.name).sort(), ['ci runner', 'e2e']);
    assert.equal(JSON.stringify(api.body).includes(value), false);

    // Revoke, after the confirmation: 401 at once, and gone from the list.
    await listed.getByTestId('token-revoke').click();
    await h.byId(page, 'confirm-dialog').waitFor();
    assert.match(await h.textOf(page.locator('#confirm-message')), /“ci runner” stops working at once/);
    await h.byId(page, 'confirm-ok').click();
    await listed.waitFor({ state: 'detached' });
    await h.expectText(h.byId(page, 'live-status'), 'Token “ci runner” revoked.');
    await h.expectCount(h.byId(page, 'token-row'), 1);
    assert.equal((await h.apiAs(value, 'GET', '/api/v2/users/me')).status, 401);
    const left = await h.apiAs(token, 'GET', '/api/v2/users/me/tokens');
    assert.deepEqual(left.body.map((t) => t.name), ['e2e']);
  }, { permissions: ['clipboard-read', 'clipboard-write'] });
});

test('a member’s token longer than the maximum is refused under the field; cancelling a revoke keeps the token', { timeout: h.TEST_TIMEOUT }, async (t) => {
  const { token } = await h.createUser('tokens-max');
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page, token);
    await page.goto(`${h.CHATD_URL}/#/tokens`);
    await h.expectCount(h.byId(page, 'token-row'), 1);
    await h.byId(page, 'token-name').fill('too long');
    await h.byId(page, 'token-lifetime').selectOption(String(365 * DAY));
    await h.byId(page, 'token-create').click();
    const error = h.byId(page, 'token-create-error');
    const said = await h.until('the refusal under the field', () => h.textOf(error), { accept: (v) => v?.startsWith('Expires after:') });
    assert.ok(said.length > 'Expires after:'.length, said);
    assert.equal(await h.byId(page, 'token-lifetime').getAttribute('aria-invalid'), 'true');
    assert.equal(await h.byId(page, 'token-created').count(), 0);
    assert.equal((await h.apiAs(token, 'GET', '/api/v2/users/me/tokens')).body.length, 1);

    // "Longest allowed" sends no lifetime: the member's maximum, so it expires.
    await h.byId(page, 'token-lifetime').selectOption('');
    await h.byId(page, 'token-create').click();
    await h.byId(page, 'token-created').waitFor();
    await h.expectCount(h.byId(page, 'token-row'), 2);
    const tokens = (await h.apiAs(token, 'GET', '/api/v2/users/me/tokens')).body;
    const made = tokens.find((x) => x.name === 'too long');
    assert.ok(made && made.expires_at, JSON.stringify(tokens));

    await row(page, 'too long').getByTestId('token-revoke').click();
    await h.byId(page, 'confirm-cancel').click();
    await h.byId(page, 'confirm-dialog').waitFor({ state: 'hidden' });
    await h.expectCount(h.byId(page, 'token-row'), 2);
    assert.equal((await h.apiAs(token, 'GET', '/api/v2/users/me/tokens')).body.length, 2);
  });
});
