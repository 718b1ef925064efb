#!/usr/bin/env bash
# The database cost of one chatd turn, measured (issue 36, docs/scaling.md).
#
# Starts a throwaway PostgreSQL 15 of its own (initdb in a temporary
# directory, a free port, trust auth; as the `postgres` OS user when run as
# root; never the machine's shared server), with pg_stat_statements
# (track = all: statements run by trigger functions too), track_functions =
# all and wal_level = replica. On it: a fresh database, the fake LLM
# (`fake-llm --mode scripted`: an answer in 10 parts, 100 ms apart), the
# testkit's MCP server (`mcp-fixture`, slug `calc`) and one real
# `chatd serve` with its production defaults (scripts/lib/live-server.sh).
# A python3 client (standard library only, PostgreSQL's wire protocol
# spoken by hand) then drives turns over HTTP and reads the server's
# statistics, phase by phase:
#
#   idle      nothing happens: the background (heartbeats, acquisition and
#             sync timers, the listener's health checks) per second;
#   plain     TURNS turns, CLIENTS at a time, each client owning one chat:
#             POST /messages "ping", then the long-poll GET /updates until
#             the chat is `waiting` with the answer committed;
#   paced     the same with THINK seconds between a client's turns (a
#             person's pace: longer than the worker's 1 s abandon_idle_after,
#             so every turn acquires the chat again and lets it go);
#   tool      plain turns with "call calc__whoami {}": the model calls an MCP
#             tool, the result is committed, the model answers;
#   watched   plain turns again, each chat followed by an SSE stream
#             (GET /events) for the whole phase: minus `plain`, what a
#             watcher costs per turn and per streamed part;
#   watchers  WATCHERS SSE streams on idle chats for IDLE seconds: what an
#             idle watcher costs per second.
#
# Every phase is a window from one statistics snapshot to the next, ending
# SETTLE seconds after its last turn (PostgreSQL 15 backends flush their
# transaction and WAL counters when idle for 10 s); the idle phase's rate
# times the window's length is subtracted. Per turn it reports transactions
# (xact_commit + xact_rollback of pg_stat_database), statements
# (pg_stat_statements calls, top level, and those run inside trigger
# functions; the top statements by calls), WAL (pg_current_wal_lsn
# difference, and pg_stat_wal records, full-page images, bytes), NOTIFYs
# (the notifications a LISTEN connection of this script received on
# chat:ownership and every measured chat's chat:update:{id}, and the
# pg_notify statements that sent them) and connections (the most backends
# of chatd's database seen at once, sampled every 250 ms, by
# application_name and state). Optionally (--pgbench SECS) it calibrates
# the same server with pgbench: simple-update, select-only, and chatd's
# notifier transaction (three pg_notify, synchronous_commit off).
#
#   scripts/measure-turn-cost.sh [--turns 200] [--clients 8] [--watchers 20]
#       [--think 2] [--idle 30] [--settle 12] [--pgbench 0] [--json FILE] [--keep-logs DIR]
#
# Needs PostgreSQL 15's programs in /usr/lib/postgresql/15/bin (or
# PG_BIN), psql, curl, python3 and cargo (it builds chatd, fake-llm and
# mcp-fixture in debug, as the other live-server scripts do). The figures
# are the server's work, independent of the build; the turns/s it prints
# are not a capacity figure (a debug build on whatever machine runs it).
set -euo pipefail
cd "$(dirname "$0")/.."

turns=200 clients=8 watchers=20 think=2 idle=30 settle=12 pgbench_secs=0 json_out='' keep_logs=''
while [ $# -gt 0 ]; do
  case "$1" in
    --turns) turns=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --watchers) watchers=$2; shift 2 ;;
    --think) think=$2; shift 2 ;;
    --idle) idle=$2; shift 2 ;;
    --settle) settle=$2; shift 2 ;;
    --pgbench) pgbench_secs=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --keep-logs) keep_logs=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "measure-turn-cost: unknown argument $1" >&2; exit 2 ;;
  esac
done

