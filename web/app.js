// chatd web UI: one ES module, no build step, no dependencies.
//
// What this file owns:
// - sign-in with an API token (localStorage `chatd.token`, checked with
//   GET /api/v2/users/me) and sign-out;
// - the chat list (polled from GET /api/v2/chats, archived toggle);
// - the new-chat composer (model select, dynamic tools JSON) at `#/`;
// - the chat view at `#/chats/<id>`: the live stream over the WebSocket
//   (`chatd.bearer.<token>` subprotocol, reconnect with backoff and
//   `?after_id=`), messages, the live preview, queue, action-required form,
//   error and retry banners, usage, archive, edit, interrupt;
// - toasts for failed requests.
//
// Wire contract: ../../shared/API.md. Test selectors (`data-testid`):
// web/README.md. All user and model text goes through textContent (the `h`
// helper), never innerHTML.

const TOKEN_KEY = 'chatd.token';
const API = '/api/v2';
const LIST_POLL_MS = 4000;
const BACKOFF_INITIAL_MS = 500;
const BACKOFF_MAX_MS = 10000;
const TOAST_MS = 6000;

// ---------------------------------------------------------------------------
// State

const app = {
  token: null,
  me: null,
  chats: [],
  showArchived: false,
  models: null,
  listTimer: null,
  view: null, // the open chat's state (newChatView() or chatView())
};

/** Fresh state of an open chat. */
function chatView(chatId) {
  return {
    chatId,
    chat: null, // Chat object (GET /chats/{id}); status kept current by events
    messages: new Map(), // id -> ChatMessage
    preview: null, // {hv, ga, seq, role, parts: [...]}
    finishedEpisodes: new Set(), // "hv:ga" whose preview a commit replaced
    historyVersion: 0,
    queue: [],
    actionRequired: null,
    error: null,
    retry: null,
    editing: null, // message id being edited
    conn: null, // {ws, open}
    backoff: 0,
    reconnectTimer: null,
    closed: false,
    dom: null,
  };
}

// ---------------------------------------------------------------------------
// DOM helpers

/**
 * Creates an element. `props`: `testid`, `class`, `dataset`, `on<event>`
 * handlers, booleans and `value` as properties, other strings as
 * attributes. Children: nodes or strings (as text nodes).
 */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined) continue;
    if (key === 'testid') el.dataset.testid = value;
    else if (key === 'class') el.className = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else if (typeof value === 'boolean' || key === 'value') el[key] = value;
    else el.setAttribute(key, String(value));
  }
  appendChildren(el, children);
  return el;
}

function appendChildren(el, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

const $ = (id) => document.getElementById(id);

function byTestId(root, testid) {
  return root.querySelector(`[data-testid="${testid}"]`);
}

// ---------------------------------------------------------------------------
// HTTP

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `Request failed (HTTP ${status}).`);
    this.status = status;
    this.body = body;
  }
}

/**
 * Calls the API with the signed-in token. Resolves to the JSON body (or
 * null); rejects with ApiError. Shows a toast with the error `message`
 * unless `quiet`.
 */
async function api(method, path, body, { quiet = false, token = app.token } = {}) {
  const init = { method, headers: { Authorization: `Bearer ${token}` } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(API + path, init);
  } catch (err) {
    const error = new ApiError(0, { message: 'Network error: the server is unreachable.' });
    if (!quiet) toast(error.message);
    throw error;
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    const error = new ApiError(response.status, json);
    if (!quiet) toast(error.message);
    if (response.status === 401 && token === app.token && app.me) signOut();
    throw error;
  }
  return json;
}

/** Runs `fn` and swallows ApiError (already shown as a toast). */
async function attempt(fn) {
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof ApiError)) {
      console.error(err);
      toast(String(err.message || err));
    }
    return undefined;
  }
}

// ---------------------------------------------------------------------------
// Toast: one at a time, the newest wins.

let toastTimer = null;

function toast(message) {
  const box = $('toasts');
  box.replaceChildren(
    h('div', { class: 'toast', role: 'alert', testid: 'toast', onclick: clearToast }, message),
  );
  clearTimeout(toastTimer);
  toastTimer = setTimeout(clearToast, TOAST_MS);
}

function clearToast() {
  $('toasts').replaceChildren();
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
  app.token = token;
  app.me = me;
  showSignedIn();
}

