// @ts-check
// The admin page (`#/admin`, admins only): every user with their usage of
// the month, their limits and their disabled flag (API.md "Limits, budgets
// and the token lifecycle"; "Authentication and authorization").
//
// - `GET /users` → `[User]`, `User = {id, username, role, created_at,
//   disabled, limits}` (`limits` are the effective values); each user's
//   `GET /users/{id}/usage` fills the usage columns;
// - the limits of a user are edited in a row that opens below theirs; only
//   the fields changed are sent (`PATCH /users/{id} {limits: {...}}`), and an
//   emptied field sends `null`: back to the server's default. Amounts are
//   shown in the units people use (dollars, MiB) and sent in the wire's
//   (micro-dollars, bytes);
// - the disabled flag is a checkbox (`PATCH /users/{id} {disabled}`): a
//   disabled user's tokens answer `401` and their streams close; an admin
//   cannot disable themselves here;
// - new users: `POST /users {username, role}`; their tokens are on
//   `#/users/<id>/tokens`.

import { h, announce, toast, formatDateTime, formatMoney, formatCount, formatBytes } from './ui.js';
import { api, session, ApiError } from './api.js';
import { tokensUsed } from './usage.js';

/** @typedef {import('./usage.js').Usage} Usage */
/** @typedef {import('./usage.js').Limits} Limits */

/**
 * A user of `GET /users` (admins), with the limits in effect.
 * @typedef {import('./wire.js').User & {created_at?: string, limits?: (Limits & {requests_per_minute?: number | null}) | null}} AdminUser
 */

/**
 * An editable limit.
 * @typedef {object} LimitField
 * @property {'monthly_budget_micros' | 'monthly_token_budget' | 'max_running_chats' | 'requests_per_minute' | 'max_storage_bytes'} key
 *   the wire field under `limits`
 * @property {string} label
 * @property {string} unit
 * @property {string} step
 * @property {(v: number) => string} toField the wire's value as the field's text
 * @property {(t: string) => number} fromField the field's text as the wire's value
 */

const MIB = 1024 * 1024;
/** Usage requests in flight at once while the list loads. */
const USAGE_CONCURRENCY = 6;

/**
 * The editable limits: wire field, label, unit, and the conversions between
 * the wire's value and the field's text.
 * @type {LimitField[]}
 */
const LIMIT_FIELDS = [
  { key: 'monthly_budget_micros', label: 'Monthly spend budget', unit: '$', step: '0.01', toField: (v) => trimNumber(v / 1e6, 6), fromField: (t) => Math.round(Number(t) * 1e6) },
  { key: 'monthly_token_budget', label: 'Monthly token budget', unit: 'tokens', step: '1', toField: (v) => String(v), fromField: (t) => Number(t) },
  { key: 'max_running_chats', label: 'Chats running at once', unit: 'chats', step: '1', toField: (v) => String(v), fromField: (t) => Number(t) },
  { key: 'requests_per_minute', label: 'Requests per minute', unit: 'per min', step: '1', toField: (v) => String(v), fromField: (t) => Number(t) },
  { key: 'max_storage_bytes', label: 'File storage', unit: 'MiB', step: 'any', toField: (v) => trimNumber(v / MIB, 3), fromField: (t) => Math.round(Number(t) * MIB) },
];

/**
 * Opens the admin page in `main`; `closed()` tells whether it was left meanwhile.
 * @param {HTMLElement} main
 * @param {() => boolean} [closed]
 */