pg_bin="${PG_BIN:-/usr/lib/postgresql/15/bin}"
[ -x "$pg_bin/initdb" ] || { echo "measure-turn-cost: no initdb in $pg_bin (set PG_BIN)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "measure-turn-cost: python3 is missing" >&2; exit 2; }

# ---- a PostgreSQL of our own -------------------------------------------------

pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/chatd-measure-pg.XXXXXX")
pg_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_pg=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$pg_dir"
  as_pg=(runuser -u postgres --)
fi
pg_started=
stop_pg() {
  if [ -n "$pg_started" ]; then
    "${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$pg_dir"
}
trap stop_pg EXIT

echo "== measure-turn-cost: PostgreSQL 15 in $pg_dir on port $pg_port"
"${as_pg[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -U postgres -A trust -E UTF8 --no-locale >"$pg_dir/initdb.log" 2>&1 \
  || { cat "$pg_dir/initdb.log" >&2; exit 2; }
cat >>"$pg_dir/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$pg_dir'
max_connections = 200
shared_buffers = 256MB
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.max = 10000
track_functions = all
track_io_timing = on
wal_level = replica
EOF
"${as_pg[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w start >/dev/null \
  || { cat "$pg_dir/server.log" >&2; exit 2; }
pg_started=1
admin_url="postgres://postgres@127.0.0.1:$pg_port/postgres"
psql "$admin_url" -Xq -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_stat_statements" >/dev/null

# ---- chatd on it ---------------------------------------------------------------

export CHATD_TEST_DATABASE_URL="$admin_url"
# shellcheck source=scripts/lib/live-server.sh
source scripts/lib/live-server.sh
live_init measure
live_build mcp-fixture
live_setup "${keep_logs:-$pg_dir/artifacts}"
# live_setup's EXIT trap stops chatd and the fake LLM; PostgreSQL after them.
trap 'live_cleanup; stop_pg' EXIT
live_start_fake_llm scripted
live_write_config "Fake LLM (scripted)"
cat >>"$live_config" <<EOF

[[mcp_servers]]
slug = "calc"
transport = "stdio"
command = "$live_bin/mcp-fixture"
EOF
live_start_chatd --default-requests-per-minute 1000000
live_wait_ready 60
chatd_version=$("$live_bin/chatd" --version 2>/dev/null || echo chatd)

# ---- the measurement -----------------------------------------------------------

python3 - "$live_url" "$live_admin_token" "$pg_port" "$live_db_name" "$turns" "$clients" "$watchers" \
  "$idle" "$settle" "$pgbench_secs" "$pg_bin" "${json_out:-}" "$chatd_version" "$think" <<'PY'
import http.client, json, os, select, socket, statistics, struct, subprocess, sys, threading, time, urllib.parse

(url, token, pg_port, db, turns, clients, n_watchers, idle, settle, pgbench_secs,
 pg_bin, json_out, chatd_version, think) = sys.argv[1:]
think = float(think)
pg_port, turns, clients, n_watchers = int(pg_port), int(turns), int(clients), int(n_watchers)
idle, settle, pgbench_secs = float(idle), float(settle), int(pgbench_secs)

# ---- PostgreSQL's wire protocol, the little of it needed -----------------------

class Pg:
    """One connection (trust auth), simple queries, LISTEN notifications."""

    def __init__(self, database, app="measure-turn-cost"):
        self.sock = socket.create_connection(("127.0.0.1", pg_port))
        self.buf = b""
        self.notifications = []  # (channel, payload)
        params = b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in
                          (("user", "postgres"), ("database", database), ("application_name", app))) + b"\0"
        body = struct.pack("!i", 196608) + params
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        self._until_ready()

    def _msg(self):
        while True:
            if len(self.buf) >= 5:
                n = struct.unpack("!i", self.buf[1:5])[0]
                if len(self.buf) >= 1 + n:
                    t, body = self.buf[:1], self.buf[5:1 + n]
                    self.buf = self.buf[1 + n:]
                    return t, body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("PostgreSQL closed the connection")
            self.buf += chunk

    def _handle(self, t, body, rows, errors):
        if t == b"R" and struct.unpack("!i", body[:4])[0] != 0:
            raise RuntimeError("the throwaway server should trust us")
        if t == b"E":
            errors.append(body.replace(b"\0", b" ").decode(errors="replace"))
        elif t == b"A":
            _pid = struct.unpack("!i", body[:4])[0]
            channel, payload, _ = body[4:].split(b"\0", 2)
            self.notifications.append((channel.decode(), payload.decode(errors="replace")))
        elif t == b"D":
            ncols = struct.unpack("!h", body[:2])[0]
            pos, row = 2, []
            for _ in range(ncols):
                n = struct.unpack("!i", body[pos:pos + 4])[0]
                pos += 4
                if n < 0:
                    row.append(None)
                else:
                    row.append(body[pos:pos + n].decode())
                    pos += n
            rows.append(row)

    def _until_ready(self):
        rows, errors = [], []
        while True:
            t, body = self._msg()
            if t == b"Z":
                if errors:
                    raise RuntimeError("; ".join(errors))
                return rows
            self._handle(t, body, rows, errors)

    def query(self, sql):
        b = sql.encode() + b"\0"
        self.sock.sendall(b"Q" + struct.pack("!i", len(b) + 4) + b)
        return self._until_ready()

    def value(self, sql):
        return self.query(sql)[0][0]

    def pump(self, timeout):
        """Reads notifications for up to `timeout` seconds."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("listener connection closed")
            self.buf += chunk
            while len(self.buf) >= 5 and len(self.buf) >= 1 + struct.unpack("!i", self.buf[1:5])[0]:
                t, body = self._msg()
                self._handle(t, body, [], [])


admin = Pg("postgres")
admin.query("SELECT pg_stat_reset_shared('wal'), pg_stat_reset_shared('bgwriter'), pg_stat_statements_reset()")
dboid = admin.value(f"SELECT oid FROM pg_database WHERE datname = '{db}'")

SNAPSHOT = f"""
SELECT json_build_object(
  'at', extract(epoch FROM clock_timestamp()),
  'lsn', pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'),
  'db', (SELECT row_to_json(d) FROM (SELECT xact_commit, xact_rollback, tup_inserted, tup_updated, tup_deleted,
                                            tup_fetched, blks_hit, blks_read
                                     FROM pg_stat_database WHERE datid = {dboid}) d),
  'wal', (SELECT row_to_json(w) FROM (SELECT wal_records, wal_fpi, wal_bytes, wal_write, wal_sync FROM pg_stat_wal) w),
  'stmts', (SELECT coalesce(json_agg(s), '[]') FROM (
      SELECT queryid::text || '/' || toplevel::text AS key, toplevel, calls, rows, wal_bytes, wal_records,
             left(regexp_replace(query, '\\s+', ' ', 'g'), 150) AS query
      FROM pg_stat_statements WHERE dbid = {dboid}) s))