function signOut() {
  localStorage.removeItem(TOKEN_KEY);
  app.token = null;
  app.me = null;
  app.chats = [];
  app.models = null;
  clearInterval(app.listTimer);
  closeView();
  $('chat-list').replaceChildren();
  $('main').replaceChildren();
  $('who').hidden = true;
  $('app-view').hidden = true;
  $('signin-view').hidden = false;
  $('token-input').value = '';
  $('token-input').focus();
}

function showSignedIn() {
  $('signin-view').hidden = true;
  $('app-view').hidden = false;
  $('who').hidden = false;
  $('username').textContent = app.me.username;
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
    app.me = await api('GET', '/users/me', undefined, { token, quiet: true });
    app.token = token;
    showSignedIn();
  } catch (err) {
    if (err.status !== 401) toast(err.message);
    signOut();
  }
}

// ---------------------------------------------------------------------------
// Chat list

async function refreshChats() {
  if (!app.token) return;
  const query = app.showArchived ? '?archived=true&limit=100' : '?limit=100';
  const chats = await api('GET', `/chats${query}`, undefined, { quiet: true }).catch(() => null);
  if (!chats) return;
  app.chats = chats;
  syncOpenChatTitle();
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

function renderChatList() {
  const openId = app.view && app.view.chatId;
  const items = app.chats.map((chat) => {
    const status = openId === chat.id && app.view.chat ? app.view.chat.status : chat.status;
    return h(
      'li',
      { testid: 'chat-item', dataset: { chatId: chat.id }, class: 'chat-item' },
      h(
        'a',
        {
          href: `#/chats/${chat.id}`,
          class: 'chat-link',
          'aria-current': openId === chat.id ? 'page' : null,
        },
        h('span', { class: 'chat-title', testid: 'chat-title' }, chat.title || 'Untitled'),
        statusBadge(status, 'status-badge'),
      ),
    );
  });
  if (items.length === 0) {
    items.push(h('li', { class: 'empty' }, app.showArchived ? 'No archived chats.' : 'No chats yet.'));
  }
  $('chat-list').replaceChildren(...items);
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

// ---------------------------------------------------------------------------
// Routing: `#/` (new chat composer) and `#/chats/<id>`.

function route() {
  if (!app.me) return;
  const match = location.hash.match(/^#\/chats\/([0-9a-fA-F-]{36})$/);
  const chatId = match ? match[1].toLowerCase() : null;
  if (app.view && app.view.chatId === chatId && chatId) return;
  closeView();
  if (chatId) openChat(chatId);
  else openNewChat();
  renderChatList();
}

function closeView() {
  const view = app.view;
  app.view = null;
  if (!view) return;
  view.closed = true;
  clearTimeout(view.reconnectTimer);
  if (view.conn) view.conn.ws.close(1000, 'leaving');
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
  const model = h('select', { id: 'new-chat-model', testid: 'new-chat-model' }, h('option', { value: '' }, 'Server default'));
  const composer = buildComposer({ newChat: true });
  const form = h(
    'section',
    { class: 'new-chat', 'aria-label': 'New chat' },
    h('h2', {}, 'New chat'),
    h(
      'div',
      { class: 'new-chat-options' },
      h('label', { for: 'new-chat-model' }, 'Model'),
      model,
      h('label', { for: 'new-chat-tools' }, 'Dynamic tools (optional JSON array)'),
      tools,
      h('p', { class: 'hint', id: 'new-chat-tools-help' }, 'Tools the model may call; you answer each call in the chat.'),
      toolsError,
    ),
    composer.root,
  );
  $('main').replaceChildren(form);
  composer.input.focus();
  loadModels(model);
}

async function loadModels(select) {
  if (!app.models) {
    app.models = await api('GET', '/chats/models', undefined, { quiet: true }).catch(() => []);
  }
  for (const m of app.models) {
    const label = (m.display_name || m.model) + (m.is_default ? ' (default)' : '');
    select.append(h('option', { value: m.id }, label));
  }
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
  return tools.map((t) => ({ name: t.name, description: t.description || '', input_schema: t.input_schema }));
}

async function createChat(text) {
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
    return false;
  }
  const body = { content: [{ type: 'text', text }] };
  const model = $('new-chat-model').value;
  if (model) body.model_config_id = model;
  if (tools) body.dynamic_tools = tools;
  const chat = await attempt(() => api('POST', '/chats', body));
  if (!chat) return false;
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
  const input = h('textarea', {
    id: 'composer-input',
    testid: 'composer-input',
    rows: 3,
    placeholder: newChat ? 'Write the first message…' : 'Write a message… (Ctrl+Enter sends)',
    'aria-label': 'Message',
  });
  const sendQueue = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'send-queue' }, newChat ? 'Start chat' : 'Send');
  const sendInterrupt = newChat
    ? null
    : h('button', {
        type: 'button',
        class: 'btn',
        testid: 'send-interrupt',
        title: 'Interrupt the running turn and send now',
      }, 'Send now (interrupt)');
  const root = h('form', { class: 'composer', 'aria-label': 'Composer' }, input, h('div', { class: 'composer-actions' }, sendInterrupt, sendQueue));
  const submit = async (behavior) => {
    const text = input.value;
    if (!text.trim()) {
      input.focus();
      return;
    }
    setBusy(root, true);
    const ok = newChat ? await createChat(text) : await sendMessage(text, behavior);
    setBusy(root, false);
    if (ok) input.value = '';
  };
  root.addEventListener('submit', (e) => {
    e.preventDefault();
    submit('queue');
  });
  if (sendInterrupt) sendInterrupt.addEventListener('click', () => submit('interrupt'));
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      submit('queue');
    }
  });
  return { root, input, sendQueue, sendInterrupt };
}

