// Context management in the chat view (API.md "Context management"): the
// context meter, a compaction as one collapsed "Context compacted" entry
// that opens to the summary, and "Clear context" leaving a divider.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

/** Waits until `locator`'s text matches `re`. */
function expectMatch(locator, re) {
  return h.until(`text matching ${re} in ${locator}`, () => h.textOf(locator), { accept: (v) => v != null && re.test(v) });
}

/** The meter's figures: `{ percent, tokens, label, title }`. */
async function meter(page) {
  const el = h.byId(page, 'context-meter');
  return {
    percent: Number(await el.getAttribute('data-percent')),
    tokens: Number(await el.getAttribute('data-tokens')),
    label: await h.textOf(h.byId(page, 'context-label')),
    title: (await el.getAttribute('title')) ?? '',
  };
}

test('the context meter shows how full the window is and follows the conversation live', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'hello');
    await h.expectMessageTexts(page, 'assistant', ['echo: hello']);
    await h.expectStatus(page, 'waiting');
    // The fake model reports 10 input and 5 output tokens: exact, no "~".
    const first = await h.until('the meter', () => meter(page), { accept: (m) => m.tokens === 15 });
    assert.match(first.label, /^Context 0% of \d+(\.\d)?[kM]?$/);
    assert.match(first.title, /^Context: 15 of [\d,.\s]+ tokens$/);
    assert.equal(await h.byId(page, 'context-meter').getAttribute('role'), 'meter');

    // A long message counts at once, as an estimate, while it is answered.
    await h.send(page, `slow ${'a longer second message '.repeat(40)}`);
    const growing = await h.until('the meter to grow', () => meter(page), { accept: (m) => m.tokens > 15 });
    assert.match(growing.title, /^Context: ~/);
    await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });
    await h.until('the reported size again', () => meter(page), { accept: (m) => m.tokens === 15 && !m.title.includes('~') });
  });
});

test('compacting shows one collapsed entry that opens to the summary, and clearing the context leaves a divider', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    // Long enough that a one-line summary is smaller than what it replaces.
    const first = `first question ${'about the weather '.repeat(12)}`.trim();
    const second = `second question ${'about the sea '.repeat(12)}`.trim();
    await h.createChat(page, first);
    await h.expectMessageTexts(page, 'assistant', [`echo: ${first}`]);
    await h.send(page, second);
    await h.expectMessageTexts(page, 'assistant', [`echo: ${first}`, `echo: ${second}`]);
    await h.expectStatus(page, 'waiting');
    const before = await meter(page);

    await h.chatMenu(page, 'compact-now');
    const entry = h.byId(page, 'compaction');
    await h.expectCount(entry, 1);
    await expectMatch(h.byId(page, 'compaction-summary'), /^Context compacted: 2 messages summarised/);
    // Collapsed: the summary text is there but hidden until opened.
    assert.equal(await entry.evaluate((el) => el.open), false);
    assert.equal(await h.byId(page, 'compaction-text').isVisible(), false);
    await h.byId(page, 'compaction-summary').click();
    await expectMatch(h.byId(page, 'compaction-text'), /^Summary: an earlier conversation of \d+ characters\.$/);
    // The conversation itself is untouched, and no tool call is shown.
    await h.expectMessageTexts(page, 'user', [first, second]);
    assert.equal(await page.locator('.tool-call').count(), 0);
    await h.until('the meter to count the compaction', () => meter(page), {
      accept: (m) => / 1 compaction$/.test(m.title) && m.tokens !== before.tokens,
    });

    await h.chatMenu(page, 'clear-context');
    await h.expectCount(h.byId(page, 'context-cleared'), 1);
    await h.until('an empty context', () => meter(page), { accept: (m) => m.tokens === 0 && /^Context 0% of /.test(m.label) });
    // The next answer is the model's first in the new context.
    await h.send(page, 'fresh start');
    await h.until('the answer after the divider', () => h.messageTexts(page, 'assistant'), {
      accept: (texts) => texts.at(-1) === 'echo: fresh start',
    });
  });
});

test('compacting a chat with too little history says so and changes nothing', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'only one');
    await h.expectMessageTexts(page, 'assistant', ['echo: only one']);
    await h.expectStatus(page, 'waiting');
    await h.chatMenu(page, 'compact-now');
    await expectMatch(h.byId(page, 'toast'), /Nothing to compact/);
    assert.equal(await h.byId(page, 'compaction').count(), 0);
    await h.expectStatus(page, 'waiting');
  });
});
