// A chat with a workspace (API.md "Workspaces and provider-hosted tools"):
// created with the new-chat form's "Workspace" checkbox; the scripted model
// calls write_file and then shell (which waits for approval: scripts/e2e.sh
// runs chatd with the default --workspace-approval shell); the messages show
// the write compactly and the command with its output and exit code; the
// workspace panel lists the files (read again after each committed step),
// the viewer shows a file highlighted, a directory collapses, and the
// archive downloads.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

const SOURCE = 'def hello():\n    print("hi from the workspace")\n';

/** The tree's file button for `path`. */
const fileButton = (page, path) => h.byId(page, 'workspace-tree').locator(`[data-testid="workspace-file"][data-path="${path}"]`);

test('a workspace chat shows its tool calls, its files, a file and the archive', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.openSidebar(page);
    await h.byId(page, 'new-chat').click();
    await h.openAdvanced(page);
    await h.byId(page, 'new-chat-workspace').check();
    const write = JSON.stringify({ path: 'src/hello.py', content: SOURCE });
    await h.byId(page, 'composer-input').fill(`call write_file ${write}`);
    const created = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/api/v2/chats'));
    await h.byId(page, 'send-queue').click();
    assert.equal((await created).postDataJSON().workspace, true, 'the form sends workspace: true');
    const id = await h.until('the new chat to open', () => h.byId(page, 'chat-view').getAttribute('data-chat-id', { timeout: 1000 }));

    // write_file: one line for the call and one for its result.
    await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });
    const call = h.byId(page, 'messages').getByTestId('workspace-file-call');
    await h.expectText(call.locator('.ws-verb'), 'Write');
    await h.expectText(call.locator('code'), `src/hello.py (${Buffer.byteLength(SOURCE)} B)`);
    await h.expectText(h.byId(page, 'messages').getByTestId('workspace-result'), `src/hello.py: ${Buffer.byteLength(SOURCE)} B written`);

    // The panel: the directory and the file; the viewer highlights Python.
    const panel = h.byId(page, 'workspace-panel');
    await panel.waitFor({ state: 'visible' });
    await fileButton(page, 'src/hello.py').waitFor({ state: 'visible' });
    await h.expectText(h.byId(page, 'workspace-summary'), `1 file · ${Buffer.byteLength(SOURCE)} B`);
    await fileButton(page, 'src/hello.py').click();
    const content = h.byId(page, 'workspace-file-content');
    await h.until('the file in the viewer', () => content.textContent(), { accept: (text) => text === SOURCE });
    assert.equal(await content.getAttribute('data-language'), 'python');
    assert.ok((await content.locator('span[class^="hljs-"]').count()) > 0, 'the viewer highlights the code');
    await h.expectText(h.byId(page, 'workspace-viewer-path'), 'src/hello.py');

    // A directory collapses and opens again.
    const dir = h.byId(page, 'workspace-tree').locator('[data-testid="workspace-dir"][data-path="src"]');
    await dir.click();
    assert.equal(await dir.getAttribute('aria-expanded'), 'false');
    await h.expectCount(fileButton(page, 'src/hello.py'), 0);
    await dir.click();
    await fileButton(page, 'src/hello.py').waitFor({ state: 'visible' });

    // shell: approved in the approval card, then the command, its output
    // and exit code; the file it made shows up in the panel.
    const command = 'echo made > made.txt; cat src/hello.py; echo oops >&2; exit 3';
    await h.send(page, `call shell ${JSON.stringify({ command })}`);
    await h.expectStatus(page, 'requires_action', { timeout: h.SLOW_WAIT });
    const card = h.byId(page, 'approval-card');
    await h.expectText(card.getByTestId('approval-tool'), 'shell');
    await card.getByTestId('approval-approve').click();
    await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });
    await h.expectText(h.byId(page, 'workspace-shell-command'), command);
    const result = h.byId(page, 'workspace-shell-result');
    await h.expectText(result.getByTestId('workspace-exit-code'), 'exit 3');
    await h.expectText(result.getByTestId('workspace-stdout'), SOURCE.trim());
    await h.expectText(result.getByTestId('workspace-stderr'), 'oops');
    assert.equal(await result.getAttribute('data-exit-code'), '3');
    assert.equal(await result.getAttribute('data-limit'), '');
    // Output is text, never HTML.
    assert.equal(await result.locator('b, script, img').count(), 0);

    await fileButton(page, 'made.txt').waitFor({ state: 'visible' });
    await h.until('two files in the summary', () => h.textOf(h.byId(page, 'workspace-summary')), { accept: (text) => /^2 files · /.test(text ?? '') });
    const server = await h.api('GET', `/api/v2/chats/${id}/workspace`);
    assert.deepEqual(server.filter((e) => e.kind === 'file').map((e) => e.path).sort(), ['made.txt', 'src/hello.py']);

    // The archive: fetched with the token, saved as a .tar.gz.
    const download = page.waitForEvent('download');
    await h.byId(page, 'workspace-download').click();
    const file = await download;
    assert.match(file.suggestedFilename(), /^workspace-[0-9a-f]{8}\.tar\.gz$/);
    const saved = await file.path();
    const bytes = readFileSync(saved);
    assert.deepEqual([...bytes.subarray(0, 2)], [0x1f, 0x8b], 'a gzip stream');

    if (process.env.E2E_ARTIFACTS_DIR) {
      await page.screenshot({ path: join(process.env.E2E_ARTIFACTS_DIR, 'workspace-panel.png') });
    }
  });
});

