// @ts-check
// The sidebar: the chat list, polled from `GET /chats` (search with `q=`,
// the archived toggle, sub-agents nested under their parent from
// `?parent_id=`), relative dates, rename (`PATCH` title) and delete
// (`DELETE`, after a confirmation); at phone width it is a drawer behind
// the menu button.
//
// It owns the list's state (`list` below). What it needs of the open view
// (which chat is open, its live status) and what it tells it (a new title,
// a deletion) go through the hooks given to `initSidebar` by app.js.

import { h, $, $input, byTestId, icon, confirmDialog, setStatusBadge } from './ui.js';
import { api, attempt, session } from './api.js';

/** @typedef {import('./wire.js').Chat} Chat */
/** @typedef {import('./wire.js').ChatStatus} ChatStatus */

/**
 * What the sidebar asks of, and tells, the rest of the app.
 * @typedef {object} SidebarHooks
 * @property {() => {chatId: string | null, chat: Chat | null} | null} open
 *   the open view: its chat id and (once loaded) its Chat, whose status
 *   is live
 * @property {() => void} titleChanged the open chat's title changed
 *   (the list has set `chat.title`)
 * @property {(chatId: string) => void} deleted a chat was deleted
 */

const LIST_POLL_MS = 4000;
const SEARCH_DEBOUNCE_MS = 250;
const PHONE_QUERY = '(max-width: 720px)';

/**
 * The list's state.
 * @type {{
 *   chats: Chat[],
 *   children: Map<string, Chat[]>,
 *   collapsed: Set<string>,
 *   showArchived: boolean,
 *   query: string,
 *   seq: number,
 *   renaming: string | null,
 *   timer: ReturnType<typeof setInterval> | undefined,
 *   hooks: SidebarHooks,
 * }}
 */
const list = {
  chats: [],
  children: new Map(), // parent id → its children (sub-agents), see loadChildren
  collapsed: new Set(), // parents whose children the list hides
  showArchived: false,
  query: '', // the search (`q=`)
  seq: 0, // the newest list request; older answers are dropped
  renaming: null, // id of the chat whose title is being edited
  timer: undefined,
  hooks: { open: () => null, titleChanged: () => {}, deleted: () => {} },
};

const phone = window.matchMedia(PHONE_QUERY);

/**
 * Wires the sidebar's controls (archived toggle, search, drawer) and keeps
 * `hooks`.
 * @param {SidebarHooks} hooks
 */
export function initSidebar(hooks) {
  list.hooks = hooks;
  $('menu-toggle').addEventListener('click', toggleSidebar);
  $('sidebar-backdrop').addEventListener('click', () => setSidebarOpen(false));
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && $('app-view').classList.contains('sidebar-open') && !/** @type {HTMLDialogElement} */ ($('confirm-dialog')).open) {
      setSidebarOpen(false);
    }
  });
  phone.addEventListener('change', () => setSidebarOpen(false));
  const archived = $input('show-archived');
  archived.addEventListener('change', () => {
    list.showArchived = archived.checked;
    refreshChats();
  });
  const search = $input('chat-search');
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let searchTimer;
  search.addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      list.query = search.value.trim();
      refreshChats();
    }, SEARCH_DEBOUNCE_MS);
  });
  search.addEventListener('keydown', (e) => {
    if (e.key === 'Escape' && search.value) {
      e.preventDefault();
      e.stopPropagation();
      search.value = '';
      clearTimeout(searchTimer);
      list.query = '';
      refreshChats();
    }
  });
}

/** Loads the list now and every LIST_POLL_MS (at sign-in). */
export function startChatList() {
  refreshChats();
  clearInterval(list.timer);
  list.timer = setInterval(refreshChats, LIST_POLL_MS);
}

/** Stops polling and empties the list (at sign-out). */
export function stopChatList() {
  list.chats = [];
  list.query = '';
  list.renaming = null;
  clearInterval(list.timer);
  $input('chat-search').value = '';
  $('chat-list').replaceChildren();
}

// ---------------------------------------------------------------------------
// The drawer (phones)

/**
 * Opens or closes the drawer; on a phone the page behind it is inert
 * while it is open.
 * @param {boolean} open
 */
