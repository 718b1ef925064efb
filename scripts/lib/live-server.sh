# shellcheck shell=bash
# A live `chatd serve` for the scripts that test it from outside
# (scripts/e2e.sh, scripts/schemathesis.sh): the debug binaries, a fresh
# database on the server of CHATD_TEST_DATABASE_URL, the fake LLM, chatd with
# a bootstrap admin token, and a cleanup that always stops both and drops the
# database. Sourced, not run; the caller has `set -euo pipefail` and runs from
# the repository root.
#
#   source scripts/lib/live-server.sh
#   live_init e2e                       # names, paths, the admin token
#   live_build mcp-fixture              # chatd, fake-llm (and more) in $live_bin
#   live_setup "$artifacts"             # artifacts dir, work dir, database, trap
#   live_start_fake_llm scripted        # $live_fake_url
#   live_write_config "Fake LLM (scripted)"; cat >>"$live_config" <<EOF ... EOF
#   live_start_chatd [--restart-loop] --shutdown-grace 2s ...
#   live_wait_ready 60                  # $live_url/readyz answers 200
#
# Variables it sets (read them, do not change them): live_name,
# live_target_dir, live_bin, live_admin_token, live_artifacts, live_work,
# live_db_admin_url, live_db_name, live_db_url, live_fake_url, live_config,
# live_port, live_url, live_pid_file (the running chatd's pid). Logs go to
# $live_artifacts/chatd.log and fake-llm.log. Every function that fails
# prints why and exits with status 2; the EXIT trap of live_setup cleans up.

# Messages in the caller's voice: "== NAME: ..." on stdout, "NAME: ..." on
# stderr for a fatal one (exit status 2).
live_log() { echo "== $live_name: $*"; }
live_die() { echo "$live_name: $*" >&2; exit 2; }

