// @ts-check
// The chat view at `#/chats/<id>`: loads the chat and its window of
// messages (`GET .../messages?window=true`: the first and last ones), then
// follows the live stream (./stream.js) and renders the state of
// ./chat-state.js: the header (title, status, connection, context, usage,
// plan mode, archive), banners, messages, the live preview (re-rendered at
// most once per animation frame), the action-required panel, the queue and
// the composer. Also the chat's actions: send, edit-and-retry, plan mode,
// stop, archive, and the branches (API.md "Branches, regenerate and fork"):
// show a sibling's branch, regenerate the last answer, fork, and the link
// of a fork to the chat it came from.
//
// The renderers in ./messages.js, ./panels.js, ./action-required.js and
// ./queue.js call back through `view.actions`.

import { h, toast, clearToast, announce, byTestId, menuButton, setStatusBadge } from './ui.js';
import { ApiError, api, attempt, session, downloadExport } from './api.js';
import { openStream } from './stream.js';
import { renderMarkdownInto } from './markdown.js';
import { buildComposer, sendRequest, placeSendButtons } from './composer.js';
import { applyReadOnly, shareMenuItem } from './shares.js';
import { revealPendingHit } from './search.js';
import { fillModelSelect, loadModels } from './models.js';
import { refreshChats, mergeListed, dropIfMovedOut, addCreated, listedChat } from './sidebar.js';
import {
  newChatView, isLoaded, textOf, applyEvent, applyStatus, upsertMessage, applyEditResult, armInterrupt,
  dropFrom, replaceMessages,
} from './chat-state.js';
import { renderMessages, rerenderMessages, renderPart, renderReasoning, roleLabel } from './messages.js';
import { renderBanners, renderUsage, renderContext } from './panels.js';
import { renderActionRequired } from './action-required.js';
import { renderQueue } from './queue.js';
import { buildWorkspacePanel, renderWorkspacePanel, refreshWorkspace, closeWorkspacePanel } from './workspace.js';

/** @typedef {import('./chat-state.js').ChatView} ChatView */
/** @typedef {import('./chat-state.js').LoadedView} LoadedView */
/** @typedef {import('./chat-state.js').ChatDom} ChatDom */
/** @typedef {import('./wire.js').Chat} Chat */
/** @typedef {import('./wire.js').MessagePage} MessagePage */
/** @typedef {import('./wire.js').SendResult} SendResult */
/** @typedef {import('./wire.js').EditResult} EditResult */
/** @typedef {import('./wire.js').InputPart} InputPart */
/** @typedef {import('./wire.js').StreamEvent} StreamEvent */
/** @typedef {import('./composer.js').BusyBehavior} BusyBehavior */

/**
 * Opens chat `chatId` in `main`; resolves nothing, the view fills in as
 * its data comes. Close it with `closeChatView`.
 * @param {HTMLElement} main
 * @param {string} chatId
 * @returns {ChatView}
 */
export function openChatView(main, chatId) {
  clearToast(); // A failure shown for the previous view is stale here.
  announce('');
  /** @type {ChatView} */
  const view = newChatView(chatId, {
    render: () => render(view),
    applyChat: (chat) => {
      if (isLoaded(view)) applyChat(view, chat);
    },
    retry: () => {
      if (isLoaded(view)) retryTurn(view);
    },
    activate: (messageId, direction) => {
      if (isLoaded(view)) activateBranch(view, messageId, direction);
    },
    regenerate: (messageId) => {
      if (isLoaded(view)) regenerateAnswer(view, messageId);
    },
    fork: (messageId) => {
      if (isLoaded(view)) forkChat(view, messageId);
    },
  }, buildChatDom);
  main.replaceChildren(view.dom.root);
  load(view);
  return view;
}

/**
 * Stops the view: its stream, its pending preview frame.
 * @param {ChatView} view
 */
export function closeChatView(view) {
  view.closed = true;
  clearTimeout(view.reloadTimer);
  if (view.previewFrame) cancelAnimationFrame(view.previewFrame);
  if (view.stream) view.stream.close();
  closeWorkspacePanel(view.dom.workspace);
}

/**
 * Loads the chat and its window of messages, renders them, and opens the stream.
 * @param {ChatView} view
 */
