// @ts-check
// A chat's workspace in the chat view (API.md "Workspaces and
// provider-hosted tools"): the panel beside the messages (the committed
// files as a tree from `GET /chats/{chat}/workspace`, directories
// collapsible; the selected file from `GET .../workspace/file?path=`,
// highlighted by language; "Download .tar.gz" of `GET .../workspace/archive`,
// fetched with the token and saved as a blob), read again whenever a
// message is committed (a step's changes commit with its messages); and
// the workspace tools' calls and results in the message list: `shell` as
// its command (`$ cmd`) with stdout, stderr, exit code and the limit hit;
// `read_file`, `write_file` and `list_files` in one line each.
//
// Model and tool output is text only (`textContent`); file contents are
// highlighted through markdown.js's sanitised highlighter.

import { h, announce, toast, formatBytes, numberFormat } from './ui.js';
import { API, ApiError, attempt, authHeaders, setReachable } from './api.js';
import { highlightCode } from './markdown.js';

/** @typedef {import('./wire.js').Part} Part */
/** @typedef {import('./wire.js').ChatMessage} ChatMessage */

/**
 * One committed entry of a workspace (`GET /chats/{chat}/workspace`).
 * @typedef {object} WorkspaceEntry
 * @property {string} path relative to the root, `/`-separated
 * @property {'file' | 'dir' | 'symlink'} kind
 * @property {number} bytes a file's size (0 for a directory)
 * @property {boolean} [executable]
 * @property {string} updated_at
 */

/**
 * `Chat.workspace`: null without one, and until its first committed change.
 * @typedef {{bytes: number, files: number, updated_at: string}} WorkspaceSummary
 */

/**
 * The workspace panel of an open chat, and what it keeps between renders.
 * @typedef {object} WorkspacePanel
 * @property {string} chatId
 * @property {HTMLElement} root the `<aside>` (hidden while not offered or closed)
 * @property {HTMLButtonElement} toggle the header's "Workspace" button
 * @property {HTMLElement} summary "N files · size"
 * @property {HTMLElement} tree
 * @property {HTMLElement} viewer
 * @property {HTMLAnchorElement} download
 * @property {WorkspaceEntry[] | null} entries null until first read
 * @property {string | null} selected the path of the file shown
 * @property {string | null} shownKey `path@updated_at` of the content shown
 * @property {Set<string>} collapsed directories shown closed
 * @property {boolean} offered the chat has a workspace (or workspace tool calls)
 * @property {boolean} open the reader's choice (remembered per browser)
 * @property {boolean} loading
 * @property {boolean} again a read was asked for during one
 * @property {string | null} seenUpdate the `Chat.workspace.updated_at` last read
 * @property {number} fileRequest counts file reads (a newer one wins)
 * @property {ReturnType<typeof setTimeout> | undefined} timer a pending read
 * @property {boolean} closed
 */

/** The built-in workspace tools (API.md "Workspaces and provider-hosted tools"). */
const WORKSPACE_TOOLS = ['shell', 'read_file', 'write_file', 'list_files'];

/** The viewer shows at most this many bytes of a file. */
const VIEW_MAX_BYTES = 1 << 20;

/** Files larger than this are shown without highlighting (it costs time). */
const HIGHLIGHT_MAX_BYTES = 256 << 10;

/** Tool output longer than this (lines or characters) is shown collapsed. */
const LONG_LINES = 12;
const LONG_CHARS = 1500;

/** localStorage: `closed` when the reader closed the panel. */
const PANEL_KEY = 'chatd.workspace-panel';

