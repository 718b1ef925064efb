// @ts-check
// chatd web UI: plain ES modules, no build step, no framework. This is the
// entry module (index.html loads it); it owns sign-in and sign-out (a
// password sign-in's cookie session, ./signin.js, checked on load with GET
// /api/v2/sessions/current; or an API token kept in localStorage
// `chatd.token`, checked with GET /api/v2/users/me), the routing by hash,
// and which view is open:
//
//   #/                    the new-chat form          ./new-chat.js
//   #/chats/<id>          a chat                     ./chat-view.js
//   #/tokens              the user's API tokens      ./tokens.js
//   #/users/<id>/tokens   another user's (admins)    ./tokens.js
//   #/admin               users, usage and limits    ./admin.js
//
// The other modules: ./sidebar.js (the chat list), ./composer.js,
// ./chat-state.js (an open chat's state and the stream events that change
// it), ./stream.js (the WebSocket), ./messages.js, ./panels.js,
// ./action-required.js and ./queue.js (the chat view's parts), ./search.js
// (message search), ./shares.js (sharing, "Shared with me", read-only
// chats), ./import-chat.js (import of a JSON export),
// ./models.js, ./usage.js, ./markdown.js (model text as Markdown), ./api.js
// (HTTP and the session) and ./ui.js (the `h` element helper, toasts,
// formatting); ./wire.js holds the JSDoc types of the wire shapes.
//
// Wire contract: ../../shared/API.md. Test selectors (`data-testid`):
// web/README.md. User text is always plain text (textContent), never HTML.

import { $, $input, toast, clearToast, announce, applyTheme, storedTheme, THEMES } from './ui.js';
import { ApiError, api, session } from './api.js';
import { startUsage, stopUsage, onUsage } from './usage.js';
import { openTokensPage } from './tokens.js';
import { openAdminPage } from './admin.js';
import { resetModels, rememberModel } from './models.js';
import { initSidebar, startChatList, stopChatList, setSidebarOpen, renderChatList } from './sidebar.js';
import { openNewChat } from './new-chat.js';
import { openChatView, closeChatView, renderHeader } from './chat-view.js';
import { forgetInterrupted, isLoaded } from './chat-state.js';
import { usageChanged, updateCountdowns } from './panels.js';
import { initPasswordSignIn, restoreCookieSession, endCookieSession, resetPasswordSignIn, buildPasswordSettings } from './signin.js';
import { initSearch } from './search.js';
import { initShares, startSharedList, stopSharedList, renderSharedList } from './shares.js';
import { initImport } from './import-chat.js';

/** @typedef {import('./wire.js').User} User */
/** @typedef {import('./chat-state.js').ChatView} ChatView */

const TOKEN_KEY = 'chatd.token';

/**
 * An account or admin page: which one, and how it opens in the main
 * column (`closed()` tells it that the user went elsewhere).
 * @typedef {{page: string, open: (main: HTMLElement, closed: () => boolean) => void}} Page
 */

/**
 * The open view: a chat, the new-chat form, or a page.
 * @typedef {{kind: 'chat', chatId: string, view: ChatView}
 *   | {kind: 'new', chatId: null, closed: boolean}
 *   | {kind: 'page', chatId: null, page: string, closed: boolean}} OpenView
 */

/** @type {OpenView | null} */
let current = null;

/** The open chat's view, or null. */
function openChat() {
  return current && current.kind === 'chat' ? current.view : null;
}

// ---------------------------------------------------------------------------
// Sign-in

/**
 * Checks `token` (`GET /users/me`) and signs in with it.
 * @param {string} token
 */
