// @ts-check
// The live stream client of one chat (API.md "Stream"): a WebSocket to
// `/chats/{chat}/stream?after_id=`, authenticated with the
// `chatd.bearer.<token>` subprotocol (browsers cannot set headers on a
// WebSocket); frames are JSON arrays of ChatStreamEvents. When the socket
// closes it finds out why (a deleted chat, a refused token) before it
// reconnects with exponential backoff (0.5 s doubling to 10 s, with
// jitter) and `?after_id=` of the newest message it has.

import { API, ApiError, api, session, setReachable } from './api.js';

/** @typedef {import('./wire.js').StreamEvent} StreamEvent */

const BACKOFF_INITIAL_MS = 500;
const BACKOFF_MAX_MS = 10000;

/**
 * What the stream tells its owner.
 * @typedef {object} StreamHandlers
 * @property {() => number} afterId the newest committed message id the
 *   owner has (0: none)
 * @property {(events: StreamEvent[]) => void} onEvents a frame's events
 * @property {(state: 'live' | 'reconnecting' | 'not live') => void} onConnection
 * @property {() => void} onDeleted the chat was deleted
 * @property {(error: ApiError) => void} onRefused the server refuses the
 *   stream for good (`404`, `401`); it is not opened again
 */

/**
 * An open (or reconnecting) stream; `close()` ends it for good.
 * @typedef {object} StreamClient
 * @property {boolean} live the socket is open
 * @property {() => void} close
 */

/**
 * Opens the stream of `chatId` and keeps it open until `close()`.
 * @param {string} chatId
 * @param {StreamHandlers} handlers
 * @returns {StreamClient}
 */
export function openStream(chatId, handlers) {
  /** @type {{ws: WebSocket | null, open: boolean} | null} the current socket */
  let conn = null;
  let backoff = 0;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let reconnectTimer;
  let closed = false;

  const client = {
    get live() {
      return Boolean(conn && conn.open);
    },
    close() {
      closed = true;
      clearTimeout(reconnectTimer);
      if (conn && conn.ws) conn.ws.close(1000, 'leaving');
    },
  };

  function url() {
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    // after_id must be positive: with no cached message, ask for everything.
    const afterId = handlers.afterId();
    const query = afterId > 0 ? `?after_id=${afterId}` : '';
    return `${scheme}//${location.host}${API}/chats/${chatId}/stream${query}`;
  }

  function connect() {
    if (closed) return;
    let ws;
    try {
      ws = new WebSocket(url(), session.token ? ['chatd', `chatd.bearer.${session.token}`] : ['chatd']);
    } catch (err) {
      // A token with characters a subprotocol cannot carry (e.g. "/", "=",
      // spaces) cannot authenticate the live view; retrying cannot help.
      handlers.onConnection('not live');
      handlers.onRefused(new ApiError(0, {
        message: `The live view cannot use this token (${/** @type {Error} */ (err).message}). Use a token from "chatd token create" (letters, digits, "-" and "_").`,
      }));
      return;
    }
    const current = { ws, open: false };
    conn = current;
    ws.addEventListener('open', () => {
      current.open = true;
      backoff = 0;
      setReachable(true);
      handlers.onConnection('live');
    });
    ws.addEventListener('message', (e) => {
      if (conn !== current || closed) return;
      onFrame(e.data);
    });
    ws.addEventListener('close', (e) => {
      if (conn !== current || closed) return;
      handlers.onConnection('reconnecting');
      onClosed(current, e);
    });
  }

  /** @param {string} data */
  function onFrame(data) {
    let events;
    try {
      events = JSON.parse(data);
    } catch {
      console.warn('unparsable stream frame');
      return;
    }
    handlers.onEvents(Array.isArray(events) ? events : [events]);
  }

  /**
   * @param {{open: boolean}} closedConn
   * @param {CloseEvent} event
   */
  async function onClosed(closedConn, event) {
    if (event.code === 1000 && closedConn.open) {
      // The chat was deleted.
      const still = await api('GET', `/chats/${chatId}`, undefined, { quiet: true }).catch((e) => e);
      if (still instanceof ApiError && still.status === 404) {
        handlers.onDeleted();
        return;
      }
    }
    if (!closedConn.open) {
      // The handshake failed: find out why before retrying forever.
      const check = await api('GET', `/chats/${chatId}`, undefined, { quiet: true }).catch((e) => e);
      if (closed) return;
      if (check instanceof ApiError && (check.status === 404 || check.status === 401)) {
        handlers.onRefused(check);
        return;
      }
    }
    scheduleReconnect();
  }

  /** Exponential backoff (0.5 s doubling to 10 s) with jitter. */
  function scheduleReconnect() {
    if (closed) return;
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** backoff);
    backoff = Math.min(backoff + 1, 10);
    const delay = base / 2 + Math.random() * (base / 2);
    clearTimeout(reconnectTimer);
    reconnectTimer = setTimeout(connect, delay);
  }

  connect();
  return client;
}
