// Usage and budgets (API.md "Limits, budgets and the token lifecycle"): the
// sidebar shows the month's usage against the budgets and follows a turn
// (just the figures without a budget); a turn stopped by a used-up budget
// (`usage_limit`) is explained in the chat, and a send refused with `429`
// says why and keeps the typed message. Each test uses a member of its own
// (`createUser`) whose limits the admin token sets with `PATCH /users/{id}`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();
const EN = { locale: 'en-US', timezoneId: 'UTC' };
const count = (n) => new Intl.NumberFormat('en-US').format(n);
const resetDay = (usage) => new Intl.DateTimeFormat('en-US', { day: 'numeric', month: 'short', timeZone: 'UTC' }).format(new Date(usage.period_end));

const TOOLS = [{ name: 'pick_color', description: 'Asks the user for a colour.', input_schema: { type: 'object' } }];

async function usageOf(token) {
  const { status, body } = await h.apiAs(token, 'GET', '/api/v2/users/me/usage');
  assert.equal(status, 200, `GET /users/me/usage: ${status} ${JSON.stringify(body)}`);
  return body;
}

test('the sidebar shows the month’s usage against the budgets and follows a turn', { timeout: h.TEST_TIMEOUT }, async (t) => {
  const { user, token } = await h.createUser('usage');
  await h.api('PATCH', `/api/v2/users/${user.id}`, { limits: { monthly_budget_micros: 5_000_000, monthly_token_budget: 100_000 } });
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page, token);
    await h.expectText(h.byId(page, 'usage-spend'), 'Spent $0.00 of $5.00');
    await h.expectText(h.byId(page, 'usage-tokens'), '0 tokens of 100,000');
    const before = await usageOf(token);
    await h.expectText(h.byId(page, 'usage-reset'), `resets ${resetDay(before)}`);
    assert.equal(await h.byId(page, 'usage-exhausted').count(), 0);
    assert.equal(await h.byId(page, 'account-usage').locator('[role="meter"]').count(), 2);

    // A turn (the fake model reports 10 input and 5 output tokens per call):
    // the panel shows what the server counted once the turn is over, without
    // a reload.
    await h.createChat(page, 'count my tokens');
    await h.expectMessageTexts(page, 'assistant', ['echo: count my tokens']);
    await h.expectStatus(page, 'waiting');
    const shown = await h.until('the panel to show the turn’s tokens', () => h.textOf(h.byId(page, 'usage-tokens')), {
      accept: (text) => /^[\d,]+ tokens of 100,000$/.test(text || '') && Number(text.split(' ')[0].replace(/,/g, '')) >= 15,
    });
    const after = await usageOf(token);
    const tokens = Number(shown.split(' ')[0].replace(/,/g, ''));
    assert.ok(tokens <= after.input_tokens + after.output_tokens, `${shown} against ${JSON.stringify(after)}`);
    assert.equal(after.limits.monthly_token_budget, 100_000);

    // Back to the server's defaults (no budgets here): just the figures.
    await h.api('PATCH', `/api/v2/users/${user.id}`, { limits: { monthly_budget_micros: null, monthly_token_budget: null } });
    await page.reload();
    await h.expectText(h.byId(page, 'usage-spend'), 'Spent $0.00');
    const now = await usageOf(token);
    assert.equal(now.limits.monthly_token_budget, null);
    await h.expectText(h.byId(page, 'usage-tokens'), `${count(now.input_tokens + now.output_tokens)} tokens`);
    assert.equal(await h.byId(page, 'account-usage').locator('[role="meter"]').count(), 0);
  }, EN);
});

