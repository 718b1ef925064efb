// @ts-check
// The chat view's status panels: the error and retry banners (with Retry,
// and the explanation of a `usage_limit` stop from ./usage.js), the token
// usage of the chat, the context meter (API.md "Context management"), and
// the countdowns of deadlines and retries (updated every second by app.js).

import { h, byTestId, numberFormat, formatDuration, formatTime, formatMoney, timeUntil } from './ui.js';
import { session } from './api.js';
import { refreshUsage, usageLimitHelp } from './usage.js';
import { finishReasonOf, isLoaded } from './chat-state.js';

/** @typedef {import('./chat-state.js').ChatView} ChatView */
/** @typedef {import('./chat-state.js').LoadedView} LoadedView */
/** @typedef {import('./wire.js').Chat} Chat */

/**
 * The error banner (with Retry where a turn can be retried) and the retry
 * banner of a running chat.
 * @param {LoadedView} view
 */
export function renderBanners(view) {
  const banners = [];
  if (view.error) {
    const e = view.error;
    const canRetry = view.chat.status === 'error' && !view.chat.archived && [...view.messages.values()].some((m) => m.role === 'user');
    const limit = e.kind === 'usage_limit';
    banners.push(
      h(
        'div',
        { class: `banner banner-error${limit ? ' banner-limit' : ''}`, testid: 'error-banner', role: 'alert', dataset: { kind: e.kind || '' } },
        h('strong', {}, limit ? 'Usage limit reached' : 'Error'),
        e.kind ? h('span', { class: 'kind' }, e.kind) : null,
        h('span', { class: 'banner-message' }, e.message || 'The last turn failed.'),
        e.detail ? h('span', { class: 'banner-detail' }, e.detail) : null,
        // Which budget, when it resets, what to do (usage.js), from usage
        // loaded again once for this error.
        limit ? usageLimitHelp() : null,
        canRetry ? h('button', { type: 'button', class: 'btn btn-small', testid: 'retry-button', onclick: () => view.actions.retry() }, 'Retry') : null,
      ),
    );
  }
  // Only while the chat runs: a retry state left behind by an interrupt
  // (or sent with the state of a chat that no longer runs) is stale.
  if (view.retry && view.chat.status === 'running') {
    const r = view.retry;
    banners.push(
      h(
        'div',
        { class: 'banner banner-retry', testid: 'retry-banner', role: 'status' },
        h('strong', {}, `Retry ${r.attempt}`),
        h('span', { class: 'banner-message' }, (r.error && r.error.message) || 'The model request failed.'),
        h('span', { class: 'countdown', dataset: { until: r.retrying_at } }, ''),
        h('span', { class: 'banner-detail' }, `after waiting ${formatDuration(r.delay_ms)}`),
      ),
    );
  }
  view.dom.banners.replaceChildren(...banners);
  updateCountdowns(view);
  if (view.error && view.error.kind === 'usage_limit' && view.limitHelpFor !== view.error) {
    view.limitHelpFor = view.error;
    refreshUsage();
  }
}

/**
 * New usage figures: the explanation of a `usage_limit` stop follows them.
 * @param {ChatView} view
 */
export function usageChanged(view) {
  if (view.closed || !isLoaded(view) || !view.error || view.error.kind !== 'usage_limit') return;
  const shown = byTestId(view.dom.banners, 'usage-limit-help');
  if (shown && shown.textContent === usageLimitHelp().textContent) return;
  renderBanners(view);
}

/**
 * The chat's spend: the sum of its answers' usage (each answer's `usage` is
 * that of the model call that wrote it). Prompt tokens read from the
 * provider's cache are counted apart (`+N cached`), never as new input; the
 * price is added when the model has prices. Until an answer reports usage
 * it keeps the last figures it showed (a running reply has none yet), or
 * shows a dash.
 * @param {LoadedView} view
 */
