#!/usr/bin/env bash
# A real high-availability PostgreSQL cluster for tests and for users (issue 36;
# README "Production topology: PostgreSQL with failover").
#
# One etcd member, three Patroni-managed PostgreSQL 15 nodes (pg1..pg3) with
# synchronous replication (synchronous_mode_strict, one sync standby: a commit
# the primary acknowledged is on two nodes), and HAProxy routing to the node
# whose Patroni REST API answers /primary (read-write) or /replica (read-only).
# Debian's packages `patroni` 3.0, `etcd-server` 3.4 and `haproxy` 2.6; the
# script installs them with apt-get when they are missing, without starting
# their system services.
#
# Everything lives in the cluster directory DIR: configs, data, logs (DIR/logs),
# pid files (DIR/run). All processes run as background daemons (no systemd);
# as root, every process runs as the `postgres` OS user and DIR is chowned to it.
# Authentication is `trust` on 127.0.0.1: a local test cluster only. Production
# needs real passwords/TLS in pg_hba and in Patroni's `authentication`.
#
# Ports come from CHATD_HA_PORT_BASE (default 5540), remembered in DIR/base by
# `start` (later commands on DIR use the remembered base):
#   base      HAProxy read-write (the primary)   base+1  HAProxy read-only (replicas)
#   base+2..4 PostgreSQL of pg1..pg3             base+10..12 Patroni REST API of pg1..pg3
#   base+20   etcd client                        base+21 etcd peer
#
# Commands (DIR is any directory; `start` creates it):
#   install                  apt-get install the packages if missing
#   start DIR                start (or restart the cluster already in DIR), wait
#                            <= 90 s until healthy; prints CHATD_HA_URL=... and
#                            CHATD_HA_RO_URL=... as the last lines on stdout
#   stop DIR                 stop haproxy, the Patronis and their PostgreSQL, etcd
#   status DIR               one JSON object per node and line: name, role
#                            (leader|sync_standby|replica|down), pg_port, rest_port,
#                            patroni_pid, postmaster_pid
#   primary DIR              the leader's name (exit 1 when none)
#   kill-primary DIR         SIGKILL the leader's Patroni and all its PostgreSQL
#                            processes; prints the node's name
#   stall-primary DIR SECS   SIGSTOP the leader's Patroni and PostgreSQL processes,
#                            SIGCONT after SECS seconds; prints the node's name
#   switchover DIR           patronictl switchover to the sync standby; waits until
#                            the new leader answers /primary; prints its name
#   restart-node DIR NAME    start NAME's Patroni again (it rejoins as a replica,
#                            with pg_rewind when its timeline diverged)
#   wait-healthy DIR [SECS]  wait (default 90 s) until healthy as after start
#
# Healthy: exactly one node answers /primary, the two others run as replicas
# and stream from it, one of them is the synchronous standby, and a write
# through HAProxy's read-write port commits. `start` on a running cluster only
# starts what is missing and waits; on a stopped one it restarts the same cluster.
#
# Roles in `status`: leader answers /primary; sync_standby and replica run
# PostgreSQL as standbys (Patroni's sync key names the sync one); down is
# anything else: no answer from Patroni (killed, stalled), PostgreSQL not
# running (starting, rewinding), or a primary without the leader key.
#
# What a client of the read-write port sees during a failover or switchover:
# its connections are cut when HAProxy marks the old primary down (~1-2 s);
# new connections are closed at once while no node answers /primary; the
# first seconds after a promotion a write may fail with SQLSTATE 25006 (read
# only: Patroni answers /primary when it holds the key, a moment before the
# promotion ends) and connecting may fail with 57P03 (shutting down); and
# commits wait until a synchronous standby streams from the new primary.
set -euo pipefail

PG_BIN="${CHATD_HA_PG_BIN:-/usr/lib/postgresql/15/bin}"
PY=/usr/bin/python3 # Debian's: Patroni depends on it (pyenv shims are slow)
NODES=(pg1 pg2 pg3)
PACKAGES=(patroni etcd-server haproxy)