export function openAdminPage(main, closed = () => false) {
  const heading = h('h1', { id: 'page-heading', tabindex: '-1' }, 'Users');
  if (!session.me || session.me.role !== 'admin') {
    main.replaceChildren(
      h('section', { class: 'page admin-page', testid: 'admin-page', 'aria-labelledby': 'page-heading' }, heading,
        h('p', { class: 'hint', testid: 'admin-only' }, 'Only admins can see this page.')),
    );
    heading.focus();
    return;
  }
  /** @type {{users: AdminUser[], usage: Map<string, Usage | null>, open: string | null}} */
  const state = { users: [], usage: new Map(), open: null };
  const list = h('div', { class: 'table-wrap' });
  const refresh = h('button', { type: 'button', class: 'btn btn-small', testid: 'admin-refresh', onclick: () => load() }, 'Refresh');
  const page = h(
    'section',
    { class: 'page admin-page', testid: 'admin-page', 'aria-labelledby': 'page-heading' },
    heading,
    h('p', { class: 'hint' }, 'Every user with their usage this month (UTC) against their limits. Open a user’s limits to change them; an empty field means the server’s default. A disabled user’s tokens stop working at once.'),
    createUserForm((user) => {
      state.users = [...state.users, user];
      renderTable();
      loadUsage([user]);
    }, closed),
    h('div', { class: 'section-head' }, h('h2', { id: 'user-list-heading' }, 'All users'), refresh),
    list,
  );
  main.replaceChildren(page);
  heading.focus();

  const load = async () => {
    /** @type {AdminUser[]} */
    let users;
    try {
      users = await api('GET', '/users', undefined, { quiet: true });
    } catch (err) {
      if (!closed()) list.replaceChildren(h('p', { class: 'field-error', role: 'alert', testid: 'user-list-error' }, `The users could not be loaded: ${/** @type {Error} */ (err).message}`));
      return;
    }
    if (closed()) return;
    state.users = users;
    renderTable();
    loadUsage(users);
  };

  /**
   * Loads the usage of `users`, a few at a time, filling their rows as answers come.
   * @param {AdminUser[]} users
   */
  const loadUsage = async (users) => {
    const queue = [...users];
    const worker = async () => {
      for (let user = queue.shift(); user && !closed(); user = queue.shift()) {
        const usage = await api('GET', `/users/${user.id}/usage`, undefined, { quiet: true }).catch(() => /** @type {Usage | null} */ (null));
        if (closed()) return;
        state.usage.set(user.id, usage);
        updateUsageCells(user.id);
      }
    };
    await Promise.all(Array.from({ length: USAGE_CONCURRENCY }, worker));
  };

  /**
   * @param {string} id
   * @returns {HTMLElement | null}
   */
  const row = (id) => list.querySelector(`[data-testid="user-row"][data-user-id="${id}"]`);

  /** @param {string} id */
  const updateUsageCells = (id) => {
    const tr = row(id);
    const user = state.users.find((u) => u.id === id);
    if (!tr || !user) return;
    const usage = state.usage.get(id);
    /** @type {NonNullable<AdminUser['limits']>} */
    const limits = user.limits || {};
    /**
     * @param {string} testid
     * @param {string} text
     */
    const set = (testid, text) => {
      const cell = tr.querySelector(`[data-testid="${testid}"]`);
      if (cell) cell.textContent = text;
    };
    if (!usage) {
      for (const t of ['user-spent', 'user-tokens', 'user-running', 'user-storage']) set(t, '–');
      return;
    }
    set('user-spent', ofLimit(formatMoney(usage.spent_micros), limits.monthly_budget_micros, formatMoney));
    set('user-tokens', ofLimit(formatCount(tokensUsed(usage)), limits.monthly_token_budget, formatCount));
    set('user-running', ofLimit(formatCount(usage.running_chats), limits.max_running_chats, formatCount));
    set('user-storage', ofLimit(formatBytes(usage.storage_bytes), limits.max_storage_bytes, formatBytes));
  };

  const renderTable = () => {
    const active = /** @type {HTMLElement | null} */ (document.activeElement);
    const focusedTestid = active && list.contains(active) ? active.dataset.testid : null;
    const focusedRow = active && focusedTestid ? /** @type {HTMLElement | null} */ (active.closest('[data-user-id]'))?.dataset.userId : null;
    const rows = [];
    for (const user of state.users) {
      rows.push(userRow(user));
      if (state.open === user.id) rows.push(limitsRow(user));
    }
    list.replaceChildren(
      h(
        'table',
        { class: 'data-table users-table', testid: 'user-list', 'aria-labelledby': 'user-list-heading' },
        h('thead', {}, h('tr', {}, ['User', 'Role', 'Spent', 'Tokens', 'Running chats', 'Storage', 'Disabled', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows),
      ),
    );
    for (const user of state.users) updateUsageCells(user.id);
    if (focusedRow && focusedTestid) {
      /** @type {HTMLElement | null} */
      const el = list.querySelector(`[data-user-id="${focusedRow}"] [data-testid="${focusedTestid}"]`) || list.querySelector(`[data-user-id="${focusedRow}"][data-testid="user-limits-form"] input`);
      if (el) el.focus();
    }
  };

  /** @param {AdminUser} user */
  const userRow = (user) => {
    const me = user.id === session.me?.id;
    const disabled = h('input', {
      type: 'checkbox',
      testid: 'user-disabled',
      'aria-label': `Disable ${user.username}`,
      checked: Boolean(user.disabled),
      disabled: me,
      title: me ? 'You cannot disable yourself' : 'A disabled user’s tokens answer 401 and their streams close',
    });
    disabled.addEventListener('change', () => setDisabled(user, disabled));
    const open = state.open === user.id;
    return h(
      'tr',
      { testid: 'user-row', dataset: { userId: user.id, username: user.username }, class: user.disabled ? 'user-disabled' : null },
      h('th', { scope: 'row', testid: 'user-name', title: `Created ${formatDateTime(user.created_at)}` }, user.username, me ? h('span', { class: 'you' }, ' (you)') : null),
      h('td', { testid: 'user-role' }, user.role),
      h('td', { testid: 'user-spent' }, '…'),
      h('td', { testid: 'user-tokens' }, '…'),
      h('td', { testid: 'user-running' }, '…'),
      h('td', { testid: 'user-storage' }, '…'),
      h('td', { class: 'center' }, disabled),
      h(
        'td',
        { class: 'actions' },
        h('button', {
          type: 'button',
          class: 'btn btn-small',
          testid: 'user-edit-limits',
          'aria-expanded': open ? 'true' : 'false',
          'aria-controls': `limits-${user.id}`,
          'aria-label': `Limits of ${user.username}`,
          onclick: () => {
            state.open = open ? null : user.id;
            renderTable();
            const target = /** @type {HTMLElement | null | undefined} */ (state.open
              ? list.querySelector(`#limits-${user.id} input`)
              : row(user.id)?.querySelector('[data-testid="user-edit-limits"]'));
            if (target) target.focus();
          },
        }, 'Limits'),
        h('a', { class: 'btn btn-small btn-quiet', href: `#/users/${user.id}/tokens`, testid: 'user-tokens-link', 'aria-label': `Tokens of ${user.username}` }, 'Tokens'),
      ),
    );
  };

  /** @param {AdminUser} user */
  const limitsRow = (user) => {
    /** @type {NonNullable<AdminUser['limits']>} */
    const limits = user.limits || {};
    /** @type {Map<string, {input: HTMLInputElement, initial: string, field: LimitField}>} */
    const inputs = new Map();
    const errors = h('p', { class: 'field-error', testid: 'user-limits-error', role: 'alert', hidden: true });
    const fields = LIMIT_FIELDS.map((f) => {
      const id = `limit-${f.key}-${user.id}`;
      const current = limits[f.key];
      const initial = current === null || current === undefined ? '' : f.toField(current);
      const input = h('input', {
        type: 'number',
        id,
        min: '0',
        step: f.step,
        inputmode: f.step === '1' ? 'numeric' : 'decimal',
        testid: `limit-${f.key}`,
        placeholder: 'default',
        'aria-describedby': `limits-help-${user.id}`,
      });
      input.value = initial;
      inputs.set(f.key, { input, initial, field: f });
      return h('span', { class: 'field limit-field' }, h('label', { for: id }, `${f.label} (${f.unit})`), input);
    });
    const save = h('button', { type: 'submit', class: 'btn btn-primary btn-small', testid: 'user-limits-save' }, 'Save limits');
    const cancel = h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'user-limits-cancel' }, 'Cancel');
    const form = h(
      'form',
      { class: 'limits-form', noValidate: true },
      h('div', { class: 'limit-fields' }, fields),
      h('p', { class: 'hint', id: `limits-help-${user.id}` }, 'The values in effect now. Empty a field to return it to the server’s default (no budget, when the server sets none). Only the fields you change are saved.'),
      errors,
      h('div', { class: 'dialog-actions' }, cancel, save),
    );
    const close = () => {
      state.open = null;
      renderTable();
      /** @type {HTMLElement | null | undefined} */ (row(user.id)?.querySelector('[data-testid="user-edit-limits"]'))?.focus();
    };
    cancel.addEventListener('click', close);
    form.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') {
        e.preventDefault();
        close();
      }
    });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      errors.hidden = true;
      /** @type {Record<string, number | null>} */
      const changes = {};
      for (const [key, { input, initial, field }] of inputs) {
        input.removeAttribute('aria-invalid');
        const text = input.value.trim();
        if (text === initial) continue;
        if (text === '') changes[key] = null;
        else {
          const value = field.fromField(text);
          if (!Number.isFinite(value) || value < 0) {
            input.setAttribute('aria-invalid', 'true');
            errors.textContent = `${field.label}: enter a number of 0 or more, or leave it empty for the default.`;
            errors.hidden = false;
            input.focus();
            return;
          }
          changes[key] = value;
        }
      }
      if (Object.keys(changes).length === 0) {
        close();
        return;
      }
      save.disabled = true;
      /** @type {AdminUser} */
      let updated;
      try {
        updated = await api('PATCH', `/users/${user.id}`, { limits: changes }, { quiet: true });
      } catch (err) {
        save.disabled = false;
        if (closed()) return;
        const validations = err instanceof ApiError ? err.validations : [];
        errors.textContent = validations.length
          ? validations.map((v) => `${labelOf(v.field)}: ${v.detail}`).join(' ')
          : err instanceof ApiError ? err.describe() : String(err);
        errors.hidden = false;
        for (const v of validations) {
          const hit = [...inputs.entries()].find(([key]) => v.field === key || v.field.endsWith(`.${key}`));
          if (hit) hit[1].input.setAttribute('aria-invalid', 'true');
        }
        return;
      }
      if (closed()) return;
      replaceUser(updated);
      announce(`Limits of ${user.username} saved.`);
      close();
      loadUsage([updated]);
    });
    return h(
      'tr',
      { class: 'limits-row', id: `limits-${user.id}`, testid: 'user-limits-form', dataset: { userId: user.id } },
      h('td', { colspan: '8' }, h('h3', { class: 'sr-only' }, `Limits of ${user.username}`), form),
    );
  };

  /** @param {AdminUser} updated */
  const replaceUser = (updated) => {
    state.users = state.users.map((u) => (u.id === updated.id ? { ...u, ...updated } : u));
    renderTable();
  };

  /**
   * @param {AdminUser} user
   * @param {HTMLInputElement} checkbox
   */
  const setDisabled = async (user, checkbox) => {
    const disabled = checkbox.checked;
    checkbox.disabled = true;
    /** @type {AdminUser} */
    let updated;
    try {
      updated = await api('PATCH', `/users/${user.id}`, { disabled }, { quiet: true });
    } catch (err) {
      checkbox.checked = !disabled;
      checkbox.disabled = false;
      toast(err instanceof ApiError ? err.describe() : String(err));
      return;
    }
    if (closed()) return;
    replaceUser(updated);
    announce(disabled ? `${user.username} is disabled: their tokens no longer work.` : `${user.username} is enabled again.`);
  };

  load();
}

