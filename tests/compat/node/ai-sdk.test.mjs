// The AI SDK's chat transport (npm `ai`, pinned in package-lock.json)
// against a live chatd: API.md "Compatible protocols" and "Pinned details of
// the compatible protocols". DefaultChatTransport and readUIMessageStream
// are used directly, as useChat uses them, without React.
//
// Environment (scripts/compat-test.sh): CHATD_URL_A, CHATD_URL_B (two
// replicas on one database), CHATD_TOKEN (the bootstrap admin token). The
// fake LLM runs in scripted mode (`echo: <last user text>`; `call NAME JSON`
// calls tool NAME; a tool result answers `tool said: <result>`; text with
// `slow` streams over several seconds; `search QUERY` on the second model
// config, `fake-search-model` of Anthropic kind with the provider's web
// search, searches and cites its result).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';

import { DefaultChatTransport, generateId, readUIMessageStream, validateUIMessages } from 'ai';

const URL_A = process.env.CHATD_URL_A;
const URL_B = process.env.CHATD_URL_B;
const TOKEN = process.env.CHATD_TOKEN;
assert.ok(URL_A && URL_B && TOKEN, 'CHATD_URL_A, CHATD_URL_B and CHATD_TOKEN are needed');

const TOOLS = [{
  name: 'get_weather',
  description: 'The weather in a city.',
  input_schema: { type: 'object', properties: { city: { type: 'string' } } },
}];

function transport(url = URL_A) {
  return new DefaultChatTransport({
    api: `${url}/api/v2/ai-sdk/chat`,
    headers: { Authorization: `Bearer ${TOKEN}` },
  });
}

function userMessage(text) {
  return { id: generateId(), role: 'user', parts: [{ type: 'text', text }] };
}

function textOf(message) {
  return message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
}

function isToolPart(p) {
  return p.type === 'dynamic-tool' || p.type.startsWith('tool-');
}

function summary(chunks) {
  return chunks.map((c) => (c.type === 'start' ? `start(${c.messageId ?? ''})` : c.type)).join(' ');
}

// Reads a UI message chunk stream to its end: every chunk, and the last
// UIMessage readUIMessageStream builds from them. The stream starts with a
// `start` chunk naming chatd's assistant message (API.md, pinned details);
// a later `start` may only repeat that id (readUIMessageStream starts a new
// message on another id and drops the text it had).
async function readAll(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length > 0, 'an empty UI message stream');
  assert.equal(chunks[0].type, 'start', `the stream does not begin with start: ${summary(chunks)}`);
  assert.equal(typeof chunks[0].messageId, 'string',
    `the first start chunk names no messageId (chatd's assistant message id): ${summary(chunks)}`);
  for (const c of chunks.filter((c) => c.type === 'start')) {
    assert.equal(c.messageId, chunks[0].messageId, `start chunks with different ids: ${summary(chunks)}`);
  }
  let message;
  const replay = new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(c);
      controller.close();
    },
  });
  try {
    for await (const m of readUIMessageStream({ stream: replay, terminateOnError: true })) message = m;
  } catch (e) {
    throw new Error(`readUIMessageStream: ${e.message}\nchunks: ${summary(chunks)}`);
  }
  return { chunks, message };
}

async function send(chatId, messages, { url = URL_A, trigger = 'submit-message', messageId, body } = {}) {
  const stream = await transport(url).sendMessages({
    chatId,
    messages,
    trigger,
    messageId,
    body,
    abortSignal: AbortSignal.timeout(60_000),
  });
  return readAll(stream);
}

