// While the agent works: the stop button, answers marked as interrupted
// or cut short, the retry banner (and that it goes when retrying is over),
// the token label during a reply, the live region's announcements.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

const CUT_SHORT = "cut short: the model's output/context limit was reached";
const FILTERED = "cut short: the provider's content filter stopped the answer";

/** Waits until the live preview shows `text` (a part of the reply now streaming). */
async function expectPreviewShows(page, text) {
  await h.until(`the preview to show ${JSON.stringify(text)}`, () => h.textOf(h.byId(page, 'message-preview')), {
    accept: (shown) => shown?.includes(text),
    timeout: h.SLOW_WAIT,
  });
}

/** The `finish-mark`s of the assistant messages, in order (null: none). */
function finishMarks(page) {
  return h.messages(page, 'assistant').evaluateAll((els) =>
    els.map((el) => {
      const mark = el.querySelector('[data-testid="finish-mark"]');
      return mark ? mark.textContent : null;
    }),
  );
}

test('the stop button shows while the agent works, stops it, and the cut answer is marked interrupted', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'quick one');
    await h.expectStatus(page, 'waiting');
    const stop = h.byId(page, 'interrupt');
    assert.equal(await stop.isVisible(), false, 'no stop button while idle');
    assert.deepEqual(await finishMarks(page), [null], 'a finished answer has no mark');

    // A long text streams in small steps (the fake spreads a slow answer
    // over 40 parts), so that its start shows soon.
    await h.send(page, 'slow answer to stop, long enough to stream in small steps of two letters');
    await h.expectStatus(page, 'running');
    await stop.waitFor({ state: 'visible' });
    assert.equal(await stop.getAttribute('aria-label'), 'Stop the reply');
    await expectPreviewShows(page, 'echo: slow');
    await stop.click();
    await h.expectStatus(page, 'waiting');
    await stop.waitFor({ state: 'hidden' });
    await h.until('the marks', () => finishMarks(page), { accept: (m) => JSON.stringify(m) === JSON.stringify([null, 'interrupted']) });
    // The live region told what happened.
    await h.expectSeenInOrder(page, 'live-status', ['The assistant is writing…', 'The reply was stopped.']);

    // "Send now" interrupts too: the cut answer is marked, the new one is not.
    await h.send(page, 'slow again, and long enough to stream in small steps of two letters');
    await expectPreviewShows(page, 'echo: slow');
    await h.send(page, 'never mind', 'send-interrupt');
    await h.until('the answer to "never mind"', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts.at(-1) === 'echo: never mind',
      timeout: h.SLOW_WAIT,
    });
    await h.expectStatus(page, 'waiting');
    assert.deepEqual(await finishMarks(page), [null, 'interrupted', 'interrupted', null]);

    // A reload keeps the marks.
    await page.reload();
    await h.expectStatus(page, 'waiting');
    await h.until('the marks after a reload', () => finishMarks(page), {
      accept: (m) => JSON.stringify(m) === JSON.stringify([null, 'interrupted', 'interrupted', null]),
    });
  });
});

test('the live region says the reply was stopped even when "interrupting" never reaches the page on its own', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    // A fast worker ends the interrupt before the stream's next frame, so
    // running, interrupting and waiting can arrive together; here the
    // page never sees "interrupting" at all.
    await page.routeWebSocket(/\/stream/, (ws) => {
      const server = ws.connectToServer();
      server.onMessage((frame) => {
        const events = JSON.parse(String(frame));
        const list = Array.isArray(events) ? events : [events];
        ws.send(JSON.stringify(list.filter((e) => !(e.type === 'status' && e.status.status === 'interrupting'))));
      });
    });
    await h.signIn(page);
    await h.createChat(page, 'quick one');
    await h.expectStatus(page, 'waiting');
    await h.send(page, 'slow answer to stop, long enough to stream in small steps of two letters');
    await expectPreviewShows(page, 'echo: slow');
    await h.byId(page, 'interrupt').click();
    await h.until('the marks', () => finishMarks(page), { accept: (m) => JSON.stringify(m) === JSON.stringify([null, 'interrupted']) });
    await h.expectStatus(page, 'waiting');
    await h.expectSeenInOrder(page, 'live-status', ['The assistant is writing…', 'The reply was stopped.']);

    // The next turn, not stopped, is complete again.
    await h.send(page, 'quick one');
    await h.until('the answer to the next message', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts.length === 3,
      timeout: h.SLOW_WAIT,
    });
    await h.expectStatus(page, 'waiting');
    await h.expectSeenInOrder(page, 'live-status', ['The reply was stopped.', 'The reply is complete.']);
  });
});