"""

def snapshot():
    return json.loads(admin.value(SNAPSHOT))

def diff(a, b):
    d = {"secs": b["at"] - a["at"], "wal_lsn_bytes": b["lsn"] - a["lsn"]}
    for k in a["db"]:
        d[k] = b["db"][k] - a["db"][k]
    for k in ("wal_records", "wal_fpi", "wal_bytes", "wal_write", "wal_sync"):
        d[k] = float(b["wal"][k]) - float(a["wal"][k])
    before = {s["key"]: s for s in a["stmts"]}
    stmts = {}
    for s in b["stmts"]:
        p = before.get(s["key"], {"calls": 0, "rows": 0, "wal_bytes": 0, "wal_records": 0})
        calls = s["calls"] - p["calls"]
        if calls:
            stmts[s["key"]] = {"query": s["query"], "toplevel": s["toplevel"], "calls": calls,
                               "rows": s["rows"] - p["rows"], "wal_bytes": float(s["wal_bytes"]) - float(p["wal_bytes"])}
    d["stmts"] = stmts
    return d

def minus_background(d, bg):
    """d minus the idle phase's rates times d's length."""
    f = d["secs"] / bg["secs"]
    out = {k: (v - bg.get(k, 0) * f if isinstance(v, (int, float)) and k != "secs" else v) for k, v in d.items()}
    stmts = {}
    for key, s in d["stmts"].items():
        b = bg["stmts"].get(key)
        calls = s["calls"] - (b["calls"] * f if b else 0)
        stmts[key] = dict(s, calls=calls, wal_bytes=s["wal_bytes"] - (b["wal_bytes"] * f if b else 0))
    out["stmts"] = stmts
    out["background_factor"] = f
    return out

# ---- the sampler of connections ----------------------------------------------

class Sampler:
    def __init__(self):
        self.pg = Pg("postgres", "measure-turn-cost-sampler")
        self.stop = threading.Event()
        self.max_total = 0
        self.max_active = 0
        self.max_by_app = {}
        self.samples = []

    def run(self):
        while not self.stop.is_set():
            rows = self.pg.query(f"""SELECT coalesce(application_name, ''), coalesce(state, ''), count(*)
                                     FROM pg_stat_activity WHERE datid = {dboid}
                                       AND application_name NOT LIKE 'measure-turn-cost%' GROUP BY 1, 2""")
            total = sum(int(r[2]) for r in rows)
            active = sum(int(r[2]) for r in rows if r[1] not in ("idle",))
            by_app = {}
            for app, _state, n in rows:
                by_app[app] = by_app.get(app, 0) + int(n)
            self.samples.append(total)
            self.max_total = max(self.max_total, total)
            self.max_active = max(self.max_active, active)
            for app, n in by_app.items():
                self.max_by_app[app] = max(self.max_by_app.get(app, 0), n)
            self.stop.wait(0.25)

    def __enter__(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def summary(self):
        return {"max_backends": self.max_total, "max_not_idle": self.max_active,
                "mean_backends": round(statistics.mean(self.samples), 1) if self.samples else 0,
                "max_by_application": self.max_by_app}

# ---- the LISTEN counter --------------------------------------------------------

class Listener:
    """LISTENs on chat:ownership and the chats' chat:update channels: counts
    the notifications, and lets a client wait for its chat's turn to end
    without asking chatd (no statement of its own in chatd's database)."""

    def __init__(self, chat_ids):
        self.pg = Pg(db, "measure-turn-cost-listener")
        names = ["chat:ownership"] + [f"chat:update:{c}" for c in chat_ids]
        self.pg.query("; ".join(f'LISTEN "{n}"' for n in names))
        self.stop = threading.Event()
        self.cv = threading.Condition()
        self.counted = []
        self.updates = {c: [] for c in chat_ids}  # ChatUpdate payloads, by chat
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            r, _, _ = select.select([self.pg.sock], [], [], 0.2)
            if not r:
                continue
            self.pg.pump(0.01)
            got, self.pg.notifications = self.pg.notifications, []
            with self.cv:
                self.counted.extend(got)
                for channel, payload in got:
                    if channel.startswith("chat:update:"):
                        self.updates.setdefault(channel[12:], []).append(json.loads(payload))
                self.cv.notify_all()

    def take(self):
        """The notifications received since the last take, by kind."""
        with self.cv:
            got, self.counted = self.counted, []
        out = {"ownership": 0, "update": 0, "payload_bytes": 0}
        for channel, payload in got:
            out["ownership" if channel == "chat:ownership" else "update"] += 1
            out["payload_bytes"] += len(payload)
        return out

    def forget(self, chat):
        with self.cv:
            self.updates[chat] = []

    def wait_turn(self, chat, timeout=120):
        """Waits until chat:update of `chat` said `running` (the send), then
        `waiting` with a later history (the answer): a turn is over."""
        end = time.monotonic() + timeout
        running_hv = None
        with self.cv:
            while True:
                for u in self.updates[chat]:
                    if running_hv is None and u["status"] == "running":
                        running_hv = u["history_version"]
                    elif running_hv is not None and u["status"] in ("error", "requires_action"):
                        raise RuntimeError(f"chat {chat} ended {u['status']}")
                    elif running_hv is not None and u["status"] == "waiting" and u["history_version"] > running_hv:
                        return
                self.updates[chat] = [] if running_hv is None else self.updates[chat]
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"chat {chat}: no end of the turn in {timeout} s")
                self.cv.wait(left)