export function renderUsage(view) {
  const total = { input: 0, cached: 0, output: 0, cost: 0, priced: 0 };
  let reported = 0;
  let unreported = 0;
  for (const m of view.messages.values()) {
    if (!m.usage) {
      // Some servers (llama.cpp's Python server) stream no usage at all; an
      // answer cut by an interrupt has none either.
      if (m.role === 'assistant' && finishReasonOf(view, m) !== 'interrupted') unreported += 1;
      continue;
    }
    reported += 1;
    total.input += (m.usage.input_tokens || 0) + (m.usage.cache_creation_tokens || 0);
    total.cached += m.usage.cache_read_tokens || 0;
    total.output += m.usage.output_tokens || 0;
    if (typeof m.total_cost_micros === 'number') {
      total.cost += m.total_cost_micros;
      total.priced += 1;
    }
  }
  const n = (/** @type {number} */ x) => numberFormat.format(x);
  let text;
  let title = 'Tokens this chat has used';
  if (reported === 0 && unreported === 0) {
    text = view.usageText || 'This chat: –';
  } else if (reported === 0) {
    text = 'This chat: tokens not reported by the model server';
  } else {
    const cached = total.cached ? ` (+${n(total.cached)} cached)` : '';
    const cost = total.priced ? ` · ${formatMoney(total.cost)}` : '';
    text = `This chat: ${n(total.input)} in${cached} · ${n(total.output)} out${cost}`;
    title = `Tokens this chat has used: ${n(total.input)} prompt tokens sent, ${n(total.cached)} read from the provider's cache, ${n(total.output)} written by the model`;
    if (unreported > 0) {
      text += ` (${unreported} ${unreported === 1 ? 'reply' : 'replies'} not reported)`;
      title += `; ${unreported} ${unreported === 1 ? 'reply' : 'replies'} without usage from the model server`;
    }
    view.usageText = text;
  }
  view.dom.usage.textContent = text;
  view.dom.usage.title = title;
}

/**
 * A token count in a few characters: `512`, `8k`, `12.5k`, `131k`, `1M`.
 * @param {number} n
 */
export function shortCount(n) {
  if (n < 1000) return String(n);
  if (n < 1_000_000) {
    const k = n / 1000;
    return `${k < 10 && Math.round(k) !== k ? k.toFixed(1) : Math.round(k)}k`;
  }
  const m = n / 1_000_000;
  return `${m < 10 && Math.round(m) !== m ? m.toFixed(1) : Math.round(m)}M`;
}

/**
 * The context meter (API.md "Context management": `Chat.context`, kept up
 * to date by the stream's `context` event): "Context 12% of 8k", the exact
 * figures in its title. The actions on the context are in the chat's menu.
 * @param {LoadedView} view
 */
export function renderContext(view) {
  const { chat, dom } = view;
  const c = chat.context;
  const fill = /** @type {HTMLElement} */ (dom.context.querySelector('.context-fill'));
  const label = /** @type {HTMLElement} */ (dom.context.querySelector('.context-label'));
  if (!c || !c.limit) {
    dom.context.hidden = true;
    return;
  }
  dom.context.hidden = false;
  const percent = Math.max(0, c.percent);
  fill.style.width = `${Math.min(100, percent)}%`;
  dom.context.classList.toggle('context-high', percent >= 70);
  dom.context.setAttribute('aria-valuenow', String(Math.min(100, percent)));
  const about = c.estimated ? '~' : '';
  // (An estimate says so in the title: `~`.)
  label.textContent = `Context ${percent}% of ${shortCount(c.limit)}`;
  const compactions = c.compactions ? `, ${c.compactions} compaction${c.compactions === 1 ? '' : 's'}` : '';
  dom.context.title = `Context: ${about}${numberFormat.format(c.tokens)} of ${numberFormat.format(c.limit)} tokens${compactions}`;
  dom.context.dataset.tokens = String(c.tokens);
  dom.context.dataset.percent = String(percent);
}

/**
 * Updates the deadline and retry countdowns (every second).
 * @param {ChatView | null} view
 */
export function updateCountdowns(view) {
  if (!view || view.closed || !view.dom) return;
  for (const deadline of /** @type {NodeListOf<HTMLElement>} */ (view.dom.action.querySelectorAll('.deadline'))) {
    const at = deadline.dataset.deadline;
    deadline.textContent = at
      ? `Deadline ${formatTime(at)} (${countdown(at, 'expired')})`
      : 'No deadline';
  }
  /** @type {HTMLElement | null} */
  const retry = view.dom.banners.querySelector('.countdown');
  const until = retry ? retry.dataset.until : undefined;
  if (retry && until !== undefined) {
    retry.textContent = !session.reachable ? 'waiting for the server' : timeUntil(until) === 'now' ? 'retrying now…' : `retrying ${timeUntil(until)}`;
    retry.title = `at ${formatTime(until)}`;
  }
}

/**
 * `in 5s`, or `past` once `iso` has passed.
 * @param {string} iso
 * @param {string} past
 */
function countdown(iso, past) {
  const ms = new Date(iso).getTime() - Date.now();
  return ms <= 0 ? past : `in ${formatDuration(ms)}`;
}