test('answers cut short by the output limit or a content filter are marked (finish_reason injected into the stream)', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    // Until the server sends ChatMessage.finish_reason, give the messages of
    // the stream the one the fake model finished with.
    await page.routeWebSocket(/\/stream/, (ws) => {
      const server = ws.connectToServer();
      server.onMessage((frame) => {
        const events = JSON.parse(String(frame));
        for (const e of events) {
          if (e.type !== 'message' || e.message.role !== 'assistant' || 'finish_reason' in e.message) continue;
          const text = e.message.content.map((p) => p.text || '').join('');
          e.message.finish_reason = text.includes('truncate') ? 'length' : text.includes('filtered') ? 'content_filter' : text.includes('absent') ? undefined : 'stop';
          if (text.includes('null reason')) e.message.finish_reason = null;
        }
        ws.send(JSON.stringify(events));
      });
    });
    await h.signIn(page);
    await h.createChat(page, 'please truncate this');
    await h.expectStatus(page, 'waiting');
    for (const text of ['this one is filtered', 'a normal one', 'null reason', 'absent reason']) {
      await h.send(page, text);
      await h.until(`the answer to ${text}`, () => h.messageTexts(page, 'assistant'), { accept: (texts) => texts.at(-1) === `echo: ${text}` });
      await h.expectStatus(page, 'waiting');
    }
    await h.until('the marks', () => finishMarks(page), {
      accept: (m) => JSON.stringify(m) === JSON.stringify([CUT_SHORT, FILTERED, null, null, null]),
    });
    const mark = h.messages(page, 'assistant').first().getByTestId('finish-mark');
    assert.equal(await mark.getAttribute('data-finish-reason'), 'length');
  });
});

test('with the server\'s finish_reason, an answer cut at the output limit is marked cut short', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'truncate me please');
    await h.expectStatus(page, 'waiting');
    const [answer] = (await h.apiMessages(id)).filter((m) => m.role === 'assistant');
    if (!('finish_reason' in answer)) {
      t.skip('this server sends no ChatMessage.finish_reason yet');
      return;
    }
    assert.equal(answer.finish_reason, 'length');
    await h.until('the mark', () => finishMarks(page), { accept: (m) => JSON.stringify(m) === JSON.stringify([CUT_SHORT]) });
  });
});

test('the retry banner shows while the provider is retried and goes for good once the retries are stopped', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    // The fake model answers 503 to "overloaded", every time.
    const id = await h.createChat(page, 'overloaded model, please retry');
    const banner = h.byId(page, 'retry-banner');
    await h.until('the retry banner', () => h.textOf(banner), { accept: (text) => text?.includes('fake LLM: overloaded') });
    assert.match(await h.textOf(banner), /Retry \d+/);
    await h.expectStatus(page, 'running');
    const stop = h.byId(page, 'interrupt');
    await h.until('the stop button to be usable while retrying', () => stop.isEnabled());
    await stop.click();
    await h.expectStatus(page, 'waiting');
    await banner.waitFor({ state: 'hidden' });
    await h.expectApiStatus(id, 'waiting');

    // Still gone after a reload (the server sends the last retry state with
    // the chat's state).
    await page.reload();
    await h.expectStatus(page, 'waiting');
    await h.expectConnection(page, 'live');
    assert.equal(await banner.count(), 0);
    // And when the next turn runs.
    await h.send(page, 'fine now');
    await h.expectMessageTexts(page, 'assistant', ['echo: fine now']);
    assert.deepEqual((await h.seenValues(page, 'retry-banner')).filter(Boolean), []);
  });
});

test('the token label keeps the last known usage while a reply runs, never 0 in / 0 out', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const usage = h.byId(page, 'usage');
    // The fake model reports 10 input and 5 output tokens per answer.
    await h.createChat(page, 'count my tokens');
    await h.expectStatus(page, 'waiting');
    await h.expectText(usage, 'This chat: 10 in · 5 out');
    await h.send(page, 'and count again');
    await h.expectMessageTexts(page, 'assistant', ['echo: count my tokens', 'echo: and count again']);
    await h.expectText(usage, 'This chat: 20 in · 10 out');
    // Every label the page showed: a dash before the first answer, then
    // only real sums, each kept while the next reply ran.
    const seen = (await h.seenValues(page, 'usage')).filter(Boolean);
    assert.deepEqual(seen, ['This chat: –', 'This chat: 10 in · 5 out', 'This chat: 20 in · 10 out']);
  });
});
