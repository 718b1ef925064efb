// A dynamic (client-side) tool: the model calls it, the user answers in the
// action-required panel, the model answers with the result.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

const TOOLS = [
  {
    name: 'get_weather',
    description: 'The weather in a city',
    input_schema: {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
    },
  },
];

test('a dynamic tool call is answered from the action-required panel and the model uses the result', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'call get_weather {"city": "Lisbon"}', { tools: TOOLS });
    await h.expectStatus(page, 'requires_action');

    const panel = h.byId(page, 'action-required');
    await panel.waitFor({ state: 'visible' });
    const forms = panel.getByTestId('tool-call-form');
    await h.expectCount(forms, 1);
    const form = forms.first();
    assert.match((await form.getAttribute('data-tool-call-id')) ?? '', /^call_fake_[0-9]+$/);
    const shown = await form.textContent();
    assert.ok(shown.includes('get_weather'), `the form names the tool: ${shown}`);
    assert.ok(shown.includes('Lisbon'), `the form shows the arguments: ${shown}`);
    const deadline = await h.textOf(panel.getByTestId('action-deadline'));
    assert.ok(deadline, 'the panel shows a deadline');

    // The server has the same call outstanding.
    const chat = await h.api('GET', `/api/v2/chats/${id}`);
    assert.equal(chat.status, 'requires_action');
    assert.ok(chat.requires_action_deadline_at);

    await form.getByTestId('tool-output').fill('sunny, 21 C');
    await panel.getByTestId('tool-submit').click();

    await h.until('the answer to the tool result', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts.at(-1) === 'tool said: sunny, 21 C',
    });
    await h.expectStatus(page, 'waiting');
    await h.byId(page, 'action-required').waitFor({ state: 'hidden' });
  });
});
