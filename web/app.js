// chatd web UI: plain ES modules, no build step, no framework. Model text
// is rendered as Markdown by ./markdown.js (marked, DOMPurify and
// highlight.js, vendored under ./vendor); everything else is built with the
// `h` helper below, whose strings always become text nodes.
//
// What this file owns:
// - sign-in with an API token (localStorage `chatd.token`, checked with
//   GET /api/v2/users/me) and sign-out;
// - the sidebar: chats polled from GET /api/v2/chats (search with `q=`,
//   archived toggle), relative dates, rename (PATCH title), delete (DELETE,
//   after a confirmation); at phone width it is a drawer behind a menu
//   button;
// - the new-chat form at `#/`: the first message, its model, and an
//   "Advanced" section with a system prompt and dynamic tools JSON;
// - the chat view at `#/chats/<id>`: the live stream over the WebSocket
//   (`chatd.bearer.<token>` subprotocol, reconnect with backoff and
//   `?after_id=`), messages (assistant text as Markdown, long user texts
//   collapsed), the live preview (re-rendered at most once per animation
//   frame), interrupted and cut-short answers marked, queue,
//   action-required form (with an approval card per tool call that waits
//   for approval), error and retry banners, usage, archive, edit,
//   stop; a long chat opens as a window (GET .../messages?window=true: its
//   first and last messages) with a "load earlier" control where the
//   omitted middle is, which pages it in place with `before_id`;
// - the composer: Enter sends, Shift+Enter is a new line (never while an
//   IME composes), a model picker on every message (remembered per chat),
//   long pastes collapsed into blocks;
// - toasts for failed requests, and a polite live region that announces
//   what the assistant is doing.
//
// Wire contract: ../../shared/API.md. Test selectors (`data-testid`):
// web/README.md. User text is always plain text (textContent), never HTML.

import { renderMarkdownInto } from './markdown.js';
import {
  API, session, h, $, byTestId, ApiError, api, attempt, toast, clearToast, announce, confirmDialog, numberFormat,
} from './ui.js';
import { startUsage, stopUsage, refreshUsage, usageLimitHelp, onUsage } from './usage.js';
import { openTokensPage } from './tokens.js';
import { openAdminPage } from './admin.js';

const TOKEN_KEY = 'chatd.token';
const MODEL_KEY = 'chatd.model.'; // + chat id: the model picked last in that chat
const INTERRUPTED_KEY = 'chatd.interrupted.'; // + chat id (sessionStorage): ids of answers cut by an interrupt
const LIST_POLL_MS = 4000;
const SEARCH_DEBOUNCE_MS = 250;
const BACKOFF_INITIAL_MS = 500;
const BACKOFF_MAX_MS = 10000;
/** A text longer than this (lines or characters) is shown collapsed. */
const LONG_LINES = 20;
const LONG_CHARS = 2000;
const PHONE_QUERY = '(max-width: 720px)';
/** Messages fetched per "load earlier" click (the server also bounds the page by bytes). */
const LOAD_EARLIER_LIMIT = 50;

/** What a finish reason says under an answer (absent or null: nothing). */
const FINISH_MARKS = {
  length: "cut short: the model's output/context limit was reached",
  content_filter: "cut short: the provider's content filter stopped the answer",
  interrupted: 'interrupted',
};

// ---------------------------------------------------------------------------
// State

const app = {
  // The token and the user are `session` (ui.js).
  chats: [],
  children: new Map(), // parent id → its children (sub-agents), see loadChildren
  collapsed: new Set(), // parents whose children the list hides
  showArchived: false,
  query: '', // the sidebar search (`q=`)
  listSeq: 0, // the newest list request; older answers are dropped
  renaming: null, // id of the chat whose title is being edited in the list
  models: null, // a promise of GET /chats/models
  modelsResolved: null, // its answer, once there
  listTimer: null,
  view: null, // the open view's state (openNewChat() or chatView())
};

/** Fresh state of an open chat. */
function chatView(chatId) {
  return {
    chatId,
    chat: null, // Chat object (GET /chats/{id}); status kept current by events
    messages: new Map(), // id -> ChatMessage
    gap: null, // {after, before, omitted}: visible messages after < id < before are not loaded yet
    loadingEarlier: false,
    preview: null, // {hv, ga, seq, role, parts: [...]}
    finishedEpisodes: new Set(), // "hv:ga" whose preview a commit replaced
    lastEpisode: null, // {hv, ga} of the newest part seen
    historyVersion: 0,
    queue: [],
    actionRequired: null,
    error: null,
    retry: null, // the retry event's payload, plus `episode` (lastEpisode when it came)
    editing: null, // message id being edited
    atBottom: true, // the reader is at the end of the conversation (kept there)
    interruptArmed: false, // an interrupt is under way: the next new answer was cut by it
    interruptedIds: loadInterrupted(chatId),
    usageText: null, // the last usage label with numbers in it
    announced: null, // the last status announced in the live region
    turnStopped: false, // this turn was stopped (status interrupting, or its answer came marked interrupted)
    conn: null, // {ws, open}
    backoff: 0,
    reconnectTimer: null,
    previewFrame: null, // the requested animation frame of the preview
    previewDrawnAt: 0, // when the preview was last drawn (frame time, ms)
    previewCost: 0, // how long that took (ms)
    closed: false,
    dom: null,
  };
}

// ---------------------------------------------------------------------------
// DOM helpers

const SVG_NS = 'http://www.w3.org/2000/svg';
const ICONS = {
  menu: ['M4 6h16', 'M4 12h16', 'M4 18h16'],
  pencil: ['M4 20h4L19 9l-4-4L4 16z', 'M13.5 6.5l4 4'],
  trash: ['M4 7h16', 'M9 7V4h6v3', 'M6 7l1 13h10l1-13'],
  stop: ['M7 7h10v10H7z'],
  send: ['M5 12h14', 'M13 6l6 6-6 6'],
};

/** A decorative inline SVG icon (the control carries the label). */
function icon(name) {
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

/** Whether `text` is long enough to be shown collapsed. */
function isLong(text) {
  if (text.length > LONG_CHARS) return true;
  let lines = 1;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) {
    lines += 1;
    if (lines > LONG_LINES) return true;
  }
  return false;
}

function countLines(text) {
  return text.split('\n').length;
}

// ---------------------------------------------------------------------------
// Sign-in

async function signIn(token) {
  token = token.trim();
  if (!token) return;
  const me = await attempt(() => api('GET', '/users/me', undefined, { token }));
  if (!me) return;
  clearToast();
  localStorage.setItem(TOKEN_KEY, token);
  session.token = token;
  session.me = me;
  showSignedIn();
}

function signOut() {
  localStorage.removeItem(TOKEN_KEY);
  session.token = null;
  session.me = null;
  app.chats = [];
  app.models = null;
  app.modelsResolved = null;
  app.query = '';
  app.renaming = null;
  clearInterval(app.listTimer);
  stopUsage();
  closeView();
  setSidebarOpen(false);
  $('chat-search').value = '';
  $('chat-list').replaceChildren();
  $('main').replaceChildren();
  $('who').hidden = true;
  $('menu-toggle').hidden = true;
  $('app-view').hidden = true;
  $('signin-view').hidden = false;
  $('token-input').value = '';
  $('token-input').focus();
}

function showSignedIn() {
  $('signin-view').hidden = true;
  $('app-view').hidden = false;
  $('who').hidden = false;
  $('menu-toggle').hidden = false;
  $('username').textContent = session.me.username;
  startUsage();
  refreshChats();
  clearInterval(app.listTimer);
  app.listTimer = setInterval(refreshChats, LIST_POLL_MS);
  route();
}

async function restoreSession() {
  const token = localStorage.getItem(TOKEN_KEY);
  if (!token) {
    signOut();
    return;
  }
  try {
    session.me = await api('GET', '/users/me', undefined, { token, quiet: true });
    session.token = token;
    showSignedIn();
  } catch (err) {
    if (err.status !== 401) toast(err.message);
    signOut();
  }
}

// ---------------------------------------------------------------------------
// Sidebar: a column on wide screens, a drawer behind the menu button on
// phones.

const phone = window.matchMedia(PHONE_QUERY);

function setSidebarOpen(open) {
  const layout = $('app-view');
  const wasOpen = layout.classList.contains('sidebar-open');
  layout.classList.toggle('sidebar-open', open);
  $('menu-toggle').setAttribute('aria-expanded', String(open));
  $('menu-toggle').setAttribute('aria-label', open ? 'Hide chats' : 'Show chats');
  $('sidebar-backdrop').hidden = !open;
  // While the drawer covers the page on a phone, the page behind is inert.
  $('main').inert = open && phone.matches;
  if (open && !wasOpen && phone.matches) $('chat-search').focus();
  if (!open && wasOpen && phone.matches && $('sidebar').contains(document.activeElement)) {
    $('menu-toggle').focus();
  }
}

function toggleSidebar() {
  setSidebarOpen(!$('app-view').classList.contains('sidebar-open'));
}

// ---------------------------------------------------------------------------
// Chat list

async function refreshChats() {
  if (!session.token) return;
  const params = new URLSearchParams({ limit: '100' });
  if (app.showArchived) params.set('archived', 'true');
  if (app.query) params.set('q', app.query);
  const seq = ++app.listSeq;
  const chats = await api('GET', `/chats?${params}`, undefined, { quiet: true }).catch(() => null);
  if (!chats || seq !== app.listSeq) return;
  const children = await loadChildren(chats, app.showArchived);
  if (seq !== app.listSeq) return;
  app.chats = chats;
  app.children = children;
  syncOpenChatTitle();
  renderChatList();
}

/**
 * The children (sub-agents) of the listed chats that may have some (a chat
 * with `subagents`), and theirs: `Map(parent id → [Chat])`. Children are not
 * in `GET /chats` itself (API.md "Sub-agents and plan mode"); each parent's
 * come from `?parent_id=`, archived ones with the archived list.
 */
async function loadChildren(chats, archived) {
  const children = new Map();
  let parents = chats.filter((c) => c.subagents);
  for (let depth = 0; depth < 2 && parents.length > 0; depth++) {
    const pages = await Promise.all(parents.map((p) => {
      const params = new URLSearchParams({ limit: '100', parent_id: p.id });
      if (archived) params.set('archived', 'true');
      return api('GET', `/chats?${params}`, undefined, { quiet: true }).catch(() => []);
    }));
    const next = [];
    parents.forEach((p, i) => {
      if (pages[i].length > 0) children.set(p.id, pages[i]);
      next.push(...pages[i].filter((c) => c.subagents));
    });
    parents = next;
  }
  return children;
}

/** Expands or collapses the children of `chatId` in the list. */
function toggleChildren(chatId) {
  if (app.collapsed.has(chatId)) app.collapsed.delete(chatId);
  else app.collapsed.add(chatId);
  renderChatList();
}

/** The list is where title changes (e.g. a generated title) show up. */
function syncOpenChatTitle() {
  const view = app.view;
  const listed = view && view.chat && app.chats.find((c) => c.id === view.chatId);
  if (listed && listed.title !== view.chat.title) {
    view.chat.title = listed.title;
    renderHeader(view);
  }
}

const relativeFormat = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

/**
 * `iso` relative to now: "now", "5 minutes ago", "3 hours ago",
 * "yesterday", a weekday within the week, else the date.
 */
function formatRelative(iso, now = new Date()) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return '';
  const seconds = Math.round((now - date) / 1000);
  if (seconds < 60) return relativeFormat.format(0, 'second');
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return relativeFormat.format(-minutes, 'minute');
  const startOfDay = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
  const days = Math.round((startOfDay(now) - startOfDay(date)) / 86400000);
  if (days === 0) return relativeFormat.format(-Math.floor(minutes / 60), 'hour');
  if (days === 1) return relativeFormat.format(-1, 'day');
  if (days < 7) return date.toLocaleDateString(undefined, { weekday: 'long' });
  const sameYear = date.getFullYear() === now.getFullYear();
  return date.toLocaleDateString(undefined, sameYear ? { day: 'numeric', month: 'short' } : { day: 'numeric', month: 'short', year: 'numeric' });
}

