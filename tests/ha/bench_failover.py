"""Failover and switchover figures of chatd on the HA PostgreSQL cluster
(issue 36, "Measure").

Run by scripts/bench-failover.sh, which starts the cluster
(scripts/ha-cluster.sh), the fake LLM and two chatd replicas, then:

  python3 tests/ha/bench_failover.py --urls http://A,http://B --token T \
      --cluster-dir DIR --db-url postgres://.../chatd_bench \
      [--chats 8] [--rounds 3] [--kinds kill,switchover,stall] [--interval 0.1]

Workload, for the whole run:
  - CHATS chats, each created with a slow answer (the fake LLM in
    `scripted:N:MS` mode streams any text containing `slow` over N x MS ms);
  - one SSE watcher per chat (GET /api/v2/chats/{id}/events, alternating
    replicas, reconnecting with `after_id` = the highest committed message id
    it has seen);
  - writers that send `slow tok-C-N` to the chats round robin, one send every
    INTERVAL seconds in all, with `busy_behavior: steer` (a running chat takes
    every waiting message into its next turn, so the chats keep running as
    long as the writers write) and a unique `client_message_id`, retried with
    the same id on transport errors, 5xx and 429 (honouring `Retry-After`,
    capped at 1 s), on the other replica each time.

Each round (rounds x kinds, interleaved): `wait-healthy`, a steady state
(every chat committed a message within the last STEADY seconds and a send was
acknowledged within the last second), then the fault at time T:

  kill        scripts/ha-cluster.sh kill-primary; T is when it prints the
              node's name (right after the SIGKILL); restart-node once the
              round is measured
  switchover  scripts/ha-cluster.sh switchover; T is the command's start (the
              old primary stops taking writes somewhere within it, so
              first_ack is about 0 and write_gap is the figure)
  stall       scripts/ha-cluster.sh stall-primary DIR STALL; T is when it
              prints the node's name (right after the SIGSTOP; SIGCONT comes
              STALL seconds later)

and the figures of the round, in seconds from T:
  first_ack   the first acknowledged send whose successful attempt started
              after T
  write_gap   the longest time between two consecutive acknowledged sends
              from the last one before T until the window's end
  progress    every chat that was running at T progressed again: a new
              committed message created at or after T (its created_at) or a
              status change, seen on its stream (the max over the chats)
  chat_p50    the same, the median over the chats
  db_progress the same from the database: the max over those chats of their
              first message created at or after T (read after the run;
              created_at is its transaction's start, so this can be earlier
              than the commit that a stream shows)
  parts       every such chat's stream carried a new message part again
              (streams go on from the runner's memory while the database is
              away; a new part is not yet progress)
  503/+RA     503 answers to sends, and how many carried Retry-After
  500, 5xx    500 answers, other 5xx answers (send attempts in the window)
  429         429 answers (send attempts in the window)
  transport   send attempts that failed without an HTTP answer
  sse_lost    watchers' established streams that ended or broke in the
              window (a 503's Retry-After is honoured on reconnect)
  sse_refused watchers' reconnects refused (503, other status, transport)
The window ends RECOVERY_TAIL seconds after the last of first_ack and
progress (or at the recovery timeout).

After the rounds the writers stop, the chats settle (idle, no owner, empty queue) and
the database is read (psql on --db-url):
  lost        acknowledged sends whose token is not on the chat's active
              branch (a live user message) nor queued (must be 0)
  dup_writes  tokens stored more than once among live user messages and
              queued rows (chatd-chaos's definition; must be 0)
  dup_answers live assistant messages echoing the same user text, or more
              than one assistant message after the same run of user
              messages on the active branch (must be 0)
  missed      committed client-visible messages a chat's watcher never
              received (it reconnects with after_id = the highest id it saw,
              so a message committed late with a lower id is missed for good;
              must be 0)
each attributed to the round in whose span the send was acknowledged (or
the message created).

Prints one row per round, then the median and max per kind. Exit status 1
when a write was lost or duplicated, an answer duplicated, any 500 answered
(at any time), a watcher missed a committed message, a chat did not
progress within the recovery timeout or did not settle, or a replica
exited; 2 on a setup error.
"""

import argparse
import datetime
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

MODEL_TEXT = "slow"


def now():
    return time.time()


def log(msg):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")[:-3]
    print(f"[{stamp}] {msg}", flush=True)


def parse_time(text):
    """Seconds since the epoch of an RFC 3339 time (`...Z` or an offset)."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class TransportError(Exception):
    pass


class Refused(Exception):
    """A watcher's connection that was not established: `what` (a status
    and body, or a transport error) and the answer's Retry-After."""

    def __init__(self, what, retry_after):
        super().__init__(what)
        self.what, self.retry_after = what, retry_after


