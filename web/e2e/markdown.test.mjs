// Assistant text as Markdown: structure, highlighted code with a copy
// button, safe links, an XSS attempt that stays inert, the streaming
// preview; user text stays plain text. The fake model echoes the user's
// text (`echo: <text>`), so the user writes the Markdown the model answers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

const MARKDOWN = [
  'Here is **bold**, *emphasis*, `inline code` and a [link](https://example.com/docs).',
  '',
  '- first',
  '- second',
  '',
  '1. one',
  '2. two',
  '',
  '| name | value |',
  '|------|------:|',
  '| a    | 1     |',
  '| b    | 2     |',
  '',
  '```python',
  'def greet(name):',
  '    return f"hello {name}"  # a comment',
  '```',
  '',
  '> a quote',
].join('\n');

/** The last assistant message's `message-text`. */
function lastAnswer(page) {
  return h.messages(page, 'assistant').last().getByTestId('message-text');
}

test('assistant text renders as Markdown: lists, a table, highlighted code, safe links; user text stays plain', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, MARKDOWN);
    await h.expectStatus(page, 'waiting');
    const answer = lastAnswer(page);
    await answer.locator('table').waitFor();

    const shape = await answer.evaluate((el) => ({
      strong: el.querySelector('strong')?.textContent,
      em: el.querySelector('em')?.textContent,
      inline: el.querySelector('p code')?.textContent,
      bullets: [...el.querySelectorAll('ul > li')].map((li) => li.textContent),
      numbers: [...el.querySelectorAll('ol > li')].map((li) => li.textContent),
      headers: [...el.querySelectorAll('th')].map((th) => th.textContent),
      cells: [...el.querySelectorAll('td')].map((td) => td.textContent),
      rightAligned: el.querySelector('td:nth-child(2)')?.getAttribute('align'),
      quote: el.querySelector('blockquote')?.textContent.trim(),
      codeLang: el.querySelector('.code-block .code-lang')?.textContent,
      code: el.querySelector('.code-block pre code')?.textContent,
      keyword: el.querySelector('.code-block .hljs-keyword')?.textContent,
      comment: el.querySelector('.code-block .hljs-comment')?.textContent,
      links: [...el.querySelectorAll('a')].map((a) => ({ href: a.href, target: a.target, rel: a.rel, text: a.textContent })),
    }));
    assert.equal(shape.strong, 'bold');
    assert.equal(shape.em, 'emphasis');
    assert.equal(shape.inline, 'inline code');
    assert.deepEqual(shape.bullets, ['first', 'second']);
    assert.deepEqual(shape.numbers, ['one', 'two']);
    assert.deepEqual(shape.headers, ['name', 'value']);
    assert.deepEqual(shape.cells, ['a', '1', 'b', '2']);
    assert.equal(shape.rightAligned, 'right');
    assert.equal(shape.quote, 'a quote');
    assert.equal(shape.codeLang, 'python');
    assert.equal(shape.code, 'def greet(name):\n    return f"hello {name}"  # a comment\n');
    assert.equal(shape.keyword, 'def', 'highlight.js marked the keyword');
    assert.equal(shape.comment, '# a comment');
    assert.deepEqual(shape.links, [
      { href: 'https://example.com/docs', target: '_blank', rel: 'noopener noreferrer', text: 'link' },
    ]);

    // The user's own message is the text as typed: no element inside.
    const user = h.messages(page, 'user').first().getByTestId('message-text');
    assert.equal(await user.evaluate((el) => el.children.length), 0);
    assert.equal(await user.textContent(), MARKDOWN);
  });
});