test('a turn stopped by a used-up budget is explained, and a refused send keeps the message', { timeout: h.TEST_TIMEOUT }, async (t) => {
  const { user, token } = await h.createUser('limit');
  // The model calls a client tool, then waits for its result: one model call
  // (15 tokens) made.
  const created = await h.apiAs(token, 'POST', '/api/v2/chats', {
    content: [{ type: 'text', text: 'call pick_color {}' }],
    dynamic_tools: TOOLS,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id;
  await h.until('the chat to wait for the tool result', async () => (await h.apiAs(token, 'GET', `/api/v2/chats/${id}`)).body, {
    accept: (chat) => chat && chat.status === 'requires_action',
  });
  // A budget of one token is used up already.
  await h.api('PATCH', `/api/v2/users/${user.id}`, { limits: { monthly_token_budget: 1 } });

  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page, token);
    await page.goto(`${h.CHATD_URL}/#/chats/${id}`);
    await h.expectStatus(page, 'requires_action');
    // The panel says it already.
    await h.until('the panel to show the budget of 1', () => h.textOf(h.byId(page, 'usage-tokens')), {
      accept: (v) => /^[\d,]+ tokens of 1$/.test(v || ''),
    });
    await h.expectText(h.byId(page, 'usage-exhausted'), `Your monthly token budget is used up until ${resetDay(await usageOf(token))}: ask an admin to raise it.`);

    // The tool result goes in; the next model call is over budget: the turn
    // ends in `error` with kind `usage_limit`, and the banner says which
    // budget, when it resets, and what to do.
    await h.byId(page, 'tool-output').fill('"blue"');
    await h.byId(page, 'tool-submit').click();
    await h.expectStatus(page, 'error');
    const chat = (await h.apiAs(token, 'GET', `/api/v2/chats/${id}`)).body;
    assert.equal(chat.last_error.kind, 'usage_limit');
    const banner = h.byId(page, 'error-banner');
    assert.equal(await banner.getAttribute('data-kind'), 'usage_limit');
    const text = await h.until('the banner to explain the budget', () => h.textOf(banner), {
      accept: (v) => v?.includes('Usage limit reached') && v.includes('monthly token budget is used up'),
    });
    assert.ok(text.includes(chat.last_error.message), `${text} has the server's message ${chat.last_error.message}`);
    const help = await h.textOf(h.byId(page, 'usage-limit-help'));
    assert.match(help, /of 1 tokens this month\)/);
    assert.match(help, /It resets on .+ 00:00 UTC; until then new turns are refused\./);
    assert.match(help, /ask an admin to raise your budget/);

    // A send while over budget: 429; the reason shows above the composer
    // and the typed message stays.
    const refused = await h.apiAs(token, 'POST', `/api/v2/chats/${id}/messages`, { content: [{ type: 'text', text: 'probe' }] });
    assert.equal(refused.status, 429);
    await h.byId(page, 'composer-input').fill('one more, please');
    await h.byId(page, 'send-queue').click();
    const notice = h.byId(page, 'send-refused');
    const said = await h.until('the refusal above the composer', () => h.textOf(notice), { accept: (v) => v?.startsWith('Not sent:') });
    assert.ok(said.includes(refused.body.message), `${said} has ${refused.body.message}`);
    if (refused.body.detail) assert.ok(said.includes(refused.body.detail), `${said} has ${refused.body.detail}`);
    assert.equal(await notice.getAttribute('data-status'), '429');
    assert.equal(await h.byId(page, 'composer-input').inputValue(), 'one more, please');
    await h.expectMessageTexts(page, 'user', ['call pick_color {}']);
    assert.equal((await h.apiMessages(id)).filter((m) => m.role === 'user').length, 1);
  }, EN);
});

test('a send refused by the rate limit says when to try again and keeps the message', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const id = await h.createChat(page, 'before the limit');
    await h.expectMessageTexts(page, 'assistant', ['echo: before the limit']);
    // The server's answer past `requests_per_minute` (API.md: 429 with
    // Retry-After in seconds), stood in for here: a real limit would also
    // refuse the page's own polling.
    await page.route(`**/api/v2/chats/${id}/messages`, (route) =>
      route.request().method() === 'POST'
        ? route.fulfill({
          status: 429,
          headers: { 'Retry-After': '7', 'Content-Type': 'application/json' },
          body: JSON.stringify({ message: 'Too many requests.', detail: 'At most 600 requests per minute.' }),
        })
        : route.fallback());
    await h.send(page, 'after the limit');
    await h.expectText(h.byId(page, 'send-refused'), 'Not sent: Too many requests. At most 600 requests per minute. Try again in 7 s. Your message is kept below.');
    assert.equal(await h.byId(page, 'composer-input').inputValue(), 'after the limit');
    await page.unroute(`**/api/v2/chats/${id}/messages`);
    // The next send goes through and clears the notice.
    await h.byId(page, 'send-queue').click();
    await h.expectMessageTexts(page, 'assistant', ['echo: before the limit', 'echo: after the limit'], { timeout: h.SLOW_WAIT });
    await h.byId(page, 'send-refused').waitFor({ state: 'hidden' });
    assert.equal(await h.byId(page, 'composer-input').inputValue(), '');
  }, EN);
});