/** File name extensions (and names) whose highlight.js language differs. */
/** @type {Record<string, string>} */
const LANGUAGES = {
  mjs: 'javascript', cjs: 'javascript', jsx: 'javascript', tsx: 'typescript', rs: 'rust', py: 'python',
  rb: 'ruby', sh: 'bash', bash: 'bash', zsh: 'bash', yml: 'yaml', toml: 'ini', h: 'c', hpp: 'cpp', cc: 'cpp',
  md: 'markdown', htm: 'xml', html: 'xml', svg: 'xml', kt: 'kotlin', cs: 'csharp', pl: 'perl', txt: 'plaintext',
  dockerfile: 'dockerfile', makefile: 'makefile',
};

/**
 * Whether `name` is one of the workspace tools.
 * @param {string} name
 */
export function isWorkspaceTool(name) {
  return WORKSPACE_TOOLS.includes(name);
}

// ---------------------------------------------------------------------------
// The panel

/**
 * The panel of chat `chatId` (hidden until `renderWorkspacePanel` finds a
 * workspace) and its header button.
 * @param {string} chatId
 * @returns {WorkspacePanel}
 */
export function buildWorkspacePanel(chatId) {
  const toggle = h('button', {
    type: 'button',
    class: 'btn btn-small btn-quiet workspace-toggle',
    testid: 'workspace-toggle',
    'aria-controls': `workspace-${chatId}`,
    'aria-expanded': 'false',
    hidden: true,
  }, 'Workspace');
  const summary = h('span', { class: 'workspace-summary', testid: 'workspace-summary' });
  const download = h('a', {
    class: 'btn btn-small workspace-download',
    testid: 'workspace-download',
    href: `${API}/chats/${chatId}/workspace/archive`,
    download: 'workspace.tar.gz',
    title: 'The committed files as a .tar.gz archive',
  }, 'Download .tar.gz');
  const close = h('button', { type: 'button', class: 'btn btn-small btn-quiet workspace-close', testid: 'workspace-close', 'aria-label': 'Close the workspace panel' }, '×');
  const tree = h('ul', { class: 'workspace-tree', testid: 'workspace-tree', 'aria-label': 'Workspace files' });
  const viewer = h('section', { class: 'workspace-viewer', testid: 'workspace-viewer', 'aria-label': 'File', hidden: true });
  const root = h(
    'aside',
    { class: 'workspace-panel', testid: 'workspace-panel', id: `workspace-${chatId}`, 'aria-labelledby': `workspace-heading-${chatId}`, hidden: true },
    h('header', { class: 'workspace-head' },
      h('h2', { class: 'workspace-heading', id: `workspace-heading-${chatId}` }, 'Workspace'),
      summary,
      download,
      close,
    ),
    h('div', { class: 'workspace-files' }, tree),
    viewer,
  );
  /** @type {WorkspacePanel} */
  const panel = {
    chatId, root, toggle, summary, tree, viewer, download,
    entries: null,
    selected: null,
    shownKey: null,
    collapsed: new Set(),
    offered: false,
    open: readOpen(),
    loading: false,
    again: false,
    seenUpdate: null,
    fileRequest: 0,
    timer: undefined,
    closed: false,
  };
  toggle.addEventListener('click', () => setOpen(panel, !panel.open));
  close.addEventListener('click', () => {
    setOpen(panel, false);
    toggle.focus();
  });
  download.addEventListener('click', (e) => {
    e.preventDefault();
    downloadArchive(panel);
  });
  return panel;
}

/** Whether the panel opens (the reader did not close it; not on a phone). */
function readOpen() {
  let stored = null;
  try {
    stored = localStorage.getItem(PANEL_KEY);
  } catch {
    stored = null;
  }
  if (stored) return stored !== 'closed';
  return !window.matchMedia('(max-width: 720px)').matches;
}

/**
 * @param {WorkspacePanel} panel
 * @param {boolean} open
 */
function setOpen(panel, open) {
  panel.open = open;
  try {
    localStorage.setItem(PANEL_KEY, open ? 'open' : 'closed');
  } catch {
    // (storage refused: the choice lasts for this view only)
  }
  show(panel);
  if (open && panel.entries === null) loadEntries(panel);
}

