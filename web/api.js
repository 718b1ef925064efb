// @ts-check
// The HTTP side of the web UI: the signed-in session, `api()` (JSON calls
// with the token, errors as ApiError and a toast), `attempt()`, and the
// file routes (raw bytes, not JSON). The live stream is ./stream.js.
//
// Wire contract: ../../shared/API.md ("Errors": every non-2xx body is
// `{message, detail?, validations?}`; a `429` of the rate limit carries
// `Retry-After` in seconds).

import { toast, formatSeconds } from './ui.js';

/** @typedef {import('./wire.js').User} User */
/** @typedef {import('./wire.js').ErrorBody} ErrorBody */
/** @typedef {import('./wire.js').UploadedFile} UploadedFile */

/** The base path of every route. */
export const API = '/api/v2';

/**
 * The signed-in session: the API token and the user (`GET /users/me`),
 * both null when signed out. Signed in with a password, `token` is null,
 * the browser sends the `chatd_session` cookie and `csrf` holds the CSRF
 * token that every mutation carries in `X-CSRF-Token` (API.md "Sign-in,
 * search, sharing and export"). `onUnauthorized` runs when the signed-in
 * token is refused (`401`): app.js signs out. `reachable` is false from a
 * request that could not reach the server (a network error) until one
 * that does (or the live stream connects, `setReachable`);
 * `onReachable` is told each change (app.js: the connection banner).
 * @type {{token: string | null, csrf: string | null, me: User | null, onUnauthorized: () => void, reachable: boolean, onReachable: (reachable: boolean) => void}}
 */
export const session = {
  token: null,
  csrf: null,
  me: null,
  onUnauthorized: () => {},
  reachable: true,
  onReachable: () => {},
};

/**
 * Records whether the server answered: every request does, and the stream
 * (an open socket: reachable).
 * @param {boolean} reachable
 */
export function setReachable(reachable) {
  if (session.reachable === reachable) return;
  session.reachable = reachable;
  session.onReachable(reachable);
}

/**
 * The credentials of a request: `Authorization: Bearer` with a token; in
 * cookie mode (no token) the cookie goes by itself and a mutation (not
 * GET or HEAD) adds `X-CSRF-Token`.
 * @param {string} method
 * @param {string | null} [token]
 * @returns {Record<string, string>}
 */
export function authHeaders(method, token = session.token) {
  if (token) return { Authorization: `Bearer ${token}` };
  if (session.csrf && method !== 'GET' && method !== 'HEAD') return { 'X-CSRF-Token': session.csrf };
  return {};
}

/** A refused or failed request: the HTTP status (0: network) and the error body. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {ErrorBody | null} body
   * @param {number | null} [retryAfter]
   */
  constructor(status, body, retryAfter = null) {
    super((body && body.message) || `Request failed (HTTP ${status}).`);
    this.status = status;
    this.body = body;
    /** Seconds from the `Retry-After` header (a rate limit's `429`), or null. */
    this.retryAfter = retryAfter;
  }

  /** The body's `detail`, or null. */
  get detail() {
    return (this.body && typeof this.body.detail === 'string' && this.body.detail) || null;
  }

  /** `validations` of a `400`: `[{field, detail}]`. */
  get validations() {
    return (this.body && Array.isArray(this.body.validations) && this.body.validations) || [];
  }

  /**
   * What to show the user: the message; for a limit (`429`, `413`) also the
   * detail naming it and, with `Retry-After`, when to try again.
   */
  describe() {
    let text = this.message;
    if ((this.status === 429 || this.status === 413) && this.detail && !text.includes(this.detail)) {
      text += ` ${this.detail}`;
    }
    if (this.retryAfter !== null) text += ` Try again in ${formatSeconds(this.retryAfter)}.`;
    return text;
  }
}

/**
 * Calls the API with the signed-in token. Resolves to the JSON body (or
 * null); rejects with ApiError. Shows a toast with the error (see
 * `ApiError.describe`) unless `quiet`. The answer is `any` here: callers
 * name its type (API.md) with a `@type` annotation.
 * @param {string} method
 * @param {string} path under `/api/v2`, with its query string
 * @param {unknown} [body] sent as JSON when not undefined
 * @param {{quiet?: boolean, token?: string | null}} [options]
 * @returns {Promise<any>}
 */