/**
 * The form that creates a user (`POST /users`); `onCreated(user)` adds it to the list.
 * @param {(user: AdminUser) => void} onCreated
 * @param {() => boolean} closed
 */
function createUserForm(onCreated, closed) {
  const username = h('input', { type: 'text', id: 'new-username', testid: 'admin-new-username', required: true, maxlength: 64, autocomplete: 'off', spellcheck: false, 'aria-describedby': 'new-username-help' });
  const role = h('select', { id: 'new-role', testid: 'admin-new-role' }, h('option', { value: 'member' }, 'member'), h('option', { value: 'admin' }, 'admin'));
  const error = h('p', { class: 'field-error', testid: 'admin-create-error', role: 'alert', hidden: true });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'admin-create-user' }, 'Create user');
  const form = h(
    'form',
    { class: 'card page-form', testid: 'admin-create-form', 'aria-labelledby': 'new-user-heading' },
    h('h2', { id: 'new-user-heading' }, 'Create a user'),
    h(
      'div',
      { class: 'form-row' },
      h('span', { class: 'field' }, h('label', { for: 'new-username' }, 'Username'), username),
      h('span', { class: 'field' }, h('label', { for: 'new-role' }, 'Role'), role),
      submit,
    ),
    h('p', { class: 'hint', id: 'new-username-help' }, '1 to 64 letters, digits, “.”, “_” or “-”. Then give them a token from their Tokens link.'),
    error,
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    username.removeAttribute('aria-invalid');
    submit.disabled = true;
    /** @type {AdminUser} */
    let user;
    try {
      user = await api('POST', '/users', { username: username.value.trim(), role: role.value }, { quiet: true });
    } catch (err) {
      submit.disabled = false;
      if (closed()) return;
      const validations = err instanceof ApiError ? err.validations : [];
      error.textContent = validations.length
        ? validations.map((v) => `${v.field === 'username' ? 'Username' : v.field}: ${v.detail}`).join(' ')
        : err instanceof ApiError ? err.describe() : String(err);
      error.hidden = false;
      username.setAttribute('aria-invalid', 'true');
      username.focus();
      return;
    }
    submit.disabled = false;
    if (closed()) return;
    username.value = '';
    onCreated(user);
    announce(`User ${user.username} created.`);
    username.focus();
  });
  return form;
}

/**
 * "used of limit" (just "used" without a limit).
 * @param {string} used
 * @param {number | null | undefined} limit
 * @param {(n: number) => string} format
 */
function ofLimit(used, limit, format) {
  return limit === null || limit === undefined ? used : `${used} of ${format(limit)}`;
}

/**
 * A number with at most `digits` decimals, without trailing zeros.
 * @param {number} value
 * @param {number} digits
 */
function trimNumber(value, digits) {
  return String(Number(value.toFixed(digits)));
}

/**
 * The label of a limit's wire field (`limits.max_storage_bytes` → "File storage").
 * @param {string} field
 */
function labelOf(field) {
  const key = field.replace(/^limits\./, '');
  const f = LIMIT_FIELDS.find((x) => x.key === key);
  return f ? f.label : field;
}