/** @param {WorkspacePanel} panel */
function show(panel) {
  panel.toggle.hidden = !panel.offered;
  panel.toggle.setAttribute('aria-expanded', String(panel.offered && panel.open));
  panel.root.hidden = !(panel.offered && panel.open);
}

/**
 * Shows the panel when the chat has a workspace (`chat.workspace`, or a
 * workspace tool call in `messages`), and reads the files again when
 * `chat.workspace.updated_at` moved.
 * @param {WorkspacePanel} panel
 * @param {{workspace?: WorkspaceSummary | null, dynamic_tools?: {name: string}[]}} chat
 * @param {Iterable<ChatMessage>} messages
 */
export function renderWorkspacePanel(panel, chat, messages) {
  if (panel.closed) return;
  const summary = chat.workspace || null;
  if (!panel.offered) {
    panel.offered = Boolean(summary) || hasWorkspaceCalls(messages, chat.dynamic_tools || []);
    if (panel.offered && panel.entries === null) loadEntries(panel);
  } else if (summary && summary.updated_at !== panel.seenUpdate && panel.entries !== null) {
    refreshWorkspace(panel);
  }
  if (summary) panel.seenUpdate = summary.updated_at;
  show(panel);
}

/**
 * Whether a workspace tool was called (not a dynamic tool of that name).
 * @param {Iterable<ChatMessage>} messages
 * @param {{name: string}[]} dynamicTools
 */
function hasWorkspaceCalls(messages, dynamicTools) {
  const dynamic = new Set(dynamicTools.map((t) => t.name));
  for (const m of messages) {
    for (const p of m.content) {
      if ((p.type === 'tool-call' || p.type === 'tool-result') && isWorkspaceTool(p.tool_name) && !dynamic.has(p.tool_name)) return true;
    }
  }
  return false;
}

/**
 * Reads the files again soon (a message was committed: its step may have
 * changed them); a burst of messages makes one read.
 * @param {WorkspacePanel} panel
 */
export function refreshWorkspace(panel) {
  if (panel.closed || !panel.offered) return;
  clearTimeout(panel.timer);
  panel.timer = setTimeout(() => loadEntries(panel), 250);
}

/**
 * Stops the panel (the chat view closed).
 * @param {WorkspacePanel} panel
 */
export function closeWorkspacePanel(panel) {
  panel.closed = true;
  clearTimeout(panel.timer);
}

/**
 * `GET /chats/{chat}/workspace`, then the tree and (when it changed) the
 * selected file.
 * @param {WorkspacePanel} panel
 */
async function loadEntries(panel) {
  if (panel.loading) {
    panel.again = true;
    return;
  }
  panel.loading = true;
  panel.root.setAttribute('aria-busy', 'true');
  /** @type {WorkspaceEntry[] | undefined} */
  let entries;
  try {
    entries = await getJson(`/chats/${panel.chatId}/workspace`);
  } catch (err) {
    if (!panel.closed && panel.entries === null) {
      panel.tree.replaceChildren(h('li', { class: 'workspace-empty' }, `The files could not be read: ${err instanceof Error ? err.message : String(err)}`));
    }
  }
  panel.loading = false;
  panel.root.removeAttribute('aria-busy');
  if (panel.closed) return;
  if (entries) {
    const first = panel.entries === null;
    panel.entries = entries;
    if (first && entries.length > 200) {
      for (const e of entries) if (e.kind === 'dir') panel.collapsed.add(e.path);
    }
    if (entries.length > 0 && !panel.offered) {
      panel.offered = true;
      show(panel);
    }
    renderTree(panel);
    renderSelected(panel);
  }
  if (panel.again) {
    panel.again = false;
    loadEntries(panel);
  }
}

/**
 * A JSON GET under `/api/v2` with the session's credentials.
 * @param {string} path
 * @returns {Promise<any>}
 */
async function getJson(path) {
  const response = await fetchApi(path);
  return response.json();
}

