// Long chats open as a window (API.md "Message windows and paging by
// size"): the first 20 and the last 100 messages, with a "load earlier"
// control where the omitted middle is; clicking it pages the middle in
// place. The long chat is built through the API: each round is a dynamic
// tool call and its result, four messages (user, call, result, answer),
// which the fake model answers at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

const TOOL = { name: 'pick', description: 'Pick a number', input_schema: { type: 'object' } };
const ROUNDS = 40; // 160 messages: 40 omitted between the head (20) and the tail (100)

/** Answers the pending call of chat `id` with `output` and waits for the model's answer. */
async function answerPendingCall(id, output) {
  await h.expectApiStatus(id, 'requires_action', { timeout: h.SLOW_WAIT });
  const { messages } = await h.api('GET', `/api/v2/chats/${id}/messages?limit=1`);
  const call = messages[0].content.find((p) => p.type === 'tool-call');
  assert.ok(call, `a pending tool call in ${JSON.stringify(messages)}`);
  await h.api('POST', `/api/v2/chats/${id}/tool-results`, { results: [{ tool_call_id: call.tool_call_id, output }] });
  await h.expectApiStatus(id, 'waiting', { timeout: h.SLOW_WAIT });
}

async function longChat() {
  const chat = await h.api('POST', '/api/v2/chats', {
    title: 'A long chat',
    content: [{ type: 'text', text: 'call pick {"round": 0}' }],
    dynamic_tools: [TOOL],
  });
  await answerPendingCall(chat.id, 'r0');
  for (let i = 1; i < ROUNDS; i++) {
    await h.api('POST', `/api/v2/chats/${chat.id}/messages`, { content: [{ type: 'text', text: `call pick {"round": ${i}}` }] });
    await answerPendingCall(chat.id, `r${i}`);
  }
  return h.api('GET', `/api/v2/chats/${chat.id}`);
}

/** The ids of the rendered messages, in document order. */
function renderedIds(page) {
  return h.messages(page).evaluateAll((els) => els.map((el) => Number(el.closest('[data-message-id]').dataset.messageId)));
}

test('a long chat opens with its first and last messages and "load earlier" inserts the middle in place', { timeout: h.ms(240_000) }, async (t) => {
  const chat = await longChat();
  assert.equal(chat.message_count, ROUNDS * 4);
  assert.equal(chat.last_message_preview, `tool said: r${ROUNDS - 1}`);
  const everything = await h.api('GET', `/api/v2/chats/${chat.id}/messages?limit=200`);
  assert.equal(everything.has_more, false);
  const all = everything.messages.map((m) => m.id);
  assert.equal(all.length, ROUNDS * 4);

  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await page.goto(`${h.CHATD_URL}/#/chats/${chat.id}`);
    const control = h.byId(page, 'load-earlier');
    await control.waitFor({ state: 'visible' });
    await h.expectText(control, `Load earlier messages (${all.length - 120} more)`);
    const shown = await renderedIds(page);
    assert.deepEqual(shown, [...all.slice(0, 20), ...all.slice(-100)]);
    // The control sits between the head and the tail.
    const before = await h.byId(page, 'load-earlier-gap').evaluate((el) => Number(el.previousElementSibling.dataset.messageId));
    const next = await h.byId(page, 'load-earlier-gap').evaluate((el) => Number(el.nextElementSibling.dataset.messageId));
    assert.deepEqual([before, next], [all[19], all[all.length - 100]]);

    await control.click();
    await h.byId(page, 'load-earlier-gap').waitFor({ state: 'detached' });
    await h.until('every message, in order', () => renderedIds(page), {
      accept: (ids) => ids.length === all.length && ids.every((id, i) => id === all[i]),
    });
    // The chat stays live after the window: a new message arrives at the end.
    await h.send(page, 'and one more');
    await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });
    await h.until('the echo at the end', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts[texts.length - 1] === 'echo: and one more',
    });
    // The sidebar's tooltip shows the list's preview and count.
    const link = h.chatItem(page, chat.id).locator('.chat-link');
    await h.until('the preview in the chat list', () => link.getAttribute('title'), {
      accept: (title) => title && title.startsWith('echo: and one more') && title.includes(`${all.length + 2} messages`),
    });
  });
});
