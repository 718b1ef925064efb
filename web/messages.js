// @ts-check
// The messages of the chat view: each committed message (assistant text
// as Markdown, user text as plain text, long texts collapsed, reasoning,
// tool calls and results, files, the mark of an answer cut short), the
// records of context compaction and clearing, the "load earlier" control
// of a long chat opened as a window, the editing of a user message, and
// each message's branch controls (API.md "Branches, regenerate and fork":
// "< n/m >" between siblings, "Regenerate" on the answer that ends the
// branch, "Fork from here"), which call back through `view.actions`.
// Also the parts shared with the live preview (`renderPart`,
// `renderReasoning`, `roleLabel`).

import { h, byTestId, autoGrow, isLong, countLines, numberFormat, prettyJsonString, formatTime, announce } from './ui.js';
import { api, attempt, downloadFile } from './api.js';
import { renderMarkdownInto, copyText } from './markdown.js';
import { loadedModels, modelName } from './models.js';
import { textOf, finishReasonOf, applyEditResult, isIdle, lastAnswerId } from './chat-state.js';
import { renderWorkspacePart } from './workspace.js';

/** @typedef {import('./chat-state.js').ChatView} ChatView */
/** @typedef {import('./chat-state.js').LoadedView} LoadedView */
/** @typedef {import('./wire.js').ChatMessage} ChatMessage */
/** @typedef {import('./wire.js').MessagePage} MessagePage */
/** @typedef {import('./wire.js').EditResult} EditResult */
/** @typedef {import('./wire.js').Part} Part */
/** @typedef {import('./wire.js').FilePart} FilePart */
/** @typedef {import('./wire.js').Role} Role */

/** What a finish reason says under an answer (absent or null: nothing). */
/** @type {Record<string, string>} */
const FINISH_MARKS = {
  length: "cut short: the model's output/context limit was reached",
  content_filter: "cut short: the provider's content filter stopped the answer",
  interrupted: 'interrupted',
};

/** Messages fetched per "load earlier" click (the server also bounds the page by bytes). */
const LOAD_EARLIER_LIMIT = 50;

/** The name of the visible tool call a compaction leaves. */
const COMPACTION_TOOL = 'chatd_compact';

/** Image types the model sees as images (the rest is text or a placeholder). */
const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];

/**
 * Renders the messages in id order, keeping the elements of messages whose
 * revision (and marks) did not change, and the one being edited.
 * @param {LoadedView} view
 */
export function renderMessages(view) {
  const container = view.dom.messages;
  /** @type {Map<number, HTMLElement>} */
  const existing = new Map();
  for (const el of /** @type {HTMLCollectionOf<HTMLElement>} */ (container.children)) {
    if (el.dataset.messageId) existing.set(Number(el.dataset.messageId), el);
  }
  const messages = [...view.messages.entries()].sort(([a], [b]) => a - b);
  const gapState = view.gap;
  const gap = gapState && view.messages.has(gapState.after) ? gapControl(view, gapState) : null;
  const editable = !view.chat.archived;
  const idle = isIdle(view) && !view.branching;
  const lastAnswer = lastAnswerId(view);
  /** @type {ChildNode | null} */
  let previous = null;
  for (const [id, message] of messages) {
    let el = existing.get(id);
    existing.delete(id);
    // Archiving changes whether user messages can be edited; an interrupt
    // seen by the UI adds a mark; the branch controls follow the siblings
    // and whether the chat is idle.
    const siblings = (message.sibling_ids || []).join(',');
    const branchKey = siblings.includes(',') || id === lastAnswer ? `${siblings}:${id === lastAnswer}:${idle}` : '';
    const key = `${message.revision}:${editable}:${finishReasonOf(view, message)}:${branchKey}`;
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
    if (!el) continue; // (the message being edited always has its element)
    /** @type {ChildNode | null} */
    const expectedPosition = previous ? previous.nextSibling : container.firstChild;
    if (el !== expectedPosition) container.insertBefore(el, expectedPosition);
    previous = el;
    if (gap && gapState && id === gapState.after) {
      if (gap !== previous.nextSibling) container.insertBefore(gap, previous.nextSibling);
      previous = gap;
    }
  }
  for (const el of existing.values()) el.remove();
  for (const el of [...container.querySelectorAll(':scope > .load-earlier')]) if (el !== gap) el.remove();
}

/**
 * Forces every message to render again (e.g. once the model names are known).
 * @param {ChatView} view
 */
export function rerenderMessages(view) {
  for (const el of /** @type {HTMLCollectionOf<HTMLElement>} */ (view.dom.messages.children)) el.dataset.key = '';
  view.actions.render();
}