function renderChatList() {
  if (app.renaming) return; // the list is re-rendered when the rename ends
  const list = $('chat-list');
  const openId = app.view && app.view.chatId;
  const existing = new Map([...list.children].filter((el) => el.dataset.chatId).map((el) => [el.dataset.chatId, el]));
  const focused = list.contains(document.activeElement) ? document.activeElement : null;
  const focusedItem = focused && focused.closest('[data-chat-id]');
  const focusedKey = focused && (focused.dataset.testid || (focused.classList.contains('chat-link') ? 'chat-link' : null));
  const items = app.chats.map((chat) => {
    const status = openId === chat.id && app.view.chat ? app.view.chat.status : chat.status;
    const date = formatRelative(chat.updated_at);
    const kids = familyKey(chat.id, openId);
    const key = JSON.stringify([chat.title, status, date, chat.archived, openId === chat.id, chat.last_message_preview, chat.message_count, kids]);
    const old = existing.get(chat.id);
    if (old && old.dataset.key === key) return old;
    const item = chatListItem(chat, status, date, openId === chat.id);
    appendChildList(item, chat.id, openId, 1);
    item.dataset.key = key;
    return item;
  });
  if (items.length === 0) {
    let text = app.showArchived ? 'No archived chats.' : 'No chats yet.';
    if (app.query) text = `No ${app.showArchived ? 'archived ' : ''}chats match “${app.query}”.`;
    items.push(h('li', { class: 'empty', testid: 'chat-list-empty' }, text));
  }
  const same = items.length === list.children.length && items.every((el, i) => list.children[i] === el);
  if (!same) list.replaceChildren(...items);
  // A re-rendered item keeps the keyboard focus where it was; so does a
  // kept item that replaceChildren moved (detaching it drops the focus).
  if (focusedItem && focusedKey && document.activeElement !== focused) {
    const again = list.querySelector(`[data-chat-id="${CSS.escape(focusedItem.dataset.chatId)}"]`);
    const target = again && (focusedKey === 'chat-link' ? again.querySelector('.chat-link') : byTestId(again, focusedKey));
    if (target) target.focus();
  }
}

function chatListItem(chat, status, date, open) {
  const title = chat.title || 'Untitled';
  return h(
    'li',
    { testid: 'chat-item', dataset: { chatId: chat.id }, class: 'chat-item' },
    h(
      'a',
      {
        href: `#/chats/${chat.id}`,
        class: 'chat-link',
        'aria-current': open ? 'page' : null,
        // The newest text and the message count, from the list itself.
        title: chatTooltip(chat),
      },
      h('span', { class: 'chat-title', testid: 'chat-title' }, title),
      h(
        'span',
        { class: 'chat-sub' },
        h('time', { class: 'chat-date', testid: 'chat-date', datetime: chat.updated_at, title: new Date(chat.updated_at).toLocaleString() }, date),
        statusBadge(status, 'status-badge'),
      ),
    ),
    h(
      'span',
      { class: 'chat-actions' },
      h('button', { type: 'button', class: 'btn btn-icon', testid: 'chat-rename', 'aria-label': `Rename chat “${title}”`, title: 'Rename', onclick: () => startRename(chat.id) }, icon('pencil')),
      h('button', { type: 'button', class: 'btn btn-icon btn-danger-quiet', testid: 'chat-delete', 'aria-label': `Delete chat “${title}”`, title: 'Delete', onclick: () => deleteChat(chat.id) }, icon('trash')),
    ),
  );
}

/** What the nested children of `chatId` show, for the list's re-render key. */
function familyKey(chatId, openId) {
  const kids = (app.children && app.children.get(chatId)) || [];
  return [app.collapsed.has(chatId), kids.map((c) => [c.id, c.title, c.status, c.archived, openId === c.id, familyKey(c.id, openId)])];
}

/**
 * Nests the children of `chatId` under its list item `item` (with their
 * status), behind a toggle that expands or collapses them; `depth` 1 or 2.
 */
function appendChildList(item, chatId, openId, depth) {
  const kids = (app.children && app.children.get(chatId)) || [];
  if (kids.length === 0) return;
  const collapsed = app.collapsed.has(chatId);
  const label = `${kids.length} sub-agent${kids.length === 1 ? '' : 's'}`;
  const listId = `children-${chatId}`;
  const toggle = h(
    'button',
    {
      type: 'button',
      class: 'btn btn-quiet children-toggle',
      testid: 'chat-children-toggle',
      'aria-expanded': collapsed ? 'false' : 'true',
      'aria-controls': listId,
      title: collapsed ? `Show ${label}` : `Hide ${label}`,
      onclick: () => toggleChildren(chatId),
    },
    `${collapsed ? '▸' : '▾'} ${label}`,
  );
  const nested = h('ul', { class: 'chat-children', id: listId, testid: 'chat-children', hidden: collapsed });
  for (const child of kids) {
    const status = openId === child.id && app.view.chat ? app.view.chat.status : child.status;
    const row = chatListItem(child, status, formatRelative(child.updated_at), openId === child.id);
    row.classList.add('chat-child');
    row.dataset.depth = String(depth);
    row.dataset.parentId = chatId;
    if (depth < 2) appendChildList(row, child.id, openId, depth + 1);
    nested.appendChild(row);
  }
  item.classList.add('has-children');
  item.append(toggle, nested);
}

function chatTooltip(chat) {
  if (typeof chat.message_count !== 'number') return null;
  const count = `${chat.message_count} message${chat.message_count === 1 ? '' : 's'}`;
  return chat.last_message_preview ? `${chat.last_message_preview}\n(${count})` : count;
}

function statusBadge(status, testid) {
  return h('span', { class: `status-badge status-${status}`, testid }, status);
}

/** Keeps the list's badge of the open chat in step with the stream. */
function updateListStatus(chatId, status) {
  const chat = app.chats.find((c) => c.id === chatId);
  if (chat) chat.status = status;
  const item = $('chat-list').querySelector(`[data-chat-id="${CSS.escape(chatId)}"]`);
  const badge = item && byTestId(item, 'status-badge');
  if (badge) {
    badge.textContent = status;
    badge.className = `status-badge status-${status}`;
  }
}

/** Replaces the item's title with a field: Enter (or leaving it) saves, Escape cancels. */
function startRename(chatId) {
  const chat = app.chats.find((c) => c.id === chatId);
  const item = $('chat-list').querySelector(`[data-chat-id="${CSS.escape(chatId)}"]`);
  if (!chat || !item) return;
  if (app.renaming) return;
  app.renaming = chatId;
  item.dataset.key = ''; // render it afresh when the rename ends
  const input = h('input', {
    type: 'text',
    class: 'rename-input',
    testid: 'chat-rename-input',
    value: chat.title || '',
    maxlength: 200,
    'aria-label': 'Chat title',
  });
  let done = false;
  const finish = async (save) => {
    if (done) return;
    done = true;
    const hadFocus = document.activeElement === input;
    const title = input.value.trim();
    if (save && title && title !== chat.title) {
      input.disabled = true;
      const updated = await attempt(() => api('PATCH', `/chats/${chatId}`, { title }));
      if (updated) {
        Object.assign(chat, updated);
        if (app.view && app.view.chatId === chatId && app.view.chat) {
          app.view.chat.title = updated.title;
          renderHeader(app.view);
        }
      }
    }
    app.renaming = null;
    renderChatList();
    if (hadFocus) {
      const again = $('chat-list').querySelector(`[data-chat-id="${CSS.escape(chatId)}"]`);
      const button = again && byTestId(again, 'chat-rename');
      if (button) button.focus();
    }
    refreshChats();
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.isComposing) {
      e.preventDefault();
      finish(true);
    } else if (e.key === 'Escape') {
      e.preventDefault();
      e.stopPropagation();
      finish(false);
    }
  });
  input.addEventListener('blur', () => finish(true));
  item.classList.add('renaming');
  item.replaceChildren(h('form', { class: 'rename-form', onsubmit: (e) => e.preventDefault() }, input));
  input.focus();
  input.select();
}

/** Deletes a chat after a confirmation; the server's refusal (a busy chat) shows as a toast. */
async function deleteChat(chatId) {
  const chat = app.chats.find((c) => c.id === chatId);
  if (!chat) return;
  const title = chat.title || 'Untitled';
  const ok = await confirmDialog({
    title: 'Delete this chat?',
    message: `“${title}” and all its messages will be deleted for good. Only idle or archived chats can be deleted.`,
    confirm: 'Delete',
  });
  if (!ok) return;
  const deleted = await attempt(() => api('DELETE', `/chats/${chatId}`).then(() => true));
  if (!deleted) return;
  localStorage.removeItem(MODEL_KEY + chatId);
  sessionStorage.removeItem(INTERRUPTED_KEY + chatId);
  const index = app.chats.findIndex((c) => c.id === chatId);
  app.chats = app.chats.filter((c) => c.id !== chatId);
  if (app.view && app.view.chatId === chatId) {
    closeView();
    location.hash = '#/';
  }
  renderChatList();
  // Keep the keyboard where the deleted item was.
  const links = $('chat-list').querySelectorAll('.chat-link');
  const next = links[Math.min(index, links.length - 1)];
  if (next) next.focus();
  else $('chat-search').focus();
  refreshChats();
}

// ---------------------------------------------------------------------------
// Routing: `#/` (new chat form), `#/chats/<id>`, `#/tokens` (the user's
// API tokens), `#/users/<id>/tokens` (another user's, for admins) and
// `#/admin` (users, their usage and limits).

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
  if (app.view && app.view.chatId === chatId && chatId) return;
  closeView();
  const page = chatId ? null : pageOf(location.hash);
  for (const link of document.querySelectorAll('.account-nav a')) {
    if (page && link.getAttribute('href') === location.hash) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (chatId) openChat(chatId);
  else if (page) openPage(page);
  else openNewChat();
  renderChatList();
}

/** The page (`{page, open}`) of an account or admin route, or null. */
function pageOf(hash) {
  for (const [pattern, page] of PAGE_ROUTES) {
    const m = hash.match(pattern);
    if (m) return page(m);
  }
  return null;
}

/** Opens an account or admin page (tokens.js, admin.js) in the main column. */
function openPage(page) {
  clearToast();
  announce('');
  const view = { chatId: null, page: page.page, closed: false };
  app.view = view;
  page.open($('main'), () => view.closed);
}

function closeView() {
  const view = app.view;
  app.view = null;
  if (!view) return;
  view.closed = true;
  clearTimeout(view.reconnectTimer);
  if (view.previewFrame) cancelAnimationFrame(view.previewFrame);
  if (view.conn) view.conn.ws.close(1000, 'leaving');
}

// ---------------------------------------------------------------------------
// Models: GET /chats/models once per sign-in; the last pick of each chat is
// remembered in localStorage.

function loadModels() {
  if (!app.models) {
    app.models = api('GET', '/chats/models', undefined, { quiet: true }).then(
      (models) => {
        app.modelsResolved = models;
        return models;
      },
      () => {
        app.models = null; // try again next time
        return [];
      },
    );
  }
  return app.models;
}

function modelLabel(m) {
  return (m.display_name || m.model) + (m.is_default ? ' (default)' : '');
}

/**
 * Fills a model `select`: "Server default" for a new chat; for a chat,
 * its remembered pick or else the model it last used.
 */
async function fillModelSelect(select, chat) {
  const models = await loadModels();
  const options = models.map((m) => h('option', { value: m.id }, modelLabel(m)));
  if (!chat) {
    select.replaceChildren(h('option', { value: '' }, 'Server default'), ...options);
    return;
  }
  const known = (id) => id && models.some((m) => m.id === id);
  const remembered = localStorage.getItem(MODEL_KEY + chat.id);
  const current = known(remembered) ? remembered : chat.last_model_config_id;
  if (known(current)) {
    select.replaceChildren(...options);
    select.value = current;
  } else {
    // The chat's model is not offered (disabled or removed): leave it to the server.
    select.replaceChildren(h('option', { value: '' }, 'Current model'), ...options);
    select.value = '';
  }
}

function modelName(id, models) {
  const m = id && models && models.find((x) => x.id === id);
  return m ? m.display_name || m.model : null;
}

// ---------------------------------------------------------------------------
// New chat