# ---- the HTTP client -----------------------------------------------------------

u = urllib.parse.urlsplit(url)
HEADERS = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

class Client:
    def __init__(self):
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)

    def call(self, method, path, body=None):
        try:
            self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=HEADERS)
            r = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            if method != "GET":
                raise
            self.conn.close()
            self.conn.request(method, path, headers=HEADERS)
            r = self.conn.getresponse()
        data = r.read()
        if r.status >= 400:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None

    def wait_idle(self, chat, version, count, grow):
        """Long-polls until the chat is waiting with `grow` more messages."""
        while True:
            row = self.call("GET", f"/api/v2/chats/{chat}/updates?after_snapshot_version={version}&wait_ms=20000")
            if row is None:
                continue
            version = row["snapshot_version"]
            if row["status"] == "waiting" and row["message_count"] >= count + grow:
                return version, row["message_count"]
            if row["status"] in ("error", "requires_action"):
                raise RuntimeError(f"chat {chat} ended {row['status']}: {row.get('last_error')}")


class Watcher:
    """An SSE stream of one chat (GET /events), counting its events."""

    def __init__(self, chat):
        self.chat = chat
        self.events = {}
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        self.conn.request("GET", f"/api/v2/chats/{chat}/events", headers={"Authorization": HEADERS["Authorization"]})
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            raise RuntimeError(f"events of {chat}: {self.resp.status}")
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            for line in self.resp:
                if line.startswith(b"event: "):
                    kind = line[7:].strip().decode()
                    self.events[kind] = self.events.get(kind, 0) + 1
        except Exception:  # noqa: BLE001 - closed by close()
            pass

    def close(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except Exception:  # noqa: BLE001
            pass
        self.conn.close()


def parallel(fn, items):
    errors = []
    def work(item):
        try:
            fn(item)
        except Exception as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]

