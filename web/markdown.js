// @ts-check
// Model text as Markdown, rendered to sanitised DOM (an ES module of the
// chatd web UI, imported by app.js).
//
// Pipeline: marked (GitHub-flavoured Markdown, single newlines kept as line
// breaks) turns the text into HTML, with raw HTML in the text shown as text
// and images shown as links (the CSP would block remote images anyway, and
// an image URL is a way to leak the conversation); DOMPurify keeps only the
// tags and attributes Markdown produces, links only when absolute http,
// https or mailto (others lose their link and stay as text), and opens them
// in a new tab with rel="noopener noreferrer"; highlight.js colours code
// blocks whose language it knows (its output is sanitised too), and each
// code block gets a header with its language and a copy button.
//
// Only model text goes through here; user text is always plain text.

import { Marked } from './vendor/marked-18.2.1/marked.esm.js';
import hljs from './vendor/highlight.js-11.12.0/highlight.min.js';
// A UMD file: as a module, it sets globalThis.DOMPurify (a factory).
import './vendor/dompurify-3.5.0/purify.min.js';

const createDOMPurify = globalThis.DOMPurify;

/** Link schemes that stay links. */
const SAFE_LINK = /^(?:https?|mailto):/i;

const ALLOWED_TAGS = [
  'a', 'b', 'blockquote', 'br', 'code', 'del', 'em', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6',
  'hr', 'i', 'input', 'kbd', 'li', 'ol', 'p', 'pre', 's', 'strong', 'sub', 'sup',
  'table', 'tbody', 'td', 'tfoot', 'th', 'thead', 'tr', 'ul',
];
const ALLOWED_ATTR = ['href', 'title', 'align', 'start', 'type', 'checked', 'disabled', 'class'];

/** @param {string} text */
function escapeHtml(text) {
  return String(text)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    // Raw HTML in model text is shown as the text it is.
    html({ text }) {
      return escapeHtml(text);
    },
    // An image becomes a link to it (never loaded).
    image({ href, title, text }) {
      const label = `Image: ${text || href}`;
      const titleAttr = title ? ` title="${escapeHtml(title)}"` : '';
      return `<a href="${escapeHtml(href)}"${titleAttr}>${escapeHtml(label)}</a>`;
    },
  },
});

/** The sanitiser of Markdown's HTML (its own instance: the hooks are per instance). */
const purifier = createDOMPurify(window);
purifier.addHook('uponSanitizeAttribute', (node, data) => {
  // Classes only as a code block's language (`language-rust`).
  if (data.attrName === 'class' && !(node.nodeName === 'CODE' && /^language-[\w+#.-]+$/.test(data.attrValue))) {
    data.keepAttr = false;
  }
});
purifier.addHook('afterSanitizeAttributes', (node) => {
  if (node.nodeName === 'A') {
    if (SAFE_LINK.test(node.getAttribute('href') || '')) {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer');
    } else {
      node.removeAttribute('href');
    }
  }
});

/** @type {DOMPurifyConfig} */
const PURIFY_OPTIONS = {
  ALLOWED_TAGS,
  ALLOWED_ATTR,
  ALLOW_DATA_ATTR: false,
  // No ALLOWED_URI_REGEXP: DOMPurify checks every attribute that is not
  // URI-safe against it (it would drop `align="right"`); the hook above
  // keeps only http, https and mailto links.
  RETURN_DOM_FRAGMENT: true,
};

/** The sanitiser of highlight.js's output: spans with classes, nothing else. */
const highlightPurifier = createDOMPurify(window);
/** @type {DOMPurifyConfig} */
const HIGHLIGHT_OPTIONS = { ALLOWED_TAGS: ['span'], ALLOWED_ATTR: ['class'], RETURN_DOM_FRAGMENT: true };

/**
 * `text` (Markdown) as a DocumentFragment of sanitised DOM: code blocks
 * highlighted, each with a copy button; tables scroll sideways.
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function renderMarkdown(text) {
  const html = marked.parse(text || '');
  const fragment = purifier.sanitize(html, PURIFY_OPTIONS);
  // A link that lost its href is just its text.
  for (const a of fragment.querySelectorAll('a:not([href])')) a.replaceWith(...a.childNodes);
  // Inputs only as the read-only checkboxes of task lists.
  for (const input of fragment.querySelectorAll('input')) {
    if (input.getAttribute('type') === 'checkbox') input.disabled = true;
    else input.remove();
  }
  for (const table of fragment.querySelectorAll('table')) {
    const wrap = document.createElement('div');
    wrap.className = 'table-wrap';
    table.replaceWith(wrap);
    wrap.append(table);
  }
  for (const code of fragment.querySelectorAll('pre > code')) decorateCodeBlock(/** @type {HTMLElement} */ (code));
  return fragment;
}

