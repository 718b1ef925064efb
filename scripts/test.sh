#!/usr/bin/env bash
# The test command (README "Running the tests"; CI runs exactly this).
#
# Makes sure a PostgreSQL server is reachable at 127.0.0.1:5432 with trust
# auth for the `postgres` user (installing it from Debian's packages and
# starting it when it is missing), makes sure cargo-nextest is installed, then
# runs every test of the workspace and the doc tests, a bounded chaos run
# (crates/chatd-chaos, about 2 minutes) and its HA run (`--ha`: the same
# clients and invariants on the Patroni cluster of scripts/ha-cluster.sh,
# with kill -9, stalls and switchovers of the primary; about 2 minutes,
# installing patroni, etcd-server and haproxy when missing), the checks of run.sh's
# answers to bad input (scripts/test-run-sh.sh), then the browser tests
# of the web UI (scripts/e2e.sh: headless Chromium, installed from Debian's
# packages when missing; CHATD_SKIP_E2E=1 skips them), the compatible
# protocols with the official clients (scripts/compat-test.sh) and the AI
# SDK example app in Chromium (scripts/example-e2e.sh), the API against its
# OpenAPI document (scripts/schemathesis.sh), and last, alone, the
# quick benchmarks with their ratio floors (scripts/bench-quick.sh). Each
# test creates its own database on that server.
#
# Time (docs/testing.md "How scripts/test.sh spends its time"): one cargo
# build with the tests' feature set, reused by every later part; the
# packages, npm modules and venvs of the later parts installed in the
# background meanwhile; each part's time printed as "== done: ...".
set -euo pipefail
cd "$(dirname "$0")/.."

export CHATD_TEST_DATABASE_URL="${CHATD_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

scripts/ensure-postgres.sh

# The workspace sandbox (README "Workspaces"): bubblewrap, from Debian's
# packages. Without it the tests that run `shell` say so and skip.
scripts/ensure-bubblewrap.sh

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

# Every part runs even when an earlier one failed; the exit status is
# non-zero when any did. Each part prints how long it took ("== done: ...").
status=0
step_t0=$SECONDS
step_name=
step() { # step NAME: ends the timing of the previous part, starts NAME's
  [ -z "$step_name" ] || echo "== done: $step_name in $((SECONDS - step_t0)) s"
  step_name=$1
  step_t0=$SECONDS
  [ -z "$step_name" ] || echo "== $step_name"
}
logs=target/test-logs
mkdir -p "$logs"

# What the later parts need and no build does (Debian's packages: Chromium,
# Patroni, etcd, HAProxy; npm packages; Python venvs), installed in the
# background while cargo builds: network waits, not CPU. Each script checks
# again before it runs and installs what is still missing, so a failure here
# only costs that script's time later.
prepare_log=$logs/prepare.log
(
  t0=$SECONDS
  scripts/ha-cluster.sh install || echo "prepare: scripts/ha-cluster.sh install failed"
  if [ -z "${CHATD_SKIP_E2E:-}" ]; then
    CHATD_PREPARE_ONLY=1 scripts/e2e.sh || echo "prepare: scripts/e2e.sh failed"
    CHATD_PREPARE_ONLY=1 scripts/example-e2e.sh || echo "prepare: scripts/example-e2e.sh failed"
  fi
  CHATD_PREPARE_ONLY=1 scripts/compat-test.sh || echo "prepare: scripts/compat-test.sh failed"
  CHATD_PREPARE_ONLY=1 scripts/schemathesis.sh || echo "prepare: scripts/schemathesis.sh failed"
  echo "prepare: done in $((SECONDS - t0)) s"
) </dev/null >"$prepare_log" 2>&1 &
prepare_pid=$!

# One build of every binary and example, with the tests' feature set
# (`--examples` turns on the dev-dependencies' features as the test build
# does; scripts/lib/live-server.sh builds the same): the chaos runs, the
# live-server scripts and the benchmarks reuse it and nothing rebuilds.
step "cargo build --workspace --bins --examples"
cargo build --workspace --bins --examples || status=1
step "cargo test --doc --workspace"
cargo test --doc --workspace || status=1
step "cargo nextest run --workspace"
cargo nextest run --workspace --no-fail-fast "$@" || status=1
step "prerequisites (installed in the background during the build)"
wait "$prepare_pid" || true
cat "$prepare_log"
# The bounded chaos run (README "The chaos harness"): replicas on a private
# PostgreSQL cluster, seeded clients and faults, then the invariant check.
# CHATD_CHAOS_SEED and CHATD_CHAOS_DURATION change the fixed seed and length.
step "chatd-chaos (bounded run: ${CHATD_CHAOS_DURATION:-60s}, seed ${CHATD_CHAOS_SEED:-20261203})"
# The build above, with the same features: nothing to do.
if cargo build --workspace --bins --examples; then
  target/debug/chatd-chaos --duration "${CHATD_CHAOS_DURATION:-60s}" \
    --seed "${CHATD_CHAOS_SEED:-20261203}" || status=1
  # The HA chaos run: the same on the HA cluster of scripts/ha-cluster.sh
  # (ports from CHATD_HA_PORT_BASE, 5600 unless set), with kill -9, stalls
  # and switchovers of the primary. CHATD_CHAOS_HA_DURATION changes its length.
  step "chatd-chaos --ha (HA run: ${CHATD_CHAOS_HA_DURATION:-60s}, seed ${CHATD_CHAOS_SEED:-20261203})"
  target/debug/chatd-chaos --ha --duration "${CHATD_CHAOS_HA_DURATION:-60s}" \
    --seed "${CHATD_CHAOS_SEED:-20261203}" || status=1
else
  status=1
fi
step "scripts/test-run-sh.sh (run.sh refuses bad input; no model needed)"
scripts/test-run-sh.sh || status=1
step "scripts/typecheck.sh"
scripts/typecheck.sh || status=1 # the web UI's JSDoc types: tsc --noEmit --allowJs --checkJs (web/tsconfig.json)
if [ -n "${CHATD_SKIP_E2E:-}" ]; then
  step ""
  echo "== scripts/e2e.sh skipped (CHATD_SKIP_E2E is set)"
else
  step "scripts/e2e.sh (browser tests of the web UI)"
  scripts/e2e.sh || status=1
fi
# The compatible protocols with the official clients (README "Compatible
# protocols"): the `openai` Python SDK and the `ai` npm package against two
# replicas, one killed mid-response; then the AI SDK example app in Chromium.
step "scripts/compat-test.sh (OpenAI SDK and AI SDK against two replicas)"
scripts/compat-test.sh || status=1
if [ -n "${CHATD_SKIP_E2E:-}" ]; then
  step ""
  echo "== scripts/example-e2e.sh skipped (CHATD_SKIP_E2E is set)"
else
  step "scripts/example-e2e.sh (the AI SDK example app in Chromium)"
  scripts/example-e2e.sh || status=1
fi
step "scripts/schemathesis.sh (the API against its OpenAPI document, from outside)"
scripts/schemathesis.sh || status=1
# The quick benchmarks, last and alone (issue 15): ratios against raw-SQL
# baselines measured in the same run, each with a floor.
step "scripts/bench-quick.sh (quick benchmarks: ratios and floors)"
scripts/bench-quick.sh || status=1
step ""
exit "$status"
