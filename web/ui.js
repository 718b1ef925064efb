// Shared building blocks of the web UI's modules (app.js, usage.js,
// tokens.js, admin.js): the `h` element helper (strings always become text
// nodes), the API client with the signed-in token (`session`), toasts, the
// polite live region, the confirmation dialog, and the formatting of money,
// counts, bytes and dates.
//
// Wire contract: ../../shared/API.md ("Errors": every non-2xx body is
// `{message, detail?, validations?}`; a `429` of the rate limit carries
// `Retry-After` in seconds).

export const API = '/api/v2';
const TOAST_MS = 6000;

/**
 * The signed-in session: the API token and the user (`GET /users/me`),
 * both null when signed out. `onUnauthorized` runs when the signed-in
 * token is refused (`401`): app.js signs out.
 */
export const session = {
  token: null,
  me: null,
  onUnauthorized: () => {},
};

// ---------------------------------------------------------------------------
// DOM helpers

/**
 * Creates an element. `props`: `testid`, `class`, `dataset`, `on<event>`
 * handlers, booleans and `value` as properties, other strings as
 * attributes. Children: nodes or strings (as text nodes).
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined) continue;
    if (key === 'testid') el.dataset.testid = value;
    else if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (typeof value === 'boolean' || key === 'value') el[key] = value;
    else el.setAttribute(key, String(value));
  }
  appendChildren(el, children);
  return el;
}

export function appendChildren(el, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

export const $ = (id) => document.getElementById(id);

export function byTestId(root, testid) {
  return root.querySelector(`[data-testid="${testid}"]`);
}

// ---------------------------------------------------------------------------
// HTTP

export class ApiError extends Error {
  constructor(status, body, retryAfter = null) {
    super((body && body.message) || `Request failed (HTTP ${status}).`);
    this.status = status;
    this.body = body;
    /** Seconds from the `Retry-After` header (a rate limit's `429`), or null. */
    this.retryAfter = retryAfter;
  }

  /** The body's `detail`, or null. */
  get detail() {
    return (this.body && typeof this.body.detail === 'string' && this.body.detail) || null;
  }

  /** `validations` of a `400`: `[{field, detail}]`. */
  get validations() {
    return (this.body && Array.isArray(this.body.validations) && this.body.validations) || [];
  }

  /**
   * What to show the user: the message; for a limit (`429`, `413`) also the
   * detail naming it and, with `Retry-After`, when to try again.
   */
  describe() {
    let text = this.message;
    if ((this.status === 429 || this.status === 413) && this.detail && !text.includes(this.detail)) {
      text += ` ${this.detail}`;
    }
    if (this.retryAfter !== null) text += ` Try again in ${formatSeconds(this.retryAfter)}.`;
    return text;
  }
}

/**
 * Calls the API with the signed-in token. Resolves to the JSON body (or
 * null); rejects with ApiError. Shows a toast with the error (see
 * `ApiError.describe`) unless `quiet`.
 */
export async function api(method, path, body, { quiet = false, token = session.token } = {}) {
  const init = { method, headers: { Authorization: `Bearer ${token}` } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(API + path, init);
  } catch (err) {
    const error = new ApiError(0, { message: 'Network error: the server is unreachable.' });
    if (!quiet) toast(error.message);
    throw error;
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    const retryAfter = Number.parseInt(response.headers.get('Retry-After') || '', 10);
    const error = new ApiError(response.status, json, Number.isFinite(retryAfter) ? retryAfter : null);
    if (!quiet) toast(error.describe());
    if (response.status === 401 && token === session.token && session.me) session.onUnauthorized();
    throw error;
  }
  return json;
}

/** Runs `fn` and swallows ApiError (already shown as a toast). */
export async function attempt(fn) {
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof ApiError)) {
      console.error(err);
      toast(String(err.message || err));
    }
    return undefined;
  }
}

// ---------------------------------------------------------------------------
// Toast (one at a time, the newest wins) and the live region.

let toastTimer = null;

export function toast(message) {
  const box = $('toasts');
  box.replaceChildren(
    h('div', { class: 'toast', role: 'alert', testid: 'toast', onclick: clearToast }, message),
  );
  clearTimeout(toastTimer);
  toastTimer = setTimeout(clearToast, TOAST_MS);
}

export function clearToast() {
  $('toasts').replaceChildren();
}

/** Tells screen readers (politely) what changed: the assistant's state, a page's result. */
export function announce(text) {
  const region = $('live-status');
  if (region.textContent !== text) region.textContent = text;
}

/**
 * A modal confirmation (`confirm-dialog`); resolves to true when the user
 * confirms, false on Cancel or Escape.
 */
export function confirmDialog({ title, message, confirm }) {
  const dialog = $('confirm-dialog');
  const returnTo = document.activeElement;
  $('confirm-title').textContent = title;
  $('confirm-message').textContent = message;
  $('confirm-ok').textContent = confirm;
  return new Promise((resolve) => {
    const close = (result) => {
      dialog.removeEventListener('close', onClose);
      $('confirm-ok').onclick = null;
      $('confirm-cancel').onclick = null;
      if (dialog.open) dialog.close();
      if (returnTo && returnTo.isConnected) returnTo.focus();
      resolve(result);
    };
    const onClose = () => close(false);
    dialog.addEventListener('close', onClose);
    $('confirm-ok').onclick = () => close(true);
    $('confirm-cancel').onclick = () => close(false);
    dialog.showModal();
    $('confirm-cancel').focus();
  });
}

// ---------------------------------------------------------------------------
// Formatting

export const numberFormat = new Intl.NumberFormat();
// `$1.23` in every locale (not `US$1.23`): model prices are in dollars.
const moneyFormat = new Intl.NumberFormat(undefined, { style: 'currency', currency: 'USD', currencyDisplay: 'narrowSymbol' });
const dateTimeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

/** Micro-dollars (`spent_micros`, `monthly_budget_micros`) as money: `$1.23`. */
export function formatMoney(micros) {
  return moneyFormat.format((Number(micros) || 0) / 1e6);
}

/** A count with thousands separators: `12,345`. */
export function formatCount(n) {
  return numberFormat.format(Number(n) || 0);
}

/** Bytes in binary units: `512 B`, `1.5 KiB`, `20 MiB`, `1 GiB`. */
export function formatBytes(n) {
  n = Number(n) || 0;
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const digits = value < 10 && !Number.isInteger(value) ? 1 : 0;
  return `${value.toFixed(digits).replace(/\.0$/, '')} ${units[unit]}`;
}

/** Seconds as `45 s`, `2 min`, `1 h 5 min`. */
export function formatSeconds(s) {
  s = Math.max(0, Math.ceil(Number(s) || 0));
  if (s < 60) return `${s} s`;
  const m = Math.ceil(s / 60);
  if (m < 60) return `${m} min`;
  return `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ''}`;
}

/** An ISO time as a local date and time (`5 Dec 2026, 14:03`); '' when absent or invalid. */
export function formatDateTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : dateTimeFormat.format(d);
}

/**
 * A `<time>` element showing `iso` (local date and time), or `fallback`
 * text when it is null.
 */
export function timeEl(iso, fallback = '–', props = {}) {
  const text = formatDateTime(iso);
  if (!text) return h('span', props, fallback);
  return h('time', { datetime: iso, title: new Date(iso).toString(), ...props }, text);
}
