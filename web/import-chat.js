// @ts-check
// "Import chat…" in the sidebar (API.md "Sign-in, search, sharing and
// export"): the user picks a chatd JSON export (`GET
// /chats/{chat}/export?format=json`, the chat menu's "Export as JSON"), it
// is sent to `POST /chats/import` → `201 Chat` (a new idle chat owned by
// the caller, with the same visible history) and the new chat opens.
// A file that is not JSON, or a refusal, is said under the button.

import { $, h, announce } from './ui.js';
import { ApiError, api } from './api.js';
import { refreshChats } from './sidebar.js';

/** Larger files are refused before they are read (bytes). */
const MAX_BYTES = 64 * 1024 * 1024;

/** Binds the sidebar's "Import chat…" button. */
export function initImport() {
  const button = /** @type {HTMLButtonElement} */ ($('import-chat'));
  const input = /** @type {HTMLInputElement} */ (h('input', {
    type: 'file', accept: '.json,application/json', class: 'sr-only', testid: 'import-file', tabindex: '-1', 'aria-hidden': 'true', 'aria-label': 'Chat export to import',
  }));
  const error = h('p', { class: 'field-error import-error', testid: 'import-error', role: 'alert', hidden: true });
  const parent = /** @type {HTMLElement} */ (button.parentElement);
  parent.after(error);
  parent.append(input);

  /** @param {string | null} text */
  const say = (text) => {
    error.hidden = !text;
    error.textContent = text || '';
  };

  button.addEventListener('click', () => {
    say(null);
    input.value = '';
    input.click();
  });
  input.addEventListener('change', async () => {
    const file = input.files && input.files[0];
    if (!file) return;
    if (file.size > MAX_BYTES) {
      say(`“${file.name}” is too large to import.`);
      return;
    }
    /** @type {unknown} */
    let body;
    try {
      body = JSON.parse(await file.text());
    } catch {
      say(`“${file.name}” is not a chatd JSON export (it is not JSON).`);
      return;
    }
    button.disabled = true;
    const label = button.textContent;
    button.textContent = 'Importing…';
    /** @type {import('./wire.js').Chat} */
    let chat;
    try {
      chat = await api('POST', '/chats/import', body, { quiet: true });
    } catch (err) {
      say(err instanceof ApiError
        ? `Import failed: ${err.describe()}${err.validations.length ? ` (${err.validations.map((v) => `${v.field} ${v.detail}`).join('; ')})` : ''}`
        : `Import failed: ${String(err)}`);
      return;
    } finally {
      button.disabled = false;
      button.textContent = label;
    }
    say(null);
    announce(`Imported “${chat.title || 'Untitled'}”.`);
    refreshChats();
    location.hash = `#/chats/${chat.id}`;
  });
}
