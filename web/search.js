// @ts-check
// Search inside messages (API.md "Sign-in, search, sharing and export"):
// a dialog (the sidebar's "Search messages", or "/" or Ctrl+K anywhere
// outside a text field) that calls `GET /search?q=&limit=&after=` →
// `{results: [{chat_id, chat_title, message_id, role, created_at, snippet,
// rank}], next}` and lists the hits best first, with "Load more" while
// `next` is not null. Opening a hit opens its chat, brings the message into
// the loaded window (the chat view's "load earlier" pages, when it is in the
// omitted middle of a long chat), scrolls to it and highlights it briefly.
//
// A snippet is the server's escaped text with the matches in `<mark>`; it
// is never given to innerHTML: it is cut at `<mark>`/`</mark>`, each piece's
// entities are decoded and it becomes a text node (the marks, `<mark>`
// elements), so nothing else can become markup.

import { $, h, announce, formatDateTime } from './ui.js';
import { ApiError, api, session } from './api.js';

/** @typedef {import('./chat-state.js').ChatView} ChatView */
/**
 * @typedef {object} SearchHit
 * @property {string} chat_id
 * @property {string} [chat_title]
 * @property {number} message_id
 * @property {string} [role]
 * @property {string} [created_at]
 * @property {string} snippet
 * @property {number} rank
 */

/** Hits per page. */
const PAGE = 20;
/** How long a found message stays highlighted (ms). */
const FLASH_MS = 2500;
/** Typing pause before a search runs (ms). */
const DEBOUNCE_MS = 250;

/**
 * The hit to show once its chat is open: the chat view calls
 * `revealPendingHit` after each render.
 * @type {{chatId: string, messageId: number} | null}
 */
let pending = null;

/** @type {() => ChatView | null} */
let openChat = () => null;

/**
 * Binds the sidebar button and the keyboard shortcuts.
 * @param {{openChat: () => ChatView | null}} hooks the open chat's view (app.js)
 */
export function initSearch(hooks) {
  openChat = hooks.openChat;
  $('open-search').addEventListener('click', () => openSearchDialog());
  document.addEventListener('keydown', (e) => {
    if (!session.me || document.querySelector('dialog[open]')) return;
    const target = /** @type {HTMLElement} */ (e.target);
    const typing = target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
    if ((e.key === 'k' || e.key === 'K') && (e.ctrlKey || e.metaKey) && !e.altKey) {
      e.preventDefault();
      openSearchDialog();
    } else if (e.key === '/' && !typing && !e.ctrlKey && !e.metaKey && !e.altKey) {
      e.preventDefault();
      openSearchDialog();
    }
  });
}

/**
 * The snippet as nodes: text, and `<mark>` elements for the matches.
 * @param {string} snippet escaped HTML whose only tags are `<mark>`, `</mark>`
 * @returns {Node[]}
 */
export function snippetNodes(snippet) {
  /** @type {Node[]} */
  const nodes = [];
  let inMark = false;
  for (const piece of snippet.split(/(<\/?mark>)/i)) {
    if (/^<mark>$/i.test(piece)) {
      inMark = true;
    } else if (/^<\/mark>$/i.test(piece)) {
      inMark = false;
    } else if (piece) {
      const text = decodeEntities(piece);
      nodes.push(inMark ? h('mark', {}, text) : document.createTextNode(text));
    }
  }
  return nodes;
}

/**
 * Decodes HTML character references (`&amp;`, `&lt;`, `&#39;`, `&#x27;`, …)
 * without parsing markup.
 * @param {string} text
 */
function decodeEntities(text) {
  /** @type {Record<string, string>} */
  const named = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0' };
  return text.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z]+);/gi, (whole, ref) => {
    if (ref[0] === '#') {
      const code = ref[1] === 'x' || ref[1] === 'X' ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10);
      return Number.isFinite(code) && code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : whole;
    }
    return named[ref.toLowerCase()] ?? whole;
  });
}

