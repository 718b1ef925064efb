#!/usr/bin/env bash
# Browser tests of the AI SDK example (examples/ai-sdk-chat): headless
# Chromium, driven by playwright-core under Node's test runner, against the
# example app built with Vite and served by `vite preview`, whose proxy
# forwards /api to a real `chatd serve` (fresh PostgreSQL database, the fake
# LLM in scripted mode).
#
#   scripts/example-e2e.sh                              # every e2e/*.test.mjs
#   scripts/example-e2e.sh --test-name-pattern=reload   # arguments go to node --test
#
# It builds `chatd` and `fake-llm` (debug, the workspace's target dir;
# EXAMPLE_E2E_SKIP_BUILD=1 uses the binaries as they are), installs Chromium
# from Debian's packages when /usr/bin/chromium is missing (needs root), runs
# `npm ci` in examples/ai-sdk-chat when node_modules is missing or was
# installed from another package-lock.json (the only network access: the npm
# registry), builds the app (`vite build`), starts fake-llm and chatd
# (scripts/lib/live-server.sh), serves the app with `vite preview` on a free
# port, runs the tests, and always stops all three and drops the database.
# Exit status: the tests' (2 when the setup fails).
#
# Logs of chatd, fake-llm and vite preview, and a screenshot, the page HTML
# and the browser log of each failed test, are left in
# $E2E_ARTIFACTS_DIR (default target/example-e2e-artifacts, emptied at the
# start).
#
# CHATD_PREPARE_ONLY=1 only installs what the tests need (Chromium, the npm
# packages) and exits 0: scripts/test.sh does that while cargo builds.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/live-server.sh
source scripts/lib/live-server.sh
live_init example_e2e

app_dir=examples/ai-sdk-chat
artifacts="${E2E_ARTIFACTS_DIR:-$live_target_dir/example-e2e-artifacts}"
chromium="${CHROMIUM_PATH:-/usr/bin/chromium}"

log() { live_log "$@"; }
die() { live_die "$@"; }

# ---- prerequisites ----------------------------------------------------------

command -v node >/dev/null || die "node is missing (Node 20.19 or newer is needed)"
node -e '
  const [a, b] = process.versions.node.split(".").map(Number);
  process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1);' \
  || die "Node $(node --version) is too old: Vite 8 needs Node 20.19 or newer"

if [ -n "${CHATD_PREPARE_ONLY:-}" ]; then
  : # no build: only the packages below
elif [ "${EXAMPLE_E2E_SKIP_BUILD:-}" = 1 ]; then
  for b in chatd fake-llm; do
    [ -x "$live_bin/$b" ] || die "EXAMPLE_E2E_SKIP_BUILD=1 but there is no $b in $live_bin"
  done
else
  live_build
fi

if [ ! -x "$chromium" ]; then
  [ "$chromium" = /usr/bin/chromium ] || die "CHROMIUM_PATH=$chromium is not an executable"
  [ "$(id -u)" = 0 ] || die "Chromium is missing: install it as root with
    apt-get update && apt-get install -y --no-install-recommends chromium
(or point CHROMIUM_PATH at a Chromium or Chrome binary)"
  log "installing Chromium from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-cache show chromium >/dev/null 2>&1; then apt-get update -qq; fi
  if ! apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium >/dev/null
  fi
  [ -x "$chromium" ] || die "apt-get installed chromium but $chromium is missing"
fi

stamp=$app_dir/node_modules/.chatd-package-lock.sha256
lock_sum=$(sha256sum "$app_dir/package-lock.json" | cut -d' ' -f1)
if [ ! -d "$app_dir/node_modules/vite" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  log "npm ci in $app_dir"
  # `ai` declares node >= 22; it runs in the browser here, Node 20.19 builds it.
  (cd "$app_dir" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false)
  echo "$lock_sum" > "$stamp"
fi
if [ -n "${CHATD_PREPARE_ONLY:-}" ]; then log "prerequisites ready (CHATD_PREPARE_ONLY)"; exit 0; fi

log "vite build"
(cd "$app_dir" && ./node_modules/.bin/vite build --logLevel warn)

# ---- services (scripts/lib/live-server.sh) ----------------------------------

live_setup "$artifacts"
preview_pid=
# Stops vite preview, then live-server.sh's cleanup (chatd, fake-llm, the
# database), keeping the exit status.
example_cleanup() {
  local status=$?
  set +e
  if [ -n "$preview_pid" ]; then
    kill -TERM "$preview_pid" 2>/dev/null
    wait "$preview_pid" 2>/dev/null
  fi
  (exit "$status")
  live_cleanup
}
trap example_cleanup EXIT

live_start_fake_llm scripted
live_write_config "Fake LLM (scripted)"
live_start_chatd \
  --shutdown-grace 2s \
  --default-requests-per-minute 100000
live_wait_ready 60

preview_port=$(node -e '
  const s = require("net").createServer();
  s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });')
app_url="http://127.0.0.1:$preview_port"
(
  cd "$app_dir"
  CHATD_URL="$live_url" exec ./node_modules/.bin/vite preview \
    --host 127.0.0.1 --port "$preview_port" --strictPort
) </dev/null >"$artifacts/vite-preview.log" 2>&1 &
preview_pid=$!
for _ in $(seq 1 300); do
  curl -fsS -o /dev/null "$app_url/" 2>/dev/null && break
  kill -0 "$preview_pid" 2>/dev/null || { cat "$artifacts/vite-preview.log" >&2; die "vite preview exited"; }
  sleep 0.1
done
curl -fsS -o /dev/null "$app_url/" || { cat "$artifacts/vite-preview.log" >&2; die "vite preview did not answer at $app_url"; }
log "app at $app_url (vite preview, /api proxied to $live_url)"

# ---- tests ------------------------------------------------------------------

set +e
(
  cd "$app_dir" &&
    APP_URL="$app_url" CHATD_TOKEN="$live_admin_token" \
    E2E_ARTIFACTS_DIR="$artifacts" CHROMIUM_PATH="$chromium" \
    node --test --test-concurrency=1 --test-reporter=spec "$@" e2e/*.test.mjs
)
status=$?
set -e
if [ "$status" -ne 0 ]; then
  echo "example-e2e: tests failed (status $status); logs and failure artifacts in $artifacts" >&2
  echo "---- last lines of chatd.log" >&2
  tail -n 30 "$artifacts/chatd.log" >&2 || true
fi
exit "$status"
