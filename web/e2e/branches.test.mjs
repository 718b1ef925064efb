// Branches (API.md "Branches, regenerate and fork"): an edit keeps the old
// text one arrow away ("< n/m >"), a regenerated answer is a sibling of
// the old one, arrows are disabled while the chat is busy, and "Fork from
// here" opens a new chat with a copy that links back to its origin.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

/** The committed message of the open chat with `role` whose text is `text`. */
function messageWithText(page, role, text) {
  return h.messages(page, role).filter({
    has: page.getByTestId('message-text').getByText(text, { exact: true }),
  });
}

/** The message's "n/m" (`branch-position`), or null when it has no siblings. */
async function positionOf(message) {
  return h.textOf(message.getByTestId('branch-position'));
}

/** Waits until the message's `branch-position` reads `expected`. */
async function expectPosition(message, expected, { timeout = h.WAIT } = {}) {
  return h.expectText(message.getByTestId('branch-position'), expected, { timeout });
}

/** Whether the arrows of the message's `branch-nav` are disabled: `[prev, next]`. */
async function arrowsDisabled(message) {
  return Promise.all([
    message.getByTestId('branch-prev').isDisabled(),
    message.getByTestId('branch-next').isDisabled(),
  ]);
}

test('an edit adds a version: "< 2/2 >" on the edited message, the arrow back shows the old text and its answers "< 1/2 >", and a reload keeps the branch shown', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'first question');
    await h.expectMessageTexts(page, 'assistant', ['echo: first question']);
    await h.expectStatus(page, 'waiting');
    await h.send(page, 'second question');
    await h.expectMessageTexts(page, 'assistant', ['echo: first question', 'echo: second question']);
    await h.expectStatus(page, 'waiting');
    // Nothing has siblings yet.
    await h.expectCount(h.byId(page, 'branch-nav'), 0);
    const originalFirst = await h.messages(page, 'user').first().getAttribute('data-message-id');

    // The edit (slow, so that the arrows can be seen disabled while it runs).
    await h.messages(page, 'user').first().getByTestId('edit-message').click();
    const edited = 'edited slowly';
    await h.byId(page, 'edit-input').fill(edited);
    await h.byId(page, 'edit-save').click();
    await h.expectMessageTexts(page, 'user', [edited]);
    const editedMessage = h.messages(page, 'user').first();
    await expectPosition(editedMessage, '2/2');
    assert.notEqual(await editedMessage.getAttribute('data-message-id'), originalFirst);
    await h.expectStatus(page, 'running');
    assert.deepEqual(await arrowsDisabled(editedMessage), [true, true], 'the arrows wait for the reply');
    await h.expectMessageTexts(page, 'assistant', [`echo: ${edited}`], { timeout: h.SLOW_WAIT });
    await h.expectStatus(page, 'waiting');
    // At the last version: back is possible, forward is not.
    await h.until('the arrows of 2/2 to be [back enabled, next disabled]', () => arrowsDisabled(h.messages(page, 'user').first()), {
      accept: (v) => v[0] === false && v[1] === true,
    });

    // Back: the old text and the answers that followed it, nothing lost.
    await h.messages(page, 'user').first().getByTestId('branch-prev').click();
    await h.expectMessageTexts(page, 'user', ['first question', 'second question']);
    await h.expectMessageTexts(page, 'assistant', ['echo: first question', 'echo: second question']);
    const first = h.messages(page, 'user').first();
    await expectPosition(first, '1/2');
    assert.equal(await first.getAttribute('data-message-id'), originalFirst);
    assert.deepEqual(await arrowsDisabled(first), [true, false]);
    // The others have no siblings.
    await h.expectCount(h.byId(page, 'branch-nav'), 1);
    await h.expectStatus(page, 'waiting');

    // The server shows the same branch.
    const onServer = (await h.apiMessages(id)).map((m) => [m.role, m.content.find((p) => p.type === 'text')?.text]);
    assert.deepEqual(onServer, [
      ['user', 'first question'],
      ['assistant', 'echo: first question'],
      ['user', 'second question'],
      ['assistant', 'echo: second question'],
    ]);

    // A reload shows the branch made active.
    await page.reload();
    await h.expectMessageTexts(page, 'user', ['first question', 'second question']);
    await expectPosition(h.messages(page, 'user').first(), '1/2');

    // And forward again: the edited version and its answer.
    await h.messages(page, 'user').first().getByTestId('branch-next').click();
    await h.expectMessageTexts(page, 'user', [edited]);
    await h.expectMessageTexts(page, 'assistant', [`echo: ${edited}`]);
    await expectPosition(h.messages(page, 'user').first(), '2/2');
  });
});

