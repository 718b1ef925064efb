// @ts-check
// The new-chat form at `#/`: the first message (the composer), its model,
// and an "Advanced" section with a system prompt, dynamic tools JSON, plan
// mode, sub-agents and a workspace; `POST /chats` (API.md `CreateChatRequest`), then the
// new chat opens.

import { h, $, $input, byTestId, announce } from './ui.js';
import { api } from './api.js';
import { buildComposer, sendRequest } from './composer.js';
import { fillModelSelect, rememberModel } from './models.js';
import { addCreated, refreshChats } from './sidebar.js';

/** @typedef {import('./wire.js').Chat} Chat */
/** @typedef {import('./wire.js').InputPart} InputPart */
/** @typedef {import('./wire.js').DynamicTool} DynamicTool */

/**
 * Shows the new-chat form in `main`.
 * @param {HTMLElement} main
 */
export function openNewChat(main) {
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
      h(
        'label',
        { class: 'toggle', for: 'new-chat-workspace' },
        h('input', { type: 'checkbox', id: 'new-chat-workspace', testid: 'new-chat-workspace' }),
        ' Workspace: the model gets a sandboxed directory with shell, read, write and list tools',
      ),
    ),
  );
  const composer = buildComposer({ newChat: true, send: (content, _behavior, model) => createChat(content, model) });
  const form = h(
    'section',
    { class: 'new-chat', 'aria-labelledby': 'new-chat-heading' },
    h('h1', { class: 'new-chat-heading', id: 'new-chat-heading' }, 'New chat'),
    h('p', { class: 'hint' }, 'Ask anything. Pick a model below; the Advanced section has a system prompt and dynamic tools.'),
    composer.root,
    advanced,
  );
  main.replaceChildren(form);
  composer.input.focus();
  fillModelSelect(composer.model, null);
  announce('');
}

/**
 * Parses the dynamic tools textarea: `null` when empty, an array of
 * `{name, description, input_schema}`; throws an Error describing the
 * first problem.
 * @param {string} text
 * @returns {DynamicTool[] | null}
 */
export function parseTools(text) {
  if (!text.trim()) return null;
  /** @type {any} */
  let tools;
  try {
    tools = JSON.parse(text);
  } catch (err) {
    throw new Error(`Tools are not valid JSON: ${/** @type {Error} */ (err).message}`);
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

/**
 * `POST /chats` with the form's fields; resolves to whether the chat was
 * created (then it opens).
 * @param {InputPart[]} content
 * @param {string} model a model config id, or '' for the server's default
 */
async function createChat(content, model) {
  const toolsField = $input('new-chat-tools');
  const toolsError = $('new-chat-tools-error');
  let tools;
  try {
    tools = parseTools(toolsField.value);
    toolsError.hidden = true;
    toolsField.removeAttribute('aria-invalid');
  } catch (err) {
    toolsError.textContent = /** @type {Error} */ (err).message;
    toolsError.hidden = false;
    toolsField.setAttribute('aria-invalid', 'true');
    /** @type {HTMLDetailsElement} */ (byTestId(document, 'advanced')).open = true;
    toolsField.focus();
    return false;
  }
  /** @type {Record<string, unknown>} */
  const body = { content };
  if (model) body.model_config_id = model;
  if (tools) body.dynamic_tools = tools;
  if ($input('new-chat-plan-mode').checked) body.plan_mode = 'plan';
  if ($input('new-chat-subagents').checked) body.subagents = true;
  if ($input('new-chat-workspace').checked) body.workspace = true;
  const systemPrompt = $input('new-chat-system-prompt').value;
  if (systemPrompt.trim()) body.system_prompt = systemPrompt;
  /** @type {Chat | undefined} */
  const chat = await sendRequest(() => api('POST', '/chats', body, { quiet: true }));
  if (!chat) return false;
  if (model) rememberModel(chat.id, model);
  addCreated(chat);
  location.hash = `#/chats/${chat.id}`;
  refreshChats();
  return true;
}
