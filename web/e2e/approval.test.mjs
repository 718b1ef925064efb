// Tool approval (API.md "Tool approval (human in the loop)"): the model
// calls an MCP tool whose server requires approval (`calc__add`, set up by
// scripts/e2e.sh), the chat waits, and the approval card approves or denies
// the call; the model then answers with the real result or the denial.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

/** Creates a chat on the `calc` MCP server through the API and opens it. */
async function openApprovalChat(page, text) {
  const servers = await h.api('GET', '/api/v2/chats/mcp-servers');
  const calc = servers.find((s) => s.slug === 'calc');
  assert.ok(calc, 'scripts/e2e.sh configures the calc server');
  assert.deepEqual(calc.require_approval, ['add']);
  const chat = await h.api('POST', '/api/v2/chats', {
    content: [{ type: 'text', text }],
    mcp_server_ids: [calc.id],
  });
  await h.expectApiStatus(chat.id, 'requires_action');
  await page.goto(`${h.CHATD_URL}/#/chats/${chat.id}`);
  await h.expectStatus(page, 'requires_action');
  return chat.id;
}

/** The one approval card, after checking what it shows. */
async function theCard(page) {
  const panel = h.byId(page, 'action-required');
  await panel.waitFor({ state: 'visible' });
  const cards = panel.getByTestId('approval-card');
  await h.expectCount(cards, 1);
  await h.expectCount(panel.getByTestId('tool-call-form'), 0);
  const card = cards.first();
  assert.match((await card.getAttribute('data-tool-call-id')) ?? '', /^call_fake_[0-9]+$/);
  assert.equal(await h.textOf(card.getByTestId('approval-tool')), 'calc__add');
  const args = JSON.parse(await h.textOf(card.getByTestId('approval-args')));
  assert.deepEqual(args, { a: 2, b: 3 });
  const deadline = await h.textOf(card.getByTestId('approval-deadline'));
  assert.match(deadline, /^Deadline .+ \(in \d/, `the card shows the deadline: ${deadline}`);
  return card;
}

test('an approved call runs on its MCP server and the model reads the result', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await openApprovalChat(page, 'call calc__add {"a": 2, "b": 3}');
    const card = await theCard(page);
    const pending = await h.api('GET', `/api/v2/chats/${id}`);
    assert.ok(pending.requires_action_deadline_at);

    await card.getByTestId('approval-approve').click();
    await h.until('the answer to the approved call', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts.at(-1) === 'tool said: 5',
    });
    await h.expectStatus(page, 'waiting');
    await h.byId(page, 'action-required').waitFor({ state: 'hidden' });
    // History: the approval (client-only) and the real result, once.
    const messages = await h.apiMessages(id);
    const parts = messages.flatMap((m) => m.content);
    assert.equal(parts.filter((p) => p.type === 'tool-approval' && p.approved).length, 1);
    const results = parts.filter((p) => p.type === 'tool-result');
    assert.deepEqual(results.map((r) => [r.result, r.is_error]), [['5', false]]);
    await h.expectCount(page.getByTestId('tool-approval'), 1);
  });
});

test('a denied call gets the denial with the reason and the model continues', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await openApprovalChat(page, 'call calc__add {"a": 2, "b": 3}');
    const card = await theCard(page);
    await card.getByTestId('approval-reason').fill('not today');
    await card.getByTestId('approval-deny').click();

    const denial = { error: 'Tool call denied by user', reason: 'not today' };
    await h.until('the answer to the denied call', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts.at(-1) === `tool said: ${JSON.stringify(denial)}`,
    });
    await h.expectStatus(page, 'waiting');
    const parts = (await h.apiMessages(id)).flatMap((m) => m.content);
    const results = parts.filter((p) => p.type === 'tool-result');
    assert.deepEqual(results.map((r) => [r.result, r.is_error]), [[denial, true]]);
    assert.equal(parts.filter((p) => p.type === 'tool-approval').length, 0);
  });
});
