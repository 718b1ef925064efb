// @ts-check
// The API tokens page (`#/tokens` for the signed-in user, `#/users/<id>/tokens`
// for another user, admins only): API.md "Limits, budgets and the token
// lifecycle" and "Authentication and authorization".
//
// - the list: `GET /users/{user}/tokens` → `[{id, name, created_at,
//   expires_at|null, last_used_at|null}]` (never the token itself);
// - create: `POST /users/{user}/tokens {name?, lifetime_seconds?}` →
//   `{id, token}`; the clear token is shown once, with a copy button and a
//   warning that it will not be shown again (it is kept in no variable once
//   the panel is closed); a member's token always expires (no lifetime =
//   the server's maximum, more than it = `400` shown under the field);
// - revoke: `DELETE /users/{user}/tokens/{id}` after a confirmation; the
//   token answers `401` from then on and its open streams close. Revoking
//   the token this browser signed in with signs it out.

import { h, announce, confirmDialog, toast, timeEl } from './ui.js';
import { api, session, ApiError } from './api.js';

/** @typedef {import('./wire.js').User} User */

/**
 * A token of the list (`GET /users/{user}/tokens`; never the secret).
 * @typedef {object} TokenInfo
 * @property {string} id
 * @property {string | null} [name]
 * @property {string} created_at
 * @property {string | null} expires_at
 * @property {string | null} last_used_at
 */

/**
 * `POST /users/{user}/tokens`: the clear token, shown once.
 * @typedef {{id: string, token: string}} CreatedToken
 */

const DAY = 86400;
/**
 * Choices of lifetime, in seconds; `null` sends none (see `lifetimeLabel`).
 * @type {[number | null, string | null][]}
 */
const LIFETIMES = [
  [DAY, '1 day'],
  [7 * DAY, '7 days'],
  [30 * DAY, '30 days'],
  [90 * DAY, '90 days'],
  [365 * DAY, '1 year'],
  [null, null],
];
const DEFAULT_LIFETIME = 30 * DAY;

/**
 * Opens the tokens page of `userId` (`me` or a user id) in `main`.
 * `closed()` tells whether the page was left meanwhile.
 * @param {HTMLElement} main
 * @param {string} [userId]
 * @param {() => boolean} [closed]
 */