async function load(view) {
  const { chatId } = view;
  /** @type {Chat} */
  let chat;
  try {
    chat = await api('GET', `/chats/${chatId}`, undefined, { quiet: true });
  } catch (err) {
    if (view.closed) return;
    if (err instanceof ApiError && (err.status === 404 || err.status === 403 || err.status === 400)) {
      showNotFound(view);
      return;
    }
    // Unreachable, or a failure that may pass: say so, and try again.
    view.dom.title.textContent = 'Chat not available';
    setConnection(view, 'reconnecting');
    // (An unreachable server is said by the connection banner of app.js.)
    const status = err instanceof ApiError ? err.status : -1;
    if (status !== 0 && status !== 401) toast(err instanceof Error ? err.message : String(err));
    if (status === 0 || status >= 500) view.reloadTimer = setTimeout(() => load(view), 3000);
    return;
  }
  if (view.closed) return;
  view.chat = chat;
  view.historyVersion = chat.history_version;
  view.error = chat.status === 'error' ? chat.last_error ?? null : null;
  view.announced = chat.status;
  // The first and last messages; the stream then sends what is newer.
  /** @type {MessagePage | undefined} */
  const page = await attempt(() => api('GET', `/chats/${chatId}/messages?window=true`));
  if (view.closed) return;
  if (page) {
    for (const m of page.messages) view.messages.set(m.id, m);
    view.queue = page.queued_messages || [];
    const w = page.window;
    if (w && w.omitted > 0) view.gap = { after: w.head_last_id, before: w.tail_first_id, omitted: w.omitted };
  }
  render(view);
  if (isLoaded(view)) renderOrigin(view);
  fillModelSelect(view.dom.composer.model, chat);
  loadModels().then(() => {
    if (!view.closed) rerenderMessages(view);
  });
  view.stream = openStream(chatId, {
    afterId: () => Math.max(0, ...view.messages.keys()),
    onEvents: (events) => onEvents(view, events),
    onConnection: (state) => setConnection(view, state),
    onDeleted: () => {
      toast('This chat was deleted.');
      refreshChats();
      location.hash = '#/';
    },
    onRefused: (err) => {
      if (err.status === 404) {
        showNotFound(view);
        return;
      }
      toast(err.message);
      if (err.status === 401) session.onUnauthorized();
    },
  });
}

/**
 * An unknown chat id, or a chat of someone else (`404`): a page that says
 * so, with a way back, instead of the chat's.
 * @param {ChatView} view
 */
function showNotFound(view) {
  if (view.stream) view.stream.close();
  const back = h('a', { href: '#/', class: 'btn btn-primary', testid: 'not-found-back' }, 'Back to your chats');
  const page = h(
    'section',
    { class: 'page not-found', testid: 'chat-not-found', 'aria-labelledby': 'not-found-heading' },
    h('h1', { id: 'not-found-heading', tabindex: '-1' }, "This chat doesn't exist or you don't have access"),
    h('p', { class: 'hint' }, 'It may have been deleted, or the link is wrong.'),
    h('p', {}, back),
  );
  view.dom.root.replaceChildren(page);
  view.dom.root.dataset.state = 'not-found';
  announce("This chat doesn't exist or you don't have access.");
}

/**
 * `POST /chats/{chat}/compact` or `/clear-context`; refusals become a toast.
 * @param {LoadedView} view
 * @param {'/compact' | '/clear-context'} path
 */