test('"Regenerate" on the last answer streams a new answer in its place, "< 2/2 >", and the arrow back shows the first one', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'regenerate me');
    await h.expectMessageTexts(page, 'assistant', ['echo: regenerate me']);
    await h.expectStatus(page, 'waiting');
    const answer = h.messages(page, 'assistant').first();
    const firstAnswerId = await answer.getAttribute('data-message-id');
    // Only the last answer has it, and only one message.
    await h.expectCount(h.byId(page, 'regenerate'), 1);
    assert.equal(await answer.getByTestId('regenerate').count(), 1);

    await answer.getByTestId('regenerate').click();
    // A second turn runs and its answer replaces the first in the view.
    await h.expectSeenInOrder(page, 'chat-status', ['running', 'waiting', 'running', 'waiting']);
    await h.expectMessageTexts(page, 'assistant', ['echo: regenerate me']);
    const regenerated = h.messages(page, 'assistant').first();
    await expectPosition(regenerated, '2/2');
    assert.notEqual(await regenerated.getAttribute('data-message-id'), firstAnswerId);
    await h.expectMessageTexts(page, 'user', ['regenerate me']);
    // The question has one version; the answer is the one to regenerate.
    assert.equal(await h.messages(page, 'user').first().getByTestId('branch-nav').count(), 0);
    await h.expectCount(h.byId(page, 'regenerate'), 1);
    await h.until('the arrows of 2/2 to be [back enabled, next disabled]', () => arrowsDisabled(h.messages(page, 'assistant').first()), {
      accept: (v) => v[0] === false && v[1] === true,
    });
    const chat = await h.api('GET', `/api/v2/chats/${id}`);
    assert.equal(String(chat.active_leaf_id), await regenerated.getAttribute('data-message-id'));

    // Back to the first answer.
    await regenerated.getByTestId('branch-prev').click();
    await h.until('the first answer to be shown again', () => h.messages(page, 'assistant').first().getAttribute('data-message-id'), {
      accept: (v) => v === firstAnswerId,
    });
    const back = h.messages(page, 'assistant').first();
    await expectPosition(back, '1/2');
    assert.deepEqual(await arrowsDisabled(back), [true, false]);
    await h.expectMessageTexts(page, 'assistant', ['echo: regenerate me']);
    await h.expectMessageTexts(page, 'user', ['regenerate me']);
    assert.equal(await positionOf(h.messages(page, 'user').first()), null);
  });
});