# live_init NAME: the script's name (in messages, the database's and the
# token's names); the workspace's target dir (CARGO_TARGET_DIR, made
# absolute), the debug binaries' dir and a fresh bootstrap admin token.
live_init() {
  live_name=$1
  live_started=$(date +%s)
  live_target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
  case "$live_target_dir" in /*) ;; *) live_target_dir="$PWD/$live_target_dir" ;; esac
  live_bin="$live_target_dir/debug"
  live_db_admin_url="${CHATD_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
  live_admin_token="chatd-$live_name-admin-token-$$-$RANDOM"
  live_artifacts=
  live_work=
  live_db_name=
  live_db_created=
  live_fake_pid=
  live_chatd_pid=
  live_loop_pid=
  live_pid_file=
}

# live_build [BIN...]: builds the workspace's binaries (debug: chatd, the
# testkit's, chatd-chaos) and checks that chatd, fake-llm and every BIN are in
# $live_bin. `--workspace --bins --examples` is the feature set of
# `cargo nextest run --workspace` (examples, like tests, turn on the
# dev-dependencies' features, e.g. tokio's test-util): after the tests of
# scripts/test.sh nothing rebuilds. `-p chatd -p chatd-testkit --bins` would
# resolve other features and rebuild tokio, sqlx, axum, ... and every crate
# of the workspace, minutes on 2 cores.
live_build() {
  live_log "cargo build --workspace --bins --examples"
  cargo build --workspace --bins --examples
  local b
  for b in chatd fake-llm "$@"; do
    [ -x "$live_bin/$b" ] || live_die "no $b in $live_bin after the build"
  done
}

# live_setup ARTIFACTS: starts the local PostgreSQL when
# CHATD_TEST_DATABASE_URL is unset (scripts/ensure-postgres.sh), empties
# ARTIFACTS, makes a work dir, installs the cleanup traps (EXIT, INT, TERM)
# and creates the database ($live_db_url: the same server, another database,
# any query string kept).
live_setup() {
  if [ -z "${CHATD_TEST_DATABASE_URL:-}" ]; then
    scripts/ensure-postgres.sh
  fi
  live_artifacts=$1
  rm -rf "$live_artifacts"
  mkdir -p "$live_artifacts"
  live_work=$(mktemp -d "${TMPDIR:-/tmp}/chatd-$live_name.XXXXXX")
  live_config="$live_work/chatd.toml"
  live_pid_file="$live_work/chatd.pid"
  live_db_name="chatd_${live_name}_$$_$RANDOM"
  local db_base="${live_db_admin_url%%\?*}"
  local db_query="${live_db_admin_url#"$db_base"}"
  live_db_url="${db_base%/*}/$live_db_name$db_query"
  trap live_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  live_log "database $live_db_name"
  psql "$live_db_admin_url" -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$live_db_name\"" >/dev/null
  live_db_created=1
}

# The EXIT trap: stops chatd (TERM, 20 s for its graceful shutdown, then
# KILL; with --restart-loop the loop too), then fake-llm, drops the database
# and the work dir, and says how long the script took. Keeps the exit status.
live_cleanup() {
  local status=$?
  set +e
  [ -n "$live_work" ] && touch "$live_work/stop"
  local pid
  if [ -n "$live_loop_pid" ]; then
    pid=$(cat "$live_pid_file" 2>/dev/null)
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
    # The loop exits once chatd has.
    for _ in $(seq 1 200); do kill -0 "$live_loop_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$live_loop_pid" 2>/dev/null; then
      pid=$(cat "$live_pid_file" 2>/dev/null)
      [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
      kill -KILL "$live_loop_pid" 2>/dev/null
    fi
    wait "$live_loop_pid" 2>/dev/null
  elif [ -n "$live_chatd_pid" ]; then
    kill -TERM "$live_chatd_pid" 2>/dev/null
    for _ in $(seq 1 200); do kill -0 "$live_chatd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$live_chatd_pid" 2>/dev/null
    wait "$live_chatd_pid" 2>/dev/null
  fi
  if [ -n "$live_fake_pid" ]; then
    kill -TERM "$live_fake_pid" 2>/dev/null
    wait "$live_fake_pid" 2>/dev/null
  fi
  if [ -n "$live_db_created" ]; then
    psql "$live_db_admin_url" -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS \"$live_db_name\" WITH (FORCE)" >/dev/null \
      || echo "$live_name: could not drop database $live_db_name" >&2
  fi
  [ -n "$live_work" ] && rm -rf "$live_work"
  live_log "done in $(( $(date +%s) - live_started )) s (exit status $status)"
}

# live_start_fake_llm MODE: starts fake-llm on a free port in MODE (`echo`,
# `scripted`, ...) and waits (30 s at most) for the address it prints
# ($live_fake_url, `http://127.0.0.1:PORT`).
live_start_fake_llm() {
  "$live_bin/fake-llm" --listen 127.0.0.1:0 --mode "$1" >"$live_work/fake-llm.out" 2>"$live_artifacts/fake-llm.log" &
  live_fake_pid=$!
  local line=
  for _ in $(seq 1 300); do
    line=$(head -n1 "$live_work/fake-llm.out" 2>/dev/null || true)
    [ -n "$line" ] && break
    kill -0 "$live_fake_pid" 2>/dev/null || live_die "fake-llm exited: $(cat "$live_artifacts/fake-llm.log")"
    sleep 0.1
  done
  case "$line" in
    "listening on http://"*) live_fake_url="${line#listening on }" ;;
    *) live_die "fake-llm did not print its address (got: ${line:-nothing})" ;;
  esac
}

# live_write_config DISPLAY_NAME: writes $live_config (chatd's --config)
# with the provider `fake` (openai-compat at the fake LLM, shown as
# DISPLAY_NAME) and its default model config `fake-model` (100,000-token
# context). The caller may append more entries.
live_write_config() {
  cat >"$live_config" <<EOF
[[providers]]
name = "fake"
provider = "openai-compat"
display_name = "$1"
base_url = "$live_fake_url/v1"

[[model_configs]]
name = "fake-model"
provider = "fake"
model = "fake-model"
display_name = "Fake model"
context_limit = 100000
is_default = true
EOF
}

# live_start_chatd [--restart-loop] [ARG...]: picks a free port ($live_port,
# $live_url) and starts `chatd serve` on $live_db_url with $live_config, the
# bootstrap admin token, CHATD_LOG (default `info,sqlx=warn`) and ARGs,
# logging to $live_artifacts/chatd.log; the pid is in $live_pid_file. With
# --restart-loop chatd is started again on the same port whenever it exits
# (a test may SIGTERM it), until cleanup; at most 5 starts that fail within
# 2 s in a row.
live_start_chatd() {
  local loop=
  if [ "${1:-}" = --restart-loop ]; then loop=1; shift; fi
  if command -v python3 >/dev/null; then
    live_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  else
    live_port=$(node -e '
      const s = require("net").createServer();
      s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')
  fi
  live_url="http://127.0.0.1:$live_port"
  local cmd=("$live_bin/chatd" serve
    --postgres-url "$live_db_url"
    --listen "127.0.0.1:$live_port"
    --config "$live_config"
    "$@")
  if [ -z "$loop" ]; then
    CHATD_BOOTSTRAP_ADMIN_TOKEN="$live_admin_token" CHATD_LOG="${CHATD_LOG:-info,sqlx=warn}" \
      "${cmd[@]}" </dev/null >>"$live_artifacts/chatd.log" 2>&1 &
    live_chatd_pid=$!
    echo "$live_chatd_pid" >"$live_pid_file"
  else
    (
      failures=0
      while [ ! -e "$live_work/stop" ]; do
        t0=$(date +%s)
        CHATD_BOOTSTRAP_ADMIN_TOKEN="$live_admin_token" CHATD_LOG="${CHATD_LOG:-info,sqlx=warn}" \
          "${cmd[@]}" </dev/null >>"$live_artifacts/chatd.log" 2>&1 &
        echo $! >"$live_pid_file"
        wait $! && code=0 || code=$?
        [ -e "$live_work/stop" ] && break
        echo "== $live_name: chatd exited with status $code; starting it again" >>"$live_artifacts/chatd.log"
        if [ $(( $(date +%s) - t0 )) -lt 2 ]; then failures=$((failures + 1)); else failures=0; fi
        [ "$failures" -lt 5 ] || { echo "== $live_name: chatd keeps failing to start" >>"$live_artifacts/chatd.log"; break; }
        sleep 0.2
      done
    ) &
    live_loop_pid=$!
  fi
  live_log "chatd at $live_url, fake LLM at $live_fake_url"
}

# live_wait_ready SECONDS: waits until $live_url/readyz answers 2xx; dies
# with the last 40 lines of chatd.log when chatd (or its loop) exits first or
# SECONDS pass.
live_wait_ready() {
  local seconds=$1 pid=${live_loop_pid:-$live_chatd_pid}
  for _ in $(seq 1 $(( seconds * 10 ))); do
    curl -fsS -o /dev/null "$live_url/readyz" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { tail -n 40 "$live_artifacts/chatd.log" >&2; live_die "chatd exited"; }
    sleep 0.1
  done
  tail -n 40 "$live_artifacts/chatd.log" >&2
  live_die "$live_url/readyz not ready after $seconds s"
}
