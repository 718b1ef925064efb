// Sub-agents (API.md "Sub-agents and plan mode"): a chat created with the
// "Sub-agents" option spawns a child (the fake LLM's `call spawn_agent`),
// and the chat list shows the child nested under its parent with its
// status, live, behind a toggle that collapses and expands it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

test('a spawned child is nested under its parent in the list with its status, and collapses', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.openSidebar(page);
    await h.byId(page, 'new-chat').click();
    await h.openAdvanced(page);
    await h.byId(page, 'new-chat-subagents').check();
    // The child's prompt contains `slow`: it runs for about 10 s.
    await h.byId(page, 'composer-input').fill('call spawn_agent {"prompt": "slow child work", "title": "Helper agent"}');
    await h.byId(page, 'send-queue').click();
    const parentId = await h.until('the new chat to open', async () => {
      const view = h.byId(page, 'chat-view');
      if ((await view.count()) === 0) return null;
      return view.first().getAttribute('data-chat-id', { timeout: 1000 });
    });
    const parent = await h.api('GET', `/api/v2/chats/${parentId}`);
    assert.equal(parent.subagents, true);

    const children = await h.until('the child chat', () => h.api('GET', `/api/v2/chats?parent_id=${parentId}`), {
      accept: (list) => list.length === 1,
      timeout: h.SLOW_WAIT,
    });
    const child = children[0];
    assert.equal(child.parent_chat_id, parentId);

    // Nested under the parent's item, not a top-level item, with its status.
    const parentItem = h.chatItem(page, parentId);
    const nested = parentItem.getByTestId('chat-children').locator(`[data-testid="chat-item"][data-chat-id="${child.id}"]`);
    await h.until('the child nested under its parent', () => nested.count(), { accept: (n) => n === 1, timeout: h.SLOW_WAIT });
    await h.expectText(nested.getByTestId('chat-title'), 'Helper agent');
    await h.until('the sub-agent listed as running', () => h.statusOf(nested.getByTestId('status-badge')), { accept: (v) => v === 'running', timeout: h.SLOW_WAIT });
    const topLevel = await h.byId(page, 'chat-list').evaluate((list, id) =>
      [...list.children].some((li) => li.dataset.chatId === id), child.id);
    assert.equal(topLevel, false, 'the child is not a top-level item');

    // Collapse and expand.
    const toggle = parentItem.getByTestId('chat-children-toggle');
    await h.expectText(toggle, '▾ 1 sub-agent');
    await toggle.click();
    await h.until('the children hidden', () => nested.isVisible(), { accept: (v) => v === false });
    assert.equal(await parentItem.getByTestId('chat-children-toggle').getAttribute('aria-expanded'), 'false');
    await parentItem.getByTestId('chat-children-toggle').click();
    await h.until('the children shown', () => nested.isVisible(), { accept: (v) => v === true });

    // The child's status follows it: it finishes its slow answer.
    await h.until('the sub-agent listed as waiting', () => h.statusOf(nested.getByTestId('status-badge')), { accept: (v) => v === 'waiting', timeout: h.SLOW_WAIT });

    // Opening the child from the list shows its prompt.
    await nested.locator('.chat-link').click();
    await h.expectMessageTexts(page, 'user', ['slow child work']);
  });
});
