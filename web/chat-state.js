// @ts-check
// The state of an open chat (`ChatView`) and how the server changes it:
// stream events (API.md "Stream"), sends, edits and branch changes (API.md
// "Branches, regenerate and fork": the view holds the active branch only).
// It draws nothing: the
// chat view (./chat-view.js and the renderers it uses) draws this state; a
// new status only tells the list's badge (./sidebar.js) and, when a turn
// ends, the usage panel (./usage.js).
//
// Also remembered here, per browser tab (sessionStorage
// `chatd.interrupted.<chat id>`): the ids of answers cut by an interrupt
// the UI watched, for servers that do not send `finish_reason`.

import { refreshUsage } from './usage.js';
import { updateListStatus } from './sidebar.js';

/** @typedef {import('./wire.js').Chat} Chat */
/** @typedef {import('./wire.js').ChatStatus} ChatStatus */
/** @typedef {import('./wire.js').ChatMessage} ChatMessage */
/** @typedef {import('./wire.js').ChatError} ChatError */
/** @typedef {import('./wire.js').Part} Part */
/** @typedef {import('./wire.js').QueuedMessage} QueuedMessage */
/** @typedef {import('./wire.js').ActionRequired} ActionRequired */
/** @typedef {import('./wire.js').RetryState} RetryState */
/** @typedef {import('./wire.js').LivePart} LivePart */
/** @typedef {import('./wire.js').StreamEvent} StreamEvent */
/** @typedef {import('./wire.js').EditResult} EditResult */
/** @typedef {import('./wire.js').MessagePage} MessagePage */
/** @typedef {import('./stream.js').StreamClient} StreamClient */
/** @typedef {import('./composer.js').Composer} Composer */

/**
 * An episode of live parts: `(history_version, generation_attempt)`.
 * @typedef {{hv: number, ga: number}} Episode
 */

/**
 * The answer being written, built from `message_part` events.
 * @typedef {object} Preview
 * @property {number} hv
 * @property {number} ga
 * @property {number} seq the newest part's
 * @property {import('./wire.js').Role} role
 * @property {Part[]} parts merged deltas (see mergeDelta)
 */

/**
 * The elements of the open chat's page (chat-view.js `buildChatDom`), and
 * what the renderers keep between renders.
 * @typedef {object} ChatDom
 * @property {HTMLElement} root
 * @property {HTMLElement} title
 * @property {HTMLElement} origin "Forked from …" (hidden unless a fork)
 * @property {HTMLElement} status
 * @property {HTMLElement} connection
 * @property {HTMLElement} usage
 * @property {HTMLElement} context
 * @property {import('./ui.js').Menu} menu the chat's actions (`chat-menu`)
 * @property {HTMLButtonElement} compact its "Compact context"
 * @property {HTMLButtonElement} clear its "Clear context"
 * @property {HTMLButtonElement} planInput its "Plan mode" (`menuitemcheckbox`)
 * @property {HTMLButtonElement} archive its "Archive" / "Unarchive"
 * @property {HTMLButtonElement[]} exportItems its "Export as Markdown / JSON"
 * @property {HTMLButtonElement} toBottom the "scroll to the newest message" button
 * @property {HTMLElement} banners
 * @property {HTMLElement} messages
 * @property {HTMLElement} previewSlot
 * @property {(HTMLElement & {parts: PreviewParts}) | null} previewEl
 * @property {string | null} previewKey
 * @property {HTMLElement} scroller
 * @property {HTMLElement} action
 * @property {HTMLElement} queue
 * @property {Composer} composer
 * @property {string | null} actionKey
 * @property {Map<string, {approved: boolean, reason: string | null}>} decisions
 *   decisions taken on approval cards, by tool call id
 * @property {HTMLElement} [gapEl] the "load earlier" control
 * @property {import('./workspace.js').WorkspacePanel} workspace the workspace
 *   panel and its header button
 */

/**
 * The parts of the preview's element that change as it grows.
 * @typedef {{body: HTMLElement, extras: HTMLElement, reasoning: HTMLElement, typing: HTMLElement, role: HTMLElement}} PreviewParts
 */

