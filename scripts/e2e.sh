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
# stops both and drops the database (scripts/lib/live-server.sh, shared with
# scripts/schemathesis.sh). Exit status: the tests'.
#
# chatd runs in a loop that starts it again on the same port when it exits,
# so that restart.test.mjs can SIGTERM it (pid in CHATD_PID_FILE); that file
# runs last, in a node --test run of its own.
#
# The other files run E2E_CONCURRENCY (default 2) at a time, each in its own
# node process with its own Chromium: every test makes its own chats (and
# users), and most of a test's time is spent waiting for the fake model's
# timed answers, so two files overlap on 2 cores. E2E_CONCURRENCY=1 runs
# them one at a time.
#
# Logs of chatd and fake-llm, and a screenshot, the page HTML and the browser
# log of each failed test, are left in $E2E_ARTIFACTS_DIR (default
# target/e2e-artifacts, emptied at the start).
#
# CHATD_PREPARE_ONLY=1 only installs what the tests need (Chromium, the npm
# packages) and exits 0: scripts/test.sh does that while cargo builds.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/live-server.sh
source scripts/lib/live-server.sh
live_init e2e

artifacts="${E2E_ARTIFACTS_DIR:-$live_target_dir/e2e-artifacts}"
chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"

log() { live_log "$@"; }
die() { live_die "$@"; }

# ---- prerequisites ----------------------------------------------------------

command -v node >/dev/null || die "node is missing (Node 20 or newer is needed)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "Node $(node --version) is too old: the tests need Node 20 or newer"

[ -n "${CHATD_PREPARE_ONLY:-}" ] || live_build mcp-fixture

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

# workspace.test.mjs runs `shell` in the sandbox.
scripts/ensure-bubblewrap.sh

stamp=web/e2e/node_modules/.chatd-package-lock.sha256
lock_sum=$(sha256sum web/e2e/package-lock.json | cut -d' ' -f1)
if [ ! -d web/e2e/node_modules/playwright-core ] || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  log "npm ci in web/e2e"
  (cd web/e2e && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" > "$stamp"
fi
if [ -n "${CHATD_PREPARE_ONLY:-}" ]; then log "prerequisites ready (CHATD_PREPARE_ONLY)"; exit 0; fi

# ---- services (scripts/lib/live-server.sh) ----------------------------------

live_setup "$artifacts"
live_start_fake_llm scripted
live_write_config "Fake LLM (scripted)"
cat >>"$live_config" <<EOF

# The testkit MCP server; a call of its add tool waits for approval
# (approval.test.mjs). Chats use it only when they list it.
[[mcp_servers]]
slug = "calc"
transport = "stdio"
command = "$live_bin/mcp-fixture"
require_approval = ["add"]
EOF
# chatd, started again whenever it exits (restart.test.mjs SIGTERMs it; its
# pid in CHATD_PID_FILE).
live_start_chatd --restart-loop \
  --acquisition-interval 1s \
  --heartbeat-interval 1s \
  --lease-stale-after 5s \
  --sync-poll-interval 1s \
  --retry-initial-delay 200ms \
  --retry-max-delay 1s \
  --shutdown-grace 2s \
  --default-requests-per-minute 100000
live_wait_ready 60
url=$live_url
admin_token=$live_admin_token
pid_file=$live_pid_file

# ---- tests ------------------------------------------------------------------

files=()
node_args=()
for arg in "$@"; do
  case "$arg" in
    -*) node_args+=("$arg") ;;
    *) files+=("${arg#web/e2e/}") ;;
  esac
done
concurrency=${E2E_CONCURRENCY:-2}
run_tests() {
  log "node --test --test-concurrency=$concurrency $*"
  (
    cd web/e2e &&
      CHATD_URL="$url" CHATD_TOKEN="$admin_token" CHATD_PID_FILE="$pid_file" \
      E2E_ARTIFACTS_DIR="$artifacts" CHROMIUM_PATH="$chromium" \
      node --test --test-concurrency="$concurrency" --test-reporter=spec "${node_args[@]}" "$@"
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
    concurrency=1 run_tests restart.test.mjs
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
