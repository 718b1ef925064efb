// @ts-check
// The models a chat may use: `GET /chats/models` once per sign-in, the
// model pickers of the composer, and the last pick of each chat,
// remembered in localStorage (`chatd.model.<chat id>`).

import { h } from './ui.js';
import { api } from './api.js';

/** @typedef {import('./wire.js').Chat} Chat */
/** @typedef {import('./wire.js').ModelOption} ModelOption */

const MODEL_KEY = 'chatd.model.'; // + chat id: the model picked last in that chat

/**
 * This module's state: the request of `GET /chats/models` and its answer.
 * @type {{request: Promise<ModelOption[]> | null, resolved: ModelOption[] | null}}
 */
const models = {
  request: null,
  resolved: null,
};

/**
 * The models (`GET /chats/models`, once; after a failure, again at the
 * next call). Resolves to [] on a failure.
 * @returns {Promise<ModelOption[]>}
 */
export function loadModels() {
  if (!models.request) {
    models.request = api('GET', '/chats/models', undefined, { quiet: true }).then(
      (/** @type {ModelOption[]} */ list) => {
        models.resolved = list;
        return list;
      },
      () => {
        models.request = null; // try again next time
        return /** @type {ModelOption[]} */ ([]);
      },
    );
  }
  return models.request;
}

/** The models, once loaded; else null. */
export function loadedModels() {
  return models.resolved;
}

/** Forgets the models (at sign-out). */
export function resetModels() {
  models.request = null;
  models.resolved = null;
}

/** @param {ModelOption} m */
function modelLabel(m) {
  return m.display_name || m.model;
}

/**
 * Fills a model `select`, one option per model: for a new chat the
 * server's default model is picked ("Server default" only when the list
 * could not be loaded); for a chat, its remembered pick or else the model
 * it last used.
 * @param {HTMLSelectElement} select
 * @param {Chat | null} chat
 */
export async function fillModelSelect(select, chat) {
  const list = await loadModels();
  const options = list.map((m) => h('option', { value: m.id, title: m.display_name && m.display_name !== m.model ? `${m.display_name} (${m.model})` : m.model }, modelLabel(m)));
  if (!chat) {
    const fallback = list.find((m) => m.is_default) || list[0];
    if (!fallback) {
      select.replaceChildren(h('option', { value: '' }, 'Server default'));
      return;
    }
    select.replaceChildren(...options);
    select.value = fallback.id;
    return;
  }
  /**
   * @param {string | null | undefined} id
   * @returns {id is string}
   */
  const known = (id) => Boolean(id) && list.some((m) => m.id === id);
  const remembered = localStorage.getItem(MODEL_KEY + chat.id);
  const current = known(remembered) ? remembered : chat.last_model_config_id;
  if (known(current)) {
    select.replaceChildren(...options);
    select.value = current;
  } else {
    // The chat's model is not offered (disabled or removed): leave it to the server.
    select.replaceChildren(h('option', { value: '' }, 'Current model'), ...options);
    select.value = '';
  }
}

/**
 * The display name of model `id`, or null when unknown.
 * @param {string | null | undefined} id
 * @param {ModelOption[] | null} list
 */
export function modelName(id, list) {
  const m = id && list && list.find((x) => x.id === id);
  return m ? m.display_name || m.model : null;
}

/**
 * Remembers `modelId` as the pick of `chatId` (an empty id forgets it).
 * @param {string} chatId
 * @param {string} modelId
 */
export function rememberModel(chatId, modelId) {
  if (modelId) localStorage.setItem(MODEL_KEY + chatId, modelId);
  else localStorage.removeItem(MODEL_KEY + chatId);
}