/**
 * What the renderers of the chat view call back: chat-view.js fills it in
 * (so that they need not import it).
 * @typedef {object} ChatActions
 * @property {() => void} render re-renders the view
 * @property {(chat: Chat) => void} applyChat takes a Chat from a REST answer
 * @property {() => void} retry retries the failed turn
 * @property {(messageId: number, direction: 'prev' | 'next') => void} activate
 *   shows the branch through sibling `messageId` (reached by the arrow `direction`)
 * @property {(messageId: number) => void} regenerate asks for another answer
 *   in place of answer `messageId`
 * @property {(messageId: number) => void} fork forks the chat up to `messageId`
 *   and opens the fork
 */

/**
 * The state of an open chat.
 * @typedef {object} ChatView
 * @property {string} chatId
 * @property {Chat | null} chat GET /chats/{id}; status kept current by events
 * @property {Map<number, ChatMessage>} messages by id
 * @property {{after: number, before: number, omitted: number} | null} gap
 *   visible messages with after < id < before are not loaded yet
 * @property {boolean} loadingEarlier
 * @property {Preview | null} preview
 * @property {Set<string>} finishedEpisodes "hv:ga" whose preview a commit replaced
 * @property {Episode | null} lastEpisode of the newest part seen
 * @property {number} historyVersion
 * @property {QueuedMessage[]} queue
 * @property {{id: number} | null} queueEdit the queued message being edited
 * @property {ActionRequired | null} actionRequired
 * @property {ChatError | null} error
 * @property {ChatError | null} limitHelpFor the error whose usage was loaded again
 * @property {(RetryState & {episode: Episode | null}) | null} retry
 *   the retry event's payload, plus `episode` (lastEpisode when it came)
 * @property {number | null} editing message id being edited
 * @property {boolean} branching a branch change (activate, regenerate) is being asked for
 * @property {number} resets how many `history_reset`s the stream has sent
 * @property {boolean} atBottom the reader is at the end of the conversation (kept there)
 * @property {boolean} interruptArmed an interrupt is under way: the next new answer was cut by it
 * @property {Set<number>} interruptedIds
 * @property {string | null} usageText the last usage label with numbers in it
 * @property {string | null} announced the last status announced in the live region
 * @property {boolean} turnStopped this turn was stopped (status interrupting, or its answer came marked interrupted)
 * @property {StreamClient | null} stream
 * @property {number | null} previewFrame the requested animation frame of the preview
 * @property {number} previewDrawnAt when the preview was last drawn (frame time, ms)
 * @property {number} previewCost how long that took (ms)
 * @property {boolean} closed
 * @property {ReturnType<typeof setTimeout> | undefined} [reloadTimer] loading again after a failure
 * @property {ChatDom} dom
 * @property {ChatActions} actions
 */

/**
 * A chat view whose chat has loaded: what the renderers draw.
 * @typedef {ChatView & {chat: Chat}} LoadedView
 */

/**
 * Whether the chat of `view` has loaded.
 * @param {ChatView} view
 * @returns {view is LoadedView}
 */
export function isLoaded(view) {
  return view.chat !== null;
}

const INTERRUPTED_KEY = 'chatd.interrupted.'; // + chat id (sessionStorage): ids of answers cut by an interrupt

/**
 * Fresh state of an open chat; `buildDom` makes its page (its handlers
 * may keep the view, not use it yet).
 * @param {string} chatId
 * @param {ChatActions} actions
 * @param {(view: ChatView) => ChatDom} buildDom
 * @returns {ChatView}
 */
export function newChatView(chatId, actions, buildDom) {
  /** @type {Omit<ChatView, 'dom'> & {dom: ChatDom | null}} */
  const view = {
    chatId,
    chat: null,
    messages: new Map(),
    gap: null,
    loadingEarlier: false,
    preview: null,
    finishedEpisodes: new Set(),
    lastEpisode: null,
    historyVersion: 0,
    queue: [],
    queueEdit: null,
    actionRequired: null,
    error: null,
    limitHelpFor: null,
    retry: null,
    editing: null,
    branching: false,
    resets: 0,
    atBottom: true,
    interruptArmed: false,
    interruptedIds: loadInterrupted(chatId),
    usageText: null,
    announced: null,
    turnStopped: false,
    stream: null,
    previewFrame: null,
    previewDrawnAt: 0,
    previewCost: 0,
    closed: false,
    dom: null,
    actions,
  };
  view.dom = buildDom(/** @type {ChatView} */ (view));
  return /** @type {ChatView} */ (view);
}

