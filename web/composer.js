// @ts-check
// The composer, shared by the new-chat form and the chat view: the
// textarea (Enter sends, Shift+Enter is a new line, never while an IME
// composes), a model picker, long pastes collapsed into blocks, file
// attachments (uploaded at once with `POST /files`), the send buttons
// (queue, interrupt, steer) and stop; and `sendRequest`, which shows why
// the server refused a send above the textarea.

import { h, icon, toast, isLong, countLines, autoGrow, setBusy, byTestId, numberFormat, menuButton } from './ui.js';
import { ApiError, uploadFile } from './api.js';
import { rememberModel } from './models.js';
import { refreshUsage } from './usage.js';

/** @typedef {import('./wire.js').InputPart} InputPart */

/** @typedef {'queue' | 'interrupt' | 'steer'} BusyBehavior */

/**
 * A long paste, shown as a block above the textarea.
 * @typedef {{id: string, text: string, open: boolean}} Paste
 */

/**
 * An attached file: uploading, then ready with its `fileId`.
 * @typedef {object} Attachment
 * @property {string} key
 * @property {File} file
 * @property {'uploading' | 'ready'} status
 * @property {string | null} fileId
 * @property {string | null} previewUrl an object URL of an image
 */

/**
 * A composer's elements and state.
 * @typedef {object} Composer
 * @property {HTMLFormElement} root
 * @property {HTMLTextAreaElement} input
 * @property {HTMLSelectElement} model
 * @property {HTMLButtonElement} sendQueue
 * @property {HTMLButtonElement} sendInterrupt
 * @property {HTMLButtonElement} sendSteer
 * @property {HTMLButtonElement} stop
 *   (these three are not on the page of the new-chat form)
 * @property {import('./ui.js').Menu} more the menu beside the primary
 *   button of a busy chat, holding the other ways to send
 * @property {HTMLElement} actions the row of the primary buttons
 * @property {boolean} offline the server is unreachable: nothing is sent
 * @property {HTMLElement} pastes
 * @property {Paste[]} pasted
 * @property {boolean} sending
 * @property {HTMLElement} attachments
 * @property {Attachment[]} files
 * @property {HTMLElement} refusal why the last send was refused
 */

/**
 * What a composer does with its message.
 * @typedef {object} ComposerOptions
 * @property {boolean} newChat the new-chat form (no interrupt, steer or stop)
 * @property {(content: InputPart[], behavior: BusyBehavior, model: string) => Promise<boolean>} send
 *   sends; resolves to whether it was taken (the composer then drops it)
 * @property {() => void} [stop] the stop button
 * @property {() => void} [sent] after every send, taken or not
 * @property {string | null} [chatId] the chat whose model pick is remembered
 */

/** Largest upload, in MiB (API.md "Files"). */
const MAX_FILE_MB = 10;

/**
 * Builds a composer.
 * @param {ComposerOptions} options
 * @returns {Composer}
 */
