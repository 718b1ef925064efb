// @ts-check
// Shared building blocks of the web UI's modules: the `h` element helper
// (strings always become text nodes), icons, toasts, the polite live
// region, the confirmation dialog, small form helpers, and the formatting
// of money, counts, bytes, durations and dates. No state but the toast's
// timer; it talks to no server (that is ./api.js).

const TOAST_MS = 6000;

// ---------------------------------------------------------------------------
// DOM helpers

/**
 * One child of `h` and `appendChildren`: a node, or a string or number (as
 * a text node); null, undefined and false are skipped.
 * @typedef {Node | string | number | boolean | null | undefined} Leaf
 */

/**
 * What `h` and `appendChildren` take as children: a `Leaf`, or an array of
 * them (flattened one level).
 * @typedef {Leaf | Leaf[]} Child
 */

/**
 * The props of `h`: `testid`, `class`, `dataset`, `on<event>` handlers,
 * booleans and `value` as properties, other values as attributes (null and
 * undefined are skipped).
 * @typedef {Record<string, any>} Props
 */

/**
 * Creates an element. `props`: `testid`, `class`, `dataset`, `on<event>`
 * handlers, booleans and `value` as properties, other strings as
 * attributes. Children: nodes or strings (as text nodes).
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Props} [props]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
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
    } else if (typeof value === 'boolean' || key === 'value') /** @type {any} */ (el)[key] = value;
    else el.setAttribute(key, String(value));
  }
  appendChildren(el, children);
  return el;
}

/**
 * Appends `children` (see `Child`) to `el`.
 * @param {Element} el
 * @param {Child[]} children
 */
export function appendChildren(el, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/**
 * The element of `index.html` with this id.
 * @param {string} id
 * @returns {HTMLElement}
 */
export const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * The `<input>` (or `<textarea>`: the same `value`) of `index.html` or of a
 * page with this id.
 * @param {string} id
 * @returns {HTMLInputElement}
 */
export const $input = (id) => /** @type {HTMLInputElement} */ (document.getElementById(id));

/**
 * The first element under `root` with this `data-testid`.
 * @param {ParentNode} root
 * @param {string} testid
 * @returns {HTMLElement | null}
 */
export function byTestId(root, testid) {
  return root.querySelector(`[data-testid="${testid}"]`);
}

const SVG_NS = 'http://www.w3.org/2000/svg';
/** @type {Record<string, string[]>} the paths of each icon (24×24) */
const ICONS = {
  menu: ['M4 6h16', 'M4 12h16', 'M4 18h16'],
  pencil: ['M4 20h4L19 9l-4-4L4 16z', 'M13.5 6.5l4 4'],
  trash: ['M4 7h16', 'M9 7V4h6v3', 'M6 7l1 13h10l1-13'],
  stop: ['M7 7h10v10H7z'],
  send: ['M5 12h14', 'M13 6l6 6-6 6'],
};

/**
 * A decorative inline SVG icon (the control carries the label).
 * @param {'menu' | 'pencil' | 'trash' | 'stop' | 'send'} name
 * @returns {SVGSVGElement}
 */
export function icon(name) {
  const svg = document.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('viewBox', '0 0 24 24');
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('focusable', 'false');
  svg.setAttribute('class', `icon icon-${name}`);
  for (const d of ICONS[name]) {
    const path = document.createElementNS(SVG_NS, 'path');
    path.setAttribute('d', d);
    svg.append(path);
  }
  return svg;
}

/** A text longer than this (lines or characters) is shown collapsed. */
const LONG_LINES = 20;
const LONG_CHARS = 2000;

/**
 * Whether `text` is long enough to be shown collapsed.
 * @param {string} text
 */
export function isLong(text) {
  if (text.length > LONG_CHARS) return true;
  let lines = 1;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) {
    lines += 1;
    if (lines > LONG_LINES) return true;
  }
  return false;
}

/** @param {string} text */
export function countLines(text) {
  return text.split('\n').length;
}

/**
 * Grows the textarea with its text, up to the CSS max-height.
 * @param {HTMLTextAreaElement} input
 */
export function autoGrow(input) {
  input.style.height = 'auto';
  input.style.height = `${input.scrollHeight + 2}px`;
}

/**
 * Disables every button of `form` while `busy`, and restores each one's
 * own state after.
 * @param {HTMLElement} form
 * @param {boolean} busy
 */
export function setBusy(form, busy) {
  for (const button of form.querySelectorAll('button')) {
    if (busy) {
      button.dataset.wasDisabled = String(button.disabled);
      button.disabled = true;
    } else if (button.dataset.wasDisabled !== undefined) {
      button.disabled = button.dataset.wasDisabled === 'true';
      delete button.dataset.wasDisabled;
    }
  }
  form.setAttribute('aria-busy', String(busy));
}

