// The live connection survives a server restart: scripts/e2e.sh runs chatd
// in a loop that starts it again on the same port when it exits, and tells
// the tests its pid in CHATD_PID_FILE. The runner runs this file last and
// alone, since the restart breaks every other test's connection.
import { test } from 'node:test';
import * as h from './helpers.mjs';

const browser = h.sharedBrowser();

test('the connection indicator goes reconnecting then live across a server restart', { timeout: h.TEST_TIMEOUT }, async (t) => {
  if (!h.chatdPid()) {
    t.skip('CHATD_PID_FILE not set: the server is not restartable from the tests');
    return;
  }
  await h.withPage(browser(), t, async (page) => {
    await h.signIn(page);
    await h.createChat(page, 'before the restart');
    await h.expectMessageTexts(page, 'assistant', ['echo: before the restart']);
    await h.expectConnection(page, 'live');

    // scripts/e2e.sh starts chatd again on the same port when it exits.
    const pid = h.chatdPid();
    process.kill(pid, 'SIGTERM');
    await h.expectSeenInOrder(page, 'connection', ['live', 'reconnecting', 'live'], { timeout: h.ms(60_000) });
    await h.until('a new chatd process', () => {
      const now = h.chatdPid();
      return now && now !== pid;
    });
    await h.expectConnection(page, 'live');

    await h.send(page, 'after the restart');
    await h.expectMessageTexts(page, 'assistant', ['echo: before the restart', 'echo: after the restart'], {
      timeout: h.SLOW_WAIT,
    });
    await h.expectStatus(page, 'waiting');
  });
});
