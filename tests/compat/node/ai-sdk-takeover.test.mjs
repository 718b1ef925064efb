// The AI SDK's chat transport across a replica crash (API.md "Pinned details
// of the compatible protocols": an attempt discarded after it streamed must
// not leave a client holding text that will not be committed). Run by
// scripts/compat-test.sh after the other tests: it kills (SIGKILL) the
// replica that runs the turn.
//
// A turn with a slow answer starts on one replica; a second client follows
// it with reconnectToStream on the replica that does not run it; the runner
// is killed mid-answer, the other replica takes the chat over and answers
// again. The follower's stream must end with the committed answer as its
// message (whatever the server sends to discard the first attempt), and a
// reconnect on the survivor afterwards answers 204.
//
// Environment: CHATD_URL_A, CHATD_URL_B, CHATD_TOKEN, CHATD_PID_A, CHATD_PID_B.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DefaultChatTransport, generateId, readUIMessageStream } from 'ai';

const URLS = [process.env.CHATD_URL_A, process.env.CHATD_URL_B];
const PIDS = { [URLS[0]]: Number(process.env.CHATD_PID_A), [URLS[1]]: Number(process.env.CHATD_PID_B) };
const TOKEN = process.env.CHATD_TOKEN;
assert.ok(URLS[0] && URLS[1] && TOKEN && PIDS[URLS[0]] && PIDS[URLS[1]], 'CHATD_URL_A/B, CHATD_PID_A/B and CHATD_TOKEN are needed');

function transport(url) {
  return new DefaultChatTransport({
    api: `${url}/api/v2/ai-sdk/chat`,
    headers: { Authorization: `Bearer ${TOKEN}` },
  });
}

async function api(url, path) {
  const res = await fetch(`${url}${path}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  assert.equal(res.status, 200, `GET ${path}: ${res.status}`);
  return res.json();
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function summary(chunks) {
  return chunks.map((c) => (c.type === 'start' ? `start(${c.messageId ?? ''})` : c.type === 'text-delta' ? `+${JSON.stringify(c.delta)}` : c.type)).join(' ');
}

// Reads from `reader` into `chunks` until `until(chunks)` or the end.
async function readUntil(reader, chunks, until) {
  for (;;) {
    if (until(chunks)) return true;
    const { value, done } = await reader.read();
    if (done) return false;
    chunks.push(value);
  }
}

const textSoFar = (chunks) => chunks.filter((c) => c.type === 'text-delta').map((c) => c.delta).join('');

test('a follower on the other replica ends with the committed answer after the runner is killed', { timeout: 90_000 }, async () => {
  const nonce = generateId().slice(0, 8);
  const text = `a slow takeover ${nonce}`;
  const answer = `echo: ${text}`;
  const chatId = generateId();

  // The turn starts on replica A.
  const live = await transport(URLS[0]).sendMessages({
    chatId,
    messages: [{ id: generateId(), role: 'user', parts: [{ type: 'text', text }] }],
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: AbortSignal.timeout(80_000),
  });
  const liveReader = live.getReader();
  const liveChunks = [];
  assert.ok(await readUntil(liveReader, liveChunks, (c) => textSoFar(c).length >= 2), `no text: ${summary(liveChunks)}`);

  // Which chat and which replica runs it.
  const chats = await api(URLS[1], '/api/v2/chats?limit=100');
  const chat = chats.find((c) => c.last_message_preview === text);
  assert.ok(chat, `no chat whose preview is ${JSON.stringify(text)}`);
  let owner;
  for (let i = 0; i < 50 && !owner; i++) {
    const c = await api(URLS[1], `/api/v2/chats/${chat.id}`);
    const replicas = await api(URLS[1], '/api/v2/replicas');
    const r = replicas.find((x) => x.id === c.worker_id);
    owner = r && URLS.find((u) => u === r.advertise_url.replace(/\/$/, ''));
    if (!owner) await sleep(100);
  }
  assert.ok(owner, 'the chat\'s runner is neither replica');
  const survivor = URLS.find((u) => u !== owner);

  // A follower on the survivor, from the turn's start.
  const follow = await transport(survivor).reconnectToStream({ chatId });
  assert.ok(follow, 'reconnectToStream returned null while the turn runs');
  const followReader = follow.getReader();
  const followChunks = [];
  assert.ok(await readUntil(followReader, followChunks, (c) => textSoFar(c).length >= 2), `no text: ${summary(followChunks)}`);
  const before = textSoFar(followChunks).length;
  liveReader.cancel().catch(() => {});

  process.kill(PIDS[owner], 'SIGKILL');
  console.log(`takeover: killed the runner ${owner} after ${before} characters; following on ${survivor}`);

  await readUntil(followReader, followChunks, () => false);
  console.log(`takeover: follower's chunks: ${summary(followChunks)}`);
  const types = followChunks.map((c) => c.type);
  assert.equal(types.at(-1), 'finish', summary(followChunks));

  // What useChat would show: the message readUIMessageStream builds.
  const replay = new ReadableStream({
    start(controller) {
      for (const c of followChunks) controller.enqueue(c);
      controller.close();
    },
  });
  let message;
  for await (const m of readUIMessageStream({ stream: replay, terminateOnError: true })) message = m;
  const shown = message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
  assert.equal(shown, answer, `the follower shows ${JSON.stringify(shown)}; chunks: ${summary(followChunks)}`);

  // Committed: the same answer, once.
  const page = await api(survivor, `/api/v2/chats/${chat.id}/messages`);
  const texts = page.messages.flatMap((m) => m.content.filter((p) => p.type === 'text').map((p) => p.text));
  assert.deepEqual(texts, [text, answer]);
  // No turn running any more.
  assert.equal(await transport(survivor).reconnectToStream({ chatId }), null);
});