/**
 * The "load earlier" control between the loaded head and tail of a long chat.
 * @param {LoadedView} view
 * @param {{omitted: number}} gap
 */
function gapControl(view, gap) {
  const { omitted } = gap;
  const label = view.loadingEarlier ? 'Loading…' : `Load earlier messages (${omitted} more)`;
  let el = view.dom.gapEl;
  if (!el) {
    const button = h('button', { type: 'button', class: 'btn', testid: 'load-earlier', onclick: () => loadEarlier(view) });
    el = h('div', { class: 'load-earlier', testid: 'load-earlier-gap', role: 'separator' }, button);
    view.dom.gapEl = el;
  }
  const button = /** @type {HTMLButtonElement} */ (el.firstChild);
  button.textContent = label;
  button.disabled = view.loadingEarlier;
  return el;
}

/**
 * Loads the newest page of the omitted middle (before the loaded tail) and
 * inserts it in place; the control stays above it until the gap is closed.
 * @param {LoadedView} view
 */
async function loadEarlier(view) {
  const gap = view.gap;
  if (!gap || view.loadingEarlier) return;
  view.loadingEarlier = true;
  view.actions.render();
  const path = `/chats/${view.chatId}/messages?before_id=${gap.before}&limit=${LOAD_EARLIER_LIMIT}`;
  /** @type {MessagePage | undefined} */
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
  view.actions.render();
}

/**
 * A compaction's record (its visible `chatd_compact` call and result) as
 * one collapsed "Context compacted" entry that opens to the summary, and a
 * clear-context boundary as a divider; `null` for any other message.
 * @param {ChatMessage} message
 * @returns {HTMLElement | null}
 */
function renderContextRecord(message) {
  const dataset = { role: message.role, messageId: String(message.id), revision: String(message.revision) };
  const parts = message.content;
  if (parts.length && parts.every((p) => p.type === 'tool-call' && p.tool_name === COMPACTION_TOOL)) {
    // The result below says it all.
    return h('div', { class: 'compaction-call', hidden: true, dataset });
  }
  const result = /** @type {import('./wire.js').ToolResultPart | undefined} */ (
    parts.find((p) => p.type === 'tool-result' && p.tool_name === COMPACTION_TOOL)
  );
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

/**
 * One committed message.
 * @param {LoadedView} view
 * @param {ChatMessage} message
 * @returns {HTMLElement}
 */
function renderMessage(view, message) {
  const record = renderContextRecord(message);
  if (record) return record;
  const text = textOf(message.content);
  const canEdit = message.role === 'user' && !view.chat.archived;
  const model = message.role === 'assistant' ? modelName(message.model_config_id, loadedModels()) : null;
  const header = h(
    'header',
    { class: 'message-meta' },
    h('span', { class: 'role' }, roleLabel(message.role)),
    model ? h('span', { class: 'message-model', testid: 'message-model' }, model) : null,
    h('time', { datetime: message.created_at, title: new Date(message.created_at).toLocaleString() }, formatTime(message.created_at)),
    message.usage ? h('span', {
      class: 'message-usage',
      testid: 'message-usage',
      title: `This answer: ${numberFormat.format(message.usage.output_tokens)} tokens written; its model call read ${numberFormat.format(promptTokens(message.usage))} prompt tokens`,
    }, `${numberFormat.format(message.usage.output_tokens)} tokens out`) : null,
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
    renderCitations(message.content),
    message.content.filter((p) => p.type !== 'text' && p.type !== 'reasoning').map(renderPart),
    mark,
    branchControls(view, message, text),
  );
  return article;
}

/**
 * The row under a message: "< n/m >" when it has siblings (the arrows show
 * the previous or next one's branch; disabled at the ends and while the
 * chat is busy), "Regenerate" on the answer that ends the active branch of
 * an idle chat, and "Fork from here".
 * @param {LoadedView} view
 * @param {ChatMessage} message
 * @param {string} text the message's text (Markdown for an answer), for Copy
 * @returns {HTMLElement}
 */
function branchControls(view, message, text) {
  const idle = isIdle(view) && !view.branching;
  const siblings = message.sibling_ids || [];
  const index = siblings.indexOf(message.id);
  let nav = null;
  if (siblings.length > 1 && index >= 0) {
    const busyTitle = idle ? undefined : 'Available when the reply is done';
    const prev = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet branch-arrow',
      testid: 'branch-prev',
      'aria-label': 'Previous version',
      title: busyTitle,
      disabled: !idle || index === 0,
      onclick: () => view.actions.activate(siblings[index - 1], 'prev'),
    }, '<');
    const next = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet branch-arrow',
      testid: 'branch-next',
      'aria-label': 'Next version',
      title: busyTitle,
      disabled: !idle || index === siblings.length - 1,
      onclick: () => view.actions.activate(siblings[index + 1], 'next'),
    }, '>');
    const position = h('span', {
      class: 'branch-position',
      testid: 'branch-position',
      title: `Version ${index + 1} of ${siblings.length}`,
    }, `${index + 1}/${siblings.length}`);
    nav = h('span', { class: 'branch-nav', testid: 'branch-nav', role: 'group', 'aria-label': `Version ${index + 1} of ${siblings.length}` }, prev, position, next);
  }
  const regenerate = idle && !view.chat.archived && message.id === lastAnswerId(view)
    ? h('button', { type: 'button', class: 'btn btn-small btn-quiet', testid: 'regenerate', 'aria-label': 'Regenerate the answer', onclick: () => view.actions.regenerate(message.id) }, 'Regenerate')
    : null;
  const fork = h('button', {
    type: 'button',
    class: 'btn btn-small btn-quiet',
    testid: 'fork-message',
    title: 'A new chat with a copy of the conversation up to this message',
    onclick: () => view.actions.fork(message.id),
  }, 'Fork from here');
  const copy = text
    ? h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'copy-message',
      'aria-label': message.role === 'assistant' ? 'Copy the answer as Markdown' : 'Copy the message',
      onclick: (/** @type {Event} */ e) => copyMessage(/** @type {HTMLButtonElement} */ (e.currentTarget), text),
    }, 'Copy')
    : null;
  return h('footer', { class: 'message-actions', testid: 'message-actions' }, nav, copy, regenerate, fork);
}