async function contextAction(view, path) {
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}${path}`));
  if (chat && !view.closed) applyChat(view, chat);
}

/**
 * "Export as Markdown / JSON": `GET /chats/{chat}/export?format=`, saved
 * under the name of its `Content-Disposition` (else the chat's title).
 * @param {ChatView} view
 * @param {'markdown' | 'json'} format
 */
async function exportChat(view, format) {
  /** @type {{blob: Blob, filename: string | null} | undefined} */
  const file = await attempt(() => downloadExport(view.chatId, format));
  if (!file || view.closed) return;
  const title = (view.chat && view.chat.title) || 'chat';
  const fallback = `${title.replace(/[^\p{L}\p{N}._ -]+/gu, '').trim() || 'chat'}.${format === 'json' ? 'json' : 'md'}`;
  const url = URL.createObjectURL(file.blob);
  const link = h('a', { href: url, download: file.filename || fallback, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
  announce(`Chat exported as ${format === 'json' ? 'JSON' : 'Markdown'}.`);
}

/**
 * The page of the view.
 * @param {ChatView} view
 * @returns {ChatDom}
 */
function buildChatDom(view) {
  const title = h('h1', { class: 'chat-heading', id: 'chat-heading' }, 'Loading…');
  const origin = h('p', { class: 'chat-origin', testid: 'forked-from', hidden: true });
  const status = h('span', { class: 'status-badge', testid: 'chat-status', hidden: true });
  // Says something only while the live view is not connected.
  const connection = h('span', { class: 'connection', testid: 'connection', role: 'status', 'aria-label': 'Connection', dataset: { state: 'reconnecting' } }, 'Connecting…');
  const usage = h('span', { class: 'usage', testid: 'usage' });
  const context = h(
    'span',
    { class: 'context-meter', testid: 'context-meter', role: 'meter', 'aria-label': 'Context window used', 'aria-valuemin': '0', 'aria-valuemax': '100' },
    h('span', { class: 'context-bar' }, h('span', { class: 'context-fill' })),
    h('span', { class: 'context-label', testid: 'context-label' }, ''),
  );
  // The chat's tools, in one menu (web/README.md "chat-menu").
  const menu = menuButton({ testid: 'chat-menu', label: 'Chat actions', content: '⋯', buttonClass: 'btn btn-quiet btn-menu' });
  /**
   * @param {string} testid
   * @param {string} label
   * @param {string} hint
   * @param {() => void} onclick
   * @returns {HTMLButtonElement}
   */
  const item = (testid, label, hint, onclick) => h(
    'button',
    { type: 'button', class: 'menu-item', role: 'menuitem', testid, onclick },
    h('span', { class: 'menu-item-label' }, label),
    hint ? h('span', { class: 'menu-item-hint' }, hint) : null,
  );
  const compact = item('compact-now', 'Compact context', 'Summarise older messages for the model', () => {
    if (isLoaded(view)) contextAction(view, '/compact');
  });
  const clear = item('clear-context', 'Clear context', 'The model forgets what came before; messages stay', () => {
    if (isLoaded(view)) contextAction(view, '/clear-context');
  });
  const planInput = item('plan-mode-toggle', 'Plan mode', 'Research with read-only tools and propose a plan first', () => {
    if (isLoaded(view)) setPlanMode(view, planInput.getAttribute('aria-checked') !== 'true');
  });
  planInput.setAttribute('role', 'menuitemcheckbox');
  planInput.setAttribute('aria-checked', 'false');
  const exportMarkdown = item('export-markdown', 'Export as Markdown', '', () => exportChat(view, 'markdown'));
  const exportJson = item('export-json', 'Export as JSON', '', () => exportChat(view, 'json'));
  const archive = item('archive', 'Archive', 'Hide it from the chat list', () => {
    if (isLoaded(view)) setArchived(view, !view.chat.archived);
  });
  menu.list.append(compact, clear, planInput, h('hr', { class: 'menu-sep' }), exportMarkdown, exportJson, shareMenuItem(view), h('hr', { class: 'menu-sep' }), archive);
  const banners = h('div', { class: 'banners' });
  const messages = h('div', { class: 'messages', testid: 'messages', role: 'log', 'aria-label': 'Messages' });
  const previewSlot = h('div', { class: 'preview-slot' });
  const scroller = h('div', { class: 'scroller', tabindex: '-1' }, h('div', { class: 'thread' }, messages, previewSlot));
  const toBottom = h('button', {
    type: 'button',
    class: 'btn scroll-bottom',
    testid: 'scroll-bottom',
    'aria-label': 'Scroll to the newest message',
    title: 'Scroll to the newest message',
    hidden: true,
    onclick: () => {
      scroller.scrollTo({ top: scroller.scrollHeight, behavior: 'smooth' });
      view.atBottom = true;
      toBottom.hidden = true;
    },
  }, '↓');
  // Follow the conversation while the reader is at its end: through new
  // messages, the growing preview, and the composer growing or shrinking.
  scroller.addEventListener('scroll', () => {
    view.atBottom = isScrolledToBottom(scroller);
    toBottom.hidden = view.atBottom;
  });
  new ResizeObserver(() => {
    if (view.atBottom) scrollToBottom(view);
  }).observe(scroller);
  const action = h('div', { class: 'action-slot' });
  const queue = h('section', { class: 'queue', testid: 'queue', 'aria-label': 'Queued messages', hidden: true });
  // The chat's workspace (./workspace.js): a panel beside the messages,
  // offered once the chat has one.
  const workspace = buildWorkspacePanel(view.chatId);
  const composer = buildComposer({
    newChat: false,
    chatId: view.chatId,
    send: (content, behavior, model) => sendMessage(view, content, behavior, model),
    stop: () => {
      if (isLoaded(view)) interruptChat(view);
    },
    sent: () => {
      if (isLoaded(view)) renderHeader(view);
    },
  });
  const root = h(
    'section',
    { class: 'chat', testid: 'chat-view', dataset: { chatId: view.chatId }, 'aria-labelledby': 'chat-heading' },
    h(
      'header',
      { class: 'chat-header' },
      h('div', { class: 'chat-header-main' }, title, status, connection, menu.root),
      h('div', { class: 'chat-header-tools' }, context, workspace.toggle, usage),
    ),
    origin,
    banners,
    h(
      'div',
      { class: 'chat-body' },
      h(
        'div',
        { class: 'chat-column' },
        h('div', { class: 'scroller-wrap' }, scroller, toBottom),
        h('div', { class: 'dock' }, action, queue, composer.root),
      ),
      workspace.root,
    ),
  );
  return {
    root, title, origin, status, connection, usage, context, menu, compact, clear, planInput, archive, exportItems: [exportMarkdown, exportJson],
    toBottom, banners, messages, previewSlot, previewEl: null, previewKey: null, scroller, action, queue, composer, actionKey: null, decisions: new Map(),
    workspace,
  };
}

/**
 * Re-renders every part of the chat view from `view` (the preview at the next frame).
 * @param {ChatView} view
 */
function render(view) {
  if (view.closed || !isLoaded(view)) return;
  const stick = view.atBottom;
  renderHeader(view);
  renderBanners(view);
  renderMessages(view);
  renderPreview(view);
  renderActionRequired(view);
  renderQueue(view);
  renderUsage(view);
  renderContext(view);
  renderWorkspacePanel(view.dom.workspace, view.chat, view.messages.values());
  if (stick) scrollToBottom(view);
  revealPendingHit(view);
}

/** @param {HTMLElement} el */
function isScrolledToBottom(el) {
  return el.scrollHeight - el.scrollTop - el.clientHeight < 40;
}

/** @param {ChatView} view */
function scrollToBottom(view) {
  view.dom.scroller.scrollTop = view.dom.scroller.scrollHeight;
}

/**
 * The header (title, status, archive, plan mode) and the composer's
 * buttons, which follow the chat's status.
 * @param {LoadedView} view
 */
export function renderHeader(view) {
  const { chat, dom } = view;
  const offline = !session.reachable;
  dom.title.textContent = chat.title || 'Untitled';
  dom.title.title = chat.title || 'Untitled';
  setStatusBadge(dom.status, chat.status);
  const idle = (chat.status === 'waiting' || chat.status === 'error') && !chat.archived;
  const idleHint = idle ? '' : chat.archived ? 'Not for an archived chat' : 'Available when the reply is done';
  for (const item of [dom.compact, dom.clear]) {
    /** @type {HTMLButtonElement} */ (item).disabled = !idle || offline;
    item.title = idleHint;
  }
  if (!dom.planInput.dataset.pending) dom.planInput.setAttribute('aria-checked', String(chat.plan_mode === 'plan'));
  /** @type {HTMLButtonElement} */ (dom.planInput).disabled = chat.archived || offline;
  /** @type {HTMLElement} */ (dom.archive.querySelector('.menu-item-label')).textContent = chat.archived ? 'Unarchive' : 'Archive';
  /** @type {HTMLElement} */ (dom.archive.querySelector('.menu-item-hint')).textContent = chat.archived ? 'Show it in the chat list again' : 'Hide it from the chat list';
  dom.archive.dataset.testid = chat.archived ? 'unarchive' : 'archive';
  /** @type {HTMLButtonElement} */ (dom.archive).disabled = offline;
  for (const item of dom.exportItems) /** @type {HTMLButtonElement} */ (item).disabled = offline;
  dom.menu.button.disabled = offline;
  if (offline) dom.menu.close();
  const composer = dom.composer;
  const working = chat.status === 'running' || chat.status === 'interrupting';
  const busy = chat.status !== 'waiting' && chat.status !== 'error';
  const blocked = chat.archived || offline;
  composer.input.disabled = chat.archived;
  composer.model.disabled = chat.archived;
  composer.input.placeholder = chat.archived
    ? 'This chat is archived.'
    : busy
      ? 'Write a message… (it waits in the queue until the reply is done)'
      : 'Write a message…';
  /** @type {HTMLElement} */ (composer.sendQueue.querySelector('.send-label')).textContent = busy ? 'Queue' : 'Send';
  composer.sendQueue.title = busy ? 'Send it after the reply is done' : '';
  composer.sendInterrupt.hidden = !busy || chat.archived;
  // Steering is for a running reply (elsewhere the server queues it).
  composer.sendSteer.hidden = chat.status !== 'running' || chat.archived;
  // The stop button: shown while the agent works (running, retrying,
  // interrupting), usable while it runs. It is then the one primary
  // action; the ways to send are in the menu beside it.
  composer.stop.hidden = !working || chat.archived;
  placeSendButtons(composer, working && !chat.archived);
  const stopping = chat.status === 'interrupting';
  /** @type {HTMLElement} */ (composer.stop.querySelector('.stop-label')).textContent = stopping ? 'Stopping…' : 'Stop';
  composer.stop.setAttribute('aria-label', stopping ? 'Stopping the reply' : 'Stop the reply');
  composer.offline = offline;
  if (!composer.sending) {
    composer.sendQueue.disabled = blocked;
    composer.sendInterrupt.disabled = blocked;
    composer.sendSteer.disabled = blocked;
    composer.stop.disabled = chat.status !== 'running' || blocked;
    composer.more.button.disabled = blocked;
  }
  applyReadOnly(view);
}

/**
 * The live view's connection: nothing while it is connected, else
 * "Reconnecting…" (the banner of app.js says when the server is
 * unreachable). `data-state` is `live`, `reconnecting` or `not live`.
 * @param {ChatView} view
 * @param {'live' | 'reconnecting' | 'not live'} state
 */
function setConnection(view, state) {
  const el = view.dom.connection;
  el.dataset.state = state;
  el.textContent = state === 'live' ? '' : state === 'reconnecting' ? 'Reconnecting…' : 'Not updating';
  el.hidden = state === 'live';
}

// ---------------------------------------------------------------------------
// The live preview

/**
 * Shows the in-progress answer. Removing it is immediate (the committed
 * message replaces it in the same render); updating it waits for the next
 * animation frame, so that a fast stream re-renders its Markdown at most
 * once per frame (and a long answer, whose rendering takes longer, less
 * often).
 * @param {LoadedView} view
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
  /** @param {number} now */
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
    drawPreview(view, view.preview);
    view.previewCost = performance.now() - started;
    view.previewDrawnAt = now;
    if (stick) scrollToBottom(view);
  };
  view.previewFrame = requestAnimationFrame(frame);
}

/**
 * @param {LoadedView} view
 * @param {import('./chat-state.js').Preview} preview
 */
function drawPreview(view, preview) {
  const dom = view.dom;
  const stopping = view.chat.status === 'interrupting';
  const key = JSON.stringify([preview.parts, stopping]);
  if (key === dom.previewKey) return;
  dom.previewKey = key;
  let el = dom.previewEl;
  if (!el) {
    const body = h('div', { class: 'message-text markdown preview-text' });
    const extras = h('div', { class: 'preview-extras' });
    const reasoning = h('div', { class: 'preview-reasoning' });
    const typing = h('span', { class: 'typing' });
    const role = h('span', { class: 'role' });
    el = Object.assign(h(
      'article',
      { class: 'message message-assistant message-preview', testid: 'message-preview', 'aria-busy': 'true', 'aria-label': 'Answer being written' },
      h('header', { class: 'message-meta' }, role, typing),
      reasoning,
      body,
      extras,
    ), { parts: { body, extras, reasoning, typing, role } });
    dom.previewEl = el;
    dom.previewSlot.replaceChildren(el);
  }
  const { body, extras, reasoning, typing, role } = el.parts;
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

// ---------------------------------------------------------------------------
// The stream

/**
 * A frame of events: applied in order, then one render and one announcement.
 * @param {ChatView} view
 * @param {StreamEvent[]} events
 */
function onEvents(view, events) {
  const frame = { retry: false };
  for (const event of events) {
    if (event.chat_id && event.chat_id !== view.chatId) continue;
    applyEvent(view, event, frame);
  }
  // A committed message ends a step, whose workspace changes commit with it.
  if (events.some((e) => e.type === 'message')) refreshWorkspace(view.dom.workspace);
  render(view);
  announceStatus(view);
}

/**
 * Says in the live region what changed (not every streamed word).
 * @param {ChatView} view
 */
function announceStatus(view) {
  if (!view.chat || view.closed) return;
  /** @type {string} */
  let state = view.chat.status;
  if (state === 'running' && view.retry) state = `retry:${view.retry.attempt}`;
  else if (state === 'running' && view.preview) state = 'writing';
  if (state === view.announced) return;
  const before = view.announced;
  view.announced = state;
  let text;
  if (state.startsWith('retry:')) text = `The model request failed; retry ${view.retry?.attempt} is scheduled.`;
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

// ---------------------------------------------------------------------------
// Chat actions

/**
 * `POST /chats/{chat}/messages`; resolves to whether it was taken.
 * @param {ChatView} view
 * @param {InputPart[]} content
 * @param {BusyBehavior} busyBehavior
 * @param {string} model a model config id, or '' for the chat's
 */
async function sendMessage(view, content, busyBehavior, model) {
  /** @type {Record<string, unknown>} */
  const body = { content, busy_behavior: busyBehavior };
  if (model) body.model_config_id = model;
  if (busyBehavior === 'interrupt' && view.chat && view.chat.status === 'running') armInterrupt(view);
  /** @type {SendResult | undefined} */
  const result = await sendRequest(() => api('POST', `/chats/${view.chatId}/messages`, body, { quiet: true }));
  if (!result || view.closed) return Boolean(result);
  for (const message of result.messages || []) upsertMessage(view, message);
  if (result.message) upsertMessage(view, result.message);
  const queued = result.queued_message;
  if (queued && !view.queue.some((q) => q.id === queued.id)) {
    view.queue = [...view.queue, queued];
  }
  render(view);
  return true;
}

/**
 * Retry after an error: edit the last user message with its own content.
 * @param {LoadedView} view
 */
async function retryTurn(view) {
  const lastUser = [...view.messages.values()].filter((m) => m.role === 'user').sort((a, b) => b.id - a.id)[0];
  if (!lastUser) return;
  /** @type {InputPart[]} */
  const content = [];
  for (const p of lastUser.content) {
    if (p.type === 'text') content.push({ type: 'text', text: p.text });
    else if (p.type === 'file') content.push({ type: 'file', file_id: p.file_id });
  }
  /** @type {Record<string, unknown>} */
  const body = { content };
  const model = view.dom.composer.model.value;
  if (model) body.model_config_id = model;
  /** @type {EditResult | undefined} */
  const result = await attempt(() => api('PATCH', `/chats/${view.chatId}/messages/${lastUser.id}`, body));
  if (!result || view.closed) return;
  applyEditResult(view, result);
  render(view);
}

/**
 * `PATCH /chats/{chat}` `{plan_mode}`: on at the next model call.
 * @param {LoadedView} view
 * @param {boolean} on
 */
async function setPlanMode(view, on) {
  const input = view.dom.planInput;
  input.dataset.pending = '1';
  input.setAttribute('aria-checked', String(on));
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('PATCH', `/chats/${view.chatId}`, { plan_mode: on ? 'plan' : null }));
  delete input.dataset.pending;
  if (view.closed) return;
  if (chat) {
    applyChat(view, chat);
    announce(chat.plan_mode === 'plan' ? 'Plan mode is on.' : 'Plan mode is off.');
  } else {
    input.setAttribute('aria-checked', String(view.chat.plan_mode === 'plan'));
  }
}

/**
 * The stop button: `POST /chats/{chat}/interrupt`.
 * @param {LoadedView} view
 */
async function interruptChat(view) {
  if (view.chat.status === 'running') armInterrupt(view);
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/interrupt`));
  if (chat && !view.closed) applyChat(view, chat);
}