# ---- set-up: chats, their first turn (and title) over --------------------------

servers = Client().call("GET", "/api/v2/chats/mcp-servers")
calc = next(s for s in servers if s["slug"] == "calc")

class Seat:
    """One client and its chat."""
    def __init__(self, tools):
        self.c = Client()
        body = {"content": [{"type": "text", "text": "warm up"}]}
        if tools:
            body["mcp_server_ids"] = [calc["id"]]
        self.chat = self.c.call("POST", "/api/v2/chats", body)["id"]
        self.version, self.count = self.c.wait_idle(self.chat, 0, 0, 2)
        self.turns = []

    def turn(self, text, grow, poll=True):
        """One turn: the send, then the wait for its end, by the long-poll
        GET /updates (poll) or on the listener (no request to chatd)."""
        t0 = time.monotonic()
        if poll:
            before = self.count
            self.c.call("POST", f"/api/v2/chats/{self.chat}/messages", {"content": [{"type": "text", "text": text}]})
            self.version, self.count = self.c.wait_idle(self.chat, self.version, self.count, grow)
            self.turns.append((time.monotonic() - t0, self.count - before))
        else:
            listener.forget(self.chat)
            self.c.call("POST", f"/api/v2/chats/{self.chat}/messages", {"content": [{"type": "text", "text": text}]})
            listener.wait_turn(self.chat)
            self.turns.append((time.monotonic() - t0, None))

    def refresh(self):
        """The chat's version and message count, after turns it did not poll."""
        row = self.c.call("GET", f"/api/v2/chats/{self.chat}")
        self.version, self.count = row["snapshot_version"], row["message_count"]

print(f"== setting up {clients} chats per phase and {n_watchers} idle chats", flush=True)
plain_seats = [None] * clients
tool_seats = [None] * clients
idle_chats = [None] * n_watchers
def make(i):
    plain_seats[i] = Seat(False)
    tool_seats[i] = Seat(True)
    plain_seats[i].turn("warm up again", 2)
    tool_seats[i].turn("call calc__whoami {}", 2)
parallel(make, range(clients))
def make_idle(i):
    s = Seat(False)
    idle_chats[i] = s.chat
parallel(make_idle, range(n_watchers))
all_chats = [s.chat for s in plain_seats + tool_seats] + idle_chats
listener = Listener(all_chats)
time.sleep(settle)  # the set-up's counters flushed, titles written
listener.take()

results = {"machine": {"cores": os.cpu_count(), "chatd": chatd_version,
                       "postgres": admin.value("SHOW server_version")},
           "parameters": {"turns": turns, "clients": clients, "watchers": n_watchers, "think_secs": think, "idle_secs": idle,
                          "settle_secs": settle}}

def window(body):
    """Runs body() between two snapshots, SETTLE seconds after it ends."""
    listener.take()
    with Sampler() as sampler:
        a = snapshot()
        t0 = time.monotonic()
        extra = body() or {}
        busy = time.monotonic() - t0
        time.sleep(settle)
        b = snapshot()
    d = diff(a, b)
    d["busy_secs"] = busy
    d["notify"] = listener.take()
    d["connections"] = sampler.summary()
    d.update(extra)
    return d

# ---- idle: the background ------------------------------------------------------

print(f"== idle: {idle:.0f} s of nothing (the background)", flush=True)
bg = window(lambda: time.sleep(idle))
results["idle"] = bg

