// @ts-check
// Read-only sharing (API.md "Sign-in, search, sharing and export"):
// - the "Share…" dialog of a chat's tools menu (owner): the users it is
//   shared with (`GET /chats/{chat}/shares` → `[{user_id, username,
//   created_at}]`), each with Revoke (`DELETE /chats/{chat}/shares/{user}`),
//   and a user name to add (`POST /chats/{chat}/shares {username}`);
//   refusals are said in the dialog;
// - the sidebar's "Shared with me" list (`GET /chats?shared=true`), loaded
//   with the chat list and every SHARED_POLL_MS after;
// - a shared chat's view is read only (`applyReadOnly`, called by the chat
//   view's header render): no composer (a note says why), no actions that
//   change the chat. It still follows the live stream; a revoke makes the
//   chat answer `404`, and the chat view then shows its unknown-chat page.

import { $, h, announce, formatDateTime } from './ui.js';
import { ApiError, api, session } from './api.js';

/** @typedef {import('./wire.js').Chat} Chat */
/** @typedef {import('./chat-state.js').ChatView} ChatView */
/** @typedef {{user_id: string, username: string, created_at: string}} ChatShare */

/** How often the "Shared with me" list is loaded again (ms). */
const SHARED_POLL_MS = 15000;

const state = {
  /** @type {Chat[]} */
  chats: [],
  /** @type {ReturnType<typeof setInterval> | undefined} */
  timer: undefined,
  seq: 0,
  /** @type {() => ChatView | null} */
  openChat: () => null,
};

/**
 * @param {{openChat: () => ChatView | null}} hooks the open chat's view (app.js)
 */
export function initShares(hooks) {
  state.openChat = hooks.openChat;
}

/**
 * Whether `chat` is someone else's chat shared with the signed-in user
 * (read only for them). An admin reading another user's chat is not.
 * @param {Chat} chat
 */
export function isSharedWithMe(chat) {
  const me = session.me;
  if (!me || !chat.owner_id || chat.owner_id === me.id) return false;
  return me.role !== 'admin' || state.chats.some((c) => c.id === chat.id);
}

// ---------------------------------------------------------------------------
// The "Shared with me" list

/** Loads the list now and every SHARED_POLL_MS until `stopSharedList`. */
export function startSharedList() {
  stopSharedList();
  loadShared();
  state.timer = setInterval(loadShared, SHARED_POLL_MS);
}

/** Stops loading the list and empties it (sign-out). */
export function stopSharedList() {
  clearInterval(state.timer);
  state.timer = undefined;
  state.seq++;
  state.chats = [];
  renderSharedList();
}

/** Loads the list again (after a route change, a revoke). */
export async function loadShared() {
  if (!session.me) return;
  const seq = ++state.seq;
  /** @type {Chat[] | null} */
  const chats = await api('GET', '/chats?shared=true&limit=100', undefined, { quiet: true }).catch(() => null);
  if (seq !== state.seq || !chats) return;
  state.chats = chats;
  renderSharedList();
}

/** Renders the list (the open chat marked). */
export function renderSharedList() {
  const section = $('shared-chats');
  const list = $('shared-list');
  if (!section || !list) return;
  section.hidden = state.chats.length === 0;
  const open = state.openChat();
  list.replaceChildren(...state.chats.map((chat) => {
    const title = chat.title || 'Untitled';
    const current = open && open.chatId === chat.id;
    return h(
      'li',
      { class: 'chat-item shared-item', testid: 'shared-chat-item', dataset: { chatId: chat.id } },
      h(
        'a',
        { class: 'chat-link', href: `#/chats/${chat.id}`, testid: 'shared-chat-link', 'aria-current': current ? 'page' : null },
        h('span', { class: 'chat-title', testid: 'chat-title' }, title),
      ),
    );
  }));
}

// ---------------------------------------------------------------------------
// A shared chat's view

