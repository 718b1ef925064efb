#!/usr/bin/env bash
# The test command (README "Running the tests"; CI runs exactly this).
#
# Makes sure a PostgreSQL server is reachable at 127.0.0.1:5432 with trust
# auth for the `postgres` user (installing it from Debian's packages and
# starting it when it is missing), makes sure cargo-nextest is installed, then
# runs every test of the workspace and the doc tests, the checks of run.sh's
# answers to bad input (scripts/test-run-sh.sh), then the browser tests
# of the web UI (scripts/e2e.sh: headless Chromium, installed from Debian's
# packages when missing; CHATD_SKIP_E2E=1 skips them). Each test creates its
# own database on that server.
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
echo "== scripts/test-run-sh.sh (run.sh refuses bad input; no model needed)"
scripts/test-run-sh.sh || status=1
if [ -n "${CHATD_SKIP_E2E:-}" ]; then
  echo "== scripts/e2e.sh skipped (CHATD_SKIP_E2E is set)"
else
  echo "== scripts/e2e.sh (browser tests of the web UI)"
  scripts/e2e.sh || status=1
fi
exit "$status"
