// @ts-check
// The signed-in user's usage of the month against their limits (API.md
// "Limits, budgets and the token lifecycle": `GET /users/me/usage` →
// `{period_start, period_end, spent_micros, input_tokens, output_tokens,
// running_chats, storage_bytes, limits}`), and the explanation of a turn
// stopped by a limit (`last_error.kind == "usage_limit"`).
//
// What this module owns:
// - the usage panel in the sidebar's footer (`account-usage`): spend and
//   tokens against the monthly budgets (just the figures when there is no
//   budget), running chats and stored files, and when the period resets;
//   loaded at sign-in, every USAGE_POLL_MS, and soon after a turn ends
//   (`refreshUsage`);
// - `usageLimitHelp(error)`: what the error banner says about a
//   `usage_limit` stop: which budget is used up, when it resets, and what to
//   do (ask an admin), from the latest usage.
//
// Months are calendar months in UTC, so dates of resets are shown in UTC.

import { h, $, formatMoney, formatCount, formatBytes, formatDateTime } from './ui.js';
import { api, session } from './api.js';

const USAGE_POLL_MS = 30000;
const REFRESH_DELAY_MS = 300;
/** From this share of a budget on, its meter shows a warning colour. */
const WARN_SHARE = 0.8;

/**
 * The limits of an account (API.md "Limits, budgets and the token
 * lifecycle"); null: no limit.
 * @typedef {object} Limits
 * @property {number | null} [monthly_budget_micros]
 * @property {number | null} [monthly_token_budget]
 * @property {number | null} [max_running_chats]
 * @property {number | null} [max_storage_bytes]
 */

/**
 * `GET /users/me/usage` (and an admin's view of a user's): the usage of
 * the calendar month (UTC) against the limits.
 * @typedef {object} Usage
 * @property {string} period_start
 * @property {string} period_end
 * @property {number} spent_micros
 * @property {number} input_tokens
 * @property {number} output_tokens
 * @property {number} running_chats
 * @property {number} storage_bytes
 * @property {Limits | null} [limits]
 */

/**
 * A monthly budget used up.
 * @typedef {{kind: 'spend' | 'tokens', name: string, used: string, limit: string}} Exhausted
 */

/**
 * This module's state.
 * @type {{
 *   usage: Usage | null,
 *   timer: ReturnType<typeof setInterval> | null | undefined,
 *   pending: ReturnType<typeof setTimeout> | null | undefined,
 *   seq: number,
 *   listeners: Set<(usage: Usage) => void>,
 * }}
 */
const state = {
  usage: null, // the latest answer of GET /users/me/usage, or null
  timer: undefined,
  pending: undefined, // a scheduled refresh
  seq: 0, // the newest request; older answers are dropped
  listeners: new Set(),
};

const resetDay = new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', timeZone: 'UTC' });
const resetDate = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeZone: 'UTC' });

/** Starts showing the signed-in user's usage (at sign-in). */
export function startUsage() {
  stopUsage();
  $('nav-admin').hidden = !(session.me && session.me.role === 'admin');
  $('account-footer').hidden = false;
  loadUsage();
  state.timer = setInterval(loadUsage, USAGE_POLL_MS);
}

/** Stops and clears the usage panel (at sign-out). */
export function stopUsage() {
  clearInterval(state.timer ?? undefined);
  clearTimeout(state.pending ?? undefined);
  state.timer = null;
  state.pending = null;
  state.usage = null;
  state.seq += 1;
  $('account-usage').replaceChildren();
  $('account-usage').hidden = true;
  $('account-footer').hidden = true;
}

/** Loads the usage again soon (after a turn, a refused send); several calls make one request. */
export function refreshUsage() {
  if (!session.me) return;
  clearTimeout(state.pending ?? undefined);
  state.pending = setTimeout(loadUsage, REFRESH_DELAY_MS);
}

/** The latest usage (`GET /users/me/usage`), or null before the first answer. */
export function currentUsage() {
  return state.usage;
}