/**
 * The text parts of `parts`, joined.
 * @param {Part[]} parts
 */
export function textOf(parts) {
  return parts.map((p) => (p.type === 'text' ? p.text : null)).filter((t) => t !== null).join('');
}

/**
 * Why an answer ended, when it says (`finish_reason`) or the UI watched it
 * being interrupted; null for other messages.
 * @param {ChatView} view
 * @param {ChatMessage} message
 */
export function finishReasonOf(view, message) {
  if (message.role !== 'assistant') return null;
  if (message.finish_reason) return message.finish_reason;
  // The server does not say (older servers): the UI knows when it watched
  // the answer being interrupted.
  return view.interruptedIds.has(message.id) ? 'interrupted' : null;
}

// ---------------------------------------------------------------------------
// Stream events

/**
 * Applies one ChatStreamEvent to the view state (API.md "Stream").
 * `frame.retry` tells whether a `retry` came earlier in the same frame.
 * @param {ChatView} view
 * @param {StreamEvent} event
 * @param {{retry: boolean}} frame
 */
export function applyEvent(view, event, frame) {
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
      view.resets += 1;
      break;
    default:
      console.warn('unknown stream event', /** @type {{type: string}} */ (event).type);
  }
}

/**
 * Inserts a message or replaces it when its revision is newer.
 * @param {ChatView} view
 * @param {ChatMessage} message
 */