export function buildComposer({ newChat, send, stop: onStop, sent, chatId = null }) {
  const modelId = newChat ? 'new-chat-model' : 'composer-model';
  const input = h('textarea', {
    id: 'composer-input',
    testid: 'composer-input',
    rows: 2,
    placeholder: newChat ? 'Write the first message…' : 'Write a message…',
    'aria-label': 'Message',
    'aria-describedby': 'composer-hint',
  });
  const model = h('select', { id: modelId, testid: modelId, class: 'model-select' });
  const pastes = h('div', { class: 'pasted-blocks', testid: 'pasted-blocks' });
  const attachments = h('ul', { class: 'attachments', testid: 'attachments', 'aria-label': 'Attached files', hidden: true });
  const fileInput = h('input', { type: 'file', multiple: true, class: 'sr-only', testid: 'file-input', tabindex: '-1', 'aria-hidden': 'true', 'aria-label': 'Attach files' });
  const attach = h('button', {
    type: 'button',
    class: 'btn btn-quiet',
    testid: 'attach-file',
    title: `Attach files (at most ${MAX_FILE_MB} MiB each; images are shown to the model)`,
  }, 'Attach');
  const sendQueue = h(
    'button',
    { type: 'submit', class: 'btn btn-primary', testid: 'send-queue' },
    h('span', { class: 'send-label menu-item-label' }, newChat ? 'Start chat' : 'Send'),
    // Shown when it is an item of the send menu (a busy chat).
    h('span', { class: 'menu-item-hint' }, 'Send it when the reply is done'),
  );
  const sendInterrupt = h('button', {
    type: 'button',
    class: 'btn',
    testid: 'send-interrupt',
    title: 'Stop the running reply and send this now',
    hidden: true,
      }, h('span', { class: 'menu-item-label' }, 'Send now'), h('span', { class: 'menu-item-hint' }, 'Stop the reply and send this instead'));
  const sendSteer = h('button', {
    type: 'button',
    class: 'btn',
    testid: 'send-steer',
    title: 'Tell the running reply this without stopping it: the model reads it at its next step',
    hidden: true,
      }, h('span', { class: 'menu-item-label' }, 'Steer'), h('span', { class: 'menu-item-hint' }, 'Tell the running reply this, without stopping it'));
  const stop = h('button', {
    type: 'button',
    class: 'btn btn-stop',
    testid: 'interrupt',
    disabled: true,
    hidden: true,
    'aria-label': 'Stop the reply',
      }, icon('stop'), h('span', { class: 'stop-label' }, 'Stop'));
  // Why the server refused the last send (a limit: 429, 413); the typed
  // message stays in the textarea.
  const refusal = h('p', { class: 'composer-refusal', testid: 'send-refused', role: 'alert', hidden: true });
  // A busy chat's other ways to send (Queue, Send now, Steer), beside Stop.
  const more = menuButton({ testid: 'send-options', label: 'More ways to send', content: '▾', up: true, buttonClass: 'btn btn-more' });
  more.root.hidden = true;
  const actions = h('span', { class: 'composer-actions' }, attach, newChat ? null : [stop, sendSteer, sendInterrupt], sendQueue, newChat ? null : more.root);
  const root = h(
    'form',
    { class: 'composer', 'aria-label': 'Composer', testid: 'composer' },
    refusal,
    pastes,
    attachments,
    fileInput,
    input,
    h(
      'div',
      { class: 'composer-bar' },
      h('span', { class: 'model-field' }, h('label', { for: modelId }, 'Model'), model),
      h('span', { class: 'composer-hint', id: 'composer-hint' }, 'Enter sends · Shift+Enter: new line'),
      actions,
    ),
  );
  /** @type {Composer} */
  const composer = { root, input, model, sendQueue, sendInterrupt, sendSteer, stop, more, actions, offline: false, pastes, pasted: [], sending: false, attachments, files: [], refusal };

  /** The message: pasted blocks (in order), then what was typed. */
  const messageText = () => [...composer.pasted.map((p) => p.text), input.value].filter((t) => t.trim()).join('\n\n');
  /** @param {BusyBehavior} behavior */
  const submit = async (behavior) => {
    if (composer.sending || composer.offline) return;
    const text = messageText();
    if (composer.files.some((f) => f.status === 'uploading')) {
      toast('Wait for the files to finish uploading.');
      return;
    }
    const files = composer.files.filter((f) => f.status === 'ready');
    if (!text.trim() && !files.length) {
      input.focus();
      return;
    }
    composer.sending = true;
    setBusy(root, true);
    refusal.hidden = true;
    const typed = input.value;
    const pasted = composer.pasted;
    /** @type {InputPart[]} */
    const content = text.trim() ? [{ type: 'text', text }] : [];
    for (const f of files) if (f.fileId) content.push({ type: 'file', file_id: f.fileId });
    const ok = await send(content, behavior, model.value);
    composer.sending = false;
    setBusy(root, false);
    if (sent) sent();
    if (ok) {
      // Drop what was sent; keep what was typed or pasted meanwhile.
      if (input.value.startsWith(typed)) input.value = input.value.slice(typed.length).trimStart();
      composer.pasted = composer.pasted.filter((p) => !pasted.includes(p));
      renderPastes(composer);
      for (const f of files) dropAttachment(composer, f);
      autoGrow(input);
    }
  };
  attach.addEventListener('click', () => fileInput.click());
  fileInput.addEventListener('change', () => {
    addAttachments(composer, [...(fileInput.files || [])]);
    fileInput.value = '';
  });
  // Drag and drop: files dropped anywhere on the composer are attached.
  root.addEventListener('dragover', (e) => {
    if (!e.dataTransfer || ![...e.dataTransfer.types].includes('Files')) return;
    e.preventDefault();
    root.classList.add('dropping');
  });
  root.addEventListener('dragleave', () => root.classList.remove('dropping'));
  root.addEventListener('drop', (e) => {
    root.classList.remove('dropping');
    const dropped = e.dataTransfer ? [...e.dataTransfer.files] : [];
    if (!dropped.length) return;
    e.preventDefault();
    addAttachments(composer, dropped);
  });
  root.addEventListener('submit', (e) => {
    e.preventDefault();
    submit('queue');
  });
  if (!newChat) {
    sendInterrupt.addEventListener('click', () => submit('interrupt'));
    sendSteer.addEventListener('click', () => submit('steer'));
    if (onStop) stop.addEventListener('click', onStop);
  }
  input.addEventListener('keydown', (e) => {
    // Enter sends; Shift+Enter (or Alt+Enter) is a new line; an Enter that
    // ends an IME composition is the IME's.
    if (e.key !== 'Enter' || e.isComposing || e.keyCode === 229) return;
    if (e.shiftKey || e.altKey) return;
    e.preventDefault();
    submit('queue');
  });
  input.addEventListener('input', () => autoGrow(input));
  input.addEventListener('paste', (e) => {
    const text = e.clipboardData && e.clipboardData.getData('text/plain');
    if (!text || !isLong(text)) return;
    e.preventDefault();
    composer.pasted.push({ id: crypto.randomUUID(), text, open: false });
    renderPastes(composer);
  });
  model.addEventListener('change', () => {
    if (!newChat && chatId) rememberModel(chatId, model.value);
  });
  return composer;
}