/**
 * The whole prompt of a model call: new input, cache reads and writes.
 * @param {import('./wire.js').Usage} usage
 */
function promptTokens(usage) {
  return (usage.input_tokens || 0) + (usage.cache_read_tokens || 0) + (usage.cache_creation_tokens || 0);
}

/**
 * "Copy" under a message: its text (an answer's Markdown) on the clipboard.
 * @param {HTMLButtonElement & {copyTimer?: ReturnType<typeof setTimeout>}} button
 * @param {string} text
 */
async function copyMessage(button, text) {
  const ok = await copyText(text);
  button.textContent = ok ? 'Copied' : 'Copy failed';
  button.dataset.copied = String(ok);
  announce(ok ? 'Message copied.' : 'Copying failed.');
  clearTimeout(button.copyTimer);
  button.copyTimer = setTimeout(() => {
    button.textContent = 'Copy';
    delete button.dataset.copied;
  }, 2000);
}

/**
 * A long text, collapsed to its first lines, with "Show all".
 * @param {HTMLElement} body
 * @param {string} text
 */
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

/**
 * @param {HTMLElement} root a message, or its collapsible text
 * @param {boolean} collapsed
 */
function setCollapsed(root, collapsed) {
  const wrap = root.classList.contains('collapsible') ? root : root.querySelector('.collapsible');
  if (!wrap) return;
  wrap.classList.toggle('collapsed', collapsed);
  const toggle = /** @type {HTMLElement} */ (byTestId(wrap, 'message-expand'));
  toggle.setAttribute('aria-expanded', String(!collapsed));
  toggle.textContent = collapsed ? 'Show all' : 'Show less';
}

/** @param {Role} role */
export function roleLabel(role) {
  return { user: 'You', assistant: 'Assistant', tool: 'Tool', system: 'System' }[role] || role;
}

/** @param {Part} part a reasoning part */
export function renderReasoning(part) {
  return h('details', { class: 'reasoning' }, h('summary', {}, 'Reasoning'), h('div', { class: 'reasoning-text' }, part.type === 'reasoning' ? part.text : ''));
}

/**
 * Tool calls, tool results and files.
 * @param {Part} part
 * @returns {HTMLElement}
 */