function setBusy(form, busy) {
  for (const button of form.querySelectorAll('button')) button.disabled = busy;
  form.setAttribute('aria-busy', String(busy));
}

// ---------------------------------------------------------------------------
// Chat view: skeleton, then live updates

async function openChat(chatId) {
  clearToast(); // A failure shown for the previous view is stale here.
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
    view.dom.interrupt.disabled = true;
    view.dom.archive.replaceChildren();
    const composer = view.dom.composer;
    composer.input.disabled = composer.sendQueue.disabled = composer.sendInterrupt.disabled = true;
    return;
  }
  view.chat = chat;
  view.historyVersion = chat.history_version;
  view.error = chat.status === 'error' ? chat.last_error : null;
  render(view);
  connect(view);
}

function buildChatDom(view) {
  const title = h('h2', { class: 'chat-heading' }, 'Loading…');
  const status = h('span', { class: 'status-badge', testid: 'chat-status' }, '…');
  const connection = h('span', { class: 'connection', testid: 'connection', role: 'status', 'aria-label': 'Connection' }, 'reconnecting');
  const usage = h('span', { class: 'usage', testid: 'usage', title: 'Token usage: input / output / total' });
  const interrupt = h('button', { type: 'button', class: 'btn btn-warn', testid: 'interrupt', disabled: true, onclick: () => interruptChat(view) }, 'Interrupt');
  const archive = h('span', { class: 'archive-slot' });
  const banners = h('div', { class: 'banners' });
  const messages = h('div', { class: 'messages', testid: 'messages', role: 'log', 'aria-label': 'Messages', 'aria-live': 'polite' });
  const previewSlot = h('div', { class: 'preview-slot' });
  const scroller = h('div', { class: 'scroller' }, messages, previewSlot);
  const action = h('div', { class: 'action-slot' });
  const queue = h('section', { class: 'queue', testid: 'queue', 'aria-label': 'Queued messages', hidden: true });
  const composer = buildComposer({ newChat: false });
  const root = h(
    'section',
    { class: 'chat', testid: 'chat-view', dataset: { chatId: view.chatId } },
    h(
      'header',
      { class: 'chat-header' },
      h('div', { class: 'chat-header-main' }, title, status, connection),
      h('div', { class: 'chat-header-tools' }, usage, interrupt, archive),
    ),
    banners,
    scroller,
    action,
    queue,
    composer.root,
  );
  return { root, title, status, connection, usage, interrupt, archive, banners, messages, previewSlot, scroller, action, queue, composer, actionKey: null };
}

/** Re-renders every part of the chat view from `view`. */
function render(view) {
  if (view.closed || !view.chat) return;
  const stick = isScrolledToBottom(view.dom.scroller);
  renderHeader(view);
  renderBanners(view);
  renderMessages(view);
  renderPreview(view);
  renderActionRequired(view);
  renderQueue(view);
  renderUsage(view);
  if (stick) view.dom.scroller.scrollTop = view.dom.scroller.scrollHeight;
}

function isScrolledToBottom(el) {
  return el.scrollHeight - el.scrollTop - el.clientHeight < 40;
}