export function openTokensPage(main, userId = 'me', closed = () => false) {
  const self = userId === 'me' || (session.me && userId === session.me.id);
  const path = `/users/${self ? 'me' : userId}/tokens`;
  const heading = h('h1', { id: 'page-heading', tabindex: '-1' }, self ? 'API tokens' : 'API tokens of another user');
  const intro = h(
    'p',
    { class: 'hint' },
    self
      ? 'A token lets a script, the command-line client (CHATD_TOKEN) or a browser use the API as you. Revoke a token you no longer use, or one that may have leaked.'
      : 'Tokens of this user. Revoking one signs out whatever uses it.',
  );

  const name = h('input', { type: 'text', id: 'token-name', testid: 'token-name', maxlength: 200, autocomplete: 'off', placeholder: 'e.g. laptop CLI', 'aria-describedby': 'token-name-help' });
  const lifetime = h(
    'select',
    { id: 'token-lifetime', testid: 'token-lifetime', 'aria-describedby': 'token-lifetime-error' },
    LIFETIMES.map(([seconds, label]) =>
      h('option', { value: seconds === null ? '' : String(seconds), selected: seconds === DEFAULT_LIFETIME }, label || lifetimeLabel(Boolean(self))),
    ),
  );
  const error = h('p', { class: 'field-error', id: 'token-lifetime-error', testid: 'token-create-error', role: 'alert', hidden: true });
  const create = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'token-create' }, 'Create token');
  const form = h(
    'form',
    { class: 'card page-form', testid: 'token-create-form', 'aria-labelledby': 'token-form-heading' },
    h('h2', { id: 'token-form-heading' }, 'Create a token'),
    h(
      'div',
      { class: 'form-row' },
      h('span', { class: 'field' }, h('label', { for: 'token-name' }, 'Name'), name),
      h('span', { class: 'field' }, h('label', { for: 'token-lifetime' }, 'Expires after'), lifetime),
      create,
    ),
    h('p', { class: 'hint', id: 'token-name-help' }, 'The name reminds you where the token is used (at most 200 characters).'),
    error,
  );
  const createdSlot = h('div', { class: 'created-slot' });
  const list = h('div', { class: 'table-wrap' });
  const page = h(
    'section',
    { class: 'page tokens-page', testid: 'tokens-page', 'aria-labelledby': 'page-heading' },
    heading,
    intro,
    form,
    createdSlot,
    h('h2', { id: 'token-list-heading' }, 'Tokens'),
    list,
  );
  main.replaceChildren(page);
  heading.focus();
  if (!self) {
    // Name the user (admins: `GET /users`); the id stays in the URL.
    api('GET', '/users', undefined, { quiet: true })
      .then((/** @type {User[]} */ users) => {
        const user = users.find((u) => u.id === userId);
        if (user && !closed()) heading.textContent = `API tokens of ${user.username}`;
      })
      .catch(() => {});
  }

  /** @type {TokenInfo[]} */
  let tokens = [];
  const load = async () => {
    try {
      tokens = await api('GET', path, undefined, { quiet: true });
    } catch (err) {
      if (closed()) return;
      list.replaceChildren(h('p', { class: 'field-error', testid: 'token-list-error', role: 'alert' }, `The tokens could not be loaded: ${/** @type {Error} */ (err).message}`));
      return;
    }
    if (!closed()) renderList();
  };

  const renderList = () => {
    if (tokens.length === 0) {
      list.replaceChildren(h('p', { class: 'empty', testid: 'token-list-empty' }, 'No tokens.'));
      return;
    }
    const rows = tokens.map((t, i) =>
      h(
        'tr',
        { testid: 'token-row', dataset: { tokenId: t.id } },
        h('th', { scope: 'row', testid: 'token-row-name' }, t.name || '(no name)'),
        h('td', { testid: 'token-row-created' }, timeEl(t.created_at)),
        h('td', { testid: 'token-row-expires' }, timeEl(t.expires_at, 'never')),
        h('td', { testid: 'token-row-last-used' }, timeEl(t.last_used_at, 'never')),
        h(
          'td',
          { class: 'actions' },
          h('button', {
            type: 'button',
            class: 'btn btn-small btn-danger-quiet',
            testid: 'token-revoke',
            'aria-label': `Revoke token ${t.name || i + 1}`,
            onclick: () => revoke(t),
          }, 'Revoke'),
        ),
      ),
    );
    list.replaceChildren(
      h(
        'table',
        { class: 'data-table', testid: 'token-list', 'aria-labelledby': 'token-list-heading' },
        h('thead', {}, h('tr', {}, ['Name', 'Created', 'Expires', 'Last used', 'Actions'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows),
      ),
    );
  };

  /** @param {TokenInfo} t */
  const revoke = async (t) => {
    const label = t.name ? `“${t.name}”` : 'This token';
    const ok = await confirmDialog({
      title: 'Revoke this token?',
      message: `${label} stops working at once: requests with it are refused and the streams opened with it close. This cannot be undone.${self ? ' If this browser signed in with it, you will be signed out.' : ''}`,
      confirm: 'Revoke',
    });
    if (!ok || closed()) return;
    const index = tokens.findIndex((x) => x.id === t.id);
    try {
      await api('DELETE', `${path}/${t.id}`, undefined, { quiet: true });
    } catch (err) {
      // Already gone (404): the list is stale; anything else: say why.
      if (!(err instanceof ApiError) || err.status !== 404) {
        toast(err instanceof ApiError ? err.describe() : String(err));
        return;
      }
    }
    if (closed() || !session.me) return;
    tokens = tokens.filter((x) => x.id !== t.id);
    renderList();
    announce(`Token ${t.name ? `“${t.name}” ` : ''}revoked.`);
    // Keep the keyboard where the revoked row was.
    /** @type {NodeListOf<HTMLElement>} */
    const buttons = list.querySelectorAll('[data-testid="token-revoke"]');
    const next = buttons[Math.min(index, buttons.length - 1)];
    (next || name).focus();
  };

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    lifetime.removeAttribute('aria-invalid');
    name.removeAttribute('aria-invalid');
    /** @type {{name?: string, lifetime_seconds?: number}} */
    const body = {};
    if (name.value.trim()) body.name = name.value.trim();
    if (lifetime.value) body.lifetime_seconds = Number(lifetime.value);
    create.disabled = true;
    /** @type {CreatedToken} */
    let created;
    try {
      created = await api('POST', path, body, { quiet: true });
    } catch (err) {
      create.disabled = false;
      if (closed()) return;
      showError(err);
      return;
    }
    create.disabled = false;
    if (closed()) return;
    name.value = '';
    showCreated(created, body.name);
    load();
  });

  /** @param {unknown} err */
  const showError = (err) => {
    const validations = err instanceof ApiError ? err.validations : [];
    error.textContent = validations.length
      ? validations.map((v) => `${v.field === 'lifetime_seconds' ? 'Expires after' : v.field === 'name' ? 'Name' : v.field}: ${v.detail}`).join(' ')
      : err instanceof ApiError ? err.describe() : String(err);
    error.hidden = false;
    const field = validations.some((v) => v.field === 'name') ? name : lifetime;
    field.setAttribute('aria-invalid', 'true');
    if (validations.length) field.focus();
  };

  /** The clear token, once: a read-only field, Copy, and Done (which forgets it). */
  /**
   * @param {CreatedToken} created
   * @param {string | undefined} tokenName
   */
  const showCreated = (created, tokenName) => {
    const value = h('input', { type: 'text', readonly: true, class: 'token-secret', id: 'token-value', testid: 'token-value', spellcheck: false, autocomplete: 'off', 'aria-describedby': 'token-warning' });
    value.value = created.token;
    const copy = h('button', { type: 'button', class: 'btn', testid: 'token-copy' }, 'Copy');
    const done = h('button', { type: 'button', class: 'btn btn-primary', testid: 'token-created-done' }, 'Done');
    copy.addEventListener('click', async () => {
      const ok = await copyText(value);
      copy.textContent = ok ? 'Copied' : 'Copy';
      announce(ok ? 'Token copied to the clipboard.' : 'The token could not be copied; select it and copy it by hand.');
    });
    value.addEventListener('focus', () => value.select());
    done.addEventListener('click', () => {
      createdSlot.replaceChildren();
      name.focus();
    });
    createdSlot.replaceChildren(
      h(
        'section',
        { class: 'card token-created', testid: 'token-created', 'aria-labelledby': 'token-created-heading' },
        h('h2', { id: 'token-created-heading' }, `New token${tokenName ? ` “${tokenName}”` : ''}`),
        h('p', { class: 'token-warning', id: 'token-warning', testid: 'token-warning' }, 'Copy it now: it will not be shown again. Anyone who has it can use the API as this user until it expires or is revoked.'),
        h('div', { class: 'token-secret-row' }, h('label', { for: 'token-value', class: 'sr-only' }, 'The new token'), value, copy),
        h('div', { class: 'dialog-actions' }, done),
      ),
    );
    value.focus();
    announce('Token created. Copy it now: it will not be shown again.');
  };

  load();
}

/** The label of the "no lifetime" choice: admins' tokens never expire, members' last the server's maximum. */
/** @param {boolean} self */
function lifetimeLabel(self) {
  return self && session.me && session.me.role === 'admin' ? 'Never' : 'Longest allowed';
}

/** Copies the field's text (Clipboard API, else the selection); resolves to whether it worked. */
/** @param {HTMLInputElement} field */
async function copyText(field) {
  try {
    await navigator.clipboard.writeText(field.value);
    return true;
  } catch {
    field.focus();
    field.select();
    try {
      return document.execCommand('copy');
    } catch {
      return false;
    }
  }
}