/**
 * Calls `fn(usage)` after every new answer; returns a function that stops it.
 * @param {(usage: Usage) => void} fn
 */
export function onUsage(fn) {
  state.listeners.add(fn);
  return () => state.listeners.delete(fn);
}

async function loadUsage() {
  if (!session.me) return;
  const seq = ++state.seq;
  // Quiet: a server without the route (or a passing failure) just shows no panel.
  const usage = await api('GET', '/users/me/usage', undefined, { quiet: true }).catch(() => /** @type {Usage | null} */ (null));
  if (seq !== state.seq || !session.me) return;
  if (!usage) return;
  state.usage = usage;
  renderUsagePanel(usage);
  for (const fn of state.listeners) fn(usage);
}

// ---------------------------------------------------------------------------
// Figures

/**
 * Tokens of the period: input + output.
 * @param {{input_tokens?: number, output_tokens?: number}} usage
 */
export function tokensUsed(usage) {
  return (Number(usage.input_tokens) || 0) + (Number(usage.output_tokens) || 0);
}

/**
 * The budgets used up in `usage`: `[{kind: 'spend'|'tokens', name, used,
 * limit}]` (at or over the budget, as the server decides).
 * @param {Usage | null} usage
 * @returns {Exhausted[]}
 */
export function exhaustedBudgets(usage) {
  if (!usage || !usage.limits) return [];
  /** @type {Exhausted[]} */
  const out = [];
  const { monthly_budget_micros: money, monthly_token_budget: tokens } = usage.limits;
  if (money !== null && money !== undefined && usage.spent_micros >= money) {
    out.push({ kind: 'spend', name: 'monthly spend budget', used: formatMoney(usage.spent_micros), limit: formatMoney(money) });
  }
  if (tokens !== null && tokens !== undefined && tokensUsed(usage) >= tokens) {
    out.push({ kind: 'tokens', name: 'monthly token budget', used: `${formatCount(tokensUsed(usage))} tokens`, limit: `${formatCount(tokens)} tokens` });
  }
  return out;
}

/**
 * `period_end` as the day of the reset, in UTC: "1 Jan".
 * @param {Usage} usage
 */
export function formatResetDay(usage) {
  const d = new Date(usage.period_end);
  return Number.isNaN(d.getTime()) ? '' : resetDay.format(d);
}

/**
 * `period_end` as the full moment of the reset: "1 Jan 2027, 00:00 UTC".
 * @param {Usage} usage
 */
export function formatResetMoment(usage) {
  const d = new Date(usage.period_end);
  if (Number.isNaN(d.getTime())) return 'the start of next month';
  const hm = `${String(d.getUTCHours()).padStart(2, '0')}:${String(d.getUTCMinutes()).padStart(2, '0')}`;
  return `${resetDate.format(d)}, ${hm} UTC`;
}

/**
 * "Spent $1.23 of $5.00" (or "Spent $1.23" without a budget).
 * @param {Usage} usage
 */
export function spendText(usage) {
  const budget = usage.limits && usage.limits.monthly_budget_micros;
  const spent = formatMoney(usage.spent_micros);
  return budget === null || budget === undefined ? `Spent ${spent}` : `Spent ${spent} of ${formatMoney(budget)}`;
}

/**
 * "12,345 tokens of 100,000" (or "12,345 tokens" without a budget).
 * @param {Usage} usage
 */
export function tokensText(usage) {
  const budget = usage.limits && usage.limits.monthly_token_budget;
  const used = `${formatCount(tokensUsed(usage))} tokens`;
  return budget === null || budget === undefined ? used : `${used} of ${formatCount(budget)}`;
}

/**
 * A meter of `used` against `limit` (null: no limit, no meter). The bar is
 * decorative; the text next to it says the figures.
 * @param {number} used
 * @param {number | null | undefined} limit
 * @param {string} label
 */