/**
 * Makes the chat view read only when its chat is shared with the signed-in
 * user: the composer is replaced by a note, the tools that change the chat
 * are hidden (export stays), and message actions that change it (edit,
 * regenerate, fork, switching branches, approvals, the queue's controls)
 * are hidden by features.css under `.chat.read-only`.
 * @param {ChatView} view
 */
export function applyReadOnly(view) {
  if (!view.chat) return;
  const readOnly = isSharedWithMe(view.chat);
  const { dom } = view;
  dom.root.classList.toggle('read-only', readOnly);
  for (const item of [dom.compact, dom.clear, dom.planInput, dom.archive, shareItemOf(view)]) {
    if (item) item.hidden = readOnly;
  }
  dom.composer.root.hidden = readOnly;
  let note = /** @type {HTMLElement | null} */ (dom.root.querySelector('.read-only-note'));
  if (!readOnly) {
    if (note) note.remove();
    return;
  }
  if (!note) {
    note = h('p', { class: 'read-only-note', testid: 'read-only-note', role: 'note' });
    dom.composer.root.before(note);
  }
  const owner = /** @type {{owner_username?: string}} */ (view.chat).owner_username;
  note.textContent = owner ? `Shared with you by ${owner} — read only` : 'Shared with you — read only';
}

/**
 * The "Share…" item of the chat's tools menu, or null.
 * @param {ChatView} view
 * @returns {HTMLElement | null}
 */
function shareItemOf(view) {
  return view.dom.menu.list.querySelector('[data-testid="share-chat"]');
}

/**
 * The "Share…" item for the chat's tools menu; it opens the share dialog.
 * @param {ChatView} view
 * @returns {HTMLButtonElement}
 */
export function shareMenuItem(view) {
  return /** @type {HTMLButtonElement} */ (h(
    'button',
    {
      type: 'button',
      class: 'menu-item',
      role: 'menuitem',
      testid: 'share-chat',
      onclick: () => {
        view.dom.menu.close();
        openShareDialog(view.chatId, view.chat ? view.chat.title : '');
      },
    },
    h('span', { class: 'menu-item-label' }, 'Share…'),
    h('span', { class: 'menu-item-hint' }, 'Let other users read it'),
  ));
}

// ---------------------------------------------------------------------------
// The share dialog

/**
 * Opens the share dialog of chat `chatId` (owner).
 * @param {string} chatId
 * @param {string} title
 */