/**
 * Where the send buttons of a chat's composer are: while the agent works
 * (`working`), Stop is the one primary button and the ways to send
 * (Queue, Send now, Steer: those not hidden) are menu items of
 * `send-options` beside it; otherwise Send (or Queue) is the primary
 * button and the menu holds the rest (Send now while the chat waits on an
 * action), or is hidden when there is nothing in it.
 * @param {Composer} composer
 * @param {boolean} working
 */
export function placeSendButtons(composer, working) {
  const { sendQueue, sendInterrupt, sendSteer, more, actions } = composer;
  const inMenu = working ? [sendQueue, sendInterrupt, sendSteer] : [sendInterrupt, sendSteer];
  const inRow = working ? [] : [sendQueue];
  for (const b of inMenu) {
    if (b.parentElement !== more.list) more.list.append(b);
    b.setAttribute('role', 'menuitem');
    b.classList.add('menu-item');
    b.classList.remove('btn', 'btn-primary');
  }
  for (const b of inRow) {
    if (b.parentElement !== actions) actions.insertBefore(b, more.root);
    b.removeAttribute('role');
    b.classList.remove('menu-item');
    b.classList.add('btn', 'btn-primary');
  }
  // Menu order: Queue, Send now, Steer.
  for (const b of [sendQueue, sendInterrupt, sendSteer]) if (b.parentElement === more.list) more.list.append(b);
  const any = inMenu.some((b) => !b.hidden);
  more.root.hidden = !any;
  if (!any) more.close();
}

/**
 * Runs a quiet send request (`POST /chats`, `POST .../messages`): a refusal
 * for a limit (`429`: a budget used up, the request rate, a full queue;
 * `413`) is shown above the composer with the server's detail and, for the
 * rate limit, when to try again (`Retry-After`), and the usage panel is
 * loaded again; other errors are a toast. Resolves to the answer, or
 * undefined when refused.
 * @template T
 * @param {() => Promise<T>} request
 * @returns {Promise<T | undefined>}
 */
export async function sendRequest(request) {
  try {
    return await request();
  } catch (err) {
    if (!(err instanceof ApiError)) {
      console.error(err);
      toast(String((err && /** @type {any} */ (err).message) || err));
    } else if (err.status === 429 || err.status === 413) {
      const notice = byTestId(document, 'send-refused');
      if (notice) {
        notice.textContent = `Not sent: ${err.describe()} Your message is kept below.`;
        notice.dataset.status = String(err.status);
        notice.hidden = false;
      } else {
        toast(err.describe());
      }
      refreshUsage();
    } else {
      toast(err.describe());
    }
    return undefined;
  }
}

// ---------------------------------------------------------------------------
// Attachments

/**
 * Attaches `files` to the composer: each is uploaded at once
 * (`POST /files`); its chip shows the name, a preview for images, the
 * upload's progress, and a remove button. A failed upload is dropped
 * with a toast naming the file.
 * @param {Composer} composer
 * @param {File[]} files
 */