/**
 * A GET under `/api/v2` with the session's credentials; rejects with
 * ApiError (status 0: unreachable) unless it answered 2xx.
 * @param {string} path
 * @returns {Promise<Response>}
 */
async function fetchApi(path) {
  let response;
  try {
    response = await fetch(API + path, { headers: authHeaders('GET'), credentials: 'same-origin' });
  } catch {
    setReachable(false);
    throw new ApiError(0, { message: "Can't reach the server." });
  }
  setReachable(true);
  if (!response.ok) {
    /** @type {any} */
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    throw new ApiError(response.status, body);
  }
  return response;
}

/**
 * The tree: directories first, then files, each level by name; a
 * directory's button opens or closes it, a file's shows it.
 * @param {WorkspacePanel} panel
 */
function renderTree(panel) {
  const entries = panel.entries || [];
  const files = entries.filter((e) => e.kind !== 'dir');
  const bytes = files.reduce((n, e) => n + (e.kind === 'file' ? e.bytes : 0), 0);
  panel.summary.textContent = `${numberFormat.format(files.length)} file${files.length === 1 ? '' : 's'} · ${formatBytes(bytes)}`;
  panel.download.hidden = entries.length === 0;
  if (entries.length === 0) {
    panel.tree.replaceChildren(h('li', { class: 'workspace-empty', testid: 'workspace-empty' }, 'No files yet.'));
    return;
  }
  /** @type {Map<string, WorkspaceEntry[]>} */
  const children = new Map();
  /** @type {Map<string, WorkspaceEntry>} */
  const byPath = new Map(entries.map((e) => [e.path, e]));
  // Directories a listing may leave implicit.
  for (const e of entries) {
    const parts = e.path.split('/');
    for (let i = 1; i < parts.length; i++) {
      const dir = parts.slice(0, i).join('/');
      if (!byPath.has(dir)) byPath.set(dir, { path: dir, kind: 'dir', bytes: 0, updated_at: e.updated_at });
    }
  }
  for (const e of byPath.values()) {
    const parent = e.path.includes('/') ? e.path.slice(0, e.path.lastIndexOf('/')) : '';
    const list = children.get(parent) || [];
    list.push(e);
    children.set(parent, list);
  }
  /**
   * @param {string} dir
   * @param {number} depth
   * @returns {HTMLElement[]}
   */
  const level = (dir, depth) => (children.get(dir) || [])
    .sort((a, b) => Number(b.kind === 'dir') - Number(a.kind === 'dir') || a.path.localeCompare(b.path))
    .map((e) => renderEntry(panel, e, depth, () => level(e.path, depth + 1)));
  // Keep the focus on the entry that had it (the tree is built anew).
  const focused = /** @type {HTMLElement | null} */ (panel.tree.contains(document.activeElement) ? document.activeElement : null);
  const focusedPath = focused ? focused.dataset.path : undefined;
  panel.tree.replaceChildren(...level('', 0));
  if (focusedPath !== undefined) {
    /** @type {HTMLElement | null} */
    const again = panel.tree.querySelector(`button[data-path="${CSS.escape(focusedPath)}"]`);
    if (again) again.focus();
  }
}

/**
 * One entry of the tree.
 * @param {WorkspacePanel} panel
 * @param {WorkspaceEntry} entry
 * @param {number} depth
 * @param {() => HTMLElement[]} inner a directory's entries
 * @returns {HTMLElement}
 */
