#!/usr/bin/env bash
# Failover and switchover figures (issue 36, "Measure"): chatd on the HA
# PostgreSQL cluster of scripts/ha-cluster.sh while the primary is killed,
# switched over and stalled.
#
#   scripts/bench-failover.sh                        # 3 rounds of kill, switchover, stall
#   scripts/bench-failover.sh --rounds 1 --kinds kill  # arguments go to the program
#   BENCH_FAILOVER_NO_BUILD=1 scripts/bench-failover.sh  # the debug binaries as they are
#
# Builds `chatd` and `fake-llm` (debug), starts the cluster
# (CHATD_HA_PORT_BASE, default 5700 here: ports 5700-5721) in a fresh
# directory, creates the database `chatd_bench` on it, starts the fake LLM
# (`scripted:12:250`: a text with `slow` is answered over about 3 s) and two
# `chatd serve` replicas on the cluster's read-write URL (HAProxy), then runs
# tests/ha/bench_failover.py (its docstring says what is measured) and always
# stops everything: the replicas, the fake LLM, the cluster (whose logs are
# copied first), and removes the cluster's directory.
#
# The replicas run with chatd's default lease timings (a heartbeat every 9 s,
# a lease stale after 30 s, acquisition every 30 s, sync polls every 10 s):
# the figures of a production replica. BENCH_FAILOVER_CHATD_FLAGS adds flags,
# for example `--heartbeat-interval 1s --lease-stale-after 5s
# --acquisition-interval 1s` for a lease shorter than a failover (the runners
# stop once their heartbeats failed for a lease and their chats are taken
# over after the database is back).
#
# Run directory (logs of chatd, fake-llm, the cluster's commands, the figures
# as text and JSON, every recorded event): $BENCH_FAILOVER_DIR, default
# target/bench-failover/<UTC time>. Exit status: the program's (1 when
# something was lost, duplicated, answered 500 or stuck), 2 on a setup error.
set -euo pipefail
cd "$(dirname "$0")/.."

export CHATD_HA_PORT_BASE="${CHATD_HA_PORT_BASE:-5700}"
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
bin="$target_dir/debug"
run_dir="${BENCH_FAILOVER_DIR:-$target_dir/bench-failover/$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$run_dir"
run_dir=$(cd "$run_dir" && pwd)
admin_token="chatd-bench-failover-$$-$RANDOM$RANDOM"
relay_secret="bench-failover-relay-$$-$RANDOM$RANDOM"
# shellcheck disable=SC2206 # word splitting of the flags is intended
chatd_flags=(${BENCH_FAILOVER_CHATD_FLAGS:-})

log() { echo "== bench-failover: $*"; }
die() { echo "bench-failover: $*" >&2; exit 2; }

command -v python3 >/dev/null || die "python3 is missing"
command -v psql >/dev/null || die "psql is missing"

if [ -z "${BENCH_FAILOVER_NO_BUILD:-}" ]; then
  log "cargo build -p chatd -p chatd-testkit --bins"
  cargo build -p chatd -p chatd-testkit --bins
fi
for b in chatd fake-llm; do [ -x "$bin/$b" ] || die "no $b in $bin"; done
# Copies of the binaries: a build in the shared target directory during the
# run must not change what a replica started later runs.
bin_copy=$(mktemp -d "${TMPDIR:-/tmp}/chatd-bench-failover-bin.XXXXXX")
cp "$bin/chatd" "$bin/fake-llm" "$bin_copy/"
bin=$bin_copy

# A copy of scripts/ha-cluster.sh drives the cluster: bash reads a script as
# it runs, so an edit of the original during a run cannot break this one.
ha="$run_dir/ha-cluster.sh"
cp scripts/ha-cluster.sh "$ha"

# The cluster's directory is outside the repository: PostgreSQL runs as the
# `postgres` user when this runs as root and must be able to reach it.
cluster_dir=$(mktemp -d "${TMPDIR:-/tmp}/chatd-bench-failover.XXXXXX")
pids=()
fake_pid=
cluster_started=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local status=$? pid
  set +e
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [ -n "$fake_pid" ]; then
    kill -TERM "$fake_pid" 2>/dev/null
    wait "$fake_pid" 2>/dev/null
  fi
  if [ -n "$cluster_started" ]; then
    "$ha" stop "$cluster_dir" >>"$run_dir/ha-commands.log" 2>&1 \
      || echo "bench-failover: scripts/ha-cluster.sh stop failed (see $run_dir/ha-commands.log)" >&2
  fi
  mkdir -p "$run_dir/cluster-logs"
  (cd "$cluster_dir" && find . -name '*.log' -size -50M -exec cp --parents {} "$run_dir/cluster-logs" \;) 2>/dev/null
  rm -rf "$cluster_dir" "$bin_copy"
  log "logs in $run_dir (exit status $status)"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