export function renderPart(part) {
  // The workspace tools' calls and results have their own rendering.
  const workspacePart = renderWorkspacePart(part);
  if (workspacePart) return workspacePart;
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
    case 'provider-tool-call':
      return h(
        'div',
        { class: 'tool-call provider-tool-call', testid: 'provider-tool-call' },
        h('div', { class: 'tool-head' }, `${providerToolLabel(part.tool_name)}: `, h('span', { class: 'provider-query' }, providerQuery(part.input))),
      );
    case 'provider-tool-result':
      return h(
        'div',
        { class: `tool-result provider-tool-result${part.is_error ? ' is-error' : ''}`, testid: 'provider-tool-result' },
        part.is_error
          ? h('div', { class: 'tool-head' }, `${providerToolLabel(part.tool_name)} failed: `, h('code', {}, (part.result && part.result.error_code) || JSON.stringify(part.result)))
          : h(
              'ul',
              { class: 'search-results' },
              (Array.isArray(part.result) ? part.result : []).map((r) =>
                h('li', {}, safeLink(r && r.url, (r && r.title) || (r && r.url) || ''), r && r.page_age ? h('span', { class: 'page-age' }, ` (${r.page_age})`) : null),
              ),
            ),
      );
    case 'citation':
      return h('span');
    case 'file':
      return renderFilePart(part);
    default:
      return h('pre', { class: 'json' }, JSON.stringify(part, null, 2));
  }
}

/**
 * A provider tool's name as shown: `web_search` → "web search".
 * @param {string} name
 */
function providerToolLabel(name) {
  return String(name || 'provider tool').replace(/_/g, ' ');
}

/**
 * What a provider tool call asked: a search's query, else its JSON input.
 * @param {any} input
 * @returns {string}
 */
function providerQuery(input) {
  if (input && typeof input.query === 'string') return input.query;
  return JSON.stringify(input ?? null);
}

/**
 * A link to `url` opened apart from the app (`rel="noopener noreferrer"`),
 * only for `http:` and `https:` URLs; anything else is shown as text.
 * @param {string | undefined} url
 * @param {string} label
 * @returns {HTMLElement}
 */
export function safeLink(url, label) {
  let ok = false;
  try {
    const parsed = new URL(String(url));
    ok = parsed.protocol === 'http:' || parsed.protocol === 'https:';
  } catch {
    ok = false;
  }
  if (!ok) return h('span', { class: 'unsafe-link' }, label || String(url ?? ''));
  const link = h('a', { href: String(url), target: '_blank', rel: 'noopener noreferrer' }, label || String(url));
  return link;
}

/**
 * The citations of a message's text parts as numbered source links under
 * the text (nothing when there are none).
 * @param {Part[]} parts
 * @returns {HTMLElement | null}
 */
export function renderCitations(parts) {
  /** @type {import('./wire.js').Citation[]} */
  const citations = [];
  for (const p of parts) if (p.type === 'text' && p.citations) citations.push(...p.citations);
  if (!citations.length) return null;
  return h(
    'ol',
    { class: 'citations', testid: 'citations' },
    citations.map((c) => h('li', {}, safeLink(c.url, c.title || c.url), c.cited_text ? h('q', { class: 'cited-text' }, c.cited_text) : null)),
  );
}

/**
 * Object URLs of downloaded files, by file id (files never change).
 * @type {Map<string, Promise<string>>}
 */
const fileUrls = new Map();

/**
 * Resolves to an object URL of file `id` (fetched once with the token).
 * @param {string} id
 */
function fileUrl(id) {
  let url = fileUrls.get(id);
  if (!url) {
    url = downloadFile(id).then((blob) => URL.createObjectURL(blob));
    url.catch(() => fileUrls.delete(id));
    fileUrls.set(id, url);
  }
  return url;
}

/**
 * A file part of a message: an image is shown, anything else is a download.
 * @param {FilePart} part
 */
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

// ---------------------------------------------------------------------------
// Editing a user message: `PATCH /chats/{chat}/messages/{message}` reruns
// the conversation from it, as a new sibling (the old text stays on its
// branch, one arrow away).

/**
 * @param {LoadedView} view
 * @param {number} id
 */
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
  const body = /** @type {HTMLElement} */ (byTestId(el, 'collapsible') || byTestId(el, 'message-text'));
  body.hidden = true;
  el.append(editor);
  autoGrow(input);
  input.focus();
}

/** @param {LoadedView} view */
function cancelEdit(view) {
  const id = view.editing;
  view.editing = null;
  /** @type {HTMLElement | null} */
  const el = view.dom.messages.querySelector(`[data-message-id="${id}"]`);
  if (el) el.dataset.key = ''; // force a clean re-render
  view.actions.render();
}

/**
 * @param {LoadedView} view
 * @param {number} id
 * @param {string} text
 */
async function saveEdit(view, id, text) {
  if (!text.trim()) return;
  /** @type {Record<string, unknown>} */
  const body = { content: [{ type: 'text', text }] };
  const model = view.dom.composer.model.value;
  if (model) body.model_config_id = model;
  /** @type {EditResult | undefined} */
  const result = await attempt(() => api('PATCH', `/chats/${view.chatId}/messages/${id}`, body));
  if (!result || view.closed) return;
  applyEditResult(view, result);
  cancelEdit(view);
}