async function signIn(token) {
  token = token.trim();
  if (!token) return;
  const error = $('signin-error');
  const input = $('token-input');
  error.hidden = true;
  input.removeAttribute('aria-invalid');
  /** @type {User} */
  let me;
  try {
    me = await api('GET', '/users/me', undefined, { token, quiet: true });
  } catch (err) {
    // Said in the form, next to the field, not in a toast.
    error.textContent = err instanceof ApiError && err.status === 401
      ? 'This token was not accepted: it is wrong, expired or revoked. Check it and try again.'
      : err instanceof ApiError && err.status === 0
        ? "Can't reach the server. Check that chatd is running, then try again."
        : `Sign-in failed: ${/** @type {Error} */ (err).message}`;
    error.hidden = false;
    input.setAttribute('aria-invalid', 'true');
    input.setAttribute('aria-describedby', 'signin-error');
    input.focus();
    return;
  }
  clearToast();
  localStorage.setItem(TOKEN_KEY, token);
  session.csrf = null;
  session.token = token;
  session.me = me;
  showSignedIn();
}

/**
 * The "Sign out" button: ends the browser session on the server first, so
 * that once the sign-in screen shows, the cookie no longer signs anyone
 * in (a reload or another tab finds no session), then signs out here.
 */
async function signOutClicked() {
  const button = /** @type {HTMLButtonElement} */ ($('sign-out'));
  button.disabled = true;
  try {
    await endCookieSession();
  } finally {
    button.disabled = false;
  }
  signOut();
}

/**
 * Signs out in this page: forgets the token, stops every live view and
 * shows the sign-in screen. A browser session still open on the server is
 * ended in the background (signOutClicked ends it before calling this).
 */
function signOut() {
  localStorage.removeItem(TOKEN_KEY);
  endCookieSession();
  stopSharedList();
  session.token = null;
  session.me = null;
  resetModels();
  stopChatList();
  stopUsage();
  closeView();
  setSidebarOpen(false);
  $('main').replaceChildren();
  $('who').hidden = true;
  $('menu-toggle').hidden = true;
  $('app-view').hidden = true;
  $('signin-view').hidden = false;
  $input('token-input').value = '';
  resetPasswordSignIn();
}

// ---------------------------------------------------------------------------
// Settings and the connection banner

/** The settings dialog: the colour theme (kept in this browser). */
function openSettings() {
  const dialog = /** @type {HTMLDialogElement} */ ($('settings-dialog'));
  const theme = storedTheme();
  for (const value of THEMES) {
    /** @type {HTMLInputElement} */ (dialog.querySelector(`input[value="${value}"]`)).checked = value === theme;
  }
  dialog.showModal();
}

/**
 * The banner under the top bar while the server is unreachable; the open
 * chat disables its actions meanwhile.
 * @param {boolean} reachable
 */
function reachableChanged(reachable) {
  $('connection-banner').hidden = reachable;
  announce(reachable ? 'Connected to the server again.' : "Can't reach the server; retrying.");
  const view = openChat();
  if (view && isLoaded(view)) renderHeader(view);
  updateCountdowns(view);
}

function showSignedIn() {
  $('signin-view').hidden = true;
  $('app-view').hidden = false;
  $('who').hidden = false;
  $('menu-toggle').hidden = false;
  $('username').textContent = session.me ? session.me.username : '';
  startUsage();
  startChatList();
  startSharedList();
  route();
}

async function restoreSession() {
  const token = localStorage.getItem(TOKEN_KEY);
  if (!token) {
    // A password sign-in's session (the cookie), if any.
    try {
      const me = await restoreCookieSession();
      if (me) {
        session.token = null;
        session.me = me;
        showSignedIn();
        return;
      }
    } catch (err) {
      if (err instanceof ApiError && err.status !== 0) toast(err.message);
    }
    signOut();
    return;
  }
  try {
    session.me = await api('GET', '/users/me', undefined, { token, quiet: true });
    session.token = token;
    showSignedIn();
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 401) toast(/** @type {Error} */ (err).message);
    signOut();
  }
}

// ---------------------------------------------------------------------------
// Routing: `#/` (new chat form), `#/chats/<id>`, `#/tokens` (the user's
// API tokens), `#/users/<id>/tokens` (another user's, for admins) and
// `#/admin` (users, their usage and limits).