def per(d, n, key):
    return d[key] / n if n else 0.0

def report_turns(name, d, n, note=""):
    c = minus_background(d, bg)
    top = [s for s in c["stmts"].values() if s["toplevel"]]
    nested = [s for s in c["stmts"].values() if not s["toplevel"]]
    txn_ctl = sum(s["calls"] for s in top if s["query"].split(" ")[0].upper() in ("BEGIN", "COMMIT", "ROLLBACK", "START"))
    notify_stmts = sum(s["calls"] for s in top if "pg_notify" in s["query"])
    bg_notify = {k: v * c["background_factor"] for k, v in bg["notify"].items()}
    notify = {k: (d["notify"][k] - bg_notify[k]) / n for k in d["notify"]}
    r = {
        "turns": n,
        "window_secs": round(d["secs"], 1),
        "busy_secs": round(d["busy_secs"], 1),
        "turns_per_sec_wall": round(n / d["busy_secs"], 2),
        "transactions": per(c, n, "xact_commit") + per(c, n, "xact_rollback"),
        "commits": per(c, n, "xact_commit"),
        "rollbacks": per(c, n, "xact_rollback"),
        "statements_top_level": sum(s["calls"] for s in top) / n,
        "statements_without_begin_commit": (sum(s["calls"] for s in top) - txn_ctl) / n,
        "statements_in_triggers": sum(s["calls"] for s in nested) / n,
        "wal_bytes_lsn": per(c, n, "wal_lsn_bytes"),
        "wal_records": per(c, n, "wal_records"),
        "wal_fpi": per(c, n, "wal_fpi"),
        "wal_bytes_stat": per(c, n, "wal_bytes"),
        "rows_inserted": per(c, n, "tup_inserted"),
        "rows_updated": per(c, n, "tup_updated"),
        "rows_deleted": per(c, n, "tup_deleted"),
        "notify_ownership": notify["ownership"],
        "notify_update": notify["update"],
        "notify_payload_bytes": notify["payload_bytes"],
        "pg_notify_statements": notify_stmts / n,
        "connections": d["connections"],
        "top_statements": [
            {"per_turn": round(s["calls"] / n, 3), "wal_bytes_per_turn": round(s["wal_bytes"] / n),
             "rows": s["rows"], "trigger": not s["toplevel"], "query": s["query"]}
            for s in sorted(c["stmts"].values(), key=lambda s: -s["calls"])[:25] if s["calls"] / n >= 0.05],
        "statements_per_turn": {("[trigger] " if not s["toplevel"] else "") + s["query"]: s["calls"] / n
                                for s in c["stmts"].values()},
    }
    for k in ("latency_p50_ms", "messages_per_turn", "watcher_events"):
        if k in d:
            r[k] = d[k]
    results[name] = r
    print(f"== {name}: {n} turns in {d['busy_secs']:.1f} s {note}")
    print(f"   per turn: {r['transactions']:.2f} transactions ({r['commits']:.2f} commits, {r['rollbacks']:.2f} rollbacks), "
          f"{r['statements_top_level']:.1f} statements ({r['statements_without_begin_commit']:.1f} without BEGIN/COMMIT, "
          f"+{r['statements_in_triggers']:.1f} in triggers)")
    print(f"   WAL {r['wal_bytes_lsn']:.0f} bytes (lsn), pg_stat_wal {r['wal_records']:.1f} records, "
          f"{r['wal_fpi']:.2f} full-page images, {r['wal_bytes_stat']:.0f} bytes")
    print(f"   NOTIFY {r['notify_ownership'] + r['notify_update']:.2f} notifications "
          f"({r['notify_ownership']:.2f} chat:ownership, {r['notify_update']:.2f} chat:update, "
          f"{r['notify_payload_bytes']:.0f} payload bytes) in {r['pg_notify_statements']:.2f} pg_notify statements")
    print(f"   rows: {r['rows_inserted']:.1f} inserted, {r['rows_updated']:.1f} updated, {r['rows_deleted']:.1f} deleted")
    cn = d["connections"]
    print(f"   connections of chatd's database: at most {cn['max_backends']} ({cn['max_not_idle']} not idle), "
          f"mean {cn['mean_backends']}; by application {cn['max_by_application']}")
    print("   top statements (calls per turn, WAL bytes per turn):")
    for s in r["top_statements"][:15]:
        print(f"     {s['per_turn']:7.2f} {s['wal_bytes_per_turn']:7d}  {'[trigger] ' if s['trigger'] else ''}{s['query'][:110]}")
    sys.stdout.flush()

