"""Requests per second of non-streaming /v1/responses against chatd's own
route for the same turn, measured in one run (issue 35, "Measure").

Each of CLIENTS closed-loop clients owns one chat and sends a turn at a
time for DURATION seconds per round:

  - native: POST /api/v2/chats/{id}/messages, then the long-poll
    GET /api/v2/chats/{id}/updates until the chat is `waiting` again with the
    answer committed (what a client of chatd's own API does to wait for a
    turn without a stream);
  - responses: POST /v1/responses {model, input, conversation} without
    stream or background: one request that answers when the turn ended.

Rounds alternate (native, responses, native, responses, ...) so that drift
of the machine hits both; prints turns/s and median latency of each round,
the sums, and the ratio responses / native. Informational: it fails only
when a turn fails.

  python tests/compat/bench_rps.py --url http://127.0.0.1:PORT --token T \
      [--clients 8] [--duration 10] [--rounds 2]
"""

import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse

MODEL = "fake-model"


class Client:
    def __init__(self, url, token):
        u = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=self.headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 400:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None


def native_turn(c, chat):
    before = c.call("GET", f"/api/v2/chats/{chat}")
    count = before["message_count"]
    c.call("POST", f"/api/v2/chats/{chat}/messages", {"content": [{"type": "text", "text": "ping"}]})
    version = 0
    while True:
        chat_row = c.call("GET", f"/api/v2/chats/{chat}/updates?after_snapshot_version={version}&wait_ms=20000")
        if chat_row is None:
            continue
        version = chat_row["snapshot_version"]
        if chat_row["status"] == "waiting" and chat_row["message_count"] >= count + 2:
            return
        if chat_row["status"] == "error":
            raise RuntimeError(f"turn failed: {chat_row['last_error']}")


def responses_turn(c, conversation):
    r = c.call("POST", "/v1/responses", {"model": MODEL, "input": "ping", "conversation": conversation})
    if r["status"] != "completed":
        raise RuntimeError(f"response {r['id']} ended {r['status']}")


def run_round(clients, targets, turn, duration):
    latencies, errors = [], []
    lock = threading.Lock()
    stop = time.monotonic() + duration

    def work(c, target):
        mine = []
        try:
            while time.monotonic() < stop:
                t0 = time.monotonic()
                turn(c, target)
                mine.append(time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=work, args=(c, t)) for c, t in zip(clients, targets)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    if errors:
        raise errors[0]
    return len(latencies), elapsed, latencies


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    clients = [Client(a.url, a.token) for _ in range(a.clients)]
    chats, conversations = [], []
    for c in clients:
        chat = c.call("POST", "/api/v2/chats", {"content": [{"type": "text", "text": "warm up"}]})["id"]
        chats.append(chat)
        r = c.call("POST", "/v1/responses", {"model": MODEL, "input": "warm up"})
        conversations.append(r["conversation"]["id"])
    for c, chat in zip(clients, chats):
        native_turn(c, chat)  # the creation's turn is over, and one more
    totals = {"native": [0, 0.0, []], "responses": [0, 0.0, []]}
    for i in range(a.rounds):
        for name, turn, targets in (
            ("native", native_turn, chats),
            ("responses", responses_turn, conversations),
        ):
            n, elapsed, lat = run_round(clients, targets, turn, a.duration)
            totals[name][0] += n
            totals[name][1] += elapsed
            totals[name][2].extend(lat)
            print(f"round {i + 1} {name:9}: {n / elapsed:7.1f} turns/s, p50 {statistics.median(lat) * 1000:6.1f} ms ({n} turns)")
    rate = {k: v[0] / v[1] for k, v in totals.items()}
    p50 = {k: statistics.median(v[2]) * 1000 for k, v in totals.items()}
    print(f"native (POST /messages + long-poll until idle): {rate['native']:.1f} turns/s, p50 {p50['native']:.1f} ms")
    print(f"/v1/responses (non-streaming):                  {rate['responses']:.1f} turns/s, p50 {p50['responses']:.1f} ms")
    print(f"ratio responses / native: {rate['responses'] / rate['native']:.2f} (turns/s), {p50['responses'] / p50['native']:.2f} (p50 latency)")


if __name__ == "__main__":
    main()