async function api(method, path, body) {
  const res = await fetch(`${URL_A}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

// The chats (of the admin) whose latest visible text is `preview`.
async function chatsWithPreview(preview) {
  const { status, body } = await api('GET', '/api/v2/chats?limit=100');
  assert.equal(status, 200);
  return body.filter((c) => c.last_message_preview === preview);
}

test('a useChat id is mapped to one chat: submit, then continue it', async () => {
  const chatId = randomUUID(); // crypto.randomUUID(), as an app might choose
  const nonce = generateId();
  const user1 = userMessage('hi');
  const first = await send(chatId, [user1]);
  assert.equal(first.chunks[0].type, 'start', JSON.stringify(first.chunks[0]));
  assert.equal(typeof first.chunks[0].messageId, 'string');
  assert.ok(first.chunks.some((c) => c.type === 'finish'), JSON.stringify(first.chunks.map((c) => c.type)));
  assert.equal(first.message.role, 'assistant');
  assert.equal(first.message.id, first.chunks[0].messageId);
  assert.equal(textOf(first.message), 'echo: hi');

  // The second send to the same id continues the same chatd chat, from the
  // other replica.
  const user2 = userMessage(`again ${nonce}`);
  const second = await send(chatId, [user1, first.message, user2], { url: URL_B });
  assert.equal(textOf(second.message), `echo: again ${nonce}`);
  assert.notEqual(second.message.id, first.message.id);
  const chats = await chatsWithPreview(`echo: again ${nonce}`);
  assert.equal(chats.length, 1, JSON.stringify(chats));
  const { body: page } = await api('GET', `/api/v2/chats/${chats[0].id}/messages`);
  const texts = page.messages.flatMap((m) => m.content.filter((p) => p.type === 'text').map((p) => p.text));
  assert.deepEqual(texts, ['hi', 'echo: hi', `again ${nonce}`, `echo: again ${nonce}`]);
});

test('a nanoid-style id (generateId, useChat\'s default) works too', async () => {
  const chatId = generateId();
  const { message } = await send(chatId, [userMessage('hello nanoid')]);
  assert.equal(textOf(message), 'echo: hello nanoid');
});

test('reconnectToStream resumes a running turn from its start, then answers 204', async () => {
  const chatId = generateId();
  const answer = 'echo: tell me a slow one';
  const live = await transport(URL_A).sendMessages({
    chatId,
    messages: [userMessage('tell me a slow one')],
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: AbortSignal.timeout(60_000),
  });
  // Read the live stream until some text arrived.
  const reader = live.getReader();
  const liveChunks = [];
  let liveText = '';
  while (liveText.length < 3) {
    const { value, done } = await reader.read();
    assert.ok(!done, `the live stream ended early: ${JSON.stringify(liveChunks)}`);
    liveChunks.push(value);
    if (value.type === 'text-delta') liveText += value.delta;
  }
  // Resume on the other replica: the stream starts from the turn's start.
  const resumed = await transport(URL_B).reconnectToStream({ chatId });
  assert.ok(resumed, 'reconnectToStream returned null while the turn runs');
  const { chunks, message } = await readAll(resumed);
  assert.equal(chunks[0].type, 'start', JSON.stringify(chunks[0]));
  assert.equal(chunks[0].messageId, liveChunks[0].messageId);
  const resumedText = chunks.filter((c) => c.type === 'text-delta').map((c) => c.delta).join('');
  assert.ok(resumedText.startsWith(liveText), `${JSON.stringify(resumedText)} does not start with ${JSON.stringify(liveText)}`);
  assert.equal(textOf(message), answer);
  // The live stream ends with the same answer.
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    liveChunks.push(value);
    if (value.type === 'text-delta') liveText += value.delta;
  }
  assert.equal(liveText, answer);
  // No turn running: 204, which the transport returns as null.
  assert.equal(await transport(URL_A).reconnectToStream({ chatId }), null);
  assert.equal(await transport(URL_B).reconnectToStream({ chatId }), null);
});

test('a client tool: input-available, then the output answers it', async () => {
  const chatId = generateId();
  const user = userMessage('call get_weather {"city":"Paris"}');
  const first = await send(chatId, [user], { body: { tools: TOOLS } });
  const toolParts = first.message.parts.filter(isToolPart);
  assert.equal(toolParts.length, 1, JSON.stringify(first.message.parts));
  const part = toolParts[0];
  assert.ok(part.type === 'dynamic-tool' ? part.toolName === 'get_weather' : part.type === 'tool-get_weather', JSON.stringify(part));
  assert.equal(part.state, 'input-available');
  assert.deepEqual(part.input, { city: 'Paris' });
  assert.match(part.toolCallId, /^call_fake_/);

  // What useChat sends after addToolOutput: the same assistant message with
  // the part in output-available.
  const answered = {
    ...first.message,
    parts: first.message.parts.map((p) => (p === part ? { ...p, state: 'output-available', output: 'sunny' } : p)),
  };
  const second = await send(chatId, [user, answered], { body: { tools: TOOLS } });
  assert.equal(textOf(second.message), 'tool said: sunny');
});

test('regenerate-message answers again as a new message', async () => {
  const chatId = generateId();
  const user = userMessage('regenerate me');
  const first = await send(chatId, [user]);
  assert.equal(textOf(first.message), 'echo: regenerate me');
  // useChat's regenerate(): the messages before the assistant message, and
  // its id.
  const again = await send(chatId, [user], { trigger: 'regenerate-message', messageId: first.message.id });
  assert.equal(textOf(again.message), 'echo: regenerate me');
  assert.notEqual(again.message.id, first.message.id);
});

test('a provider-hosted web search: a providerExecuted tool part and a source-url part', async () => {
  // A chat on the search model config (the transport uses the chat's
  // model; a chat id addresses that chat).
  const { body: configs } = await api('GET', '/api/v2/chats/model-configs');
  const config = configs.find((c) => c.model === 'fake-search-model');
  assert.ok(config, `no fake-search-model config: ${JSON.stringify(configs)}`);
  const created = await api('POST', '/api/v2/chats', {
    content: [{ type: 'text', text: 'hi' }], model_config_id: config.id,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const chatId = created.body.id;
  for (let i = 0; ; i++) {
    const { body } = await api('GET', `/api/v2/chats/${chatId}`);
    if (body.status === 'waiting') break;
    assert.ok(i < 300, `the first turn did not end: ${JSON.stringify(body)}`);
    await new Promise((r) => setTimeout(r, 100));
  }

  const { chunks, message } = await send(chatId, [userMessage('search claude shannon')]);
  const kinds = chunks.map((c) => c.type);
  const input = chunks.find((c) => c.type === 'tool-input-available');
  assert.ok(input, summary(chunks));
  assert.equal(input.providerExecuted, true);
  assert.equal(input.toolName, 'web_search');
  assert.match(input.toolCallId, /^srvtoolu_fake_/);
  assert.equal(kinds.indexOf('tool-output-available'), kinds.indexOf('tool-input-available') + 1, summary(chunks));
  assert.ok(kinds.indexOf('source-url') > kinds.indexOf('tool-output-available'), summary(chunks));
  // What readUIMessageStream built: the text, the search as a tool part the
  // provider executed (never one for the client to run), the source.
  assert.equal(textOf(message), 'Searching. Found claude shannon.');
  const tool = message.parts.find(isToolPart);
  assert.equal(tool.type, 'dynamic-tool', JSON.stringify(tool));
  assert.equal(tool.toolCallId, input.toolCallId);
  assert.equal(tool.state, 'output-available');
  assert.equal(tool.providerExecuted, true);
  assert.deepEqual(tool.input, { query: 'claude shannon' });
  assert.equal(tool.output[0].type, 'web_search_result');
  const source = message.parts.find((p) => p.type === 'source-url');
  assert.match(source.url, /^https:\/\/example\.org\/search\//);
  assert.equal(source.title, 'About claude shannon');
  const user = userMessage('search claude shannon');
  await validateUIMessages({ messages: [user, message] });

  // chatd's listing of the transport's messages: valid UI messages, with
  // the same search part and source.
  const listed = await api('GET', `/api/v2/ai-sdk/chat/${chatId}/messages`);
  assert.equal(listed.status, 200);
  const messages = await validateUIMessages({ messages: listed.body });
  const last = messages[messages.length - 1];
  assert.equal(last.id, message.id);
  assert.deepEqual(last.parts.map((p) => p.type), ['text', 'dynamic-tool', 'text', 'source-url']);
  assert.equal(last.parts[1].toolCallId, input.toolCallId);
  assert.equal(last.parts[1].state, 'output-available');
  assert.equal(last.parts[1].providerExecuted, true);
  assert.equal(last.parts[3].sourceId, source.sourceId);
  assert.equal(last.parts[3].url, source.url);
});

test('the transport\'s errors: no token is 401', async () => {
  const t = new DefaultChatTransport({ api: `${URL_A}/api/v2/ai-sdk/chat` });
  await assert.rejects(
    t.sendMessages({ chatId: generateId(), messages: [userMessage('x')], trigger: 'submit-message', messageId: undefined, abortSignal: undefined }),
    (e) => e.statusCode === 401 || /401/.test(String(e.message)),
  );
});
