#!/usr/bin/env bash
# The compatible protocols (API.md "Compatible protocols" and "Pinned details
# of the compatible protocols") driven by the real clients, from outside,
# against two live `chatd serve` replicas on one database:
#
#   - OpenAI's official Python SDK, `openai` $OPENAI_VERSION (pinned with its
#     dependencies in tests/compat/requirements.txt; pytest $PYTEST_VERSION):
#     tests/compat/test_openai.py (/v1 models, responses, conversations,
#     streaming, function tools, background, cancel, errors, and a stream
#     resumed on the other replica after the owner was killed with SIGKILL);
#   - the AI SDK's chat transport, npm `ai` $AI_VERSION (pinned in
#     tests/compat/node/package-lock.json) under `node --test`:
#     tests/compat/node/ai-sdk.test.mjs (DefaultChatTransport and
#     readUIMessageStream against /api/v2/ai-sdk/chat, no React).
#
#   scripts/compat-test.sh                 # everything
#   scripts/compat-test.sh -k conversation # extra arguments go to pytest
#   COMPAT_NO_BUILD=1 scripts/compat-test.sh   # use the debug binaries as they are
#   COMPAT_BENCH=1 scripts/compat-test.sh      # also tests/compat/bench_ttft.py
#   COMPAT_HOLD=1 scripts/compat-test.sh       # start the services, print their env, wait
#   CHATD_PREPARE_ONLY=1 scripts/compat-test.sh  # only install the Python and npm packages
#
# It builds `chatd` and `fake-llm` (debug; skipped with COMPAT_NO_BUILD=1),
# installs the Python packages into target/compat-venv and the npm packages
# into tests/compat/node/node_modules when they are missing or their pins
# changed, creates a database on the server of CHATD_TEST_DATABASE_URL
# (default: the local one of scripts/ensure-postgres.sh), starts the fake LLM
# in scripted mode (slow answers over about 6 s instead of 10 s) and two
# replicas A and B (short leases, so that one takes over the other's chats
# within seconds), runs the Node tests, then the Python tests (the last one
# kills the replica that runs its chat), starts that replica again, runs the
# AI SDK's takeover test (which kills one again), prints a summary and
# always stops everything and drops the database
# (scripts/lib/live-server.sh).
# Logs: $COMPAT_ARTIFACTS_DIR (default target/compat-artifacts).
# Exit status: 0 only when every test passed.
set -euo pipefail
cd "$(dirname "$0")/.."

OPENAI_VERSION=3.63.0 # PyPI `openai`, the newest when written (pins: tests/compat/requirements.txt)
PYTEST_VERSION=9.2.0  # PyPI `pytest`
AI_VERSION=7.0.185    # npm `ai`, the newest when written (pins: tests/compat/node/package-lock.json)

# shellcheck source=scripts/lib/live-server.sh
source scripts/lib/live-server.sh
live_init compat

artifacts="${COMPAT_ARTIFACTS_DIR:-$live_target_dir/compat-artifacts}"
venv="$live_target_dir/compat-venv"
requirements=tests/compat/requirements.txt
node_dir=tests/compat/node

log() { live_log "$@"; }
die() { live_die "$@"; }

# ---- prerequisites ----------------------------------------------------------

command -v python3 >/dev/null || die "python3 is missing"
command -v node >/dev/null || die "node is missing (Node 20 or newer is needed)"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || die "Node $(node --version) is too old: the tests need Node 20 or newer"
grep -qx "openai==$OPENAI_VERSION" "$requirements" || die "$requirements does not pin openai==$OPENAI_VERSION"
grep -qx "pytest==$PYTEST_VERSION" "$requirements" || die "$requirements does not pin pytest==$PYTEST_VERSION"
grep -q "\"ai\": \"$AI_VERSION\"" "$node_dir/package.json" || die "$node_dir/package.json does not pin ai $AI_VERSION"

if [ -n "${CHATD_PREPARE_ONLY:-}" ]; then
  : # no build: only the packages below
elif [ -z "${COMPAT_NO_BUILD:-}" ]; then
  live_build
else
  for b in chatd fake-llm; do [ -x "$live_bin/$b" ] || die "no $b in $live_bin (COMPAT_NO_BUILD is set)"; done
fi