function openNewChat() {
  app.view = { chatId: null, closed: false };
  const tools = h('textarea', {
    id: 'new-chat-tools',
    testid: 'new-chat-tools',
    rows: 4,
    spellcheck: false,
    placeholder: '[{"name": "pick_color", "description": "...", "input_schema": {"type": "object"}}]',
    'aria-describedby': 'new-chat-tools-help',
  });
  const toolsError = h('p', { class: 'field-error', id: 'new-chat-tools-error', testid: 'new-chat-tools-error', role: 'alert', hidden: true });
  const systemPrompt = h('textarea', {
    id: 'new-chat-system-prompt',
    testid: 'new-chat-system-prompt',
    rows: 3,
    maxlength: 10000,
    placeholder: 'e.g. You are a concise assistant. Answer in English.',
    'aria-describedby': 'new-chat-system-prompt-help',
  });
  const advanced = h(
    'details',
    { class: 'advanced', testid: 'advanced' },
    h('summary', { testid: 'advanced-toggle' }, 'Advanced'),
    h(
      'div',
      { class: 'advanced-fields' },
      h('label', { for: 'new-chat-system-prompt' }, 'System prompt (optional)'),
      systemPrompt,
      h('p', { class: 'hint', id: 'new-chat-system-prompt-help' }, 'Instructions the model reads before the conversation; at most 10,000 characters.'),
      h('label', { for: 'new-chat-tools' }, 'Dynamic tools (optional JSON array)'),
      tools,
      h('p', { class: 'hint', id: 'new-chat-tools-help' }, 'Tools the model may call; you answer each call in the chat.'),
      toolsError,
      h(
        'label',
        { class: 'toggle', for: 'new-chat-plan-mode' },
        h('input', { type: 'checkbox', id: 'new-chat-plan-mode', testid: 'new-chat-plan-mode' }),
        ' Plan mode: research with read-only tools and propose a plan',
      ),
      h(
        'label',
        { class: 'toggle', for: 'new-chat-subagents' },
        h('input', { type: 'checkbox', id: 'new-chat-subagents', testid: 'new-chat-subagents' }),
        ' Sub-agents: the model may start child chats that work on parts of the task',
      ),
    ),
  );
  const composer = buildComposer({ newChat: true });
  const form = h(
    'section',
    { class: 'new-chat', 'aria-labelledby': 'new-chat-heading' },
    h('h1', { class: 'new-chat-heading', id: 'new-chat-heading' }, 'New chat'),
    h('p', { class: 'hint' }, 'Ask anything. Pick a model below; the Advanced section has a system prompt and dynamic tools.'),
    composer.root,
    advanced,
  );
  $('main').replaceChildren(form);
  composer.input.focus();
  fillModelSelect(composer.model, null);
  announce('');
}

/**
 * Parses the dynamic tools textarea: `null` when empty, an array of
 * `{name, description, input_schema}`; throws an Error describing the
 * first problem.
 */
function parseTools(text) {
  if (!text.trim()) return null;
  let tools;
  try {
    tools = JSON.parse(text);
  } catch (err) {
    throw new Error(`Tools are not valid JSON: ${err.message}`);
  }
  if (!Array.isArray(tools)) throw new Error('Tools must be a JSON array.');
  const names = new Set();
  tools.forEach((tool, i) => {
    const where = `Tool ${i + 1}`;
    if (!tool || typeof tool !== 'object' || Array.isArray(tool)) throw new Error(`${where} must be an object.`);
    if (typeof tool.name !== 'string' || !tool.name) throw new Error(`${where} needs a non-empty "name".`);
    if (names.has(tool.name)) throw new Error(`${where}: the name "${tool.name}" is used twice.`);
    names.add(tool.name);
    if (tool.description !== undefined && typeof tool.description !== 'string') {
      throw new Error(`${where}: "description" must be a string.`);
    }
    const schema = tool.input_schema;
    if (!schema || typeof schema !== 'object' || Array.isArray(schema)) {
      throw new Error(`${where} needs an "input_schema" object.`);
    }
  });
  // `read_only: true` offers the tool in plan mode too.
  return tools.map((t) => ({
    name: t.name,
    description: t.description || '',
    input_schema: t.input_schema,
    ...(t.read_only === true ? { read_only: true } : {}),
  }));
}

async function createChat(content, model) {
  const toolsField = $('new-chat-tools');
  const toolsError = $('new-chat-tools-error');
  let tools;
  try {
    tools = parseTools(toolsField.value);
    toolsError.hidden = true;
    toolsField.removeAttribute('aria-invalid');
  } catch (err) {
    toolsError.textContent = err.message;
    toolsError.hidden = false;
    toolsField.setAttribute('aria-invalid', 'true');
    byTestId(document, 'advanced').open = true;
    toolsField.focus();
    return false;
  }
  const body = { content };
  if (model) body.model_config_id = model;
  if (tools) body.dynamic_tools = tools;
  if ($('new-chat-plan-mode').checked) body.plan_mode = 'plan';
  if ($('new-chat-subagents').checked) body.subagents = true;
  const systemPrompt = $('new-chat-system-prompt').value;
  if (systemPrompt.trim()) body.system_prompt = systemPrompt;
  const chat = await sendRequest(() => api('POST', '/chats', body, { quiet: true }));
  if (!chat) return false;
  if (model) localStorage.setItem(MODEL_KEY + chat.id, model);
  if (app.showArchived) {
    app.showArchived = false;
    $('show-archived').checked = false;
  }
  app.chats = [chat, ...app.chats.filter((c) => c.id !== chat.id)];
  location.hash = `#/chats/${chat.id}`;
  refreshChats();
  return true;
}

// ---------------------------------------------------------------------------
// Composer (shared by the new-chat form and the chat view)

function buildComposer({ newChat }) {
  const modelId = newChat ? 'new-chat-model' : 'composer-model';
  const input = h('textarea', {
    id: 'composer-input',
    testid: 'composer-input',
    rows: 2,
    placeholder: newChat ? 'Write the first message…' : 'Write a message…',
    'aria-label': 'Message',
    'aria-describedby': 'composer-hint',
  });
  const model = h('select', { id: modelId, testid: modelId, class: 'model-select' });
  const pastes = h('div', { class: 'pasted-blocks', testid: 'pasted-blocks' });
  const attachments = h('ul', { class: 'attachments', testid: 'attachments', 'aria-label': 'Attached files', hidden: true });
  const fileInput = h('input', { type: 'file', multiple: true, class: 'sr-only', testid: 'file-input', tabindex: '-1', 'aria-hidden': 'true', 'aria-label': 'Attach files' });
  const attach = h('button', {
    type: 'button',
    class: 'btn btn-quiet',
    testid: 'attach-file',
    title: `Attach files (at most ${MAX_FILE_MB} MiB each; images are shown to the model)`,
  }, 'Attach');
  const sendQueue = h(
    'button',
    { type: 'submit', class: 'btn btn-primary', testid: 'send-queue' },
    newChat ? 'Start chat' : 'Send',
  );
  const sendInterrupt = newChat
    ? null
    : h('button', {
        type: 'button',
        class: 'btn',
        testid: 'send-interrupt',
        title: 'Stop the running reply and send this now',
        hidden: true,
      }, 'Send now');
  const sendSteer = newChat
    ? null
    : h('button', {
        type: 'button',
        class: 'btn',
        testid: 'send-steer',
        title: 'Tell the running reply this without stopping it: the model reads it at its next step',
        hidden: true,
      }, 'Steer');
  const stop = newChat
    ? null
    : h('button', {
        type: 'button',
        class: 'btn btn-stop',
        testid: 'interrupt',
        disabled: true,
        hidden: true,
        'aria-label': 'Stop the reply',
      }, icon('stop'), h('span', { class: 'stop-label' }, 'Stop'));
  // Why the server refused the last send (a limit: 429, 413); the typed
  // message stays in the textarea.
  const refusal = h('p', { class: 'composer-refusal', testid: 'send-refused', role: 'alert', hidden: true });
  const root = h(
    'form',
    { class: 'composer', 'aria-label': 'Composer', testid: 'composer' },
    refusal,
    pastes,
    attachments,
    fileInput,
    input,
    h(
      'div',
      { class: 'composer-bar' },
      h('span', { class: 'model-field' }, h('label', { for: modelId }, 'Model'), model),
      h('span', { class: 'composer-hint', id: 'composer-hint' }, 'Enter sends · Shift+Enter: new line'),
      h('span', { class: 'composer-actions' }, attach, stop, sendSteer, sendInterrupt, sendQueue),
    ),
  );
  const composer = { root, input, model, sendQueue, sendInterrupt, sendSteer, stop, pastes, pasted: [], sending: false, attachments, files: [], refusal };

  /** The message: pasted blocks (in order), then what was typed. */
  const messageText = () => [...composer.pasted.map((p) => p.text), input.value].filter((t) => t.trim()).join('\n\n');
  const submit = async (behavior) => {
    if (composer.sending) return;
    const text = messageText();
    if (composer.files.some((f) => f.status === 'uploading')) {
      toast('Wait for the files to finish uploading.');
      return;
    }
    const files = composer.files.filter((f) => f.status === 'ready');
    if (!text.trim() && !files.length) {
      input.focus();
      return;
    }
    composer.sending = true;
    setBusy(root, true);
    refusal.hidden = true;
    const typed = input.value;
    const pasted = composer.pasted;
    const content = text.trim() ? [{ type: 'text', text }] : [];
    for (const f of files) content.push({ type: 'file', file_id: f.fileId });
    const ok = newChat ? await createChat(content, model.value) : await sendMessage(content, behavior, model.value);
    composer.sending = false;
    setBusy(root, false);
    if (app.view && app.view.chat) renderHeader(app.view);
    if (ok) {
      // Drop what was sent; keep what was typed or pasted meanwhile.
      if (input.value.startsWith(typed)) input.value = input.value.slice(typed.length).trimStart();
      composer.pasted = composer.pasted.filter((p) => !pasted.includes(p));
      renderPastes(composer);
      for (const f of files) dropAttachment(composer, f);
      autoGrow(input);
    }
  };
  composer.submit = submit;
  attach.addEventListener('click', () => fileInput.click());
  fileInput.addEventListener('change', () => {
    addAttachments(composer, [...fileInput.files]);
    fileInput.value = '';
  });
  // Drag and drop: files dropped anywhere on the composer are attached.
  root.addEventListener('dragover', (e) => {
    if (!e.dataTransfer || ![...e.dataTransfer.types].includes('Files')) return;
    e.preventDefault();
    root.classList.add('dropping');
  });
  root.addEventListener('dragleave', () => root.classList.remove('dropping'));
  root.addEventListener('drop', (e) => {
    root.classList.remove('dropping');
    const dropped = e.dataTransfer ? [...e.dataTransfer.files] : [];
    if (!dropped.length) return;
    e.preventDefault();
    addAttachments(composer, dropped);
  });
  root.addEventListener('submit', (e) => {
    e.preventDefault();
    submit('queue');
  });
  if (sendInterrupt) sendInterrupt.addEventListener('click', () => submit('interrupt'));
  if (sendSteer) sendSteer.addEventListener('click', () => submit('steer'));
  if (stop) stop.addEventListener('click', () => app.view && app.view.chat && interruptChat(app.view));
  input.addEventListener('keydown', (e) => {
    // Enter sends; Shift+Enter (or Alt+Enter) is a new line; an Enter that
    // ends an IME composition is the IME's.
    if (e.key !== 'Enter' || e.isComposing || e.keyCode === 229) return;
    if (e.shiftKey || e.altKey) return;
    e.preventDefault();
    submit('queue');
  });
  input.addEventListener('input', () => autoGrow(input));
  input.addEventListener('paste', (e) => {
    const text = e.clipboardData && e.clipboardData.getData('text/plain');
    if (!text || !isLong(text)) return;
    e.preventDefault();
    composer.pasted.push({ id: crypto.randomUUID(), text, open: false });
    renderPastes(composer);
  });
  model.addEventListener('change', () => {
    const view = app.view;
    if (!newChat && view && view.chatId) {
      if (model.value) localStorage.setItem(MODEL_KEY + view.chatId, model.value);
      else localStorage.removeItem(MODEL_KEY + view.chatId);
    }
  });
  return composer;
}

/** Largest upload, in MiB (API.md "Files"). */
const MAX_FILE_MB = 10;
/** Image types the model sees as images (the rest is text or a placeholder). */
const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];

/**
 * Attaches `files` to the composer: each is uploaded at once
 * (`POST /files`); its chip shows the name, a preview for images, the
 * upload's progress, and a remove button. A failed upload is dropped
 * with a toast naming the file.
 */
