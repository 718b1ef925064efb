#!/usr/bin/env bash
# Browser tests of the web UI (web/e2e): headless Chromium, driven by
# playwright-core under Node's test runner, against a real `chatd serve` on a
# fresh PostgreSQL database with the fake LLM in scripted mode.
#
#   scripts/e2e.sh                      # every web/e2e/*.test.mjs
#   scripts/e2e.sh queue.test.mjs ...   # some files (names under web/e2e)
#   scripts/e2e.sh --test-name-pattern=reload   # extra arguments go to node --test
#
# It builds `chatd` and `fake-llm` (debug, the workspace's target dir),
# installs Chromium from Debian's packages when /usr/bin/chromium is missing
# (needs root), runs `npm ci` in web/e2e when node_modules is missing or older
# than package-lock.json, creates a database on the server of
# CHATD_TEST_DATABASE_URL (default: the local one of scripts/ensure-postgres.sh),
# starts fake-llm and chatd, waits for /readyz, runs the tests, and always
# stops both and drops the database. Exit status: the tests'.
#
# chatd runs in a loop that starts it again on the same port when it exits,
# so that restart.test.mjs can SIGTERM it (pid in CHATD_PID_FILE); that file
# runs last, in a node --test run of its own.
#
# Logs of chatd and fake-llm, and a screenshot, the page HTML and the browser
# log of each failed test, are left in $E2E_ARTIFACTS_DIR (default
# target/e2e-artifacts, emptied at the start).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

default_db_url=postgres://postgres@127.0.0.1:5432/postgres
db_admin_url="${CHATD_TEST_DATABASE_URL:-$default_db_url}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
artifacts="${E2E_ARTIFACTS_DIR:-$target_dir/e2e-artifacts}"
chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"
admin_token="chatd-e2e-admin-token-$$-$RANDOM"
started=$(date +%s)

log() { echo "== e2e: $*"; }
die() { echo "e2e: $*" >&2; exit 2; }

# ---- prerequisites ----------------------------------------------------------

command -v node >/dev/null || die "node is missing (Node 20 or newer is needed)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "Node $(node --version) is too old: the tests need Node 20 or newer"

log "cargo build -p chatd -p chatd-testkit --bins"
cargo build -p chatd -p chatd-testkit --bins
bin="$target_dir/debug"
[ -x "$bin/chatd" ] && [ -x "$bin/fake-llm" ] && [ -x "$bin/mcp-fixture" ] || die "no chatd, fake-llm or mcp-fixture in $bin after the build"

if [ ! -x "$chromium" ]; then
  [ "$chromium" = /usr/bin/chromium ] || die "CHROMIUM_PATH=$chromium is not an executable"
  [ "$(id -u)" = 0 ] || die "Chromium is missing: install it as root with
    apt-get update && apt-get install -y --no-install-recommends chromium
(or point CHROMIUM_PATH at a Chromium or Chrome binary)"
  log "installing Chromium from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  # Refresh the package lists only when they do not know chromium, or when
  # they are stale (the install fails on a moved package).
  if ! apt-cache show chromium >/dev/null 2>&1; then apt-get update -qq; fi
  if ! apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium >/dev/null
  fi
  [ -x "$chromium" ] || die "apt-get installed chromium but $chromium is missing"
fi

stamp=web/e2e/node_modules/.chatd-package-lock.sha256
lock_sum=$(sha256sum web/e2e/package-lock.json | cut -d' ' -f1)
if [ ! -d web/e2e/node_modules/playwright-core ] || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  log "npm ci in web/e2e"
  (cd web/e2e && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" > "$stamp"
fi

if [ -z "${CHATD_TEST_DATABASE_URL:-}" ]; then
  scripts/ensure-postgres.sh
fi

# ---- services ---------------------------------------------------------------

rm -rf "$artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/chatd-e2e.XXXXXX")
db_name="chatd_e2e_$$_$RANDOM"
# The same server, another database: swap the path, keep any query string.
db_base="${db_admin_url%%\?*}"
db_query="${db_admin_url#"$db_base"}"
db_url="${db_base%/*}/$db_name$db_query"
db_created=
fake_pid=
loop_pid=
pid_file="$work/chatd.pid"