export function upsertMessage(view, message) {
  const known = view.messages.get(message.id);
  if (known && known.revision > message.revision) return;
  if (!known) dropSupplanted(view, message);
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

/**
 * A new message that is a sibling of one the view holds (an edit's new
 * text, a regenerated answer) takes its place on the active branch: the
 * sibling and what followed it leave the view. On the active branch ids
 * ascend, so what followed is every message with a greater id.
 * @param {ChatView} view
 * @param {ChatMessage} message not held yet
 */
function dropSupplanted(view, message) {
  const siblings = message.sibling_ids || [];
  let from = Infinity;
  for (const id of siblings) {
    if (id !== message.id && view.messages.has(id)) from = Math.min(from, id);
  }
  if (from === Infinity) return;
  for (const id of [...view.messages.keys()]) {
    if (id >= from) view.messages.delete(id);
  }
  // A sibling in the loaded head: the omitted middle left with it.
  if (view.gap && from <= view.gap.after) view.gap = null;
  if (view.editing !== null && view.editing >= from) view.editing = null;
}

/**
 * Answers `messageId` and what followed it leave the view (a regenerate
 * was taken: the new answer, a sibling, streams in), unless newer than
 * `newestBefore`, the newest id held when it was asked for.
 * @param {ChatView} view
 * @param {number} messageId
 * @param {number} newestBefore
 */
export function dropFrom(view, messageId, newestBefore) {
  for (const id of [...view.messages.keys()]) {
    if (id >= messageId && id <= newestBefore) view.messages.delete(id);
  }
  if (view.gap && messageId <= view.gap.after) view.gap = null;
}

/**
 * The messages of the active branch read again (`GET .../messages?window=true`)
 * replace those held, as a `history_reset` would.
 * @param {ChatView} view
 * @param {MessagePage} page
 */
export function replaceMessages(view, page) {
  view.messages.clear();
  for (const m of page.messages) view.messages.set(m.id, m);
  const w = page.window;
  view.gap = w && w.omitted > 0 ? { after: w.head_last_id, before: w.tail_first_id, omitted: w.omitted } : null;
  view.editing = null;
}

/**
 * Whether the chat is idle (API.md: `W`, or `E0`: an error with nothing
 * queued), where branches can change: regenerate, activate.
 * @param {LoadedView} view
 */
export function isIdle(view) {
  const status = view.chat.status;
  return status === 'waiting' || (status === 'error' && view.queue.length === 0);
}

/**
 * The id of the answer that ends the active branch (an assistant message
 * that is not a compaction's record), which can be regenerated; null when
 * the branch ends otherwise (a user message, a tool result, a boundary).
 * @param {ChatView} view
 * @returns {number | null}
 */
export function lastAnswerId(view) {
  let last = null;
  for (const m of view.messages.values()) if (!last || m.id > last.id) last = m;
  if (!last || last.role !== 'assistant') return null;
  if (last.content.some((p) => p.type === 'tool-call' && p.tool_name === 'chatd_compact')) return null;
  return last.id;
}

/**
 * A new status (and history version) of the chat; a turn that ended loads
 * the usage again, and the list's badge follows.
 * @param {ChatView} view
 * @param {ChatStatus} status
 * @param {number} [historyVersion]
 */
export function applyStatus(view, status, historyVersion) {
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

/**
 * Adds a live part to the preview of its episode (history_version,
 * generation_attempt). Parts of older episodes, repeated seqs and parts of
 * an episode a committed message already replaced are dropped.
 * @param {ChatView} view
 * @param {LivePart} part
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

/**
 * Appends a delta: text/reasoning extend the last part of their type; tool calls grow their args.
 * @param {Part[]} parts
 * @param {Part} delta
 */
function mergeDelta(parts, delta) {
  if (delta.type === 'text' || delta.type === 'reasoning') {
    const last = parts[parts.length - 1];
    if (last && last.type === delta.type) last.text += delta.text || '';
    else parts.push({ type: delta.type, text: delta.text || '' });
  } else if (delta.type === 'tool-call') {
    let call = /** @type {import('./wire.js').ToolCallPart | undefined} */ (
      parts.find((p) => p.type === 'tool-call' && p.tool_call_id === delta.tool_call_id)
    );
    if (!call) {
      call = { type: 'tool-call', tool_call_id: delta.tool_call_id, tool_name: delta.tool_name, args: '' };
      parts.push(call);
    }
    call.args += delta.args_delta || delta.args || '';
  } else if (delta.type === 'citation') {
    // A citation belongs to the text part in progress (or the next one).
    const { type: _type, ...citation } = delta;
    let last = parts[parts.length - 1];
    if (!last || last.type !== 'text') {
      last = { type: 'text', text: '' };
      parts.push(last);
    }
    (last.citations ||= []).push(citation);
  } else {
    parts.push(delta);
  }
}

/**
 * Applies a PATCH answer: drop `deleted_message_ids`, upsert the rest.
 * @param {ChatView} view
 * @param {EditResult} result
 */
export function applyEditResult(view, result) {
  const deletedIds = result.deleted_message_ids || [];
  // An edit before the loaded tail deleted the omitted middle too.
  const gap = view.gap;
  if (gap && deletedIds.some((id) => id < gap.before)) view.gap = null;
  for (const deleted of deletedIds) view.messages.delete(deleted);
  for (const message of result.messages || []) upsertMessage(view, message);
  if (result.message) upsertMessage(view, result.message);
  view.preview = null;
}

// ---------------------------------------------------------------------------
// Interrupted answers

/**
 * The ids of answers of `chatId` cut by an interrupt (this tab).
 * @param {string} chatId
 * @returns {Set<number>}
 */
function loadInterrupted(chatId) {
  try {
    return new Set(JSON.parse(sessionStorage.getItem(INTERRUPTED_KEY + chatId) || '[]'));
  } catch {
    return new Set();
  }
}

/**
 * Forgets what this tab remembers of `chatId` (a deleted chat).
 * @param {string} chatId
 */
export function forgetInterrupted(chatId) {
  sessionStorage.removeItem(INTERRUPTED_KEY + chatId);
}

/**
 * From now until the turn ends, the next new answer is the one the interrupt cut.
 * @param {ChatView} view
 */
export function armInterrupt(view) {
  view.interruptArmed = true;
}

/**
 * @param {ChatView} view
 * @param {number} id
 */
function markInterrupted(view, id) {
  view.interruptedIds.add(id);
  const ids = [...view.interruptedIds].slice(-200);
  try {
    sessionStorage.setItem(INTERRUPTED_KEY + view.chatId, JSON.stringify(ids));
  } catch {
    // Storage full or unavailable: the mark lasts as long as the page.
  }
}