test('an XSS attempt inside Markdown stays inert: no script, handler, frame, image or javascript: link', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page, context) => {
    await context.addInitScript(() => {
      window.__violations = [];
      document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective));
    });
    await h.signIn(page);
    const attack = [
      'Attack: <img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>',
      '',
      '<iframe src="javascript:window.__xss=3"></iframe> <svg onload="window.__xss=4"></svg>',
      '',
      '[js link](javascript:window.__xss=5) [data link](data:text/html,<script>window.__xss=6</script>)',
      '[vb](vbscript:msgbox) <a href="javascript:window.__xss=7">raw anchor</a>',
      '',
      '![tracking pixel](https://example.com/pixel.png) [mail](mailto:someone@example.com)',
      '',
      '<div style="position:fixed;inset:0" onclick="window.__xss=8">overlay</div>',
    ].join('\n');
    await h.createChat(page, attack);
    await h.expectStatus(page, 'waiting');
    const answer = lastAnswer(page);
    await h.until('the answer', () => answer.textContent(), { accept: (t) => t && t.includes('overlay') });

    const found = await answer.evaluate((el) => ({
      dangerous: [...el.querySelectorAll('script, iframe, svg, img, object, embed, style, form, div[style]')].map((n) => n.outerHTML),
      handlers: [...el.querySelectorAll('*')].flatMap((n) => [...n.attributes].filter((a) => a.name.startsWith('on') || a.name === 'style').map((a) => `${n.tagName} ${a.name}`)),
      links: [...el.querySelectorAll('a')].map((a) => ({ href: a.getAttribute('href'), target: a.target, rel: a.rel, text: a.textContent })),
      text: el.textContent,
    }));
    assert.deepEqual(found.dangerous, []);
    assert.deepEqual(found.handlers, []);
    // Only http(s) and mailto stay links (the image becomes a link to it); the rest is text.
    assert.deepEqual(found.links, [
      { href: 'https://example.com/pixel.png', target: '_blank', rel: 'noopener noreferrer', text: 'Image: tracking pixel' },
      { href: 'mailto:someone@example.com', target: '_blank', rel: 'noopener noreferrer', text: 'mail' },
    ]);
    for (const shown of ['<img src=x onerror="window.__xss=1">', '<script>window.__xss=2</script>', 'js link', 'data link', 'raw anchor', 'overlay']) {
      assert.ok(found.text.includes(shown), `the answer shows ${JSON.stringify(shown)} as text: ${found.text}`);
    }
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    // Nothing even tried: the CSP saw no inline script, handler or style.
    assert.deepEqual(await page.evaluate(() => window.__violations), []);
  });
});

test('the copy button of a code block puts the code on the clipboard', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    const code = 'fn main() {\n    println!("copied");\n}';
    await h.createChat(page, `Copy this:\n\n\`\`\`rust\n${code}\n\`\`\``);
    await h.expectStatus(page, 'waiting');
    const copy = h.messages(page, 'assistant').last().getByTestId('copy-code');
    assert.equal(await copy.getAttribute('aria-label'), 'Copy rust code');
    await copy.click();
    await h.expectText(copy, 'Copied');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), code);
    // The label comes back.
    await h.expectText(copy, 'Copy', { timeout: h.ms(5000) });
  }, { permissions: ['clipboard-read', 'clipboard-write'] });
});

test('the streaming preview renders the Markdown of the growing text before the answer is committed', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    // Markdown first, then enough text (with `slow`) to stream for a while.
    const text = '**strong words** then\n\n- item one\n- item two\n\nand a slow, long tail of plain words that keeps streaming for some seconds more';
    await h.createChat(page, text);
    const preview = h.byId(page, 'message-preview');
    // While it streams (nothing committed yet), the preview already has
    // Markdown structure.
    await h.until('a preview with bold text and a list', async () => {
      if ((await h.messageTexts(page, 'assistant')).length > 0) throw new Error('committed before the preview was seen');
      return preview.evaluate((el) => ({
        strong: el.querySelector('.markdown strong')?.textContent ?? null,
        items: el.querySelectorAll('.markdown li').length,
      }));
    }, { accept: (v) => v && v.strong === 'strong words' && v.items >= 1, timeout: h.SLOW_WAIT });

    // Stopped here, the answer so far is committed, rendered the same way.
    await h.byId(page, 'interrupt').click();
    await h.expectStatus(page, 'waiting');
    await h.until('the committed answer', () => h.messageTexts(page, 'assistant'), { accept: (texts) => texts.length === 1 });
    const answer = lastAnswer(page);
    assert.equal(await answer.locator('strong').textContent(), 'strong words');
    assert.ok((await answer.locator('li').count()) >= 1);
    await preview.waitFor({ state: 'hidden' });
  });
});
