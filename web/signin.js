// @ts-check
// Password sign-in (API.md "Sign-in, search, sharing and export"): the
// sign-in form's user name and password (`POST /sessions` → a
// `chatd_session` cookie, HttpOnly, and the CSRF token in the
// `X-CSRF-Token` response header), the check of a kept session on load
// (`GET /sessions/current` → `{user, csrf_token, expires_at}`, `401`
// without one), sign-out (`DELETE /sessions/current`) and the "Change
// password" part of the settings dialog (`PUT /users/me/password`).
// app.js owns what happens once signed in or out; the token sign-in stays
// there. Errors are said in the form, next to the field, never in a toast.

import { $, $input, h, announce, formatSeconds } from './ui.js';
import { API, ApiError, api, session, setReachable } from './api.js';

/** @typedef {import('./wire.js').User} User */

/**
 * Checks for a browser session (the cookie): resolves to its user, with
 * `session.csrf` set, or null when there is none (`401`, or `404` from a
 * server without sessions). Rejects with ApiError when the server cannot
 * be reached or fails.
 * @returns {Promise<User | null>}
 */
export async function restoreCookieSession() {
  try {
    /** @type {{user: User, csrf_token: string, expires_at: string}} */
    const current = await api('GET', '/sessions/current', undefined, { quiet: true, token: null });
    session.csrf = current.csrf_token;
    return current.user;
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 404)) return null;
    throw err;
  }
}

/**
 * Ends the browser session on the server (`DELETE /sessions/current`) and
 * resolves once the server has answered (or after 5 s); failures are
 * ignored (the cookie may already be gone). Calling it again is a no-op.
 */
export async function endCookieSession() {
  const csrf = session.csrf;
  session.csrf = null;
  if (session.token || !csrf) return;
  // Not through api(): a session that already ended answers 401, which
  // must not sign out again.
  // At most 5 s: a server that does not answer must not keep the user
  // signed in here; its session then ends when it expires.
  await fetch(`${API}/sessions/current`, {
    method: 'DELETE',
    credentials: 'same-origin',
    headers: { 'X-CSRF-Token': csrf },
    signal: AbortSignal.timeout(5000),
  }).catch(() => null);
}

/**
 * Binds the password form of the sign-in screen: `signedIn(user)` runs
 * once the server accepts the name and password.
 * @param {(user: User) => void} signedIn
 */
export function initPasswordSignIn(signedIn) {
  const form = /** @type {HTMLFormElement} */ ($('password-signin-form'));
  const error = $('password-signin-error');
  const username = $input('signin-username');
  const password = $input('signin-password');
  const button = /** @type {HTMLButtonElement} */ (form.querySelector('button[type="submit"]'));
  /**
   * @param {string | null} text
   * @param {HTMLInputElement | null} field
   */
  const say = (text, field) => {
    for (const input of [username, password]) {
      input.removeAttribute('aria-invalid');
      input.removeAttribute('aria-describedby');
    }
    error.hidden = !text;
    error.textContent = text || '';
    if (field) {
      field.setAttribute('aria-invalid', 'true');
      field.setAttribute('aria-describedby', 'password-signin-error');
      field.focus();
    }
  };
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!username.value.trim()) return say('Enter your user name.', username);
    if (!password.value) return say('Enter your password.', password);
    say(null, null);
    button.disabled = true;
    let response;
    try {
      response = await fetch(`${API}/sessions`, {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ username: username.value.trim(), password: password.value }),
      });
    } catch {
      button.disabled = false;
      setReachable(false);
      return say("Can't reach the server. Check that chatd is running, then try again.", null);
    }
    setReachable(true);
    button.disabled = false;
    /** @type {any} */
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    if (response.status === 401) {
      password.value = '';
      return say('Wrong user name or password.', password);
    }
    if (response.status === 429) {
      const after = Number.parseInt(response.headers.get('Retry-After') || '', 10);
      const wait = Number.isFinite(after) ? ` Try again in ${formatSeconds(after)}.` : ' Try again later.';
      return say(`Too many sign-in attempts.${wait}`, null);
    }
    if (!response.ok || !body) {
      return say(`Sign-in failed: ${(body && body.message) || `HTTP ${response.status}`}`, null);
    }
    session.token = null;
    session.csrf = response.headers.get('X-CSRF-Token');
    if (!session.csrf) {
      // The header should be there; the current session names it too.
      const user = await restoreCookieSession().catch(() => null);
      if (!user) return say('Sign-in failed: the server did not start a session.', null);
    }
    password.value = '';
    signedIn(/** @type {User} */ (body));
  });
}