function renderHeader(view) {
  const { chat, dom } = view;
  dom.title.textContent = chat.title || 'Untitled';
  dom.status.textContent = chat.status;
  dom.status.className = `status-badge status-${chat.status}`;
  dom.interrupt.disabled = chat.status !== 'running' || chat.archived;
  const archiveButton = chat.archived
    ? h('button', { type: 'button', class: 'btn', testid: 'unarchive', onclick: () => setArchived(view, false) }, 'Unarchive')
    : h('button', { type: 'button', class: 'btn btn-quiet', testid: 'archive', onclick: () => setArchived(view, true) }, 'Archive');
  if (dom.archive.firstChild?.dataset.testid !== archiveButton.dataset.testid) {
    dom.archive.replaceChildren(archiveButton);
  }
  const composer = dom.composer;
  composer.input.disabled = chat.archived;
  composer.input.placeholder = chat.archived ? 'This chat is archived.' : 'Write a message… (Ctrl+Enter sends)';
  const busy = chat.status !== 'waiting' && chat.status !== 'error';
  composer.sendQueue.textContent = busy ? 'Queue' : 'Send';
  composer.sendQueue.disabled = chat.archived;
  composer.sendInterrupt.disabled = chat.archived;
}

function setConnection(view, live) {
  view.dom.connection.textContent = live ? 'live' : 'reconnecting';
  view.dom.connection.classList.toggle('live', live);
}

// --- messages --------------------------------------------------------------

function renderMessages(view) {
  const container = view.dom.messages;
  const existing = new Map();
  for (const el of container.children) existing.set(Number(el.dataset.messageId), el);
  const ids = [...view.messages.keys()].sort((a, b) => a - b);
  let previous = null;
  for (const id of ids) {
    const message = view.messages.get(id);
    let el = existing.get(id);
    existing.delete(id);
    // Archiving or unarchiving changes whether user messages can be edited.
    const editable = String(!view.chat?.archived);
    const stale = !el || Number(el.dataset.revision) !== message.revision || el.dataset.editable !== editable;
    if (stale && view.editing !== id) {
      const fresh = renderMessage(view, message);
      fresh.dataset.editable = editable;
      if (el) el.replaceWith(fresh);
      el = fresh;
    }
    const expectedPosition = previous ? previous.nextSibling : container.firstChild;
    if (el !== expectedPosition) container.insertBefore(el, expectedPosition);
    previous = el;
  }
  for (const el of existing.values()) el.remove();
}

function renderMessage(view, message) {
  const text = message.content.filter((p) => p.type === 'text').map((p) => p.text).join('');
  const canEdit = message.role === 'user' && !view.chat.archived;
  const header = h(
    'header',
    { class: 'message-meta' },
    h('span', { class: 'role' }, roleLabel(message.role)),
    h('time', { datetime: message.created_at, title: message.created_at }, formatTime(message.created_at)),
    message.usage ? h('span', { class: 'message-usage' }, `${message.usage.total_tokens} tokens`) : null,
    canEdit
      ? h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'edit-message', 'aria-label': 'Edit message', onclick: () => startEdit(view, message.id) }, 'Edit')
      : null,
  );
  return h(
    'article',
    {
      class: `message message-${message.role}`,
      testid: 'message',
      dataset: { role: message.role, messageId: String(message.id), revision: String(message.revision) },
    },
    header,
    message.content.filter((p) => p.type === 'reasoning').map(renderReasoning),
    h('div', { class: 'message-text', testid: 'message-text' }, text),
    message.content.filter((p) => p.type !== 'text' && p.type !== 'reasoning').map(renderPart),
  );
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
    case 'file':
      return h('div', { class: 'file-part' }, `File: ${part.name || part.file_id} (${part.media_type})`);
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
  const original = message.content.filter((p) => p.type === 'text').map((p) => p.text).join('');
  const input = h('textarea', { testid: 'edit-input', rows: 3, 'aria-label': 'Edit message', value: original });
  const save = h('button', { type: 'button', class: 'btn btn-primary btn-small', testid: 'edit-save', onclick: () => saveEdit(view, id, input.value) }, 'Save and rerun');
  const cancel = h('button', { type: 'button', class: 'btn btn-small', testid: 'edit-cancel', onclick: () => cancelEdit(view) }, 'Cancel');
  const editor = h('div', { class: 'editor' }, input, h('div', { class: 'editor-actions' }, cancel, save));
  byTestId(el, 'message-text').hidden = true;
  el.append(editor);
  input.focus();
}