/** Opens the search dialog (one at a time). */
export function openSearchDialog() {
  const existing = /** @type {HTMLDialogElement | null} */ (document.getElementById('search-dialog'));
  if (existing) {
    if (!existing.open) existing.showModal();
    return;
  }
  const input = /** @type {HTMLInputElement} */ (h('input', {
    id: 'search-input', type: 'search', testid: 'search-input', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'Words in your messages', 'aria-describedby': 'search-status',
  }));
  const status = h('p', { id: 'search-status', class: 'hint search-status', testid: 'search-status', role: 'status' });
  const results = h('ol', { class: 'search-results', testid: 'search-results', 'aria-label': 'Search results' });
  const more = /** @type {HTMLButtonElement} */ (h('button', { type: 'button', class: 'btn', testid: 'search-more', hidden: true }, 'Load more'));
  let seq = 0;
  /** @type {string | null} */
  let next = null;
  let query = '';
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;

  /**
   * Runs the search for `query` (fresh) or its next page.
   * @param {boolean} append
   */
  const run = async (append) => {
    const q = append ? query : input.value.trim();
    clearTimeout(timer);
    if (!append) {
      query = q;
      next = null;
      results.replaceChildren();
      more.hidden = true;
      status.removeAttribute('data-state');
      if (!q) {
        status.textContent = '';
        return;
      }
      if (q.length > 500) {
        status.textContent = 'Use at most 500 characters.';
        status.dataset.state = 'error';
        return;
      }
    }
    const mine = ++seq;
    const params = new URLSearchParams({ q, limit: String(PAGE) });
    if (append && next) params.set('after', next);
    status.textContent = 'Searching…';
    more.disabled = true;
    /** @type {{results: SearchHit[], next: string | null}} */
    let page;
    try {
      page = await api('GET', `/search?${params}`, undefined, { quiet: true });
    } catch (err) {
      if (mine !== seq) return;
      more.disabled = false;
      status.textContent = err instanceof ApiError ? `Search failed: ${err.describe()}` : String(err);
      status.dataset.state = 'error';
      return;
    }
    if (mine !== seq) return;
    more.disabled = false;
    next = page.next || null;
    results.append(...page.results.map(hitItem));
    more.hidden = !next;
    const n = results.children.length;
    status.textContent = n === 0 ? `No messages match “${q}”.` : `${n}${next ? '+' : ''} message${n === 1 ? '' : 's'} found.`;
    status.dataset.state = n === 0 ? 'empty' : 'found';
  };

  /**
   * @param {SearchHit} hit
   * @returns {HTMLElement}
   */
  const hitItem = (hit) => {
    const who = hit.role === 'user' ? 'You' : hit.role === 'assistant' ? 'Assistant' : hit.role || '';
    const when = hit.created_at ? formatDateTime(hit.created_at) : '';
    const link = h(
      'a',
      {
        href: `#/chats/${hit.chat_id}`,
        class: 'search-hit-link',
        testid: 'search-hit-link',
        onclick: (/** @type {MouseEvent} */ e) => {
          if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
          e.preventDefault();
          openHit(hit);
        },
      },
      h('span', { class: 'search-hit-title', testid: 'search-hit-title' }, hit.chat_title || 'Untitled'),
      h('span', { class: 'search-hit-meta hint' }, [who, when].filter(Boolean).join(' · ')),
      h('span', { class: 'search-hit-snippet', testid: 'search-hit-snippet' }, ...snippetNodes(hit.snippet || '')),
    );
    return h('li', { class: 'search-hit', testid: 'search-hit', dataset: { chatId: hit.chat_id, messageId: String(hit.message_id) } }, link);
  };

  /** @param {SearchHit} hit */
  const openHit = (hit) => {
    pending = { chatId: hit.chat_id, messageId: hit.message_id };
    dialog.close();
    const target = `#/chats/${hit.chat_id}`;
    if (location.hash !== target) {
      location.hash = target;
      return;
    }
    const view = openChat();
    if (view) revealPendingHit(view);
  };

  input.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => run(false), DEBOUNCE_MS);
  });
  more.addEventListener('click', () => run(true));
  const form = h(
    'form',
    { class: 'search-form', role: 'search', onsubmit: (/** @type {Event} */ e) => { e.preventDefault(); run(false); } },
    h('label', { for: 'search-input' }, 'Search your messages'),
    input,
  );
  const dialog = /** @type {HTMLDialogElement} */ (h(
    'dialog',
    { id: 'search-dialog', class: 'dialog search-dialog', testid: 'search-dialog', 'aria-label': 'Search messages' },
    form,
    status,
    results,
    h('div', { class: 'dialog-actions' }, more, h('button', { type: 'button', class: 'btn', testid: 'search-close', onclick: () => dialog.close() }, 'Close')),
  ));
  dialog.addEventListener('close', () => {
    seq++;
    clearTimeout(timer);
    dialog.remove();
  });
  document.body.append(dialog);
  dialog.showModal();
  input.focus();
}

/**
 * Called after each render of a chat view: when a search hit of this chat
 * waits to be shown, scrolls to its message and highlights it, loading
 * the omitted middle of a long chat page by page until it is there.
 * @param {ChatView} view
 */
export function revealPendingHit(view) {
  if (!pending || pending.chatId !== view.chatId || !view.chat) return;
  const target = pending;
  const el = /** @type {HTMLElement | null} */ (view.dom.messages.querySelector(`[data-message-id="${target.messageId}"]`));
  if (el) {
    pending = null;
    view.atBottom = false;
    // After this render's own scrolling (stick to the bottom).
    requestAnimationFrame(() => {
      el.scrollIntoView({ block: 'center' });
      view.atBottom = false;
      el.classList.add('search-flash');
      el.dataset.searchHit = 'true';
      announce('Showing the message found.');
      setTimeout(() => {
        el.classList.remove('search-flash');
        delete el.dataset.searchHit;
      }, FLASH_MS);
    });
    return;
  }
  const gap = view.gap;
  if (gap && target.messageId > gap.after && target.messageId < gap.before) {
    if (view.loadingEarlier) return; // its render calls again
    const button = /** @type {HTMLButtonElement | null} */ (view.dom.gapEl ? view.dom.gapEl.querySelector('button') : null);
    if (button) setTimeout(() => button.click(), 0);
    return;
  }
  // Loaded, not in the window or its gap: not a visible message of the
  // active branch (any more).
  pending = null;
  announce('That message is not in this chat’s current history.');
}