function renderEntry(panel, entry, depth, inner) {
  const name = entry.path.slice(entry.path.lastIndexOf('/') + 1);
  const dataset = { path: entry.path, kind: entry.kind };
  if (entry.kind === 'dir') {
    const open = !panel.collapsed.has(entry.path);
    const button = h('button', {
      type: 'button',
      class: 'workspace-item workspace-dir',
      testid: 'workspace-dir',
      'aria-expanded': String(open),
      onclick: () => {
        if (panel.collapsed.has(entry.path)) panel.collapsed.delete(entry.path);
        else panel.collapsed.add(entry.path);
        renderTree(panel);
      },
    }, h('span', { class: 'workspace-caret', 'aria-hidden': 'true' }, open ? '▾' : '▸'), `${name}/`);
    button.dataset.path = entry.path;
    button.dataset.depth = String(depth);
    return h(
      'li',
      { class: 'workspace-node', testid: 'workspace-entry', dataset },
      button,
      open ? h('ul', { class: 'workspace-subtree' }, inner()) : null,
    );
  }
  const selected = panel.selected === entry.path;
  const button = h('button', {
    type: 'button',
    class: 'workspace-item workspace-file',
    testid: 'workspace-file',
    'aria-current': selected ? 'true' : undefined,
    title: `${entry.path} · ${formatBytes(entry.bytes)}${entry.executable ? ' · executable' : ''}`,
    onclick: () => selectFile(panel, entry.path),
  },
  h('span', { class: 'workspace-name' }, entry.kind === 'symlink' ? `${name} →` : name),
  h('span', { class: 'workspace-size' }, entry.kind === 'file' ? formatBytes(entry.bytes) : 'link'));
  button.dataset.path = entry.path;
  button.dataset.depth = String(depth);
  return h('li', { class: 'workspace-node', testid: 'workspace-entry', dataset }, button);
}

/**
 * @param {WorkspacePanel} panel
 * @param {string} path
 */
function selectFile(panel, path) {
  panel.selected = path;
  panel.shownKey = null;
  renderTree(panel);
  renderSelected(panel);
}

/**
 * The viewer: the selected file, read again when its entry changed; a
 * file that went away says so.
 * @param {WorkspacePanel} panel
 */
async function renderSelected(panel) {
  const path = panel.selected;
  if (!path) {
    panel.viewer.hidden = true;
    return;
  }
  const entry = (panel.entries || []).find((e) => e.path === path);
  panel.viewer.hidden = false;
  if (!entry || entry.kind !== 'file') {
    panel.shownKey = null;
    panel.viewer.replaceChildren(viewerHead(path, null), h('p', { class: 'workspace-note', testid: 'workspace-file-note' }, 'This file is no longer in the workspace.'));
    return;
  }
  const key = `${path}@${entry.updated_at}@${entry.bytes}`;
  if (key === panel.shownKey) return;
  panel.shownKey = key;
  const request = ++panel.fileRequest;
  panel.viewer.setAttribute('aria-busy', 'true');
  /** @type {{bytes: Uint8Array, binary: boolean} | null} */
  let file = null;
  /** @type {string | null} */
  let failure = null;
  try {
    file = await readFile(panel.chatId, path);
  } catch (err) {
    failure = err instanceof Error ? err.message : String(err);
  }
  if (panel.closed || request !== panel.fileRequest) return;
  panel.viewer.removeAttribute('aria-busy');
  const head = viewerHead(path, entry);
  if (!file) {
    panel.shownKey = null;
    panel.viewer.replaceChildren(head, h('p', { class: 'workspace-note', testid: 'workspace-file-note' }, `The file could not be read: ${failure}`));
    return;
  }
  if (file.binary) {
    panel.viewer.replaceChildren(head, h('p', { class: 'workspace-note', testid: 'workspace-file-note' }, `Binary file, ${numberFormat.format(entry.bytes)} bytes.`));
    return;
  }
  const text = new TextDecoder().decode(file.bytes);
  const cut = entry.bytes > file.bytes.length;
  const code = h('code', { class: 'workspace-code', testid: 'workspace-file-content' });
  const language = languageOf(path);
  const highlighted = language && file.bytes.length <= HIGHLIGHT_MAX_BYTES ? highlightCode(text, language) : null;
  if (highlighted) {
    code.replaceChildren(highlighted);
    code.classList.add('hljs');
    code.dataset.language = language;
  } else {
    code.textContent = text;
  }
  panel.viewer.replaceChildren(head, h('pre', { class: 'workspace-content', tabindex: '0' }, code));
  if (cut) {
    panel.viewer.append(h('p', { class: 'workspace-note', testid: 'workspace-file-note' }, `Shown: the first ${formatBytes(file.bytes.length)} of ${formatBytes(entry.bytes)}; the archive has all of it.`));
  }
}