/** Empties the password form (after a sign-out) and focuses it. */
export function resetPasswordSignIn() {
  $input('signin-password').value = '';
  $('password-signin-error').hidden = true;
  $input('signin-username').focus();
}

/**
 * The "Change password" part of the settings dialog: current and new
 * password (twice), `PUT /users/me/password`; a refusal is said next to
 * the field it names (`validations`). It lives inside the dialog's own
 * form, so Enter in its fields changes the password instead of closing it.
 * @returns {HTMLElement}
 */
export function buildPasswordSettings() {
  /**
   * @param {string} id
   * @param {string} label
   * @param {string} autocomplete
   */
  const field = (id, label, autocomplete) => {
    const input = /** @type {HTMLInputElement} */ (h('input', { id, type: 'password', autocomplete, testid: id }));
    const error = h('p', { id: `${id}-error`, class: 'field-error', testid: `${id}-error`, role: 'alert', hidden: true });
    return { input, error, el: h('div', { class: 'password-field' }, h('label', { for: id }, label), input, error) };
  };
  const current = field('current-password', 'Current password', 'current-password');
  const next = field('new-password', 'New password (10 characters or more)', 'new-password');
  const again = field('repeat-password', 'New password again', 'new-password');
  const done = h('p', { class: 'hint', testid: 'password-changed', role: 'status', hidden: true }, 'Password changed.');
  const button = /** @type {HTMLButtonElement} */ (h('button', { type: 'button', class: 'btn', testid: 'change-password' }, 'Change password'));
  const fields = [current, next, again];
  /**
   * @param {{input: HTMLInputElement, error: HTMLElement}} f
   * @param {string} text
   */
  const fail = (f, text) => {
    f.error.textContent = text;
    f.error.hidden = false;
    f.input.setAttribute('aria-invalid', 'true');
    f.input.setAttribute('aria-describedby', f.error.id);
    f.input.focus();
  };
  const submit = async () => {
    done.hidden = true;
    for (const f of fields) {
      f.error.hidden = true;
      f.input.removeAttribute('aria-invalid');
      f.input.removeAttribute('aria-describedby');
    }
    if (!current.input.value) return fail(current, 'Enter your current password.');
    if (next.input.value.length < 10) return fail(next, 'Use at least 10 characters.');
    if (next.input.value.length > 1024) return fail(next, 'Use at most 1,024 characters.');
    if (next.input.value !== again.input.value) return fail(again, 'The two new passwords differ.');
    button.disabled = true;
    try {
      await api('PUT', '/users/me/password', { password: next.input.value, current_password: current.input.value }, { quiet: true });
    } catch (err) {
      button.disabled = false;
      if (!(err instanceof ApiError)) throw err;
      const v = err.validations[0];
      if (v && v.field === 'current_password') return fail(current, `The current password ${v.detail}.`);
      if (v && v.field === 'password') return fail(next, `The new password ${v.detail}.`);
      return fail(current, err.describe());
    }
    button.disabled = false;
    for (const f of fields) f.input.value = '';
    done.hidden = false;
    announce('Password changed.');
  };
  button.addEventListener('click', submit);
  for (const f of fields) {
    f.input.addEventListener('keydown', (e) => {
      if (e.key !== 'Enter') return;
      e.preventDefault();
      submit();
    });
  }
  return h(
    'fieldset',
    { class: 'settings-group password-settings', testid: 'password-settings' },
    h('legend', {}, 'Change password'),
    current.el,
    next.el,
    again.el,
    done,
    button,
  );
}