class Api:
    """Plain HTTP/1.1 to the replicas; a new connection per request (a
    failover must not be hidden by, or blamed on, a pooled connection)."""

    def __init__(self, urls, token):
        self.bases = [urllib.parse.urlsplit(u) for u in urls]
        self.token = token

    def request(self, replica, method, path, body=None, timeout=30):
        base = self.bases[replica % len(self.bases)]
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        conn = http.client.HTTPConnection(base.hostname, base.port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            raw = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, raw
        except (OSError, http.client.HTTPException) as e:
            raise TransportError(f"{type(e).__name__}: {e}") from None
        finally:
            conn.close()

    def json(self, replica, method, path, body=None):
        """A request that must succeed; retried for 60 s on transport errors,
        5xx and 429 (setup and settling, not measured)."""
        deadline = now() + 60
        last = None
        while now() < deadline:
            try:
                status, _, raw = self.request(replica, method, path, body)
            except TransportError as e:
                last = str(e)
            else:
                if 200 <= status < 300:
                    return json.loads(raw) if raw else None
                if status < 500 and status != 429:
                    raise RuntimeError(f"{method} {path}: {status} {raw[:300]!r}")
                last = f"{status} {raw[:200]!r}"
            replica += 1
            time.sleep(0.5)
        raise RuntimeError(f"{method} {path}: no success within 60 s (last: {last})")


class State:
    """Everything the threads record, under one lock; times are wall-clock
    seconds (comparable with the database's created_at on this machine)."""

    def __init__(self, chats):
        self.lock = threading.Lock()
        self.stop_writers = threading.Event()
        self.stop_watchers = threading.Event()
        # Per send attempt: (start, end, chat index, outcome, retry_after).
        # outcome: HTTP status (int) or "transport".
        self.attempts = []
        # Acknowledged sends: dict(token, chat, first_start, start, end,
        # message_id, queued_id).
        self.acks = []
        self.unacked = []  # sends given up or not finished: (token, reason)
        self.failed = []  # 4xx other than 429: (time, token, status, body)
        # Per chat: list of (time, kind, data).
        self.events = [[] for _ in chats]
        # Per chat: watcher connection records (time, what).
        self.conns = [[] for _ in chats]


class Writer(threading.Thread):
    def __init__(self, api, state, chats, mine, interval, run_id, writer_index):
        super().__init__(daemon=True)
        self.api, self.state, self.chats, self.mine = api, state, chats, mine
        self.interval, self.run_id, self.index = interval, run_id, writer_index
        self.count = {c: 0 for c in mine}

    def run(self):
        replica = self.index
        next_at = now()
        i = 0
        while not self.state.stop_writers.is_set():
            ci = self.mine[i % len(self.mine)]
            i += 1
            self.count[ci] += 1
            token = f"tok-{ci}-{self.count[ci]}"
            replica = self.send(ci, token, replica)
            next_at += self.interval
            delay = next_at - now()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = now()

    def send(self, ci, token, replica):
        chat = self.chats[ci]
        body = {
            "content": [{"type": "text", "text": f"{MODEL_TEXT} {token}"}],
            "busy_behavior": "steer",
            "client_message_id": f"bench-{self.run_id}-{token}",
        }
        first = now()
        while True:
            if now() - first > 120:
                with self.state.lock:
                    self.state.unacked.append((token, "gave up after 120 s"))
                return replica
            start = now()
            try:
                status, headers, raw = self.api.request(
                    replica, "POST", f"/api/v2/chats/{chat}/messages", body, timeout=30
                )
            except TransportError as e:
                with self.state.lock:
                    self.state.attempts.append((start, now(), ci, "transport", None, str(e)))
                replica += 1
                time.sleep(0.2)
                continue
            end = now()
            retry_after = headers.get("retry-after")
            with self.state.lock:
                self.state.attempts.append((start, end, ci, status, retry_after, raw[:200].decode(errors="replace") if status >= 400 else ""))
            if 200 <= status < 300:
                r = json.loads(raw)
                message = r.get("message") or {}
                queued = r.get("queued_message") or {}
                with self.state.lock:
                    self.state.acks.append(
                        {
                            "token": token,
                            "chat": ci,
                            "first_start": first,
                            "start": start,
                            "end": end,
                            "message_id": message.get("id"),
                            "queued_id": queued.get("id"),
                        }
                    )
                return replica + 1
            if status >= 500 or status == 429:
                wait = 0.2
                if retry_after:
                    try:
                        wait = min(max(float(retry_after), 0.05), 1.0)
                    except ValueError:
                        pass
                replica += 1
                if self.state.stop_writers.is_set() and now() - first > 30:
                    with self.state.lock:
                        self.state.unacked.append((token, f"stopped while retrying ({status})"))
                    return replica
                time.sleep(wait)
                continue
            with self.state.lock:
                self.state.failed.append((end, token, status, raw[:300].decode(errors="replace")))
            return replica + 1


class Watcher(threading.Thread):
    """Follows one chat over SSE; records message, status and part events."""

    def __init__(self, api, state, chats, ci):
        super().__init__(daemon=True)
        self.api, self.state, self.chat, self.ci = api, state, chats[ci], ci
        self.after = 0

    def run(self):
        replica = self.ci
        while not self.state.stop_watchers.is_set():
            delay = 0.2
            try:
                self.follow(replica)
                what = "eof"
            except Refused as e:
                # A refused reconnect: a 503's Retry-After is honoured
                # (capped at 1 s), as the writers do.
                with self.state.lock:
                    self.state.conns[self.ci].append((now(), "refused", e.what))
                if e.retry_after:
                    try:
                        delay = min(max(float(e.retry_after), 0.05), 1.0)
                    except ValueError:
                        pass
                replica += 1
                time.sleep(delay)
                continue
            except (OSError, http.client.HTTPException, ValueError) as e:
                what = f"{type(e).__name__}: {e}"
            with self.state.lock:
                self.state.conns[self.ci].append((now(), "lost", what))
            replica += 1
            time.sleep(delay)

    def follow(self, replica):
        """One connection: Refused when it is not established (transport
        error or non-200), returns or raises once an established stream
        ends."""
        base = self.api.bases[replica % len(self.api.bases)]
        conn = http.client.HTTPConnection(base.hostname, base.port, timeout=20)
        path = f"/api/v2/chats/{self.chat}/events"
        if self.after:
            path += f"?after_id={self.after}"
        try:
            try:
                conn.request("GET", path, headers={"Authorization": f"Bearer {self.api.token}", "Accept": "text/event-stream"})
                r = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise Refused(f"transport: {type(e).__name__}: {e}", None) from None
            if r.status != 200:
                body = r.read()[:200].decode(errors="replace")
                raise Refused(f"status {r.status}: {body}", r.getheader("Retry-After"))
            with self.state.lock:
                self.state.conns[self.ci].append((now(), "connected", replica % len(self.api.bases)))
            data = []
            while not self.state.stop_watchers.is_set():
                line = r.readline()
                if not line:
                    return
                line = line.decode().rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif line == "" and data:
                    self.apply(json.loads("\n".join(data)))
                    data = []
        finally:
            conn.close()

    def apply(self, ev):
        t = now()
        kind = ev.get("type")
        if kind == "message":
            m = ev["message"]
            self.after = max(self.after, m["id"])
            rec = (t, "message", (m["id"], m["role"], parse_time(m["created_at"]), m.get("revision")))
        elif kind == "status":
            rec = (t, "status", ev["status"]["status"])
        elif kind == "message_part":
            p = ev["message_part"]
            rec = (t, "part", (p["history_version"], p["generation_attempt"], p["seq"]))
        elif kind in ("history_reset", "error", "retry"):
            rec = (t, kind, ev.get(kind))
        else:
            return
        with self.state.lock:
            self.state.events[self.ci].append(rec)


# ---- figures ------------------------------------------------------------------


def chat_progress(events, t0):
    """(running at t0, progress time, parts time) of one chat's events:
    progress is the first new committed message created at or after t0 or
    status change seen after t0; parts the first message part after t0
    that was not seen before (a new episode or a higher seq)."""
    status = None
    seen_ids = set()
    seen_parts = {}
    progress = parts = None
    for t, kind, data in events:
        if t < t0:
            if kind == "status":
                status = data
            elif kind == "message":
                seen_ids.add(data[0])
            elif kind == "part":
                ep = (data[0], data[1])
                seen_parts[ep] = max(seen_parts.get(ep, 0), data[2])
            continue
        if progress is None:
            if kind == "message" and data[0] not in seen_ids and data[2] >= t0:
                progress = t
            elif kind == "status" and status is not None and data != status:
                progress = t
        if parts is None and kind == "part":
            ep = (data[0], data[1])
            if data[2] > seen_parts.get(ep, 0):
                parts = t
        if kind == "message":
            seen_ids.add(data[0])
    return status == "running", progress, parts


def psql_json(db_url, sql):
    out = subprocess.run(
        ["psql", db_url, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    return json.loads(out) if out else None


def texts(content):
    return [p.get("text", "") for p in content or [] if p.get("type") == "text"]


def token_of(text):
    i = text.find("tok-")
    if i < 0:
        return None
    j = i + 4
    while j < len(text) and (text[j].isdigit() or text[j] == "-"):
        j += 1
    return text[i:j]


class Bench:
    def __init__(self, a):
        self.a = a
        self.api = Api(a.urls.split(","), a.token)
        self.run_id = uuid.uuid4().hex[:8]
        self.rounds = []
        self.findings = []
        self.env = dict(os.environ)

    def ha(self, *args, timeout=180):
        cmd = [self.a.ha_script, args[0], self.a.cluster_dir, *map(str, args[1:])]
        t = now()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=self.env)
        with open(os.path.join(self.a.run_dir, "ha-commands.log"), "a") as f:
            f.write(f"$ {' '.join(cmd)}  # {now() - t:.1f} s, exit {p.returncode}\n{p.stdout}{p.stderr}\n")
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
        return p.stdout.strip()

    def ha_start(self, *args):
        """Starts an ha-cluster.sh command; returns it, the time its first
        line of output came and that line (the node's name)."""
        cmd = [self.a.ha_script, args[0], self.a.cluster_dir, *map(str, args[1:])]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
        line = proc.stdout.readline()
        t = now()
        if not line:
            err = proc.stderr.read()
            proc.wait()
            raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode} without output: {err.strip()[-500:]}")
        return proc, t, line.strip()

    def ha_finish(self, proc, args, t0, timeout):
        out, err = proc.communicate(timeout=timeout)
        with open(os.path.join(self.a.run_dir, "ha-commands.log"), "a") as f:
            f.write(f"$ {' '.join(map(str, args))}  # {now() - t0:.1f} s after its first line, exit {proc.returncode}\n{out}{err}\n")
        if proc.returncode != 0:
            raise RuntimeError(f"ha-cluster.sh {' '.join(map(str, args))}: exit {proc.returncode}: {err.strip()[-500:]}")

    def replicas_alive(self):
        bad = []
        for pid in self.a.pids.split(",") if self.a.pids else []:
            try:
                os.kill(int(pid), 0)
            except OSError:
                bad.append(pid)
        return bad

    def setup(self):
        self.chats = []
        for i in range(self.a.chats):
            c = self.api.json(i, "POST", "/api/v2/chats", {"content": [{"type": "text", "text": f"{MODEL_TEXT} tok-{i}-0"}], "title": f"failover {i}"})
            self.chats.append(c["id"])
        self.state = State(self.chats)
        # The creation's message counts as acknowledged (its token tok-i-0).
        for i in range(self.a.chats):
            t = now()
            self.state.acks.append({"token": f"tok-{i}-0", "chat": i, "first_start": t, "start": t, "end": t, "message_id": None, "queued_id": None})
        self.watchers = [Watcher(self.api, self.state, self.chats, i) for i in range(self.a.chats)]
        for w in self.watchers:
            w.start()
        n = self.a.writers
        interval = self.a.interval * n
        self.writers = [
            Writer(self.api, self.state, self.chats, list(range(k, self.a.chats, n)), interval, self.run_id, k)
            for k in range(n)
        ]
        for w in self.writers:
            w.start()
        log(f"{self.a.chats} chats, {n} writers (one send every {self.a.interval} s in all), watchers started")

    def steady(self, timeout):
        """Waits until every chat committed a message within the last
        STEADY seconds and a send was acknowledged within the last second."""
        deadline = now() + timeout
        while now() < deadline:
            t = now()
            with self.state.lock:
                fresh = [any(k == "message" and tt > t - self.a.steady for tt, k, _ in ev[-50:]) for ev in self.state.events]
                last_ack = max((x["end"] for x in self.state.acks), default=0)
            if all(fresh) and last_ack > t - 1:
                return True
            time.sleep(0.5)
        stale = [self.chats[i] for i, ok in enumerate(fresh) if not ok]
        self.findings.append(f"no steady state within {timeout} s before a fault: chats without a recent message {stale}, last ack {now() - last_ack:.1f} s ago")
        return False

    def snapshot(self):
        with self.state.lock:
            return [list(e) for e in self.state.events], list(self.state.acks)

    def round(self, kind, number):
        log(f"round {number} {kind}: wait-healthy")
        self.ha("wait-healthy", 120, timeout=200)
        self.steady(90)
        leader = self.ha("primary")
        start_ev, _ = self.snapshot()
        info = {"kind": kind, "round": number, "old_primary": leader}
        stall_thread = None
        if kind == "switchover":
            # Planned: the fault's time is the command's start (the old
            # primary stops accepting writes somewhere within it).
            t0 = now()
            info["new_primary"] = self.ha("switchover").splitlines()[-1]
            info["command_s"] = now() - t0
        else:
            # kill-primary prints the node's name right after SIGKILL,
            # stall-primary right after SIGSTOP (then sleeps STALL seconds
            # and sends SIGCONT): the fault's time is when the line comes.
            args = ["kill-primary"] if kind == "kill" else ["stall-primary", self.a.stall]
            proc, t0, node = self.ha_start(*args)
            info["node"] = node
            if kind == "kill":
                self.ha_finish(proc, args, t0, timeout=60)
            else:
                result = {}

                def finish():
                    try:
                        self.ha_finish(proc, args, t0, timeout=self.a.stall + 120)
                    except Exception as e:  # noqa: BLE001 - reported
                        result["error"] = str(e)

                stall_thread = threading.Thread(target=finish, daemon=True)
                stall_thread.start()
        info["t0"] = t0
        log(f"round {number} {kind}: fault at t0 (primary was {leader})")
        running = [i for i, ev in enumerate(start_ev) if chat_progress(ev, t0)[0]]
        deadline = t0 + self.a.recovery_timeout
        while now() < deadline:
            events, acks = self.snapshot()
            first_ack = min((x["end"] for x in acks if x["start"] >= t0), default=None)
            progress = [chat_progress(events[i], t0)[1] for i in running]
            if first_ack is not None and all(p is not None for p in progress) and (stall_thread is None or not stall_thread.is_alive()):
                break
            time.sleep(0.25)
        if stall_thread is not None:
            stall_thread.join(self.a.stall + 120)
            if "error" in result:
                raise RuntimeError(result["error"])
        events, acks = self.snapshot()
        first_ack = min((x["end"] for x in acks if x["start"] >= t0), default=None)
        progress = {i: chat_progress(events[i], t0)[1] for i in running}
        stuck = [self.chats[i] for i, p in progress.items() if p is None]
        if stuck:
            self.findings.append(f"round {number} {kind}: {len(stuck)} running chats did not progress within {self.a.recovery_timeout} s: {stuck}")
        done = [x for x in [first_ack, *progress.values()] if x is not None]
        end = max(done, default=now()) + self.a.recovery_tail
        while now() < end:
            time.sleep(0.2)
        events, _ = self.snapshot()
        parts = {i: chat_progress(events[i], t0)[2] for i in running}
        info.update(
            running=len(running),
            running_chats=running,
            first_ack=None if first_ack is None else first_ack - t0,
            progress=None if stuck or not running else max(progress.values()) - t0,
            chat_p50=None if stuck or not running else statistics.median(progress.values()) - t0,
            chat_progress={self.chats[i]: None if p is None else p - t0 for i, p in progress.items()},
            parts=None if not running or any(p is None for p in parts.values()) else max(parts.values()) - t0,
            stuck=stuck,
            window_end=now(),
        )
        if kind == "kill" and info.get("node"):
            log(f"round {number} {kind}: restart-node {info['node']}")
            self.ha("restart-node", info["node"], timeout=200)
        dead = self.replicas_alive()
        if dead:
            self.findings.append(f"round {number} {kind}: chatd replica(s) with pid {dead} exited")
        log(
            f"round {number} {kind}: first ack {fmt(info['first_ack'])} s, every running chat ({len(running)}) progressed "
            f"{fmt(info['progress'])} s, parts {fmt(info['parts'])} s"
        )
        self.rounds.append(info)

    def settle(self):
        log("writers stopping; waiting for the chats to settle (idle, no owner, empty queue)")
        self.state.stop_writers.set()
        for w in self.writers:
            w.join(180)
        deadline = now() + self.a.settle_timeout
        pending = list(range(len(self.chats)))
        while pending and now() < deadline:
            still = []
            for i in pending:
                try:
                    c = self.api.json(i, "GET", f"/api/v2/chats/{self.chats[i]}")
                    q = self.api.json(i, "GET", f"/api/v2/chats/{self.chats[i]}/messages?limit=1")
                except RuntimeError:
                    still.append(i)
                    continue
                if c["status"] not in ("waiting", "error") or c.get("worker_id") or q["queued_messages"]:
                    still.append(i)
            pending = still
            if pending:
                time.sleep(1)
        log(f"settled in {now() - deadline + self.a.settle_timeout:.1f} s" if not pending else f"{len(pending)} chats did not settle")
        for i in pending:
            self.findings.append(f"chat {self.chats[i]} did not settle within {self.a.settle_timeout} s (not idle, still owned or its queue not empty)")

    def check(self):
        ids = ",".join(self.chats)
        rows = psql_json(
            self.a.db_url,
            "SELECT coalesce(json_agg(json_build_object('chat', chat_id, 'id', id, 'role', role, 'content', content, "
            "'deleted', deleted, 'visibility', visibility, 'at', extract(epoch FROM created_at)) ORDER BY id), '[]') "
            f"FROM chat_messages WHERE chat_id = ANY('{{{ids}}}'::uuid[])",
        )
        queued = psql_json(
            self.a.db_url,
            "SELECT coalesce(json_agg(json_build_object('chat', chat_id, 'id', id, 'content', content)), '[]') "
            f"FROM chat_queued_messages WHERE chat_id = ANY('{{{ids}}}'::uuid[])",
        )
        chats = psql_json(
            self.a.db_url,
            "SELECT coalesce(json_agg(json_build_object('id', id, 'status', status, 'worker', worker_id)), '[]') "
            f"FROM chats WHERE id = ANY('{{{ids}}}'::uuid[])",
        )
        index = {c: i for i, c in enumerate(self.chats)}
        # Every committed message a client sees must reach its watcher (a
        # stream must not miss a message across the switch): wait up to
        # CATCH_UP seconds (a sync poll) for the last ones, then compare.
        visible = {}
        for r in rows:
            if not r["deleted"] and r["visibility"] != "model":
                visible.setdefault(index[r["chat"]], {})[r["id"]] = r["at"]
        deadline = now() + self.a.catch_up
        while True:
            with self.state.lock:
                seen = [{x[0] for _, k, x in ev if k == "message"} for ev in self.state.events]
            missed = {i: sorted(set(ids) - seen[i]) for i, ids in visible.items() if set(ids) - seen[i]}
            if not missed or now() > deadline:
                break
            time.sleep(0.5)
        self.state.stop_watchers.set()
        missed_times = []
        for i, ids in missed.items():
            self.findings.append(f"chat {self.chats[i]}: its watcher never received committed messages {ids}")
            missed_times.extend(visible[i][m] for m in ids)
        copies = {}
        stored = {}
        answers = {}
        answer_at = {}
        dup_answers = {}  # message id -> created_at, each duplicate once
        for c in chats:
            if c["status"] not in ("waiting", "error") or c["worker"]:
                self.findings.append(f"chat {c['id']}: status {c['status']}, worker {c['worker']} after settling")
        by_chat = {}
        for r in rows:
            by_chat.setdefault(r["chat"], []).append(r)
            if r["role"] == "user":
                stored[(index[r["chat"]], r["id"])] = [token_of(t) for t in texts(r["content"])]
        for q in queued:
            for t in texts(q["content"]):
                tok = token_of(t)
                if tok:
                    copies[tok] = copies.get(tok, 0) + 1
        for chat, rs in by_chat.items():
            live = [r for r in rs if not r["deleted"]]
            run_users, run_answers = 0, 0
            for r in live:
                if r["role"] == "user":
                    for t in texts(r["content"]):
                        tok = token_of(t)
                        if tok:
                            copies[tok] = copies.get(tok, 0) + 1
                    if run_answers:
                        run_users, run_answers = 0, 0
                    run_users += 1
                elif r["role"] == "assistant" and r["visibility"] != "model" and texts(r["content"]):
                    run_answers += 1
                    if run_answers > 1:
                        self.findings.append(f"chat {chat}: assistant message {r['id']} is a second answer to the same user messages")
                        dup_answers[r["id"]] = r["at"]
                    for t in texts(r["content"]):
                        tok = token_of(t)
                        if tok:
                            answers[tok] = answers.get(tok, 0) + 1
                            answer_at.setdefault(tok, []).append((r["id"], r["at"]))
        for tok, n in answers.items():
            if n > 1:
                self.findings.append(f"{tok} is answered {n} times (assistant messages {[m for m, _ in answer_at[tok]]})")
                dup_answers.update(answer_at[tok][1:])
        # The database's view of progress: per running chat, the first
        # message created at or after the fault.
        created = {}
        for r in rows:
            created.setdefault(index[r["chat"]], []).append(r["at"])
        for rd in self.rounds:
            firsts = []
            for i in rd["running_chats"]:
                after = [t for t in created.get(i, []) if t >= rd["t0"]]
                firsts.append(min(after) - rd["t0"] if after else None)
            rd["db_progress"] = None if not firsts or None in firsts else max(firsts)
        lost, dups = [], []
        for x in self.state.acks:
            tok = x["token"]
            n = copies.get(tok, 0)
            if n == 0:
                lost.append(x)
                self.findings.append(f"acknowledged {tok} (chat {self.chats[x['chat']]}, acknowledged at {x['end']:.3f}, message {x['message_id']}, queued {x['queued_id']}) is lost")
            elif x["message_id"] is not None and tok not in stored.get((x["chat"], x["message_id"]), []):
                lost.append(x)
                self.findings.append(f"acknowledged {tok} as message {x['message_id']} is not stored as that message")
            if n > 1:
                dups.append(x)
                self.findings.append(f"{tok} is stored {n} times")
        acked = {x["token"] for x in self.state.acks}
        unacked_stored = sum(1 for tok, n in copies.items() if n and tok not in acked)
        self.totals = {
            "acked": len(self.state.acks),
            "unacked_stored": unacked_stored,
            "unacked": len(self.state.unacked),
            "failed_4xx": len(self.state.failed),
            "messages": len(rows),
        }
        # Attribution to rounds: from a round's fault to the next one's.
        starts = [r["t0"] for r in self.rounds] + [float("inf")]

        def which(t):
            for k in range(len(self.rounds)):
                if starts[k] <= t < starts[k + 1]:
                    return k
            return None

        for r in self.rounds:
            r["lost"] = r["dup_writes"] = r["dup_answers"] = r["missed"] = 0
        self.outside = {"lost": 0, "dup_writes": 0, "dup_answers": 0, "missed": 0}
        for name, items in (("lost", [x["end"] for x in lost]), ("dup_writes", [x["end"] for x in dups]), ("dup_answers", list(dup_answers.values())), ("missed", missed_times)):
            for t in items:
                k = which(t)
                if k is None:
                    self.outside[name] += 1
                else:
                    self.rounds[k][name] += 1

    def errors(self):
        """Send outcomes per round window and outside the windows."""
        with self.state.lock:
            attempts = list(self.state.attempts)
            acks = sorted(x["end"] for x in self.state.acks)
            conns = [list(c) for c in self.state.conns]
        self.outside_errors = {}
        counted = set()
        for r in self.rounds:
            t0, t1 = r["t0"], r["window_end"]
            c = {"503": 0, "503_ra": 0, "500": 0, "5xx": 0, "429": 0, "transport": 0}
            for k, a in enumerate(attempts):
                if not (t0 <= a[1] <= t1):
                    continue
                counted.add(k)
                add_outcome(c, a)
            r.update(c)
            r["sse_lost"] = sum(1 for cs in conns for t, what, _ in cs if t0 <= t <= t1 and what == "lost")
            r["sse_refused"] = sum(1 for cs in conns for t, what, _ in cs if t0 <= t <= t1 and what == "refused")
            before = [t for t in acks if t < t0]
            inside = [t for t in acks if t0 <= t <= t1]
            points = before[-1:] + inside + [t1]
            r["write_gap"] = max((b - a for a, b in zip(points, points[1:])), default=None)
        o = {"503": 0, "503_ra": 0, "500": 0, "5xx": 0, "429": 0, "transport": 0}
        for k, a in enumerate(attempts):
            if k not in counted:
                add_outcome(o, a)
        self.outside_errors = o
        self.all_500 = sum(1 for a in attempts if a[3] == 500)
        self.sse_500 = sum(1 for cs in conns for _, what, x in cs if what == "refused" and str(x).startswith("status 500"))
        self.samples_500 = [a[5] for a in attempts if a[3] == 500][:5]
        self.samples_503 = sorted({a[5] for a in attempts if a[3] == 503})[:5]

    def scan_logs(self):
        """Counts the replicas' ERROR and WARN lines and panics (their logs
        are chatd-*.log in the run directory); keeps a few distinct ones."""
        self.log_summary = []
        for name in sorted(os.listdir(self.a.run_dir)):
            if not (name.startswith("chatd-") and name.endswith(".log")):
                continue
            counts = {"ERROR": 0, "WARN": 0, "panicked": 0}
            samples = {}
            with open(os.path.join(self.a.run_dir, name), errors="replace") as f:
                for line in f:
                    for key in counts:
                        if key in line:
                            counts[key] += 1
                            if key != "WARN":
                                # Without the time stamp, so that repeats fold.
                                text = line.strip()
                                text = text[text.find(key):][:300]
                                samples.setdefault(text, 0)
                                samples[text] += 1
            self.log_summary.append(f"{name}: {counts['ERROR']} ERROR, {counts['WARN']} WARN, {counts['panicked']} panics")
            for text, n in sorted(samples.items(), key=lambda kv: -kv[1])[:6]:
                self.log_summary.append(f"    {n} x {text}")
            if counts["panicked"]:
                self.findings.append(f"{name}: {counts['panicked']} panics")

    def report(self):
        cols = [
            ("round", lambda r: f"{r['kind']} {r['round']}"),
            ("running", lambda r: str(r["running"])),
            ("first_ack", lambda r: fmt(r["first_ack"])),
            ("write_gap", lambda r: fmt(r["write_gap"])),
            ("progress", lambda r: fmt(r["progress"])),
            ("chat_p50", lambda r: fmt(r["chat_p50"])),
            ("db_progress", lambda r: fmt(r["db_progress"])),
            ("parts", lambda r: fmt(r["parts"])),
            ("503/+RA", lambda r: f"{r['503']}/{r['503_ra']}"),
            ("500", lambda r: str(r["500"])),
            ("5xx", lambda r: str(r["5xx"])),
            ("429", lambda r: str(r["429"])),
            ("transport", lambda r: str(r["transport"])),
            ("sse_lost", lambda r: str(r["sse_lost"])),
            ("sse_refused", lambda r: str(r["sse_refused"])),
            ("lost", lambda r: str(r["lost"])),
            ("dup_writes", lambda r: str(r["dup_writes"])),
            ("dup_answers", lambda r: str(r["dup_answers"])),
            ("missed", lambda r: str(r["missed"])),
        ]
        lines = []
        header = [c[0] for c in cols]
        table = []
        for kind in self.a.kinds.split(","):
            rs = [r for r in self.rounds if r["kind"] == kind]
            if not rs:
                continue
            for r in rs:
                table.append([f(r) for _, f in cols])
            for label, agg in (("median", statistics.median), ("max", max)):
                row = [f"{kind} {label}", ""]
                for name in ("first_ack", "write_gap", "progress", "chat_p50", "db_progress", "parts"):
                    # A round that never recovered makes the max "never";
                    # the median is over the rounds that did.
                    vals = [r[name] for r in rs]
                    known = [v for v in vals if v is not None]
                    if not known or (label == "max" and len(known) < len(vals)):
                        row.append("never")
                    else:
                        row.append(fmt(agg(known)))
                for name in ("503", "500", "5xx", "429", "transport", "sse_lost", "sse_refused", "lost", "dup_writes", "dup_answers", "missed"):
                    vals = [r[name] for r in rs]
                    v = agg(vals)
                    row.append(f"{v:g}" + (f"/{agg([r['503_ra'] for r in rs]):g}" if name == "503" else ""))
                table.append(row)
        widths = [max(len(x) for x in col) for col in zip(header, *table)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
        for row in table:
            lines.append("  ".join(x.ljust(w) for x, w in zip(row, widths)))
        lines.append("")
        lines.append("seconds from the fault; 503/+RA: 503 answers to sends / how many had Retry-After; counts are send attempts in the round's window")
        o = self.outside_errors
        lines.append(
            f"outside the windows: 503 {o['503']} (+RA {o['503_ra']}), 500 {o['500']}, other 5xx {o['5xx']}, 429 {o['429']}, transport {o['transport']}; "
            f"lost {self.outside['lost']}, dup writes {self.outside['dup_writes']}, dup answers {self.outside['dup_answers']}, missed {self.outside['missed']}"
        )
        t = self.totals
        lines.append(
            f"acknowledged sends {t['acked']}, unacknowledged but stored {t['unacked_stored']}, given up {t['unacked']}, "
            f"4xx other than 429: {t['failed_4xx']}; messages in the database {t['messages']}"
        )
        if self.samples_500:
            lines.append(f"500 bodies: {self.samples_500}")
        if self.samples_503:
            lines.append(f"503 bodies: {self.samples_503}")
        lines.extend(self.log_summary)
        for r in self.rounds:
            extra = {k: r[k] for k in ("old_primary", "node", "new_primary", "command_s") if r.get(k) is not None}
            lines.append(f"{r['kind']} {r['round']}: {extra}")
        text = "\n".join(lines)
        print(text)
        with open(os.path.join(self.a.run_dir, "figures.txt"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(self.a.run_dir, "figures.json"), "w") as f:
            json.dump({"rounds": self.rounds, "totals": self.totals, "outside": self.outside, "outside_errors": self.outside_errors, "findings": self.findings}, f, indent=1)
        with open(os.path.join(self.a.run_dir, "events.json"), "w") as f:
            json.dump({"chats": self.chats, "events": self.state.events, "conns": self.state.conns, "attempts": self.state.attempts, "acks": self.state.acks, "failed": self.state.failed}, f)


def add_outcome(c, a):
    outcome, retry_after = a[3], a[4]
    if outcome == "transport":
        c["transport"] += 1
    elif outcome == 503:
        c["503"] += 1
        if retry_after:
            c["503_ra"] += 1
    elif outcome == 500:
        c["500"] += 1
    elif outcome >= 500:
        c["5xx"] += 1
    elif outcome == 429:
        c["429"] += 1


def fmt(v):
    return "never" if v is None else f"{v:.1f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--urls", required=True, help="the replicas' base URLs, comma-separated")
    p.add_argument("--token", required=True)
    p.add_argument("--cluster-dir", required=True)
    p.add_argument("--db-url", required=True, help="chatd's database (psql reads it after the run)")
    p.add_argument("--ha-script", default=os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "ha-cluster.sh"))
    p.add_argument("--run-dir", default=".")
    p.add_argument("--pids", default="", help="the replicas' pids, comma-separated (checked after each round)")
    p.add_argument("--chats", type=int, default=8)
    p.add_argument("--writers", type=int, default=2)
    p.add_argument("--interval", type=float, default=0.1, help="seconds between sends, over all writers")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kinds", default="kill,switchover,stall")
    p.add_argument("--stall", type=int, default=15, help="seconds of SIGSTOP in a stall round")
    p.add_argument("--warmup", type=float, default=10)
    p.add_argument("--steady", type=float, default=8, help="a chat is steady when it committed a message within this many seconds")
    p.add_argument("--recovery-timeout", type=float, default=120)
    p.add_argument("--recovery-tail", type=float, default=5)
    p.add_argument("--settle-timeout", type=float, default=120)
    p.add_argument("--catch-up", type=float, default=15, help="seconds the watchers get to receive the last committed messages after settling")
    a = p.parse_args()
    for kind in a.kinds.split(","):
        if kind not in ("kill", "switchover", "stall"):
            p.error(f"unknown kind {kind}")
    b = Bench(a)
    b.setup()
    log(f"warm-up {a.warmup} s")
    time.sleep(a.warmup)
    try:
        for number in range(1, a.rounds + 1):
            for kind in a.kinds.split(","):
                b.round(kind, number)
    except Exception as e:  # noqa: BLE001 - reported, then the checks still run
        b.findings.append(f"the rounds stopped: {type(e).__name__}: {e}")
        log(f"the rounds stopped: {e}")
    b.settle()
    b.check()
    b.errors()
    dead = b.replicas_alive()
    if dead:
        b.findings.append(f"chatd replica(s) with pid {dead} exited")
    b.scan_logs()
    if b.all_500:
        b.findings.append(f"{b.all_500} send attempts answered 500")
    if b.sse_500:
        b.findings.append(f"{b.sse_500} stream connections answered 500")
    b.report()
    failed = bool(b.findings)
    print()
    if b.findings:
        print("findings:")
        for f in b.findings:
            print(f"  - {f}")
    else:
        print("no findings: nothing lost or duplicated, no 500, every chat progressed and settled")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