req_sum=$(sha256sum "$requirements" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.chatd-requirements.sha256" 2>/dev/null)" != "$req_sum" ]; then
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    [ "$(id -u)" = 0 ] || die "python3's venv module is missing: apt-get install python3-venv"
    log "installing python3-venv from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; then
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    fi
  fi
  log "installing $requirements into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  echo "$req_sum" >"$venv/.chatd-requirements.sha256"
fi

stamp="$node_dir/node_modules/.chatd-package-lock.sha256"
lock_sum=$(sha256sum "$node_dir/package-lock.json" | cut -d' ' -f1)
if [ ! -d "$node_dir/node_modules/ai" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$lock_sum" ]; then
  log "npm ci in $node_dir"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" >"$stamp"
fi
if [ -n "${CHATD_PREPARE_ONLY:-}" ]; then log "prerequisites ready (CHATD_PREPARE_ONLY)"; exit 0; fi

# ---- services (scripts/lib/live-server.sh, plus a second replica) -----------

live_setup "$artifacts"
# Replicas started here (not by live-server.sh) are ours to stop; then
# live-server.sh's cleanup (replica A, the fake LLM, the database), keeping
# the exit status.
extra_pids=()
compat_cleanup() {
  local status=$? pid
  set +e
  for pid in "${extra_pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${extra_pids[@]}"; do
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  (exit "$status")
  live_cleanup
}
trap compat_cleanup EXIT

# Slow answers (text with "slow") over 24 x 250 ms = 6 s: long enough to
# watch, queue, cancel and kill, short enough for the time budget.
live_start_fake_llm scripted:24:250
live_write_config "Fake LLM (scripted)"
# A second model config, of Anthropic kind with the provider's web search
# (the fake LLM answers `search <query>` with one on /v1/messages), for the
# tests of provider-hosted tools; the default stays `fake-model`.
cat >>"$live_config" <<EOF

[[providers]]
name = "fake-anthropic"
provider = "anthropic"
display_name = "Fake LLM (scripted, Anthropic)"
base_url = "$live_fake_url/v1"
api_key = "fake-key"

[[model_configs]]
name = "fake-search"
provider = "fake-anthropic"
model = "fake-search-model"
display_name = "Fake model with web search"
context_limit = 100000

[model_configs.options]
provider_tools = ["web_search"]
EOF

relay_secret="compat-relay-secret-$$-$RANDOM$RANDOM"
replica_flags=(
  --relay-secret "$relay_secret"
  --acquisition-interval 1s
  --heartbeat-interval 1s
  --lease-stale-after 3s
  --sync-poll-interval 1s
  --retry-initial-delay 200ms
  --retry-max-delay 1s
  --shutdown-grace 2s
  --default-requests-per-minute 100000
)

# Replica A: live-server.sh's chatd (it applies the migrations alone; its
# advertise URL is the default, http://<listen>, right on one machine).
live_start_chatd "${replica_flags[@]}"
live_wait_ready 60
a_url=$live_url
a_pid=$live_chatd_pid

# start_replica NAME PORT: `chatd serve` as replica A is started, on PORT,
# logging to chatd-NAME.log; waits for /readyz; its pid in $started_pid.
start_replica() {
  local name=$1 port=$2 url="http://127.0.0.1:$2"
  CHATD_BOOTSTRAP_ADMIN_TOKEN="$live_admin_token" CHATD_LOG="${CHATD_LOG:-info,sqlx=warn}" \
    "$live_bin/chatd" serve \
    --postgres-url "$live_db_url" \
    --listen "127.0.0.1:$port" \
    --advertise-url "$url" \
    --config "$live_config" \
    "${replica_flags[@]}" </dev/null >>"$live_artifacts/chatd-$name.log" 2>&1 &
  started_pid=$!
  extra_pids+=("$started_pid")
  for _ in $(seq 1 600); do
    curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && return 0
    kill -0 "$started_pid" 2>/dev/null || { tail -n 40 "$live_artifacts/chatd-$name.log" >&2; die "replica $name exited"; }
    sleep 0.1
  done
  tail -n 40 "$live_artifacts/chatd-$name.log" >&2
  die "replica $name not ready after 60 s"
}

# Replica B: the same command on a port of its own.
b_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
b_url="http://127.0.0.1:$b_port"
start_replica b "$b_port"
b_pid=$started_pid
log "replica A at $a_url (pid $a_pid, log chatd.log), replica B at $b_url (pid $b_pid, log chatd-b.log)"

# The routes are there (a binary from before them fails here, not in 30 tests).
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $live_admin_token" "$a_url/v1/models")
[ "$code" = 200 ] || die "GET /v1/models answers $code: does this chatd have the compatible protocols?"

# ---- tests ------------------------------------------------------------------

export CHATD_URL_A="$a_url" CHATD_URL_B="$b_url" CHATD_TOKEN="$live_admin_token"
export CHATD_PID_A="$a_pid" CHATD_PID_B="$b_pid"
export CHATD_DB_URL="$live_db_url"
if [ -n "${COMPAT_HOLD:-}" ]; then
  # Debugging aid: the services stay up for a client run by hand.
  log "holding: CHATD_URL_A=$a_url CHATD_URL_B=$b_url CHATD_TOKEN=$live_admin_token CHATD_PID_A=$a_pid CHATD_PID_B=$b_pid (Ctrl-C ends)"
  while :; do sleep 1; done
fi
set +e
log "node --test $node_dir/ai-sdk.test.mjs (ai $AI_VERSION)"
(cd "$node_dir" && node --test --test-concurrency=1 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$artifacts/node.tap" \
  ai-sdk.test.mjs)
node_status=$?
log "pytest tests/compat/test_openai.py (openai $OPENAI_VERSION)"
"$venv/bin/python" -m pytest -p no:cacheprovider -q -rfEP --junitxml="$artifacts/pytest.xml" \
  tests/compat/test_openai.py "$@"
py_status=$?
# The resume test killed the replica that ran its chat: start it again on
# its port, for the AI SDK's takeover test (which kills one again).
a_port=${a_url##*:}
if ! curl -fsS -o /dev/null "$a_url/readyz" 2>/dev/null; then
  log "starting replica A again on port $a_port (chatd-a2.log)"
  start_replica a2 "$a_port"
  export CHATD_PID_A=$started_pid
fi
if ! curl -fsS -o /dev/null "$b_url/readyz" 2>/dev/null; then
  log "starting replica B again on port $b_port (chatd-b2.log)"
  start_replica b2 "$b_port"
  export CHATD_PID_B=$started_pid
fi
log "node --test $node_dir/ai-sdk-takeover.test.mjs"
(cd "$node_dir" && node --test --test-concurrency=1 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$artifacts/node-takeover.tap" \
  ai-sdk-takeover.test.mjs)
takeover_status=$?
bench_status=0
if [ -n "${COMPAT_BENCH:-}" ]; then
  # The resume test killed one of the replicas: the other one serves.
  bench_url=$b_url
  curl -fsS -o /dev/null "$b_url/readyz" 2>/dev/null || bench_url=$a_url
  log "tests/compat/bench_ttft.py against $bench_url"
  "$venv/bin/python" tests/compat/bench_ttft.py --url "$bench_url" || bench_status=$?
fi
set -e

node_pass=$(cat "$artifacts"/node*.tap 2>/dev/null | sed -n 's/^# pass //p' | awk '{n += $1} END {print n + 0}')
node_fail=$(cat "$artifacts"/node*.tap 2>/dev/null | sed -n 's/^# fail //p' | awk '{n += $1} END {print n + 0}')
read -r py_pass py_fail < <("$venv/bin/python" - "$artifacts/pytest.xml" <<'PY' || echo "? ?"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
tests = sum(int(s.get("tests", 0)) for s in suites)
bad = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(tests - bad - skipped, bad)
PY
)
echo "== compat: AI SDK (ai $AI_VERSION): ${node_pass:-?} passed, ${node_fail:-?} failed; OpenAI SDK (openai $OPENAI_VERSION): ${py_pass:-?} passed, ${py_fail:-?} failed"
status=0
[ "$node_status" -eq 0 ] || status=1
[ "$takeover_status" -eq 0 ] || status=1
[ "$py_status" -eq 0 ] || status=1
[ "$bench_status" -eq 0 ] || status=1
if [ "$status" -ne 0 ]; then
  echo "compat: tests failed; logs in $artifacts" >&2
  echo "---- last lines of chatd.log (replica A)" >&2
  tail -n 20 "$artifacts/chatd.log" >&2 || true
  for f in "$artifacts"/chatd-*.log; do
    echo "---- last lines of $(basename "$f")" >&2
    tail -n 20 "$f" >&2 || true
  done
fi
exit "$status"