export async function api(method, path, body, { quiet = false, token = session.token } = {}) {
  /** @type {Record<string, string>} */
  const headers = authHeaders(method, token);
  /** @type {RequestInit} */
  const init = { method, headers, credentials: 'same-origin' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(API + path, init);
  } catch {
    const error = new ApiError(0, { message: "Can't reach the server." });
    // The connection banner says it (app.js); a toast would repeat it.
    if (!quiet && session.reachable) toast(error.message);
    setReachable(false);
    throw error;
  }
  setReachable(true);
  const json = await jsonOf(response);
  if (!response.ok) {
    const retryAfter = Number.parseInt(response.headers.get('Retry-After') || '', 10);
    const error = new ApiError(response.status, json, Number.isFinite(retryAfter) ? retryAfter : null);
    if (!quiet) toast(error.describe());
    if (response.status === 401 && token === session.token && session.me) session.onUnauthorized();
    throw error;
  }
  return json;
}

/**
 * The JSON body of `response`, or null when it is empty or not JSON.
 * @param {Response} response
 * @returns {Promise<any>}
 */
async function jsonOf(response) {
  const text = await response.text();
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return null;
  }
}

/**
 * Runs `fn` and swallows ApiError (already shown as a toast); any other
 * error is logged and shown. Resolves to undefined on an error.
 * @template T
 * @param {() => Promise<T>} fn
 * @returns {Promise<T | undefined>}
 */
export async function attempt(fn) {
  try {
    return await fn();
  } catch (err) {
    if (!(err instanceof ApiError)) {
      console.error(err);
      toast(String((err && /** @type {any} */ (err).message) || err));
    }
    return undefined;
  }
}

/**
 * `POST /files?name=` with the file's bytes (API.md "Files"); resolves to
 * the stored File, rejects with ApiError.
 * @param {File} file
 * @returns {Promise<UploadedFile>}
 */
export async function uploadFile(file) {
  const init = {
    method: 'POST',
    headers: { ...authHeaders('POST'), 'Content-Type': file.type || 'application/octet-stream' },
    body: file,
  };
  const response = await fetch(`${API}/files?name=${encodeURIComponent(file.name)}`, init);
  const json = await jsonOf(response);
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}

/**
 * `GET /files/{id}`: the file's bytes (owner only).
 * @param {string} id
 * @returns {Promise<Blob>}
 */
export async function downloadFile(id) {
  const r = await fetch(`${API}/files/${id}`, { headers: authHeaders('GET') });
  if (!r.ok) throw new Error(`HTTP ${r.status}`);
  return r.blob();
}

/**
 * `GET /chats/{chat}/export?format=`: the export's bytes and the file name
 * of its `Content-Disposition` (null when it names none); rejects with
 * ApiError.
 * @param {string} chatId
 * @param {'markdown' | 'json'} format
 * @returns {Promise<{blob: Blob, filename: string | null}>}
 */
export async function downloadExport(chatId, format) {
  let response;
  try {
    response = await fetch(`${API}/chats/${chatId}/export?format=${format}`, { headers: authHeaders('GET') });
  } catch {
    setReachable(false);
    throw new ApiError(0, { message: "Can't reach the server." });
  }
  setReachable(true);
  if (!response.ok) {
    const error = new ApiError(response.status, await jsonOf(response));
    toast(error.status === 404 ? 'This chat cannot be exported (not found).' : error.describe());
    throw error;
  }
  const disposition = response.headers.get('Content-Disposition') || '';
  const star = /filename\*=UTF-8''([^;]+)/i.exec(disposition);
  const plain = /filename="?([^";]+)"?/i.exec(disposition);
  let filename = null;
  if (star) {
    try {
      filename = decodeURIComponent(star[1]);
    } catch {
      filename = null;
    }
  }
  if (!filename && plain) filename = plain[1];
  return { blob: await response.blob(), filename };
}