/**
 * The viewer's header: the path and the size.
 * @param {string} path
 * @param {WorkspaceEntry | null} entry
 */
function viewerHead(path, entry) {
  return h(
    'header',
    { class: 'workspace-viewer-head' },
    h('code', { class: 'workspace-viewer-path', testid: 'workspace-viewer-path' }, path),
    entry ? h('span', { class: 'workspace-size' }, `${formatBytes(entry.bytes)}${entry.executable ? ' · executable' : ''}`) : null,
  );
}

/**
 * `GET /chats/{chat}/workspace/file?path=`: at most VIEW_MAX_BYTES of it
 * (the rest is not read), and whether the server called it binary (not
 * UTF-8: `application/octet-stream`).
 * @param {string} chatId
 * @param {string} path
 * @returns {Promise<{bytes: Uint8Array, binary: boolean}>}
 */
async function readFile(chatId, path) {
  const response = await fetchApi(`/chats/${chatId}/workspace/file?path=${encodeURIComponent(path)}`);
  const binary = !(response.headers.get('Content-Type') || '').startsWith('text/');
  if (binary || !response.body) {
    if (response.body) await response.body.cancel();
    return { bytes: new Uint8Array(), binary };
  }
  const reader = response.body.getReader();
  /** @type {Uint8Array[]} */
  const chunks = [];
  let length = 0;
  while (length < VIEW_MAX_BYTES) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    length += value.length;
  }
  if (length >= VIEW_MAX_BYTES) await reader.cancel();
  const bytes = new Uint8Array(Math.min(length, VIEW_MAX_BYTES));
  let at = 0;
  for (const chunk of chunks) {
    const part = chunk.subarray(0, bytes.length - at);
    bytes.set(part, at);
    at += part.length;
    if (at >= bytes.length) break;
  }
  // Not in the middle of a UTF-8 sequence: drop a cut character's start.
  let end = bytes.length;
  if (length > VIEW_MAX_BYTES) {
    let back = end - 1;
    while (back > 0 && (bytes[back] & 0xc0) === 0x80) back--;
    end = back;
  }
  return { bytes: bytes.subarray(0, end), binary: false };
}

/**
 * highlight.js's language for a file, from its name; '' when unknown.
 * @param {string} path
 */
function languageOf(path) {
  const name = path.slice(path.lastIndexOf('/') + 1).toLowerCase();
  const ext = name.includes('.') ? name.slice(name.lastIndexOf('.') + 1) : name;
  return LANGUAGES[ext] || ext;
}

/**
 * "Download .tar.gz": `GET /chats/{chat}/workspace/archive` with the
 * token, saved as `workspace-<chat>.tar.gz`.
 * @param {WorkspacePanel} panel
 */
async function downloadArchive(panel) {
  const link = panel.download;
  if (link.dataset.state === 'loading') return;
  link.dataset.state = 'loading';
  link.setAttribute('aria-busy', 'true');
  /** @type {Blob | undefined} */
  const blob = await attempt(async () => {
    try {
      const response = await fetchApi(`/chats/${panel.chatId}/workspace/archive`);
      return await response.blob();
    } catch (err) {
      if (err instanceof ApiError) toast(`The archive could not be downloaded: ${err.message}`);
      throw err;
    }
  });
  delete link.dataset.state;
  link.removeAttribute('aria-busy');
  if (!blob || panel.closed) return;
  const url = URL.createObjectURL(blob);
  const save = h('a', { href: url, download: `workspace-${panel.chatId.slice(0, 8)}.tar.gz`, hidden: true });
  document.body.append(save);
  save.click();
  save.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
  announce('Workspace archive downloaded.');
}