die() {
  echo "ha-cluster: $*" >&2
  exit 1
}
say() { echo "ha-cluster: $*" >&2; }

usage() {
  sed -n '/^# Commands/,/^# Healthy/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

# --- installation -----------------------------------------------------------

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

cmd_install() {
  local missing
  mapfile -t missing < <(missing_packages)
  [ "${#missing[@]}" -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing packages ${missing[*]}: run 'scripts/ha-cluster.sh install' as root"
  say "installing ${missing[*]}"
  # Debian starts a package's service on install: etcd would take 2379, the
  # packaged haproxy and patroni their defaults. policy-rc.d 101 forbids it.
  local policy=/usr/sbin/policy-rc.d made_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    made_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  local rc=0
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
    apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || rc=$?
  fi
  [ -n "$made_policy" ] && rm -f "$policy"
  [ "$rc" -eq 0 ] || die "apt-get install ${missing[*]} failed"
  # On a machine with systemd, the services were enabled for the next boot:
  # only for the packages installed here, disable them (this cluster runs its own).
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    local p unit
    for p in "${missing[@]}"; do
      unit=${p%-server}
      systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
  fi
}

# --- layout and helpers -----------------------------------------------------

DIR=""
BASE=""

# Sets DIR (absolute) from $1; with `create`, makes it.
set_dir() {
  [ -n "${1:-}" ] || usage
  if [ "${2:-}" = create ]; then mkdir -p "$1"; fi
  [ -d "$1" ] || die "no cluster directory $1"
  DIR=$(cd "$1" && pwd)
}

# Sets BASE: remembered in DIR/base by start; otherwise CHATD_HA_PORT_BASE.
load_base() {
  local env_base="${CHATD_HA_PORT_BASE:-}"
  if [ -s "$DIR/base" ]; then
    BASE=$(cat "$DIR/base")
    if [ "${1:-}" = start ] && [ -n "$env_base" ] && [ "$env_base" != "$BASE" ]; then
      die "$DIR is a cluster on port base $BASE, not CHATD_HA_PORT_BASE=$env_base (use another DIR)"
    fi
  else
    BASE="${env_base:-5540}"
  fi
  if ! [[ "$BASE" =~ ^[0-9]+$ ]] || [ "$BASE" -lt 1024 ] || [ "$BASE" -gt 65500 ]; then
    die "port base must be a number in 1024..65500, not '$BASE'"
  fi
}

node_index() {
  case "$1" in
    pg1) echo 0 ;; pg2) echo 1 ;; pg3) echo 2 ;;
    *) die "no node '$1' (pg1, pg2, pg3)" ;;
  esac
}
pg_port() { echo $((BASE + 2 + $(node_index "$1"))); }
rest_port() { echo $((BASE + 10 + $(node_index "$1"))); }

as_root() { [ "$(id -u)" -eq 0 ]; }

# The command prefix that runs a command as the postgres OS user when root
# (setpriv and env exec the command: no process stays in between).
as_pg_prefix() {
  if as_root; then
    AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups env HOME="$DIR")
  else
    AS_PG=(env HOME="$DIR")
  fi
}
as_pg() {
  local AS_PG
  as_pg_prefix
  "${AS_PG[@]}" "$@"
}

# pid in FILE when that process lives and its command line contains PATTERN.
live_pid() {
  local file=$1 pattern=$2 pid
  [ -s "$file" ] || return 1
  pid=$(head -n1 "$file" 2>/dev/null | tr -dc '0-9')
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern" || return 1
  echo "$pid"
}

patroni_pid() { live_pid "$DIR/run/$1.pid" "$DIR/$1/patroni.yml"; }
postmaster_pid() { live_pid "$DIR/$1/data/postmaster.pid" "$DIR/$1/data"; }
etcd_pid() { live_pid "$DIR/run/etcd.pid" "$DIR/etcd"; }
haproxy_pid() { live_pid "$DIR/run/haproxy.pid" "$DIR/haproxy.cfg"; }