s_bg = minus_background(bg, bg)
print(f"   background per second: {(bg['xact_commit'] + bg['xact_rollback']) / bg['secs']:.2f} transactions, "
      f"{sum(s['calls'] for s in bg['stmts'].values() if s['toplevel']) / bg['secs']:.2f} statements, "
      f"{bg['wal_lsn_bytes'] / bg['secs']:.0f} WAL bytes, "
      f"{(bg['notify']['ownership'] + bg['notify']['update']) / bg['secs']:.2f} notifications; "
      f"connections at most {bg['connections']['max_backends']}", flush=True)

def delta_report(name, title):
    w, p = results[name], results["plain"]
    delta = {k: w[k] - p[k] for k in ("transactions", "statements_top_level", "statements_in_triggers",
                                      "wal_bytes_lsn", "notify_update", "notify_ownership")}
    parts = w.get("watcher_events", {}).get("message_part")
    results[name + "_minus_plain"] = dict(delta, message_parts=parts)
    print(f"   {title}: {delta['transactions']:+.2f} transactions, "
          f"{delta['statements_top_level']:+.2f} statements, {delta['wal_bytes_lsn']:+.0f} WAL bytes, "
          f"{delta['notify_update'] + delta['notify_ownership']:+.2f} notifications"
          + (f", for {parts:.1f} message_part events (events per turn: {w.get('watcher_events')})" if parts else ""),
          flush=True)
    # Which statements make the difference.
    pt, wt = p["statements_per_turn"], w["statements_per_turn"]
    diffs = sorted(((wt.get(q, 0) - pt.get(q, 0), q) for q in set(pt) | set(wt)), reverse=True)
    for d, q in diffs[:6]:
        if d >= 0.5:
            print(f"     {d:+7.2f}  {q[:110]}")
    sys.stdout.flush()

def run_turns(seats, text, grow, pause=0.0, poll=False):
    per_seat = turns // len(seats)
    for s in seats:
        s.turns = []
        s.c.conn.close()  # chatd closes keep-alive connections idle too long: a fresh one
    def work(s):
        for i in range(per_seat):
            if pause and i:
                time.sleep(pause)
            s.turn(text, grow, poll)
    parallel(work, seats)
    lat = [t for s in seats for t, _ in s.turns]
    out = {"latency_p50_ms": round(statistics.median(lat) * 1000, 1)}
    if poll:
        out["messages_per_turn"] = round(statistics.mean(g for s in seats for _, g in s.turns), 2)
    return out