/**
 * @param {LoadedView} view
 * @param {boolean} archived
 */
async function setArchived(view, archived) {
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('PATCH', `/chats/${view.chatId}`, { archived }));
  if (!chat || view.closed) return;
  // The chat leaves the list now shown (archived or not) at once.
  dropIfMovedOut(chat);
  applyChat(view, chat);
  refreshChats();
}

/**
 * Takes a Chat from a REST answer. While the stream is live it is the
 * authority on status (a REST answer may be older than the events already
 * received), so only the metadata is taken then.
 * @param {LoadedView} view
 * @param {Chat} chat
 */
function applyChat(view, chat) {
  const live = view.stream && view.stream.live;
  const status = view.chat.status;
  view.chat = { ...view.chat, ...chat };
  if (live) {
    view.chat.status = status;
  } else {
    applyStatus(view, chat.status, chat.history_version);
    if (chat.status === 'error' && chat.last_error) view.error = chat.last_error;
  }
  mergeListed(chat);
  render(view);
}

// ---------------------------------------------------------------------------
// Branches (API.md "Branches, regenerate and fork")

/**
 * An arrow of "< n/m >": `POST /chats/{chat}/branches/activate`. The stream
 * then sends `history_reset` and the new branch; when it has not done so by
 * the time the answer comes (a socket reconnecting, a slow replica), the
 * branch is read again (`GET .../messages?window=true`), and whichever
 * comes second agrees with the first.
 * @param {LoadedView} view
 * @param {number} messageId the sibling whose branch to show
 * @param {'prev' | 'next'} direction the arrow used (it keeps the focus)
 */
