// Chat management in the sidebar: relative dates, search (`q=`), rename
// (PATCH title), delete (DELETE, confirmed; a busy chat is refused with the
// server's message).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

/** A word no other test uses in a title. */
const unique = (name) => `${name}-${Date.now().toString(36)}-${Math.floor(Math.random() * 1e6)}`;

/** The titles the list shows, in order. */
function listTitles(page) {
  return h.byId(page, 'chat-list').getByTestId('chat-title').allTextContents();
}

test('each chat shows when it last changed, relative to now, with the exact time on hover', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await page.clock.install();
    const chat = await h.apiChat('dated');
    const updated = chat.updated_at;
    await h.signIn(page);
    const date = h.chatItem(page, chat.id).getByTestId('chat-date');
    await h.expectText(date, 'now');
    assert.equal(await date.getAttribute('datetime'), updated);
    assert.ok(await date.getAttribute('title'), 'the exact time is in the title');

    // As time passes, the list (re-rendered as it polls) says so. The
    // page's clock jumps ahead, which also fires the poll's timer.
    // (The page and this process share the machine's time zone.)
    const at = new Date(updated);
    const nextNoon = new Date(at.getFullYear(), at.getMonth(), at.getDate() + 1, 12);
    for (const [now, expected] of [
      [at.getTime() + 5 * 60_000, '5 minutes ago'],
      [nextNoon.getTime(), 'yesterday'],
      [at.getTime() + 400 * 86_400_000, at.toLocaleDateString('en-US', { day: 'numeric', month: 'short', year: 'numeric' })],
    ]) {
      const ahead = now - (await page.evaluate(() => Date.now()));
      await page.clock.fastForward(Math.max(ahead, 0));
      await h.expectText(date, expected);
    }
  });
});

test('search filters the list by title (the API\'s q=), says when nothing matches, and Escape clears it', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    const word = unique('zebra');
    const a = await h.apiChat('first');
    const b = await h.apiChat('second');
    await h.api('PATCH', `/api/v2/chats/${a.id}`, { title: `Notes on ${word} stripes` });
    await h.api('PATCH', `/api/v2/chats/${b.id}`, { title: `More about ${word.toUpperCase()}` });
    await h.signIn(page);
    await h.until('both chats in the list', async () => (await h.chatItem(page, a.id).count()) + (await h.chatItem(page, b.id).count()), { accept: (n) => n === 2 });

    const search = h.byId(page, 'chat-search');
    await search.fill(word);
    // Case-insensitive, newest first, nothing else.
    await h.until('only the matching chats', () => listTitles(page), {
      accept: (titles) => JSON.stringify(titles) === JSON.stringify([`More about ${word.toUpperCase()}`, `Notes on ${word} stripes`]),
    });
    await search.fill(`${word} stripes`);
    await h.until('one match', () => listTitles(page), { accept: (titles) => titles.length === 1 && titles[0].includes('stripes') });

    await search.fill(unique('nothing-like-this'));
    await h.until('the no-match message', () => h.textOf(h.byId(page, 'chat-list-empty')), { accept: (text) => text?.startsWith('No chats match') });

    await search.press('Escape');
    assert.equal(await search.inputValue(), '');
    await h.until('the whole list again', async () => (await h.chatItem(page, a.id).count()) + (await h.chatItem(page, b.id).count()), { accept: (n) => n === 2 });
  });
});

test('rename edits the title in place: Enter saves it on the server, Escape cancels', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    const chat = await h.apiChat('rename me');
    await h.signIn(page);
    const item = h.chatItem(page, chat.id);
    await item.waitFor();
    const before = await h.textOf(item.getByTestId('chat-title'));

    await item.getByTestId('chat-rename').click();
    const input = h.byId(page, 'chat-rename-input');
    assert.equal(await input.inputValue(), before);
    await input.fill('not this one');
    await input.press('Escape');
    await h.expectText(h.chatItem(page, chat.id).getByTestId('chat-title'), before);
    assert.equal((await h.api('GET', `/api/v2/chats/${chat.id}`)).title, before);

    const title = unique('Trip planning');
    await h.chatItem(page, chat.id).getByTestId('chat-rename').click();
    await h.byId(page, 'chat-rename-input').fill(title);
    await h.byId(page, 'chat-rename-input').press('Enter');
    await h.expectText(h.chatItem(page, chat.id).getByTestId('chat-title'), title);
    assert.equal((await h.api('GET', `/api/v2/chats/${chat.id}`)).title, title);
    // The keyboard stays on the item.
    assert.equal(await page.evaluate(() => document.activeElement?.dataset.testid), 'chat-rename');

    // The open chat's heading follows.
    await h.chatItem(page, chat.id).click();
    await h.until('the heading', () => h.textOf(h.byId(page, 'chat-view').locator('h1')), { accept: (v) => v === title });
  });
});

test('delete asks first; an idle chat is deleted, a running one is refused with the server\'s message', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    const idle = await h.apiChat('delete me');
    await h.signIn(page);
    const item = h.chatItem(page, idle.id);
    await item.waitFor();

    // Cancel keeps it.
    await item.getByTestId('chat-delete').click();
    const dialog = h.byId(page, 'confirm-dialog');
    await dialog.waitFor();
    assert.ok((await dialog.textContent()).includes('deleted for good'));
    await h.byId(page, 'confirm-cancel').click();
    await dialog.waitFor({ state: 'hidden' });
    assert.equal(await item.count(), 1);
    // So does Escape.
    await item.getByTestId('chat-delete').click();
    await dialog.waitFor();
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'hidden' });
    assert.equal(await item.count(), 1);

    // Open it, then delete it: it is gone from the list and the server, and
    // the page leaves it.
    await item.click();
    await h.until('the chat to open', async () => (await h.byId(page, 'chat-view').getAttribute('data-chat-id')) === idle.id);
    await h.chatItem(page, idle.id).getByTestId('chat-delete').click();
    await h.byId(page, 'confirm-ok').click();
    await h.expectCount(h.chatItem(page, idle.id), 0);
    const gone = await fetch(`${h.CHATD_URL}/api/v2/chats/${idle.id}`, { headers: { Authorization: `Bearer ${h.CHATD_TOKEN}` } });
    assert.equal(gone.status, 404);
    await h.byId(page, 'chat-view').waitFor({ state: 'detached' });
    assert.ok(page.url().endsWith('#/'), page.url());

    // A running chat: the server says no (409) and the toast says why.
    const id = await h.createChat(page, 'slow, you cannot delete me now');
    await h.expectStatus(page, 'running');
    await h.chatItem(page, id).getByTestId('chat-delete').click();
    await h.byId(page, 'confirm-ok').click();
    const toast = await h.until('a toast', () => h.textOf(h.byId(page, 'toast')));
    const refused = await fetch(`${h.CHATD_URL}/api/v2/chats/${id}`, { method: 'DELETE', headers: { Authorization: `Bearer ${h.CHATD_TOKEN}` } });
    assert.equal(refused.status, 409);
    const { message } = await refused.json();
    assert.ok(message && toast.includes(message), `toast ${JSON.stringify(toast)} has ${JSON.stringify(message)}`);
    assert.equal(await h.chatItem(page, id).count(), 1);
    await h.byId(page, 'interrupt').click();
    await h.expectStatus(page, 'waiting');
  });
});
