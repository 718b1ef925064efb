// @ts-check
// The action-required panel of a chat in `requires_action` (API.md
// "Stream": `action_required`; "Tool approval"): a form per client tool
// call (its output, and whether it is an error) and a card per call that
// waits for approval (Approve, or Deny with a reason), all answered
// together with `POST /chats/{chat}/tool-results`.

import { h, byTestId, toast, setBusy, prettyJsonString } from './ui.js';
import { api, attempt } from './api.js';
import { updateCountdowns } from './panels.js';

/** @typedef {import('./chat-state.js').ChatView} ChatView */
/** @typedef {import('./chat-state.js').LoadedView} LoadedView */
/** @typedef {import('./wire.js').ActionRequired} ActionRequired */
/** @typedef {import('./wire.js').Chat} Chat */
/** @typedef {ActionRequired['tool_calls'][number]} PendingCall */

/**
 * Renders the panel; kept as it is (with what the user typed) while the
 * pending calls stay the same.
 * @param {LoadedView} view
 */
export function renderActionRequired(view) {
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
  /** @param {PendingCall} call */
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
 * @param {LoadedView} view
 * @param {PendingCall} call
 * @param {number} i
 * @param {string | null | undefined} deadlineAt
 * @param {boolean} withClientTools
 */
function approvalCard(view, call, i, deadlineAt, withClientTools) {
  const reasonId = `approval-reason-${i}`;
  const decision = h('p', { class: 'approval-decision', testid: 'approval-decision', role: 'status' });
  const reason = h('input', { id: reasonId, type: 'text', testid: 'approval-reason', maxlength: 4096, placeholder: 'Why? (optional, sent with a denial)' });
  /** @param {boolean} approved */
  const decide = (approved) => {
    view.dom.decisions.set(call.tool_call_id, { approved, reason: reason.value.trim() || null });
    card.dataset.decision = approved ? 'approved' : 'denied';
    decision.textContent = approved ? 'Approved' : 'Denied';
    const pending = /** @type {HTMLElement[]} */ ([...view.dom.action.querySelectorAll('[data-testid="approval-card"]')])
      .filter((c) => !c.dataset.decision).length;
    if (pending) decision.textContent += ` — decide the other ${pending} call(s) to continue`;
    else if (withClientTools) decision.textContent += ' — submit the results to continue';
    else submitToolResults(view, /** @type {HTMLElement} */ (view.dom.action.querySelector('[data-testid="action-required"]')));
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

/**
 * Parses a tool output: JSON when it parses, else the text as a JSON string.
 * @param {string} text
 * @returns {unknown}
 */
function parseOutput(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * Sends every output and decision of the panel.
 * @param {LoadedView} view
 * @param {HTMLElement} panel
 */
async function submitToolResults(view, panel) {
  /** @type {Record<string, unknown>[]} */
  const results = /** @type {HTMLElement[]} */ ([...panel.querySelectorAll('[data-testid="tool-call-form"]')]).map((form) => ({
    tool_call_id: form.dataset.toolCallId,
    output: parseOutput(/** @type {HTMLTextAreaElement} */ (byTestId(form, 'tool-output')).value),
    is_error: /** @type {HTMLInputElement} */ (byTestId(form, 'tool-is-error')).checked,
  }));
  for (const card of /** @type {NodeListOf<HTMLElement>} */ (panel.querySelectorAll('[data-testid="approval-card"]'))) {
    const decision = view.dom.decisions.get(card.dataset.toolCallId || '');
    if (!decision) {
      toast('Approve or deny every tool call first.');
      return;
    }
    /** @type {Record<string, unknown>} */
    const result = { tool_call_id: card.dataset.toolCallId, approved: decision.approved };
    if (decision.reason) result.reason = decision.reason;
    results.push(result);
  }
  setBusy(panel, true);
  /** @type {Chat | undefined} */
  const chat = await attempt(() => api('POST', `/chats/${view.chatId}/tool-results`, { results }));
  setBusy(panel, false);
  if (!chat || view.closed) return;
  view.actions.applyChat(chat);
}