function addAttachments(composer, files) {
  for (const file of files) {
    const item = { key: crypto.randomUUID(), file, status: 'uploading', fileId: null, previewUrl: null };
    if (file.type.startsWith('image/')) item.previewUrl = URL.createObjectURL(file);
    composer.files.push(item);
    if (file.size > MAX_FILE_MB * 1024 * 1024) {
      toast(`${file.name} is larger than ${MAX_FILE_MB} MiB.`);
      dropAttachment(composer, item);
      continue;
    }
    renderAttachments(composer);
    uploadFile(file).then((uploaded) => {
      if (!composer.files.includes(item)) return;
      item.status = 'ready';
      item.fileId = uploaded.id;
      renderAttachments(composer);
    }).catch((err) => {
      toast(`${file.name}: ${err.message || 'the upload failed'}`);
      dropAttachment(composer, item);
    });
  }
}

function dropAttachment(composer, item) {
  composer.files = composer.files.filter((f) => f !== item);
  if (item.previewUrl) URL.revokeObjectURL(item.previewUrl);
  renderAttachments(composer);
}

/** `POST /files?name=` with the file's bytes; resolves to the File. */
async function uploadFile(file) {
  const init = {
    method: 'POST',
    headers: { Authorization: `Bearer ${session.token}`, 'Content-Type': file.type || 'application/octet-stream' },
    body: file,
  };
  const response = await fetch(`${API}/files?name=${encodeURIComponent(file.name)}`, init);
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}

function renderAttachments(composer) {
  composer.attachments.hidden = !composer.files.length;
  composer.attachments.replaceChildren(...composer.files.map((item) => h(
    'li',
    { class: `attachment attachment-${item.status}`, testid: 'attachment', dataset: { status: item.status, name: item.file.name } },
    item.previewUrl ? h('img', { class: 'attachment-preview', testid: 'attachment-preview', src: item.previewUrl, alt: `Preview of ${item.file.name}` }) : null,
    h('span', { class: 'attachment-name' }, item.file.name),
    h('span', { class: 'attachment-state' }, item.status === 'uploading' ? 'uploading…' : formatBytes(item.file.size)),
    h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'attachment-remove',
      'aria-label': `Remove ${item.file.name}`,
      onclick: () => dropAttachment(composer, item),
    }, '×'),
  )));
}

function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** Object URLs of downloaded files, by file id (files never change). */
const fileUrls = new Map();

/** Resolves to an object URL of file `id` (fetched once with the token). */
function fileUrl(id) {
  if (!fileUrls.has(id)) {
    const url = fetch(`${API}/files/${id}`, { headers: { Authorization: `Bearer ${session.token}` } })
      .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(`HTTP ${r.status}`))))
      .then((blob) => URL.createObjectURL(blob));
    url.catch(() => fileUrls.delete(id));
    fileUrls.set(id, url);
  }
  return fileUrls.get(id);
}

/** A file part of a message: an image is shown, anything else is a download. */
function renderFilePart(part) {
  const name = part.name || part.file_id;
  if (IMAGE_TYPES.includes(part.media_type)) {
    const img = h('img', { class: 'message-image', testid: 'message-image', alt: name, dataset: { fileId: part.file_id } });
    fileUrl(part.file_id).then((url) => {
      img.src = url;
    }, () => {
      img.alt = `${name} (not available)`;
    });
    return h('figure', { class: 'file-part file-image' }, img, h('figcaption', {}, name));
  }
  const link = h('a', { class: 'file-link', testid: 'message-file', href: '#', download: name, dataset: { fileId: part.file_id } }, `${name} (${part.media_type})`);
  link.addEventListener('click', async (e) => {
    if (link.dataset.ready) return;
    e.preventDefault();
    const url = await attempt(() => fileUrl(part.file_id));
    if (!url) return;
    link.href = url;
    link.dataset.ready = '1';
    link.click();
  });
  return h('div', { class: 'file-part' }, link);
}

/** Grows the textarea with its text, up to the CSS max-height. */
function autoGrow(input) {
  input.style.height = 'auto';
  input.style.height = `${input.scrollHeight + 2}px`;
}

/** The collapsed blocks of long pastes above the composer's textarea. */
function renderPastes(composer) {
  const blocks = composer.pasted.map((paste, i) => {
    const textId = `pasted-text-${paste.id}`;
    const lines = countLines(paste.text);
    const toggle = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'pasted-toggle',
      'aria-expanded': String(paste.open),
      'aria-controls': textId,
      onclick: () => {
        paste.open = !paste.open;
        renderPastes(composer);
      },
    }, paste.open ? 'Collapse' : 'Show all');
    const edit = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'pasted-edit',
      title: 'Move the pasted text into the message field',
      onclick: () => {
        composer.pasted = composer.pasted.filter((p) => p !== paste);
        const input = composer.input;
        input.value = input.value ? `${paste.text}\n\n${input.value}` : paste.text;
        renderPastes(composer);
        autoGrow(input);
        input.focus();
      },
    }, 'Edit as text');
    const remove = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'pasted-remove',
      'aria-label': `Remove pasted text ${i + 1}`,
      onclick: () => {
        composer.pasted = composer.pasted.filter((p) => p !== paste);
        renderPastes(composer);
        composer.input.focus();
      },
    }, 'Remove');
    return h(
      'div',
      { class: `pasted-block${paste.open ? '' : ' collapsed'}`, testid: 'pasted-block', role: 'group', 'aria-label': `Pasted text ${i + 1}` },
      h(
        'div',
        { class: 'pasted-head' },
        h('strong', {}, 'Pasted text'),
        h('span', { class: 'pasted-size', testid: 'pasted-size' }, `${numberFormat.format(lines)} lines · ${numberFormat.format(paste.text.length)} characters`),
        h('span', { class: 'pasted-actions' }, toggle, edit, remove),
      ),
      h('pre', { class: 'pasted-text', id: textId, testid: 'pasted-text' }, paste.text),
    );
  });
  composer.pastes.replaceChildren(...blocks);
}

