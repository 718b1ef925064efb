// A chat with chatd through the AI SDK: useChat + DefaultChatTransport
// against chatd's /api/v2/ai-sdk/chat (../README.md).
//
// - The chat id lives in the URL (?chat=<id>, made on first load), so a
//   reload reopens the same chat.
// - The token comes from ?token= (then kept in localStorage and taken out of
//   the URL) or from the form shown when there is none.
// - On load the history comes from GET /api/v2/ai-sdk/chat/{id}/messages
//   (useChat's initial messages); then useChat's `resume: true` asks
//   GET /api/v2/ai-sdk/chat/{id}/stream for the running answer, if any
//   (chatd replays it from its start; 204 when no answer is running).
import { useEffect, useMemo, useState } from 'react';
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport, generateId } from 'ai';

const API = '/api/v2/ai-sdk/chat';
const TOKEN_KEY = 'chatd-token';

/** The chat id of the URL (one is made and put there when missing). */
function chatIdFromUrl() {
  const url = new URL(window.location.href);
  let changed = false;
  const token = url.searchParams.get('token');
  if (token) {
    localStorage.setItem(TOKEN_KEY, token);
    url.searchParams.delete('token');
    changed = true;
  }
  let id = url.searchParams.get('chat');
  if (!id) {
    id = generateId();
    url.searchParams.set('chat', id);
    changed = true;
  }
  if (changed) window.history.replaceState(null, '', url);
  return id;
}

export function App() {
  const [chatId, setChatId] = useState(chatIdFromUrl);
  const [token, setToken] = useState(() => localStorage.getItem(TOKEN_KEY) || '');

  // Back/forward between chats opened with "New chat".
  useEffect(() => {
    const onPop = () => setChatId(chatIdFromUrl());
    window.addEventListener('popstate', onPop);
    return () => window.removeEventListener('popstate', onPop);
  }, []);

  const newChat = () => {
    const id = generateId();
    const url = new URL(window.location.href);
    url.searchParams.set('chat', id);
    window.history.pushState(null, '', url);
    setChatId(id);
  };
  const forgetToken = () => {
    localStorage.removeItem(TOKEN_KEY);
    setToken('');
  };

  return (
    <div className="app">
      <header>
        <h1>chatd · AI SDK chat</h1>
        <span className="chat-id" data-testid="chat-id" title="chat id (in the URL)">
          {chatId}
        </span>
        {token && (
          <>
            <button type="button" data-testid="new-chat" onClick={newChat}>
              New chat
            </button>
            <button type="button" data-testid="forget-token" onClick={forgetToken}>
              Forget token
            </button>
          </>
        )}
      </header>
      {token ? (
        <ChatLoader key={`${chatId}\n${token}`} chatId={chatId} token={token} />
      ) : (
        <TokenForm
          onSave={(t) => {
            localStorage.setItem(TOKEN_KEY, t);
            setToken(t);
          }}
        />
      )}
    </div>
  );
}

function TokenForm({ onSave }) {
  const [value, setValue] = useState('');
  return (
    <form
      className="token-form"
      onSubmit={(e) => {
        e.preventDefault();
        if (value.trim()) onSave(value.trim());
      }}
    >
      <label htmlFor="token">chatd token</label>
      <input
        id="token"
        data-testid="token-input"
        type="password"
        autoComplete="off"
        placeholder="chatd_…"
        value={value}
        onChange={(e) => setValue(e.target.value)}
      />
      <button type="submit" data-testid="token-save">
        Save
      </button>
      <p className="hint">Kept in this browser's localStorage. Or open the app with ?token=….</p>
    </form>
  );
}

/** Loads the chat's history, then shows the chat (useChat needs it up front). */
function ChatLoader({ chatId, token }) {
  const [history, setHistory] = useState({ state: 'loading' });
  useEffect(() => {
    const abort = new AbortController();
    (async () => {
      try {
        const res = await fetch(`${API}/${encodeURIComponent(chatId)}/messages`, {
          headers: { Authorization: `Bearer ${token}` },
          signal: abort.signal,
        });
        if (!res.ok) {
          const text = await res.text().catch(() => '');
          throw new Error(`GET messages: HTTP ${res.status}${text ? `: ${text.slice(0, 300)}` : ''}`);
        }
        setHistory({ state: 'ready', messages: await res.json() });
      } catch (err) {
        if (!abort.signal.aborted) setHistory({ state: 'error', error: String(err.message || err) });
      }
    })();
    return () => abort.abort();
  }, [chatId, token]);

  if (history.state === 'loading') {
    return (
      <p className="loading" data-testid="loading">
        Loading…
      </p>
    );
  }
  if (history.state === 'error') {
    return (
      <p className="error" data-testid="error">
        {history.error}
      </p>
    );
  }
  return <Chat chatId={chatId} token={token} initialMessages={history.messages} />;
}

function Chat({ chatId, token, initialMessages }) {
  const transport = useMemo(
    () =>
      new DefaultChatTransport({
        api: API,
        headers: { Authorization: `Bearer ${token}` },
      }),
    [token],
  );
  const { messages, sendMessage, status, error } = useChat({
    id: chatId,
    messages: initialMessages,
    transport,
    resume: true,
  });
  const [input, setInput] = useState('');
  const busy = status === 'submitted' || status === 'streaming';

  return (
    <main>
      <ol className="messages" data-testid="messages">
        {messages.map((m) => (
          <Message key={m.id} message={m} />
        ))}
      </ol>
      {error && (
        <p className="error" data-testid="error">
          {error.message}
        </p>
      )}
      <form
        className="composer"
        onSubmit={(e) => {
          e.preventDefault();
          const text = input.trim();
          if (!text || busy) return;
          sendMessage({ text });
          setInput('');
        }}
      >
        <input
          data-testid="composer-input"
          aria-label="Message"
          placeholder="Say something…"
          value={input}
          onChange={(e) => setInput(e.target.value)}
        />
        <button type="submit" data-testid="send" disabled={busy || !input.trim()}>
          Send
        </button>
        <span className="status" data-testid="status" data-status={status}>
          {status}
        </span>
      </form>
    </main>
  );
}

function Message({ message }) {
  return (
    <li className={`message ${message.role}`} data-testid="message" data-role={message.role} data-id={message.id}>
      <div className="role">{message.role}</div>
      {message.parts.map((part, i) => (
        <Part key={i} part={part} />
      ))}
    </li>
  );
}

function Part({ part }) {
  if (part.type === 'text') {
    return (
      <div className="text" data-testid="message-text">
        {part.text}
      </div>
    );
  }
  if (part.type === 'reasoning') {
    return (
      <details className="reasoning">
        <summary>reasoning</summary>
        {part.text}
      </details>
    );
  }
  if (part.type === 'dynamic-tool' || part.type.startsWith('tool-')) {
    const name = part.type === 'dynamic-tool' ? part.toolName : part.type.slice('tool-'.length);
    return (
      <div className="tool" data-testid="message-tool">
        tool {name}: {part.state}
        {part.state === 'output-available' && <pre>{JSON.stringify(part.output, null, 2)}</pre>}
        {part.state === 'output-error' && <pre>{part.errorText}</pre>}
      </div>
    );
  }
  if (part.type === 'file' && part.mediaType?.startsWith('image/')) {
    return <img className="file" src={part.url} alt={part.filename || 'image'} />;
  }
  return null; // step-start, sources, data parts: not shown here
}