cleanup() {
  local status=$?
  set +e
  touch "$work/stop"
  if [ -n "$loop_pid" ]; then
    local pid
    pid=$(cat "$pid_file" 2>/dev/null)
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
    # The loop exits once chatd has; give the graceful shutdown 20 s.
    for _ in $(seq 1 200); do kill -0 "$loop_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$loop_pid" 2>/dev/null; then
      pid=$(cat "$pid_file" 2>/dev/null)
      [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
      kill -KILL "$loop_pid" 2>/dev/null
    fi
    wait "$loop_pid" 2>/dev/null
  fi
  if [ -n "$fake_pid" ]; then
    kill -TERM "$fake_pid" 2>/dev/null
    wait "$fake_pid" 2>/dev/null
  fi
  if [ -n "$db_created" ]; then
    psql "$db_admin_url" -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS \"$db_name\" WITH (FORCE)" >/dev/null \
      || echo "e2e: could not drop database $db_name" >&2
  fi
  rm -rf "$work"
  log "done in $(( $(date +%s) - started )) s (exit status $status)"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "database $db_name"
psql "$db_admin_url" -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$db_name\"" >/dev/null
db_created=1

"$bin/fake-llm" --listen 127.0.0.1:0 --mode scripted >"$work/fake-llm.out" 2>"$artifacts/fake-llm.log" &
fake_pid=$!
fake_line=
for _ in $(seq 1 300); do
  fake_line=$(head -n1 "$work/fake-llm.out" 2>/dev/null || true)
  [ -n "$fake_line" ] && break
  kill -0 "$fake_pid" 2>/dev/null || die "fake-llm exited: $(cat "$artifacts/fake-llm.log")"
  sleep 0.1
done
case "$fake_line" in
  "listening on http://"*) fake_url="${fake_line#listening on }" ;;
  *) die "fake-llm did not print its address (got: ${fake_line:-nothing})" ;;
esac

cat >"$work/chatd.toml" <<EOF
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
context_limit = 100000
is_default = true

# The testkit MCP server; a call of its add tool waits for approval
# (approval.test.mjs). Chats use it only when they list it.
[[mcp_servers]]
slug = "calc"
transport = "stdio"
command = "$bin/mcp-fixture"
require_approval = ["add"]
EOF

port=$(node -e '
  const s = require("net").createServer();
  s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')
url="http://127.0.0.1:$port"

# chatd, started again whenever it exits (restart.test.mjs), until cleanup
# says stop; at most 5 starts that fail within 2 s in a row.
(
  failures=0
  while [ ! -e "$work/stop" ]; do
    t0=$(date +%s)
    CHATD_BOOTSTRAP_ADMIN_TOKEN="$admin_token" CHATD_LOG="${CHATD_LOG:-info,sqlx=warn}" \
      "$bin/chatd" serve \
        --postgres-url "$db_url" \
        --listen "127.0.0.1:$port" \
        --config "$work/chatd.toml" \
        --acquisition-interval 1s \
        --heartbeat-interval 1s \
        --lease-stale-after 5s \
        --sync-poll-interval 1s \
        --retry-initial-delay 200ms \
        --retry-max-delay 1s \
        --shutdown-grace 2s \
        --default-requests-per-minute 100000 \
        </dev/null >>"$artifacts/chatd.log" 2>&1 &
    echo $! >"$pid_file"
    wait $! && code=0 || code=$?
    [ -e "$work/stop" ] && break
    echo "== e2e: chatd exited with status $code; starting it again" >>"$artifacts/chatd.log"
    if [ $(( $(date +%s) - t0 )) -lt 2 ]; then failures=$((failures + 1)); else failures=0; fi
    [ "$failures" -lt 5 ] || { echo "== e2e: chatd keeps failing to start" >>"$artifacts/chatd.log"; break; }
    sleep 0.2
  done
) &
loop_pid=$!

log "chatd at $url, fake LLM at $fake_url"
node -e '
  const [url, seconds] = process.argv.slice(1);
  const deadline = Date.now() + Number(seconds) * 1000;
  (async () => {
    for (;;) {
      try { if ((await fetch(url)).ok) return; } catch {}
      if (Date.now() > deadline) { console.error(`e2e: ${url} not ready after ${seconds} s`); process.exit(1); }
      await new Promise((r) => setTimeout(r, 100));
    }
  })();' "$url/readyz" 60 || { tail -n 40 "$artifacts/chatd.log" >&2; exit 2; }

# ---- tests ------------------------------------------------------------------

files=()
node_args=()
for arg in "$@"; do
  case "$arg" in
    -*) node_args+=("$arg") ;;
    *) files+=("${arg#web/e2e/}") ;;
  esac
done
run_tests() {
  log "node --test $*"
  (
    cd web/e2e &&
      CHATD_URL="$url" CHATD_TOKEN="$admin_token" CHATD_PID_FILE="$pid_file" \
      E2E_ARTIFACTS_DIR="$artifacts" CHROMIUM_PATH="$chromium" \
      node --test --test-concurrency=1 --test-reporter=spec "${node_args[@]}" "$@"
  )
}
set +e
if [ ${#files[@]} -gt 0 ]; then
  run_tests "${files[@]}"
  status=$?
else
  # Every file but restart.test.mjs, one at a time; then restart.test.mjs on
  # its own, since it restarts the server under every open connection.
  while IFS= read -r f; do files+=("$f"); done < <(cd web/e2e && ls ./*.test.mjs | sed 's|^\./||' | grep -vx restart.test.mjs)
  run_tests "${files[@]}"
  status=$?
  if [ -e web/e2e/restart.test.mjs ]; then
    run_tests restart.test.mjs
    restart_status=$?
    [ "$status" -ne 0 ] || status=$restart_status
  fi
fi
set -e
if [ "$status" -ne 0 ]; then
  echo "e2e: tests failed (status $status); logs and failure artifacts in $artifacts" >&2
  echo "---- last lines of chatd.log" >&2
  tail -n 30 "$artifacts/chatd.log" >&2 || true
fi
exit "$status"