function setBusy(form, busy) {
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

// ---------------------------------------------------------------------------
// Chat view: skeleton, then live updates

async function openChat(chatId) {
  clearToast(); // A failure shown for the previous view is stale here.
  announce('');
  const view = chatView(chatId);
  app.view = view;
  view.dom = buildChatDom(view);
  $('main').replaceChildren(view.dom.root);
  const chat = await attempt(() => api('GET', `/chats/${chatId}`));
  if (view.closed) return;
  if (!chat) {
    view.dom.title.textContent = 'Chat not available';
    view.dom.status.textContent = 'unavailable';
    view.dom.connection.textContent = '';
    view.dom.archive.replaceChildren();
    const composer = view.dom.composer;
    composer.input.disabled = composer.sendQueue.disabled = composer.sendInterrupt.disabled = true;
    composer.model.disabled = true;
    return;
  }
  view.chat = chat;
  view.historyVersion = chat.history_version;
  view.error = chat.status === 'error' ? chat.last_error : null;
  view.announced = chat.status;
  // The first and last messages; the stream then sends what is newer.
  const page = await attempt(() => api('GET', `/chats/${chatId}/messages?window=true`));
  if (view.closed) return;
  if (page) {
    for (const m of page.messages) view.messages.set(m.id, m);
    view.queue = page.queued_messages || [];
    const w = page.window;
    if (w && w.omitted > 0) view.gap = { after: w.head_last_id, before: w.tail_first_id, omitted: w.omitted };
  }
  render(view);
  fillModelSelect(view.dom.composer.model, chat);
  loadModels().then(() => {
    if (!view.closed) rerenderMessages(view);
  });
  connect(view);
}

function buildChatDom(view) {
  const title = h('h1', { class: 'chat-heading', id: 'chat-heading' }, 'Loading…');
  const status = h('span', { class: 'status-badge', testid: 'chat-status' }, '…');
  const connection = h('span', { class: 'connection', testid: 'connection', role: 'status', 'aria-label': 'Connection' }, 'reconnecting');
  const usage = h('span', { class: 'usage', testid: 'usage', title: 'Token usage: input / output / total' });
  const context = h(
    'span',
    { class: 'context-meter', testid: 'context-meter', role: 'meter', 'aria-label': 'Context used', 'aria-valuemin': '0', 'aria-valuemax': '100' },
    h('span', { class: 'context-bar' }, h('span', { class: 'context-fill' })),
    h('span', { class: 'context-label', testid: 'context-label' }, ''),
  );
  const contextTools = h('span', { class: 'context-tools' });
  const planInput = h('input', { type: 'checkbox', testid: 'plan-mode-toggle', id: 'plan-mode-toggle' });
  const plan = h(
    'label',
    { class: 'toggle plan-mode', for: 'plan-mode-toggle', title: 'Plan mode: the model researches with read-only tools and proposes a plan; it takes effect at the next model call' },
    planInput,
    ' Plan mode',
  );
  planInput.addEventListener('change', () => setPlanMode(view, planInput.checked));
  const archive = h('span', { class: 'archive-slot' });
  const banners = h('div', { class: 'banners' });
  const messages = h('div', { class: 'messages', testid: 'messages', role: 'log', 'aria-label': 'Messages' });
  const previewSlot = h('div', { class: 'preview-slot' });
  const scroller = h('div', { class: 'scroller', tabindex: '-1' }, h('div', { class: 'thread' }, messages, previewSlot));
  // Follow the conversation while the reader is at its end: through new
  // messages, the growing preview, and the composer growing or shrinking.
  scroller.addEventListener('scroll', () => {
    view.atBottom = isScrolledToBottom(scroller);
  });
  new ResizeObserver(() => {
    if (view.atBottom) scrollToBottom(view);
  }).observe(scroller);
  const action = h('div', { class: 'action-slot' });
  const queue = h('section', { class: 'queue', testid: 'queue', 'aria-label': 'Queued messages', hidden: true });
  const composer = buildComposer({ newChat: false });
  const root = h(
    'section',
    { class: 'chat', testid: 'chat-view', dataset: { chatId: view.chatId }, 'aria-labelledby': 'chat-heading' },
    h(
      'header',
      { class: 'chat-header' },
      h('div', { class: 'chat-header-main' }, title, status, connection),
      h('div', { class: 'chat-header-tools' }, context, contextTools, usage, plan, archive),
    ),
    banners,
    scroller,
    h('div', { class: 'dock' }, action, queue, composer.root),
  );
  return { root, title, status, connection, usage, context, contextTools, planInput, archive, banners, messages, previewSlot, previewEl: null, previewKey: null, scroller, action, queue, composer, actionKey: null };
}

/** Re-renders every part of the chat view from `view` (the preview at the next frame). */
function render(view) {
  if (view.closed || !view.chat) return;
  const stick = view.atBottom;
  renderHeader(view);
  renderBanners(view);
  renderMessages(view);
  renderPreview(view);
  renderActionRequired(view);
  renderQueue(view);
  renderUsage(view);
  renderContext(view);
  if (stick) scrollToBottom(view);
}

function isScrolledToBottom(el) {
  return el.scrollHeight - el.scrollTop - el.clientHeight < 40;
}

function scrollToBottom(view) {
  view.dom.scroller.scrollTop = view.dom.scroller.scrollHeight;
}

function renderHeader(view) {
  const { chat, dom } = view;
  dom.title.textContent = chat.title || 'Untitled';
  dom.status.textContent = chat.status;
  dom.status.className = `status-badge status-${chat.status}`;
  const archiveButton = chat.archived
    ? h('button', { type: 'button', class: 'btn', testid: 'unarchive', onclick: () => setArchived(view, false) }, 'Unarchive')
    : h('button', { type: 'button', class: 'btn btn-quiet', testid: 'archive', onclick: () => setArchived(view, true) }, 'Archive');
  if (dom.archive.firstChild?.dataset.testid !== archiveButton.dataset.testid) {
    dom.archive.replaceChildren(archiveButton);
  }
  if (!dom.planInput.dataset.pending) dom.planInput.checked = chat.plan_mode === 'plan';
  dom.planInput.disabled = chat.archived;
  const composer = dom.composer;
  const working = chat.status === 'running' || chat.status === 'interrupting';
  const busy = chat.status !== 'waiting' && chat.status !== 'error';
  composer.input.disabled = chat.archived;
  composer.model.disabled = chat.archived;
  composer.input.placeholder = chat.archived
    ? 'This chat is archived.'
    : busy
      ? 'Write a message… (it waits in the queue until the reply is done)'
      : 'Write a message…';
  composer.sendQueue.textContent = busy ? 'Queue' : 'Send';
  composer.sendInterrupt.hidden = !busy || chat.archived;
  // Steering is for a running reply (elsewhere the server queues it).
  composer.sendSteer.hidden = chat.status !== 'running' || chat.archived;
  // The stop button: shown while the agent works (running, retrying,
  // interrupting), usable while it runs.
  composer.stop.hidden = !working || chat.archived;
  const stopping = chat.status === 'interrupting';
  composer.stop.querySelector('.stop-label').textContent = stopping ? 'Stopping…' : 'Stop';
  composer.stop.setAttribute('aria-label', stopping ? 'Stopping the reply' : 'Stop the reply');
  if (!composer.sending) {
    composer.sendQueue.disabled = chat.archived;
    composer.sendInterrupt.disabled = chat.archived;
    composer.sendSteer.disabled = chat.archived;
    composer.stop.disabled = chat.status !== 'running' || chat.archived;
  }
}

function setConnection(view, live) {
  view.dom.connection.textContent = live ? 'live' : 'reconnecting';
  view.dom.connection.classList.toggle('live', live);
}

// --- messages --------------------------------------------------------------

/** Forces every message to render again (e.g. once the model names are known). */
function rerenderMessages(view) {
  for (const el of view.dom.messages.children) el.dataset.key = '';
  render(view);
}

function finishReasonOf(view, message) {
  if (message.role !== 'assistant') return null;
  if (message.finish_reason) return message.finish_reason;
  // The server does not say (older servers): the UI knows when it watched
  // the answer being interrupted.
  return view.interruptedIds.has(message.id) ? 'interrupted' : null;
}

function renderMessages(view) {
  const container = view.dom.messages;
  const existing = new Map();
  for (const el of container.children) if (el.dataset.messageId) existing.set(Number(el.dataset.messageId), el);
  const ids = [...view.messages.keys()].sort((a, b) => a - b);
  const gap = view.gap && view.messages.has(view.gap.after) ? gapControl(view) : null;
  const editable = !view.chat?.archived;
  let previous = null;
  for (const id of ids) {
    const message = view.messages.get(id);
    let el = existing.get(id);
    existing.delete(id);
    // Archiving changes whether user messages can be edited; an interrupt
    // seen by the UI adds a mark.
    const key = `${message.revision}:${editable}:${finishReasonOf(view, message)}`;
    if ((!el || el.dataset.key !== key) && view.editing !== id) {
      const fresh = renderMessage(view, message);
      fresh.dataset.key = key;
      if (el) {
        // Keep a long text expanded when the message renders again.
        const wasOpen = byTestId(el, 'message-expand')?.getAttribute('aria-expanded') === 'true';
        if (wasOpen) setCollapsed(fresh, false);
        el.replaceWith(fresh);
      }
      el = fresh;
    }
    const expectedPosition = previous ? previous.nextSibling : container.firstChild;
    if (el !== expectedPosition) container.insertBefore(el, expectedPosition);
    previous = el;
    if (gap && id === view.gap.after) {
      if (gap !== previous.nextSibling) container.insertBefore(gap, previous.nextSibling);
      previous = gap;
    }
  }
  for (const el of existing.values()) el.remove();
  for (const el of [...container.querySelectorAll(':scope > .load-earlier')]) if (el !== gap) el.remove();
}

/** The "load earlier" control between the loaded head and tail of a long chat. */
function gapControl(view) {
  const { omitted } = view.gap;
  const label = view.loadingEarlier ? 'Loading…' : `Load earlier messages (${omitted} more)`;
  let el = view.dom.gapEl;
  if (!el) {
    const button = h('button', { type: 'button', class: 'btn', testid: 'load-earlier', onclick: () => loadEarlier(view) });
    el = h('div', { class: 'load-earlier', testid: 'load-earlier-gap', role: 'separator' }, button);
    view.dom.gapEl = el;
  }
  const button = el.firstChild;
  button.textContent = label;
  button.disabled = view.loadingEarlier;
  return el;
}

/**
 * Loads the newest page of the omitted middle (before the loaded tail) and
 * inserts it in place; the control stays above it until the gap is closed.
 */
async function loadEarlier(view) {
  const gap = view.gap;
  if (!gap || view.loadingEarlier) return;
  view.loadingEarlier = true;
  render(view);
  const path = `/chats/${view.chatId}/messages?before_id=${gap.before}&limit=${LOAD_EARLIER_LIMIT}`;
  const page = await attempt(() => api('GET', path));
  view.loadingEarlier = false;
  if (view.closed || view.gap !== gap) return;
  if (page) {
    const fresh = page.messages.filter((m) => m.id > gap.after);
    for (const m of fresh) {
      const known = view.messages.get(m.id);
      if (!known || known.revision < m.revision) view.messages.set(m.id, m);
    }
    if (fresh.length < page.messages.length || !page.has_more || fresh.length === 0) {
      view.gap = null;
    } else {
      view.gap = { after: gap.after, before: fresh[0].id, omitted: Math.max(0, gap.omitted - fresh.length) };
    }
    announce(`${fresh.length} earlier message${fresh.length === 1 ? '' : 's'} loaded`);
  }
  render(view);
}

function textOf(parts) {
  return parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
}

/** The name of the visible tool call a compaction leaves. */
const COMPACTION_TOOL = 'chatd_compact';

/**
 * A compaction's record (its visible `chatd_compact` call and result) as
 * one collapsed "Context compacted" entry that opens to the summary, and a
 * clear-context boundary as a divider; `null` for any other message.
 */
function renderContextRecord(message) {
  const dataset = { role: message.role, messageId: String(message.id), revision: String(message.revision) };
  const parts = message.content;
  if (parts.length && parts.every((p) => p.type === 'tool-call' && p.tool_name === COMPACTION_TOOL)) {
    // The result below says it all.
    return h('div', { class: 'compaction-call', hidden: true, dataset });
  }
  const result = parts.find((p) => p.type === 'tool-result' && p.tool_name === COMPACTION_TOOL);
  if (result) {
    const r = result.result || {};
    if (result.is_error) {
      return h('div', { class: 'compaction compaction-none', testid: 'compaction', dataset }, `Context not compacted: ${r.error || 'failed'}`);
    }
    const n = Number(r.summarized_messages) || 0;
    return h(
      'details',
      { class: 'compaction', testid: 'compaction', dataset },
      h('summary', { testid: 'compaction-summary' }, `Context compacted: ${n} message${n === 1 ? '' : 's'} summarised`,
        h('span', { class: 'compaction-tokens' }, ` (~${numberFormat.format(r.tokens_before || 0)} → ~${numberFormat.format(r.tokens_after || 0)} tokens)`)),
      h('div', { class: 'compaction-text', testid: 'compaction-text' }, r.summary || ''),
    );
  }
  if (message.role === 'system' && parts.some((p) => p.type === 'context-cleared')) {
    return h('div', { class: 'context-cleared', testid: 'context-cleared', role: 'separator', dataset }, h('span', {}, 'Context cleared: the model sees nothing above this line'));
  }
  return null;
}

function renderMessage(view, message) {
  const record = renderContextRecord(message);
  if (record) return record;
  const text = textOf(message.content);
  const canEdit = message.role === 'user' && !view.chat.archived;
  const models = app.modelsResolved;
  const model = message.role === 'assistant' ? modelName(message.model_config_id, models) : null;
  const header = h(
    'header',
    { class: 'message-meta' },
    h('span', { class: 'role' }, roleLabel(message.role)),
    model ? h('span', { class: 'message-model', testid: 'message-model' }, model) : null,
    h('time', { datetime: message.created_at, title: new Date(message.created_at).toLocaleString() }, formatTime(message.created_at)),
    message.usage ? h('span', { class: 'message-usage' }, `${message.usage.total_tokens} tokens`) : null,
    canEdit
      ? h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'edit-message', 'aria-label': 'Edit message', onclick: () => startEdit(view, message.id) }, 'Edit')
      : null,
  );
  let body;
  if (message.role === 'assistant') {
    body = h('div', { class: 'message-text markdown', testid: 'message-text' });
    renderMarkdownInto(body, text);
  } else {
    body = h('div', { class: 'message-text plain', testid: 'message-text' }, text);
  }
  const reason = finishReasonOf(view, message);
  const mark = reason && FINISH_MARKS[reason]
    ? h('p', { class: `finish-mark finish-${reason}`, testid: 'finish-mark', dataset: { finishReason: reason } }, FINISH_MARKS[reason])
    : null;
  const article = h(
    'article',
    {
      class: `message message-${message.role}`,
      testid: 'message',
      dataset: { role: message.role, messageId: String(message.id), revision: String(message.revision) },
    },
    header,
    message.content.filter((p) => p.type === 'reasoning').map(renderReasoning),
    message.role === 'user' && isLong(text) ? collapsible(body, text) : body,
    message.content.filter((p) => p.type !== 'text' && p.type !== 'reasoning').map(renderPart),
    mark,
  );
  return article;
}

/** A long text, collapsed to its first lines, with "Show all". */
function collapsible(body, text) {
  const id = `text-${crypto.randomUUID()}`;
  body.id = id;
  const toggle = h('button', {
    type: 'button',
    class: 'btn btn-small btn-quiet expand',
    testid: 'message-expand',
    'aria-controls': id,
    'aria-expanded': 'false',
  }, 'Show all');
  const wrap = h(
    'div',
    { class: 'collapsible collapsed', testid: 'collapsible' },
    body,
    h('div', { class: 'collapsible-bar' }, h('span', { class: 'collapsible-size' }, `${numberFormat.format(countLines(text))} lines · ${numberFormat.format(text.length)} characters`), toggle),
  );
  toggle.addEventListener('click', () => setCollapsed(wrap, !wrap.classList.contains('collapsed')));
  return wrap;
}

function setCollapsed(root, collapsed) {
  const wrap = root.classList.contains('collapsible') ? root : root.querySelector('.collapsible');
  if (!wrap) return;
  wrap.classList.toggle('collapsed', collapsed);
  const toggle = byTestId(wrap, 'message-expand');
  toggle.setAttribute('aria-expanded', String(!collapsed));
  toggle.textContent = collapsed ? 'Show all' : 'Show less';
}

function roleLabel(role) {
  return { user: 'You', assistant: 'Assistant', tool: 'Tool', system: 'System' }[role] || role;
}

function renderReasoning(part) {
  return h('details', { class: 'reasoning' }, h('summary', {}, 'Reasoning'), h('div', { class: 'reasoning-text' }, part.text));
}

/** Tool calls, tool results and files. */
function renderPart(part) {
  switch (part.type) {
    case 'tool-call':
      return h(
        'div',
        { class: 'tool-call' },
        h('div', { class: 'tool-head' }, 'Tool call ', h('code', {}, part.tool_name), h('span', { class: 'tool-id' }, part.tool_call_id)),
        h('pre', { class: 'json' }, prettyJsonString(part.args ?? part.args_delta ?? '')),
      );
    case 'tool-result':
      return h(
        'div',
        { class: `tool-result${part.is_error ? ' is-error' : ''}` },
        h('div', { class: 'tool-head' }, part.is_error ? 'Tool error ' : 'Tool result ', h('code', {}, part.tool_name), h('span', { class: 'tool-id' }, part.tool_call_id)),
        h('pre', { class: 'json' }, JSON.stringify(part.result, null, 2)),
      );
    case 'tool-approval':
      return h(
        'div',
        { class: 'tool-approval', testid: 'tool-approval' },
        h('div', { class: 'tool-head' }, part.approved ? 'Approved ' : 'Denied ', h('code', {}, part.tool_name), h('span', { class: 'tool-id' }, part.tool_call_id)),
        part.reason ? h('p', { class: 'approval-reason' }, part.reason) : null,
      );
    case 'file':
      return renderFilePart(part);
    default:
      return h('pre', { class: 'json' }, JSON.stringify(part, null, 2));
  }
}

/** Pretty-prints a JSON string; returns it unchanged when it does not parse. */
function prettyJsonString(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

// --- edit ------------------------------------------------------------------

function startEdit(view, id) {
  if (view.editing !== null) cancelEdit(view);
  const message = view.messages.get(id);
  const el = view.dom.messages.querySelector(`[data-message-id="${id}"]`);
  if (!message || !el) return;
  view.editing = id;
  const original = textOf(message.content);
  const input = h('textarea', { testid: 'edit-input', rows: 3, 'aria-label': 'Edit message', value: original });
  const save = h('button', { type: 'button', class: 'btn btn-primary btn-small', testid: 'edit-save', onclick: () => saveEdit(view, id, input.value) }, 'Save and rerun');
  const cancel = h('button', { type: 'button', class: 'btn btn-small', testid: 'edit-cancel', onclick: () => cancelEdit(view) }, 'Cancel');
  const editor = h('div', { class: 'editor' }, input, h('div', { class: 'editor-actions' }, cancel, save));
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') {
      e.preventDefault();
      cancelEdit(view);
    }
  });
  const body = byTestId(el, 'collapsible') || byTestId(el, 'message-text');
  body.hidden = true;
  el.append(editor);
  autoGrow(input);
  input.focus();
}