test('"Fork from here" opens a new chat with the conversation up to that message, and its origin links back', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const sourceId = await h.createChat(page, 'fork source one');
    await h.expectMessageTexts(page, 'assistant', ['echo: fork source one']);
    await h.expectStatus(page, 'waiting');
    await h.send(page, 'fork source two');
    await h.expectMessageTexts(page, 'assistant', ['echo: fork source one', 'echo: fork source two']);
    await h.expectStatus(page, 'waiting');
    // The generated title, which the fork's title is made of.
    const sourceTitle = 'A chat with the fake model';
    await h.expectText(h.chatItem(page, sourceId).getByTestId('chat-title'), sourceTitle);
    assert.equal(await h.byId(page, 'forked-from').isVisible(), false, 'a chat that is not a fork says nothing');

    const from = messageWithText(page, 'assistant', 'echo: fork source one');
    const fromId = Number(await from.getAttribute('data-message-id'));
    await from.getByTestId('fork-message').click();

    // The fork opens: a copy up to that answer, idle.
    const forkId = await h.until('the fork to open', async () => {
      const current = await h.byId(page, 'chat-view').first().getAttribute('data-chat-id', { timeout: 1000 });
      return current !== sourceId ? current : null;
    });
    assert.equal(new URL(page.url()).hash, `#/chats/${forkId}`);
    await h.expectMessageTexts(page, 'user', ['fork source one']);
    await h.expectMessageTexts(page, 'assistant', ['echo: fork source one']);
    await h.expectStatus(page, 'waiting');
    const fork = await h.api('GET', `/api/v2/chats/${forkId}`);
    assert.deepEqual(fork.forked_from, { chat_id: sourceId, message_id: fromId });
    assert.equal(fork.title, `Fork of ${sourceTitle}`);
    await h.expectText(h.chatItem(page, forkId).getByTestId('chat-title'), `Fork of ${sourceTitle}`);

    // Its origin, at the top: a link to the source chat.
    await h.expectText(h.byId(page, 'forked-from'), `Forked from ${sourceTitle}`);
    const link = h.byId(page, 'forked-from-link');
    assert.equal(await link.getAttribute('href'), `#/chats/${sourceId}`);

    // The fork goes on by itself.
    await h.send(page, 'only in the fork');
    await h.expectMessageTexts(page, 'assistant', ['echo: fork source one', 'echo: only in the fork']);
    await h.expectStatus(page, 'waiting');

    // Back to the source, untouched.
    await h.byId(page, 'forked-from-link').click();
    await h.until('the source chat to open', () => h.byId(page, 'chat-view').first().getAttribute('data-chat-id', { timeout: 1000 }), {
      accept: (v) => v === sourceId,
    });
    await h.expectMessageTexts(page, 'user', ['fork source one', 'fork source two']);
    await h.expectMessageTexts(page, 'assistant', ['echo: fork source one', 'echo: fork source two']);
    assert.equal(await h.byId(page, 'forked-from').isVisible(), false);
  });
});

test('the view follows a regenerate and a branch switch even when the stream sends no history_reset, or nothing at all', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    // Between the page and the server: `mode` 'all' passes every event,
    // 'no-reset' drops `history_reset`, 'none' drops every frame (a stream
    // that lags behind).
    let mode = 'all';
    const dropped = [];
    await page.routeWebSocket(/\/api\/v2\/chats\/[^/]+\/stream/, (ws) => {
      const server = ws.connectToServer();
      server.onMessage((frame) => {
        let events = JSON.parse(String(frame));
        if (mode === 'none') {
          dropped.push(...events.map((e) => e.type));
          return;
        }
        if (mode === 'no-reset') {
          dropped.push(...events.filter((e) => e.type === 'history_reset').map((e) => e.type));
          events = events.filter((e) => e.type !== 'history_reset');
        }
        if (events.length > 0) ws.send(JSON.stringify(events));
      });
    });
    await h.signIn(page);
    await h.createChat(page, 'follow me');
    await h.expectMessageTexts(page, 'assistant', ['echo: follow me']);
    await h.expectStatus(page, 'waiting');
    const firstAnswerId = await h.messages(page, 'assistant').first().getAttribute('data-message-id');

    // Regenerate without history_reset: the old answer still leaves the view.
    mode = 'no-reset';
    await h.byId(page, 'regenerate').click();
    await h.expectSeenInOrder(page, 'chat-status', ['running', 'waiting', 'running', 'waiting']);
    await expectPosition(h.messages(page, 'assistant').first(), '2/2');
    await h.expectMessageTexts(page, 'assistant', ['echo: follow me']);
    await h.expectMessageTexts(page, 'user', ['follow me']);
    const secondAnswerId = await h.messages(page, 'assistant').first().getAttribute('data-message-id');
    assert.notEqual(secondAnswerId, firstAnswerId);
    assert.ok(dropped.includes('history_reset'), `the server sent a history_reset (dropped: ${dropped})`);

    // A branch switch with the stream silent: the view reads the branch again.
    mode = 'none';
    dropped.length = 0;
    await h.messages(page, 'assistant').first().getByTestId('branch-prev').click();
    await h.until('the first answer to be shown again', () => h.messages(page, 'assistant').first().getAttribute('data-message-id'), {
      accept: (v) => v === firstAnswerId,
    });
    await expectPosition(h.messages(page, 'assistant').first(), '1/2');
    await h.expectMessageTexts(page, 'assistant', ['echo: follow me']);
    await h.expectMessageTexts(page, 'user', ['follow me']);
    await h.until('the stream to have sent the switch (dropped here)', async () => dropped.includes('history_reset'));
  });
});