function meter(used, limit, label) {
  if (limit === null || limit === undefined || !(limit > 0)) return null;
  const share = used / limit;
  const percent = Math.min(100, Math.round(share * 100));
  const bar = h('span', { class: 'usage-bar' }, h('span', { class: 'usage-fill' }));
  /** @type {HTMLElement} */ (bar.firstChild).style.width = `${percent}%`;
  const el = h(
    'span',
    { class: 'usage-meter', role: 'meter', 'aria-label': label, 'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': String(percent) },
    bar,
  );
  if (share >= 1) el.classList.add('usage-over');
  else if (share >= WARN_SHARE) el.classList.add('usage-warn');
  return el;
}

/**
 * The sidebar's usage panel (`account-usage`).
 * @param {Usage} usage
 */
function renderUsagePanel(usage) {
  const panel = $('account-usage');
  /** @type {Limits} */
  const limits = usage.limits || {};
  const exhausted = exhaustedBudgets(usage);
  const resetsTitle = `The monthly budgets reset on ${formatResetMoment(usage)} (${formatDateTime(usage.period_end)} here)`;
  const children = [
    h(
      'p',
      { class: 'usage-head' },
      h('span', { class: 'usage-title' }, 'This month'),
      h('span', { class: 'usage-reset', testid: 'usage-reset', title: resetsTitle }, `resets ${formatResetDay(usage)}`),
    ),
    h(
      'div',
      { class: 'usage-row' },
      h('span', { class: 'usage-figure', testid: 'usage-spend' }, spendText(usage)),
      meter(usage.spent_micros, limits.monthly_budget_micros, 'Share of the monthly spend budget used'),
    ),
    h(
      'div',
      { class: 'usage-row' },
      h('span', { class: 'usage-figure', testid: 'usage-tokens', title: `${formatCount(usage.input_tokens)} in, ${formatCount(usage.output_tokens)} out` }, tokensText(usage)),
      meter(tokensUsed(usage), limits.monthly_token_budget, 'Share of the monthly token budget used'),
    ),
    h(
      'p',
      { class: 'usage-more', testid: 'usage-more' },
      `${formatCount(usage.running_chats)} of ${formatCount(limits.max_running_chats)} chats running · files ${formatBytes(usage.storage_bytes)} of ${formatBytes(limits.max_storage_bytes)}`,
    ),
    exhausted.length
      ? h(
        'p',
        { class: 'usage-exhausted', testid: 'usage-exhausted' },
        `Your ${exhausted.map((b) => b.name).join(' and ')} ${exhausted.length > 1 ? 'are' : 'is'} used up until ${formatResetDay(usage)}: ask an admin to raise it.`,
      )
      : null,
  ];
  panel.replaceChildren(...children.filter((c) => c !== null));
  panel.dataset.state = exhausted.length ? 'exhausted' : 'ok';
  panel.hidden = false;
}

// ---------------------------------------------------------------------------
// The explanation of a `usage_limit` stop

/**
 * What the error banner adds to a `usage_limit` error (`usage-limit-help`):
 * which budget is used up, with the figures, when it resets and what to do;
 * or, when no monthly budget is used up (any more), that the limit was the
 * turn's own (its model calls) or has been raised, so the next turn may run.
 * @param {Usage | null} [usage]
 */
export function usageLimitHelp(usage = state.usage) {
  const exhausted = exhaustedBudgets(usage);
  let text;
  if (exhausted.length) {
    const which = exhausted.map((b) => `your ${b.name} is used up (${b.used} of ${b.limit} this month)`).join(', and ');
    text = `${which[0].toUpperCase()}${which.slice(1)}. It resets on ${formatResetMoment(/** @type {Usage} */ (usage))}; until then new turns are refused. To go on sooner, ask an admin to raise your budget.`;
  } else if (usage) {
    text = 'None of your monthly budgets is used up now, so a new turn can run: retry, or send a message to go on. If this stop keeps happening, ask an admin about your limits.';
  } else {
    text = 'A limit on what you may use stopped this turn. Ask an admin to raise your limits.';
  }
  return h('p', { class: 'banner-help', testid: 'usage-limit-help' }, text);
}