/**
 * Replaces `el`'s children with the rendering of `text`.
 * @param {Element} el
 * @param {string} text
 */
export function renderMarkdownInto(el, text) {
  el.replaceChildren(renderMarkdown(text));
}

/**
 * A code block highlighted (when its language is known), under a header
 * with its language and a copy button.
 * @param {HTMLElement} code the `<code>` of a `<pre>`
 */
function decorateCodeBlock(code) {
  const pre = /** @type {HTMLElement} */ (code.parentElement);
  const source = code.textContent;
  const match = /^language-([\w+#.-]+)$/.exec(code.className);
  const requested = match ? match[1].toLowerCase() : '';
  const language = requested && hljs.getLanguage(requested) ? requested : '';
  if (language) {
    const { value } = hljs.highlight(source, { language, ignoreIllegals: true });
    code.replaceChildren(highlightPurifier.sanitize(value, HIGHLIGHT_OPTIONS));
    code.classList.add('hljs');
  }
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.className = 'btn btn-small btn-quiet copy-code';
  copy.dataset.testid = 'copy-code';
  copy.textContent = 'Copy';
  copy.setAttribute('aria-label', requested ? `Copy ${requested} code` : 'Copy code');
  copy.addEventListener('click', () => copyCode(copy, source.replace(/\n$/, '')));
  const label = document.createElement('span');
  label.className = 'code-lang';
  label.textContent = requested || 'text';
  const head = document.createElement('div');
  head.className = 'code-head';
  head.append(label, copy);
  const block = document.createElement('div');
  block.className = 'code-block';
  pre.replaceWith(block);
  pre.tabIndex = 0; // scrollable sideways with the keyboard
  block.append(head, pre);
}

/**
 * @param {HTMLButtonElement & {copyTimer?: ReturnType<typeof setTimeout>}} button
 * @param {string} text
 */
async function copyCode(button, text) {
  const ok = await copyText(text);
  button.textContent = ok ? 'Copied' : 'Copy failed';
  button.dataset.copied = String(ok);
  clearTimeout(button.copyTimer);
  button.copyTimer = setTimeout(() => {
    button.textContent = 'Copy';
    delete button.dataset.copied;
  }, 2000);
}

/**
 * Puts `text` on the clipboard: the Clipboard API where the page is a
 * secure context (https, localhost), else a selected off-screen textarea
 * and `execCommand('copy')` (plain http on another host). Resolves to
 * whether it worked.
 * @param {string} text
 * @returns {Promise<boolean>}
 */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Denied: try the fallback.
    }
  }
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.className = 'copy-buffer';
  document.body.append(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand('copy');
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}

/**
 * `source` highlighted as `language` (a highlight.js name or alias) and
 * sanitised like a code block's (spans with classes only), or null when
 * highlight.js does not know the language. For code that is not Markdown
 * (the workspace viewer, ./workspace.js).
 * @param {string} source
 * @param {string} language
 * @returns {DocumentFragment | null}
 */
export function highlightCode(source, language) {
  if (!language || !hljs.getLanguage(language)) return null;
  const { value } = hljs.highlight(source, { language, ignoreIllegals: true });
  return highlightPurifier.sanitize(value, HIGHLIGHT_OPTIONS);
}