export function setSidebarOpen(open) {
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
// The list

/** Loads the list (and the children of its parents) and renders it. */
export async function refreshChats() {
  if (!session.me) return;
  const params = new URLSearchParams({ limit: '100' });
  if (list.showArchived) params.set('archived', 'true');
  if (list.query) params.set('q', list.query);
  const seq = ++list.seq;
  /** @type {Chat[] | null} */
  const chats = await api('GET', `/chats?${params}`, undefined, { quiet: true }).catch(() => /** @type {Chat[] | null} */ (null));
  if (!chats || seq !== list.seq) return;
  const children = await loadChildren(chats, list.showArchived);
  if (seq !== list.seq) return;
  list.chats = chats;
  list.children = children;
  syncOpenChatTitle();
  renderChatList();
}

/**
 * The children (sub-agents) of the listed chats that may have some (a chat
 * with `subagents`), and theirs: `Map(parent id → [Chat])`. Children are not
 * in `GET /chats` itself (API.md "Sub-agents and plan mode"); each parent's
 * come from `?parent_id=`, archived ones with the archived list.
 * @param {Chat[]} chats
 * @param {boolean} archived
 * @returns {Promise<Map<string, Chat[]>>}
 */
async function loadChildren(chats, archived) {
  /** @type {Map<string, Chat[]>} */
  const children = new Map();
  let parents = chats.filter((c) => c.subagents);
  for (let depth = 0; depth < 2 && parents.length > 0; depth++) {
    /** @type {Chat[][]} */
    const pages = await Promise.all(parents.map((p) => {
      const params = new URLSearchParams({ limit: '100', parent_id: p.id });
      if (archived) params.set('archived', 'true');
      return api('GET', `/chats?${params}`, undefined, { quiet: true }).catch(() => /** @type {Chat[]} */ ([]));
    }));
    /** @type {Chat[]} */
    const next = [];
    parents.forEach((p, i) => {
      if (pages[i].length > 0) children.set(p.id, pages[i]);
      next.push(...pages[i].filter((c) => c.subagents));
    });
    parents = next;
  }
  return children;
}

/**
 * Expands or collapses the children of `chatId` in the list.
 * @param {string} chatId
 */
function toggleChildren(chatId) {
  if (list.collapsed.has(chatId)) list.collapsed.delete(chatId);
  else list.collapsed.add(chatId);
  renderChatList();
}

/** The list is where title changes (e.g. a generated title) show up. */
function syncOpenChatTitle() {
  const open = list.hooks.open();
  const chat = open && open.chat;
  const listed = chat && list.chats.find((c) => c.id === chat.id);
  if (chat && listed && listed.title !== chat.title) {
    chat.title = listed.title;
    list.hooks.titleChanged();
  }
}

/**
 * The listed chat `chatId`, or undefined.
 * @param {string} chatId
 */
export function listedChat(chatId) {
  return list.chats.find((c) => c.id === chatId);
}

/**
 * Takes a Chat from a REST answer into its list entry (when listed), and
 * renders the list.
 * @param {Chat} chat
 */
export function mergeListed(chat) {
  const listed = listedChat(chat.id);
  if (listed) Object.assign(listed, chat);
  renderChatList();
}

/**
 * A chat (un)archived: it leaves the list now shown (archived or not) at once.
 * @param {Chat} chat
 */
export function dropIfMovedOut(chat) {
  list.chats = list.chats.filter((c) => c.id !== chat.id || c.archived === list.showArchived);
}

/**
 * A chat just created: shown first, in the list of unarchived chats.
 * @param {Chat} chat
 */
export function addCreated(chat) {
  if (list.showArchived) {
    list.showArchived = false;
    $input('show-archived').checked = false;
  }
  list.chats = [chat, ...list.chats.filter((c) => c.id !== chat.id)];
}

const relativeFormat = new Intl.RelativeTimeFormat(undefined, { numeric: 'auto' });

/**
 * `iso` relative to now: "now", "5 minutes ago", "3 hours ago",
 * "yesterday", a weekday within the week, else the date.
 * @param {string} iso
 * @param {Date} [now]
 */
function formatRelative(iso, now = new Date()) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return '';
  const seconds = Math.round((now.getTime() - date.getTime()) / 1000);
  if (seconds < 60) return relativeFormat.format(0, 'second');
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return relativeFormat.format(-minutes, 'minute');
  /** @param {Date} d */
  const startOfDay = (d) => new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime();
  const days = Math.round((startOfDay(now) - startOfDay(date)) / 86400000);
  if (days === 0) return relativeFormat.format(-Math.floor(minutes / 60), 'hour');
  if (days === 1) return relativeFormat.format(-1, 'day');
  if (days < 7) return date.toLocaleDateString(undefined, { weekday: 'long' });
  const sameYear = date.getFullYear() === now.getFullYear();
  return date.toLocaleDateString(undefined, sameYear ? { day: 'numeric', month: 'short' } : { day: 'numeric', month: 'short', year: 'numeric' });
}