/**
 * Pretty-prints a JSON string; returns it unchanged when it does not parse.
 * @param {string} text
 */
export function prettyJsonString(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// ---------------------------------------------------------------------------
// Toast (one at a time, the newest wins) and the live region.

/** @type {ReturnType<typeof setTimeout> | undefined} */
let toastTimer;

/**
 * Shows `message` as the toast (for TOAST_MS, or until clicked).
 * @param {string} message
 */
export function toast(message) {
  const box = $('toasts');
  box.replaceChildren(
    h('div', { class: 'toast', role: 'alert', testid: 'toast', onclick: clearToast }, message),
  );
  clearTimeout(toastTimer);
  toastTimer = setTimeout(clearToast, TOAST_MS);
}

/** Removes the toast. */
export function clearToast() {
  $('toasts').replaceChildren();
}

/**
 * Tells screen readers (politely) what changed: the assistant's state, a page's result.
 * @param {string} text
 */
export function announce(text) {
  const region = $('live-status');
  if (region.textContent !== text) region.textContent = text;
}

/**
 * A modal confirmation (`confirm-dialog`); resolves to true when the user
 * confirms, false on Cancel or Escape.
 * @param {{title: string, message: string, confirm: string}} texts
 * @returns {Promise<boolean>}
 */
export function confirmDialog({ title, message, confirm }) {
  const dialog = /** @type {HTMLDialogElement} */ ($('confirm-dialog'));
  const returnTo = /** @type {HTMLElement | null} */ (document.activeElement);
  $('confirm-title').textContent = title;
  $('confirm-message').textContent = message;
  $('confirm-ok').textContent = confirm;
  return new Promise((resolve) => {
    /** @param {boolean} result */
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

/**
 * Micro-dollars (`spent_micros`, `monthly_budget_micros`) as money: `$1.23`.
 * @param {number | null | undefined} micros
 */
export function formatMoney(micros) {
  return moneyFormat.format((Number(micros) || 0) / 1e6);
}

/**
 * A count with thousands separators: `12,345`.
 * @param {number | null | undefined} n
 */
export function formatCount(n) {
  return numberFormat.format(Number(n) || 0);
}

/**
 * Bytes in binary units: `512 B`, `1.5 KiB`, `20 MiB`, `1 GiB`.
 * @param {number | null | undefined} n
 */
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

/**
 * Seconds as `45 s`, `2 min`, `1 h 5 min`.
 * @param {number | null | undefined} s
 */
export function formatSeconds(s) {
  s = Math.max(0, Math.ceil(Number(s) || 0));
  if (s < 60) return `${s} s`;
  const m = Math.ceil(s / 60);
  if (m < 60) return `${m} min`;
  return `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ''}`;
}

/**
 * An ISO time as a local date and time (`5 Dec 2026, 14:03`); '' when absent or invalid.
 * @param {string | null | undefined} iso
 */
export function formatDateTime(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : dateTimeFormat.format(d);
}

/**
 * A `<time>` element showing `iso` (local date and time), or `fallback`
 * text when it is null.
 * @param {string | null | undefined} iso
 * @param {string} [fallback]
 * @param {Props} [props]
 * @returns {HTMLElement}
 */
export function timeEl(iso, fallback = '–', props = {}) {
  const text = formatDateTime(iso);
  if (!text) return h('span', props, fallback);
  return h('time', { datetime: iso, title: new Date(/** @type {string} */ (iso)).toString(), ...props }, text);
}

/**
 * Milliseconds as `45s` or `2m 05s` (rounded up to the second).
 * @param {number} ms
 */
export function formatDuration(ms) {
  const s = Math.ceil(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  return `${m}m ${String(s % 60).padStart(2, '0')}s`;
}

/**
 * An ISO time as a local time of day; '' when invalid.
 * @param {string} iso
 */
export function formatTime(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString();
}

// ---------------------------------------------------------------------------
// Status words, menus, the colour theme

/**
 * What a chat's status is called on screen; `waiting` (idle) shows nothing.
 * @type {Record<string, string>}
 */
const STATUS_WORDS = {
  running: 'Working',
  interrupting: 'Stopping',
  requires_action: 'Needs your action',
  error: 'Error',
};

/**
 * Shows a chat's `status` in a badge: the words of STATUS_WORDS, hidden
 * while the chat is idle (`waiting`); the raw status stays in
 * `data-status` (web/README.md).
 * @param {HTMLElement} badge
 * @param {string} status
 */
export function setStatusBadge(badge, status) {
  const word = STATUS_WORDS[status] || '';
  if (badge.textContent !== word) badge.textContent = word;
  badge.dataset.status = status;
  badge.className = `status-badge status-${status}`;
  badge.hidden = !word;
}

/**
 * A menu button and its popup (`role="menu"`): the button toggles it;
 * Escape, a click outside or choosing an item closes it; the arrow keys
 * move between its items. Items are buttons (`role="menuitem"`, or
 * `menuitemcheckbox` with `aria-checked`) put in `list`.
 * @typedef {object} Menu
 * @property {HTMLElement} root the wrapper (position: relative)
 * @property {HTMLButtonElement} button
 * @property {HTMLElement} list
 * @property {() => void} close
 */

/**
 * @param {{testid: string, label: string, content: Child, up?: boolean, buttonClass?: string}} options
 *   `up`: the popup opens above the button (at the bottom of the page)
 * @returns {Menu}
 */
export function menuButton({ testid, label, content, up = false, buttonClass = 'btn btn-quiet' }) {
  const list = h('div', { class: `menu-list${up ? ' menu-up' : ''}`, role: 'menu', testid: `${testid}-list`, 'aria-label': label, hidden: true });
  const button = h('button', {
    type: 'button',
    class: `${buttonClass} menu-button`,
    testid,
    'aria-label': label,
    title: label,
    'aria-haspopup': 'menu',
    'aria-expanded': 'false',
  }, content);
  const root = h('span', { class: 'menu' }, button, list);
  const items = () => /** @type {HTMLButtonElement[]} */ ([...list.querySelectorAll('[role^="menuitem"]')].filter(
    (el) => !(/** @type {HTMLElement} */ (el)).hidden && !(/** @type {HTMLButtonElement} */ (el)).disabled,
  ));
  /** @param {Event} e */
  const outside = (e) => {
    if (!root.contains(/** @type {Node} */ (e.target))) close();
  };
  const close = () => {
    if (list.hidden) return;
    list.hidden = true;
    button.setAttribute('aria-expanded', 'false');
    document.removeEventListener('pointerdown', outside, true);
  };
  const open = () => {
    list.hidden = false;
    button.setAttribute('aria-expanded', 'true');
    document.addEventListener('pointerdown', outside, true);
  };
  button.addEventListener('click', () => {
    if (list.hidden) {
      open();
      const first = items()[0];
      if (first && button.matches(':focus-visible')) first.focus();
    } else {
      close();
    }
  });
  root.addEventListener('keydown', (e) => {
    if (list.hidden) return;
    if (e.key === 'Escape') {
      e.preventDefault();
      e.stopPropagation();
      close();
      button.focus();
    } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const all = items();
      if (!all.length) return;
      const at = all.indexOf(/** @type {HTMLButtonElement} */ (document.activeElement));
      const next = e.key === 'ArrowDown' ? (at + 1) % all.length : (at - 1 + all.length) % all.length;
      all[next].focus();
    }
  });
  // Choosing an item closes the menu (its own handler runs first).
  list.addEventListener('click', (e) => {
    const item = /** @type {HTMLElement} */ (e.target).closest('[role^="menuitem"]');
    if (item) close();
  });
  return { root, button, list, close };
}

/** The colour themes of the settings dialog. */
export const THEMES = /** @type {const} */ (['system', 'light', 'dark']);

const THEME_KEY = 'chatd.theme';

/**
 * The theme picked in this browser (localStorage `chatd.theme`): `system`
 * (follow the system's light or dark mode, the default), `light` or `dark`.
 * @returns {'system' | 'light' | 'dark'}
 */
export function storedTheme() {
  const value = localStorage.getItem(THEME_KEY);
  return value === 'light' || value === 'dark' ? value : 'system';
}

/**
 * Applies (and remembers) a theme: `data-theme` on the root element picks
 * the palette of app.css, and the dark style sheet of highlight.js follows.
 * @param {'system' | 'light' | 'dark'} theme
 */
export function applyTheme(theme) {
  if (theme === 'system') {
    localStorage.removeItem(THEME_KEY);
    delete document.documentElement.dataset.theme;
  } else {
    localStorage.setItem(THEME_KEY, theme);
    document.documentElement.dataset.theme = theme;
  }
  const dark = /** @type {HTMLLinkElement | null} */ (document.getElementById('code-theme-dark'));
  if (dark) dark.media = theme === 'system' ? '(prefers-color-scheme: dark)' : theme === 'dark' ? 'all' : 'not all';
}

/**
 * "in 12 s", "in 1 min 5 s": how long until `iso`; `now` once it has passed.
 * @param {string} iso
 */
export function timeUntil(iso) {
  const s = Math.ceil((new Date(iso).getTime() - Date.now()) / 1000);
  if (!(s > 0)) return 'now';
  if (s < 60) return `in ${s} s`;
  const m = Math.floor(s / 60);
  return `in ${m} min${s % 60 ? ` ${s % 60} s` : ''}`;
}