// ---------------------------------------------------------------------------
// Workspace tool calls and results in the message list

/**
 * A workspace tool's call or result as shown in the messages, or null for
 * any other part (or one whose shape is not a workspace tool's: a dynamic
 * tool of the same name, arguments still streaming).
 * @param {Part} part
 * @returns {HTMLElement | null}
 */
export function renderWorkspacePart(part) {
  if (part.type === 'tool-call' && isWorkspaceTool(part.tool_name)) {
    const args = jsonObject(part.args ?? part.args_delta ?? '');
    return args ? renderCall(part.tool_name, part.tool_call_id, args) : null;
  }
  if (part.type === 'tool-result' && isWorkspaceTool(part.tool_name)) {
    const result = typeof part.result === 'string' ? jsonObject(part.result) : part.result;
    if (!result || typeof result !== 'object' || Array.isArray(result)) return null;
    return renderResult(part.tool_name, part.tool_call_id, part.is_error, result);
  }
  return null;
}

/**
 * `text` parsed as a JSON object, else null.
 * @param {string} text
 * @returns {Record<string, any> | null}
 */
function jsonObject(text) {
  try {
    const value = JSON.parse(text);
    return value && typeof value === 'object' && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

/**
 * @param {string} tool
 * @param {string} id
 * @param {Record<string, any>} args
 * @returns {HTMLElement | null}
 */
function renderCall(tool, id, args) {
  const dataset = { tool, toolCallId: id };
  if (tool === 'shell') {
    if (typeof args.command !== 'string') return null;
    return h(
      'div',
      { class: 'tool-call ws-call ws-shell-call', testid: 'workspace-shell-call', dataset },
      h('pre', { class: 'ws-command' }, h('span', { class: 'ws-prompt', 'aria-hidden': 'true' }, '$ '), h('code', { testid: 'workspace-shell-command' }, args.command)),
      typeof args.timeout_s === 'number' ? h('span', { class: 'ws-timeout' }, `timeout ${args.timeout_s} s`) : null,
    );
  }
  const path = typeof args.path === 'string' ? args.path : '';
  /** @type {string} */
  let line;
  if (tool === 'write_file') {
    if (typeof args.content !== 'string') return null;
    line = `${path} (${formatBytes(new TextEncoder().encode(args.content).length)})`;
  } else {
    line = path || (tool === 'list_files' ? '.' : '');
  }
  return h(
    'div',
    { class: 'tool-call ws-call ws-file-call', testid: 'workspace-file-call', dataset },
    h('span', { class: 'ws-verb' }, verbOf(tool)),
    h('code', { class: 'ws-path' }, line),
  );
}

/** @param {string} tool */
function verbOf(tool) {
  return { read_file: 'Read', write_file: 'Write', list_files: 'List', shell: 'Run' }[tool] || tool;
}

/**
 * @param {string} tool
 * @param {string} id
 * @param {boolean} isError
 * @param {Record<string, any>} r
 * @returns {HTMLElement}
 */
function renderResult(tool, id, isError, r) {
  const dataset = { tool, toolCallId: id };
  const cls = `tool-result ws-result${isError ? ' is-error' : ''}`;
  if (typeof r.error === 'string' && !('exit_code' in r)) {
    return h('div', { class: `${cls} ws-error`, testid: 'workspace-result', dataset },
      h('span', { class: 'ws-verb' }, `${verbOf(tool)} failed:`), h('span', { class: 'ws-message' }, r.error));
  }
  if (tool === 'shell') {
    const exit = typeof r.exit_code === 'number' ? r.exit_code : null;
    const limit = typeof r.limit === 'string' ? r.limit : null;
    const status = h('span', {
      class: `ws-exit${exit === 0 ? ' ws-exit-ok' : ' ws-exit-failed'}`,
      testid: 'workspace-exit-code',
    }, exit === null ? 'no exit code' : `exit ${exit}`);
    return h(
      'div',
      { class: `${cls} ws-shell-result`, testid: 'workspace-shell-result', dataset: { ...dataset, exitCode: exit === null ? '' : String(exit), limit: limit || '' } },
      h('div', { class: 'tool-head' }, status,
        limit ? h('span', { class: 'ws-limit', testid: 'workspace-limit' }, `limit: ${limit.replace(/_/g, ' ')}`) : null,
        r.truncated ? h('span', { class: 'ws-truncated' }, 'output cut') : null,
      ),
      typeof r.message === 'string' && r.message ? h('p', { class: 'ws-message', testid: 'workspace-limit-message' }, r.message) : null,
      output('stdout', typeof r.stdout === 'string' ? r.stdout : ''),
      output('stderr', typeof r.stderr === 'string' ? r.stderr : ''),
    );
  }
  /** @type {string} */
  let line;
  if (tool === 'write_file') {
    line = `${r.path ?? ''}: ${formatBytes(Number(r.bytes) || 0)} written`;
  } else if (tool === 'read_file') {
    line = `${r.path ?? 'file'}: ${formatBytes(Number(r.bytes) || 0)}${r.truncated ? ' (cut)' : ''}`;
  } else {
    const entries = Array.isArray(r.entries) ? r.entries : [];
    line = `${numberFormat.format(entries.length)} entr${entries.length === 1 ? 'y' : 'ies'}${r.truncated ? ' (cut)' : ''}`;
  }
  const more = tool === 'read_file' && typeof r.content === 'string'
    ? detailsOf('Content', r.content)
    : tool === 'list_files' && Array.isArray(r.entries) && r.entries.length
      ? detailsOf('Entries', r.entries.map((/** @type {any} */ e) => `${e && e.kind === 'dir' ? `${e.path}/` : e && e.path}${e && e.kind === 'file' ? `  ${formatBytes(e.bytes)}` : ''}`).join('\n'))
      : null;
  return h('div', { class: `${cls} ws-file-result`, testid: 'workspace-result', dataset },
    h('span', { class: 'ws-line' }, line), more);
}

/**
 * A closed `<details>` holding `text`.
 * @param {string} label
 * @param {string} text
 */
function detailsOf(label, text) {
  return h('details', { class: 'ws-details' }, h('summary', {}, label), h('pre', { class: 'ws-output' }, text));
}

/**
 * A stream of a command's output (nothing when empty), collapsed with
 * "Show all" when long.
 * @param {'stdout' | 'stderr'} name
 * @param {string} text
 * @returns {HTMLElement | null}
 */
function output(name, text) {
  if (!text) return null;
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  const pre = h('pre', { class: `ws-output ws-${name}`, testid: `workspace-${name}`, 'aria-label': name }, text);
  const long = lines > LONG_LINES || text.length > LONG_CHARS;
  const block = h('div', { class: `ws-stream${long ? ' ws-collapsed' : ''}` },
    h('span', { class: 'ws-stream-name' }, name), pre);
  if (long) {
    const id = `ws-${crypto.randomUUID()}`;
    pre.id = id;
    const toggle = h('button', {
      type: 'button',
      class: 'btn btn-small btn-quiet',
      testid: 'workspace-output-expand',
      'aria-controls': id,
      'aria-expanded': 'false',
    }, `Show all (${numberFormat.format(lines)} lines)`);
    toggle.addEventListener('click', () => {
      const collapsed = block.classList.toggle('ws-collapsed');
      toggle.setAttribute('aria-expanded', String(!collapsed));
      toggle.textContent = collapsed ? `Show all (${numberFormat.format(lines)} lines)` : 'Show less';
    });
    block.append(toggle);
  }
  return block;
}