/**
 * The status the list shows for `chat`: the open chat's is the live one.
 * @param {Chat} chat
 * @param {{chatId: string | null, chat: Chat | null} | null} open
 * @returns {ChatStatus}
 */
function statusOf(chat, open) {
  return open && open.chatId === chat.id && open.chat ? open.chat.status : chat.status;
}

/**
 * Renders the list, keeping the items whose content did not change (and
 * the keyboard focus).
 */
export function renderChatList() {
  if (list.renaming) return; // the list is re-rendered when the rename ends
  const ul = $('chat-list');
  const open = list.hooks.open();
  const openId = open && open.chatId;
  const existing = new Map(
    /** @type {HTMLElement[]} */ ([...ul.children]).filter((el) => el.dataset.chatId).map((el) => [el.dataset.chatId, el]),
  );
  const focused = ul.contains(document.activeElement) ? /** @type {HTMLElement} */ (document.activeElement) : null;
  const focusedItem = focused && /** @type {HTMLElement | null} */ (focused.closest('[data-chat-id]'));
  const focusedKey = focused && (focused.dataset.testid || (focused.classList.contains('chat-link') ? 'chat-link' : null));
  const items = list.chats.map((chat) => {
    const status = statusOf(chat, open);
    const date = formatRelative(chat.updated_at);
    const kids = familyKey(chat.id, open);
    const key = JSON.stringify([chat.title, status, date, chat.archived, openId === chat.id, chat.last_message_preview, chat.message_count, kids]);
    const old = existing.get(chat.id);
    if (old && old.dataset.key === key) return old;
    const item = chatListItem(chat, status, date, openId === chat.id);
    appendChildList(item, chat.id, open, 1);
    item.dataset.key = key;
    return item;
  });
  if (items.length === 0) {
    let text = list.showArchived ? 'No archived chats.' : 'No chats yet.';
    if (list.query) text = `No ${list.showArchived ? 'archived ' : ''}chats match “${list.query}”.`;
    items.push(h('li', { class: 'empty', testid: 'chat-list-empty' }, text));
  }
  const same = items.length === ul.children.length && items.every((el, i) => ul.children[i] === el);
  if (!same) ul.replaceChildren(...items);
  // A re-rendered item keeps the keyboard focus where it was; so does a
  // kept item that replaceChildren moved (detaching it drops the focus).
  if (focusedItem && focusedKey && document.activeElement !== focused) {
    const again = ul.querySelector(`[data-chat-id="${CSS.escape(focusedItem.dataset.chatId || '')}"]`);
    /** @type {HTMLElement | null} */
    const target = again && (focusedKey === 'chat-link' ? again.querySelector('.chat-link') : byTestId(again, focusedKey));
    if (target) target.focus();
  }
}

/**
 * One chat of the list: its link (title, date, status) and its actions.
 * @param {Chat} chat
 * @param {ChatStatus} status
 * @param {string} date
 * @param {boolean} open
 */
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

/**
 * What the nested children of `chatId` show, for the list's re-render key.
 * @param {string} chatId
 * @param {{chatId: string | null, chat: Chat | null} | null} open
 * @returns {unknown[]}
 */