async function activateBranch(view, messageId, direction) {
  if (view.branching) return;
  view.branching = true;
  render(view);
  const resets = view.resets;
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/branches/activate`, { message_id: messageId }));
  if (chat && !view.closed && view.resets === resets) {
    /** @type {MessagePage | undefined} */
    const page = await attempt(() => api('GET', `/chats/${view.chatId}/messages?window=true`));
    if (page && !view.closed && view.resets === resets) replaceMessages(view, page);
  }
  view.branching = false;
  if (view.closed) return;
  if (chat) applyChat(view, chat);
  else render(view);
  if (!chat) return;
  // The focus stays on the arrow used (or the other one, at an end).
  const el = view.dom.messages.querySelector(`[data-message-id="${messageId}"]`);
  const message = view.messages.get(messageId);
  if (el && message) {
    const siblings = message.sibling_ids || [];
    announce(`Version ${siblings.indexOf(messageId) + 1} of ${siblings.length} shown.`);
    const arrows = [byTestId(el, `branch-${direction}`), byTestId(el, `branch-${direction === 'prev' ? 'next' : 'prev'}`)];
    const target = /** @type {HTMLButtonElement | undefined} */ (arrows.find((b) => b && !(/** @type {HTMLButtonElement} */ (b)).disabled));
    if (target) target.focus();
  }
}

/**
 * "Regenerate": `POST /chats/{chat}/messages/{message}/regenerate`. The chat
 * runs again and a new answer, a sibling of this one, streams in; this one
 * (on a branch of its own now) leaves the view at once.
 * @param {LoadedView} view
 * @param {number} messageId
 */
async function regenerateAnswer(view, messageId) {
  if (view.branching) return;
  view.branching = true;
  render(view);
  const newest = Math.max(0, ...view.messages.keys());
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/messages/${messageId}/regenerate`));
  view.branching = false;
  if (view.closed) return;
  if (chat) {
    dropFrom(view, messageId, newest);
    applyChat(view, chat);
  } else {
    render(view);
  }
}