n_turns = (turns // clients) * clients

print(f"== plain: {n_turns} turns, each waited for on LISTEN", flush=True)
report_turns("plain", window(lambda: run_turns(plain_seats, "ping", 2)), n_turns)

print(f"== polled: {n_turns} plain turns, each waited for by the long-poll GET /updates", flush=True)
parallel(lambda s: s.refresh(), plain_seats)
time.sleep(2)
report_turns("polled", window(lambda: run_turns(plain_seats, "ping", 2, poll=True)), n_turns)
delta_report("polled", "a long-poll client's cost per turn (polled - plain)")

print(f"== paced: {n_turns} turns, {think:g} s between a client's turns", flush=True)
time.sleep(think)
report_turns("paced", window(lambda: run_turns(plain_seats, "ping", 2, think)), n_turns)

print(f"== tool: {n_turns} turns calling calc__whoami", flush=True)
report_turns("tool", window(lambda: run_turns(tool_seats, "call calc__whoami {}", 2)), n_turns)

def watched():
    ws = [Watcher(s.chat) for s in plain_seats]
    time.sleep(1)
    for w in ws:
        w.events = {}
    extra = run_turns(plain_seats, "ping", 2)
    time.sleep(1)
    events = {}
    for w in ws:
        for k, v in w.events.items():
            events[k] = events.get(k, 0) + v
        w.close()
    extra["watcher_events"] = {k: round(v / n_turns, 2) for k, v in events.items()}
    return extra

print(f"== watched: {n_turns} plain turns, each chat followed by an SSE stream", flush=True)
report_turns("watched", window(watched), n_turns)
delta_report("watched", "an SSE watcher's cost per turn (watched - plain)")

print(f"== watchers: {n_watchers} SSE streams on idle chats for {idle:.0f} s (opened before the window)", flush=True)
opened = [Watcher(c) for c in idle_chats]
time.sleep(settle)
d = window(lambda: time.sleep(idle))
for w in opened:
    w.close()
c = minus_background(d, bg)
secs = d["busy_secs"]
top = [s for s in c["stmts"].values() if s["toplevel"]]
results["idle_watchers"] = {
    "watchers": n_watchers, "secs": round(secs, 1),
    "transactions_per_watcher_second": (c["xact_commit"] + c["xact_rollback"]) / n_watchers / secs,
    "statements_per_watcher_second": sum(s["calls"] for s in top) / n_watchers / secs,
    "wal_bytes_per_watcher_second": c["wal_lsn_bytes"] / n_watchers / secs,
    "connections": d["connections"],
    "top_statements": [{"calls": round(s["calls"], 1), "query": s["query"]}
                       for s in sorted(top, key=lambda s: -s["calls"])[:8] if s["calls"] >= 1],
}
iw = results["idle_watchers"]
print(f"   per watcher per second: {iw['transactions_per_watcher_second']:.3f} transactions, "
      f"{iw['statements_per_watcher_second']:.3f} statements, {iw['wal_bytes_per_watcher_second']:.1f} WAL bytes")
for s in iw["top_statements"]:
    print(f"     {s['calls']:8.1f}  {s['query'][:110]}")
sys.stdout.flush()

# ---- pgbench: what this server commits ----------------------------------------

if pgbench_secs > 0:
    admin.query("CREATE DATABASE measure_pgbench")
    env = dict(os.environ, PGHOST="127.0.0.1", PGPORT=str(pg_port), PGUSER="postgres")
    subprocess.run([f"{pg_bin}/pgbench", "-q", "-i", "-s", "10", "measure_pgbench"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results["pgbench"] = {}
    # A notifier's transaction as chatd's sends it (PgPubsub: commit with
    # synchronous_commit off, ~300-byte payloads, 3 per batch), with one
    # LISTEN connection reading the queue, as a replica's listener does.
    notify_sql = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"measure-notify-{os.getpid()}.sql")
    with open(notify_sql, "w") as f:
        f.write("SELECT count(pg_notify(t.c, t.p)) FROM (SELECT set_config('synchronous_commit', 'off', true)) AS s, "
                "unnest(ARRAY['chat:update:bench', 'chat:update:bench', 'chat:ownership'], "
                "ARRAY[repeat('x', 290) || random()::text, repeat('y', 290) || random()::text, '']) AS t(c, p);\n")
    bench_listener = Pg("measure_pgbench", "measure-turn-cost-bench-listener")
    bench_listener.query('LISTEN "chat:update:bench"; LISTEN "chat:ownership"')
    stop_reading = threading.Event()
    def read_queue():
        while not stop_reading.is_set():
            bench_listener.pump(0.2)
            bench_listener.notifications = []
    reader = threading.Thread(target=read_queue, daemon=True)
    reader.start()
    for label, args in (("simple_update_c16", ["-N", "-c", "16", "-j", "2"]),
                        ("select_only_c16", ["-S", "-c", "16", "-j", "2"]),
                        ("notify_batch_of_3_c16", ["-n", "-f", notify_sql, "-c", "16", "-j", "2"])):
        admin.query("CHECKPOINT")
        a = snapshot()
        out = subprocess.run([f"{pg_bin}/pgbench", *args, "-T", str(pgbench_secs), "measure_pgbench"], env=env,
                             check=True, capture_output=True, text=True).stdout
        b = snapshot()
        tps = next(float(l.split("=")[1].split()[0]) for l in out.splitlines() if l.startswith("tps ="))
        results["pgbench"][label] = {"tps": tps, "wal_bytes_per_sec": (b["lsn"] - a["lsn"]) / (b["at"] - a["at"])}
        print(f"== pgbench {label} ({' '.join(args)} -T {pgbench_secs}): {tps:.0f} transactions/s, "
              f"{results['pgbench'][label]['wal_bytes_per_sec'] / 1e6:.2f} MB/s WAL", flush=True)
    stop_reading.set()
    reader.join()
    os.remove(notify_sql)

if json_out:
    with open(json_out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"== results in {json_out}")
PY