function familyKey(chatId, open) {
  const openId = open && open.chatId;
  const kids = list.children.get(chatId) || [];
  return [list.collapsed.has(chatId), kids.map((c) => [c.id, c.title, c.status, c.archived, openId === c.id, familyKey(c.id, open)])];
}

/**
 * Nests the children of `chatId` under its list item `item` (with their
 * status), behind a toggle that expands or collapses them; `depth` 1 or 2.
 * @param {HTMLElement} item
 * @param {string} chatId
 * @param {{chatId: string | null, chat: Chat | null} | null} open
 * @param {number} depth
 */
function appendChildList(item, chatId, open, depth) {
  const openId = open && open.chatId;
  const kids = list.children.get(chatId) || [];
  if (kids.length === 0) return;
  const collapsed = list.collapsed.has(chatId);
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
    const row = chatListItem(child, statusOf(child, open), formatRelative(child.updated_at), openId === child.id);
    row.classList.add('chat-child');
    row.dataset.depth = String(depth);
    row.dataset.parentId = chatId;
    if (depth < 2) appendChildList(row, child.id, open, depth + 1);
    nested.appendChild(row);
  }
  item.classList.add('has-children');
  item.append(toggle, nested);
}

/** @param {Chat} chat */
function chatTooltip(chat) {
  if (typeof chat.message_count !== 'number') return null;
  const count = `${chat.message_count} message${chat.message_count === 1 ? '' : 's'}`;
  return chat.last_message_preview ? `${chat.last_message_preview}\n(${count})` : count;
}

/**
 * @param {ChatStatus} status
 * @param {string} testid
 */
function statusBadge(status, testid) {
  const badge = h('span', { testid });
  setStatusBadge(badge, status);
  return badge;
}

/**
 * Keeps the list's badge of the open chat in step with the stream.
 * @param {string} chatId
 * @param {ChatStatus} status
 */
export function updateListStatus(chatId, status) {
  const chat = listedChat(chatId);
  if (chat) chat.status = status;
  const item = $('chat-list').querySelector(`[data-chat-id="${CSS.escape(chatId)}"]`);
  const badge = item && byTestId(item, 'status-badge');
  if (badge) setStatusBadge(badge, status);
}

/**
 * Replaces the item's title with a field: Enter (or leaving it) saves, Escape cancels.
 * @param {string} chatId
 */
function startRename(chatId) {
  const chat = listedChat(chatId);
  /** @type {HTMLElement | null} */
  const item = $('chat-list').querySelector(`[data-chat-id="${CSS.escape(chatId)}"]`);
  if (!chat || !item) return;
  if (list.renaming) return;
  list.renaming = chatId;
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
  /** @param {boolean} save */
  const finish = async (save) => {
    if (done) return;
    done = true;
    const hadFocus = document.activeElement === input;
    const title = input.value.trim();
    if (save && title && title !== chat.title) {
      input.disabled = true;
      /** @type {Chat | undefined} */
      const updated = await attempt(() => api('PATCH', `/chats/${chatId}`, { title }));
      if (updated) {
        Object.assign(chat, updated);
        const open = list.hooks.open();
        if (open && open.chatId === chatId && open.chat) {
          open.chat.title = updated.title;
          list.hooks.titleChanged();
        }
      }
    }
    list.renaming = null;
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
  item.replaceChildren(h('form', { class: 'rename-form', onsubmit: (/** @type {Event} */ e) => e.preventDefault() }, input));
  input.focus();
  input.select();
}

/**
 * Deletes a chat after a confirmation; the server's refusal (a busy chat) shows as a toast.
 * @param {string} chatId
 */
async function deleteChat(chatId) {
  const chat = listedChat(chatId);
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
  const index = list.chats.findIndex((c) => c.id === chatId);
  list.chats = list.chats.filter((c) => c.id !== chatId);
  list.hooks.deleted(chatId);
  renderChatList();
  // Keep the keyboard where the deleted item was.
  /** @type {NodeListOf<HTMLElement>} */
  const links = $('chat-list').querySelectorAll('.chat-link');
  const next = links[Math.min(index, links.length - 1)];
  if (next) next.focus();
  else $('chat-search').focus();
  refreshChats();
}