function addAttachments(composer, files) {
  for (const file of files) {
    /** @type {Attachment} */
    const item = { key: crypto.randomUUID(), file, status: 'uploading', fileId: null, previewUrl: null };
    if (file.type.startsWith('image/')) item.previewUrl = URL.createObjectURL(file);
    composer.files.push(item);
    if (file.size > MAX_FILE_MB * 1024 * 1024) {
      toast(`${file.name} is larger than ${MAX_FILE_MB} MiB.`);
      dropAttachment(composer, item);
      continue;
    }
    renderAttachments(composer);
    uploadFile(file).then((uploaded) => {
      if (!composer.files.includes(item)) return;
      item.status = 'ready';
      item.fileId = uploaded.id;
      renderAttachments(composer);
    }).catch((err) => {
      toast(`${file.name}: ${err.message || 'the upload failed'}`);
      dropAttachment(composer, item);
    });
  }
}

/**
 * @param {Composer} composer
 * @param {Attachment} item
 */
function dropAttachment(composer, item) {
  composer.files = composer.files.filter((f) => f !== item);
  if (item.previewUrl) URL.revokeObjectURL(item.previewUrl);
  renderAttachments(composer);
}

/** @param {Composer} composer */
function renderAttachments(composer) {
  composer.attachments.hidden = !composer.files.length;
  composer.attachments.replaceChildren(...composer.files.map((item) => h(
    'li',
    { class: `attachment attachment-${item.status}`, testid: 'attachment', dataset: { status: item.status, name: item.file.name } },
    item.previewUrl ? h('img', { class: 'attachment-preview', testid: 'attachment-preview', src: item.previewUrl, alt: `Preview of ${item.file.name}` }) : null,
    h('span', { class: 'attachment-name' }, item.file.name),
    h('span', { class: 'attachment-state' }, item.status === 'uploading' ? 'uploading…' : formatFileSize(item.file.size)),
    h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'attachment-remove',
      'aria-label': `Remove ${item.file.name}`,
      onclick: () => dropAttachment(composer, item),
    }, '×'),
  )));
}

/**
 * A file's size: `512 B`, `1.5 KiB`, `2.0 MiB`.
 * @param {number} n bytes
 */
function formatFileSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

// ---------------------------------------------------------------------------
// Long pastes

/**
 * The collapsed blocks of long pastes above the composer's textarea.
 * @param {Composer} composer
 */
function renderPastes(composer) {
  const blocks = composer.pasted.map((paste, i) => {
    const textId = `pasted-text-${paste.id}`;
    const lines = countLines(paste.text);
    const toggle = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'pasted-toggle',
      'aria-expanded': String(paste.open),
      'aria-controls': textId,
      onclick: () => {
        paste.open = !paste.open;
        renderPastes(composer);
      },
    }, paste.open ? 'Collapse' : 'Show all');
    const edit = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'pasted-edit',
      title: 'Move the pasted text into the message field',
      onclick: () => {
        composer.pasted = composer.pasted.filter((p) => p !== paste);
        const input = composer.input;
        input.value = input.value ? `${paste.text}\n\n${input.value}` : paste.text;
        renderPastes(composer);
        autoGrow(input);
        input.focus();
      },
    }, 'Edit as text');
    const remove = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'pasted-remove',
      'aria-label': `Remove pasted text ${i + 1}`,
      onclick: () => {
        composer.pasted = composer.pasted.filter((p) => p !== paste);
        renderPastes(composer);
        composer.input.focus();
      },
    }, 'Remove');
    return h(
      'div',
      { class: `pasted-block${paste.open ? '' : ' collapsed'}`, testid: 'pasted-block', role: 'group', 'aria-label': `Pasted text ${i + 1}` },
      h(
        'div',
        { class: 'pasted-head' },
        h('strong', {}, 'Pasted text'),
        h('span', { class: 'pasted-size', testid: 'pasted-size' }, `${numberFormat.format(lines)} lines · ${numberFormat.format(paste.text.length)} characters`),
        h('span', { class: 'pasted-actions' }, toggle, edit, remove),
      ),
      h('pre', { class: 'pasted-text', id: textId, testid: 'pasted-text' }, paste.text),
    );
  });
  composer.pastes.replaceChildren(...blocks);
}