function cancelEdit(view) {
  const id = view.editing;
  view.editing = null;
  const el = view.dom.messages.querySelector(`[data-message-id="${id}"]`);
  if (el) el.dataset.revision = '-1'; // force a clean re-render
  render(view);
}

async function saveEdit(view, id, text) {
  if (!text.trim()) return;
  const body = { content: [{ type: 'text', text }] };
  const result = await attempt(() => api('PATCH', `/chats/${view.chatId}/messages/${id}`, body));
  if (!result || view.closed) return;
  applyEditResult(view, result);
  cancelEdit(view);
}

/** Applies a PATCH answer: drop `deleted_message_ids`, upsert the rest. */
function applyEditResult(view, result) {
  for (const deleted of result.deleted_message_ids || []) view.messages.delete(deleted);
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
  const result = await attempt(() => api('PATCH', `/chats/${view.chatId}/messages/${lastUser.id}`, { content }));
  if (!result || view.closed) return;
  applyEditResult(view, result);
  render(view);
}

// --- live preview ----------------------------------------------------------

function renderPreview(view) {
  const slot = view.dom.previewSlot;
  const preview = view.preview;
  if (!preview || preview.parts.length === 0) {
    slot.replaceChildren();
    return;
  }
  const text = preview.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
  slot.replaceChildren(
    h(
      'article',
      { class: 'message message-assistant message-preview', testid: 'message-preview', 'aria-busy': 'true' },
      h('header', { class: 'message-meta' }, h('span', { class: 'role' }, roleLabel(preview.role)), h('span', { class: 'typing' }, 'writing…')),
      preview.parts.filter((p) => p.type === 'reasoning').map(renderReasoning),
      h('div', { class: 'message-text preview-text' }, text),
      preview.parts.filter((p) => p.type === 'tool-call').map(renderPart),
    ),
  );
}

// --- action required -------------------------------------------------------