/** @type {[RegExp, (m: RegExpMatchArray) => Page][]} */
const PAGE_ROUTES = [
  [/^#\/tokens$/, () => ({ page: 'tokens', open: (main, closed) => openTokensPage(main, 'me', closed) })],
  [/^#\/users\/([0-9a-fA-F-]{36})\/tokens$/, (m) => ({ page: 'tokens', open: (main, closed) => openTokensPage(main, m[1].toLowerCase(), closed) })],
  [/^#\/admin$/, () => ({ page: 'admin', open: openAdminPage })],
];

function route() {
  if (!session.me) return;
  const match = location.hash.match(/^#\/chats\/([0-9a-fA-F-]{36})$/);
  const chatId = match ? match[1].toLowerCase() : null;
  setSidebarOpen(false);
  if (current && current.chatId === chatId && chatId) return;
  closeView();
  const page = chatId ? null : pageOf(location.hash);
  for (const link of document.querySelectorAll('.account-nav a')) {
    if (page && link.getAttribute('href') === location.hash) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (chatId) current = { kind: 'chat', chatId, view: openChatView($('main'), chatId) };
  else if (page) openPage(page);
  else openNew();
  renderChatList();
  renderSharedList();
}

/**
 * The page of an account or admin route, or null.
 * @param {string} hash
 * @returns {Page | null}
 */
function pageOf(hash) {
  for (const [pattern, page] of PAGE_ROUTES) {
    const m = hash.match(pattern);
    if (m) return page(m);
  }
  return null;
}

/**
 * Opens an account or admin page (tokens.js, admin.js) in the main column.
 * @param {Page} page
 */
function openPage(page) {
  clearToast();
  announce('');
  /** @type {OpenView} */
  const view = { kind: 'page', chatId: null, page: page.page, closed: false };
  current = view;
  page.open($('main'), () => view.closed);
}

function openNew() {
  current = { kind: 'new', chatId: null, closed: false };
  openNewChat($('main'));
}

function closeView() {
  const view = current;
  current = null;
  if (!view) return;
  if (view.kind === 'chat') closeChatView(view.view);
  else view.closed = true;
}

// ---------------------------------------------------------------------------
// Start

function start() {
  applyTheme(storedTheme());
  $('signin-form').addEventListener('submit', (e) => {
    e.preventDefault();
    signIn($input('token-input').value);
  });
  initPasswordSignIn((me) => {
    clearToast();
    localStorage.removeItem(TOKEN_KEY);
    session.me = me;
    showSignedIn();
  });
  $('sign-out').addEventListener('click', signOutClicked);
  const settingsActions = /** @type {HTMLElement} */ ($('settings-dialog').querySelector('.dialog-actions'));
  settingsActions.before(buildPasswordSettings());
  initSearch({ openChat });
  initShares({ openChat });
  initImport();
  $('open-settings').addEventListener('click', openSettings);
  $('settings-dialog').addEventListener('change', (e) => {
    const input = /** @type {HTMLInputElement} */ (e.target);
    if (input.name === 'theme' && (input.value === 'system' || input.value === 'light' || input.value === 'dark')) applyTheme(input.value);
  });
  session.onReachable = reachableChanged;
  initSidebar({
    open: () => {
      const view = openChat();
      return view ? { chatId: view.chatId, chat: view.chat } : null;
    },
    titleChanged: () => {
      const view = openChat();
      if (view && isLoaded(view)) renderHeader(view);
    },
    deleted: (chatId) => {
      rememberModel(chatId, '');
      forgetInterrupted(chatId);
      if (current && current.chatId === chatId) {
        closeView();
        location.hash = '#/';
      }
    },
  });
  $('new-chat').addEventListener('click', () => {
    if (location.hash === '#/' || location.hash === '') {
      closeView();
      openNew();
      renderChatList();
      setSidebarOpen(false);
    } else {
      location.hash = '#/';
    }
  });
  window.addEventListener('hashchange', route);
  session.onUnauthorized = signOut;
  onUsage(() => {
    const view = openChat();
    if (view) usageChanged(view);
  });
  setInterval(() => updateCountdowns(openChat()), 1000);
  restoreSession();
}

start();
