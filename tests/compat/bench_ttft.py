"""Time to first token through the three streaming surfaces of one chatd.

For the same prompt (no `slow`: the fake LLM streams it in 10 parts), the
time from sending the request to the first text delta:

  - /v1/responses with stream=true, in one conversation: through OpenAI's
    SDK, and over plain http.client like the other two (the difference is
    the SDK's own cost);
  - chatd's own route: POST /api/v2/chats/{id}/messages, then
    GET /api/v2/chats/{id}/events (SSE) until the first text message_part;
  - POST /api/v2/ai-sdk/chat (the AI SDK's UI message stream), one chat id.

Each surface gets a warm-up turn and ROUNDS measured turns, interleaved;
prints the medians and their ratios to the native route. Informational: it
fails only when a surface gives no text.

  python tests/compat/bench_ttft.py --url http://127.0.0.1:PORT [--token T] [--rounds 7]
"""

import argparse
import http.client
import json
import os
import statistics
import time
import urllib.parse
import uuid

import openai

MODEL = "fake-model"


class Api:
    def __init__(self, url, token):
        self.url = url.rstrip("/")
        u = urllib.parse.urlsplit(self.url)
        self.host, self.port = u.hostname, u.port
        self.token = token

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def headers(self, body=False):
        h = {"Authorization": f"Bearer {self.token}"}
        if body:
            h["Content-Type"] = "application/json"
        return h

    def json(self, method, path, body=None):
        c = self.conn()
        c.request(method, path, body=None if body is None else json.dumps(body), headers=self.headers(body is not None))
        r = c.getresponse()
        raw = r.read()
        c.close()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {raw[:300]!r}")
        return json.loads(raw) if raw else None


def sse_events(resp):
    """(event name, data) pairs of an http.client response, as they arrive."""
    name, data = None, []
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.decode().rstrip("\r\n")
        if line == "":
            if data:
                yield name, "\n".join(data)
            name, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


def wait_idle(api, chat_id, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if api.json("GET", f"/api/v2/chats/{chat_id}")["status"] == "waiting":
            return
        time.sleep(0.1)
    raise RuntimeError(f"chat {chat_id} not idle after {timeout} s")


def ttft_responses(client, conv_id, text):
    t0 = time.perf_counter()
    first = None
    with client.responses.create(model=MODEL, input=text, conversation=conv_id, stream=True) as stream:
        for event in stream:
            if first is None and event.type == "response.output_text.delta":
                first = time.perf_counter() - t0
    return first


def ttft_responses_raw(api, conv_id, text):
    """/v1/responses with stream=true over plain http.client, as the other
    two surfaces are measured (the SDK's own parsing left out)."""
    body = {"model": MODEL, "input": text, "conversation": conv_id, "stream": True}
    t0 = time.perf_counter()
    c = api.conn()
    c.request("POST", "/v1/responses", body=json.dumps(body), headers=api.headers(True))
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"responses: {r.status} {r.read()[:300]!r}")
    first = None
    try:
        for name, data in sse_events(r):
            if first is None and name == "response.output_text.delta":
                first = time.perf_counter() - t0
            if name in ("response.completed", "response.failed", "response.incomplete"):
                break
    finally:
        c.close()
    return first


def ttft_native(api, chat_id, text):
    t0 = time.perf_counter()
    sent = api.json("POST", f"/api/v2/chats/{chat_id}/messages",
                    {"content": [{"type": "text", "text": text}]})
    after = sent["message"]["id"] if sent.get("message") else 0
    c = api.conn()
    c.request("GET", f"/api/v2/chats/{chat_id}/events?after_id={after}", headers=api.headers())
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"events: {r.status}")
    first = None
    try:
        for name, data in sse_events(r):
            ev = json.loads(data)
            if first is None and ev.get("type") == "message_part":
                part = ev["message_part"]["part"]
                if part.get("type") == "text" and part.get("text"):
                    first = time.perf_counter() - t0
                    break
    finally:
        c.close()
    wait_idle(api, chat_id)
    return first


def ttft_ai_sdk(api, client_chat_id, text):
    body = {
        "id": client_chat_id,
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": text}]}],
        "trigger": "submit-message",
    }
    t0 = time.perf_counter()
    c = api.conn()
    c.request("POST", "/api/v2/ai-sdk/chat", body=json.dumps(body), headers=api.headers(True))
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"ai-sdk/chat: {r.status} {r.read()[:300]!r}")
    first = None
    try:
        for _, data in sse_events(r):
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if first is None and chunk.get("type") == "text-delta":
                first = time.perf_counter() - t0
    finally:
        c.close()
    return first


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default=os.environ.get("CHATD_URL_B") or os.environ.get("CHATD_URL_A"))
    p.add_argument("--token", default=os.environ.get("CHATD_TOKEN"))
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    api = Api(args.url, args.token)
    client = openai.OpenAI(base_url=f"{api.url}/v1", api_key=args.token, timeout=60, max_retries=0)

    conv = client.conversations.create()
    native_chat = api.json("POST", "/api/v2/chats", {"content": [{"type": "text", "text": "warm up"}]})["id"]
    wait_idle(api, native_chat)
    sdk_chat = f"bench-{uuid.uuid4().hex[:12]}"

    surfaces = {
        "/v1/responses (stream, openai SDK)": lambda t: ttft_responses(client, conv.id, t),
        "/v1/responses (stream, raw HTTP)": lambda t: ttft_responses_raw(api, conv.id, t),
        "native POST messages + SSE events": lambda t: ttft_native(api, native_chat, t),
        "/api/v2/ai-sdk/chat": lambda t: ttft_ai_sdk(api, sdk_chat, t),
    }
    times = {k: [] for k in surfaces}
    for name, f in surfaces.items():  # warm-up
        f("ttft warm up")
    for i in range(args.rounds):
        for name, f in surfaces.items():
            t = f(f"ttft probe {i}")
            if t is None:
                raise SystemExit(f"bench_ttft: {name} gave no text delta")
            times[name].append(t)
    base = statistics.median(times["native POST messages + SSE events"])
    print(f"bench_ttft: time to first text delta, median of {args.rounds} (fake LLM, same prompt)")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:36s} {m * 1000:8.1f} ms  (min {min(ts) * 1000:.1f}, max {max(ts) * 1000:.1f})  x{m / base:.2f} of native")


if __name__ == "__main__":
    main()
