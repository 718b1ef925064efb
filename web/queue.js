// @ts-check
// The queue panel of the chat view (API.md "Busy behaviours and the
// queue"): each queued message, with a "steer" badge when it steers the
// running reply, Promote, Edit (in place: text and steer flag) and Delete;
// drag a message by its handle to reorder the queue.

import { h, toast } from './ui.js';
import { api, attempt } from './api.js';
import { textOf, armInterrupt } from './chat-state.js';

/** @typedef {import('./chat-state.js').ChatView} ChatView */
/** @typedef {import('./chat-state.js').LoadedView} LoadedView */
/** @typedef {import('./wire.js').Chat} Chat */
/** @typedef {import('./wire.js').QueuedMessage} QueuedMessage */

/**
 * Renders the queue. Editing happens in place (`view.queueEdit`); the panel
 * is only rebuilt when the queue or the message being edited changes, so a
 * stream event does not throw away what is being typed.
 * @param {LoadedView} view
 */
export function renderQueue(view) {
  const panel = view.dom.queue;
  panel.hidden = view.queue.length === 0;
  const edit = view.queueEdit;
  const editing = edit && view.queue.some((q) => q.id === edit.id) ? edit.id : null;
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
      if (!e.dataTransfer) return;
      e.dataTransfer.setData('text/x-chatd-queued', String(q.id));
      e.dataTransfer.effectAllowed = 'move';
      item.classList.add('dragging');
    });
    item.addEventListener('dragend', () => item.classList.remove('dragging'));
    item.addEventListener('dragover', (e) => {
      if (!e.dataTransfer || !e.dataTransfer.types.includes('text/x-chatd-queued')) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = 'move';
      item.classList.add('drop-target');
    });
    item.addEventListener('dragleave', () => item.classList.remove('drop-target'));
    item.addEventListener('drop', (e) => {
      e.preventDefault();
      item.classList.remove('drop-target');
      const moved = Number(e.dataTransfer ? e.dataTransfer.getData('text/x-chatd-queued') : '');
      if (moved && moved !== q.id) moveQueued(view, moved, i);
    });
    return item;
  });
  panel.replaceChildren(h('h2', {}, `Queued (${view.queue.length})`), h('ol', { class: 'queue-list' }, items));
}

/**
 * `POST .../queue/{queued}/promote`: sent next (interrupting a running reply).
 * @param {LoadedView} view
 * @param {number} id
 */
async function promoteQueued(view, id) {
  if (view.chat.status === 'running') armInterrupt(view);
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/queue/${id}/promote`));
  if (chat && !view.closed) view.actions.applyChat(chat);
}

/**
 * Saves an edit of a queued message (text and steer flag).
 * @param {LoadedView} view
 * @param {number} id
 * @param {string} text
 * @param {boolean} steer
 */
async function editQueued(view, id, text, steer) {
  if (!text.trim()) {
    toast('A queued message needs some text.');
    return;
  }
  const body = { content: [{ type: 'text', text }], steer };
  /** @type {QueuedMessage | undefined} */
  const edited = await attempt(() => api('PATCH', `/chats/${view.chatId}/queue/${id}`, body));
  if (!edited || view.closed) return;
  view.queueEdit = null;
  view.queue = view.queue.map((q) => (q.id === id ? edited : q));
  view.actions.render();
}

/**
 * Moves a queued message to 0-based `position`; the answer is the new queue.
 * @param {LoadedView} view
 * @param {number} id
 * @param {number} position
 */
async function moveQueued(view, id, position) {
  /** @type {QueuedMessage[] | undefined} */
  const queue = await attempt(() => api('POST', `/chats/${view.chatId}/queue/${id}/move`, { position }));
  if (!queue || view.closed) return;
  view.queue = queue;
  view.actions.render();
}

/**
 * @param {LoadedView} view
 * @param {number} id
 */
async function deleteQueued(view, id) {
  const ok = await attempt(() => api('DELETE', `/chats/${view.chatId}/queue/${id}`).then(() => true));
  if (!ok || view.closed) return;
  view.queue = view.queue.filter((q) => q.id !== id);
  view.actions.render();
}