log "scripts/ha-cluster.sh start $cluster_dir (CHATD_HA_PORT_BASE=$CHATD_HA_PORT_BASE)"
cluster_started=1
"$ha" start "$cluster_dir" >"$run_dir/ha-start.log" 2>&1 \
  || { tail -n 40 "$run_dir/ha-start.log" >&2; die "the HA cluster did not start"; }
ha_url=$(sed -n 's/^CHATD_HA_URL=//p' "$run_dir/ha-start.log" | tail -n1)
[ -n "$ha_url" ] || die "scripts/ha-cluster.sh start printed no CHATD_HA_URL"
psql "$ha_url" -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE chatd_bench" >/dev/null
db_url="${ha_url%/*}/chatd_bench"
log "database $db_url"

"$bin/fake-llm" --listen 127.0.0.1:0 --mode scripted:12:250 >"$run_dir/fake-llm.out" 2>"$run_dir/fake-llm.log" &
fake_pid=$!
line=
for _ in $(seq 1 300); do
  line=$(head -n1 "$run_dir/fake-llm.out" 2>/dev/null || true)
  [ -n "$line" ] && break
  kill -0 "$fake_pid" 2>/dev/null || die "fake-llm exited: $(cat "$run_dir/fake-llm.log")"
  sleep 0.1
done
case "$line" in
  "listening on http://"*) fake_url="${line#listening on }" ;;
  *) die "fake-llm did not print its address (got: ${line:-nothing})" ;;
esac
cat >"$run_dir/chatd.toml" <<EOF
[[providers]]
name = "fake"
provider = "openai-compat"
display_name = "Fake LLM (scripted)"
base_url = "$fake_url/v1"

[[model_configs]]
name = "fake-model"
provider = "fake"
model = "fake-model"
display_name = "Fake model"
context_limit = 1000000
is_default = true
EOF

# start_replica NAME: `chatd serve` on a free port, logging to
# chatd-NAME.log; waits for /readyz; its URL in $started_url.
urls=()
start_replica() {
  local name=$1 port url
  port=$(free_port)
  url="http://127.0.0.1:$port"
  CHATD_BOOTSTRAP_ADMIN_TOKEN="$admin_token" CHATD_LOG="${CHATD_LOG:-info,sqlx=warn}" \
    "$bin/chatd" serve \
    --postgres-url "$db_url" \
    --listen "127.0.0.1:$port" \
    --advertise-url "$url" \
    --config "$run_dir/chatd.toml" \
    --relay-secret "$relay_secret" \
    --retry-initial-delay 200ms \
    --retry-max-delay 1s \
    --max-generation-retries 100 \
    --shutdown-grace 2s \
    --default-requests-per-minute 1000000 \
    --default-max-running-chats 64 \
    --max-queued-messages 1000 \
    "${chatd_flags[@]}" </dev/null >>"$run_dir/chatd-$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 1 600); do
    curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && { urls+=("$url"); return 0; }
    kill -0 "$pid" 2>/dev/null || { tail -n 40 "$run_dir/chatd-$name.log" >&2; die "replica $name exited"; }
    sleep 0.1
  done
  tail -n 40 "$run_dir/chatd-$name.log" >&2
  die "replica $name not ready after 60 s"
}
start_replica a
start_replica b
log "replicas ${urls[*]} (pids ${pids[*]}), fake LLM $fake_url"

set +e
python3 tests/ha/bench_failover.py \
  --urls "$(IFS=,; echo "${urls[*]}")" \
  --token "$admin_token" \
  --cluster-dir "$cluster_dir" \
  --db-url "$db_url" \
  --ha-script "$ha" \
  --run-dir "$run_dir" \
  --pids "$(IFS=,; echo "${pids[*]}")" \
  "$@"
status=$?
set -e
exit "$status"