function renderActionRequired(view) {
  const slot = view.dom.action;
  const action = view.chat.status === 'requires_action' ? view.actionRequired : null;
  const key = action ? action.tool_calls.map((c) => c.tool_call_id).join('\n') : null;
  if (key === view.dom.actionKey) return; // keep what the user typed
  view.dom.actionKey = key;
  if (!action) {
    slot.replaceChildren();
    return;
  }
  const forms = action.tool_calls.map((call, i) => {
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
  const deadline = h('p', { class: 'deadline', testid: 'action-deadline', dataset: { deadline: action.deadline_at || '' } });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary', testid: 'tool-submit' }, 'Submit results');
  const panel = h(
    'form',
    { class: 'action-required', testid: 'action-required', 'aria-label': 'Tool calls waiting for results' },
    h('h3', {}, 'The assistant is waiting for tool results'),
    deadline,
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
    banners.push(
      h(
        'div',
        { class: 'banner banner-error', testid: 'error-banner', role: 'alert' },
        h('strong', {}, 'Error'),
        e.kind ? h('span', { class: 'kind' }, e.kind) : null,
        h('span', { class: 'banner-message' }, e.message || 'The last turn failed.'),
        e.detail ? h('span', { class: 'banner-detail' }, e.detail) : null,
        canRetry ? h('button', { type: 'button', class: 'btn btn-small', testid: 'retry-button', onclick: () => retryTurn(view) }, 'Retry') : null,
      ),
    );
  }
  if (view.retry) {
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
}

function renderQueue(view) {
  const panel = view.dom.queue;
  panel.hidden = view.queue.length === 0;
  const items = view.queue.map((q, i) =>
    h(
      'li',
      { class: 'queued', testid: 'queued-message', dataset: { queuedId: String(q.id) } },
      h('span', { class: 'queued-text' }, q.content.filter((p) => p.type === 'text').map((p) => p.text).join('') || '(no text)'),
      h(
        'span',
        { class: 'queued-actions' },
        h('button', { type: 'button', class: 'btn btn-small', testid: 'queue-promote', 'aria-label': `Send queued message ${i + 1} next`, onclick: () => promoteQueued(view, q.id) }, 'Promote'),
        h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'queue-delete', 'aria-label': `Delete queued message ${i + 1}`, onclick: () => deleteQueued(view, q.id) }, 'Delete'),
      ),
    ),
  );
  panel.replaceChildren(h('h3', {}, `Queued (${view.queue.length})`), h('ol', { class: 'queue-list' }, items));
}

function renderUsage(view) {
  const total = { input: 0, output: 0, total: 0 };
  let reported = 0;
  let unreported = 0;
  for (const m of view.messages.values()) {
    if (!m.usage) {
      // Some servers (llama.cpp's Python server) stream no usage at all.
      if (m.role === 'assistant') unreported += 1;
      continue;
    }
    reported += 1;
    total.input += m.usage.input_tokens || 0;
    total.output += m.usage.output_tokens || 0;
    total.total += m.usage.total_tokens || 0;
  }
  let text = `Tokens: ${total.input} in / ${total.output} out / ${total.total} total`;
  if (reported === 0 && unreported > 0) {
    text = 'Tokens: not reported by the model server';
  } else if (unreported > 0) {
    text += ` (${unreported} ${unreported === 1 ? 'reply' : 'replies'} without usage from the model server)`;
  }
  view.dom.usage.textContent = text;
}

/** Updates the deadline and retry countdowns (every second). */
function updateCountdowns(view) {
  if (!view || view.closed || !view.dom) return;
  const deadline = byTestId(view.dom.action, 'action-deadline');
  if (deadline) {
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

async function sendMessage(text, busyBehavior) {
  const view = app.view;
  if (!view || !view.chatId) return false;
  const body = { content: [{ type: 'text', text }], busy_behavior: busyBehavior };
  const result = await attempt(() => api('POST', `/chats/${view.chatId}/messages`, body));
  if (!result || view.closed) return Boolean(result);
  for (const message of result.messages || []) upsertMessage(view, message);
  if (result.message) upsertMessage(view, result.message);
  if (result.queued_message && !view.queue.some((q) => q.id === result.queued_message.id)) {
    view.queue = [...view.queue, result.queued_message];
  }
  render(view);
  return true;
}

async function interruptChat(view) {
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
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/queue/${id}/promote`));
  if (chat && !view.closed) applyChat(view, chat);
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
    ws = new WebSocket(streamUrl(view), ['chatd', `chatd.bearer.${app.token}`]);
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
  for (const event of Array.isArray(events) ? events : [events]) {
    if (event.chat_id && event.chat_id !== view.chatId) continue;
    applyEvent(view, event);
  }
  render(view);
}

/** Applies one ChatStreamEvent to the view state (API.md "Stream"). */
function applyEvent(view, event) {
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
      break;
    case 'queue_update':
      view.queue = event.queued_messages;
      break;
    case 'action_required':
      view.actionRequired = event.action_required;
      break;
    case 'retry':
      view.retry = event.retry;
      break;
    case 'preview_reset':
      view.preview = null;
      break;
    case 'history_reset':
      view.messages.clear();
      view.editing = null;
      break;
    default:
      console.warn('unknown stream event', event.type);
  }
}

/** Inserts a message or replaces it when its revision is newer. */
function upsertMessage(view, message) {
  const known = view.messages.get(message.id);
  if (known && known.revision > message.revision) return;
  view.messages.set(message.id, message);
  if (message.role === 'assistant' || message.role === 'tool') {
    // The committed message replaces the preview that built it.
    if (view.preview) view.finishedEpisodes.add(`${view.preview.hv}:${view.preview.ga}`);
    view.preview = null;
    view.retry = null;
  }
}

function applyStatus(view, status, historyVersion) {
  if (!view.chat) return;
  view.chat.status = status;
  if (typeof historyVersion === 'number') view.historyVersion = Math.max(view.historyVersion, historyVersion);
  if (status !== 'error') view.error = null;
  if (status !== 'requires_action') view.actionRequired = null;
  if (status !== 'running') {
    view.retry = null;
    if (status !== 'interrupting') view.preview = null;
  }
  updateListStatus(view.chatId, status);
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
  if (view.retry && Date.now() >= new Date(view.retry.retrying_at).getTime()) view.retry = null;
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
  $('new-chat').addEventListener('click', () => {
    if (location.hash === '#/' || location.hash === '') {
      closeView();
      openNewChat();
      renderChatList();
    } else {
      location.hash = '#/';
    }
  });
  $('show-archived').addEventListener('change', (e) => {
    app.showArchived = e.target.checked;
    refreshChats();
  });
  window.addEventListener('hashchange', route);
  setInterval(() => updateCountdowns(app.view), 1000);
  restoreSession();
}

start();