/**
 * "Fork from here": `POST /chats/{chat}/fork {message_id}`, then the new
 * chat opens.
 * @param {LoadedView} view
 * @param {number} messageId
 */
async function forkChat(view, messageId) {
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/fork`, { message_id: messageId }));
  if (!chat || view.closed) return;
  addCreated(chat);
  location.hash = `#/chats/${chat.id}`;
  refreshChats();
  announce(`Forked into "${chat.title}".`);
}

/**
 * On a fork, "Forked from <title>" under the header, a link to the chat it
 * came from (its title from the list, else read once).
 * @param {LoadedView} view
 */
async function renderOrigin(view) {
  const from = view.chat.forked_from;
  const el = view.dom.origin;
  if (!from) {
    el.hidden = true;
    el.replaceChildren();
    return;
  }
  const link = h('a', { href: `#/chats/${from.chat_id}`, testid: 'forked-from-link', class: 'chat-origin-link' }, 'another chat');
  el.replaceChildren('Forked from ', link);
  el.hidden = false;
  const listed = listedChat(from.chat_id);
  /** @type {Chat | undefined} */
  const source = listed || await api('GET', `/chats/${from.chat_id}`, undefined, { quiet: true }).catch(() => undefined);
  if (view.closed) return;
  if (source) link.textContent = source.title || 'Untitled';
  else link.replaceWith('a chat that is no longer available');
}