test('at phone width the panel opens over the messages and long output is collapsed', { timeout: h.TEST_TIMEOUT }, async (t) => {
  await h.withPage(browser(), t, async (page) => {
    const chat = await h.api('POST', '/api/v2/chats', {
      content: [{ type: 'text', text: `call shell ${JSON.stringify({ command: 'seq 1 40 | tee numbers.txt' })}` }],
      workspace: true,
    });
    await h.expectApiStatus(chat.id, 'requires_action', { timeout: h.SLOW_WAIT });
    await h.signIn(page);
    await page.goto(`${h.CHATD_URL}/#/chats/${chat.id}`);
    await h.byId(page, 'approval-card').getByTestId('approval-approve').click();
    await h.expectStatus(page, 'waiting', { timeout: h.SLOW_WAIT });

    // Forty lines: collapsed, with "Show all (40 lines)".
    const result = h.byId(page, 'workspace-shell-result');
    await h.expectText(result.getByTestId('workspace-exit-code'), 'exit 0');
    const expand = result.getByTestId('workspace-output-expand');
    await h.expectText(expand, 'Show all (40 lines)');
    assert.equal(await expand.getAttribute('aria-expanded'), 'false');
    await expand.click();
    assert.equal(await expand.getAttribute('aria-expanded'), 'true');
    await h.expectText(expand, 'Show less');

    // Closed at first on a phone; the header's button opens it over the messages.
    const toggle = h.byId(page, 'workspace-toggle');
    await toggle.waitFor({ state: 'visible' });
    assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
    assert.equal(await h.byId(page, 'workspace-panel').isVisible(), false);
    await toggle.click();
    await fileButton(page, 'numbers.txt').click();
    await h.until('the file in the viewer', () => h.byId(page, 'workspace-file-content').textContent(), {
      accept: (text) => text.startsWith('1\n2\n') && text.endsWith('40\n'),
    });
    if (process.env.E2E_ARTIFACTS_DIR) {
      await page.screenshot({ path: join(process.env.E2E_ARTIFACTS_DIR, 'workspace-phone.png') });
    }
    await h.byId(page, 'workspace-close').click();
    await h.byId(page, 'workspace-panel').waitFor({ state: 'hidden' });
    assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
  }, { ...h.PHONE, colorScheme: 'dark' });
});