# Sends SIG to NAME's postmaster and all its children (PostgreSQL's children
# call setsid(): each leads a process group of its own, so the postmaster's
# group is no handle on them). The postmaster is stopped first, so that it
# forks nothing while its children are listed.
signal_postgres() {
  local sig=$1 name=$2 pm kids
  pm=$(postmaster_pid "$name") || return 0
  [ "$sig" = CONT ] || kill -STOP "$pm" 2>/dev/null || true
  kids=$(pgrep -P "$pm" || true)
  # shellcheck disable=SC2086
  [ -z "$kids" ] || kill -"$sig" $kids 2>/dev/null || true
  kill -"$sig" "$pm" 2>/dev/null || true
}

psql_cmd() {
  if [ -x "$PG_BIN/psql" ]; then echo "$PG_BIN/psql"; else echo psql; fi
}

# Python helper on the Patroni REST APIs (stdlib only).
#   py status DIR BASE | py primary BASE | py healthy BASE HAPROXY_SOCKET | py sync BASE
#   | py code PORT PATH (HTTP status of GET 127.0.0.1:PORT/PATH, 000 when no answer)
py() {
  "$PY" - "$@" <<'PY'
import json, os, sys, urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor

NODES = ["pg1", "pg2", "pg3"]
cmd = sys.argv[1]
args = sys.argv[2:]

def get(port, path, timeout=1.0):
    """(HTTP status, JSON body) of GET path on 127.0.0.1:port; (None, {}) when no answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"{}")
        except Exception:
            return e.code, {}
    except Exception:
        return None, {}

def haproxy_primary_up(sock):
    """Servers of HAProxy's read-write proxy that it routes to (status UP, "UP 1/2")."""
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(sock)
    s.sendall(b"show stat\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    lines = data.decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    up = []
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        if row.get("pxname") == "primary" and row.get("svname") in NODES \
                and row.get("status", "").startswith("UP"):
            up.append(row["svname"])
    return up

def probe_all(base):
    """Each node's /primary answer (200 only for the leader; body as /patroni)."""
    ports = [base + 10 + i for i in range(3)]
    with ThreadPoolExecutor(3) as ex:
        return dict(zip(NODES, ex.map(lambda p: get(p, "/primary"), ports)))

def role(code, body):
    if code == 200:
        return "leader"
    if code is None or body.get("role") != "replica" or body.get("state") != "running":
        return "down"
    return "sync_standby" if body.get("sync_standby") else "replica"

def live_pid(path, pattern):
    try:
        with open(path) as f:
            pid = int(f.readline().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if pattern.encode() not in f.read():
                return None
        return pid
    except Exception:
        return None

if cmd == "status":
    d, base = args[0], int(args[1])
    probes = probe_all(base)
    for i, n in enumerate(NODES):
        code, body = probes[n]
        print(json.dumps({
            "name": n, "role": role(code, body),
            "pg_port": base + 2 + i, "rest_port": base + 10 + i,
            "patroni_pid": live_pid(f"{d}/run/{n}.pid", f"{d}/{n}/patroni.yml"),
            "postmaster_pid": live_pid(f"{d}/{n}/data/postmaster.pid", f"{d}/{n}/data"),
        }, separators=(",", ":")))
elif cmd == "code":
    code, _ = get(int(args[0]), args[1])
    print(code or "000")
elif cmd == "primary":
    probes = probe_all(int(args[0]))
    leaders = [n for n in NODES if probes[n][0] == 200]
    if not leaders:
        sys.exit(1)
    print(leaders[0])
elif cmd == "sync":
    probes = probe_all(int(args[0]))
    sync = [n for n in NODES if role(*probes[n]) == "sync_standby"]
    if not sync:
        sys.exit(1)
    print(sync[0])
elif cmd == "healthy":
    probes = probe_all(int(args[0]))
    roles = {n: role(*probes[n]) for n in NODES}
    leaders = [n for n in NODES if roles[n] == "leader"]
    if len(leaders) != 1:
        print(f"{len(leaders)} leaders: {roles}")
        sys.exit(1)
    leader = leaders[0]
    others = [n for n in NODES if n != leader]
    down = [n for n in others if roles[n] == "down"]
    if down:
        print(f"not running as replicas: {down}: {roles}")
        sys.exit(1)
    repl = probes[leader][1].get("replication") or []
    streaming = {r.get("application_name") for r in repl if r.get("state") == "streaming"}
    sync = {r.get("application_name") for r in repl
            if r.get("state") == "streaming" and r.get("sync_state") in ("sync", "quorum")}
    if not set(others) <= streaming:
        print(f"not streaming from {leader}: {sorted(set(others) - streaming)}")
        sys.exit(1)
    # Patroni's sync key names the standby (what failover may promote), and
    # PostgreSQL on the leader waits for it.
    named = {n for n in others if roles[n] == "sync_standby"}
    if not named or not named <= sync:
        print(f"no synchronous standby: Patroni names {sorted(named)}, {leader} streams {repl}")
        sys.exit(1)
    try:
        up = haproxy_primary_up(args[1])
    except Exception as e:
        print(f"HAProxy's stats socket {args[1]}: {e}")
        sys.exit(1)
    if up != [leader]:
        print(f"HAProxy routes writes to {up}, not to {leader} alone")
        sys.exit(1)
else:
    sys.exit(f"unknown py command {cmd}")
PY
}

# A write through HAProxy's read-write port commits (synchronously replicated).
write_works() {
  local out
  out=$(PGCONNECT_TIMEOUT=2 timeout 5 "$(psql_cmd)" -X -qAt -h 127.0.0.1 -p "$BASE" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 -c 'SELECT pg_is_in_recovery()' -c 'SELECT txid_current() > 0' 2>&1) || {
    echo "write through HAProxy failed: $out"
    return 1
  }
  [ "$out" = "$(printf 'f\nt')" ] || {
    echo "write through HAProxy: unexpected answer: $out"
    return 1
  }
}

# Prints the last lines of every log to stderr.
log_tails() {
  local f
  for f in "$DIR"/logs/*.log; do
    [ -e "$f" ] || continue
    echo "--- tail of $f" >&2
    tail -n 25 "$f" >&2
  done
}

# Waits up to SECS until healthy; prints the reason it is not on failure.
wait_healthy() {
  local secs=$1 deadline reason=""
  deadline=$(($(date +%s) + secs))
  while :; do
    if reason=$(py healthy "$BASE" "$(haproxy_socket)") && reason=$(write_works); then
      return 0
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "not healthy after ${secs} s: $reason" >&2
      return 1
    fi
    sleep 0.5
  done
}

port_busy() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
ports_free() {
  local p
  for p in "$@"; do
    if port_busy "$p"; then
      die "port $p is in use (CHATD_HA_PORT_BASE=$BASE clashes with something)"
    fi
  done
}

# --- configuration ----------------------------------------------------------

# The directory of PostgreSQL's Unix sockets (a socket path must stay below 108 bytes).
socket_dir() {
  if [ "${#DIR}" -le 76 ]; then echo "$DIR/run"; else echo /tmp; fi
}
# HAProxy's stats socket (health checks read which servers it routes to).
haproxy_socket() { echo "$(socket_dir)/chatd-ha-$BASE-haproxy.sock"; }

write_configs() {
  local sockdir n i
  sockdir=$(socket_dir)
  for i in 0 1 2; do
    n=${NODES[$i]}
    mkdir -p "$DIR/$n"
    cat >"$DIR/$n/patroni.yml" <<EOF
# Generated by scripts/ha-cluster.sh (rewritten on every start).
scope: chatd-ha-$BASE
namespace: /chatd/
name: $n

restapi:
  listen: 127.0.0.1:$((BASE + 10 + i))
  connect_address: 127.0.0.1:$((BASE + 10 + i))

# etcd's v2 API, not etcd3: Patroni 3.0.2's etcd3 client renews an expired
# leader key unconditionally (fixed in Patroni 3.0.3, patroni/patroni#2689),
# so a primary that was stalled past the TTL takes the key back from the
# replica already promoted, and that one's acknowledged commits are rewound
# away. The v2 client renews with compare-and-swap on its own name.
etcd:
  hosts: 127.0.0.1:$((BASE + 20))
  protocol: http

watchdog:
  mode: off

bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: true
    synchronous_node_count: 1
    postgresql:
      use_pg_rewind: true
      use_slots: true
      remove_data_directory_on_rewind_failure: true
      remove_data_directory_on_diverged_timelines: true
      parameters:
        max_connections: 300
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8

postgresql:
  listen: 127.0.0.1:$((BASE + 2 + i))
  connect_address: 127.0.0.1:$((BASE + 2 + i))
  data_dir: $DIR/$n/data
  bin_dir: $PG_BIN
  pgpass: $DIR/$n/pgpass
  # Local test cluster: trust on loopback. Production: scram-sha-256 and TLS.
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: replicator
      password: replicator
  basebackup:
    - checkpoint: fast
  parameters:
    unix_socket_directories: '$sockdir'
    logging_collector: "on"
    log_directory: '$DIR/logs'
    log_filename: '$n-postgres.log'
    log_line_prefix: '%m [%p] %q%u@%d '
    # After a failover a replica's first try to stream from the new leader
    # often fails (Patroni creates its slot a loop later): retry after 1 s,
    # not the default 5 s, or commits wait 4 s longer for a sync standby.
    wal_retrieve_retry_interval: 1s
EOF
  done

  cat >"$DIR/haproxy.cfg" <<EOF
# Generated by scripts/ha-cluster.sh (rewritten on every start).
global
    maxconn 2000
    log stderr format iso local0 notice
    stats socket $(haproxy_socket) mode 600 level user

defaults
    mode tcp
    log global
    retries 2
    timeout connect 2s
    timeout check 1s
    # Idle connections (a LISTEN session) may stay quiet for long.
    timeout client 24h
    timeout server 24h

listen primary
    bind 127.0.0.1:$BASE
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
    server pg1 127.0.0.1:$((BASE + 2)) check port $((BASE + 10))
    server pg2 127.0.0.1:$((BASE + 3)) check port $((BASE + 11))
    server pg3 127.0.0.1:$((BASE + 4)) check port $((BASE + 12))

listen replicas
    bind 127.0.0.1:$((BASE + 1))
    balance roundrobin
    option httpchk OPTIONS /replica
    http-check expect status 200
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
    server pg1 127.0.0.1:$((BASE + 2)) check port $((BASE + 10))
    server pg2 127.0.0.1:$((BASE + 3)) check port $((BASE + 11))
    server pg3 127.0.0.1:$((BASE + 4)) check port $((BASE + 12))
EOF
}

# --- processes --------------------------------------------------------------

# Starts "$@" as a daemon (own session, as postgres when root); the daemon
# writes its own pid to PIDFILE before it execs.
daemon() {
  local pidfile=$1 log=$2 AS_PG _
  shift 2
  as_pg_prefix
  rm -f "$pidfile"
  # shellcheck disable=SC2016
  (cd "$DIR" && "${AS_PG[@]}" setsid -f sh -c 'echo $$ >"$0" && exec "$@"' "$pidfile" "$@" </dev/null >>"$log" 2>&1)
  for _ in $(seq 1 50); do
    [ -s "$pidfile" ] && return 0
    sleep 0.05
  done
  die "$1 did not start (see $log)"
}

start_etcd() {
  etcd_pid >/dev/null && return 0
  daemon "$DIR/run/etcd.pid" "$DIR/logs/etcd.log" \
    etcd --name etcd1 --data-dir "$DIR/etcd" --logger zap \
    --listen-client-urls "http://127.0.0.1:$((BASE + 20))" \
    --advertise-client-urls "http://127.0.0.1:$((BASE + 20))" \
    --listen-peer-urls "http://127.0.0.1:$((BASE + 21))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((BASE + 21))" \
    --initial-cluster "etcd1=http://127.0.0.1:$((BASE + 21))" \
    --initial-cluster-token "chatd-ha-$BASE" --initial-cluster-state new --enable-v2=true
  local _
  for _ in $(seq 1 40); do
    [ "$(py code $((BASE + 20)) /health)" = 200 ] && return 0
    etcd_pid >/dev/null || break
    sleep 0.25
  done
  log_tails
  die "etcd did not start on 127.0.0.1:$((BASE + 20))"
}

start_patroni() {
  local n=$1
  patroni_pid "$n" >/dev/null && return 0
  daemon "$DIR/run/$n.pid" "$DIR/logs/$n.log" patroni "$DIR/$n/patroni.yml"
}

start_haproxy() {
  haproxy_pid >/dev/null && return 0
  # -db: stay in the foreground of its own session (the pid is ours to keep).
  daemon "$DIR/run/haproxy.pid" "$DIR/logs/haproxy.log" haproxy -db -f "$DIR/haproxy.cfg"
}

# --- commands ---------------------------------------------------------------

cmd_start() {
  set_dir "${1:-}" create
  local t0
  t0=$(date +%s.%N)
  cmd_install
  [ -x "$PG_BIN/postgres" ] || die "no PostgreSQL 15 at $PG_BIN (set CHATD_HA_PG_BIN)"
  load_base start

  # Ports must be free, except for this cluster's own running processes.
  local n
  etcd_pid >/dev/null || ports_free $((BASE + 20)) $((BASE + 21))
  haproxy_pid >/dev/null || ports_free "$BASE" $((BASE + 1))
  for n in "${NODES[@]}"; do
    if ! patroni_pid "$n" >/dev/null && ! postmaster_pid "$n" >/dev/null; then
      ports_free "$(pg_port "$n")" "$(rest_port "$n")"
    fi
  done
  echo "$BASE" >"$DIR/base"
  mkdir -p "$DIR/logs" "$DIR/run" "$DIR/etcd"
  chmod 700 "$DIR/etcd"

  write_configs
  if as_root; then
    id postgres >/dev/null 2>&1 || die "no postgres OS user"
    find "$DIR" ! -user postgres -exec chown postgres:postgres {} +
    as_pg test -w "$DIR" -a -x "$DIR" \
      || die "the postgres user cannot write $DIR (a parent directory is closed to it: use e.g. /tmp/...)"
  fi

  start_etcd
  for n in "${NODES[@]}"; do start_patroni "$n"; done
  start_haproxy

  if ! wait_healthy 90; then
    log_tails
    die "cluster in $DIR is not healthy (it still runs: 'scripts/ha-cluster.sh stop $DIR')"
  fi
  printf '# ha-cluster: %s healthy after %.1f s (leader %s)\n' "$DIR" \
    "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" "$(py primary "$BASE" || echo '?')"
  echo "CHATD_HA_URL=postgres://postgres@127.0.0.1:$BASE/postgres"
  echo "CHATD_HA_RO_URL=postgres://postgres@127.0.0.1:$((BASE + 1))/postgres"
}

# Waits up to SECS for all PIDS to exit.
wait_gone() {
  local secs=$1 deadline p alive
  shift
  deadline=$(($(date +%s) + secs))
  while :; do
    alive=""
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && return 0
    [ "$(date +%s)" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}

cmd_stop() {
  set_dir "${1:-}"
  load_base
  local pid n pids=() pms=() haproxy=""
  if haproxy=$(haproxy_pid); then
    kill -TERM "$haproxy" 2>/dev/null || true
  fi
  for n in "${NODES[@]}"; do
    # A stalled node must run again to stop.
    signal_postgres CONT "$n"
    if pid=$(patroni_pid "$n"); then
      kill -CONT "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true # Patroni stops its PostgreSQL (fast)
      pids+=("$pid")
    elif pid=$(postmaster_pid "$n"); then
      kill -INT "$pid" 2>/dev/null || true # fast shutdown of an orphaned postmaster
    fi
    if pid=$(postmaster_pid "$n"); then pms+=("$pid"); fi
  done
  if ! wait_gone 30 "${pids[@]}" "${pms[@]}"; then
    say "Patroni/PostgreSQL did not stop in 30 s: SIGKILL"
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for n in "${NODES[@]}"; do signal_postgres KILL "$n"; done
  fi
  if [ -n "$haproxy" ] && ! wait_gone 1 "$haproxy"; then kill -KILL "$haproxy" 2>/dev/null || true; fi
  if pid=$(etcd_pid); then
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone 10 "$pid" || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR"/run/*.pid
}

cmd_status() {
  set_dir "${1:-}"
  load_base
  py status "$DIR" "$BASE"
}

cmd_primary() {
  set_dir "${1:-}"
  load_base
  py primary "$BASE"
}

the_primary() {
  py primary "$BASE" || die "no primary (no node answers /primary)"
}

cmd_kill_primary() {
  set_dir "${1:-}"
  load_base
  local n pid
  n=$(the_primary)
  pid=$(patroni_pid "$n") && kill -KILL "$pid" 2>/dev/null
  signal_postgres KILL "$n"
  echo "$n"
}

cmd_stall_primary() {
  set_dir "${1:-}"
  load_base
  local secs="${2:-}" n pid
  [[ "$secs" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "stall-primary DIR SECS: SECS must be a number of seconds"
  n=$(the_primary)
  pid=$(patroni_pid "$n") || die "$n: no Patroni process"
  # SIGCONT even when interrupted: never leave a node frozen.
  trap 'kill -CONT "$pid" 2>/dev/null; signal_postgres CONT "$n"' EXIT
  signal_postgres STOP "$n"
  kill -STOP "$pid"
  echo "$n"
  sleep "$secs"
  kill -CONT "$pid" 2>/dev/null || true
  signal_postgres CONT "$n"
  trap - EXIT
}

cmd_switchover() {
  set_dir "${1:-}"
  load_base
  local leader candidate out deadline
  leader=$(the_primary)
  candidate=$(py sync "$BASE") || die "no synchronous standby to switch over to"
  out=$(as_pg patronictl -c "$DIR/$leader/patroni.yml" switchover --leader "$leader" \
    --candidate "$candidate" --force 2>&1) || die "patronictl switchover failed: $out"
  deadline=$(($(date +%s) + 60))
  while [ "$(py code "$(rest_port "$candidate")" /primary)" != 200 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$candidate does not answer /primary 60 s after the switchover: $out"
    sleep 0.2
  done
  echo "$candidate"
}

cmd_restart_node() {
  set_dir "${1:-}"
  load_base
  local n="${2:-}" _
  node_index "$n" >/dev/null
  if patroni_pid "$n" >/dev/null; then
    say "$n: Patroni already runs"
    return 0
  fi
  start_patroni "$n"
  for _ in $(seq 1 50); do
    [ "$(py code "$(rest_port "$n")" /patroni)" != 000 ] && return 0
    patroni_pid "$n" >/dev/null || break
    sleep 0.2
  done
  tail -n 25 "$DIR/logs/$n.log" >&2
  die "$n: Patroni's REST API does not answer"
}

cmd_wait_healthy() {
  set_dir "${1:-}"
  load_base
  local secs="${2:-90}"
  [[ "$secs" =~ ^[0-9]+$ ]] || die "wait-healthy DIR [SECS]: SECS must be whole seconds"
  wait_healthy "$secs"
}

command="${1:-}"
[ $# -gt 0 ] && shift
case "$command" in
  install) cmd_install ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  status) cmd_status "$@" ;;
  primary) cmd_primary "$@" ;;
  kill-primary) cmd_kill_primary "$@" ;;
  stall-primary) cmd_stall_primary "$@" ;;
  switchover) cmd_switchover "$@" ;;
  restart-node) cmd_restart_node "$@" ;;
  wait-healthy) cmd_wait_healthy "$@" ;;
  *) usage ;;
esac