function cancelEdit(view) {
  const id = view.editing;
  view.editing = null;
  const el = view.dom.messages.querySelector(`[data-message-id="${id}"]`);
  if (el) el.dataset.key = ''; // force a clean re-render
  render(view);
}

async function saveEdit(view, id, text) {
  if (!text.trim()) return;
  const body = { content: [{ type: 'text', text }] };
  const model = view.dom.composer.model.value;
  if (model) body.model_config_id = model;
  const result = await attempt(() => api('PATCH', `/chats/${view.chatId}/messages/${id}`, body));
  if (!result || view.closed) return;
  applyEditResult(view, result);
  cancelEdit(view);
}

/** Applies a PATCH answer: drop `deleted_message_ids`, upsert the rest. */
function applyEditResult(view, result) {
  const deletedIds = result.deleted_message_ids || [];
  // An edit before the loaded tail deleted the omitted middle too.
  if (view.gap && deletedIds.some((id) => id < view.gap.before)) view.gap = null;
  for (const deleted of deletedIds) view.messages.delete(deleted);
  for (const message of result.messages || []) upsertMessage(view, message);
  if (result.message) upsertMessage(view, result.message);
  view.preview = null;
}

/** Retry after an error: edit the last user message with its own content. */
async function retryTurn(view) {
  const lastUser = [...view.messages.values()].filter((m) => m.role === 'user').sort((a, b) => b.id - a.id)[0];
  if (!lastUser) return;
  const content = lastUser.content
    .filter((p) => p.type === 'text' || p.type === 'file')
    .map((p) => (p.type === 'text' ? { type: 'text', text: p.text } : { type: 'file', file_id: p.file_id }));
  const body = { content };
  const model = view.dom.composer.model.value;
  if (model) body.model_config_id = model;
  const result = await attempt(() => api('PATCH', `/chats/${view.chatId}/messages/${lastUser.id}`, body));
  if (!result || view.closed) return;
  applyEditResult(view, result);
  render(view);
}

// --- live preview ----------------------------------------------------------

/**
 * Shows the in-progress answer. Removing it is immediate (the committed
 * message replaces it in the same render); updating it waits for the next
 * animation frame, so that a fast stream re-renders its Markdown at most
 * once per frame (and a long answer, whose rendering takes longer, less
 * often).
 */
function renderPreview(view) {
  const preview = view.preview;
  if (!preview || preview.parts.length === 0) {
    if (view.previewFrame) cancelAnimationFrame(view.previewFrame);
    view.previewFrame = null;
    view.dom.previewSlot.replaceChildren();
    view.dom.previewEl = null;
    view.dom.previewKey = null;
    return;
  }
  if (view.previewFrame) return;
  const frame = (now) => {
    view.previewFrame = null;
    if (view.closed || !view.preview) return;
    // A long answer costs more to render: leave the page at least three
    // times as long as the last rendering took before the next one.
    if (now - (view.previewDrawnAt || 0) < 3 * (view.previewCost || 0)) {
      view.previewFrame = requestAnimationFrame(frame);
      return;
    }
    const stick = view.atBottom;
    const started = performance.now();
    drawPreview(view);
    view.previewCost = performance.now() - started;
    view.previewDrawnAt = now;
    if (stick) scrollToBottom(view);
  };
  view.previewFrame = requestAnimationFrame(frame);
}

function drawPreview(view) {
  const preview = view.preview;
  const dom = view.dom;
  const stopping = view.chat.status === 'interrupting';
  const key = JSON.stringify([preview.parts, stopping]);
  if (key === dom.previewKey) return;
  dom.previewKey = key;
  if (!dom.previewEl) {
    const body = h('div', { class: 'message-text markdown preview-text' });
    const extras = h('div', { class: 'preview-extras' });
    const reasoning = h('div', { class: 'preview-reasoning' });
    const typing = h('span', { class: 'typing' });
    const role = h('span', { class: 'role' });
    dom.previewEl = h(
      'article',
      { class: 'message message-assistant message-preview', testid: 'message-preview', 'aria-busy': 'true', 'aria-label': 'Answer being written' },
      h('header', { class: 'message-meta' }, role, typing),
      reasoning,
      body,
      extras,
    );
    dom.previewEl.parts = { body, extras, reasoning, typing, role };
    dom.previewSlot.replaceChildren(dom.previewEl);
  }
  const { body, extras, reasoning, typing, role } = dom.previewEl.parts;
  role.textContent = roleLabel(preview.role);
  typing.textContent = stopping ? 'stopping…' : 'writing…';
  const reasoningParts = preview.parts.filter((p) => p.type === 'reasoning');
  reasoning.replaceChildren(...reasoningParts.map(renderReasoning));
  const text = textOf(preview.parts);
  if (body.dataset.text !== text) {
    renderMarkdownInto(body, text);
    body.dataset.text = text;
  }
  extras.replaceChildren(...preview.parts.filter((p) => p.type === 'tool-call' || p.type === 'tool-result').map(renderPart));
}

// --- action required -------------------------------------------------------

function renderActionRequired(view) {
  const slot = view.dom.action;
  const action = view.chat.status === 'requires_action' ? view.actionRequired : null;
  const key = action ? action.tool_calls.map((c) => c.tool_call_id).join('\n') : null;
  if (key === view.dom.actionKey) return; // keep what the user typed
  view.dom.actionKey = key;
  // Decisions taken on approval cards, sent together with every other
  // answer: the server takes one answer per pending call in one request.
  view.dom.decisions = new Map();
  if (!action) {
    slot.replaceChildren();
    return;
  }
  const isApproval = (call) => call.kind === 'approval';
  const clientCalls = action.tool_calls.filter((c) => !isApproval(c));
  const approvalCalls = action.tool_calls.filter(isApproval);
  const forms = clientCalls.map((call, i) => {
    const outputId = `tool-output-${i}`;
    return h(
      'div',
      { class: 'tool-call-form', testid: 'tool-call-form', dataset: { toolCallId: call.tool_call_id } },
      h('div', { class: 'tool-head' }, h('code', {}, call.tool_name), h('span', { class: 'tool-id' }, call.tool_call_id)),
      h('pre', { class: 'json', 'aria-label': `Arguments of ${call.tool_name}` }, prettyJsonString(call.args)),
      h('label', { for: outputId }, `Output of ${call.tool_name} (JSON, or plain text)`),
      h('textarea', { id: outputId, testid: 'tool-output', rows: 3, spellcheck: false }),
      h('label', { class: 'toggle' }, h('input', { type: 'checkbox', testid: 'tool-is-error' }), 'This output is an error'),
    );
  });
  const cards = approvalCalls.map((call, i) => approvalCard(view, call, i, action.deadline_at, clientCalls.length > 0));
  const deadline = h('p', { class: 'deadline', testid: 'action-deadline', dataset: { deadline: action.deadline_at || '' } });
  const submit = clientCalls.length
    ? h('button', { type: 'submit', class: 'btn btn-primary', testid: 'tool-submit' }, 'Submit results')
    : null;
  const title = !clientCalls.length
    ? 'The assistant is waiting for your approval'
    : approvalCalls.length
      ? 'The assistant is waiting for tool results and your approval'
      : 'The assistant is waiting for tool results';
  const panel = h(
    'form',
    { class: 'action-required', testid: 'action-required', 'aria-label': title },
    h('h2', {}, title),
    deadline,
    cards,
    forms,
    submit,
  );
  panel.addEventListener('submit', (e) => {
    e.preventDefault();
    submitToolResults(view, panel);
  });
  slot.replaceChildren(panel);
  updateCountdowns(view);
}

/**
 * The card of one call waiting for approval (API.md "Tool approval"): the
 * tool, its arguments, the deadline, Approve, and Deny with an optional
 * reason. With no client tools pending, the last decision sends them all;
 * otherwise "Submit results" sends them with the outputs.
 */
function approvalCard(view, call, i, deadlineAt, withClientTools) {
  const reasonId = `approval-reason-${i}`;
  const decision = h('p', { class: 'approval-decision', testid: 'approval-decision', role: 'status' });
  const reason = h('input', { id: reasonId, type: 'text', testid: 'approval-reason', maxlength: 4096, placeholder: 'Why? (optional, sent with a denial)' });
  const decide = (approved) => {
    view.dom.decisions.set(call.tool_call_id, { approved, reason: reason.value.trim() || null });
    card.dataset.decision = approved ? 'approved' : 'denied';
    decision.textContent = approved ? 'Approved' : 'Denied';
    const pending = [...view.dom.action.querySelectorAll('[data-testid="approval-card"]')]
      .filter((c) => !c.dataset.decision).length;
    if (pending) decision.textContent += ` — decide the other ${pending} call(s) to continue`;
    else if (withClientTools) decision.textContent += ' — submit the results to continue';
    else submitToolResults(view, view.dom.action.querySelector('[data-testid="action-required"]'));
  };
  const card = h(
    'section',
    { class: 'approval-card', testid: 'approval-card', dataset: { toolCallId: call.tool_call_id }, 'aria-label': `Approve ${call.tool_name}?` },
    h('div', { class: 'tool-head' }, 'Approve ', h('code', { testid: 'approval-tool' }, call.tool_name), '?', h('span', { class: 'tool-id' }, call.tool_call_id)),
    h('pre', { class: 'json', testid: 'approval-args', 'aria-label': `Arguments of ${call.tool_name}` }, prettyJsonString(call.args)),
    h('p', { class: 'deadline', testid: 'approval-deadline', dataset: { deadline: deadlineAt || '' } }),
    h('label', { for: reasonId }, 'Reason'),
    reason,
    h(
      'div',
      { class: 'approval-buttons' },
      h('button', { type: 'button', class: 'btn btn-primary', testid: 'approval-approve', onclick: () => decide(true) }, 'Approve'),
      h('button', { type: 'button', class: 'btn btn-danger', testid: 'approval-deny', onclick: () => decide(false) }, 'Deny'),
    ),
    decision,
  );
  return card;
}