export function openShareDialog(chatId, title) {
  const old = document.getElementById('share-dialog');
  if (old) old.remove();
  const error = h('p', { class: 'field-error', testid: 'share-error', role: 'alert', id: 'share-error', hidden: true });
  const input = /** @type {HTMLInputElement} */ (h('input', {
    id: 'share-username', type: 'text', autocomplete: 'off', autocapitalize: 'none', spellcheck: 'false', testid: 'share-username', required: true,
  }));
  const add = /** @type {HTMLButtonElement} */ (h('button', { type: 'submit', class: 'btn btn-primary', testid: 'share-add' }, 'Share'));
  const list = h('ul', { class: 'share-list', testid: 'share-list', 'aria-label': 'Shared with' });
  /** @type {ChatShare[]} */
  let shares = [];
  let closed = false;

  /** @param {string | null} text */
  const say = (text) => {
    error.hidden = !text;
    error.textContent = text || '';
    if (text) {
      input.setAttribute('aria-invalid', 'true');
      input.setAttribute('aria-describedby', 'share-error');
    } else {
      input.removeAttribute('aria-invalid');
      input.removeAttribute('aria-describedby');
    }
  };

  const renderList = () => {
    if (shares.length === 0) {
      list.replaceChildren(h('li', { class: 'hint', testid: 'share-empty' }, 'Not shared with anyone yet.'));
      return;
    }
    list.replaceChildren(...shares.map((s) => h(
      'li',
      { class: 'share-item', testid: 'share-item', dataset: { userId: s.user_id } },
      h('span', { class: 'share-name', testid: 'share-name' }, s.username),
      h('span', { class: 'hint share-since' }, `since ${formatDateTime(s.created_at)}`),
      h('button', {
        type: 'button',
        class: 'btn btn-small btn-danger-quiet',
        testid: 'share-revoke',
        'aria-label': `Stop sharing with ${s.username}`,
        onclick: () => revoke(s),
      }, 'Revoke'),
    )));
  };

  /** @param {ChatShare} s */
  const revoke = async (s) => {
    say(null);
    try {
      await api('DELETE', `/chats/${chatId}/shares/${s.user_id}`, undefined, { quiet: true });
    } catch (err) {
      // Already gone (404): the list was stale.
      if (!(err instanceof ApiError) || err.status !== 404) {
        say(err instanceof ApiError ? err.describe() : String(err));
        return;
      }
    }
    if (closed) return;
    shares = shares.filter((x) => x.user_id !== s.user_id);
    renderList();
    announce(`${s.username} can no longer read this chat.`);
    input.focus();
  };

  const form = h(
    'form',
    {
      class: 'share-form',
      onsubmit: async (/** @type {Event} */ e) => {
        e.preventDefault();
        const username = input.value.trim();
        if (!username) {
          say('Enter the user name of the person to share with.');
          input.focus();
          return;
        }
        if (session.me && username === session.me.username) {
          say('This is your own chat: share it with someone else.');
          input.focus();
          return;
        }
        say(null);
        add.disabled = true;
        /** @type {ChatShare} */
        let share;
        try {
          share = await api('POST', `/chats/${chatId}/shares`, { username }, { quiet: true });
        } catch (err) {
          add.disabled = false;
          if (!(err instanceof ApiError)) throw err;
          // An unknown name: `400` naming `username` ("no user has this name").
          const unknown = (err.status === 404 && /user/i.test(err.message))
            || err.validations.some((v) => v.field === 'username' && /no user/i.test(v.detail));
          say(unknown
            ? `There is no user named “${username}”.`
            : err.validations.length
              ? `${err.message} ${err.validations.map((v) => `${v.field} ${v.detail}`).join('; ')}`
              : err.describe());
          input.focus();
          return;
        }
        add.disabled = false;
        if (closed) return;
        shares = shares.filter((x) => x.user_id !== share.user_id).concat([share]);
        renderList();
        input.value = '';
        announce(`Shared with ${share.username}.`);
      },
    },
    h('label', { for: 'share-username' }, 'Share with (user name)'),
    h('div', { class: 'share-add-row' }, input, add),
    error,
  );
  const dialog = /** @type {HTMLDialogElement} */ (h(
    'dialog',
    { id: 'share-dialog', class: 'dialog share-dialog', testid: 'share-dialog', 'aria-labelledby': 'share-title' },
    h('h2', { id: 'share-title' }, `Share “${title || 'Untitled'}”`),
    h('p', { class: 'hint' }, 'The people you share with can read this chat and follow it live. They cannot send messages or change it.'),
    form,
    h('h3', { class: 'share-list-heading' }, 'Shared with'),
    list,
    h('div', { class: 'dialog-actions' }, h('button', { type: 'button', class: 'btn', testid: 'share-close', onclick: () => dialog.close() }, 'Done')),
  ));
  dialog.addEventListener('close', () => {
    closed = true;
    dialog.remove();
  });
  list.replaceChildren(h('li', { class: 'hint' }, 'Loading…'));
  document.body.append(dialog);
  dialog.showModal();
  input.focus();
  api('GET', `/chats/${chatId}/shares`, undefined, { quiet: true }).then(
    (/** @type {ChatShare[]} */ got) => {
      if (closed) return;
      shares = got;
      renderList();
    },
    (err) => {
      if (closed) return;
      list.replaceChildren();
      say(err instanceof ApiError ? err.describe() : String(err));
    },
  );
}
