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
set -euo pipefail
cd "$(dirname "$0")/.."

export CHATD_TEST_DATABASE_URL="${CHATD_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"

scripts/ensure-postgres.sh

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== installing cargo-nextest"
  cargo install --locked cargo-nextest
fi

# Every part runs even when an earlier one failed; the exit status is
# non-zero when any did.
status=0
echo "== cargo test --doc --workspace"
cargo test --doc --workspace || status=1
echo "== cargo nextest run --workspace"
cargo nextest run --workspace --no-fail-fast "$@" || status=1
# The bounded chaos run (README "The chaos harness"): replicas on a private
# PostgreSQL cluster, seeded clients and faults, then the invariant check.
# CHATD_CHAOS_SEED and CHATD_CHAOS_DURATION change the fixed seed and length.
echo "== chatd-chaos (bounded run: ${CHATD_CHAOS_DURATION:-60s}, seed ${CHATD_CHAOS_SEED:-20261203})"
if cargo build -p chatd -p chatd-testkit --bins && cargo build -p chatd-chaos; then
  target/debug/chatd-chaos --duration "${CHATD_CHAOS_DURATION:-60s}" \
    --seed "${CHATD_CHAOS_SEED:-20261203}" || status=1
  # The HA chaos run: the same on the HA cluster of scripts/ha-cluster.sh
  # (ports from CHATD_HA_PORT_BASE, 5600 unless set), with kill -9, stalls
  # and switchovers of the primary. CHATD_CHAOS_HA_DURATION changes its length.
  echo "== chatd-chaos --ha (HA run: ${CHATD_CHAOS_HA_DURATION:-60s}, seed ${CHATD_CHAOS_SEED:-20261203})"
  target/debug/chatd-chaos --ha --duration "${CHATD_CHAOS_HA_DURATION:-60s}" \
    --seed "${CHATD_CHAOS_SEED:-20261203}" || status=1
else
  status=1
fi
echo "== scripts/test-run-sh.sh (run.sh refuses bad input; no model needed)"
scripts/test-run-sh.sh || status=1
scripts/typecheck.sh || status=1 # the web UI's JSDoc types: tsc --noEmit --allowJs --checkJs (web/tsconfig.json)
if [ -n "${CHATD_SKIP_E2E:-}" ]; then
  echo "== scripts/e2e.sh skipped (CHATD_SKIP_E2E is set)"
else
  echo "== scripts/e2e.sh (browser tests of the web UI)"
  scripts/e2e.sh || status=1
fi
# The compatible protocols with the official clients (README "Compatible
# protocols"): the `openai` Python SDK and the `ai` npm package against two
# replicas, one killed mid-response; then the AI SDK example app in Chromium.
echo "== scripts/compat-test.sh (OpenAI SDK and AI SDK against two replicas)"
scripts/compat-test.sh || status=1
if [ -n "${CHATD_SKIP_E2E:-}" ]; then
  echo "== scripts/example-e2e.sh skipped (CHATD_SKIP_E2E is set)"
else
  echo "== scripts/example-e2e.sh (the AI SDK example app in Chromium)"
  scripts/example-e2e.sh || status=1
fi
echo "== scripts/schemathesis.sh (the API against its OpenAPI document, from outside)"; scripts/schemathesis.sh || status=1
# The quick benchmarks, last and alone (issue 15): ratios against raw-SQL
# baselines measured in the same run, each with a floor.
echo "== scripts/bench-quick.sh (quick benchmarks: ratios and floors)"
scripts/bench-quick.sh || status=1
exit "$status"