/** Parses a tool output: JSON when it parses, else the text as a JSON string. */
function parseOutput(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

async function submitToolResults(view, panel) {
  const results = [...panel.querySelectorAll('[data-testid="tool-call-form"]')].map((form) => ({
    tool_call_id: form.dataset.toolCallId,
    output: parseOutput(byTestId(form, 'tool-output').value),
    is_error: byTestId(form, 'tool-is-error').checked,
  }));
  for (const card of panel.querySelectorAll('[data-testid="approval-card"]')) {
    const decision = view.dom.decisions.get(card.dataset.toolCallId);
    if (!decision) {
      toast('Approve or deny every tool call first.');
      return;
    }
    const result = { tool_call_id: card.dataset.toolCallId, approved: decision.approved };
    if (decision.reason) result.reason = decision.reason;
    results.push(result);
  }
  setBusy(panel, true);
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/tool-results`, { results }));
  setBusy(panel, false);
  if (!chat || view.closed) return;
  applyChat(view, chat);
}

// --- banners, queue, usage ---------------------------------------------------

function renderBanners(view) {
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
        canRetry ? h('button', { type: 'button', class: 'btn btn-small', testid: 'retry-button', onclick: () => retryTurn(view) }, 'Retry') : null,
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
        h('span', { class: 'banner-detail' }, `delay ${formatDuration(r.delay_ms)}`),
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

/** New usage figures: the explanation of a `usage_limit` stop follows them. */
function onUsageChanged() {
  const view = app.view;
  if (!view || view.closed || !view.dom || !view.chat || !view.error || view.error.kind !== 'usage_limit') return;
  const shown = byTestId(view.dom.banners, 'usage-limit-help');
  if (shown && shown.textContent === usageLimitHelp().textContent) return;
  renderBanners(view);
}

/**
 * The queue panel (API.md "Busy behaviours and the queue"): each queued
 * message with a "steer" badge when it steers the running reply, and
 * Promote, Edit and Delete; drag a message by its handle to reorder the
 * queue. Editing happens in place (`view.queueEdit`); the panel is only
 * rebuilt when the queue or the message being edited changes, so a stream
 * event does not throw away what is being typed.
 */
function renderQueue(view) {
  const panel = view.dom.queue;
  panel.hidden = view.queue.length === 0;
  const editing = view.queueEdit && view.queue.some((q) => q.id === view.queueEdit.id) ? view.queueEdit.id : null;
  if (!editing) view.queueEdit = null;
  const key = JSON.stringify([view.queue.map((q) => [q.id, q.steer, q.content]), editing]);
  if (panel.dataset.key === key) return;
  panel.dataset.key = key;
  const items = view.queue.map((q, i) => {
    const label = `queued message ${i + 1}`;
    if (q.id === editing) {
      const input = h('textarea', { class: 'queued-edit-input', testid: 'queue-edit-input', rows: 2, 'aria-label': `Edit ${label}` });
      input.value = textOf(q.content);
      const steer = h('input', { type: 'checkbox', testid: 'queue-edit-steer' });
      steer.checked = Boolean(q.steer);
      const save = () => editQueued(view, q.id, input.value, steer.checked);
      input.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          save();
        } else if (e.key === 'Escape') {
          view.queueEdit = null;
          renderQueue(view);
        }
      });
      queueMicrotask(() => input.focus());
      return h(
        'li',
        { class: 'queued queued-editing', testid: 'queued-message', dataset: { queuedId: String(q.id) } },
        input,
        h(
          'span',
          { class: 'queued-actions' },
          h('label', { class: 'queued-steer-toggle' }, steer, ' Steer'),
          h('button', { type: 'button', class: 'btn btn-small btn-primary', testid: 'queue-edit-save', onclick: save }, 'Save'),
          h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'queue-edit-cancel', onclick: () => { view.queueEdit = null; renderQueue(view); } }, 'Cancel'),
        ),
      );
    }
    const item = h(
      'li',
      { class: 'queued', testid: 'queued-message', draggable: 'true', dataset: { queuedId: String(q.id) } },
      h('span', { class: 'queued-handle', 'aria-hidden': 'true', title: 'Drag to reorder' }, '⠿'),
      q.steer ? h('span', { class: 'queued-steer', testid: 'queued-steer', title: 'Read by the running reply at its next step' }, 'steer') : null,
      h('span', { class: 'queued-text' }, textOf(q.content) || '(no text)'),
      h(
        'span',
        { class: 'queued-actions' },
        h('button', { type: 'button', class: 'btn btn-small', testid: 'queue-promote', 'aria-label': `Send ${label} next`, onclick: () => promoteQueued(view, q.id) }, 'Promote'),
        h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'queue-edit', 'aria-label': `Edit ${label}`, onclick: () => { view.queueEdit = { id: q.id }; renderQueue(view); } }, 'Edit'),
        h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'queue-delete', 'aria-label': `Delete ${label}`, onclick: () => deleteQueued(view, q.id) }, 'Delete'),
      ),
    );
    item.addEventListener('dragstart', (e) => {
      e.dataTransfer.setData('text/x-chatd-queued', String(q.id));
      e.dataTransfer.effectAllowed = 'move';
      item.classList.add('dragging');
    });
    item.addEventListener('dragend', () => item.classList.remove('dragging'));
    item.addEventListener('dragover', (e) => {
      if (!e.dataTransfer.types.includes('text/x-chatd-queued')) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'move';
      item.classList.add('drop-target');
    });
    item.addEventListener('dragleave', () => item.classList.remove('drop-target'));
    item.addEventListener('drop', (e) => {
      e.preventDefault();
      item.classList.remove('drop-target');
      const moved = Number(e.dataTransfer.getData('text/x-chatd-queued'));
      if (moved && moved !== q.id) moveQueued(view, moved, i);
    });
    return item;
  });
  panel.replaceChildren(h('h2', {}, `Queued (${view.queue.length})`), h('ol', { class: 'queue-list' }, items));
}

/**
 * The chat's token usage (the sum over its answers). Until an answer
 * reports usage it keeps the last figures it showed (a running reply has
 * none yet), or shows a dash.
 */
function renderUsage(view) {
  const total = { input: 0, output: 0, total: 0 };
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
    total.input += m.usage.input_tokens || 0;
    total.output += m.usage.output_tokens || 0;
    total.total += m.usage.total_tokens || 0;
  }
  let text;
  if (reported === 0 && unreported === 0) {
    text = view.usageText || 'Tokens: –';
  } else if (reported === 0) {
    text = 'Tokens: not reported by the model server';
  } else {
    text = `Tokens: ${total.input} in / ${total.output} out / ${total.total} total`;
    if (unreported > 0) {
      text += ` (${unreported} ${unreported === 1 ? 'reply' : 'replies'} without usage from the model server)`;
    }
    view.usageText = text;
  }
  view.dom.usage.textContent = text;
}

/**
 * The context meter (API.md "Context management": `Chat.context`, kept up
 * to date by the stream's `context` event) and the "Compact now" and
 * "Clear context" actions, offered while the chat is idle.
 */
function renderContext(view) {
  const { chat, dom } = view;
  const c = chat.context;
  const fill = dom.context.querySelector('.context-fill');
  const label = dom.context.querySelector('.context-label');
  if (!c || !c.limit) {
    dom.context.hidden = true;
  } else {
    dom.context.hidden = false;
    const percent = Math.max(0, c.percent);
    fill.style.width = `${Math.min(100, percent)}%`;
    dom.context.classList.toggle('context-high', percent >= 70);
    dom.context.setAttribute('aria-valuenow', String(Math.min(100, percent)));
    const about = c.estimated ? '~' : '';
    label.textContent = `${percent}% context`;
    const compactions = c.compactions ? `, ${c.compactions} compaction${c.compactions === 1 ? '' : 's'}` : '';
    dom.context.title = `Context: ${about}${numberFormat.format(c.tokens)} of ${numberFormat.format(c.limit)} tokens${compactions}`;
    dom.context.dataset.tokens = String(c.tokens);
    dom.context.dataset.percent = String(percent);
  }
  const idle = (chat.status === 'waiting' || chat.status === 'error') && !chat.archived;
  const key = idle ? 'idle' : 'busy';
  if (dom.contextTools.dataset.key === key) return;
  dom.contextTools.dataset.key = key;
  dom.contextTools.replaceChildren(
    ...(idle
      ? [
          h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'compact-now', title: 'Summarise the older messages for the model now', onclick: () => contextAction(view, '/compact') }, 'Compact'),
          h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'clear-context', title: 'The model forgets everything before this point (messages stay visible)', onclick: () => contextAction(view, '/clear-context') }, 'Clear context'),
        ]
      : []),
  );
}

/** `POST /chats/{chat}/compact` or `/clear-context`; refusals become a toast. */
async function contextAction(view, path) {
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}${path}`));
  if (chat && !view.closed) applyChat(view, chat);
}

/** Updates the deadline and retry countdowns (every second). */
function updateCountdowns(view) {
  if (!view || view.closed || !view.dom) return;
  for (const deadline of view.dom.action.querySelectorAll('.deadline')) {
    const at = deadline.dataset.deadline;
    deadline.textContent = at
      ? `Deadline ${formatTime(at)} (${countdown(at, 'expired')})`
      : 'No deadline';
  }
  const retry = view.dom.banners.querySelector('.countdown');
  if (retry) retry.textContent = `retrying at ${formatTime(retry.dataset.until)} (${countdown(retry.dataset.until, 'now')})`;
}

function countdown(iso, past) {
  const ms = new Date(iso).getTime() - Date.now();
  return ms <= 0 ? past : `in ${formatDuration(ms)}`;
}

function formatDuration(ms) {
  const s = Math.ceil(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  return `${m}m ${String(s % 60).padStart(2, '0')}s`;
}

function formatTime(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? '' : d.toLocaleTimeString();
}

// ---------------------------------------------------------------------------
// Chat actions

async function sendMessage(content, busyBehavior, model) {
  const view = app.view;
  if (!view || !view.chatId) return false;
  const body = { content, busy_behavior: busyBehavior };
  if (model) body.model_config_id = model;
  if (busyBehavior === 'interrupt' && view.chat && view.chat.status === 'running') armInterrupt(view);
  const result = await sendRequest(() => api('POST', `/chats/${view.chatId}/messages`, body, { quiet: true }));
  if (!result || view.closed) return Boolean(result);
  for (const message of result.messages || []) upsertMessage(view, message);
  if (result.message) upsertMessage(view, result.message);
  if (result.queued_message && !view.queue.some((q) => q.id === result.queued_message.id)) {
    view.queue = [...view.queue, result.queued_message];
  }
  render(view);
  return true;
}

/**
 * Runs a quiet send request (`POST /chats`, `POST .../messages`): a refusal
 * for a limit (`429`: a budget used up, the request rate, a full queue;
 * `413`) is shown above the composer with the server's detail and, for the
 * rate limit, when to try again (`Retry-After`), and the usage panel is
 * loaded again; other errors are a toast. Resolves to the answer, or
 * undefined when refused.
 */
async function sendRequest(request) {
  try {
    return await request();
  } catch (err) {
    if (!(err instanceof ApiError)) {
      console.error(err);
      toast(String(err.message || err));
    } else if (err.status === 429 || err.status === 413) {
      const notice = byTestId(document, 'send-refused');
      if (notice) {
        notice.textContent = `Not sent: ${err.describe()} Your message is kept below.`;
        notice.dataset.status = String(err.status);
        notice.hidden = false;
      } else {
        toast(err.describe());
      }
      refreshUsage();
    } else {
      toast(err.describe());
    }
    return undefined;
  }
}

/** `PATCH /chats/{chat}` `{plan_mode}`: on at the next model call. */
async function setPlanMode(view, on) {
  const input = view.dom.planInput;
  input.dataset.pending = '1';
  const chat = await attempt(() => api('PATCH', `/chats/${view.chatId}`, { plan_mode: on ? 'plan' : null }));
  delete input.dataset.pending;
  if (view.closed) return;
  if (chat) applyChat(view, chat);
  else input.checked = view.chat.plan_mode === 'plan';
}

async function interruptChat(view) {
  if (view.chat.status === 'running') armInterrupt(view);
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/interrupt`));
  if (chat && !view.closed) applyChat(view, chat);
}

async function setArchived(view, archived) {
  const chat = await attempt(() => api('PATCH', `/chats/${view.chatId}`, { archived }));
  if (!chat || view.closed) return;
  // The chat leaves the list now shown (archived or not) at once.
  app.chats = app.chats.filter((c) => c.id !== chat.id || c.archived === app.showArchived);
  applyChat(view, chat);
  refreshChats();
}

async function promoteQueued(view, id) {
  if (view.chat.status === 'running') armInterrupt(view);
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/queue/${id}/promote`));
  if (chat && !view.closed) applyChat(view, chat);
}

/** Saves an edit of a queued message (text and steer flag). */
async function editQueued(view, id, text, steer) {
  if (!text.trim()) {
    toast('A queued message needs some text.');
    return;
  }
  const body = { content: [{ type: 'text', text }], steer };
  const edited = await attempt(() => api('PATCH', `/chats/${view.chatId}/queue/${id}`, body));
  if (!edited || view.closed) return;
  view.queueEdit = null;
  view.queue = view.queue.map((q) => (q.id === id ? edited : q));
  render(view);
}

/** Moves a queued message to 0-based `position`; the answer is the new queue. */
async function moveQueued(view, id, position) {
  const queue = await attempt(() => api('POST', `/chats/${view.chatId}/queue/${id}/move`, { position }));
  if (!queue || view.closed) return;
  view.queue = queue;
  render(view);
}

async function deleteQueued(view, id) {
  const ok = await attempt(() => api('DELETE', `/chats/${view.chatId}/queue/${id}`).then(() => true));
  if (!ok || view.closed) return;
  view.queue = view.queue.filter((q) => q.id !== id);
  render(view);
}

/**
 * Takes a Chat from a REST answer. While the stream is live it is the
 * authority on status (a REST answer may be older than the events already
 * received), so only the metadata is taken then.
 */
function applyChat(view, chat) {
  const live = view.conn && view.conn.open;
  const status = view.chat.status;
  view.chat = { ...view.chat, ...chat };
  if (live) {
    view.chat.status = status;
  } else {
    applyStatus(view, chat.status, chat.history_version);
    if (chat.status === 'error' && chat.last_error) view.error = chat.last_error;
  }
  const listed = app.chats.find((c) => c.id === chat.id);
  if (listed) Object.assign(listed, chat);
  renderChatList();
  render(view);
}

// --- interrupted answers -----------------------------------------------------

function loadInterrupted(chatId) {
  try {
    return new Set(JSON.parse(sessionStorage.getItem(INTERRUPTED_KEY + chatId) || '[]'));
  } catch {
    return new Set();
  }
}

/** From now until the turn ends, the next new answer is the one the interrupt cut. */
function armInterrupt(view) {
  view.interruptArmed = true;
}

function markInterrupted(view, id) {
  view.interruptedIds.add(id);
  const ids = [...view.interruptedIds].slice(-200);
  try {
    sessionStorage.setItem(INTERRUPTED_KEY + view.chatId, JSON.stringify(ids));
  } catch {
    // Storage full or unavailable: the mark lasts as long as the page.
  }
}

// ---------------------------------------------------------------------------
// Live stream

function streamUrl(view) {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  // after_id must be positive: with no cached message, ask for everything.
  const afterId = Math.max(0, ...view.messages.keys());
  const query = afterId > 0 ? `?after_id=${afterId}` : '';
  return `${scheme}//${location.host}${API}/chats/${view.chatId}/stream${query}`;
}

function connect(view) {
  if (view.closed) return;
  let ws;
  try {
    ws = new WebSocket(streamUrl(view), ['chatd', `chatd.bearer.${session.token}`]);
  } catch (err) {
    // A token with characters a subprotocol cannot carry (e.g. "/", "=",
    // spaces) cannot authenticate the live view; retrying cannot help.
    view.dom.connection.textContent = 'not live';
    toast(`The live view cannot use this token (${err.message}). Use a token from "chatd token create" (letters, digits, "-" and "_").`);
    return;
  }
  const conn = { ws, open: false };
  view.conn = conn;
  ws.addEventListener('open', () => {
    conn.open = true;
    view.backoff = 0;
    setConnection(view, true);
  });
  ws.addEventListener('message', (e) => {
    if (view.conn !== conn || view.closed) return;
    onFrame(view, e.data);
  });
  ws.addEventListener('close', (e) => {
    if (view.conn !== conn || view.closed) return;
    setConnection(view, false);
    onClosed(view, conn, e);
  });
}

async function onClosed(view, conn, event) {
  if (event.code === 1000 && conn.open) {
    // The chat was deleted.
    const still = await api('GET', `/chats/${view.chatId}`, undefined, { quiet: true }).catch((e) => e);
    if (still instanceof ApiError && still.status === 404) {
      toast('This chat was deleted.');
      refreshChats();
      location.hash = '#/';
      return;
    }
  }
  if (!conn.open) {
    // The handshake failed: find out why before retrying forever.
    const check = await api('GET', `/chats/${view.chatId}`, undefined, { quiet: true }).catch((e) => e);
    if (view.closed) return;
    if (check instanceof ApiError && (check.status === 404 || check.status === 401)) {
      toast(check.message);
      if (check.status === 401) signOut();
      return;
    }
  }
  scheduleReconnect(view);
}

/** Exponential backoff (0.5 s doubling to 10 s) with jitter. */
function scheduleReconnect(view) {
  if (view.closed) return;
  const base = Math.min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** view.backoff);
  view.backoff = Math.min(view.backoff + 1, 10);
  const delay = base / 2 + Math.random() * (base / 2);
  clearTimeout(view.reconnectTimer);
  view.reconnectTimer = setTimeout(() => connect(view), delay);
}

function onFrame(view, data) {
  let events;
  try {
    events = JSON.parse(data);
  } catch {
    console.warn('unparsable stream frame');
    return;
  }
  const frame = { retry: false };
  for (const event of Array.isArray(events) ? events : [events]) {
    if (event.chat_id && event.chat_id !== view.chatId) continue;
    applyEvent(view, event, frame);
  }
  render(view);
  announceStatus(view);
}

/**
 * Applies one ChatStreamEvent to the view state (API.md "Stream").
 * `frame.retry` tells whether a `retry` came earlier in the same frame.
 */
function applyEvent(view, event, frame) {
  switch (event.type) {
    case 'message':
      upsertMessage(view, event.message);
      break;
    case 'message_part':
      applyPart(view, event.message_part);
      break;
    case 'status':
      applyStatus(view, event.status.status, event.status.history_version);
      break;
    case 'error':
      view.error = event.error;
      view.retry = null;
      break;
    case 'queue_update':
      view.queue = event.queued_messages;
      break;
    case 'action_required':
      view.actionRequired = event.action_required;
      break;
    case 'retry':
      // A retry state means something only while the chat runs (the
      // server keeps the last one after an interrupt).
      if (view.chat && view.chat.status === 'running') {
        view.retry = { ...event.retry, episode: view.lastEpisode };
        frame.retry = true;
      }
      break;
    case 'preview_reset':
      view.preview = null;
      // A new attempt (or a new turn) has started, unless the reset came
      // with the retry, from the same database read.
      if (!frame.retry) view.retry = null;
      break;
    case 'context':
      if (view.chat) view.chat = { ...view.chat, context: event.context };
      break;
    case 'history_reset':
      // Every current message follows: nothing stays omitted.
      view.messages.clear();
      view.gap = null;
      view.editing = null;
      view.retry = null;
      break;
    default:
      console.warn('unknown stream event', event.type);
  }
}

/** Inserts a message or replaces it when its revision is newer. */
function upsertMessage(view, message) {
  const known = view.messages.get(message.id);
  if (known && known.revision > message.revision) return;
  if (!known && message.role === 'user') view.turnStopped = false;
  if (!known && view.interruptArmed) {
    if (message.role === 'assistant') markInterrupted(view, message.id);
    // The message sent with the interrupt (or promoted) comes after the
    // cut answer: what follows is the next turn's.
    if (message.role === 'user') view.interruptArmed = false;
  }
  view.messages.set(message.id, message);
  // A status change can come in the same frame as the next one (running,
  // interrupting and waiting all at once), so the live region cannot rely on
  // having seen `interrupting`: the cut answer says the turn was stopped.
  if (!known && finishReasonOf(view, message) === 'interrupted') view.turnStopped = true;
  if (message.role === 'assistant' || message.role === 'tool') {
    // The committed message replaces the preview that built it.
    if (view.preview) view.finishedEpisodes.add(`${view.preview.hv}:${view.preview.ga}`);
    view.preview = null;
    view.retry = null;
  }
}

function applyStatus(view, status, historyVersion) {
  if (!view.chat) return;
  const previous = view.chat.status;
  view.chat.status = status;
  const newTurn = typeof historyVersion === 'number' && historyVersion > view.historyVersion;
  if (typeof historyVersion === 'number') view.historyVersion = Math.max(view.historyVersion, historyVersion);
  if (status !== 'error') view.error = null;
  if (status !== 'requires_action') view.actionRequired = null;
  if (status === 'interrupting' && previous !== 'interrupting') armInterrupt(view);
  if (status === 'interrupting') view.turnStopped = true;
  if (status !== 'running' && status !== 'interrupting') view.interruptArmed = false;
  // The retry banner goes with any change of status or turn.
  if (status !== previous || newTurn) view.retry = null;
  if (status !== 'running') {
    if (status !== 'interrupting') view.preview = null;
  }
  // A turn ended: what it spent shows in the usage panel.
  if ((previous === 'running' || previous === 'interrupting') && status !== 'running' && status !== 'interrupting') refreshUsage();
  updateListStatus(view.chatId, status);
}

/** Says in the live region what changed (not every streamed word). */
function announceStatus(view) {
  if (!view.chat || view.closed) return;
  let state = view.chat.status;
  if (state === 'running' && view.retry) state = `retry:${view.retry.attempt}`;
  else if (state === 'running' && view.preview) state = 'writing';
  if (state === view.announced) return;
  const before = view.announced;
  view.announced = state;
  let text;
  if (state.startsWith('retry:')) text = `The model request failed; retry ${view.retry.attempt} is scheduled.`;
  else if (state === 'writing') text = 'The assistant is writing…';
  else if (state === 'running') text = 'The assistant is working…';
  else if (state === 'interrupting') text = 'Stopping the reply…';
  else if (state === 'requires_action') text = 'The assistant is waiting for tool results.';
  else if (state === 'error') text = `The reply failed: ${(view.error && view.error.message) || 'error'}.`;
  else if (state === 'waiting') text = before === 'interrupting' || view.turnStopped ? 'The reply was stopped.' : 'The reply is complete.';
  else text = `Status: ${state}.`;
  // The turn is over: the next one starts unstopped.
  if (state === 'waiting' || state === 'error' || state === 'requires_action') view.turnStopped = false;
  announce(text);
}

/**
 * Adds a live part to the preview of its episode (history_version,
 * generation_attempt). Parts of older episodes, repeated seqs and parts of
 * an episode a committed message already replaced are dropped.
 */
function applyPart(view, part) {
  const { history_version: hv, generation_attempt: ga, seq } = part;
  if (hv < view.historyVersion || view.finishedEpisodes.has(`${hv}:${ga}`)) return;
  let preview = view.preview;
  if (preview && (hv < preview.hv || (hv === preview.hv && ga < preview.ga))) return;
  if (!preview || preview.hv !== hv || preview.ga !== ga) {
    preview = { hv, ga, seq: 0, role: part.role, parts: [] };
    view.preview = preview;
  }
  if (seq <= preview.seq) return;
  preview.seq = seq;
  const last = view.lastEpisode;
  if (!last || hv > last.hv || (hv === last.hv && ga > last.ga)) view.lastEpisode = { hv, ga };
  // A part of an attempt newer than the one that failed: the retry is under way.
  const failed = view.retry && view.retry.episode;
  if (view.retry && (!failed || hv > failed.hv || (hv === failed.hv && ga > failed.ga))) view.retry = null;
  mergeDelta(preview.parts, part.part);
}

/** Appends a delta: text/reasoning extend the last part of their type; tool calls grow their args. */
function mergeDelta(parts, delta) {
  if (delta.type === 'text' || delta.type === 'reasoning') {
    const last = parts[parts.length - 1];
    if (last && last.type === delta.type) last.text += delta.text || '';
    else parts.push({ type: delta.type, text: delta.text || '' });
  } else if (delta.type === 'tool-call') {
    let call = parts.find((p) => p.type === 'tool-call' && p.tool_call_id === delta.tool_call_id);
    if (!call) {
      call = { type: 'tool-call', tool_call_id: delta.tool_call_id, tool_name: delta.tool_name, args: '' };
      parts.push(call);
    }
    call.args += delta.args_delta || delta.args || '';
  } else {
    parts.push(delta);
  }
}

// ---------------------------------------------------------------------------
// Start

function start() {
  $('signin-form').addEventListener('submit', (e) => {
    e.preventDefault();
    signIn($('token-input').value);
  });
  $('sign-out').addEventListener('click', signOut);
  $('menu-toggle').addEventListener('click', toggleSidebar);
  $('sidebar-backdrop').addEventListener('click', () => setSidebarOpen(false));
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && $('app-view').classList.contains('sidebar-open') && !$('confirm-dialog').open) {
      setSidebarOpen(false);
    }
  });
  phone.addEventListener('change', () => setSidebarOpen(false));
  $('new-chat').addEventListener('click', () => {
    if (location.hash === '#/' || location.hash === '') {
      closeView();
      openNewChat();
      renderChatList();
      setSidebarOpen(false);
    } else {
      location.hash = '#/';
    }
  });
  $('show-archived').addEventListener('change', (e) => {
    app.showArchived = e.target.checked;
    refreshChats();
  });
  let searchTimer = null;
  $('chat-search').addEventListener('input', (e) => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      app.query = e.target.value.trim();
      refreshChats();
    }, SEARCH_DEBOUNCE_MS);
  });
  $('chat-search').addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && e.target.value) {
      e.preventDefault();
      e.stopPropagation();
      e.target.value = '';
      clearTimeout(searchTimer);
      app.query = '';
      refreshChats();
    }
  });
  window.addEventListener('hashchange', route);
  session.onUnauthorized = signOut;
  onUsage(onUsageChanged);
  setInterval(() => updateCountdowns(app.view), 1000);
  restoreSession();
}

start();
